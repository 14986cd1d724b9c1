"""UpstreamLink's correlation ids, against a scripted peer on a socket pair: the ids the peer
sees are the link's, answers come back with the caller's, acks=0 answers are dropped whether
the peer sends them (Tansu) or not (Kafka), and anything else closes the link.

A scripted peer, not the broker: it shows what no broker does on purpose (answers out of
turn, ids round the int32 range) and what the test broker does not do (withhold acks=0
answers). The in-process tests in ``tests/inproc/test_correlation_ids.py`` use the real one.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from gateway.config import HostPort
from gateway.metrics import GatewayMetrics
from gateway.tasks import TaskSet
from gateway.upstream import UpstreamClosed, UpstreamLink
from protocol.framing import SIZE

pytestmark = pytest.mark.unit

Runner = Callable[[Coroutine[Any, Any, None]], None]
HEADER = struct.Struct(">hhi")
CORRELATION = struct.Struct(">i")


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Runner:
    """Each test on both event loops: the gateway runs on uvloop, writes differ between them."""
    return asyncio.run if request.param == "asyncio" else uvloop.run


def request_frame(correlation_id: int, body: bytes, api_key: int = 3) -> bytes:
    return HEADER.pack(api_key, 12, correlation_id) + body


class Peer:
    """The broker's end of the socket pair."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def request(self) -> tuple[int, bytes]:
        """(correlation id, the frame with its id bytes zeroed) of the next request."""
        frame = await self.reader.readexactly(SIZE.unpack(await self.reader.readexactly(4))[0])
        return HEADER.unpack_from(frame)[2], frame[:4] + bytes(4) + frame[8:]

    def answer(self, correlation_id: int, body: bytes) -> None:
        self.writer.write(SIZE.pack(4 + len(body)) + CORRELATION.pack(correlation_id) + body)


class Linked:
    def __init__(self) -> None:
        self.closed: list[str] = []

    async def __aenter__(self) -> tuple[UpstreamLink, Peer, list[str]]:
        ours, theirs = socket.socketpair()
        reader, writer = await asyncio.open_connection(sock=ours)
        self.peer = Peer(*await asyncio.open_connection(sock=theirs))
        self.link = UpstreamLink(
            reader,
            writer,
            HostPort(host="peer", port=0),
            GatewayMetrics(),
            TaskSet(),
            self.closed.append,
        )
        return self.link, self.peer, self.closed

    async def __aexit__(self, *exc: object) -> None:
        await self.link.close()
        self.peer.writer.close()


def zeroed(frame: bytes) -> bytes:
    return frame[:4] + bytes(4) + frame[8:]


def test_the_peer_sees_the_links_ids_and_callers_get_theirs_back(run: Runner) -> None:
    async def scenario() -> None:
        async with Linked() as (link, peer, closed):
            bodies = [b"first", b"x" * (4 << 20), b"third"]  # the same client id each time
            futures = [
                link.send(3, 7, request_frame(7, body), expect_response=True) for body in bodies
            ]
            seen = []
            for body in bodies:
                correlation_id, frame = await peer.request()
                assert frame == zeroed(request_frame(7, body))  # only the id differs
                seen.append(correlation_id)
            assert len(set(seen)) == 3 and 7 not in seen
            for correlation_id in seen:
                peer.answer(correlation_id, b"answer to " + str(correlation_id).encode())
            for correlation_id, future in zip(seen, futures, strict=True):
                assert future is not None
                assert await future == CORRELATION.pack(7) + b"answer to %d" % correlation_id
            assert not closed

    run(scenario())


def test_an_internal_request_carries_its_id_upstream_and_back(run: Runner) -> None:
    async def scenario() -> None:
        async with Linked() as (link, peer, _):
            link.send(0, 1, request_frame(1, b"client", 0), expect_response=False)
            correlation_id = link.next_internal_correlation_id()
            future = link.send(
                3, correlation_id, request_frame(correlation_id, b"own"), expect_response=True
            )
            assert future is not None
            _, (upstream_id, _) = await peer.request(), await peer.request()
            assert upstream_id == correlation_id
            peer.answer(upstream_id, b"ok")
            assert await future == CORRELATION.pack(correlation_id) + b"ok"

    run(scenario())


@pytest.mark.parametrize("peer_answers_acks_zero", [True, False], ids=["tansu", "kafka"])
def test_acks_zero_answers_are_dropped_and_no_others(
    run: Runner, peer_answers_acks_zero: bool
) -> None:
    async def scenario() -> None:
        async with Linked() as (link, peer, closed):
            plan = [False] * 5000 + [True, False, False, True, False, True]  # expect_response
            futures = [
                link.send(0, 9, request_frame(9, b"%d" % i, 0), expect_response=expects)
                for i, expects in enumerate(plan)
            ]
            assert len(link._pending) == 6  # runs of acks=0 ids, not one entry each
            awaited = []
            for expects in plan:
                correlation_id, _ = await peer.request()
                if expects:
                    awaited.append(correlation_id)
                if expects or peer_answers_acks_zero:
                    peer.answer(correlation_id, b"answer to %d" % correlation_id)
            answers = [await f for f in futures if f is not None]
            assert answers == [CORRELATION.pack(9) + b"answer to %d" % c for c in awaited]
            assert not link._pending
            assert not closed and not link.closed

    run(scenario())


def test_ids_go_round_the_int32_range(run: Runner) -> None:
    async def scenario() -> None:
        async with Linked() as (link, peer, closed):
            link._next_correlation = 2**31 - 2
            futures = [
                link.send(0, 5, request_frame(5, b"p", 0), expect_response=expects)
                for expects in (False, False, True, False, True)
            ]
            seen = [(await peer.request())[0] for _ in futures]
            assert seen == [2**31 - 2, 2**31 - 1, 0, 1, 2]
            for correlation_id in seen[2:]:  # Kafka: the first two acks=0 get no answer
                peer.answer(correlation_id, b"")
            assert [await f for f in futures if f is not None] == [CORRELATION.pack(5)] * 2
            assert not closed

    run(scenario())


@pytest.mark.parametrize(
    ("answer_with", "reason"),
    [
        (lambda seen: seen + 1, "broker answered correlation id"),  # out of turn
        (lambda seen: 7, "broker answered correlation id 7"),  # the client's own id
        (lambda seen: -1, "broker answered correlation id -1"),
    ],
    ids=["next", "clients", "negative"],
)
def test_an_answer_to_nothing_pending_closes_the_link(
    run: Runner, answer_with: Callable[[int], int], reason: str
) -> None:
    async def scenario() -> None:
        async with Linked() as (link, peer, closed):
            link.send(0, 7, request_frame(7, b"acks0", 0), expect_response=False)
            future = link.send(3, 7, request_frame(7, b"metadata"), expect_response=True)
            await peer.request()
            seen, _ = await peer.request()
            peer.answer(answer_with(seen), b"")
            with pytest.raises(UpstreamClosed, match=reason):
                await asyncio.wait_for(future, 5)  # type: ignore[arg-type]
            assert link.closed and closed and reason in closed[0]
            with pytest.raises(UpstreamClosed):
                link.send(3, 8, request_frame(8, b""), expect_response=True)

    run(scenario())


def test_an_answer_when_nothing_is_pending_closes_the_link(run: Runner) -> None:
    async def scenario() -> None:
        async with Linked() as (link, peer, closed):
            peer.answer(1, b"")
            await asyncio.wait_for(_closed(link), 5)
            assert "nobody asked for" in closed[0]

    run(scenario())


async def _closed(link: UpstreamLink) -> None:
    while not link.closed:
        await asyncio.sleep(0.01)
