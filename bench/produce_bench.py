"""Produce throughput and latency: directly to the broker vs through the gateway.

Runs the embedded Tansu broker and `kpg run` as a separate process, then alternates runs of
one confluent-kafka producer (fixed record count and size) direct and through the gateway.
Prints medians per mode and the gateway/direct ratios, and writes them as JSON under
bench/results/. Machines are noisy: compare the ratio from one run, not absolute numbers.

    .venv/bin/python bench/produce_bench.py --records 500000 --size 512 --pairs 3
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gateway.embedded import EmbeddedBroker, free_port  # noqa: E402


def start_gateway(upstream: str) -> tuple[subprocess.Popen[str], str]:
    kpg = Path(sys.executable).with_name("kpg")
    process = subprocess.Popen(
        [
            str(kpg),
            "run",
            "--upstream",
            upstream,
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--node-port-base",
            "0",
            "--log-level",
            "WARNING",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        match = re.search(r"bootstrap.servers=(\S+)", line)
        if match:
            return process, match.group(1)
    raise SystemExit("gateway did not start")


def run_once(
    bootstrap: str, records: int, size: int, compression: str, rate: float | None = None
) -> dict[str, float]:
    """Produce ``records`` records as fast as possible, or at ``rate`` records/s."""
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "acks": "all",
            "compression.type": compression,
            "queue.buffering.max.messages": 1000000,
        }
    )
    latencies: list[float] = []
    errors = 0

    def delivered(err: object, msg: object) -> None:
        nonlocal errors
        if err is not None:
            errors += 1
        else:
            latencies.append(msg.latency())  # type: ignore[attr-defined]

    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    producer.produce(topic, payload, on_delivery=delivered)  # warm up connections
    producer.flush(30)
    latencies.clear()
    started = time.perf_counter()
    for i in range(records):
        if rate is not None:
            ahead = started + i / rate - time.perf_counter()
            if ahead > 0:
                producer.poll(ahead)
        while True:
            try:
                producer.produce(topic, payload, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(120)
    elapsed = time.perf_counter() - started
    if errors or len(latencies) != records:
        raise SystemExit(f"{errors} delivery errors, {len(latencies)}/{records} delivered")
    latencies.sort()
    return {
        "records_per_s": records / elapsed,
        "mb_per_s": records * size / elapsed / 1e6,
        "latency_p50_ms": latencies[len(latencies) // 2] * 1000,
        "latency_p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
        "elapsed_s": elapsed,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--size", type=int, default=512, help="record value size in bytes")
    parser.add_argument("--pairs", type=int, default=3, help="direct/gateway pairs (>= 3)")
    parser.add_argument("--compression", default="none")
    parser.add_argument(
        "--latency-rate",
        type=float,
        default=20_000,
        help="records/s of the fixed-rate run that measures latency",
    )
    parser.add_argument("--latency-records", type=int, default=100_000)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()

    runs: dict[str, list[dict[str, float]]] = {"direct": [], "gateway": []}
    with EmbeddedBroker() as broker:
        process, gateway = start_gateway(str(broker.address))
        try:
            for pair in range(args.pairs):
                for mode, bootstrap in (("direct", str(broker.address)), ("gateway", gateway)):
                    result = run_once(bootstrap, args.records, args.size, args.compression)
                    paced = run_once(
                        bootstrap,
                        args.latency_records,
                        args.size,
                        args.compression,
                        rate=args.latency_rate,
                    )
                    result["paced_latency_p50_ms"] = paced["latency_p50_ms"]
                    result["paced_latency_p99_ms"] = paced["latency_p99_ms"]
                    runs[mode].append(result)
                    print(
                        f"pair {pair + 1} {mode:8s} {result['records_per_s']:10.0f} rec/s "
                        f"{result['mb_per_s']:7.1f} MB/s | at {args.latency_rate:.0f} rec/s: "
                        f"p50 {paced['latency_p50_ms']:6.2f} ms p99 {paced['latency_p99_ms']:6.2f}"
                        " ms",
                        flush=True,
                    )
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(30)

    medians = {
        mode: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for mode, rs in runs.items()
    }
    summary = {
        "benchmark": "produce",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "records": args.records,
        "size": args.size,
        "pairs": args.pairs,
        "compression": args.compression,
        "broker": "tansu (embedded, memory)",
        "runs": runs,
        "medians": medians,
        "ratio_records_per_s": medians["gateway"]["records_per_s"]
        / medians["direct"]["records_per_s"],
        "latency_rate": args.latency_rate,
        "added_latency_p50_ms": medians["gateway"]["paced_latency_p50_ms"]
        - medians["direct"]["paced_latency_p50_ms"],
        "added_latency_p99_ms": medians["gateway"]["paced_latency_p99_ms"]
        - medians["direct"]["paced_latency_p99_ms"],
    }
    for mode in ("direct", "gateway"):
        m = medians[mode]
        print(
            f"median {mode:8s}: {m['records_per_s']:10.0f} rec/s {m['mb_per_s']:7.1f} MB/s | "
            f"at {args.latency_rate:.0f} rec/s: p50 {m['paced_latency_p50_ms']:.2f} ms "
            f"p99 {m['paced_latency_p99_ms']:.2f} ms"
        )
    print(
        f"gateway/direct throughput ratio: {summary['ratio_records_per_s']:.3f}; "
        f"added latency at {args.latency_rate:.0f} rec/s: p50 "
        f"{summary['added_latency_p50_ms']:+.2f} ms, p99 {summary['added_latency_p99_ms']:+.2f} ms"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"produce-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    path.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
