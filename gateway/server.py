"""The gateway: a bootstrap listener, one listener per broker node, and shutdown."""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
import time
from collections.abc import Mapping, Sequence

from prometheus_client import Counter

from policies.chain import PolicyChain
from policies.loader import PolicyConfigError, flatten_configs, load_policy_chain
from policies.rules import ProtectedTopicsRule
from protocol.records import record_scanner

from .audit import AuditEmitter, AuditSink, KafkaTopicSink, ProduceSummarizer, SpoolSink
from .config import ConfigError, GatewayConfig, HostPort
from .connection import ClientConnection
from .decisions import DecisionRecorder
from .engine import Engine
from .handlers import build_table
from .handlers.base import Registration
from .limits import ConnectionLimits, RequestMemory, peer_host
from .metrics import GatewayMetrics
from .nodes import NodeListeners
from .policy_runner import PolicyRunner
from .record_validation import RecordValidator, load_record_validator
from .services import Services
from .state import KafkaTopicStore, SqliteStore, StateStore, StateStoreError
from .tasks import TaskSet

log = logging.getLogger(__name__)


class Gateway:
    def __init__(self, config: GatewayConfig, metrics: GatewayMetrics | None = None) -> None:
        if not config.upstream.bootstrap_servers:
            raise ValueError("the gateway needs at least one upstream bootstrap server")
        self.config = config
        self.metrics = metrics or GatewayMetrics()
        try:
            self.policies: PolicyChain = load_policy_chain(
                config.policies, source=config.source, extra_rules=_own_topics_rule(config)
            )
        except PolicyConfigError as exc:
            raise ConfigError(str(exc)) from None
        self.own_topics = frozenset(gateway_topics(config))
        if config.client_configs.admin_principals is None:
            log.warning(
                "client_configs.admin_principals is not set: any client that reaches the "
                "gateway may change any user's dynamic client configs"
            )
        self.audit = _audit_emitter(config, self.metrics)
        self.decisions = DecisionRecorder(
            self.metrics, self.audit, config.audit.instance, policy_version=config.policy_version
        )
        self.state: StateStore = _state_store(config)
        self.record_validator: RecordValidator = load_record_validator(
            config.policies, flatten_configs(config.policies), config.source, config.limits
        )
        self.tasks = TaskSet()
        self.nodes = NodeListeners(
            config.listen.host, config.advertised_host, config.node_port_base, self._start_node
        )
        self.handlers: Mapping[int, Registration] = build_table(
            Services(
                engine=Engine(self.decisions),
                policies=PolicyRunner(self.policies),
                state=self.state,
                records=self.record_validator,
                audit=self.audit,
                metrics=self.metrics,
                # Here rather than in GatewayMetrics: the enforcement of dynamic client configs
                # is the only user (gateway.handlers.produce and gateway.handlers.join_group).
                client_config_enforced=Counter(
                    "kpg_client_config_enforced",
                    "Requests rewritten to a dynamic client config (opt-in enforcement), by config",
                    ["config"],
                    registry=self.metrics.registry,
                ),
                nodes=self.nodes,
                upstream=config.upstream,
                client_configs=config.client_configs,
                own_topics=self.own_topics,
            )
        )
        self._bootstrap: asyncio.Server | None = None
        self._connections: set[ClientConnection] = set()
        self._connection_limits = ConnectionLimits(config.limits, self.metrics)
        self._request_memory = RequestMemory(config.limits.queued_max_request_bytes, self.metrics)
        self._metrics_port: int | None = None
        self._bootstrap_port: int | None = None
        self._ssl: ssl.SSLContext | None = None

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
        try:
            await self.state.start()
        except StateStoreError as exc:
            raise ConfigError(f"{self.config.source}: state: {exc}") from None
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
        self._bootstrap = await asyncio.start_server(
            lambda r, w: self._accept(r, w, "bootstrap", self._bootstrap_targets),
            listen.host,
            listen.port,
            limit=2**20,
            ssl=self._ssl,
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
                self.config.metrics.host, self.config.metrics.port
            )
        log.info(
            "bootstrap listener on %s, upstream %s, record scanner %s",
            self.bootstrap_address,
            ", ".join(map(str, self.config.upstream.bootstrap_servers)),
            record_scanner(),
        )
        limits = self.config.limits
        log.info(
            "limits: max.connections %d, max.connections.per.ip %d, connections.max.idle.ms %d, "
            "queued.max.request.bytes %d",
            limits.max_connections,
            limits.max_connections_per_ip,
            limits.connections_max_idle_ms,
            limits.queued_max_request_bytes,
        )
        if record_scanner() != "native":
            log.warning(
                "record validation reads records with the full Python reader (protocol._recscan "
                "is not built, or KPG_RECORD_SCANNER=python): the same answers, at a fraction "
                "of the throughput"
            )

    def _bootstrap_targets(self) -> Sequence[HostPort]:
        return self.config.upstream.bootstrap_servers

    async def _start_node(self, node_id: int, host: str, port: int) -> asyncio.Server:
        def targets() -> Sequence[HostPort]:
            return (self.nodes.upstream_of(node_id),)

        return await asyncio.start_server(
            lambda r, w: self._accept(r, w, f"node-{node_id}", targets),
            host,
            port,
            limit=2**20,
            ssl=self._ssl,
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
        connection = ClientConnection(
            config=self.config,
            table=self.handlers,
            metrics=self.metrics,
            tasks=self.tasks,
            reader=reader,
            writer=writer,
            listener=listener,
            targets=targets,  # type: ignore[arg-type]
            memory=self._request_memory,
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
        for connection in list(self._connections):
            connection.stop_reading()
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
        self.record_validator.close()
        closed_with_errors = self.policies.close()
        for problem in closed_with_errors:
            log.error("policy close failed: %s", problem)
        self.metrics.stop_serving()
        log.info("gateway stopped")


def _audit_emitter(config: GatewayConfig, metrics: GatewayMetrics) -> AuditEmitter | None:
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
            )
        )
    if not sinks:
        return None
    summarizer = ProduceSummarizer(
        gateway_instance=audit.instance,
        mode="enforce",
        interval_ms=int(audit.produce_summary_interval_s * 1000),
        start_ms=int(time.time() * 1000),
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


def _state_store(config: GatewayConfig) -> StateStore:
    state = config.state
    if state.store == "kafka":
        return KafkaTopicStore(
            config.upstream.bootstrap_servers,
            state.topic,
            refresh_interval_s=state.refresh_interval_s,
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


def _own_topics_rule(config: GatewayConfig) -> tuple[ProtectedTopicsRule, ...]:
    """No client deletes, reconfigures or adds partitions to the gateway's own topics."""
    topics = gateway_topics(config)
    if not topics:
        return ()
    return (
        ProtectedTopicsRule(
            name="gateway-topics", topics=tuple(re.compile(re.escape(t)) for t in topics)
        ),
    )
