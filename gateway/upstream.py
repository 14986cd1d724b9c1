"""The link from one client connection to its broker.

Correlation ids: every request written upstream carries an id the link assigns itself, from
one counter (0 .. 2**31-1, then round again) that no two pending requests share; the client's
own id never reaches the broker. Kafka answers requests on a connection in the order it
received them, so answers are matched first-in first-out and each must carry the id its
request was sent with; the answer a caller gets carries the caller's id again. Any other
answer closes the link.

acks=0: Kafka sends no answer to a Produce with acks=0; some brokers (Tansu) answer anyway.
Such requests are remembered as runs of consecutive ids, so an answer carrying one of them is
known exactly for what it is and dropped, and a long acks=0 stream holds no memory per request.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from protocol.framing import SIZE, FrameRejected, response_correlation_id

from .config import HostPort
from .metrics import GatewayMetrics
from .tasks import TaskSet
from .upstream_security import UpstreamSecurity

log = logging.getLogger(__name__)

_ID_SPACE: Final = 1 << 31
"""The link's correlation ids are 0 .. 2**31-1 (Kafka's is an int32; negatives left out)."""
_CORRELATION: Final = struct.Struct(">i")
_PREFIX: Final = struct.Struct(">i4si")
"""Size prefix, api_key and api_version as the request had them, the link's correlation id."""
_HEADER_START: Final = 8
"""api_key i16, api_version i16, correlation_id i32: every request header starts so."""


class UpstreamClosed(Exception):
    """The broker connection is gone; every request still waiting on it fails with this."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Awaited:
    """A request whose answer someone waits for."""

    correlation_id: int
    """The link's id, the one the broker saw."""
    answer_correlation: bytes
    """The caller's id, packed: the answer is handed back with it."""
    future: asyncio.Future[bytes]
    api_key: int
    sent_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class _Unanswered:
    """Requests that expect no answer (acks=0), sent with the ids ``first`` .. ``first +
    count - 1`` (modulo the id space)."""

    first: int
    count: int

    @property
    def following(self) -> int:
        """The id after the run's last."""
        return (self.first + self.count) % _ID_SPACE

    def holds(self, correlation_id: int) -> bool:
        return correlation_id >= 0 and (correlation_id - self.first) % _ID_SPACE < self.count


class _Unexpected(Exception):
    """An answer that matches no pending request: the link is no longer trustworthy."""


class UpstreamLink:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        address: HostPort,
        metrics: GatewayMetrics,
        tasks: TaskSet,
        on_close: Callable[[str], None],
        may_read: asyncio.Event | None = None,
    ) -> None:
        self.address = address
        # Set while the client takes its answers: the next answer is read from the broker
        # only then, so a client that stops reading holds at most the answer being written
        # and the one read before it, not one per request in flight.
        self._may_read = may_read
        self._reader = reader
        self._writer = writer
        self._metrics = metrics
        self._on_close = on_close
        # In the order sent, so in id order: the oldest id pending is at the left.
        self._pending: collections.deque[_Awaited | _Unanswered] = collections.deque()
        # librdkafka, kafka-python and aiokafka count from 1 on each connection too; while
        # the ids agree, an answer is handed back without the copy that patching its id costs.
        self._next_correlation = 1
        self._closed: str | None = None
        self._read_task = tasks.spawn(self._read_loop(), name=f"upstream-read-{address}")

    @classmethod
    async def open(
        cls,
        targets: Sequence[HostPort],
        timeout_s: float,
        metrics: GatewayMetrics,
        tasks: TaskSet,
        on_close: Callable[[str], None],
        security: UpstreamSecurity | None = None,
        may_read: asyncio.Event | None = None,
    ) -> UpstreamLink:
        """Connect to the first target that accepts (over TLS when ``security`` says so: the
        handshake is part of the connection and of its timeout). ``may_read``: answers are
        read from the broker only while it is set.

        :raises UpstreamClosed: when none does within the timeout.
        """
        errors = []
        for target in targets:
            tls = security.connect_kwargs(target.host) if security is not None else {}
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(target.host, target.port, limit=2**20, **tls),
                    timeout_s,
                )
            except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
                errors.append(f"{target}: {exc or type(exc).__name__}")
                continue
            return cls(reader, writer, target, metrics, tasks, on_close, may_read)
        metrics.upstream_failures.labels("connect").inc()
        raise UpstreamClosed("no broker reachable: " + "; ".join(errors or ["no targets"]))

    @property
    def closed(self) -> bool:
        return self._closed is not None

    def send(
        self, api_key: int, correlation_id: int, frame: bytes, *, expect_response: bool
    ) -> asyncio.Future[bytes] | None:
        """Write one request frame (without size prefix) upstream, with a correlation id the
        link assigns in place of the one in ``frame`` (the frame itself is not copied).

        Returns the future of its response frame (without size prefix), which carries
        ``correlation_id`` (the caller's id), or None when the request expects no response
        (Produce with acks=0).

        :raises UpstreamClosed: when the link is already closed.
        :raises ValueError: for a frame too short to hold a request header.
        """
        if self._closed is not None:
            raise UpstreamClosed(self._closed)
        if len(frame) < _HEADER_START:
            raise ValueError(f"a request frame of {len(frame)} bytes has no header")
        answer_correlation = _CORRELATION.pack(correlation_id)
        upstream_id = self._assign()
        self._writer.writelines(
            (
                _PREFIX.pack(len(frame), bytes(frame[:4]), upstream_id),
                memoryview(frame)[_HEADER_START:],
            )
        )
        if not expect_response:
            tail = self._pending[-1] if self._pending else None
            if isinstance(tail, _Unanswered) and tail.following == upstream_id:
                self._pending[-1] = _Unanswered(first=tail.first, count=tail.count + 1)
            else:
                self._pending.append(_Unanswered(first=upstream_id, count=1))
            return None
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending.append(
            _Awaited(
                correlation_id=upstream_id,
                answer_correlation=answer_correlation,
                future=future,
                api_key=api_key,
                sent_at=time.perf_counter(),
            )
        )
        return future

    def _assign(self) -> int:
        """The next id, one no pending request holds.

        The oldest pending id is the only one the counter can come round to. An acks=0
        request 2**31 requests old is forgotten (its answer, if any, would long have come);
        a request still awaited after 2**31 others closes the link.

        :raises UpstreamClosed: in that last case.
        """
        upstream_id = self._next_correlation
        if self._pending:
            head = self._pending[0]
            if isinstance(head, _Unanswered) and head.first == upstream_id:
                if head.count == 1:
                    self._pending.popleft()
                else:
                    first = (head.first + 1) % _ID_SPACE
                    self._pending[0] = _Unanswered(first=first, count=head.count - 1)
            elif isinstance(head, _Awaited) and head.correlation_id == upstream_id:
                reason = f"correlation id {upstream_id} still awaited after 2**31 requests"
                self._shut(reason)
                raise UpstreamClosed(reason)
        self._next_correlation = (upstream_id + 1) % _ID_SPACE
        return upstream_id

    async def drain(self, timeout_s: float | None = None) -> None:
        """Wait while the socket's write buffer is above its high-water mark; for at most
        ``timeout_s``, after which the link is closed: a broker that takes none of a request
        for that long (Kafka reads nothing more on a connection while it holds a request, a
        Fetch for its max wait) would otherwise have the request, and the request memory it
        holds, kept for as long as it pleases."""
        if self._closed is not None:
            return
        transport = self._writer.transport
        try:
            if timeout_s is None or (
                transport.get_write_buffer_size() <= transport.get_write_buffer_limits()[0]
            ):
                await self._writer.drain()  # the common case: nothing to wait for, no timer
                return
            async with asyncio.timeout(timeout_s):
                await self._writer.drain()
        except TimeoutError:
            self._shut(f"the broker took none of a request for {timeout_s} s")
        except (ConnectionError, RuntimeError) as exc:
            self._shut(f"write failed: {exc}")

    def next_internal_correlation_id(self) -> int:
        """A correlation id for a request the gateway itself sends on this link: the id
        :meth:`send` gives the next request. :meth:`send` assigns every request's id itself,
        so this is only the id the answer is handed back with; any id would do."""
        return self._next_correlation

    def _take(self, got: int) -> _Awaited | None:
        """The pending request the answer carrying ``got`` belongs to, removed from the
        pending ones; None when it answers a request that expects no answer (acks=0).

        :raises _Unexpected: when it belongs to none.
        """
        pending = self._pending
        while pending:
            head = pending[0]
            if isinstance(head, _Awaited):
                if head.correlation_id != got:
                    raise _Unexpected(
                        f"broker answered correlation id {got}, expected {head.correlation_id}"
                    )
                pending.popleft()
                return head
            if head.holds(got):  # a broker that answers acks=0 (Tansu): dropped
                left = head.count - (got - head.first) % _ID_SPACE - 1
                if left:
                    pending[0] = _Unanswered(first=(got + 1) % _ID_SPACE, count=left)
                else:
                    pending.popleft()
                return None
            pending.popleft()  # acks=0 requests that got no answer, as in Kafka
        raise _Unexpected(f"broker sent a response nobody asked for (correlation id {got})")

    async def _next_size(self) -> int:
        """The next answer's size prefix, read once the client takes its answers."""
        if self._may_read is not None and not self._may_read.is_set():
            await self._may_read.wait()
        return int(SIZE.unpack(await self._reader.readexactly(4))[0])

    async def _read_loop(self) -> None:
        reason = "broker closed the connection"
        try:
            while True:
                size = await self._next_size()
                if size < 4:
                    reason = f"broker sent a frame of {size} bytes"
                    break
                frame = await self._reader.readexactly(size)
                request = self._take(response_correlation_id(frame))
                if request is None:
                    continue
                self._metrics.observe_latency(
                    request.api_key, time.perf_counter() - request.sent_at
                )
                if not request.future.done():
                    if not frame.startswith(request.answer_correlation):
                        # The caller's id in place of the link's costs one copy of the
                        # answer, as much again as readexactly's own (measured: 0.02 ms for
                        # 1 MiB, 30 ms for a 64 MiB fetch answer, mostly fresh pages).
                        frame = b"".join((request.answer_correlation, memoryview(frame)[4:]))
                    request.future.set_result(frame)
        except _Unexpected as exc:
            reason = str(exc)
        except asyncio.IncompleteReadError:
            pass
        except (ConnectionError, OSError, FrameRejected) as exc:
            reason = f"read failed: {exc}"
        except asyncio.CancelledError:
            reason = "gateway closed the connection"
        self._shut(reason)

    def _shut(self, reason: str) -> None:
        if self._closed is not None:
            return
        self._closed = reason
        if reason != "gateway closed the connection":
            self._metrics.upstream_failures.labels("dropped").inc()
        while self._pending:
            request = self._pending.popleft()
            if isinstance(request, _Awaited) and not request.future.done():
                request.future.set_exception(UpstreamClosed(reason))
                request.future.exception()  # retrieved here: the write loop may never get to it
        self._writer.close()
        self._on_close(reason)

    async def close(self) -> None:
        if self._closed is None:
            self._read_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._read_task
            self._shut("gateway closed the connection")
