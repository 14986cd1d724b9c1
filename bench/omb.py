"""An OpenMessaging-Benchmark-style run, as Kroxylicious publishes its: directly to the broker and
through the gateway, in one run.

Several producer and consumer processes (confluent-kafka) over 10 topics of 10 partitions,
1 KiB records (random bytes; the first 8 are the send time, CLOCK_MONOTONIC, which every
process on the machine shares).

1. Saturation: producers as fast as they can (consumers reading beside them), directly to
   the embedded Tansu broker, through `kpg run --workers 1` and through `kpg run --workers 2`
   (when this checkout's `kpg run` has --workers; else the one gateway without the flag).
2. Fixed rate, half the direct saturation rate, for --duration seconds after --warmup
   seconds, directly and through one gateway worker, for each scenario:
     passthrough  topics without record validation
     header       record.validation.policy=trace-id (a required header), every record has it
   Measured: end-to-end latency (send time in the record to its arrival at a consumer)
   p50/p99/p99.9, publish latency (produce() to the delivery report, acks=all) p50/p99, the
   rate reached, and the gateway's CPU time (all its processes, from /proc) per MB/s of
   produced records: millicores per MB/s. The gateway carries each byte twice (produce in,
   fetch out), as a proxy does.
   Beside it, to tell where latency comes from on a shared machine: how long the gateway's
   and the broker's threads waited, runnable, for a core (schedstat run_delay, seconds per
   second), and from the gateway's /metrics its Produce and Fetch requests per second and
   their mean round trip to the broker (sent upstream to answered).

Consumers fetch with fetch.wait.max.ms=10 at the fixed rate (--fetch-wait): Tansu answers a
fetch late rather than when records arrive, so with librdkafka's 500 the end-to-end p50 at
1,000 records/s directly to Tansu was 156 ms, against 8.6 ms with 10 (publish p50 5 to 6 ms
in both). Saturation runs keep 500, so that polling does not take CPU from the producers.

CPU placement (--pin-gateway CPUS, optionally --pin-others CPUS; CPU lists such as 1 or
0,2-3): the gateway, supervisor and workers, runs on the CPUs of --pin-gateway, started with
--workers 1 (the two-worker saturation run only when --pin-gateway names two CPUs or more);
the benchmark itself, the broker and every producer and consumer run on --pin-others,
default every CPU this process may use that the gateway is not given. The direct runs use the
same placement, so that the gateway having a core of its own, as on pods of its own, is the
only difference between a pair. The benchmark pins itself before it starts the broker and the
clients, which inherit its CPUs; the gateway is started from a thread moved to its CPUs for the
moment. At the end of each run's window every thread of the broker, the gateway, the client
processes and the benchmark is read back (sched_getaffinity): "affinity" in each run's result
counts threads by the CPUs they were found allowed, and "placement_verified" says whether every
one was where the placement put it. Without --pin-gateway nothing is pinned (the CPUs found
are still recorded).

Each run writes fresh topics (deleted after it). Everything goes to
bench/results/omb-<time>.json with the machine's load; a table goes to stdout. The ratios of
one run are the figures to quote: the machine is shared.

    .venv/bin/python bench/omb.py                      # the whole run (about 10 minutes)
    .venv/bin/python bench/omb.py --duration 5 --warmup 3 --saturation-duration 5
    .venv/bin/python bench/omb.py --rate 200 --no-saturation --pin-gateway 1
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import struct
import sys
import tempfile
import time
from array import array
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import (  # noqa: E402
    GatewayProcess,
    Placement,
    broker_node_ids,
    create_topics,
    delete_topics,
    kpg_has_workers,
    machine,
    pin_this_process,
    placement,
    process_tree,
    prometheus_samples,
    start_gateway,
    thread_affinities,
    tree_cpu_seconds,
    tree_run_queue_seconds,
    write_result,
)
from gateway.embedded import EmbeddedBroker, free_port  # noqa: E402

TOPICS = 10
PARTITIONS = 10
RECORD_BYTES = 1024
TRACE_HEADER = [("trace-id", b"0af7651916cd43dd8448eb211c80319c")]
SCENARIOS: dict[str, tuple[str | None, list[tuple[str, bytes]] | None]] = {
    "passthrough": (None, None),
    "header": ("trace-id", TRACE_HEADER),
}
# The OMB Kafka driver's producer settings (acks=all, 1 MB batches), but linger.ms 5 for its
# 1: on this project's 2-core machine, one producer at 20,000 records/s over the 100
# partitions waited 175 ms at p50 directly to Tansu with linger.ms=1 (many small requests),
# 5 ms with linger.ms=5; produce_bench.py uses 5 too.
PRODUCER_CONFIG = {"acks": "all", "linger.ms": 5, "batch.size": 1_048_576}
_STAMP = struct.Struct(">q")


@dataclass(frozen=True)
class Plan:
    """What every worker process of one run needs (pickled to spawned processes)."""

    bootstrap: str
    topics: list[str]
    headers: list[tuple[str, bytes]] | None
    rate: float | None
    """Records/s over all producers; None: as fast as they can."""
    start_ns: int
    measure_ns: int
    end_ns: int
    outdir: str
    fetch_wait_ms: int

    def in_window(self, sent_ns: int) -> bool:
        return self.measure_ns <= sent_ns < self.end_ns


def _producer_main(plan: Plan, index: int, producers: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": plan.bootstrap, **PRODUCER_CONFIG})
    producer.list_topics(timeout=60)
    payload = bytearray(os.urandom(RECORD_BYTES))
    publish_us = array("q")
    stats: dict[str, Any] = {
        "acked": 0,
        "acked_in_window": 0,
        "errors": 0,
        "sent": 0,
        "max_lag_ms": 0.0,
    }

    def delivered(err: object, msg: Any) -> None:
        if err is not None:
            stats["errors"] += 1
            return
        stats["acked"] += 1
        if plan.in_window(_STAMP.unpack_from(msg.value())[0]):
            stats["acked_in_window"] += 1
            publish_us.append(int(msg.latency() * 1e6))

    interval_ns = int(producers * 1e9 / plan.rate) if plan.rate else 0
    # producers start staggered over one interval, so their sends interleave
    due = plan.start_ns + index * interval_ns // producers
    while time.monotonic_ns() < plan.start_ns:
        producer.poll(0.01)
    sent = 0
    while (now := time.monotonic_ns()) < plan.end_ns:
        if interval_ns:
            if due > now:
                producer.poll((due - now) / 1e9)
                continue
            if now >= plan.measure_ns:
                stats["max_lag_ms"] = max(stats["max_lag_ms"], (now - due) / 1e6)
            due += interval_ns
        _STAMP.pack_into(payload, 0, time.monotonic_ns())
        try:
            producer.produce(
                plan.topics[sent % len(plan.topics)],
                bytes(payload),
                headers=plan.headers,
                on_delivery=delivered,
            )
        except BufferError:
            producer.poll(0.005)
            continue
        sent += 1
        producer.poll(0)
    stats["sent"] = sent
    stats["unflushed"] = producer.flush(120)
    stats["cpu_s"] = _own_cpu_seconds()
    stats["affinity"] = thread_affinities([os.getpid()])  # librdkafka's threads still up
    Path(plan.outdir, f"producer-{index}.bin").write_bytes(publish_us.tobytes())
    Path(plan.outdir, f"producer-{index}.json").write_text(json.dumps(stats))


def _consumer_main(plan: Plan, index: int, consumers: int) -> None:
    """Reads its share of the partitions from the start, assigned by hand: Tansu held a
    group's first JoinGroup for longer than a run (a consumer group is not what is measured)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": plan.bootstrap,
            "group.id": f"omb-{index}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": plan.fetch_wait_ms,
        }
    )
    partitions = [
        TopicPartition(topic, partition, OFFSET_BEGINNING)
        for topic in plan.topics
        for partition in range(PARTITIONS)
    ]
    consumer.assign(partitions[index::consumers])
    e2e_us = array("q")
    stats: dict[str, Any] = {"consumed": 0, "consumed_in_window": 0, "errors": 0}
    last_record = time.monotonic_ns()
    give_up = plan.end_ns + 60 * 10**9
    while True:
        messages = consumer.consume(1000, 0) or [m for m in [consumer.poll(0.05)] if m]
        now = time.monotonic_ns()
        for message in messages:
            if message.error() is not None:
                stats["errors"] += 1
                continue
            sent_ns = _STAMP.unpack_from(message.value())[0]
            stats["consumed"] += 1
            if plan.in_window(sent_ns):
                stats["consumed_in_window"] += 1
                e2e_us.append((now - sent_ns) // 1000)
        if messages:
            last_record = now
        # done: after the end, once nothing came for 3 s (the producers have flushed)
        if now > plan.end_ns and (now - last_record > 3 * 10**9 or now > give_up):
            break
    stats["affinity"] = thread_affinities([os.getpid()])  # before close ends librdkafka's
    consumer.close()
    stats["cpu_s"] = _own_cpu_seconds()
    Path(plan.outdir, f"consumer-{index}.bin").write_bytes(e2e_us.tobytes())
    Path(plan.outdir, f"consumer-{index}.json").write_text(json.dumps(stats))


def _own_cpu_seconds() -> float:
    """This process's CPU time, librdkafka's threads included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _percentile(ordered: array[int], q: float) -> float:
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] / 1000.0


def _read_latencies(outdir: Path, kind: str) -> array[int]:
    values = array("q")
    for path in sorted(outdir.glob(f"{kind}-*.bin")):
        values.frombytes(path.read_bytes())
    return array("q", sorted(values))


@dataclass
class RunResult:
    target: str
    scenario: str
    rate: float | None
    records_per_s: float
    mb_per_s: float
    consumed_per_s: float
    e2e_ms: dict[str, float]
    publish_ms: dict[str, float]
    gateway_cpu_cores: float | None
    gateway_millicores_per_mb_s: float | None
    gateway_run_queue_share: float | None
    """Seconds per second the gateway's threads waited, runnable, for a core (CPU
    contention); the broker's beside it."""
    gateway_requests_per_s: dict[str, float] | None
    """Produce and Fetch requests per second through the gateway (its own count)."""
    gateway_upstream_ms: dict[str, float] | None
    """The mean time from the gateway sending a Produce (Fetch) to the broker's answer: the
    part of the publish latency spent beyond the gateway."""
    producer_max_lag_ms: float
    errors: int
    broker_cpu_cores: float
    """Tansu's CPU over the window; and the client processes' over their whole life."""
    broker_run_queue_share: float
    client_cpu_cores: float
    counts: dict[str, int] = field(default_factory=dict)
    affinity: dict[str, dict[str, int] | None] = field(default_factory=dict)
    """By role (broker, gateway, clients, bench): the CPUs its threads were found allowed at
    the end of the window -> how many threads."""


@dataclass(frozen=True)
class Options:
    producers: int
    consumers: int
    warmup_s: float
    duration_s: float
    fetch_wait_ms: int


def run(
    target: str,
    bootstrap: str,
    admin: str,
    scenario: str,
    rate: float | None,
    options: Options,
    gateway: GatewayProcess | None,
    broker_pid: int,
) -> RunResult:
    """One run: fresh topics, the worker processes, the gateway's CPU over the window."""
    policy, headers = SCENARIOS[scenario]
    topics = create_topics(admin, policy, count=TOPICS, partitions=PARTITIONS, prefix="omb")
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as outdir:
        start = time.monotonic_ns() + 5 * 10**9  # the workers start and connect meanwhile
        measure = start + int(options.warmup_s * 1e9)
        plan = Plan(
            bootstrap=bootstrap,
            topics=topics,
            headers=headers,
            rate=rate,
            start_ns=start,
            measure_ns=measure,
            end_ns=measure + int(options.duration_s * 1e9),
            outdir=outdir,
            fetch_wait_ms=options.fetch_wait_ms,
        )
        workers = [
            context.Process(target=_consumer_main, args=(plan, i, options.consumers))
            for i in range(options.consumers)
        ] + [
            context.Process(target=_producer_main, args=(plan, i, options.producers))
            for i in range(options.producers)
        ]
        for worker in workers:
            worker.start()
        spawned = time.monotonic_ns()
        cpu = _usage_over_window(plan, gateway, broker_pid)
        found = {
            "broker": thread_affinities(process_tree(broker_pid)),
            "gateway": thread_affinities(process_tree(gateway.pid)) if gateway else None,
            "bench": thread_affinities([os.getpid()]),
        }
        for worker in workers:
            worker.join(300)
            if worker.exitcode != 0:
                raise SystemExit(f"{target} {scenario}: a worker exited with {worker.exitcode}")
        cpu["clients_s"] = (time.monotonic_ns() - spawned) / 1e9
        result = _collect(target, scenario, rate, plan, Path(outdir), cpu)
        result.affinity = {**found, "clients": result.affinity["clients"]}
    delete_topics(admin, topics)
    return result


_APIS = ("Produce", "Fetch")


def _usage_over_window(
    plan: Plan, gateway: GatewayProcess | None, broker_pid: int
) -> dict[str, Any]:
    """Between the window's start and end: the gateway's CPU time (all its processes) and the
    broker's, in cores; the time their threads waited for a core, per second; the gateway's
    request counts and its upstream round trips (from its /metrics)."""
    pids = {"broker": broker_pid, "gateway": gateway.pid if gateway else None}
    url = gateway.metrics_url if gateway else None
    time.sleep(max(0.0, (plan.measure_ns - time.monotonic_ns()) / 1e9))
    before = {k: tree_cpu_seconds(pid) for k, pid in pids.items() if pid is not None}
    queued = {k: tree_run_queue_seconds(pid) for k, pid in pids.items() if pid is not None}
    samples = prometheus_samples(url) if url else {}
    started = time.monotonic_ns()
    time.sleep(max(0.0, (plan.end_ns - time.monotonic_ns()) / 1e9))
    elapsed = (time.monotonic_ns() - started) / 1e9
    usage: dict[str, Any] = {
        k: (tree_cpu_seconds(pid) - before[k]) / elapsed if pid is not None else None
        for k, pid in pids.items()
    }
    for k, pid in pids.items():
        usage[f"{k}_run_queue"] = (
            (tree_run_queue_seconds(pid) - queued[k]) / elapsed if pid is not None else None
        )
    usage["requests"], usage["upstream_ms"] = (
        _gateway_requests(samples, prometheus_samples(url), elapsed) if url else (None, None)
    )
    return usage


def _gateway_requests(
    before: dict[str, float], after: dict[str, float], elapsed: float
) -> tuple[dict[str, float], dict[str, float]]:
    """Requests per second by API, and the mean upstream round trip in ms, between two
    scrapes of the gateway's metrics."""

    def delta(prefix: str) -> float:
        return sum(v - before.get(k, 0.0) for k, v in after.items() if k.startswith(prefix))

    rates, round_trips = {}, {}
    for api in _APIS:
        rates[api] = delta(f'kpg_requests_total{{api="{api}",') / elapsed
        count = delta(f'kpg_upstream_latency_seconds_count{{api="{api}"}}')
        total = delta(f'kpg_upstream_latency_seconds_sum{{api="{api}"}}')
        round_trips[api] = total / count * 1000 if count else float("nan")
    return rates, round_trips


def _collect(
    target: str,
    scenario: str,
    rate: float | None,
    plan: Plan,
    outdir: Path,
    cpus: dict[str, Any],
) -> RunResult:
    producers = [json.loads(p.read_text()) for p in outdir.glob("producer-*.json")]
    consumers = [json.loads(p.read_text()) for p in outdir.glob("consumer-*.json")]
    e2e, publish = _read_latencies(outdir, "consumer"), _read_latencies(outdir, "producer")
    window_s = (plan.end_ns - plan.measure_ns) / 1e9
    acked = sum(p["acked_in_window"] for p in producers)
    consumed = sum(c["consumed_in_window"] for c in consumers)
    mb_per_s = acked * RECORD_BYTES / window_s / 1e6
    errors = sum(p["errors"] + p["unflushed"] for p in producers)
    errors += sum(c["errors"] for c in consumers)
    cpu, clients_s = cpus["gateway"], cpus["clients_s"] or 1.0
    return RunResult(
        target=target,
        scenario=scenario,
        rate=rate,
        records_per_s=acked / window_s,
        mb_per_s=mb_per_s,
        consumed_per_s=consumed / window_s,
        e2e_ms={
            "p50": _percentile(e2e, 0.5),
            "p99": _percentile(e2e, 0.99),
            "p99.9": _percentile(e2e, 0.999),
            "max": _percentile(e2e, 1.0),
        },
        publish_ms={"p50": _percentile(publish, 0.5), "p99": _percentile(publish, 0.99)},
        gateway_cpu_cores=cpu,
        gateway_millicores_per_mb_s=cpu * 1000 / mb_per_s if cpu is not None and mb_per_s else None,
        gateway_run_queue_share=cpus["gateway_run_queue"],
        gateway_requests_per_s=cpus["requests"],
        gateway_upstream_ms=cpus["upstream_ms"],
        producer_max_lag_ms=max(p["max_lag_ms"] for p in producers),
        errors=errors,
        broker_cpu_cores=cpus["broker"] or 0.0,
        broker_run_queue_share=cpus["broker_run_queue"] or 0.0,
        client_cpu_cores=sum(w["cpu_s"] for w in producers + consumers) / clients_s,
        counts={"acked_in_window": acked, "consumed_in_window": consumed},
        affinity={"clients": _sum_counts(w["affinity"] for w in producers + consumers)},
    )


def _sum_counts(counts: Iterable[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for each in counts:
        for key, n in each.items():
            total[key] = total.get(key, 0) + n
    return total


def placement_verified(placed: Placement, runs: Iterable[dict[str, Any]]) -> bool:
    """Whether every thread read back in ``runs`` (results as dicts) was allowed exactly the
    CPUs ``placed`` gave its role: the gateway's, or the others' for everything else."""
    for run_ in runs:
        for role, found in run_["affinity"].items():
            expected = placed.describe()["gateway" if role == "gateway" else "others"]
            if found is not None and set(found) != {expected}:
                return False
    return True


def _metrics() -> dict[str, Any]:
    """A metrics listener for a gateway: its request counts and upstream round trips."""
    return {"metrics": f"127.0.0.1:{free_port()}"}


def _line(r: RunResult) -> str:
    cpu = (
        f" | gateway {r.gateway_cpu_cores:4.2f} cores, "
        f"{r.gateway_millicores_per_mb_s:5.1f} mc/(MB/s), waited {r.gateway_run_queue_share:4.2f}"
        if r.gateway_cpu_cores is not None
        and r.gateway_millicores_per_mb_s is not None
        and r.gateway_run_queue_share is not None
        else ""
    )
    if r.gateway_requests_per_s and r.gateway_upstream_ms:
        cpu += "".join(
            f", {api} {r.gateway_requests_per_s[api]:.0f}/s {r.gateway_upstream_ms[api]:.2f} ms"
            for api in _APIS
        )
    return (
        f"{r.target:10s} {r.scenario:11s} {r.records_per_s:8.0f} rec/s {r.mb_per_s:6.1f} MB/s "
        f"(consumed {r.consumed_per_s:8.0f}/s) e2e p50 {r.e2e_ms['p50']:7.2f} p99 "
        f"{r.e2e_ms['p99']:7.2f} p99.9 {r.e2e_ms['p99.9']:7.2f} ms | publish p50 "
        f"{r.publish_ms['p50']:6.2f} p99 {r.publish_ms['p99']:6.2f} ms{cpu} | broker "
        f"{r.broker_cpu_cores:4.2f} cores (waited {r.broker_run_queue_share:4.2f}), clients "
        f"{r.client_cpu_cores:4.2f}"
        f"{'' if not r.errors else f' | {r.errors} ERRORS'}"
    )


def _compare(direct: RunResult, gateway: RunResult) -> dict[str, Any]:
    return {
        "added_e2e_ms": {k: gateway.e2e_ms[k] - direct.e2e_ms[k] for k in direct.e2e_ms},
        "added_publish_ms": {
            k: gateway.publish_ms[k] - direct.publish_ms[k] for k in direct.publish_ms
        },
        "throughput_ratio": gateway.records_per_s / direct.records_per_s
        if direct.records_per_s
        else None,
        "gateway_millicores_per_mb_s": gateway.gateway_millicores_per_mb_s,
    }


def main() -> int:
    args = _parse_args()
    options = Options(args.producers, args.consumers, args.warmup, args.duration, args.fetch_wait)
    saturation_options = Options(
        args.producers, args.consumers, args.saturation_warmup, args.saturation_duration, 500
    )
    has_workers = kpg_has_workers()
    placed: Placement | None = args.placement
    started = machine()
    results: dict[str, Any] = {"saturation": {}, "fixed_rate": {}, "comparisons": {}}
    if placed is not None:
        # before the broker and the clients start, so that they inherit it
        pin_this_process(placed.others)
    gateway_cpus = placed.gateway if placed else None
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as workdir:
        direct = str(broker.address)
        nodes = broker_node_ids(direct)
        assert broker.process is not None
        bpid = broker.process.pid
        one = start_gateway(
            direct,
            Path(workdir, "one"),
            workers=1,
            node_ids=nodes,
            extra=_metrics(),
            cpus=gateway_cpus,
        )
        two = (
            start_gateway(
                direct,
                Path(workdir, "two"),
                workers=2,
                node_ids=nodes,
                extra=_metrics(),
                cpus=gateway_cpus,
            )
            if _run_two_workers(args, has_workers)
            else None
        )
        try:
            targets = [("direct", direct, None), ("gateway-1", one.bootstrap, one)]
            if two is not None:
                targets.append(("gateway-2", two.bootstrap, two))
            for name, bootstrap, gateway in targets if not args.no_saturation else []:
                admin = (gateway or one).bootstrap
                result = run(
                    name, bootstrap, admin, "passthrough", None, saturation_options, gateway, bpid
                )
                results["saturation"][name] = asdict(result)
                print(f"saturation {_line(result)}", flush=True)
            rate = args.rate or results["saturation"]["direct"]["records_per_s"] * args.load
            results["rate"] = rate
            for scenario in args.scenario or list(SCENARIOS):
                pair = {}
                for name, bootstrap, gateway in targets[:2]:
                    result = run(
                        name, bootstrap, one.bootstrap, scenario, rate, options, gateway, bpid
                    )
                    pair[name] = result
                    results["fixed_rate"][f"{scenario}/{name}"] = asdict(result)
                    print(f"at {rate:6.0f}/s {_line(result)}", flush=True)
                results["comparisons"][scenario] = _compare(pair["direct"], pair["gateway-1"])
        finally:
            one.stop()
            if two is not None:
                two.stop()
    summary = _summary(args, results, started, has_workers, two is not None)
    _print_table(summary)
    path = write_result(args.out, "omb", summary)
    print(f"wrote {path}")
    return 0


def _run_two_workers(args: argparse.Namespace, has_workers: bool) -> bool:
    """Two workers need --workers, the saturation runs, and (pinned) two gateway CPUs."""
    if not has_workers or args.skip_two_workers or args.no_saturation:
        return False
    return args.placement is None or len(args.placement.gateway) >= 2


def _summary(
    args: argparse.Namespace,
    results: dict[str, Any],
    started: dict[str, Any],
    has_workers: bool,
    ran_two: bool,
) -> dict[str, Any]:
    saturation = results["saturation"]
    one, two = saturation.get("gateway-1"), saturation.get("gateway-2")
    placed: Placement | None = args.placement
    runs = [*saturation.values(), *results["fixed_rate"].values()]
    return {
        "benchmark": "omb",
        "machine": {"start": started, "end": machine()},
        "broker": "tansu (embedded, memory)",
        "topics": TOPICS,
        "partitions": PARTITIONS,
        "record_bytes": RECORD_BYTES,
        "producers": args.producers,
        "consumers": args.consumers,
        "producer_config": PRODUCER_CONFIG,
        "fetch_wait_max_ms": args.fetch_wait,
        "warmup_s": args.warmup,
        "duration_s": args.duration,
        "saturation_duration_s": args.saturation_duration,
        "load": args.load,
        "kpg_run_has_workers": has_workers,
        "placement": placed.describe() if placed else None,
        "placement_verified": placement_verified(placed, runs) if placed else None,
        "two_workers_ran": ran_two,
        "two_over_one_workers": two["records_per_s"] / one["records_per_s"]
        if one and two and one["records_per_s"]
        else None,
        "one_worker_over_direct": one["records_per_s"] / saturation["direct"]["records_per_s"]
        if one and saturation["direct"]["records_per_s"]
        else None,
        **results,
    }


def _print_table(summary: dict[str, Any]) -> None:
    print(f"\nOMB-style, {summary['topics']}x{summary['partitions']}, 1 KiB records")
    for name, r in summary["saturation"].items():
        print(f"  saturation {name:10s} {r['records_per_s']:9.0f} rec/s {r['mb_per_s']:6.1f} MB/s")
    if summary["two_over_one_workers"] is not None:
        print(f"  2 workers / 1 worker: {summary['two_over_one_workers']:.2f}x")
    share = f"{summary['load']:.0%} of direct saturation" if summary["saturation"] else "--rate"
    print(f"  fixed rate {summary['rate']:.0f} rec/s ({share})")
    print("  scenario     added e2e p50 / p99 / p99.9 ms   added publish p50 / p99   mc/(MB/s)")
    for scenario, c in summary["comparisons"].items():
        e, p = c["added_e2e_ms"], c["added_publish_ms"]
        print(
            f"  {scenario:11s}  {e['p50']:+6.2f} / {e['p99']:+6.2f} / {e['p99.9']:+7.2f}"
            f"          {p['p50']:+6.2f} / {p['p99']:+6.2f}      "
            f"{c['gateway_millicores_per_mb_s'] or float('nan'):6.1f}"
        )
    end = summary["machine"]["end"]["load_average"]
    start = summary["machine"]["start"]["load_average"]
    print(f"  load average at start {start[0]:.2f}, at end {end[0]:.2f} ({os.cpu_count()} cores)")
    if summary["placement"]:
        placed = summary["placement"]
        print(
            f"  gateway on CPU {placed['gateway']}, broker and clients on CPU {placed['others']}"
            f" (read back: {'as placed' if summary['placement_verified'] else 'NOT as placed'})"
        )


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=" ".join((__doc__ or "").split("\n\n")[0].split()))
    parser.add_argument("--producers", type=int, default=3, help="producer processes")
    parser.add_argument("--consumers", type=int, default=3, help="consumer processes")
    parser.add_argument("--warmup", type=float, default=15, help="fixed rate: warm-up seconds")
    parser.add_argument("--duration", type=float, default=60, help="fixed rate: measured seconds")
    parser.add_argument("--saturation-warmup", type=float, default=5)
    parser.add_argument("--saturation-duration", type=float, default=20)
    parser.add_argument(
        "--load", type=float, default=0.5, help="fixed rate as a share of direct saturation"
    )
    parser.add_argument("--rate", type=float, help="fixed rate in records/s (overrides --load)")
    parser.add_argument(
        "--scenario", action="append", choices=list(SCENARIOS), help="default: both"
    )
    parser.add_argument(
        "--fetch-wait",
        type=int,
        default=10,
        help="consumers' fetch.wait.max.ms at the fixed rate (default 10; librdkafka's is 500)",
    )
    parser.add_argument("--skip-two-workers", action="store_true")
    parser.add_argument(
        "--no-saturation", action="store_true", help="only the fixed-rate runs (needs --rate)"
    )
    parser.add_argument(
        "--pin-gateway",
        metavar="CPUS",
        help="run the gateway (supervisor and one worker, --workers 1) only on these CPUs, "
        "e.g. 1 or 2-3, and the broker, the clients and this script on the others, in the "
        "direct runs too: the latency the gateway adds with a core of its own",
    )
    parser.add_argument(
        "--pin-others",
        metavar="CPUS",
        help="with --pin-gateway: the CPUs of the broker, the clients and this script "
        "(default: every CPU this process may use that --pin-gateway does not name)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    if args.no_saturation and not args.rate:
        parser.error("--no-saturation needs --rate")
    args.placement = None
    if args.pin_others is not None and args.pin_gateway is None:
        parser.error("--pin-others needs --pin-gateway")
    if args.pin_gateway is not None:
        try:
            args.placement = placement(
                args.pin_gateway, args.pin_others, frozenset(os.sched_getaffinity(0))
            )
        except ValueError as problem:
            parser.error(str(problem))
    return args


if __name__ == "__main__":
    sys.exit(main())
