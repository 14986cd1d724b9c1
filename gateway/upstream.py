"""The link from one client connection to its broker.

Kafka answers requests on a connection in the order it received them, so responses are
matched to requests first-in first-out, and the correlation id of each is checked.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Callable, Sequence

from protocol.framing import SIZE, FrameRejected, response_correlation_id

from .config import HostPort
from .metrics import GatewayMetrics
from .tasks import TaskSet

log = logging.getLogger(__name__)


class UpstreamClosed(Exception):
    """The broker connection is gone; every request still waiting on it fails with this."""


class UpstreamLink:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        address: HostPort,
        metrics: GatewayMetrics,
        tasks: TaskSet,
        on_close: Callable[[str], None],
    ) -> None:
        self.address = address
        self._reader = reader
        self._writer = writer
        self._metrics = metrics
        self._on_close = on_close
        # (correlation id, future or None, api key, sent at). None marks a request that
        # expects no response (acks=0): Kafka sends none, but some brokers (Tansu) answer
        # anyway, and that answer is dropped here instead of desynchronising the link.
        self._pending: collections.deque[tuple[int, asyncio.Future[bytes] | None, int, float]] = (
            collections.deque()
        )
        self._closed: str | None = None
        self._internal_correlation = 0x40000000
        self._read_task = tasks.spawn(self._read_loop(), name=f"upstream-read-{address}")

    @classmethod
    async def open(
        cls,
        targets: Sequence[HostPort],
        timeout_s: float,
        metrics: GatewayMetrics,
        tasks: TaskSet,
        on_close: Callable[[str], None],
    ) -> UpstreamLink:
        """Connect to the first target that accepts.

        :raises UpstreamClosed: when none does within the timeout.
        """
        errors = []
        for target in targets:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(target.host, target.port, limit=2**20), timeout_s
                )
            except (OSError, TimeoutError) as exc:
                errors.append(f"{target}: {exc or type(exc).__name__}")
                continue
            return cls(reader, writer, target, metrics, tasks, on_close)
        metrics.upstream_failures.labels("connect").inc()
        raise UpstreamClosed("no broker reachable: " + "; ".join(errors or ["no targets"]))

    @property
    def closed(self) -> bool:
        return self._closed is not None

    def send(
        self, api_key: int, correlation_id: int, frame: bytes, *, expect_response: bool
    ) -> asyncio.Future[bytes] | None:
        """Write one request frame (without size prefix) upstream.

        Returns the future of its response frame (without size prefix), or None when the
        request expects no response (Produce with acks=0).

        :raises UpstreamClosed: when the link is already closed.
        """
        if self._closed is not None:
            raise UpstreamClosed(self._closed)
        self._writer.writelines((SIZE.pack(len(frame)), frame))
        if not expect_response:
            self._pending.append((correlation_id, None, api_key, 0.0))
            return None
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending.append((correlation_id, future, api_key, time.perf_counter()))
        return future

    async def drain(self) -> None:
        """Wait while the socket's write buffer is above its high-water mark."""
        if self._closed is None:
            try:
                await self._writer.drain()
            except (ConnectionError, RuntimeError) as exc:
                self._shut(f"write failed: {exc}")

    def next_internal_correlation_id(self) -> int:
        """A correlation id for a request the gateway itself sends on this link."""
        self._internal_correlation = (self._internal_correlation + 1) & 0x7FFFFFFF
        return self._internal_correlation

    async def _read_loop(self) -> None:
        reason = "broker closed the connection"
        try:
            while True:
                size = SIZE.unpack(await self._reader.readexactly(4))[0]
                if size < 4:
                    reason = f"broker sent a frame of {size} bytes"
                    break
                frame = await self._reader.readexactly(size)
                got = response_correlation_id(frame)
                while self._pending and self._pending[0][1] is None and self._pending[0][0] != got:
                    self._pending.popleft()  # an acks=0 request that got no answer, as in Kafka
                if not self._pending:
                    reason = "broker sent a response nobody asked for"
                    break
                expected, future, api_key, started = self._pending.popleft()
                if future is None:
                    continue  # an answer to acks=0 that no client waits for
                if got != expected:
                    reason = f"broker answered correlation id {got}, expected {expected}"
                    break
                self._metrics.observe_latency(api_key, time.perf_counter() - started)
                if not future.done():
                    future.set_result(frame)
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
            _, future, _, _ = self._pending.popleft()
            if future is not None and not future.done():
                future.set_exception(UpstreamClosed(reason))
                future.exception()  # retrieved here: the write loop may never get to it
        self._writer.close()
        self._on_close(reason)

    async def close(self) -> None:
        if self._closed is None:
            self._read_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._read_task
            self._shut("gateway closed the connection")
