"""One client connection: read frames, hand each to its handler, forward or answer, and
write the answers back in request order. See the package docstring for the contracts."""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from protocol.codec import Undecodable
from protocol.framing import (
    PRE_AUTH_MAX_FRAME_BYTES,
    SIZE,
    FrameRejected,
    RequestHeader,
    check_frame_size,
    parse_request_header,
)
from protocol.versions import API_VERSIONS_KEY, UNREAD_API_KEY, api_name
from protocol.x500 import UnreadableName

from .cluster import UpstreamCluster
from .config import UNLIMITED, HostPort, LimitsConfig
from .decisions import BROKER, SASL_GATE, Subject
from .engine import RequestContext, Session
from .generation import Generation
from .handlers.base import Registration
from .limits import AuditPace, RequestMemory, client_key
from .metrics import GatewayMetrics
from .outcomes import Answer, Close, Forward, Outcome
from .principal import NoMatchingRule, SaslState, ssl_principal
from .tasks import TaskSet
from .upstream import UpstreamClosed, UpstreamLink
from .upstream_security import UpstreamSecurity

log = logging.getLogger(__name__)

_END = object()


class ClientConnection:
    def __init__(
        self,
        *,
        generation: Callable[[], Generation],
        metrics: GatewayMetrics,
        tasks: TaskSet,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        listener: str,
        targets: Callable[[], Sequence[HostPort]],
        memory: RequestMemory,
        audit_pace: AuditPace | None = None,
        upstream_security: UpstreamSecurity | None = None,
    ) -> None:
        self._audit_pace = audit_pace
        self._generation = generation
        self._upstream_security = upstream_security
        self._reader = reader
        self._writer = writer
        self._listener = listener
        self._targets = targets
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._host_key = client_key(None, self.peer)
        self._metrics = metrics
        self._tasks = tasks
        # A reload changes max_in_flight_requests for connections accepted after it.
        in_flight = generation().config.limits.max_in_flight_requests
        self._slots: asyncio.Queue[object] = asyncio.Queue(in_flight)
        # Taken before a request is read, given back once its answer is written (or at once
        # when it gets none): the queue alone let the answer the writer awaits and the request
        # sent before the queue was found full come on top (the limit plus two at the broker),
        # and taking it only once the request had been read and judged held that request's
        # memory for as long as the broker held the answers before it.
        self._in_flight = asyncio.Semaphore(in_flight)
        self._slot_used = False
        """Whether the request being served handed its in-flight slot to an answer."""
        self._serving = False
        """Whether a request read whole is being judged and carried out."""
        self._closing = False
        self._read_task: asyncio.Task[None] | None = None
        self._memory = memory
        self._upstream: _Upstream | None = None
        # The idle clock (connections.max.idle.ms): it runs while the connection waits on the
        # client with no answer due, from the moment it began to wait or the last answer left.
        self._waiting_on_client = False
        self._answers_due = 0
        # Set while no answer is due: a request whose handler asks for it
        # (Registration.after_answers_taken) is judged only then.
        self._no_answers_due = asyncio.Event()
        self._no_answers_due.set()
        self._last_activity = time.monotonic()
        self._idle_timer: asyncio.TimerHandle | None = None
        # When the body of the frame being received began to be read (its memory taken), None
        # between frames: a frame must arrive whole within connections.max.idle.ms of it,
        # however it trickles in and whether or not an answer is due.
        self._frame_started: float | None = None
        # The client id and each API's version the client last sent: what an authentication
        # refusal found in the writer (an answer's rewrite) is audited with.
        self._client_id: str | None = None
        self._api_versions: dict[int, int] = {}
        # Cleared while an answer waits for the client to take it: the upstream link reads
        # no further answer from the broker meanwhile (see UpstreamLink).
        self._client_taking = asyncio.Event()
        self._client_taking.set()

    async def run(self) -> None:
        """Serve the connection until either side closes it."""
        self._metrics.connections_total.labels(self._listener).inc()
        self._metrics.connections_active.inc()
        tasks = self._tasks
        try:
            session = self._session()
            if session is None:
                return
            writer_task = tasks.spawn(self._write_loop(session), name=f"write-{self.peer}")
            self._read_task = tasks.spawn(self._read_loop(session), name=f"read-{self.peer}")
            if self._closing:  # shutdown began before the connection started
                self._read_task.cancel()
            if self._limits.connections_max_idle_ms != UNLIMITED:
                self._check_idle()
            # (a reload that turns the idle limit on applies to connections accepted after it)
            await asyncio.wait({self._read_task})
            # Reading has stopped (client closed, bad input, idle, shutdown or upstream gone):
            # the answers already in flight still leave, then the connection closes.
            self._closing = True
            self._slots_put_end()
            done, _ = await asyncio.wait(
                {writer_task}, timeout=self._generation().config.shutdown_timeout_s
            )
            if not done:
                writer_task.cancel()
            if self._upstream is not None:
                await self._upstream.link.close()
        finally:
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            self._metrics.connections_active.dec()
            self._writer.close()

    def _session(self) -> Session | None:
        """The connection's session, its principal from the TLS client certificate; None when
        the certificate's subject maps to no principal (Kafka fails such a handshake)."""
        config = self._generation().config  # tls and sasl: fixed until a restart
        tls = config.tls
        mapper = tls.principal_mapper if tls is not None else None
        try:
            principal = ssl_principal(self._peer_certificate(), mapper)
        except NoMatchingRule as exc:
            self._reject(f"{exc}: authentication failed", "principal_mapping")
            return None
        except UnreadableName as exc:
            self._reject(
                f"a client certificate subject the gateway cannot name as Kafka does ({exc}): "
                "authentication failed",
                "principal_mapping",
            )
            return None
        sasl = SaslState(
            config.sasl.oauthbearer_sub_claim_name,
            required=config.sasl.client_auth == "required",
        )
        return Session(principal=principal, sasl=sasl)

    def _peer_certificate(self) -> bytes | None:
        """The DER of the client's verified certificate; None without one. Its subject is
        read from the DER: the parsed form (``getpeercert()``) has lost what Java prints
        (string types, the encoding of other attributes' values, empty RDNs)."""
        if not self._writer.get_extra_info("peercert"):  # empty unless verified
            return None
        ssl_object = self._writer.get_extra_info("ssl_object")
        if ssl_object is None:
            return None
        certificate: bytes | None = ssl_object.getpeercert(binary_form=True)
        return certificate

    @property
    def _limits(self) -> LimitsConfig:
        """The limits in force now (a reload changes them for the next request)."""
        return self._generation().config.limits

    def stop_reading(self, *, finish_request: bool = False) -> None:
        """Stop taking requests; what is in flight is still answered. ``finish_request``
        (graceful shutdown): a request already read whole is first judged, carried out and
        answered (cancelled half-way, its client lost the answer, not knowing what had been
        done, and a decision could be audited for a request never carried out)."""
        self._closing = True
        task = self._read_task
        if task is None or task.done():
            return
        if finish_request and self._serving:
            return  # the read loop stops after it: it looks at _closing before reading on
        task.cancel()

    def _check_idle(self) -> None:
        """Close the connection once it has been idle for connections.max.idle.ms (Kafka's
        meaning: nothing in flight, nothing read); otherwise look again when it could be."""
        if self._closing:
            return
        if self._limits.connections_max_idle_ms == UNLIMITED:  # a reload turned it off
            return
        idle_s = self._limits.connections_max_idle_ms / 1000
        now = time.monotonic()
        quiet = now - self._last_activity
        idle = self._waiting_on_client and not self._answers_due
        started = self._frame_started
        receiving = 0.0 if started is None else now - started
        if receiving >= idle_s:
            # Each byte of a trickle resets the idle clock: the frame's memory (taken at its
            # size prefix) stayed held for as long as a client kept it up.
            self._metrics.connections_idle_closed.inc()
            log.info(
                "%s: closing connection: a frame not received whole %.1f s after its size "
                "prefix (connections.max.idle.ms)",
                self.peer,
                receiving,
            )
            self.stop_reading()
            return
        if idle and quiet >= idle_s:
            self._metrics.connections_idle_closed.inc()
            log.info(
                "%s: closing connection: idle for %.1f s (connections.max.idle.ms)",
                self.peer,
                quiet,
            )
            self.stop_reading()
            return
        again = idle_s - quiet if quiet < idle_s else idle_s
        if started is not None:
            again = min(again, idle_s - receiving)
        self._idle_timer = asyncio.get_running_loop().call_later(again, self._check_idle)

    async def _client_took(self) -> bool:
        """Wait until the client has taken the answer written (the transport's buffer is
        below its high-water mark again). False when it took none of it for
        connections.max.idle.ms: Kafka counts a connection whose answer goes unread as idle
        too, so it is closed rather than held open, answers and all."""
        transport = self._writer.transport
        if transport.get_write_buffer_size() <= transport.get_write_buffer_limits()[0]:
            # At or below the low-water mark writing is not paused: the answer has left (the
            # common case, costing nothing more here), and drain() does not wait.
            await self._writer.drain()
            return True
        self._client_taking.clear()
        try:
            limit_ms = self._limits.connections_max_idle_ms
            if limit_ms == UNLIMITED:
                await self._writer.drain()
                return True
            async with asyncio.timeout(limit_ms / 1000):  # no task per answer, as wait_for makes
                await self._writer.drain()
            return True
        except TimeoutError:
            self._metrics.connections_idle_closed.inc()
            log.info(
                "%s: closing connection: an answer not taken for %.1f s (connections.max.idle.ms)",
                self.peer,
                self._limits.connections_max_idle_ms / 1000,
            )
            self._writer.transport.abort()
            self.stop_reading()
            return False
        finally:
            self._client_taking.set()

    async def _receive(self, read: Awaitable[bytes]) -> bytes:
        """``read`` from the client, with the idle clock running meanwhile."""
        self._waiting_on_client = True
        self._last_activity = time.monotonic()
        try:
            return await read
        finally:
            self._waiting_on_client = False

    async def _audit_close(
        self, generation: Generation, header: RequestHeader, session: Session, close: Close
    ) -> None:
        """Audit a request refused by closing the connection, when the gateway refused it (see
        :data:`_AUDITED_CLOSES`)."""
        judged = _AUDITED_CLOSES.get(close.metric_reason)
        if judged is None:
            return
        what, policy = judged
        name = (session.sasl.claimed_user or "") if what is _AUTHENTICATION else ""
        subject = self._subject(header.api_key, session.principal, what, name)
        await self._audit(generation, subject, policy, close.reason)

    def _subject(
        self, api_key: int, principal: str | None, what: tuple[str, str], resource_name: str
    ) -> Subject:
        resource_type, action = what
        return Subject(
            client_address=self.peer,
            principal=principal,
            client_id=self._client_id,
            api_key=api_key,
            api_version=self._api_versions.get(api_key, 0),
            resource_type=resource_type,
            resource_name=resource_name,
            action=action,
        )

    async def _audit(
        self,
        generation: Generation,
        subject: Subject,
        policy: str,
        reason: str,
        error_code: int | None = None,
    ) -> None:
        """Audit a closed connection; it closes whether or not the event could be written
        (an audit that has failed is logged, never waited on)."""
        try:
            await generation.recorder.record_closed(
                subject, policy=policy, error_code=error_code, reason=reason
            )
        except RuntimeError as exc:
            log.error("%s: the closed connection was not audited: %s", self.peer, exc)

    async def _refuse_frame(
        self, session: Session, reason: str, metric_reason: str, frame: bytes
    ) -> None:
        """Log, count and audit a frame refused before its header was read: by its size
        (policy ``limits``; the API is unread) or by a header that does not parse (policy
        ``protocol``; the API key and version as the frame's first bytes give them)."""
        self._reject(reason, metric_reason)
        policy = _AUDITED_FRAME_REFUSALS.get(metric_reason)
        if policy is None:
            return
        api_key, api_version = UNREAD_API_KEY, -1
        if len(frame) >= _KEY_VERSION.size:
            api_key, api_version = _KEY_VERSION.unpack_from(frame)
        subject = Subject(
            client_address=self.peer,
            principal=session.principal,
            client_id=self._client_id,
            api_key=api_key,
            api_version=api_version,
            resource_type=_REQUEST[0],
            resource_name="",
            action=_REQUEST[1],
        )
        await self._audit(self._generation(), subject, policy, reason)

    def _upstream_closed(self, reason: str) -> None:
        if not self._closing:
            log.info("%s: upstream gone (%s): closing client connection", self.peer, reason)
            # A request the broker cannot read has it drop the link: a client sending one
            # on connection after connection had this line written for each, unpaced.
            self._charge_unaudited_line()
            self.stop_reading()

    def _reject(self, reason: str, metric_reason: str) -> None:
        self._metrics.rejected_frames.labels(metric_reason).inc()
        log.warning("%s: closing connection: %s", self.peer, reason)
        if metric_reason not in _AUDITED_REASONS:
            self._charge_unaudited_line()

    def _charge_unaudited_line(self) -> None:
        """A warning logged for the client, with no audit event (which would be charged):
        it counts against the client's audit pace, or a client opening connection after
        connection only to leave each one half-way (or fail SASL, or reach the gateway while
        the brokers cannot be, or have the broker drop the link, or reach a node that has
        left) had one line written for each, unpaced."""
        if self._audit_pace is not None:
            self._audit_pace.charge(self._host_key, 1)

    def _slots_put_end(self) -> None:
        try:
            self._slots.put_nowait(_END)
        except asyncio.QueueFull:
            # The writer is still busy; it stops at the first slot that fails or at this
            # marker, queued once there is room.
            self._tasks.spawn(self._slots.put(_END), name=f"end-{self.peer}")

    async def _read_loop(self, session: Session) -> None:
        while not self._closing:
            pace = self._audit_pace
            if pace is not None:
                # a client that had too many audit events written waits, on every connection
                principal = session.principal
                key = self._host_key if principal is None else client_key(principal, self.peer)
                if pace.delay(key) > 0:
                    await pace.wait(key)
            # A slot for the next request's answer before any of it is read: at the limit
            # the connection is not read at all, so it holds no request memory while the
            # broker holds its answers (a Fetch, for its max wait).
            await self._in_flight.acquire()
            self._slot_used = False
            try:
                size = await self._read_size(session)
                if size is None:
                    return
                await self._memory.take(size)  # the connection is not read while this waits
                try:
                    if not await self._serve(size, session):
                        return
                finally:
                    self._memory.give_back(size)
            finally:
                if not self._slot_used:  # no answer took it (acks=0, refused, closed)
                    self._in_flight.release()

    async def _serve(self, size: int, session: Session) -> bool:
        """Read a request of ``size`` bytes and carry out its outcome; False when the
        connection must stop reading."""
        self._frame_started = time.monotonic()
        try:
            request = await self._read_request(size, session)
        finally:
            self._frame_started = None
        if request is None:
            return False
        self._serving = True
        try:
            return await self._carry_out(request, session)
        finally:
            self._serving = False

    async def _carry_out(self, request: tuple[RequestHeader, bytes], session: Session) -> bool:
        """Judge a request read whole and carry out its outcome; False when the connection
        must stop reading."""
        upstream = self._upstream or await self._open_upstream()
        if upstream is None:
            return False
        header, frame = request
        self._client_id = header.client_id
        self._api_versions[header.api_key] = header.api_version
        registration = self._generation().table.get(header.api_key)
        if registration is not None and registration.after_answers_taken:
            # Its step after the broker's answer runs when the writer comes to that answer,
            # which waits behind every earlier answer the client has not taken (and is
            # never read from the broker while one waits): a client that left an answer
            # unread kept that step from running, for good once its connection was closed.
            await self._no_answers_due.wait()
        elif session.sasl.answer_due and not session.sasl.required:
            # A request sent behind a SASL request is judged once the exchange's answer is
            # back, as the principal it names (a broker's SASL listener serves it after the
            # exchange, as whom the exchange authenticated): judged before, as the connection
            # was, it escaped that user's dynamic client configs (acks) and was audited
            # without a principal. With sasl.client_auth: required it closes the connection.
            await self._no_answers_due.wait()
        # One generation judges the whole request, however a reload falls meanwhile.
        generation = self._generation()
        generation.enter()
        try:
            outcome = await self._outcome(
                generation.table, header, frame, session, upstream.cluster
            )
            if isinstance(outcome, Close):
                await self._audit_close(generation, header, session, outcome)
            return await self._deliver(header, outcome, upstream.link)
        finally:
            generation.leave(self._tasks)

    async def _open_upstream(self) -> _Upstream | None:
        """The link to the broker, opened for the first request (an idle connection holds
        none); None when no broker can be reached."""
        upstream_config = self._generation().config.upstream
        targets = self._targets()
        if not targets:  # a node listener whose node has left the cluster (gateway.nodes)
            log.info("%s: closing client connection: its broker has left the cluster", self.peer)
            self._charge_unaudited_line()
            return None
        try:
            link = await UpstreamLink.open(
                targets,
                upstream_config.connect_timeout_s,
                self._metrics,
                self._tasks,
                self._upstream_closed,
                self._upstream_security,
                self._client_taking,
            )
        except UpstreamClosed as exc:
            log.warning("%s: closing client connection: %s", self.peer, exc)
            self._charge_unaudited_line()
            return None
        timeout_s = upstream_config.request_timeout_s
        cluster = UpstreamCluster(link, timeout_s)
        self._upstream = _Upstream(link=link, cluster=cluster, request_timeout_s=timeout_s)
        return self._upstream

    async def _read_size(self, session: Session) -> int | None:
        """The next frame's size, checked against the limits before its body is read; None
        once the client is gone or the size was refused. Before a required SASL exchange has
        succeeded the cap is Kafka's for unauthenticated connections
        (``sasl.server.max.receive.size``), so that clients nobody has authenticated cannot
        hold the gateway's request memory with 100 MiB frames."""
        try:
            prefix = await self._receive(self._reader.readexactly(SIZE.size))
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                self._reject("truncated frame size", "truncated")
            return None
        except ConnectionError:
            return None
        size: int = SIZE.unpack(prefix)[0]
        cap, before = self._limits.max_frame_bytes, ""
        if session.sasl.required and not session.sasl.authenticated:
            cap, before = min(cap, PRE_AUTH_MAX_FRAME_BYTES), " before SASL authentication"
        try:
            check_frame_size(size, cap)
            self._memory.check(size)
        except FrameRejected as exc:
            await self._refuse_frame(session, exc.detail + before, exc.reason, b"")
            return None
        return size

    async def _read_request(
        self, size: int, session: Session
    ) -> tuple[RequestHeader, bytes] | None:
        """The request of ``size`` bytes; None once the client is gone or its frame was
        refused."""
        try:
            frame = await self._read_body(size)
        except FrameRejected as exc:
            self._reject(exc.detail, exc.reason)
            return None
        except ConnectionError:
            return None
        try:
            header = parse_request_header(frame)
        except FrameRejected as exc:
            await self._refuse_frame(session, exc.detail, exc.reason, frame)
            return None
        self._metrics.bytes_in.inc(size + 4)
        self._metrics.count_request(header.api_key, header.api_version)
        return header, frame

    async def _read_body(self, size: int) -> bytes:
        """``size`` bytes, read in pieces as they arrive (each no larger than the stream's
        buffer), so a frame the client stops sending half-way holds only what came.

        :raises FrameRejected: when the client ends the connection first.
        """
        pieces: list[bytes] = []
        missing = size
        while missing:
            piece = await self._receive(self._reader.read(missing))
            if not piece:
                raise FrameRejected(
                    "truncated", f"truncated frame: {size - missing} of {size} bytes"
                )
            pieces.append(piece)
            missing -= len(piece)
        return b"".join(pieces)  # a single piece is returned as is, not copied

    async def _outcome(
        self,
        table: Mapping[int, Registration],
        header: RequestHeader,
        frame: bytes,
        session: Session,
        cluster: UpstreamCluster,
    ) -> Outcome:
        name = api_name(header.api_key)
        refusal = session.sasl.refusal(header.api_key)
        if refusal is not None:
            # Kafka's SASL listener closes such a connection; nothing is forwarded or answered.
            return Close(
                reason=f"{name} v{header.api_version} {refusal}", metric_reason="unauthenticated"
            )
        registration = table.get(header.api_key)
        if registration is None:
            return Forward(frame=frame)
        if (
            header.api_key != API_VERSIONS_KEY
            and registration.versions is not None
            and header.api_version not in registration.versions
        ):
            return Close(
                reason=f"{name} v{header.api_version} is not a version the gateway advertises",
                metric_reason="unsupported_version",
            )
        ctx = RequestContext(header=header, client_address=self.peer, session=session)
        try:
            return await registration.handler(ctx, cluster, frame)
        except Undecodable as exc:
            return Close(reason=f"{name} v{header.api_version}: {exc}", metric_reason="undecodable")
        except UpstreamClosed as exc:
            return Close(
                reason=f"{name}: cannot learn the cluster's state: {exc}",
                metric_reason="upstream_state",
            )

    async def _deliver(
        self, header: RequestHeader, outcome: Outcome, upstream: UpstreamLink
    ) -> bool:
        """Carry out ``outcome``; False when the connection must stop reading."""
        if isinstance(outcome, Close):
            self._reject(outcome.reason, outcome.metric_reason)
            return False
        if isinstance(outcome, Answer):
            self._slot_used = True
            done: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
            done.set_result(outcome.frame)
            await self._queue_answer(_Pending(answer=done, on_response=None))
            return True
        try:
            future = upstream.send(
                header.api_key,
                header.correlation_id,
                outcome.frame,
                expect_response=outcome.expect_response,
            )
        except UpstreamClosed:
            return False
        if future is not None:
            self._slot_used = True
            await self._queue_answer(
                _Pending(
                    answer=future,
                    on_response=outcome.on_response,
                    unanswered=outcome.unanswered,
                )
            )
        await upstream.drain(self._upstream.request_timeout_s if self._upstream else None)
        return True

    async def _queue_answer(self, pending: _Pending) -> None:
        self._answers_due += 1
        self._no_answers_due.clear()
        await self._slots.put(pending)

    async def _response(self, slot: _Pending) -> bytes | None:
        """The answer for the client, rewritten; None (the connection closed) when the broker
        is gone or the rewrite fails."""
        try:
            response = await slot.answer
            if slot.on_response is not None:
                response = await slot.on_response(response)
        except UpstreamClosed:
            self._writer.transport.abort()  # as a dead broker's connection would end
            return None
        except Exception as exc:  # noqa: BLE001 - whatever broke a rewrite, the raw answer never leaves
            log.error(
                "%s: closing connection: cannot process the broker's answer: %r", self.peer, exc
            )
            self._metrics.rejected_frames.labels("bad_response").inc()
            self._writer.transport.abort()
            self.stop_reading()
            return None
        return response

    async def _close_after_sasl_failure(self, sasl: SaslState) -> None:
        """The refusal has reached the client; Kafka closes the connection after it."""
        subject = self._subject(sasl.failure_api, None, _AUTHENTICATION, sasl.claimed_user or "")
        await self._audit(
            self._generation(),
            subject,
            BROKER if sasl.failed_by_broker else SASL_GATE,
            f"SASL: {sasl.failure}",
            sasl.failure_code,
        )
        self._reject(f"SASL: {sasl.failure}", "sasl_failed")
        self.stop_reading()

    def _unanswered(self, check: Callable[[bytes], str | None], response: bytes) -> bool:
        """An answer the client does not want, read by ``check`` instead of written; False
        (the connection closed) when it names a failure."""
        failure = check(response)
        if failure is not None:
            self._reject(failure, "rejected_acks0_produce")
            self._writer.transport.abort()
            self.stop_reading()
            return False
        self._answer_taken()
        return True

    def _answer_taken(self) -> None:
        """An answer has been taken by the client (or read for it, acks=0)."""
        self._answers_due -= 1
        if not self._answers_due:
            self._no_answers_due.set()
        self._in_flight.release()

    async def _write_loop(self, session: Session) -> None:
        writer, metrics = self._writer, self._metrics
        while True:
            slot = await self._slots.get()
            if not isinstance(slot, _Pending):
                return  # the end marker
            response = await self._response(slot)
            if response is None:
                return
            if slot.unanswered is not None:
                if not self._unanswered(slot.unanswered, response):
                    return
                continue
            try:
                writer.writelines((SIZE.pack(len(response)), response))
                metrics.bytes_out.inc(len(response) + 4)
                if not await self._client_took():
                    return
            except (ConnectionError, RuntimeError):
                self.stop_reading()
                return
            self._answer_taken()
            self._last_activity = time.monotonic()
            if session.sasl.failed:
                await self._close_after_sasl_failure(session.sasl)
                return


_AUTHENTICATION: Final = ("user", "authenticate")
_REQUEST: Final = ("cluster", "request")
_AUDITED_CLOSES: Final[Mapping[str, tuple[tuple[str, str], str]]] = {
    # (resource type, action) and policy of each Close reason that refuses the request: the
    # client's authentication, its request unread, or its request unjudged (fail closed).
    "unauthenticated": (_AUTHENTICATION, SASL_GATE),
    "sasl_refused": (_AUTHENTICATION, SASL_GATE),
    "sasl_ambiguous": (_AUTHENTICATION, SASL_GATE),
    "refused_api": (_REQUEST, "protocol"),
    "unsupported_version": (_REQUEST, "protocol"),
    "undecodable": (_REQUEST, "protocol"),
    "own_topic": (_REQUEST, "own_topics"),
    "upstream_state": (_REQUEST, "cluster_state"),
    "oversized": (_REQUEST, "limits"),
}
"""Connections closed instead of served that are audited. ``rejected_acks0_produce`` is not
here: the policies that refused its records were audited by the engine."""

_AUDITED_FRAME_REFUSALS: Final[Mapping[str, str]] = {
    # The policy of each frame refusal before the header is read that is audited; a frame
    # cut short by the client leaving is not a refusal.
    "negative_size": "protocol",
    "oversized": "limits",
    "queued_max_request_bytes": "limits",
    "bad_header": "protocol",
    "unknown_api_key": "protocol",
}

_AUDITED_REASONS: Final = frozenset(_AUDITED_CLOSES) | frozenset(_AUDITED_FRAME_REFUSALS)
"""The refusals whose audit event is charged to the client's audit pace already."""

_KEY_VERSION: Final = struct.Struct(">hh")


@dataclass(frozen=True, slots=True, kw_only=True)
class _Upstream:
    """The connection's link to the broker, and the cluster as its handlers ask it."""

    link: UpstreamLink
    cluster: UpstreamCluster
    request_timeout_s: float
    """How long the broker may take to answer the gateway's own requests, and to take any
    request written to it."""


@dataclass(frozen=True, slots=True)
class _Pending:
    """One answer due to the client, in request order: the broker's (or the gateway's own),
    and the rewrite it needs before it leaves. Rewrites run here, in the writer, so a broker
    that drops the link fails the answers in order with nothing left behind."""

    answer: Awaitable[bytes]
    on_response: Callable[[bytes], Awaitable[bytes]] | None
    unanswered: Callable[[bytes], str | None] | None = None
    """Set for an answer the client does not want (see :class:`~gateway.outcomes.Forward`)."""
