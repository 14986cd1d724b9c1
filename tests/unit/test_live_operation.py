"""The pure parts of live operation: what a reload may change, when a replaced generation is
closed, the limits a reload hands to the shared counters, the supervisor's pauses and the
workers' spool directories. The processes themselves are shown in tests/e2e/test_workers.py."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

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


def test_each_worker_spools_into_a_directory_of_its_own() -> None:
    dirs = {worker_spool_dir("var/audit", i) for i in range(4)}
    assert dirs == {f"var/audit/worker-{i}" for i in range(4)}
