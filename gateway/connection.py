"""One client connection: read frames, hand each to its handler, forward or answer, and
write the answers back in request order. See the package docstring for the contracts."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from policies.chain import Decision
from protocol.addresses import BrokerEndpoint
from protocol.admin import InternalRequest
from protocol.codec import Payload, Undecodable
from protocol.errors import INVALID_RECORD, POLICY_VIOLATION
from protocol.framing import (
    SIZE,
    FrameRejected,
    RequestHeader,
    check_frame_size,
    parse_request_header,
)
from protocol.produce import PartitionError, PartitionRecords
from protocol.versions import VersionRange, api_name

from . import client_configs
from .config import ClientConfigsConfig, HostPort
from .decisions import Subject
from .handlers import Answer, Close, Drop, Forward, Outcome, Registration
from .principal import SaslState, ssl_principal
from .record_validation import STATE_NAMESPACE, PartitionOutcome, RecordValidator
from .upstream import UpstreamClosed, UpstreamLink

if TYPE_CHECKING:
    from .server import Gateway

log = logging.getLogger(__name__)

_END = object()
Slot = Awaitable[bytes]


class ConnectionContext:
    """What a handler may use: the upstream link and the gateway's shared services."""

    def __init__(
        self,
        gateway: Gateway,
        upstream: UpstreamLink,
        peer: str,
        listener: str,
        principal: str | None = None,
    ) -> None:
        self._gateway = gateway
        self.upstream = upstream
        self.client_address = peer
        self.listener = listener
        self.principal: str | None = principal
        """``User:<name>`` from the TLS client certificate or a completed SASL exchange; None
        on an unauthenticated connection."""
        self.sasl = SaslState()
        self.policies = gateway.policies
        self.gateway_topics: frozenset[str] = gateway.own_topics
        self.upstream_config = gateway.config.upstream

    async def send_internal(self, request: InternalRequest) -> Payload:
        """Send a request of the gateway's own on this connection's upstream link and wait
        for its answer.

        :raises UpstreamClosed: when the link drops or the answer does not come in time.
        :raises Undecodable: for a malformed answer.
        """
        correlation_id = self.upstream.next_internal_correlation_id()
        future = self.upstream.send(
            request.api_key, correlation_id, request.frame(correlation_id), expect_response=True
        )
        assert future is not None
        try:
            frame = await asyncio.wait_for(future, self.upstream_config.request_timeout_s)
        except TimeoutError:
            raise UpstreamClosed(
                f"no answer to the gateway's {api_name(request.api_key)} request in "
                f"{self.upstream_config.request_timeout_s} s"
            ) from None
        return request.read(frame)

    async def decide(self, check: Callable[[], Decision]) -> Decision:
        """Run a policy-chain check off the event loop (plug-ins may block up to their
        timeout)."""
        return await asyncio.to_thread(check)

    async def record(self, subject: Subject, decision: Decision, error_code: int | None) -> None:
        await self._gateway.decisions.record(subject, decision, error_code)

    async def record_policy_decision(
        self,
        header: RequestHeader,
        decision: Decision,
        *,
        resource_type: str,
        resource_name: str,
        action: str,
        validate_only: bool = False,
    ) -> int | None:
        """Record a policy-chain decision about one resource of this request; returns the
        error code the client gets (POLICY_VIOLATION when denied, None when allowed)."""
        error = None if decision.allowed else int(POLICY_VIOLATION)
        subject = Subject(
            client_address=self.client_address,
            principal=self.principal,
            client_id=header.client_id,
            api_key=header.api_key,
            api_version=header.api_version,
            resource_type=resource_type,
            resource_name=resource_name,
            action=action,
            validate_only=validate_only,
        )
        await self._gateway.decisions.record(subject, decision, error)
        return error

    # --- record validation (see gateway.record_validation) -------------------------------

    @property
    def record_validator(self) -> RecordValidator | None:
        return self._gateway.record_validator

    def validated_topics(self) -> Mapping[str, str]:
        """topic -> its record.validation.policy, for every topic that has one."""
        return self._gateway.state.items(STATE_NAMESPACE)

    async def state_put(self, namespace: str, key: str, value: str | None) -> None:
        """Write to the gateway's state store (durable when it returns)."""
        await self._gateway.state.put(namespace, key, value)

    async def state_put_all(self, namespace: str, changes: Mapping[str, str | None]) -> None:
        """Write several keys to the gateway's state store, all of them or none."""
        await self._gateway.state.put_all(namespace, changes)

    def validation_policy_of(self, topic: str) -> str | None:
        return self._gateway.state.get(STATE_NAMESPACE, topic)

    async def validate_records(
        self, checks: Sequence[tuple[PartitionRecords, str]]
    ) -> list[PartitionOutcome]:
        """Validate the partitions. The built-in policies run right here (bounded CPU work,
        no thread hand-off or GIL contention); a plug-in runs on a worker thread, and past the
        policy timeout every partition is rejected (fail closed)."""
        validator = self._gateway.record_validator
        assert validator is not None

        def run() -> list[PartitionOutcome]:
            return [
                validator.validate_partition(p.topic, p.partition, policy, p.records)
                for p, policy in checks
            ]

        if validator.inline:
            return run()

        timeout = self.policies.timeout_s
        try:
            return await asyncio.wait_for(asyncio.to_thread(run), timeout)
        except TimeoutError:
            message = f"{validator.name} did not finish validating within {timeout} s"
            return [
                PartitionOutcome(
                    topic=p.topic,
                    partition=p.partition,
                    records=0,
                    bytes=0,
                    batches=0,
                    error=PartitionError(
                        error_code=int(INVALID_RECORD),
                        error_message=message,
                        record_errors=((0, message),),
                    ),
                )
                for p, _ in checks
            ]

    def count_validation(self, outcome: PartitionOutcome, policy: str) -> None:
        self._gateway.metrics.count_validation(outcome, policy)

    def record_allowed_produce(self, outcome: PartitionOutcome, header: RequestHeader) -> None:
        audit = self._gateway.audit
        if audit is not None:
            audit.record_allowed_produce(
                topic=outcome.topic,
                principal=self.principal,
                client_id=header.client_id,
                api_version=header.api_version,
                records_examined=outcome.records,
                bytes_examined=outcome.bytes,
            )

    # --- dynamic client configs (see gateway.client_configs) -------------------------------

    @property
    def client_configs(self) -> ClientConfigsConfig:
        return self._gateway.config.client_configs

    def client_config_items(self) -> Mapping[str, str]:
        """A read-only snapshot of every stored dynamic client config (store key -> value)."""
        return self._gateway.state.items(client_configs.STATE_NAMESPACE)

    def client_config_of(self, client_id: str | None, name: str) -> str | None:
        """The dynamic client config ``name`` for this connection's user and ``client_id``
        (a request header's): the client-id entry, else the user's default, else None."""
        items = self.client_config_items()
        if not items:
            return None
        user = client_configs.user_of(self.principal)
        if client_id:
            value = items.get(client_configs.store_key(user, client_id, name))
            if value is not None:
                return value
        return items.get(client_configs.store_key(user, "", name))

    def count_enforced(self, config: str) -> None:
        """Count one request rewritten to the dynamic client config ``config``."""
        self._gateway.client_config_enforced.labels(config).inc()

    @property
    def version_caps(self) -> Mapping[int, VersionRange | None]:
        return self._gateway.version_caps

    def remember_broker_versions(self, ranges: Mapping[int, VersionRange]) -> None:
        self._gateway.broker_versions = dict(ranges)

    async def gateway_addresses(
        self, endpoints: Iterable[BrokerEndpoint]
    ) -> dict[int, tuple[str, int]]:
        return await self._gateway.nodes.gateway_addresses(endpoints)


class ClientConnection:
    def __init__(
        self,
        gateway: Gateway,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        listener: str,
        targets: Callable[[], Sequence[HostPort]],
    ) -> None:
        self._gateway = gateway
        self._reader = reader
        self._writer = writer
        self._listener = listener
        self._targets = targets
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._metrics = gateway.metrics
        self._limits = gateway.config.limits
        self._table: Mapping[int, Registration] = gateway.handlers
        self._slots: asyncio.Queue[object] = asyncio.Queue(self._limits.max_in_flight_requests)
        self._closing = False
        self._read_task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        """Serve the connection until either side closes it."""
        self._metrics.connections_total.labels(self._listener).inc()
        self._metrics.connections_active.inc()
        tasks = self._gateway.tasks
        try:
            try:
                upstream = await UpstreamLink.open(
                    self._targets(),
                    self._gateway.config.upstream.connect_timeout_s,
                    self._metrics,
                    tasks,
                    self._upstream_closed,
                )
            except UpstreamClosed as exc:
                log.warning("%s: closing client connection: %s", self.peer, exc)
                return
            ctx = ConnectionContext(
                self._gateway,
                upstream,
                self.peer,
                self._listener,
                ssl_principal(self._writer.get_extra_info("peercert")),
            )
            writer_task = tasks.spawn(self._write_loop(), name=f"write-{self.peer}")
            self._read_task = tasks.spawn(self._read_loop(ctx), name=f"read-{self.peer}")
            if self._closing:  # shutdown began while connecting
                self._read_task.cancel()
            await asyncio.wait({self._read_task})
            # Reading has stopped (client closed, bad input, shutdown or upstream gone):
            # the answers already in flight still leave, then the connection closes.
            self._closing = True
            self._slots_put_end()
            done, _ = await asyncio.wait(
                {writer_task}, timeout=self._gateway.config.shutdown_timeout_s
            )
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
            self._gateway.tasks.spawn(self._slots.put(_END), name=f"end-{self.peer}")

    async def _read_loop(self, ctx: ConnectionContext) -> None:
        reader, limits, metrics, table = self._reader, self._limits, self._metrics, self._table
        upstream = ctx.upstream
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
                try:
                    outcome = await registration.handler(ctx, header, frame)
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
                        slot = self._gateway.tasks.spawn(
                            _transform(future, outcome.on_response), name=f"rewrite-{self.peer}"
                        )
                    await self._slots.put(slot)
                await upstream.drain()
            elif isinstance(outcome, Answer):
                done: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
                done.set_result(outcome.frame)
                await self._slots.put(done)
            elif isinstance(outcome, Drop):
                continue
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
