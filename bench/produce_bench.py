"""Produce throughput and latency: directly to the broker vs through the gateway.

Runs the embedded Tansu broker and `kpg run` as a separate process, then, per scenario,
alternates runs of one confluent-kafka producer (fixed record count and size) directly to the
broker and through the gateway, in ABBA order. Prints each pair's gateway/direct ratio and
their median, the gateway's own CPU time per record (from /proc, steadier than any rate on a
shared machine), and writes everything as JSON under bench/results/. Machines are noisy:
compare the ratios of one run, not absolute numbers across runs.

Runs are sized to last a few seconds each: throughput is a steady-state figure, and runs of
half a second measure the producer's start and final drain more than the path in between
(they gave ratios 0.2 lower on this project's 2-core machine). A run under 2 s is flagged.

Scenarios:
  passthrough  topic without record validation: the gateway forwards the client's bytes
  header       record.validation.policy=trace-id (required header), uncompressed batches
  header-zstd  the same on zstd batches (the gateway decompresses to read headers)
  json-schema  record.validation.policy=json-schema:bench on ~1 KiB JSON values

    .venv/bin/python bench/produce_bench.py                       # every scenario
    .venv/bin/python bench/produce_bench.py --scenario passthrough --records 500000
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gateway.embedded import EmbeddedBroker, free_port  # noqa: E402
from protocol.records import record_scanner  # noqa: E402

SCHEMA = {
    "type": "object",
    "required": ["id", "customer", "items", "total"],
    "properties": {
        "id": {"type": "string"},
        "customer": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string"}, "tier": {"enum": ["a", "b"]}},
        },
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["sku", "qty"],
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
            },
        },
        "total": {"type": "number", "minimum": 0},
        "note": {"type": "string"},
    },
}


@dataclass(frozen=True)
class Scenario:
    name: str
    policy: str | None
    compression: str
    value: Callable[[int], bytes]
    headers: list[tuple[str, bytes]] | None
    default_records: int


def _binary(size: int) -> Callable[[int], bytes]:
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    return lambda _i: payload


def _json_1k(_size: int) -> Callable[[int], bytes]:
    doc = {
        "id": "order-0",
        "customer": {"name": "Ada Lovelace", "tier": "a"},
        "items": [{"sku": f"sku-{n:04d}", "qty": n + 1} for n in range(12)],
        "total": 1234.5,
        "note": "",
    }
    base = len(json.dumps(doc, separators=(",", ":")))
    doc["note"] = "x" * max(0, 1024 - base)
    value = json.dumps(doc, separators=(",", ":")).encode()
    return lambda _i: value


SCENARIOS = {
    s.name: s
    for s in (
        Scenario(
            name="passthrough",
            policy=None,
            compression="none",
            value=_binary(512),
            headers=None,
            default_records=1_500_000,
        ),
        Scenario(
            name="header",
            policy="trace-id",
            compression="none",
            value=_binary(512),
            headers=[("trace-id", b"0af7651916cd43dd8448eb211c80319c")],
            default_records=1_500_000,
        ),
        Scenario(
            name="header-zstd",
            policy="trace-id",
            compression="zstd",
            value=_binary(512),
            headers=[("trace-id", b"0af7651916cd43dd8448eb211c80319c")],
            default_records=2_000_000,
        ),
        Scenario(
            name="json-schema",
            policy="json-schema:bench",
            compression="none",
            value=_json_1k(1024),
            headers=None,
            default_records=800_000,
        ),
    )
}


def start_gateway(upstream: str, workdir: Path) -> tuple[subprocess.Popen[str], str]:
    schemas = workdir / "schemas"
    schemas.mkdir(exist_ok=True)
    (schemas / "bench.json").write_text(json.dumps(SCHEMA))
    config = {
        "listen": f"127.0.0.1:{free_port()}",
        "node_port_base": 0,
        "upstream": {"bootstrap_servers": [upstream], "topic_config_source_unreliable": True},
        "state": {"path": str(workdir / "state.db")},
        "policies": {"record.validation.json.schema.dir": str(schemas)},
    }
    path = workdir / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    kpg = Path(sys.executable).with_name("kpg")
    process = subprocess.Popen(
        [str(kpg), "run", "--config", str(path), "--log-level", "WARNING"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        match = re.search(r"bootstrap.servers=(\S+)", line)
        if match:
            return process, match.group(1)
    raise SystemExit("gateway did not start")


def create_topic(admin_bootstrap: str, policy: str | None) -> str:
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    configs = {"record.validation.policy": policy} if policy else {}
    admin = AdminClient({"bootstrap.servers": admin_bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1, config=configs)]).values():
        future.result(30)
    return topic


def delete_topic(admin_bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": admin_bootstrap})
    for future in admin.delete_topics([topic]).values():
        future.result(30)


def run_once(
    bootstrap: str, topic: str, scenario: Scenario, records: int, rate: float | None = None
) -> dict[str, float]:
    """Produce ``records`` records as fast as possible, or at ``rate`` records/s."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "acks": "all",
            "compression.type": scenario.compression,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    latencies: list[float] = []
    errors: list[Any] = []

    def delivered(err: object, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            latencies.append(msg.latency())

    def send(i: int) -> None:
        while True:
            try:
                producer.produce(
                    topic, scenario.value(i), headers=scenario.headers, on_delivery=delivered
                )
                return
            except BufferError:
                producer.poll(0.01)

    send(0)  # warm up connections
    producer.flush(30)
    latencies.clear()
    size = len(scenario.value(0))
    started = time.perf_counter()
    for i in range(records):
        if rate is not None:
            ahead = started + i / rate - time.perf_counter()
            if ahead > 0:
                producer.poll(ahead)
        send(i)
        producer.poll(0)
    producer.flush(300)
    elapsed = time.perf_counter() - started
    if errors or len(latencies) != records:
        raise SystemExit(
            f"{len(errors)} delivery errors ({errors[:1]}), {len(latencies)}/{records} delivered"
        )
    latencies.sort()
    return {
        "records_per_s": records / elapsed,
        "mb_per_s": records * size / elapsed / 1e6,
        "latency_p50_ms": latencies[len(latencies) // 2] * 1000,
        "latency_p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
        "elapsed_s": elapsed,
    }


def warm_up(broker: str, gateway: str) -> None:
    """One unmeasured run each way: the first run after start-up was up to 1.6 times slower
    than the rest (the broker's and the gateway's first allocations), which skewed pair 1."""
    scenario = SCENARIOS["header"]
    for bootstrap in (broker, gateway):
        topic = create_topic(gateway, scenario.policy)
        run_once(bootstrap, topic, scenario, 300_000)
        delete_topic(gateway, topic)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SHORT_RUN_S = 2.0


def bench_scenario(
    scenario: Scenario, broker: str, gateway: str, gateway_pid: int, args: argparse.Namespace
) -> dict[str, Any]:
    records = args.records or scenario.default_records
    runs: dict[str, list[dict[str, float]]] = {"direct": [], "gateway": []}
    for pair in range(args.pairs):
        order = [("direct", broker), ("gateway", gateway)]
        if pair % 2:
            order.reverse()  # ABBA: neither mode always runs on the fuller broker
        for mode, bootstrap in order:
            # Created through the gateway, so the gateway knows the topic's policy; the
            # direct run writes the same kind of topic with no one checking.
            topic = create_topic(gateway, scenario.policy)
            cpu_before = cpu_seconds(gateway_pid)
            result = run_once(bootstrap, topic, scenario, records)
            if mode == "gateway":
                result["gateway_cpu_us_per_record"] = (
                    (cpu_seconds(gateway_pid) - cpu_before) / records * 1e6
                )
            paced = run_once(
                bootstrap, topic, scenario, args.latency_records, rate=args.latency_rate
            )
            # Through the gateway, which forgets the topic's policy; the broker keeps its
            # records in memory otherwise (gigabytes over a whole run).
            delete_topic(gateway, topic)
            result["paced_latency_p50_ms"] = paced["latency_p50_ms"]
            result["paced_latency_p99_ms"] = paced["latency_p99_ms"]
            runs[mode].append(result)
            cpu = (
                f" | gateway CPU {result['gateway_cpu_us_per_record']:5.2f} us/rec"
                if mode == "gateway"
                else ""
            )
            short = " (short run: raise --records)" if result["elapsed_s"] < SHORT_RUN_S else ""
            print(
                f"{scenario.name:12s} pair {pair + 1} {mode:8s} "
                f"{result['records_per_s']:10.0f} rec/s {result['mb_per_s']:7.1f} MB/s "
                f"in {result['elapsed_s']:5.2f} s{short} | at {args.latency_rate:.0f} rec/s: "
                f"p50 {paced['latency_p50_ms']:6.2f} ms p99 {paced['latency_p99_ms']:6.2f} ms{cpu}",
                flush=True,
            )
    medians = {
        mode: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for mode, rs in runs.items()
    }
    pair_ratios = [
        g["records_per_s"] / d["records_per_s"]
        for d, g in zip(runs["direct"], runs["gateway"], strict=True)
    ]
    return {
        "records": records,
        "compression": scenario.compression,
        "policy": scenario.policy,
        "value_bytes": len(scenario.value(0)),
        "runs": runs,
        "medians": medians,
        "pair_ratios": pair_ratios,
        "ratio_records_per_s": statistics.median(pair_ratios),
        "gateway_cpu_us_per_record": medians["gateway"]["gateway_cpu_us_per_record"],
        "added_latency_p50_ms": medians["gateway"]["paced_latency_p50_ms"]
        - medians["direct"]["paced_latency_p50_ms"],
        "added_latency_p99_ms": medians["gateway"]["paced_latency_p99_ms"]
        - medians["direct"]["paced_latency_p99_ms"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--scenario",
        action="append",
        choices=sorted(SCENARIOS),
        help="repeatable; default: every scenario",
    )
    parser.add_argument("--records", type=int, help="records per run (default per scenario)")
    parser.add_argument("--pairs", type=int, default=4, help="direct/gateway pairs (default 4)")
    parser.add_argument(
        "--latency-rate",
        type=float,
        default=5_000,
        help="records/s of the fixed-rate run that measures latency",
    )
    parser.add_argument("--latency-records", type=int, default=25_000)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    names = args.scenario or list(SCENARIOS)

    results: dict[str, Any] = {}
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as workdir:
        process, gateway = start_gateway(str(broker.address), Path(workdir))
        try:
            warm_up(str(broker.address), gateway)
            for name in names:
                results[name] = bench_scenario(
                    SCENARIOS[name], str(broker.address), gateway, process.pid, args
                )
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(30)

    print(f"\nrecord scanner: {record_scanner()}")
    for name, result in results.items():
        m = result["medians"]
        spread = ", ".join(f"{r:.2f}" for r in result["pair_ratios"])
        print(
            f"{name:12s} median direct {m['direct']['records_per_s']:9.0f} rec/s, gateway "
            f"{m['gateway']['records_per_s']:9.0f} rec/s: ratio "
            f"{result['ratio_records_per_s']:.3f} (median of pairs {spread}); gateway CPU "
            f"{result['gateway_cpu_us_per_record']:.2f} us/record; added latency at "
            f"{args.latency_rate:.0f} rec/s p50 {result['added_latency_p50_ms']:+.2f} ms, "
            f"p99 {result['added_latency_p99_ms']:+.2f} ms"
        )
    summary = {
        "benchmark": "produce",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "pairs": args.pairs,
        "latency_rate": args.latency_rate,
        "broker": "tansu (embedded, memory)",
        # protocol/_recscan.c, or the full Python reader alone (KPG_RECORD_SCANNER=python)
        "record_scanner": record_scanner(),
        "scenarios": results,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"produce-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    path.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
