"""CPU placement for bench/omb.py (--pin-gateway, --pin-others): the CPU lists, which CPUs the
broker and the clients get when only the gateway's are named, and the check of what was read
back from the threads against the placement."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.harness import (
    Placement,
    format_cpu_list,
    parse_cpu_list,
    placement,
    spawning_on,
    thread_affinities,
)
from bench.omb import placement_verified

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("1", {1}),
        ("0,2-3", {0, 2, 3}),
        (" 0 , 2-3 ", {0, 2, 3}),
        ("4-4", {4}),
        ("3,1,3", {1, 3}),
        ("0-2,1-3", {0, 1, 2, 3}),
    ],
)
def test_a_cpu_list_names_its_cpus(text: str, cpus: set[int]) -> None:
    assert parse_cpu_list(text) == cpus


@pytest.mark.parametrize("text", ["", "a", "1,", "-1", "3-1", "1-", "1:2", "0x1"])
def test_what_is_not_a_cpu_list_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a CPU list"):
        parse_cpu_list(text)


@pytest.mark.parametrize(
    ("cpus", "text"), [({1}, "1"), ({0, 2, 3}, "0,2-3"), ({0, 1, 2, 5, 7, 8}, "0-2,5,7-8")]
)
def test_cpus_are_written_as_the_shortest_list(cpus: set[int], text: str) -> None:
    assert format_cpu_list(cpus) == text
    assert parse_cpu_list(text) == cpus


def test_the_others_default_to_every_cpu_not_given_to_the_gateway() -> None:
    assert placement("1", None, frozenset({0, 1})) == Placement(frozenset({1}), frozenset({0}))
    assert placement("2-3", None, frozenset({0, 1, 2, 3, 5})) == Placement(
        frozenset({2, 3}), frozenset({0, 1, 5})
    )


def test_the_others_can_be_named() -> None:
    assert placement("3", "0-1", frozenset(range(4))) == Placement(
        frozenset({3}), frozenset({0, 1})
    )


@pytest.mark.parametrize(
    ("gateway", "others", "problem"),
    [
        ("2", None, "--pin-gateway: CPU 2 is not one this process may use"),
        ("1", "0,4", "--pin-others: CPU 4 is not one this process may use"),
        ("0-1", None, "no CPU for the broker and the clients"),
        ("1", "0-1", "--pin-others shares CPU 1 with the gateway"),
    ],
)
def test_a_placement_that_gives_the_gateway_no_core_of_its_own_is_refused(
    gateway: str, others: str | None, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        placement(gateway, others, frozenset({0, 1}))


def _run(affinity: dict[str, dict[str, int] | None]) -> dict[str, object]:
    return {"affinity": affinity}


def test_the_read_back_is_checked_against_each_roles_cpus() -> None:
    placed = Placement(frozenset({1}), frozenset({0}))
    direct = _run({"broker": {"0": 9}, "gateway": None, "bench": {"0": 3}, "clients": {"0": 60}})
    through = _run(
        {"broker": {"0": 9}, "gateway": {"1": 7}, "bench": {"0": 3}, "clients": {"0": 5}}
    )
    assert placement_verified(placed, [direct, through])
    # nothing read back of a role is no proof
    unread = _run({"broker": {}, "gateway": None, "bench": {"0": 3}, "clients": {"0": 60}})
    assert not placement_verified(placed, [direct, unread])
    # one client thread allowed on both CPUs, or the gateway found on the others' CPU
    loose = _run({"broker": {"0": 9}, "gateway": None, "bench": {"0": 3}, "clients": {"0-1": 1}})
    assert not placement_verified(placed, [direct, loose])
    swapped = _run(
        {"broker": {"0": 9}, "gateway": {"0": 7}, "bench": {"0": 3}, "clients": {"0": 5}}
    )
    assert not placement_verified(placed, [swapped])


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to tell apart")
def test_a_process_started_within_spawning_on_runs_on_those_cpus_and_the_caller_is_restored() -> (
    None
):
    before = os.sched_getaffinity(0)
    cpu = max(before)
    with spawning_on(frozenset({cpu})):
        child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=-1)
    try:
        assert os.sched_getaffinity(0) == before
        assert thread_affinities([child.pid]) == {str(cpu): 1}
    finally:
        child.communicate(b"")
    with spawning_on(None):
        assert os.sched_getaffinity(0) == before
