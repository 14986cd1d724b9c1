"""The gateway: a bootstrap listener, one listener per broker node, and shutdown."""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from prometheus_client import Counter

from policies.chain import PolicyChain
from policies.loader import PolicyConfigError, flatten_configs, load_policy_chain
from policies.rules import ProtectedTopicsRule
from protocol.records import record_scanner
from spark_audit.event import GATEWAY_TOPICS_RULE

from .audit import AuditEmitter, AuditSink, KafkaTopicSink, ProduceSummarizer, SpoolSink
from .config import UNLIMITED, ConfigError, GatewayConfig, HostPort, config_warnings, live_part
from .connection import ClientConnection
from .decisions import DecisionRecorder
from .engine import Engine
from .generation import Generation
from .handlers import build_table
from .handlers.base import Registration
from .health import Readiness, probe_upstream
from .limits import AuditPace, ConnectionLimits, RequestMemory, ThrottledWarning, peer_host
from .listeners import Listener, TlsListener, listener_group, start_tls_stream, tls_listener
from .metrics import GatewayMetrics
from .nodes import NodeListeners
from .policy_runner import PolicyRunner
from .record_validation import RecordValidator, load_record_validator
from .reuseport import request_sockets
from .services import Services
from .state import (
    KafkaTopicStore,
    SqliteStore,
    StateStore,
    StateStoreError,
    carry_over_sqlite,
)
from .tasks import TaskSet
from .upstream_security import (
    UpstreamAuthenticationError,
    UpstreamSecurity,
    client_ssl_context,
)

log = logging.getLogger(__name__)

STREAM_LIMIT: Final = 2**20
"""The stream reader's buffer limit for client connections."""
TLS_HANDSHAKE_TIMEOUT_S: Final = 60.0
"""The longest a client's TLS handshake may take (asyncio's own default), shorter when
connections.max.idle.ms is."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReloadOutcome:
    applied: bool
    policy_version: str
    """The policy version in force after the reload (the old one when refused)."""
    message: str
    """Old -> new policy version, or why the reload was refused."""
    needs_restart: tuple[str, ...] = ()
    """Changed settings that a running gateway cannot apply (kept as they were)."""


class Gateway:
    def __init__(
        self,
        config: GatewayConfig,
        metrics: GatewayMetrics | None = None,
        *,
        reuse_port: bool = False,
        count_reloads: bool = True,
        shared_listeners: socket.socket | None = None,
    ) -> None:
        """``reuse_port``: open every client listener with SO_REUSEPORT, to share its port
        with the other workers of ``kpg run --workers N``. ``count_reloads`` False: leave
        ``kpg_config_reloads_total`` alone (a worker's supervisor counts the gateway's).
        ``shared_listeners``: a worker's channel to its supervisor, which binds every client
        listener's sockets instead (see :mod:`gateway.reuseport`)."""
        if not config.upstream.bootstrap_servers:
            raise ValueError("the gateway needs at least one upstream bootstrap server")
        self.metrics = metrics or GatewayMetrics()
        self._reuse_port = reuse_port
        self._count_reloads = count_reloads
        self._shared_listeners = shared_listeners
        self._shared_lock = asyncio.Lock()
        self.own_topics = frozenset(gateway_topics(config))
        self.upstream_security = UpstreamSecurity(config)
        self.audit = _audit_emitter(config, self.metrics, self.upstream_security)
        self.state: StateStore = _state_store(config, self.upstream_security)
        self.tasks = TaskSet()
        self.nodes = NodeListeners(
            config.listen.host,
            config.advertised_host,
            config.node_port_base,
            self._start_node,
            self._own_ports,
        )
        # Here rather than in GatewayMetrics: the enforcement of dynamic client configs is the
        # only user (gateway.handlers.produce and gateway.handlers.join_group).
        self._client_config_enforced = Counter(
            "kpg_client_config_enforced",
            "Requests rewritten to a dynamic client config (opt-in enforcement), by config",
            ["config"],
            registry=self.metrics.registry,
        )
        self._audit_pace = AuditPace(config.limits.client_audit_events_per_sec, self.metrics)
        self._generation = self._build(config)
        self._replaced: list[Generation] = []
        self._reload_lock = asyncio.Lock()
        self.metrics.set_policy_version(config.policy_version)
        self._bootstrap: Listener | None = None
        self._handshakes: set[asyncio.Task[None]] = set()
        self._handshake_log = ThrottledWarning(log)
        """Client TLS handshakes under way (over TLS, see :meth:`_accept_tls`)."""
        self._connections: set[ClientConnection] = set()
        self._connection_limits = ConnectionLimits(config.limits, self.metrics)
        self._request_memory = RequestMemory(config.limits.queued_max_request_bytes, self.metrics)
        self._metrics_port: int | None = None
        self._bootstrap_port: int | None = None
        self._ssl: ssl.SSLContext | None = None
        self._state_loaded = False

    def _build(self, config: GatewayConfig) -> Generation:
        """What judges requests under ``config``.

        :raises ConfigError: when a policy, rule or plug-in is badly configured (the
            messages of start-up).
        """
        try:
            policies = load_policy_chain(
                config.policies, source=config.source, extra_rules=own_topics_rule(config)
            )
        except PolicyConfigError as exc:
            raise ConfigError(str(exc)) from None
        try:
            record_validator = load_record_validator(
                config.policies, flatten_configs(config.policies), config.source, config.limits
            )
        except BaseException:
            policies.close()
            raise
        recorder = DecisionRecorder(
            self.metrics,
            self.audit,
            config.audit.instance,
            policy_version=config.policy_version,
            deny_unaudited=config.audit.on_failure == "deny",
            pace=self._audit_pace,
        )
        table = build_table(
            Services(
                engine=Engine(recorder, limits=config.limits),
                policies=PolicyRunner(policies),
                state=self.state,
                records=record_validator,
                audit=self.audit,
                metrics=self.metrics,
                client_config_enforced=self._client_config_enforced,
                nodes=self.nodes,
                upstream=config.upstream,
                client_configs=config.client_configs,
                own_topics=self.own_topics,
            )
        )
        return Generation(
            config=config,
            policies=policies,
            record_validator=record_validator,
            recorder=recorder,
            table=table,
        )

    @property
    def generation(self) -> Generation:
        """The configuration in force and what judges requests under it."""
        return self._generation

    @property
    def decisions(self) -> DecisionRecorder:
        """The decision recorder in force (its policy version is the generation's)."""
        return self._generation.recorder

    @property
    def config(self) -> GatewayConfig:
        return self._generation.config

    @property
    def policies(self) -> PolicyChain:
        return self._generation.policies

    @property
    def record_validator(self) -> RecordValidator:
        return self._generation.record_validator

    @property
    def handlers(self) -> Mapping[int, Registration]:
        return self._generation.table

    async def reload(self, load: Callable[[], GatewayConfig]) -> ReloadOutcome:
        """Read the configuration again with ``load`` and put it in force for every request
        read from now on; connections stay open. A configuration that does not load or build
        is refused with the messages of start-up, and the running one stays. Settings that
        cannot change in a running gateway (:data:`gateway.config.RESTART_ONLY`) are kept as
        they are and named in the log. One reload at a time."""
        async with self._reload_lock:
            old = self._generation
            try:
                loaded = await asyncio.to_thread(load)
                config, needs_restart = live_part(old.config, loaded)
                generation = await asyncio.to_thread(self._build, config)
            except ConfigError as exc:
                return self._refused(old, str(exc))
            except Exception as exc:  # noqa: BLE001 - whatever breaks a reload keeps the old config
                log.exception("reload failed")
                return self._refused(old, f"{type(exc).__name__}: {exc}")
            for key in needs_restart:
                log.warning("reload: %s changed: it needs a restart and was not applied", key)
            message = f"policy version {old.policy_version} -> {config.policy_version}"
            if needs_restart:
                message += f"; not applied, needs a restart: {', '.join(needs_restart)}"
            # The event, then the swap, with no await between: it comes before every event of
            # a decision the new generation makes.
            self._lifecycle("reload", config.policy_version, f"configuration reloaded: {message}")
            self._generation = generation
            self._connection_limits.update(config.limits)
            self._request_memory.set_limit(config.limits.queued_max_request_bytes)
            self._audit_pace.set_rate(config.limits.client_audit_events_per_sec)
            old.retire(self.tasks)
            # Only the replaced generations still judging a request are kept (to be closed
            # at shutdown if they are then): every one was kept, with its policy chain,
            # handler table and caches, some 34 KB a reload, for as long as the gateway ran.
            self._replaced = [g for g in (*self._replaced, old) if not g.closed]
            if self._count_reloads:
                self.metrics.config_reloads.labels("applied").inc()
            self.metrics.set_policy_version(config.policy_version, previous=old.policy_version)
            log.info("configuration reloaded from %s: %s", config.source, message)
            for warning in config_warnings(config):
                log.warning("reload: %s", warning)
            return ReloadOutcome(
                applied=True,
                policy_version=config.policy_version,
                message=message,
                needs_restart=needs_restart,
            )

    def _refused(self, old: Generation, problem: str) -> ReloadOutcome:
        log.error(
            "reload refused, policy version %s stays in force: %s", old.policy_version, problem
        )
        if self._count_reloads:
            self.metrics.config_reloads.labels("refused").inc()
        self._record_refusal(old.policy_version, problem)
        return ReloadOutcome(applied=False, policy_version=old.policy_version, message=problem)

    def reload_refused_by_supervisor(self, problem: str) -> None:
        """In a worker of ``kpg run --workers``: the supervisor refused a reload before any
        worker read the file; record it in this worker's audit as a refusal here would be
        (the supervisor has logged and counted it)."""
        log.info("reload refused by the supervisor, policy version %s stays", self.policy_version)
        self._record_refusal(self.policy_version, problem)

    def _record_refusal(self, policy_version: str, problem: str) -> None:
        self._lifecycle(
            "reload_refused",
            policy_version,
            f"reload refused, policy version {policy_version} stays: {problem}",
        )

    def _lifecycle(self, action: str, policy_version: str, message: str) -> None:
        if self.audit is not None and self.audit.running:
            self.audit.lifecycle(action, policy_version=policy_version, message=message)

    def readiness(self) -> Readiness:
        """Ready when the state store is loaded and an upstream broker answers now."""
        if not self._state_loaded:
            return Readiness(ready=False, reason="not ready: the state store is not loaded")
        upstream = self.config.upstream
        problem = probe_upstream(
            upstream.bootstrap_servers,
            upstream.connect_timeout_s,
            self.upstream_security.ssl_context,
        )
        if problem is not None:
            return Readiness(ready=False, reason=f"not ready: upstream: {problem}")
        return Readiness(
            ready=True, reason=f"ready: state loaded, upstream answered, {self.policy_version}"
        )

    @property
    def policy_version(self) -> str:
        return self._generation.policy_version

    @property
    def bootstrap_address(self) -> HostPort:
        """The address clients put in ``bootstrap.servers``."""
        assert self._bootstrap_port is not None, "start() first"
        return HostPort(host=self.config.advertised_host, port=self._bootstrap_port)

    @property
    def metrics_port(self) -> int | None:
        return self._metrics_port

    async def start(self) -> None:
        """Open the bootstrap listener (and the metrics endpoint, when configured).

        :raises OSError: when a port cannot be bound.
        :raises ConfigError: when the state store cannot be opened or TLS files do not load.
        """
        await self._check_upstream_credentials()
        try:
            await self.state.start()
        except StateStoreError as exc:
            raise ConfigError(f"{self.config.source}: state: {exc}") from None
        if self.config.state.store == "kafka":
            try:
                await carry_over_sqlite(
                    self.state, Path(self.config.state.path), host=socket.gethostname()
                )
            except StateStoreError as exc:
                # the store is open: its clients would stay connected to the brokers
                await self.state.close()
                raise ConfigError(f"{self.config.source}: state: {exc}") from None
        self._state_loaded = True
        if self.audit is not None:
            for sink in self.audit.sinks:
                if isinstance(sink, KafkaTopicSink):
                    sink.bind_loop(asyncio.get_running_loop())
            try:
                await self.audit.start()
            except Exception as exc:
                raise ConfigError(
                    f"{self.config.source}: audit: cannot open a sink: {exc}"
                ) from exc
        self._ssl = _ssl_context(self.config)
        listen = self.config.listen
        self._bootstrap = await self._listen(
            "bootstrap", self._bootstrap_targets, listen.host, listen.port
        )
        self._bootstrap_port = int(self._bootstrap.sockets[0].getsockname()[1])
        if self.audit is not None:
            # Queued before any client's decision: no await between the bind and here.
            self.audit.lifecycle(
                "start",
                policy_version=self.config.policy_version,
                message=f"gateway started: bootstrap listener on {self.bootstrap_address}, "
                f"policy version {self.config.policy_version}",
            )
        if self.config.metrics is not None:
            self._metrics_port = self.metrics.serve(
                self.config.metrics.host, self.config.metrics.port, self.readiness
            )
        self._log_start()

    def _log_start(self) -> None:
        """What the gateway runs with, and warnings for what an operator should know."""
        log.info(
            "bootstrap listener on %s, upstream %s, record scanner %s",
            self.bootstrap_address,
            ", ".join(map(str, self.config.upstream.bootstrap_servers)),
            record_scanner(),
        )
        log.info("upstream security: %s", self.upstream_security.describe())
        for warning in config_warnings(self.config):
            log.warning("%s", warning)
        limits = self.config.limits
        log.info(
            "limits: max.connections %d, max.connections.per.ip %d, "
            "max.connection.creation.rate %d, max.connection.creation.rate.per.ip %d, "
            "connections.max.idle.ms %d, queued.max.request.bytes %d",
            limits.max_connections,
            limits.max_connections_per_ip,
            limits.max_connection_creation_rate,
            limits.max_connection_creation_rate_per_ip,
            limits.connections_max_idle_ms,
            limits.queued_max_request_bytes,
        )
        if record_scanner() != "native":
            log.warning(
                "record validation reads records with the full Python reader (protocol._recscan "
                "is not built, or KPG_RECORD_SCANNER=python): the same answers, at a fraction "
                "of the throughput"
            )

    async def _check_upstream_credentials(self) -> None:
        """Before the gateway's own clients start: the brokers accept its TLS and SASL.

        :raises ConfigError: saying why not.
        """
        if not gateway_topics(self.config):
            return  # no client of the gateway's own
        upstream = self.config.upstream
        try:
            await self.upstream_security.check(
                upstream.bootstrap_servers, upstream.request_timeout_s
            )
        except UpstreamAuthenticationError as exc:
            raise ConfigError(f"{self.config.source}: {exc}") from None

    def _own_ports(self) -> frozenset[int]:
        """The ports of the gateway's own listeners (bootstrap, metrics), which no node
        listener may take. A worker serves no metrics: its supervisor's listener shares its
        port with no one (no SO_REUSEPORT), so a node's bind there fails."""
        configured = self.config.metrics.port if self.config.metrics is not None else None
        return frozenset(p for p in (self._bootstrap_port, self._metrics_port, configured) if p)

    def _bootstrap_targets(self) -> Sequence[HostPort]:
        return self.config.upstream.bootstrap_servers

    async def _start_node(self, node_id: int, host: str, port: int, upstream: HostPort) -> Listener:
        def targets() -> Sequence[HostPort]:
            upstream = self.nodes.upstream_of(node_id)
            return () if upstream is None else (upstream,)  # none: the node has left

        return await self._listen(f"node-{node_id}", targets, host, port, (node_id, upstream))

    def open_node(self, node_id: int, host: str, port: int) -> None:
        """A worker: another worker opened node ``node_id``'s listener (forwarding to broker
        ``host:port``), so this one opens it too: the supervisor may steer any client
        address to this worker, on every port."""
        upstream = HostPort(host=host, port=port)
        self.tasks.spawn(self.nodes.open_known(node_id, upstream), name=f"node-{node_id}")

    async def _listen(
        self,
        listener: str,
        targets: object,
        host: str,
        port: int,
        node: tuple[int, HostPort] | None = None,
    ) -> Listener:
        """Bind a client listener (a worker: have the supervisor bind it, ``node`` saying
        which node's it is). Over TLS, a connection is admitted (counted against the
        connection limits) before its handshake: see :mod:`gateway.listeners`."""
        context = self._ssl
        if self._shared_listeners is not None:
            sockets = await self._shared_sockets(listener, host, port, node)
            if context is None:
                return await listener_group(
                    sockets, lambda r, w: self._accept(r, w, listener, targets), STREAM_LIMIT
                )
            return TlsListener(
                sockets, lambda sock: self._accept_tls(sock, context, listener, targets)
            )
        if context is None:
            return await asyncio.start_server(
                lambda r, w: self._accept(r, w, listener, targets),
                host,
                port,
                limit=STREAM_LIMIT,
                reuse_port=self._reuse_port or None,
            )
        return await tls_listener(
            host,
            port,
            reuse_port=self._reuse_port,
            accepted=lambda sock: self._accept_tls(sock, context, listener, targets),
        )

    async def _shared_sockets(
        self, listener: str, host: str, port: int, node: tuple[int, HostPort] | None
    ) -> list[socket.socket]:
        """This worker's sockets of ``listener`` on ``host:port``, from the supervisor.

        :raises OSError: as binding them failed.
        """
        assert self._shared_listeners is not None
        channel = self._shared_listeners
        upstream = None if node is None else (node[1].host, node[1].port)
        async with self._shared_lock:  # one request at a time on the channel
            return await asyncio.to_thread(
                request_sockets,
                channel,
                listener,
                host,
                port,
                None if node is None else node[0],
                upstream,
            )

    def _accept(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        listener: str,
        targets: object,
    ) -> None:
        host = peer_host(writer.get_extra_info("peername"))
        if not self._connection_limits.admit(host):
            writer.transport.abort()  # closed at once, before a byte is read
            return
        self._serve(reader, writer, listener, targets, host)

    def _accept_tls(
        self, sock: socket.socket, context: ssl.SSLContext, listener: str, targets: object
    ) -> None:
        try:
            host = peer_host(sock.getpeername())
        except OSError:  # gone already
            sock.close()
            return
        if not self._connection_limits.admit(host):
            sock.close()  # closed at once, before a byte is read or a handshake begun
            return
        task = self.tasks.spawn(
            self._handshake(sock, context, listener, targets, host), name=f"tls-{host}"
        )
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)

    async def _handshake(
        self,
        sock: socket.socket,
        context: ssl.SSLContext,
        listener: str,
        targets: object,
        host: str,
    ) -> None:
        """The server side of a TLS handshake within :meth:`_handshake_timeout_s`; the
        connection is served once it is done, its place given back if it fails."""
        served = False
        try:
            reader, writer = await start_tls_stream(
                sock, context, timeout_s=self._handshake_timeout_s(), limit=STREAM_LIMIT
            )
            self._serve(reader, writer, listener, targets, host)
            served = True
        except OSError as exc:  # ssl.SSLError; ConnectionAbortedError at the timeout; ...
            timed_out = isinstance(exc, ConnectionAbortedError | TimeoutError)
            self.metrics.tls_handshakes_failed.labels("timeout" if timed_out else "failed").inc()
            # what a client's operator needs to fix its certificates; at most every 10 s
            self._handshake_log.warn(
                f"{host}: TLS handshake failed, connection closed: {str(exc) or type(exc).__name__}"
            )
        finally:
            if not served:
                self._connection_limits.release(host)

    def _handshake_timeout_s(self) -> float:
        """A handshake is idle time: at most connections.max.idle.ms, and never more than
        :data:`TLS_HANDSHAKE_TIMEOUT_S`."""
        idle_ms = self._generation.config.limits.connections_max_idle_ms
        if idle_ms == UNLIMITED:
            return TLS_HANDSHAKE_TIMEOUT_S
        return min(TLS_HANDSHAKE_TIMEOUT_S, idle_ms / 1000)

    def _serve(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        listener: str,
        targets: object,
        host: str,
    ) -> None:
        connection = ClientConnection(
            generation=lambda: self._generation,
            metrics=self.metrics,
            tasks=self.tasks,
            reader=reader,
            writer=writer,
            listener=listener,
            targets=targets,  # type: ignore[arg-type]
            memory=self._request_memory,
            audit_pace=self._audit_pace,
            upstream_security=self.upstream_security,
        )
        self._connections.add(connection)
        task = self.tasks.spawn(connection.run(), name=f"conn-{connection.peer}")
        task.add_done_callback(lambda _: self._closed(connection, host))

    def _closed(self, connection: ClientConnection, host: str) -> None:
        self._connections.discard(connection)
        self._connection_limits.release(host)

    async def stop(self) -> None:
        """Stop accepting, let in-flight requests finish within the shutdown timeout, close."""
        if self._bootstrap is not None:
            self._bootstrap.close()
        self.nodes.close()
        for handshake in list(self._handshakes):
            handshake.cancel()  # no request in flight to wait for
        for connection in list(self._connections):
            connection.stop_reading(finish_request=True)
        if not await self.tasks.wait(self.config.shutdown_timeout_s):
            log.warning("shutdown timeout: cancelling %d remaining tasks", len(self.tasks))
        await self.tasks.cancel_all()
        if self.audit is not None and self.audit.running:
            version = self.decisions.policy_version or self.config.policy_version
            self.audit.lifecycle(
                "stop",
                policy_version=version,
                message=f"gateway stopped, policy version {version}",
            )
        if self.audit is not None:
            await self.audit.close()
        await self.state.close()
        for generation in (*self._replaced, self._generation):
            generation.close()
        self.metrics.stop_serving()
        log.info("gateway stopped")


def check_policies(config: GatewayConfig) -> None:
    """Build what ``config``'s policies and record validation would run, and close it again:
    what the supervisor of ``kpg run --workers`` checks before it starts any worker.

    :raises ConfigError: with the messages of a gateway's start-up.
    """
    try:
        policies = load_policy_chain(
            config.policies, source=config.source, extra_rules=own_topics_rule(config)
        )
    except PolicyConfigError as exc:
        raise ConfigError(str(exc)) from None
    try:
        load_record_validator(
            config.policies, flatten_configs(config.policies), config.source, config.limits
        ).close()
    finally:
        policies.close()


def check_startup(config: GatewayConfig) -> None:
    """What ``kpg run --check`` checks: everything start-up builds from ``config`` alone,
    without opening a port, writing a file or reaching a broker: the policies and record
    validation (:func:`check_policies`: plug-ins imported and configured, the schema
    registry's settings), and the TLS contexts of the client listeners and of the upstream
    (certificates, keys and CA bundles loaded).

    :raises ConfigError: with the messages of a gateway's start-up.
    """
    check_policies(config)
    _ssl_context(config)
    if config.upstream.tls is not None:
        client_ssl_context(config.upstream.tls, config.source)


def _audit_emitter(
    config: GatewayConfig, metrics: GatewayMetrics, security: UpstreamSecurity
) -> AuditEmitter | None:
    audit = config.audit
    sinks: list[AuditSink] = []
    if audit.spool_dir is not None:
        sinks.append(
            SpoolSink(
                audit.spool_dir,
                segment_max_bytes=audit.segment_max_bytes,
                segment_max_age_s=audit.segment_max_age_s,
                fsync=audit.fsync,  # type: ignore[arg-type]
            )
        )
    if audit.topic is not None:
        sinks.append(
            KafkaTopicSink(
                [str(s) for s in config.upstream.bootstrap_servers],
                audit.topic,
                replication_factor=audit.topic_replication_factor,
                client_kwargs=security.aiokafka_kwargs(),
            )
        )
    if not sinks:
        return None
    summarizer = ProduceSummarizer(
        gateway_instance=audit.instance,
        mode="enforce",
        interval_ms=int(audit.produce_summary_interval_s * 1000),
        start_ms=int(time.time() * 1000),
        max_keys=audit.produce_summary_max_keys,
    )
    return AuditEmitter(
        sinks,
        summarizer=summarizer,
        gateway_instance=audit.instance,
        queue_max_events=audit.queue_max_events,
        registry=metrics.registry,
    )


def _ssl_context(config: GatewayConfig) -> ssl.SSLContext | None:
    """The server-side TLS context of the client listeners, or None for plaintext.

    :raises ConfigError: when a certificate or key does not load.
    """
    tls = config.tls
    if tls is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file)
        if tls.ca_file is not None:
            context.load_verify_locations(tls.ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{config.source}: tls: cannot load certificates: {exc}") from None
    context.verify_mode = {
        "required": ssl.CERT_REQUIRED,
        "requested": ssl.CERT_OPTIONAL,
        "none": ssl.CERT_NONE,
    }[tls.client_auth]
    return context


def _state_store(config: GatewayConfig, security: UpstreamSecurity) -> StateStore:
    state = config.state
    if state.store == "kafka":
        return KafkaTopicStore(
            config.upstream.bootstrap_servers,
            state.topic,
            refresh_interval_s=state.refresh_interval_s,
            request_timeout_s=config.upstream.request_timeout_s,
            client_kwargs=security.aiokafka_kwargs(),
        )
    return SqliteStore(state.path, refresh_interval_s=state.refresh_interval_s)


def gateway_topics(config: GatewayConfig) -> tuple[str, ...]:
    """The topics the gateway itself writes on the upstream cluster."""
    topics = []
    if config.state.store == "kafka":
        topics.append(config.state.topic)
    if config.audit.topic is not None:
        topics.append(config.audit.topic)
    return tuple(topics)


def own_topics_rule(config: GatewayConfig) -> tuple[ProtectedTopicsRule, ...]:
    """No client deletes, reconfigures or adds partitions to the gateway's own topics."""
    topics = gateway_topics(config)
    if not topics:
        return ()
    return (
        ProtectedTopicsRule(
            name=GATEWAY_TOPICS_RULE, topics=tuple(re.compile(re.escape(t)) for t in topics)
        ),
    )
