"""The pure parts of live operation: what a reload may change, when a replaced generation is
closed, the limits a reload hands to the shared counters, the supervisor's pauses and the
workers' spool directories. The processes themselves are shown in tests/e2e/test_workers.py."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.multiprocess import MultiProcessCollector

from gateway import supervisor
from gateway.config import RESTART_ONLY, ConfigError, LimitsConfig, from_mapping, live_part, load
from gateway.generation import Generation
from gateway.limits import ConnectionLimits, RequestMemory
from gateway.metrics import GatewayMetrics
from gateway.supervisor import MAX_BACKOFF_S, backoff, worker_spool_dir
from gateway.tasks import TaskSet

pytestmark = pytest.mark.unit

BASE: dict[str, Any] = {
    "listen": "127.0.0.1:9092",
    "node_port_base": 9100,
    "upstream": {"bootstrap_servers": ["k1:9092"], "auto_create": "judge"},
    "state": {"path": "var/a.db"},
    "audit": {"spool_dir": "var/audit"},
    "limits": {"max_in_flight_requests": 10},
    "policies": {"rules": [{"name": "p", "type": "partitions", "max": 3}]},
}


def config(**changes: Any) -> Any:
    raw = {**BASE, **changes}
    return from_mapping(raw, "gw.yaml")


def test_a_reload_keeps_what_needs_a_restart_and_names_it() -> None:
    running = config()
    loaded = config(
        listen="127.0.0.1:9999",
        node_port_base=9200,
        upstream={"bootstrap_servers": ["k2:9092"], "auto_create": "deny"},
        state={"path": "var/b.db"},
        audit={"spool_dir": "var/other"},
        limits={"max_in_flight_requests": 20},
        policies={"rules": [{"name": "p", "type": "partitions", "max": 5}]},
    )
    kept, needs_restart = live_part(running, loaded)
    assert needs_restart == (
        "listen",
        "node_port_base",
        "upstream.bootstrap_servers",
        "state",
        "audit",
    )
    assert (kept.listen, kept.node_port_base, kept.state, kept.audit) == (
        running.listen,
        running.node_port_base,
        running.state,
        running.audit,
    )
    assert kept.upstream.bootstrap_servers == running.upstream.bootstrap_servers
    # What judges requests is the new file's.
    assert kept.upstream.auto_create == "deny"
    assert kept.limits.max_in_flight_requests == 20
    assert kept.policies == loaded.policies
    assert kept.policy_version == loaded.policy_version != running.policy_version


def test_a_reload_of_the_same_file_changes_nothing() -> None:
    kept, needs_restart = live_part(config(), config())
    assert needs_restart == ()
    assert kept == config()
    assert set(RESTART_ONLY) >= {"listen", "tls", "state", "audit", "upstream.bootstrap_servers"}


def test_a_worker_reads_the_copy_and_names_the_operators_file(tmp_path: Path) -> None:
    copy = tmp_path / "copy.yaml"
    copy.write_text("limits:\n  max_in_flight: 5\n")
    with pytest.raises(ConfigError, match=r"^/etc/kpg/gateway.yaml: limits.max_in_flight"):
        load(copy, source="/etc/kpg/gateway.yaml")


class _Closing:
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> tuple[str, ...]:
        self.closed += 1
        return ()


def generation(policies: _Closing, validator: _Closing) -> Generation:
    return Generation(
        config=config(),
        policies=policies,  # type: ignore[arg-type]
        record_validator=validator,  # type: ignore[arg-type]
        recorder=None,  # type: ignore[arg-type]
        table={},
    )


def test_a_replaced_generation_closes_once_its_last_request_is_done() -> None:
    async def scenario() -> None:
        tasks = TaskSet()
        policies, validator = _Closing(), _Closing()
        old = generation(policies, validator)
        old.enter()
        old.enter()
        old.retire(tasks)
        old.leave(tasks)
        await tasks.wait(5)
        assert policies.closed == 0, "a request judged by it is still under way"
        old.leave(tasks)
        await tasks.wait(5)
        assert (policies.closed, validator.closed) == (1, 1)
        old.close()  # at shutdown: already closed, not again
        assert policies.closed == 1

    asyncio.run(scenario())


def test_an_unused_generation_closes_when_replaced_and_the_running_one_at_shutdown() -> None:
    async def scenario() -> None:
        tasks = TaskSet()
        unused, running = _Closing(), _Closing()
        generation(unused, _Closing()).retire(tasks)
        await tasks.wait(5)
        assert unused.closed == 1
        current = generation(running, _Closing())
        current.enter()
        current.leave(tasks)
        assert running.closed == 0
        current.close()
        assert running.closed == 1

    asyncio.run(scenario())


def test_a_reloaded_request_memory_limit_lets_waiting_frames_in() -> None:
    async def scenario() -> None:
        pool = RequestMemory(100, GatewayMetrics())
        await pool.take(80)
        waiting = asyncio.ensure_future(pool.take(50))
        await asyncio.sleep(0)
        assert not waiting.done()
        pool.set_limit(200)
        await asyncio.wait_for(waiting, 1)
        assert pool.held == 130

    asyncio.run(scenario())


def test_reloaded_connection_limits_apply_to_the_next_accept() -> None:
    limits = ConnectionLimits(LimitsConfig(max_connections=1), GatewayMetrics())
    assert limits.admit("10.0.0.1")
    assert not limits.admit("10.0.0.2")
    limits.update(replace(LimitsConfig(), max_connections=2, max_connections_per_ip=1))
    assert limits.admit("10.0.0.2")
    assert not limits.admit("10.0.0.3")


def test_backoff_doubles_with_each_quick_death_up_to_a_cap() -> None:
    pauses = [backoff(n) for n in range(10)]
    assert pauses[:4] == [0.5, 0.5, 1.0, 2.0]
    assert max(pauses) == MAX_BACKOFF_S
    assert pauses == sorted(pauses)


WORKER = """
import os, pathlib, sys, time
status, gate = int(sys.argv[1]), sys.argv[2]
if gate and not pathlib.Path(gate).exists():
    sys.exit(3)  # as a worker that cannot reach its state topic at start
os.write(status, b"ready\\n")
time.sleep(600)
"""
"""A process the supervisor runs as a worker: it says ready, unless ``gate`` names a file that
does not exist (yet), when it exits at once."""


def test_a_worker_given_up_is_started_again_once_it_can_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that died 5 times in a row right after starting was left down for good, even
    once what it died of had passed (a state or audit topic it could not reach while the
    brokers were down): the gateway served on one worker fewer until restarted. It is tried
    again every GIVEN_UP_RETRY_S while another worker serves. Real processes; the pauses are
    shortened."""
    monkeypatch.setattr(supervisor, "BACKOFF_S", 0.01)
    monkeypatch.setattr(supervisor, "GIVEN_UP_RETRY_S", 0.2)
    gate = tmp_path / "worker-1-can-start"

    def command(index: int, status_fd: int, _listener_fd: int, _copy: Path) -> list[str]:
        return [sys.executable, "-c", WORKER, str(status_fd), str(gate) if index else ""]

    running = supervisor.Supervisor(
        workers=2,
        config=config(metrics=None),
        config_file=None,
        command=command,
        load=lambda path: config(),
    )
    workers = running._workers  # noqa: SLF001 - what kpg_workers{state} reads

    async def until(condition: Any) -> None:
        async with asyncio.timeout(30):
            while not condition():
                await asyncio.sleep(0.02)

    async def main() -> int:
        run = asyncio.ensure_future(running.run(lambda: None))
        try:
            await until(lambda: workers[1].given_up and workers[0].ready)
            gate.touch()  # what worker 1 died of has passed
            await until(lambda: workers[1].ready)
            assert not workers[1].given_up
        finally:
            running._stop_soon()  # noqa: SLF001 - as SIGTERM does
        return await run

    assert asyncio.run(main()) == 0


COUNTING_WORKER = """
import os, sys, time
from prometheus_client import Counter, Histogram
status, dies = int(sys.argv[1]), sys.argv[2] == "dies"
Counter("kpg_test_starts", "Starts").inc()
Histogram("kpg_test_seconds", "Seconds", buckets=(1.0,)).observe(0.5)
if dies:
    sys.exit(3)  # as a worker that cannot reach its state topic at start
os.write(status, b"ready\\n")
time.sleep(600)
"""
"""A worker counting its start in prometheus_client's multiprocess files (the supervisor's
``PROMETHEUS_MULTIPROC_DIR``); worker 1 then dies, every time."""


def test_a_worker_restarted_again_and_again_leaves_no_files_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each dead worker left its counter and histogram files in the metrics directory for
    good, and every scrape read them all: a worker given up and tried again every 30 s (the
    brokers down at its start) added 5,760 files a day, each scrape slower than the last.
    Its values now go into the files of the dead, and its own are removed; no count is lost.
    Real processes; the pauses are shortened."""
    monkeypatch.setattr(supervisor, "BACKOFF_S", 0.01)
    monkeypatch.setattr(supervisor, "MAX_BACKOFF_S", 0.01)
    monkeypatch.setattr(supervisor, "GIVEN_UP_RETRY_S", 0.01)

    def command(index: int, status_fd: int, _listener_fd: int, _copy: Path) -> list[str]:
        return [sys.executable, "-c", COUNTING_WORKER, str(status_fd), "dies" if index else ""]

    running = supervisor.Supervisor(
        workers=2,
        config=config(metrics=None),
        config_file=None,
        command=command,
        load=lambda path: config(),
    )
    directory = running._metrics_dir  # noqa: SLF001 - what the supervisor serves
    restarted = running._workers[1]  # noqa: SLF001
    remove_run_dir = running.close
    monkeypatch.setattr(running, "close", lambda: None)  # read the files once all are dead

    async def main() -> int:
        run = asyncio.ensure_future(running.run(lambda: None))
        try:
            async with asyncio.timeout(60):
                while restarted.restarts < 12:
                    await asyncio.sleep(0.02)
        finally:
            running._stop_soon()  # noqa: SLF001 - as SIGTERM does
            await run
        return restarted.restarts

    try:
        deaths = asyncio.run(main())
        files = sorted(p.name for p in directory.glob("*.db"))
        merged = MultiProcessCollector.merge([str(directory / f) for f in files])
        totals = {sample.name: sample.value for family in merged for sample in family.samples}
    finally:
        remove_run_dir()
    # the dead workers' two files, and at most those of the two last workers
    assert len(files) <= 6, files
    assert totals["kpg_test_starts_total"] >= deaths + 1  # worker 0, and each death
    assert totals["kpg_test_seconds_count"] == totals["kpg_test_starts_total"]


def test_each_worker_spools_into_a_directory_of_its_own() -> None:
    dirs = {worker_spool_dir("var/audit", i) for i in range(4)}
    assert dirs == {f"var/audit/worker-{i}" for i in range(4)}


def test_a_reload_keeps_the_upstream_security_and_the_listener_sasl(tmp_path: Path) -> None:
    """The brokers' TLS and the gateway's own credentials are held by open links and clients:
    a reload naming others keeps them and says they need a restart."""
    secret = tmp_path / "pw"
    secret.write_text("s3cret")
    running = config()
    loaded = config(
        upstream={
            **BASE["upstream"],
            "tls": {"check_hostname": False},
            "sasl": {"mechanism": "PLAIN", "username": "kpg", "password_file": str(secret)},
        },
        sasl={"oauthbearer_sub_claim_name": "client_id"},
    )
    kept, needs_restart = live_part(running, loaded)
    assert needs_restart == ("upstream.tls", "upstream.sasl", "sasl")
    assert (kept.upstream.tls, kept.upstream.sasl, kept.sasl) == (
        running.upstream.tls,
        running.upstream.sasl,
        running.sasl,
    )


_QUEUE_DEPTH_SCRIPT = """
import asyncio, sys, threading
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from gateway.audit import AuditEmitter

class StalledSink:
    # A sink whose first write waits until released: the events behind it stay queued.
    def __init__(self):
        self.writing = threading.Event()
        self.release = threading.Event()
    def open(self): pass
    def write(self, lines):
        self.writing.set()
        self.release.wait(30)
    def maintain(self): pass
    def close(self): pass

async def main():
    sink = StalledSink()
    emitter = AuditEmitter([sink], registry=CollectorRegistry(), gateway_instance="gw")
    await emitter.start()
    emitter.lifecycle("start", policy_version="v", message="first")
    await asyncio.to_thread(sink.writing.wait, 30)
    for n in range(5):
        emitter.lifecycle("reload", policy_version="v", message=str(n))
    # What the supervisor of kpg run --workers serves: the sum of the workers' files.
    scrape = CollectorRegistry()
    MultiProcessCollector(scrape, path=sys.argv[1])
    samples = [
        (s.labels, s.value)
        for family in scrape.collect() if family.name == "kpg_audit_queue_depth"
        for s in family.samples
    ]
    print(samples)
    sink.release.set()
    await emitter.close()

asyncio.run(main())
"""


def test_the_audit_queue_depth_reaches_the_supervisor_of_workers(tmp_path: Path) -> None:
    """Under kpg run --workers a worker's metrics reach the supervisor through
    prometheus_client's multiprocess files (chosen when the library is imported, so in a
    process of its own): the audit queue's depth must be in them, one series summed over
    the live workers, not a function only the worker's own registry could call."""
    result = subprocess.run(
        [sys.executable, "-c", _QUEUE_DEPTH_SCRIPT, str(tmp_path)],
        env=dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[({}, 5.0)]"
