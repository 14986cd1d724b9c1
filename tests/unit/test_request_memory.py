"""queued.max.request.bytes (gateway.limits.RequestMemory) on its own: who waits, who is let in
first, and that a wait given up returns what it held. The connections that use it are shown
against the real broker in tests/adversarial/test_connection_limits.py; the cancellation
races here cannot be timed from outside a socket."""

from __future__ import annotations

import asyncio

import pytest

from gateway.limits import RequestMemory
from gateway.metrics import GatewayMetrics
from protocol.framing import FrameRejected

pytestmark = pytest.mark.unit


def memory(limit: int) -> RequestMemory:
    return RequestMemory(limit, GatewayMetrics())


def test_a_small_frame_is_not_held_behind_a_large_one_that_waits() -> None:
    async def scenario() -> None:
        pool = memory(100)
        await pool.take(60)
        large = asyncio.ensure_future(pool.take(60))
        await asyncio.sleep(0)
        assert not large.done()
        await asyncio.wait_for(pool.take(30), 1)  # fits beside the first: let in at once
        assert pool.held == 90
        pool.give_back(60)
        await asyncio.wait_for(large, 1)
        assert pool.held == 90

    asyncio.run(scenario())


CANCELLED = {
    # name: whether the wait was granted just before it was cancelled
    "cancelled while waiting": False,
    "cancelled just after it was granted": True,
}


@pytest.mark.parametrize("name", list(CANCELLED))
def test_a_wait_given_up_holds_nothing(name: str) -> None:
    async def scenario() -> None:
        pool = memory(100)
        await pool.take(80)
        waiter = asyncio.ensure_future(pool.take(50))
        await asyncio.sleep(0)
        if CANCELLED[name]:
            pool.give_back(80)  # grants the waiter; it has not run yet
            assert pool.held == 50
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        if not CANCELLED[name]:
            pool.give_back(80)
        assert pool.held == 0
        await asyncio.wait_for(pool.take(100), 1)  # nothing left behind

    asyncio.run(scenario())


def test_a_frame_larger_than_the_limit_is_refused_and_minus_one_is_no_limit() -> None:
    with pytest.raises(FrameRejected) as refused:
        memory(100).check(101)
    assert refused.value.reason == "queued_max_request_bytes"
    memory(100).check(100)
    memory(-1).check(2**31 - 1)
