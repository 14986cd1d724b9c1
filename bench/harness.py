"""What the benchmarks share: `kpg run` as a separate process in front of the embedded Tansu
broker, topics created through it, the gateway's CPU time and memory from /proc (summed
over its supervisor and workers with ``kpg run --workers N``), and CPU placement: which CPUs
the gateway and everything else may run on (sched_setaffinity), and what each thread was
found allowed."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gateway.embedded import free_port  # noqa: E402

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def kpg() -> str:
    return str(Path(sys.executable).with_name("kpg"))


def kpg_has_workers() -> bool:
    """Whether this checkout's ``kpg run`` takes ``--workers``."""
    out = subprocess.run([kpg(), "run", "--help"], capture_output=True, text=True, check=True)
    return "--workers" in out.stdout


@dataclass
class GatewayProcess:
    process: subprocess.Popen[str]
    bootstrap: str
    workers: int
    metrics_url: str | None = None
    """Its /metrics, when it was started with a metrics listener."""

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_gateway(
    upstream: str,
    workdir: Path,
    *,
    workers: int = 1,
    node_ids: tuple[int, ...] = (),
    extra: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    cpus: frozenset[int] | None = None,
) -> GatewayProcess:
    """``kpg run`` in front of ``upstream`` with a SQLite state store in ``workdir``.

    ``workers``: ``--workers N`` (left out where ``kpg run`` has no such flag, which is one
    process). Several workers need fixed node ports (every worker binds the same ones), so
    ``node_ids`` names the broker's node ids and the node ports are picked free; without,
    node_port_base is 0. ``cpus``: the CPUs it (supervisor and workers) may run on, from
    its first instruction on; None: those of this thread.
    """
    has_workers = kpg_has_workers()
    if workers != 1 and not has_workers:
        raise SystemExit(f"kpg run has no --workers: cannot start {workers} workers")
    workdir.mkdir(parents=True, exist_ok=True)
    node_port_base = 0
    if node_ids:
        node_port_base = free_port() - min(node_ids)
    config: dict[str, Any] = {
        "listen": f"127.0.0.1:{free_port()}",
        "node_port_base": node_port_base,
        "upstream": {"bootstrap_servers": [upstream], "topic_config_source_unreliable": True},
        "state": {"path": str(workdir / "state.db")},
    }
    for key, value in (extra or {}).items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    path = workdir / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    command = [kpg(), "run", "--config", str(path), "--log-level", "WARNING"]
    if has_workers:
        command += ["--workers", str(workers)]
    with spawning_on(cpus):
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
    assert process.stdout is not None
    for line in process.stdout:
        match = re.search(r"bootstrap.servers=(\S+)", line)
        if match:
            # The rest of its output is not read: let it go nowhere rather than fill the pipe.
            _drain(process)
            metrics = config.get("metrics")
            url = f"http://{metrics}/metrics" if metrics else None
            return GatewayProcess(process, match.group(1), workers, url)
    raise SystemExit(f"gateway did not start: {' '.join(command)}")


def _drain(process: subprocess.Popen[str]) -> None:
    import threading

    def run() -> None:
        assert process.stdout is not None
        for _ in process.stdout:
            pass

    threading.Thread(target=run, name="kpg-stdout", daemon=True).start()


def broker_node_ids(bootstrap: str) -> tuple[int, ...]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return tuple(sorted(admin.list_topics(timeout=30).brokers))


def create_topics(
    admin_bootstrap: str,
    policy: str | None,
    *,
    count: int = 1,
    partitions: int = 1,
    prefix: str = "bench",
) -> list[str]:
    """``count`` fresh topics of ``partitions`` partitions, with record.validation.policy
    ``policy`` when given (create them through the gateway, so that it knows the policy)."""
    run = uuid.uuid4().hex[:8]
    topics = [f"{prefix}-{run}-{n}" for n in range(count)]
    configs = {"record.validation.policy": policy} if policy else {}
    admin = AdminClient({"bootstrap.servers": admin_bootstrap})
    new = [NewTopic(topic, partitions, 1, config=configs) for topic in topics]
    for future in admin.create_topics(new).values():
        future.result(60)
    return topics


def create_topic(admin_bootstrap: str, policy: str | None) -> str:
    (topic,) = create_topics(admin_bootstrap, policy)
    return topic


def delete_topics(admin_bootstrap: str, topics: list[str]) -> None:
    """Through the gateway, which forgets their policy; the in-memory broker keeps their
    records otherwise (gigabytes over a whole run)."""
    admin = AdminClient({"bootstrap.servers": admin_bootstrap})
    for future in admin.delete_topics(topics).values():
        future.result(60)


def delete_topic(admin_bootstrap: str, topic: str) -> None:
    delete_topics(admin_bootstrap, [topic])


def _stat(pid: int) -> list[str]:
    # after the command name, which may hold spaces and parentheses
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants alive now (a supervisor and its workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            parent = int(_stat(int(entry))[1])
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo += children.get(current, [])
    return tree


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used so far (Linux /proc)."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of ``pid`` and every descendant alive now, plus what its exited and reaped
    children used (cutime, cstime)."""
    total = 0.0
    for member in process_tree(pid):
        try:
            fields = _stat(member)
        except FileNotFoundError:
            continue
        total += sum(int(f) for f in fields[11:15]) / _CLOCK_TICKS
    return total


def tree_run_queue_seconds(pid: int) -> float:
    """How long the threads of ``pid`` and its descendants alive now have waited, runnable,
    for a core (Linux schedstat ``run_delay``): CPU contention, as opposed to waiting on I/O.
    Threads that have exited are not counted."""
    total = 0
    for member in process_tree(pid):
        try:
            threads = os.listdir(f"/proc/{member}/task")
        except FileNotFoundError:
            continue
        for tid in threads:
            try:
                total += int(Path(f"/proc/{member}/task/{tid}/schedstat").read_text().split()[1])
            except (FileNotFoundError, IndexError, ValueError):
                continue
    return total / 1e9


def prometheus_samples(url: str) -> dict[str, float]:
    """Every sample of a Prometheus text exposition: ``name{labels}`` -> value."""
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and its descendants, summed (shared pages counted in each,
    as ps would: an upper bound)."""
    total = 0
    for member in process_tree(pid):
        try:
            resident = int(Path(f"/proc/{member}/statm").read_text().split()[1])
        except FileNotFoundError:
            continue
        total += resident * _PAGE_BYTES
    return total


_CPU_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


def parse_cpu_list(text: str) -> frozenset[int]:
    """A CPU list as ``taskset -c`` and /sys/devices/system/cpu/online write it: ``1``,
    ``0,2-3``.

    :raises ValueError: when ``text`` is not one, or names no CPU.
    """
    cpus: set[int] = set()
    for part in text.split(","):
        match = _CPU_RANGE.fullmatch(part.strip())
        if match is None:
            raise ValueError(f"not a CPU list: {text!r} (e.g. 1 or 0,2-3)")
        low = int(match.group(1))
        high = int(match.group(2) or low)
        if high < low:
            raise ValueError(f"not a CPU list: {text!r} ({part.strip()} runs backwards)")
        cpus.update(range(low, high + 1))
    return frozenset(cpus)


def format_cpu_list(cpus: Iterable[int]) -> str:
    """The shortest CPU list naming ``cpus``: {0, 2, 3} -> ``0,2-3``."""
    ranges: list[list[int]] = []
    for cpu in sorted(cpus):
        if ranges and ranges[-1][1] == cpu - 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(low) if low == high else f"{low}-{high}" for low, high in ranges)


@dataclass(frozen=True)
class Placement:
    """The gateway on CPUs of its own; the broker, the clients and the benchmark on others."""

    gateway: frozenset[int]
    others: frozenset[int]

    def describe(self) -> dict[str, str]:
        return {"gateway": format_cpu_list(self.gateway), "others": format_cpu_list(self.others)}


def placement(gateway: str, others: str | None, available: frozenset[int]) -> Placement:
    """The CPU lists ``gateway`` and ``others`` (None: every CPU in ``available``, the CPUs
    this process may use, not given to the gateway).

    :raises ValueError: a list that is not one, names a CPU not in ``available``, leaves
        nothing to either side, or overlaps the other (the gateway would not have its own).
    """
    mine = parse_cpu_list(gateway)
    rest = parse_cpu_list(others) if others is not None else available - mine
    for name, cpus in (("gateway", mine), ("others", rest)):
        if not cpus <= available:
            raise ValueError(
                f"--pin-{name}: CPU {format_cpu_list(cpus - available)} is not one this "
                f"process may use ({format_cpu_list(available)})"
            )
    if not rest:
        raise ValueError("--pin-gateway leaves no CPU for the broker and the clients")
    if mine & rest:
        raise ValueError(f"--pin-others shares CPU {format_cpu_list(mine & rest)} with the gateway")
    return Placement(mine, rest)


def pin_this_process(cpus: frozenset[int]) -> None:
    """Every thread of this process onto ``cpus``; processes it starts from now on inherit
    them (affinity is per thread, and a child gets its forking thread's)."""
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(tid), cpus)


@contextlib.contextmanager
def spawning_on(cpus: frozenset[int] | None) -> Iterator[None]:
    """Within: the calling thread runs on ``cpus``, so a process it starts does from its first
    instruction (rather than a preexec_fn, unsafe in a process with threads); then back.
    Nothing changes when ``cpus`` is None."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def thread_affinities(pids: Iterable[int]) -> dict[str, int]:
    """How many threads of the processes ``pids`` were found allowed on which CPUs: CPU list
    -> threads (threads that exit meanwhile are left out)."""
    found: dict[str, int] = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            continue
        for tid in tids:
            try:
                cpus = format_cpu_list(os.sched_getaffinity(int(tid)))
            except ProcessLookupError:
                continue
            found[cpus] = found.get(cpus, 0) + 1
    return found


def machine() -> dict[str, Any]:
    """What else the machine was doing: its load and cores."""
    uptime = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout
    return {
        "load_average": os.getloadavg(),
        "uptime": uptime.strip(),
        "cores": os.cpu_count(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def write_result(out: Path, name: str, summary: Mapping[str, Any]) -> Path:
    """Writes one run's summary as ``<out>/<name>-<UTC time>.json`` and returns the path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    path.write_text(json.dumps(summary, indent=2) + "\n")
    return path
