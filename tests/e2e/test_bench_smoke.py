"""The benchmarks run (bench/omb.py, bench/idle_connections.py), with tiny settings: a check
that the scripts work end to end against the real broker and `kpg run`, not a measurement.
Nothing here asserts a time or a rate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.harness import format_cpu_list

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, *args: str, out: Path) -> dict:  # type: ignore[type-arg]
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (result,) = out.glob("*.json")
    return json.loads(result.read_text())  # type: ignore[no-any-return]


def test_omb_bench_measures_direct_and_through_the_gateway(tmp_path: Path) -> None:
    result = _run(
        "omb.py",
        *("--producers", "1", "--consumers", "1", "--warmup", "1", "--duration", "2"),
        *("--rate", "500", "--no-saturation", "--scenario", "header"),
        out=tmp_path,
    )
    for target in ("direct", "gateway-1"):
        run = result["fixed_rate"][f"header/{target}"]
        assert run["errors"] == 0
        # every record produced in the window was acknowledged and consumed
        assert run["counts"]["acked_in_window"] > 0
        assert run["counts"]["consumed_in_window"] == run["counts"]["acked_in_window"]
        assert run["e2e_ms"]["p50"] > 0 and run["publish_ms"]["p50"] > 0
    runs = result["fixed_rate"]
    direct, through = runs["header/direct"], runs["header/gateway-1"]
    assert direct["gateway_cpu_cores"] is None and direct["gateway_requests_per_s"] is None
    assert through["gateway_cpu_cores"] > 0
    # the gateway's own view: requests it carried, their round trips to the broker, and how
    # long its threads waited for a core (schedstat; zero on an idle machine)
    assert through["gateway_requests_per_s"]["Produce"] > 0
    assert through["gateway_upstream_ms"]["Produce"] > 0
    assert through["gateway_run_queue_share"] >= 0 and direct["broker_run_queue_share"] >= 0
    assert result["comparisons"]["header"]["gateway_millicores_per_mb_s"] > 0
    assert result["machine"]["start"]["load_average"]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs a CPU for each side")
def test_omb_bench_pins_the_gateway_apart_from_the_broker_and_clients(tmp_path: Path) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    # the last CPU for the gateway; the others by default every one not given to it
    gateway, others = str(cpus[-1]), format_cpu_list(cpus[:-1])
    result = _run(
        "omb.py",
        *("--producers", "1", "--consumers", "1", "--warmup", "1", "--duration", "2"),
        *("--rate", "200", "--no-saturation", "--scenario", "passthrough"),
        *("--pin-gateway", gateway),
        out=tmp_path,
    )
    assert result["placement"] == {"gateway": gateway, "others": others}
    assert result["placement_verified"] is True
    direct, through = (result["fixed_rate"][f"passthrough/{t}"] for t in ("direct", "gateway-1"))
    for run in (direct, through):
        assert run["counts"]["consumed_in_window"] == run["counts"]["acked_in_window"] > 0
        # every thread read back (librdkafka's in the clients too), all on the others' CPUs
        for role in ("broker", "clients", "bench"):
            assert list(run["affinity"][role]) == [others]
        assert run["affinity"]["clients"][others] > 2  # two clients, librdkafka threads
    assert direct["affinity"]["gateway"] is None
    # the supervisor and its one worker, every thread of both, on the gateway's CPU alone
    assert list(through["affinity"]["gateway"]) == [gateway]
    assert through["affinity"]["gateway"][gateway] >= 2


def test_idle_connections_bench_holds_its_clients(tmp_path: Path) -> None:
    result = _run(
        "idle_connections.py", "--steps", "20,50", "--settle", "0.2", "--workers", "1", out=tmp_path
    )
    assert [s["clients"] for s in result["steps"]] == [20, 50]
    assert result["still_open_at_end"] == 50
    # every client holds a socket into the gateway, and the gateway one to the broker
    assert result["steps"][-1]["gateway_open_files"] >= 2 * 50
    assert result["steps"][-1]["gateway_rss_bytes"] > result["baseline_rss_bytes"] > 0
