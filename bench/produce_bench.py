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
  hostile      a victim producer at a fixed rate (acks=1, one small record per request) to
               a validated topic, alone and while another client sends record bombs
               through the gateway without pause (one at a time, each answer awaited):
               its latency p50/p99 in both phases, in ABBA order (issue 11 item 10)

    .venv/bin/python bench/produce_bench.py                       # every scenario
    .venv/bin/python bench/produce_bench.py --scenario passthrough --records 500000
    .venv/bin/python bench/produce_bench.py --scenario hostile
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import zstandard  # noqa: E402
from crc32c import crc32c  # noqa: E402
from kio.schema.produce.v9.request import (  # noqa: E402
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kio.schema.types import TopicName  # noqa: E402
from kio.static.primitive import i16, i32, i32Timedelta  # noqa: E402

from bench.harness import (  # noqa: E402
    GatewayProcess,
    cpu_seconds,
    create_topic,
    delete_topic,
    start_gateway,
    write_result,
)
from gateway.embedded import EmbeddedBroker  # noqa: E402
from protocol.codec import encode_request  # noqa: E402
from protocol.records import CompressionType, record_scanner  # noqa: E402
from tests.batches import HEADER_SIZE, record, reframe, uncompressed_batch  # noqa: E402

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


def start_bench_gateway(upstream: str, workdir: Path, *, audit: bool = False) -> GatewayProcess:
    """The gateway with the JSON Schema scenario's schema in its schema directory (and an
    audit spool, as deployed, with ``audit``)."""
    schemas = workdir / "schemas"
    schemas.mkdir(parents=True, exist_ok=True)
    (schemas / "bench.json").write_text(json.dumps(SCHEMA))
    extra: dict[str, Any] = {"policies": {"record.validation.json.schema.dir": str(schemas)}}
    if audit:
        extra["audit"] = {"spool_dir": str(workdir / "spool")}
    return start_gateway(upstream, workdir, extra=extra)


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


# The hostile-neighbour scenario (issue 11 item 10).

HOSTILE = "hostile"
_VICTIM_VALUE = b"v" * 100
_VICTIM_HEADERS = [("trace-id", b"0af7651916cd43dd8448eb211c80319c")]


def _bomb_batch(one: bytes, count: int) -> bytes:
    """A zstd batch of ``count`` copies of the record ``one``, compressed about a megabyte at
    a time (a bomb is never whole in memory here)."""
    compressor = zstandard.ZstdCompressor().compressobj()
    per_chunk = max(1, (1 << 20) // len(one))
    chunk = one * per_chunk
    compressed = [compressor.compress(chunk) for _ in range(count // per_chunk)]
    compressed.append(compressor.compress(one * (count % per_chunk)))
    batch = bytearray(
        reframe(
            uncompressed_batch((record(0, None, None),)),
            records_section=b"".join([*compressed, compressor.flush()]),
            attributes=int(CompressionType.ZSTD),
            record_count=count,
        )
    )
    struct.pack_into(">i", batch, 23, count - 1)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def bombs() -> dict[str, bytes]:
    """The records of each bomb: a few KB of zstd each."""
    tiny = uncompressed_batch((record(0, None, None),))[HEADER_SIZE:]  # 7 bytes
    kib = uncompressed_batch((record(0, None, bytes(1024)),))[HEADER_SIZE:]
    return {
        # the issue's: refused from the batch header (record.validation.max.records)
        "6M records declared": _bomb_batch(tiny, 6_000_000),
        # 1 GiB of records: refused once 100 MiB is inflated (.max.inflated.bytes)
        "1 GiB inflated": _bomb_batch(kib, 1_000_000),
        # within every limit: a million records that all fail, the most work one request
        # may cost (seconds)
        "1M failing records": _bomb_batch(tiny, 1_000_000),
    }


def _produce_frame(topic: str, records: bytes) -> bytes:
    request = ProduceRequest(
        transactional_id=None,
        acks=i16(1),
        timeout=i32Timedelta.parse(timedelta(seconds=30)),
        topic_data=(
            TopicProduceData(
                name=TopicName(topic),
                partition_data=(PartitionProduceData(index=i32(0), records=records),),
            ),
        ),
    )
    return encode_request(0, 9, 1, "bomber", request)


class Bomber(threading.Thread):
    """One client connection sending bomb Produce requests without pause, one at a time:
    the next as soon as the gateway answers the last."""

    def __init__(self, bootstrap: str, topic: str, kinds: dict[str, bytes]) -> None:
        super().__init__(name="bomber", daemon=True)
        host, _, port = bootstrap.rpartition(":")
        self._address = (host, int(port))
        self._frames = [(kind, _produce_frame(topic, data)) for kind, data in kinds.items()]
        self._stopping = threading.Event()
        self.answered: dict[str, list[float]] = {kind: [] for kind in kinds}
        self.error_codes: set[int] = set()

    def run(self) -> None:
        with socket.create_connection(self._address, timeout=300) as sock:
            while not self._stopping.is_set():
                for kind, frame in self._frames:
                    started = time.perf_counter()
                    sock.sendall(frame)
                    answer = _read_frame(sock)
                    self.answered[kind].append(time.perf_counter() - started)
                    self.error_codes.add(_first_error_code(answer))
                    if self._stopping.is_set():
                        return

    def stop(self) -> None:
        self._stopping.set()
        self.join(300)


def _read_frame(sock: socket.socket) -> bytes:
    def exact(n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the gateway closed the bomber's connection")
            data += chunk
        return bytes(data)

    return exact(struct.unpack(">i", exact(4))[0])


def _first_error_code(frame: bytes) -> int:
    """The first partition's error_code in a Produce v9 answer (compact arrays), read by
    hand: decoding a whole answer (a million record errors, before the budget) would hold
    this process's GIL for seconds, beside the victim."""

    def uvarint(position: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            byte = frame[position]
            value |= (byte & 0x7F) << shift
            position, shift = position + 1, shift + 7
            if byte < 0x80:
                return value, position

    position = 4 + 1  # the correlation id, the header's tagged fields
    _, position = uvarint(position)  # topics + 1
    name_length, position = uvarint(position)  # the topic name's length + 1
    _, position = uvarint(position + name_length - 1)  # its partitions + 1
    return int(struct.unpack_from(">h", frame, position + 4)[0])  # after the index


def victim_latencies(
    bootstrap: str, topic: str, rate: float, seconds: float
) -> tuple[list[float], list[Any]]:
    """One small record per request (linger.ms=0) at ``rate`` per second, acks=1: each
    record's latency from produce() to its delivery report, in seconds; and the errors of
    those not delivered (a gateway that stalls long enough times them out)."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1, "enable.idempotence": False}
    )
    latencies: list[float] = []
    errors: list[Any] = []

    def delivered(err: object, msg: Any) -> None:
        (errors if err is not None else latencies).append(err or msg.latency())

    producer.produce(topic, _VICTIM_VALUE, headers=_VICTIM_HEADERS)  # connect first
    producer.flush(30)
    count = int(rate * seconds)
    started = time.perf_counter()
    for i in range(count):
        # poll() returns early once it has served a delivery report: wait out the whole gap
        while (ahead := started + i / rate - time.perf_counter()) > 0:
            producer.poll(ahead)
        producer.produce(topic, _VICTIM_VALUE, headers=_VICTIM_HEADERS, on_delivery=delivered)
        producer.poll(0)
    producer.flush(600)
    if len(errors) + len(latencies) != count:
        raise SystemExit(f"victim: {len(errors)} errors, {len(latencies)}/{count} delivered")
    return latencies, errors


def _percentiles(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies) or [float("nan")]
    return {
        "p50_ms": ordered[len(ordered) // 2] * 1000,
        "p99_ms": ordered[int(len(ordered) * 0.99)] * 1000,
        "max_ms": ordered[-1] * 1000,
        "records": len(ordered),
    }


def bench_hostile(gateway: str, gateway_pid: int, args: argparse.Namespace) -> dict[str, Any]:
    """The victim alone and bombed, in ABBA order over --hostile-rounds rounds."""
    victim_topic = create_topic(gateway, "trace-id")
    bomb_topic = create_topic(gateway, "trace-id")
    kinds = bombs()
    phases: dict[str, list[float]] = {"alone": [], "bombed": []}
    runs: list[dict[str, Any]] = []
    bombs_answered: dict[str, list[float]] = {kind: [] for kind in kinds}
    codes: set[int] = set()
    for round_ in range(args.hostile_rounds):
        order = ["alone", "bombed"] if round_ % 2 == 0 else ["bombed", "alone"]
        for phase in order:
            bomber = Bomber(gateway, bomb_topic, kinds) if phase == "bombed" else None
            if bomber is not None:
                bomber.start()
                time.sleep(1)  # the first bombs are in
            cpu_before, started = cpu_seconds(gateway_pid), time.perf_counter()
            latencies, errors = victim_latencies(
                gateway, victim_topic, args.victim_rate, args.hostile_seconds
            )
            cpu = (cpu_seconds(gateway_pid) - cpu_before) / (time.perf_counter() - started)
            if bomber is not None:
                bomber.stop()
                for kind, times in bomber.answered.items():
                    bombs_answered[kind] += times
                codes |= bomber.error_codes
            phases[phase] += latencies
            run = {
                "phase": phase,
                **_percentiles(latencies),
                "not_delivered": len(errors),
                "gateway_cpu_share": cpu,
            }
            if bomber is not None:
                run["bombs_answered"] = {k: len(v) for k, v in bomber.answered.items()}
            runs.append(run)
            answered = (
                ", bombs answered: "
                + ", ".join(f"{k} {len(v)}" for k, v in bomber.answered.items())
                if bomber is not None
                else ""
            )
            print(
                f"{HOSTILE:12s} round {round_ + 1} {phase:7s} victim at {args.victim_rate:.0f} "
                f"rec/s: p50 {run['p50_ms']:6.2f} ms p99 {run['p99_ms']:6.2f} ms max "
                f"{run['max_ms']:7.2f} ms, {len(errors)} not delivered | gateway CPU {cpu:4.0%}"
                f"{answered}",
                flush=True,
            )
    delete_topic(gateway, victim_topic)
    delete_topic(gateway, bomb_topic)
    alone, bombed = _percentiles(phases["alone"]), _percentiles(phases["bombed"])
    return {
        "victim_rate": args.victim_rate,
        "seconds_per_phase": args.hostile_seconds,
        "rounds": args.hostile_rounds,
        "bomb_bytes": {kind: len(data) for kind, data in kinds.items()},
        "bomb_answer_s": {
            kind: _percentiles(times) if times else None for kind, times in bombs_answered.items()
        },
        "bomb_error_codes": sorted(codes),
        "runs": runs,
        "alone": alone,
        "bombed": bombed,
        "added_p50_ms": bombed["p50_ms"] - alone["p50_ms"],
        "added_p99_ms": bombed["p99_ms"] - alone["p99_ms"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join((__doc__ or "").split("\n\n")[0].split()))
    parser.add_argument(
        "--scenario",
        action="append",
        choices=[*sorted(SCENARIOS), HOSTILE],
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
    parser.add_argument(
        "--victim-rate", type=float, default=200, help="hostile: the victim's records/s"
    )
    parser.add_argument(
        "--hostile-seconds", type=float, default=15, help="hostile: seconds per phase"
    )
    parser.add_argument(
        "--hostile-rounds", type=int, default=2, help="hostile: alone/bombed rounds (ABBA)"
    )
    parser.add_argument(
        "--audit",
        action="store_true",
        help="the gateway writes audit events to a spool in the work directory, as deployed "
        "(default: no audit sink, as the earlier results in bench/results/ ran)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    names = args.scenario or [*SCENARIOS, HOSTILE]

    results: dict[str, Any] = {}
    load_at_start = os.getloadavg()
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as workdir:
        process = start_bench_gateway(str(broker.address), Path(workdir), audit=args.audit)
        gateway = process.bootstrap
        try:
            warm_up(str(broker.address), gateway)
            for name in names:
                if name == HOSTILE:
                    results[name] = bench_hostile(gateway, process.pid, args)
                    continue
                results[name] = bench_scenario(
                    SCENARIOS[name], str(broker.address), gateway, process.pid, args
                )
        finally:
            process.stop()

    print(f"\nrecord scanner: {record_scanner()}")
    for name, result in results.items():
        if name == HOSTILE:
            alone, bombed = result["alone"], result["bombed"]
            print(
                f"{name:12s} victim at {result['victim_rate']:.0f} rec/s: alone p50 "
                f"{alone['p50_ms']:.2f} ms p99 {alone['p99_ms']:.2f} ms; bombed p50 "
                f"{bombed['p50_ms']:.2f} ms p99 {bombed['p99_ms']:.2f} ms; added p99 "
                f"{result['added_p99_ms']:+.2f} ms"
            )
            continue
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
        "load_average": {"start": load_at_start, "end": os.getloadavg()},
        "pairs": args.pairs,
        "audit": args.audit,
        "latency_rate": args.latency_rate,
        "broker": "tansu (embedded, memory)",
        # protocol/_recscan.c, or the full Python reader alone (KPG_RECORD_SCANNER=python)
        "record_scanner": record_scanner(),
        "scenarios": results,
    }
    path = write_result(args.out, "produce", summary)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
