"""One client connection: read frames, hand each to its handler, forward or answer, and
write the answers back in request order. See the package docstring for the contracts."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

from protocol.codec import Undecodable
from protocol.framing import SIZE, FrameRejected, check_frame_size, parse_request_header
from protocol.versions import api_name

from .cluster import UpstreamCluster
from .config import GatewayConfig, HostPort
from .engine import RequestContext, Session
from .handlers.base import Registration
from .metrics import GatewayMetrics
from .outcomes import Answer, Close, Forward, Outcome
from .principal import ssl_principal
from .tasks import TaskSet
from .upstream import UpstreamClosed, UpstreamLink

log = logging.getLogger(__name__)

_END = object()
Slot = Awaitable[bytes]


class ClientConnection:
    def __init__(
        self,
        *,
        config: GatewayConfig,
        table: Mapping[int, Registration],
        metrics: GatewayMetrics,
        tasks: TaskSet,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        listener: str,
        targets: Callable[[], Sequence[HostPort]],
    ) -> None:
        self._config = config
        self._reader = reader
        self._writer = writer
        self._listener = listener
        self._targets = targets
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._metrics = metrics
        self._tasks = tasks
        self._limits = config.limits
        self._table = table
        self._slots: asyncio.Queue[object] = asyncio.Queue(self._limits.max_in_flight_requests)
        self._closing = False
        self._read_task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        """Serve the connection until either side closes it."""
        self._metrics.connections_total.labels(self._listener).inc()
        self._metrics.connections_active.inc()
        tasks = self._tasks
        try:
            try:
                upstream = await UpstreamLink.open(
                    self._targets(),
                    self._config.upstream.connect_timeout_s,
                    self._metrics,
                    tasks,
                    self._upstream_closed,
                )
            except UpstreamClosed as exc:
                log.warning("%s: closing client connection: %s", self.peer, exc)
                return
            session = Session(principal=ssl_principal(self._writer.get_extra_info("peercert")))
            writer_task = tasks.spawn(self._write_loop(), name=f"write-{self.peer}")
            self._read_task = tasks.spawn(
                self._read_loop(upstream, session), name=f"read-{self.peer}"
            )
            if self._closing:  # shutdown began while connecting
                self._read_task.cancel()
            await asyncio.wait({self._read_task})
            # Reading has stopped (client closed, bad input, shutdown or upstream gone):
            # the answers already in flight still leave, then the connection closes.
            self._closing = True
            self._slots_put_end()
            done, _ = await asyncio.wait({writer_task}, timeout=self._config.shutdown_timeout_s)
            if not done:
                writer_task.cancel()
            await upstream.close()
        finally:
            self._metrics.connections_active.dec()
            self._writer.close()

    def stop_reading(self) -> None:
        """Stop taking requests; what is in flight is still answered (graceful shutdown)."""
        self._closing = True
        if self._read_task is not None and not self._read_task.done():
            self._read_task.cancel()

    def _upstream_closed(self, reason: str) -> None:
        if not self._closing:
            log.info("%s: upstream gone (%s): closing client connection", self.peer, reason)
            self.stop_reading()

    def _reject(self, reason: str, metric_reason: str) -> None:
        self._metrics.rejected_frames.labels(metric_reason).inc()
        log.warning("%s: closing connection: %s", self.peer, reason)

    def _slots_put_end(self) -> None:
        try:
            self._slots.put_nowait(_END)
        except asyncio.QueueFull:
            # The writer is still busy; it stops at the first slot that fails or at this
            # marker, queued once there is room.
            self._tasks.spawn(self._slots.put(_END), name=f"end-{self.peer}")

    async def _read_loop(self, upstream: UpstreamLink, session: Session) -> None:
        reader, limits, metrics, table = self._reader, self._limits, self._metrics, self._table
        cluster = UpstreamCluster(upstream, self._config.upstream.request_timeout_s)
        while not self._closing:
            try:
                prefix = await reader.readexactly(4)
            except asyncio.IncompleteReadError as exc:
                if exc.partial:
                    self._reject("truncated frame size", "truncated")
                return
            except ConnectionError:
                return
            size = SIZE.unpack(prefix)[0]
            try:
                check_frame_size(size, limits.max_frame_bytes)
                frame = await reader.readexactly(size)
                header = parse_request_header(frame)
            except FrameRejected as exc:
                self._reject(exc.detail, exc.reason)
                return
            except asyncio.IncompleteReadError as exc:
                self._reject(f"truncated frame: {len(exc.partial)} of {size} bytes", "truncated")
                return
            except ConnectionError:
                return
            metrics.bytes_in.inc(size + 4)
            metrics.count_request(header.api_key, header.api_version)

            registration = table.get(header.api_key)
            if registration is None:
                outcome: Outcome = Forward(frame=frame)
            else:
                if (
                    header.api_key != 18
                    and registration.versions is not None
                    and header.api_version not in registration.versions
                ):
                    self._reject(
                        f"{api_name(header.api_key)} v{header.api_version} is not a version the "
                        f"gateway advertises",
                        "unsupported_version",
                    )
                    return
                ctx = RequestContext(header=header, client_address=self.peer, session=session)
                try:
                    outcome = await registration.handler(ctx, cluster, frame)
                except Undecodable as exc:
                    outcome = Close(
                        reason=f"{api_name(header.api_key)} v{header.api_version}: {exc}",
                        metric_reason="undecodable",
                    )
                except UpstreamClosed as exc:
                    outcome = Close(
                        reason=f"{api_name(header.api_key)}: cannot learn the cluster's state: "
                        f"{exc}",
                        metric_reason="upstream_state",
                    )

            if isinstance(outcome, Forward):
                try:
                    future = upstream.send(
                        header.api_key,
                        header.correlation_id,
                        outcome.frame,
                        expect_response=outcome.expect_response,
                    )
                except UpstreamClosed:
                    return
                if future is not None:
                    slot: Slot = future
                    if outcome.on_response is not None:
                        slot = self._tasks.spawn(
                            _transform(future, outcome.on_response), name=f"rewrite-{self.peer}"
                        )
                    await self._slots.put(slot)
                await upstream.drain()
            elif isinstance(outcome, Answer):
                done: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
                done.set_result(outcome.frame)
                await self._slots.put(done)
            elif isinstance(outcome, Close):
                self._reject(outcome.reason, outcome.metric_reason)
                return

    async def _write_loop(self) -> None:
        writer, metrics = self._writer, self._metrics
        while True:
            slot = await self._slots.get()
            if slot is _END:
                return
            try:
                response = await slot  # type: ignore[misc]
            except UpstreamClosed:
                self._writer.transport.abort()  # as a dead broker's connection would end
                return
            except Exception as exc:  # a rewrite that failed: never send the raw answer
                log.error(
                    "%s: closing connection: cannot process the broker's answer: %r", self.peer, exc
                )
                self._metrics.rejected_frames.labels("bad_response").inc()
                self._writer.transport.abort()
                self.stop_reading()
                return
            try:
                writer.writelines((SIZE.pack(len(response)), response))
                metrics.bytes_out.inc(len(response) + 4)
                await writer.drain()
            except (ConnectionError, RuntimeError):
                self.stop_reading()
                return


async def _transform(
    future: Awaitable[bytes], on_response: Callable[[bytes], Awaitable[bytes]]
) -> bytes:
    return await on_response(await future)
