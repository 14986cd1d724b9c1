"""Records/s of `RecordValidator.validate_partition`, in process, per produce_bench scenario.

Builds one partition's records field the way a librdkafka producer at full speed sends it
(one batch of up to ~1 MB, batch.size's default; the scenario's values, headers and codec),
then times validate_partition on it with the built-in policy the gateway runs. No broker, no
gateway: this isolates the per-record cost that bench/produce_bench.py measures end to end.

    .venv/bin/python bench/validation_profile.py                      # every scenario
    .venv/bin/python bench/validation_profile.py --scenario header --profile
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.produce_bench import SCENARIOS, SCHEMA, Scenario  # noqa: E402
from gateway.record_validation import RecordValidator  # noqa: E402
from policies.records import JSON_SCHEMA_DIR, BuiltinRecordValidationPolicy  # noqa: E402
from tests.batches import batch_with, record  # noqa: E402

_BATCH_BYTES = 1_000_000  # librdkafka's batch.size default
_BATCH_RECORDS = 10_000  # librdkafka's batch.num.messages default


def partition_records(scenario: Scenario) -> tuple[bytes, int]:
    """One batch as a producer at full speed sends it; (bytes, record count)."""
    headers = tuple((k.encode(), v) for k, v in (scenario.headers or ()))
    value = scenario.value(0)
    per_record = len(value) + sum(len(k) + len(v or b"") for k, v in headers) + 20
    count = min(_BATCH_RECORDS, _BATCH_BYTES // per_record)
    records = tuple(record(i, None, scenario.value(i), headers) for i in range(count))
    return batch_with(scenario.compression, records, idempotent=False), count


def make_validator(schema_dir: Path) -> RecordValidator:
    (schema_dir / "bench.json").write_text(json.dumps(SCHEMA))
    policy = BuiltinRecordValidationPolicy()
    policy.configure({JSON_SCHEMA_DIR: str(schema_dir)})
    return RecordValidator(policy, dry_run=False)


def measure(validator: RecordValidator, scenario: Scenario, seconds: float, profile: bool) -> float:
    assert scenario.policy is not None
    data, count = partition_records(scenario)
    outcome = validator.validate_partition("bench", 0, scenario.policy, data)
    if outcome.error is not None or outcome.records != count:
        raise SystemExit(f"{scenario.name}: unexpected outcome {outcome}")
    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    rounds = 0
    started = time.perf_counter()
    while True:
        validator.validate_partition("bench", 0, scenario.policy, data)
        rounds += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            break
    if profiler is not None:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
    return rounds * count / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join((__doc__ or "").split("\n\n")[0].split()))
    names = [name for name, s in SCENARIOS.items() if s.policy is not None]
    parser.add_argument("--scenario", action="append", choices=names, help="repeatable")
    parser.add_argument("--seconds", type=float, default=3.0, help="per scenario")
    parser.add_argument("--repeat", type=int, default=3, help="runs per scenario; best shown")
    parser.add_argument("--profile", action="store_true", help="cProfile one more run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        validator = make_validator(Path(directory))
        for name in args.scenario or names:
            scenario = SCENARIOS[name]
            rates = [
                measure(validator, scenario, args.seconds, profile=False)
                for _ in range(args.repeat)
            ]
            print(
                f"{name:12s} {max(rates):10.0f} records/s "
                f"({max(rates) and 1e6 / max(rates):.2f} us/record; "
                f"runs: {', '.join(f'{r:.0f}' for r in rates)})",
                flush=True,
            )
            if args.profile:
                measure(validator, scenario, args.seconds, profile=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
