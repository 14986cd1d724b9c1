"""The gateway's runner of plug-in calls: a call that finds every policy thread busy waits its
turn (within ``policy.timeout.ms``), turns go round the clients that wait, and a call that gets
no thread in time denies without running. Real threads and a real event loop; the calls are
plain functions that block on events the test sets."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from gateway.engine import RequestContext, Session
from gateway.policy_runner import PolicyRunner, PolicyUnavailable
from policies.chain import PolicyChain
from protocol.framing import RequestHeader

pytestmark = pytest.mark.unit


def context(address: str, principal: str | None = None) -> RequestContext:
    header = RequestHeader(api_key=0, api_version=9, correlation_id=1, client_id="t", size=0)
    return RequestContext(header=header, client_address=address, session=Session(principal))


def holding(release: threading.Event, ran: list[str], name: str) -> Callable[[], str]:
    def call() -> str:
        ran.append(name)
        assert release.wait(10)
        return name

    return call


def noting(ran: list[str], name: str) -> Callable[[], str]:
    def call() -> str:
        ran.append(name)
        return name

    return call


async def settle(condition: Callable[[], bool]) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


def test_a_call_that_finds_every_thread_busy_waits_for_one() -> None:
    """Before, it was refused at once ("all 1 policy threads are busy"), so one client's
    slow calls had every other client's requests that need a plug-in denied."""
    with PolicyChain(timeout_s=5, max_workers=1) as chain:
        runner = PolicyRunner(chain)
        release, ran = threading.Event(), list[str]()

        async def scenario() -> list[str]:
            slow = asyncio.ensure_future(
                runner.call(context("10.0.0.1:1"), "slow", holding(release, ran, "slow"), what="x")
            )
            await settle(lambda: ran == ["slow"])
            waiting = asyncio.ensure_future(
                runner.call(context("10.0.0.2:1"), "p", noting(ran, "other"), what="x")
            )
            await asyncio.sleep(0.2)
            assert ran == ["slow"], "ran while the only thread was taken"
            release.set()
            return [await slow, await waiting]

        assert asyncio.run(scenario()) == ["slow", "other"]


def test_turns_go_round_the_clients_that_wait() -> None:
    """One client with many calls waiting does not hold another client's call behind all of
    them: the other's goes next but one (the order in line would run it last)."""
    with PolicyChain(timeout_s=5, max_workers=1) as chain:
        runner = PolicyRunner(chain)
        release, ran = threading.Event(), list[str]()
        hog, other = context("10.0.0.1:1"), context("10.0.0.1:2", principal="User:alice")

        async def scenario() -> None:
            calls = [runner.call(hog, "p", holding(release, ran, "hold"), what="x")]
            first = asyncio.ensure_future(calls[0])
            await settle(lambda: ran == ["hold"])
            queued = [
                asyncio.ensure_future(runner.call(hog, "p", noting(ran, f"hog{i}"), what="x"))
                for i in range(3)
            ]
            await asyncio.sleep(0)
            queued.append(
                asyncio.ensure_future(runner.call(other, "p", noting(ran, "alice"), what="x"))
            )
            await asyncio.sleep(0.05)
            release.set()
            await asyncio.gather(first, *queued)

        asyncio.run(scenario())
        assert ran == ["hold", "hog0", "alice", "hog1", "hog2"]


def test_a_call_that_gets_no_thread_in_time_denies_without_running() -> None:
    with PolicyChain(timeout_s=0.3, max_workers=1) as chain:
        runner = PolicyRunner(chain)
        release, ran = threading.Event(), list[str]()

        async def scenario() -> str:
            hung = asyncio.ensure_future(
                runner.call(context("10.0.0.1:1"), "p", holding(release, ran, "hung"), what="x")
            )
            await settle(lambda: ran == ["hung"])
            try:
                with pytest.raises(PolicyUnavailable) as refused:
                    await runner.call(
                        context("10.0.0.2:1"), "acme.P", noting(ran, "late"), what="x"
                    )
                with pytest.raises(PolicyUnavailable, match="did not return"):
                    await hung
            finally:
                release.set()
            return str(refused.value)

        message = asyncio.run(scenario())
        assert message == (
            "policy acme.P was not called: all 1 policy threads are busy "
            "with earlier calls that have not returned"
        )
        assert "late" not in ran


def test_a_call_whose_client_stops_waiting_never_runs() -> None:
    """A connection closed while its call waits: the call is dropped from the line."""
    with PolicyChain(timeout_s=5, max_workers=1) as chain:
        runner = PolicyRunner(chain)
        release, ran = threading.Event(), list[str]()

        async def scenario() -> None:
            first = asyncio.ensure_future(
                runner.call(context("10.0.0.1:1"), "p", holding(release, ran, "hold"), what="x")
            )
            await settle(lambda: ran == ["hold"])
            gone = asyncio.ensure_future(
                runner.call(context("10.0.0.2:1"), "p", noting(ran, "gone"), what="x")
            )
            later = asyncio.ensure_future(
                runner.call(context("10.0.0.3:1"), "p", noting(ran, "later"), what="x")
            )
            await asyncio.sleep(0.05)
            gone.cancel()
            release.set()
            await asyncio.gather(first, later)
            assert gone.cancelled()

        asyncio.run(scenario())
        assert ran == ["hold", "later"]


def test_calls_that_gave_up_waiting_leave_nothing_behind() -> None:
    """Every thread held by a call that never returns, two clients calling on: a call that
    gave up waiting stayed in its client's line, skipped only when the line came first,
    which it never did while the other client had a call waiting (40 rounds, 40 kept, each
    holding its call: a Produce's records). It now leaves the line as it gives up.

    The hung call is given seconds to reach its thread (on a loaded machine 50 ms was not
    always enough, and a call that gives up before it runs holds nothing); the calls after it
    give up at 50 ms."""
    with PolicyChain(timeout_s=5.0, max_workers=1) as chain:
        runner = PolicyRunner(chain)
        release, ran = threading.Event(), list[str]()
        a, b = context("10.0.0.1:1"), context("10.0.0.2:1")

        async def scenario() -> int:
            hung = asyncio.ensure_future(
                runner.call(a, "p", holding(release, ran, "hung"), what="x")
            )
            await settle(lambda: ran == ["hung"])
            runner.timeout_s = 0.05
            try:
                for round_ in range(40):
                    results = await asyncio.gather(
                        runner.call(a, "p", noting(ran, f"a{round_}"), what="x"),
                        runner.call(b, "p", noting(ran, f"b{round_}"), what="x"),
                        return_exceptions=True,
                    )
                    assert all(isinstance(r, PolicyUnavailable) for r in results)
                return sum(len(line) for line in runner._waiting.values())  # noqa: SLF001
            finally:
                release.set()
                await asyncio.gather(hung, return_exceptions=True)

        assert asyncio.run(scenario()) == 0
        assert ran == ["hung"]
