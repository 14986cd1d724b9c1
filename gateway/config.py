"""The gateway's configuration: parsed and checked once at start-up into frozen values.

A bad configuration stops start-up with :class:`ConfigError`, whose message names the key
and the file.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import resource
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

import yaml

from policies import strict_yaml
from protocol.framing import DEFAULT_MAX_FRAME_BYTES

from .client_configs import ClientConfigCodes
from .principal import SslPrincipalMapper


class ConfigError(Exception):
    """A configuration problem; the message names the key and where it came from."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HostPort:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerDefaults:
    """What the brokers use for a CreateTopics count of -1, in Kafka's names, as the operator
    states them (``upstream.broker_defaults``); None where not stated."""

    num_partitions: int | None = None
    """``num.partitions``"""
    default_replication_factor: int | None = None
    """``default.replication.factor``"""


TANSU_BROKER_DEFAULTS = BrokerDefaults(num_partitions=3, default_replication_factor=1)
"""What the embedded broker (Tansu 0.6, one broker) creates for -1: 3 partitions of one
replica. It reports no broker configs, so the gateway cannot read them there."""


class Secret:
    """A password or client secret, read from a file or an environment variable at start-up.

    Its ``repr`` and ``str`` name only where it came from, so a config object, a log line or
    an exception that shows it never shows the secret; :meth:`reveal` is the one way to it.
    """

    __slots__ = ("_value", "source")

    def __init__(self, value: str, source: str) -> None:
        self._value = value
        self.source = source
        """``file /run/secrets/x`` or ``environment KPG_PASSWORD``."""

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret(<from {self.source}>)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self.source)


@dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamTlsConfig:
    """TLS to the brokers (``upstream.tls``), for every connection the gateway opens to one."""

    ca_file: str | None = None
    """The CA bundle that signs the brokers' certificates; None: the system's trust store."""
    cert_file: str | None = None
    """The gateway's own certificate (mTLS to the brokers), with ``key_file``."""
    key_file: str | None = None
    check_hostname: bool = True
    """The broker's certificate must name the host the gateway dialled (Kafka's
    ssl.endpoint.identification.algorithm=https). Off only for brokers whose certificates
    name no usable host: the connection is then open to anyone holding a certificate from
    the CA."""


SASL_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


@dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamSaslConfig:
    """The credentials of the gateway's own clients (``upstream.sasl``): the state store, the
    audit sink. Client connections authenticate themselves, through the gateway."""

    mechanism: str
    username: str | None = None
    """PLAIN and SCRAM."""
    password: Secret | None = None
    """PLAIN and SCRAM, from ``password_file`` or ``password_env``."""
    token_endpoint_url: str | None = None
    """OAUTHBEARER: the OAuth 2 token endpoint (client credentials grant)."""
    client_id: str | None = None
    client_secret: Secret | None = None
    """OAUTHBEARER, from ``client_secret_file`` or ``client_secret_env``."""
    scope: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamConfig:
    bootstrap_servers: tuple[HostPort, ...]
    """Empty: start an embedded Tansu broker and front it."""
    connect_timeout_s: float = 10.0
    ignores_validate_only: bool = False
    """The brokers create topics even when asked to validate only (Tansu does): the gateway
    answers such dry runs itself instead of forwarding them."""
    topic_config_source_unreliable: bool = False
    """The brokers report topics' own configs with the DEFAULT source (Tansu does, listing only
    the configs set on the topic): every config they report counts as set on the topic."""
    ignores_replica_assignments: bool = False
    """The brokers create a topic with their default counts when CreateTopics gives manual
    replica assignments (and counts of -1), ignoring the assignments (Tansu does): such a topic
    is judged with the broker's defaults, as it will be created."""
    accepts_produce_to_missing_topics: bool = False
    """The brokers answer a Produce to a topic or partition they do not have with success and
    keep its records, which a topic of that name created later holds (Tansu does): the gateway
    answers such a partition UNKNOWN_TOPIC_OR_PARTITION itself, as Kafka does, after asking
    Metadata for every Produce's topics."""
    request_timeout_s: float = 30.0
    """How long the gateway waits for answers to the requests it sends itself."""
    broker_defaults: BrokerDefaults = BrokerDefaults()
    """num.partitions and default.replication.factor, for brokers that do not report them to
    the client (Tansu; a Kafka client without DESCRIBE_CONFIGS on the cluster). Stated values
    are used before what a broker reports."""
    auto_create: str = "judge"
    """What becomes of the topics a Metadata request would make the brokers create
    (``auto.create.topics.enable``): ``judge`` (as a CreateTopics with the broker's defaults),
    ``deny`` (none is created) or ``pass`` (the brokers create them unjudged: unsafe)."""
    tls: UpstreamTlsConfig | None = None
    """TLS to the brokers; None: plaintext."""
    sasl: UpstreamSaslConfig | None = None
    """The gateway's own clients' credentials; None: they connect unauthenticated."""


AUDIT_ON_FAILURE: Final = ("continue", "deny")


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditConfig:
    spool_dir: str | None = None
    """JSON-lines segments for the Spark job."""
    topic: str | None = None
    """An audit topic on the upstream cluster (created if missing). With neither a spool nor
    a topic, decisions are only logged and counted."""
    topic_replication_factor: int = -1
    segment_max_bytes: int = 64 * 1024 * 1024
    segment_max_age_s: float = 60.0
    fsync: str = "interval"
    """``always`` (every write), ``interval`` (at most 1 s apart) or ``segment`` (on rotation)."""
    queue_max_events: int = 10_000
    produce_summary_interval_s: float = 60.0
    produce_summary_max_keys: int = 10_000
    """Keys (topic, principal, client id) an interval's produce summaries keep; the traffic of
    further keys is counted in one folded summary (topic ``*``) per principal."""
    instance: str = "kpg"
    on_failure: str = "continue"
    """When a sink cannot write a decision's events: ``continue`` (counted and logged; the
    request goes on) or ``deny`` (the request is refused: nothing changes unaudited)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StateConfig:
    """Where the gateway keeps what brokers would refuse (record.validation.policy per topic,
    dynamic client configs)."""

    store: str = "sqlite"
    """``sqlite`` (a local file: one gateway, or several on one host) or ``kafka`` (a
    compacted topic on the upstream cluster, read by every gateway instance)."""
    path: str = "var/kpg-state.db"
    topic: str = "_kpg_state"
    refresh_interval_s: float = 2.0
    """How often another instance's writes are picked up (sqlite: re-read the file; kafka:
    the longest a read of the state topic waits; default 0.5 s there)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientConfigsConfig:
    """Dynamic client configs (seed 003, :mod:`gateway.client_configs`): the gateway's codes
    for them, and what it enforces on the wire (both off unless asked for; see the README)."""

    codes: ClientConfigCodes = ClientConfigCodes()
    enforce_acks: bool = False
    """Produce: raise acks=1 to -1 where acks=-1 (or all) is configured for the connection's
    user and client-id. acks=0 requests are never changed."""
    enforce_session_timeout: bool = False
    """JoinGroup: set session_timeout_ms to the configured session.timeout.ms; a
    ConsumerGroupHeartbeat (KIP-848, which carries none) from such a client is refused."""
    admin_principals: frozenset[str] | None = None
    """Who may alter dynamic client configs and describe other users' (seed 003 asks for
    CLUSTER authorization there). None: anyone who reaches the gateway (a warning at start)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TlsConfig:
    """TLS on the client listeners; with client certificates the subject is the principal."""

    cert_file: str
    key_file: str
    ca_file: str | None = None
    client_auth: str = "none"
    """``required``, ``requested`` or ``none``, like Kafka's ssl.client.auth."""
    principal_mapping_rules: str = "DEFAULT"
    """Kafka's ``ssl.principal.mapping.rules``, as written: from a certificate's subject to
    the principal's name."""
    principal_mapper: SslPrincipalMapper = field(default_factory=SslPrincipalMapper, repr=False)
    """The rules, parsed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SaslListenerConfig:
    """SASL on the client listeners: the exchange passes through to the brokers; this only
    says how the gateway reads the principal once the broker has accepted it."""

    oauthbearer_sub_claim_name: str = "sub"
    """Kafka's ``sasl.oauthbearer.sub.claim.name``: the token claim that names the principal."""
    client_auth: str = "none"
    """``required``: a connection must complete a SASL exchange (which the broker accepts)
    before anything but ApiVersions, SaslHandshake and SaslAuthenticate, as on Kafka's SASL
    listeners; anything else closes it. ``none``: no such gate (unauthenticated connections
    are ANONYMOUS). Unset: ``required`` when ``upstream.sasl`` is set (the brokers' listener
    then requires SASL of every connection through the gateway too), else ``none``."""


KAFKA_UNLIMITED: Final = 2_147_483_647
"""Kafka's "no limit" for ``max.connections`` and ``max.connections.per.ip``."""
UNLIMITED: Final = -1
"""``connections.max.idle.ms`` (never closed) and ``queued.max.request.bytes`` (no cap), as
in Kafka."""
DEFAULT_QUEUED_MAX_REQUEST_BYTES: Final = 256 * 1024 * 1024
DEFAULT_RECORD_VALIDATION_MAX_RECORDS: Final = 1_000_000
"""``record.validation.max.records``: librdkafka's largest ``batch.num.messages``. An
uncompressed request at Kafka's default ``message.max.bytes`` (1,048,588) holds at most
about 150,000 records (7 bytes is the smallest record); the rest is room for compressed ones."""
DEFAULT_RECORD_VALIDATION_MAX_RECORD_BYTES: Final = 1_048_588
DEFAULT_JUDGED_REQUEST_MAX_BYTES: Final = 8 * 1024 * 1024
"""``judged.request.max.bytes``: decoded whole, such a request costs the gateway about 10 to
18 times its size in memory, and the event loop is blocked while it decodes (a 100 MiB one:
over 1 GB and seconds); 8 MiB holds a Metadata request naming 150,000 topics of 50
characters or a ListOffsets of 450,000 partitions."""
DEFAULT_JUDGED_REQUEST_MAX_ITEMS: Final = 1_000
"""``judged.request.max.items``: each topic, config resource or group a request has the
policies decide is judged on the event loop and written as its own audit event: 10,000
denied topics in a 150 KB CreateTopics cost the gateway 2.9 s and 8.8 MiB of audit."""
DEFAULT_CLIENT_CONFIGS_MAX_ENTITIES: Final = 10_000
"""``client.configs.max.entities``: every gateway instance holds the whole state store and
reads all of it again after any change; with ``client_configs.admin_principals`` unset anyone
may add entities."""
DEFAULT_CLIENT_AUDIT_EVENTS_PER_SEC: Final = 500
"""``client.audit.events.per.sec``: a denial's event is about 900 bytes, so one client gets
about 450 KB/s of audit (1.6 GB an hour) at most, while a ``kpg dry-run`` of a 5,000-topic
manifest (one event per topic) goes through unpaced (:data:`gateway.limits.AUDIT_BURST_S`)."""
DEFAULT_SCHEMA_REGISTRY_LOOKUPS_PER_REQUEST: Final = 32
"""``schema.registry.lookups.per.request``: a producer may put a made-up schema id in every
record; each was one blocking registry request (a 372 KB Produce of 20,000 records made
20,000, holding a validation thread 10 s past the request's refusal)."""
DEFAULT_SCHEMA_REGISTRY_LOOKUPS_PER_SEC: Final = 100
"""``schema.registry.lookups.per.sec``: a found id is remembered for good, so steady traffic
asks for none; this is for cold starts and new schemas."""
DEFAULT_PRODUCE_MAX_PARTITIONS: Final = 20_000
"""``produce.max.partitions``: each partition entry of a Produce request the gateway reads
costs it 10 to 17 us on the event loop whatever it holds (6 bytes with no records): 2,000,000
empty ones in 11 MiB held every client for 34 s. Clients send at most a request's worth of
batches (``max.request.size``, librdkafka's ``message.max.bytes``: 1 MB), some 14,000
partitions of the smallest batches; 20,000 cost the gateway 0.3 s."""
"""``record.validation.max.record.bytes``: Kafka's default ``message.max.bytes``. Clients
refuse larger records themselves unless told otherwise (max.request.size 1 MiB in Java,
message.max.bytes 1,000,000 in librdkafka)."""
_RESERVED_FILES: Final = 64
"""Open files kept for everything but client connections: listeners, the state store, audit
spool and sinks, the metrics endpoint, the event loop's own, plug-ins."""


def default_max_connections() -> int:
    """``max.connections`` when unset: as many client connections as the process's open-file
    limit leaves room for, each holding two sockets (the client's and its upstream link).
    Past that limit accept() fails and, worse, existing clients cannot open their upstream
    link; refused at accept, a new client fails alone and cleanly."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return KAFKA_UNLIMITED
    return min(max((soft - _RESERVED_FILES) // 2, 1), KAFKA_UNLIMITED)


@dataclass(frozen=True, slots=True, kw_only=True)
class LimitsConfig:
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_in_flight_requests: int = 100
    connections_max_idle_ms: int = 600_000
    """Kafka's ``connections.max.idle.ms``: a connection with no request in flight and
    nothing read for this long is closed; -1 never."""
    max_connections: int = field(default_factory=default_max_connections)
    """Kafka's ``max.connections``, over every listener; a connection past it is closed at
    accept."""
    max_connections_per_ip: int = KAFKA_UNLIMITED
    """Kafka's ``max.connections.per.ip``."""
    max_connection_creation_rate: int = KAFKA_UNLIMITED
    """Kafka's ``max.connection.creation.rate``: connections admitted per second over every
    listener; one past it is closed at accept (Kafka delays the accept instead)."""
    max_connection_creation_rate_per_ip: int = KAFKA_UNLIMITED
    """The same per client address (in Kafka, the ``connection_creation_rate`` quota of an
    ``ips`` entity)."""
    queued_max_request_bytes: int = DEFAULT_QUEUED_MAX_REQUEST_BYTES
    """Kafka's ``queued.max.request.bytes``: the bytes of requests being received (and
    handed on) that the gateway holds over every connection; -1 no cap."""
    record_validation_max_records: int = DEFAULT_RECORD_VALIDATION_MAX_RECORDS
    """``record.validation.max.records``: the records one Produce request may ask the gateway
    to validate, counted from its batches' record_count before any is read."""
    record_validation_max_inflated_bytes: int = DEFAULT_MAX_FRAME_BYTES
    """``record.validation.max.inflated.bytes``: what one Produce request's compressed batches
    may decompress to while validated; unset, ``max_frame_bytes``: a compressed request costs
    no more reading than the largest the gateway takes uncompressed."""
    record_validation_max_record_bytes: int = DEFAULT_RECORD_VALIDATION_MAX_RECORD_BYTES
    """``record.validation.max.record.bytes``: the longest record the gateway validates (its
    size as encoded in the batch, decompressed). A record is the one piece of validation
    that cannot be split into turns on the event loop, so this bounds every turn."""
    judged_request_max_bytes: int = DEFAULT_JUDGED_REQUEST_MAX_BYTES
    """``judged.request.max.bytes``: the largest request of a judged API other than Produce
    that the gateway decodes to judge it, and of OffsetCommit v1 and Fetch v15+, which it
    walks partition by partition; a larger one closes the connection unread, as Kafka closes
    one over ``socket.request.max.bytes``; -1 no cap."""
    produce_max_partitions: int = DEFAULT_PRODUCE_MAX_PARTITIONS
    """``produce.max.partitions``: the partition entries of a Produce request the gateway
    reads (to validate its records or count it in the audit summaries); one with more closes
    the connection; -1 no cap."""
    judged_request_max_items: int = DEFAULT_JUDGED_REQUEST_MAX_ITEMS
    """``judged.request.max.items``: the topics, config resources or groups one request may
    have the policies decide (each judged and audited alone); a request with more is refused
    whole, with one audit event; -1 no cap."""
    client_configs_max_entities: int = DEFAULT_CLIENT_CONFIGS_MAX_ENTITIES
    """``client.configs.max.entities``: the users and user:client-id pairs the gateway keeps
    dynamic client configs for; a change that would add one more is refused; -1 no cap."""
    client_audit_events_per_sec: int = DEFAULT_CLIENT_AUDIT_EVENTS_PER_SEC
    """``client.audit.events.per.sec``: how fast one client (a principal, or an
    unauthenticated client's address) may have the gateway write audit events; a client
    over it has its next requests wait (:class:`gateway.limits.AuditPace`); -1 no cap."""
    schema_registry_lookups_per_request: int = DEFAULT_SCHEMA_REGISTRY_LOOKUPS_PER_REQUEST
    """``schema.registry.lookups.per.request``: the schema ids one Produce request may have
    the gateway ask the registry about (ids it does not remember yet); a record past it is
    rejected, never written unchecked."""
    schema_registry_lookups_per_sec: int = DEFAULT_SCHEMA_REGISTRY_LOOKUPS_PER_SEC
    """``schema.registry.lookups.per.sec``: the registry requests one gateway process makes
    a second, over every client; a record that would need one more is rejected."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GatewayConfig:
    listen: HostPort
    advertised_host: str
    node_port_base: int
    """Node N's listener port is ``node_port_base + N``; 0 picks free ports (tests)."""
    upstream: UpstreamConfig
    limits: LimitsConfig = LimitsConfig()
    metrics: HostPort | None = None
    shutdown_timeout_s: float = 10.0
    audit: AuditConfig = AuditConfig()
    tls: TlsConfig | None = None
    sasl: SaslListenerConfig = SaslListenerConfig()
    state: StateConfig = StateConfig()
    client_configs: ClientConfigsConfig = ClientConfigsConfig()
    policies: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    source: str = "<defaults>"
    policy_version: str = ""
    """``sha256:`` and 16 hex digits of the configuration that decides verdicts (see
    :func:`policy_version`); every audit event records it."""


_TOP_KEYS = frozenset(
    {
        "listen",
        "advertised_host",
        "node_port_base",
        "upstream",
        "limits",
        "metrics",
        "shutdown_timeout_s",
        "policies",
        "audit",
        "tls",
        "sasl",
        "state",
        "client_configs",
    }
)
_UPSTREAM_KEYS = frozenset(
    {
        "bootstrap_servers",
        "connect_timeout_s",
        "ignores_validate_only",
        "topic_config_source_unreliable",
        "ignores_replica_assignments",
        "accepts_produce_to_missing_topics",
        "request_timeout_s",
        "broker_defaults",
        "auto_create",
        "tls",
        "sasl",
    }
)
_UPSTREAM_TLS_KEYS = frozenset({"ca_file", "cert_file", "key_file", "check_hostname"})
_UPSTREAM_SASL_KEYS = frozenset(
    {
        "mechanism",
        "username",
        "password_file",
        "password_env",
        "token_endpoint_url",
        "client_id",
        "client_secret_file",
        "client_secret_env",
        "scope",
    }
)
_AUTO_CREATE_MODES = ("judge", "deny", "pass")
_BROKER_DEFAULT_KEYS = frozenset({"num.partitions", "default.replication.factor"})
_STATE_KEYS = frozenset({"store", "path", "topic", "refresh_interval_s"})
_CLIENT_CONFIGS_KEYS = frozenset({"codes", "enforce", "admin_principals"})
_ENFORCE_KEYS = frozenset({"acks", "session_timeout"})
_TLS_KEYS = frozenset(
    {"cert_file", "key_file", "ca_file", "client_auth", "principal_mapping_rules"}
)
_SASL_LISTENER_KEYS = frozenset({"oauthbearer_sub_claim_name", "client_auth"})
_AUDIT_KEYS = frozenset(
    {
        "spool_dir",
        "topic",
        "topic_replication_factor",
        "segment_max_bytes",
        "segment_max_age_s",
        "fsync",
        "queue_max_events",
        "produce_summary_interval_s",
        "produce_summary_max_keys",
        "instance",
        "on_failure",
    }
)
_LIMIT_KEYS = frozenset(
    {
        "max_frame_bytes",
        "max_in_flight_requests",
        "connections.max.idle.ms",
        "max.connections",
        "max.connections.per.ip",
        "max.connection.creation.rate",
        "max.connection.creation.rate.per.ip",
        "queued.max.request.bytes",
        "record.validation.max.records",
        "record.validation.max.inflated.bytes",
        "record.validation.max.record.bytes",
        "judged.request.max.bytes",
        "produce.max.partitions",
        "judged.request.max.items",
        "client.configs.max.entities",
        "client.audit.events.per.sec",
        "schema.registry.lookups.per.request",
        "schema.registry.lookups.per.sec",
    }
)


def parse_host_port(text: str, key: str, source: str) -> HostPort:
    host, sep, port_text = str(text).rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ConfigError(f"{source}: {key}: expected HOST:PORT, got {text!r}")
    return HostPort(host=host.strip("[]"), port=int(port_text))


def _number(
    value: object, key: str, source: str, *, minimum: float, integer: bool = True
) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{source}: {key}: expected a number, got {value!r}")
    if not math.isfinite(value):
        # .nan compares false with every bound, so it passed the minimum check
        raise ConfigError(f"{source}: {key}: expected a finite number, got {value!r}")
    if integer and not isinstance(value, int):
        raise ConfigError(f"{source}: {key}: expected a whole number, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{source}: {key}: must be at least {minimum}, got {value!r}")
    return value


def _section(
    raw: Mapping[str, Any], key: str, allowed: frozenset[str], source: str
) -> dict[str, Any]:
    value = raw.get(key) or {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{source}: {key}: expected a mapping, got {value!r}")
    for sub in value:
        if sub not in allowed:
            raise ConfigError(
                f"{source}: {key}.{sub}: unknown key (known: {', '.join(sorted(allowed))})"
            )
    return dict(value)


def _flag(value: object, key: str, source: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{source}: {key}: expected true or false, got {value!r}")
    return value


def _servers(value: object, key: str, source: str) -> tuple[HostPort, ...]:
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ConfigError(f"{source}: {key}: expected a list of HOST:PORT, got {value!r}")
    servers = tuple(
        parse_host_port(str(item).strip(), key, source) for item in items if str(item).strip()
    )
    if not servers and value not in ([], ()):
        # what an unset variable in a template or a script (--upstream "$KAFKA") gives: read
        # as no brokers, it started the embedded in-memory broker in place of the cluster
        raise ConfigError(
            f"{source}: {key}: empty ({value!r}): list the brokers as HOST:PORT, or leave the "
            "key out (or write []) to start the embedded broker"
        )
    return servers


def _tls(raw: Mapping[str, Any], source: str) -> TlsConfig | None:
    if not raw.get("tls"):
        return None
    section = _section(raw, "tls", _TLS_KEYS, source)
    for key in ("cert_file", "key_file"):
        if not isinstance(section.get(key), str):
            raise ConfigError(f"{source}: tls.{key}: required, the path of a PEM file")
    client_auth = section.get("client_auth", "none")
    if client_auth not in ("required", "requested", "none"):
        raise ConfigError(
            f"{source}: tls.client_auth: expected required, requested or none, got {client_auth!r}"
        )
    ca_file = section.get("ca_file")
    if client_auth != "none" and not isinstance(ca_file, str):
        raise ConfigError(f"{source}: tls.ca_file: required to verify client certificates")
    for key in ("cert_file", "key_file", "ca_file"):
        path = section.get(key)
        if path is not None and not Path(path).is_file():
            raise ConfigError(f"{source}: tls.{key}: no such file: {path}")
    rules = section.get("principal_mapping_rules", "DEFAULT")
    if not isinstance(rules, str):
        raise ConfigError(
            f"{source}: tls.principal_mapping_rules: expected Kafka's rules text "
            f"(RULE:pattern/replacement/[LU], ..., DEFAULT), got {rules!r}"
        )
    try:
        mapper = SslPrincipalMapper(rules)
    except ValueError as exc:
        raise ConfigError(f"{source}: tls.principal_mapping_rules: {exc}") from None
    return TlsConfig(
        cert_file=section["cert_file"],
        key_file=section["key_file"],
        ca_file=ca_file,
        client_auth=client_auth,
        principal_mapping_rules=rules,
        principal_mapper=mapper,
    )


def _sasl_listener(
    raw: Mapping[str, Any], upstream: UpstreamConfig, source: str
) -> SaslListenerConfig:
    """The top-level ``sasl`` section."""
    section = _section(raw, "sasl", _SASL_LISTENER_KEYS, source)
    claim = _text(section, "oauthbearer_sub_claim_name", "sasl", source)
    inferred = "required" if upstream.sasl is not None else "none"
    client_auth = section.get("client_auth", inferred)
    if client_auth not in ("required", "none"):
        raise ConfigError(
            f"{source}: sasl.client_auth: expected required or none, got {client_auth!r}"
        )
    if client_auth == "none" and upstream.sasl is not None:
        raise ConfigError(
            f"{source}: sasl.client_auth: none, but upstream.sasl is set: the brokers' listener "
            "requires SASL of every connection the gateway opens, so a client that does not "
            "authenticate would only reach what the gateway answers itself, as ANONYMOUS. "
            "Leave it unset (required)"
        )
    return SaslListenerConfig(oauthbearer_sub_claim_name=claim or "sub", client_auth=client_auth)


def _client_configs(raw: Mapping[str, Any], source: str) -> ClientConfigsConfig:
    section = _section(raw, "client_configs", _CLIENT_CONFIGS_KEYS, source)
    codes_raw = section.get("codes") or {}
    enforce = section.get("enforce") or {}
    for key, value in (("codes", codes_raw), ("enforce", enforce)):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{source}: client_configs.{key}: expected a mapping, got {value!r}")
    for key in enforce:
        if key not in _ENFORCE_KEYS:
            raise ConfigError(
                f"{source}: client_configs.enforce.{key}: unknown key "
                f"(known: {', '.join(sorted(_ENFORCE_KEYS))})"
            )
    try:
        codes = ClientConfigCodes.from_mapping(codes_raw, key_prefix="client_configs.codes.")
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    admins = section.get("admin_principals")
    if "admin_principals" in section and admins is None:
        raise ConfigError(
            f"{source}: client_configs.admin_principals: no value, which would read as unset "
            "(anyone may alter client configs); list the principals, [] for no one, or leave "
            "the key out"
        )
    if admins is not None and (
        not isinstance(admins, list) or not all(isinstance(a, str) and a for a in admins)
    ):
        raise ConfigError(
            f"{source}: client_configs.admin_principals: expected a list of principals "
            f"such as User:alice, got {admins!r}"
        )
    return ClientConfigsConfig(
        admin_principals=frozenset(admins) if admins is not None else None,
        codes=codes,
        enforce_acks=_flag(enforce.get("acks", False), "client_configs.enforce.acks", source),
        enforce_session_timeout=_flag(
            enforce.get("session_timeout", False), "client_configs.enforce.session_timeout", source
        ),
    )


def _broker_defaults(up: Mapping[str, Any], source: str) -> BrokerDefaults:
    """``upstream.broker_defaults``."""
    section = up.get("broker_defaults") or {}
    if not isinstance(section, Mapping):
        raise ConfigError(
            f"{source}: upstream.broker_defaults: expected a mapping, got {section!r}"
        )
    for key in section:
        if key not in _BROKER_DEFAULT_KEYS:
            raise ConfigError(
                f"{source}: upstream.broker_defaults.{key}: unknown key "
                f"(known: {', '.join(sorted(_BROKER_DEFAULT_KEYS))})"
            )
    found = {
        key: int(_number(value, f"upstream.broker_defaults.{key}", source, minimum=1))
        for key, value in section.items()
        if value is not None
    }
    if found.get("default.replication.factor", 1) > 32767:
        raise ConfigError(
            f"{source}: upstream.broker_defaults.default.replication.factor: at most 32767 "
            "(an int16 in CreateTopics)"
        )
    return BrokerDefaults(
        num_partitions=found.get("num.partitions"),
        default_replication_factor=found.get("default.replication.factor"),
    )


def _upstream(raw: Mapping[str, Any], source: str) -> UpstreamConfig:
    """The ``upstream`` section."""
    up = _section(raw, "upstream", _UPSTREAM_KEYS, source)
    return UpstreamConfig(
        bootstrap_servers=_servers(
            up.get("bootstrap_servers"), "upstream.bootstrap_servers", source
        ),
        connect_timeout_s=float(
            _number(
                up.get("connect_timeout_s", 10.0),
                "upstream.connect_timeout_s",
                source,
                minimum=0.1,
                integer=False,
            )
        ),
        ignores_validate_only=_flag(
            up.get("ignores_validate_only", False), "upstream.ignores_validate_only", source
        ),
        topic_config_source_unreliable=_flag(
            up.get("topic_config_source_unreliable", False),
            "upstream.topic_config_source_unreliable",
            source,
        ),
        ignores_replica_assignments=_flag(
            up.get("ignores_replica_assignments", False),
            "upstream.ignores_replica_assignments",
            source,
        ),
        accepts_produce_to_missing_topics=_flag(
            up.get("accepts_produce_to_missing_topics", False),
            "upstream.accepts_produce_to_missing_topics",
            source,
        ),
        request_timeout_s=float(
            _number(
                up.get("request_timeout_s", 30.0),
                "upstream.request_timeout_s",
                source,
                minimum=0.1,
                integer=False,
            )
        ),
        broker_defaults=_broker_defaults(up, source),
        auto_create=_auto_create(up.get("auto_create", "judge"), source),
        tls=_upstream_tls(up, source),
        sasl=_upstream_sasl(up, source),
    )


def _pem_file(section: Mapping[str, Any], key: str, where: str, source: str) -> str | None:
    path = section.get(key)
    if path is None:
        return None
    if not isinstance(path, str) or not path:
        raise ConfigError(f"{source}: {where}.{key}: expected the path of a PEM file")
    if not Path(path).is_file():
        raise ConfigError(f"{source}: {where}.{key}: no such file: {path}")
    return path


def _upstream_tls(up: Mapping[str, Any], source: str) -> UpstreamTlsConfig | None:
    """``upstream.tls``: absent or false for plaintext; true or a mapping for TLS."""
    value = up.get("tls")
    if value is None or value is False:
        return None
    if value is True:
        return UpstreamTlsConfig()
    section = _section({"upstream.tls": value}, "upstream.tls", _UPSTREAM_TLS_KEYS, source)
    files = {key: _pem_file(section, key, "upstream.tls", source) for key in _PEM_KEYS}
    if (files["cert_file"] is None) != (files["key_file"] is None):
        raise ConfigError(
            f"{source}: upstream.tls: cert_file and key_file go together (the gateway's "
            "client certificate and its key)"
        )
    return UpstreamTlsConfig(
        ca_file=files["ca_file"],
        cert_file=files["cert_file"],
        key_file=files["key_file"],
        check_hostname=_flag(
            section.get("check_hostname", True), "upstream.tls.check_hostname", source
        ),
    )


_PEM_KEYS: Final = ("ca_file", "cert_file", "key_file")


def read_secret(section: Mapping[str, Any], name: str, where: str, source: str) -> Secret | None:
    """``<name>_file`` or ``<name>_env``: never the secret itself in the config."""
    file_key, env_key = f"{name}_file", f"{name}_env"
    if file_key in section and env_key in section:
        raise ConfigError(f"{source}: {where}: give {file_key} or {env_key}, not both")
    if file_key in section:
        path = section[file_key]
        if not isinstance(path, str) or not path:
            raise ConfigError(f"{source}: {where}.{file_key}: expected a file path")
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise ConfigError(
                f"{source}: {where}.{file_key}: cannot read {path}: {reason}"
            ) from None
        value, origin = text.rstrip("\r\n"), f"file {path}"
    elif env_key in section:
        variable = section[env_key]
        if not isinstance(variable, str) or not variable:
            raise ConfigError(f"{source}: {where}.{env_key}: expected a variable name")
        found = os.environ.get(variable)
        if found is None:
            raise ConfigError(f"{source}: {where}.{env_key}: {variable} is not set")
        value, origin = found, f"environment {variable}"
    else:
        return None
    if not value:
        raise ConfigError(f"{source}: {where}: the {name} read from {origin} is empty")
    return Secret(value, origin)


def _text(section: Mapping[str, Any], key: str, where: str, source: str) -> str | None:
    value = section.get(key)
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigError(f"{source}: {where}.{key}: expected a non-empty string")
    return value


def _upstream_sasl(up: Mapping[str, Any], source: str) -> UpstreamSaslConfig | None:
    """``upstream.sasl``."""
    if not up.get("sasl"):
        return None
    where = "upstream.sasl"
    section = _section({where: up["sasl"]}, where, _UPSTREAM_SASL_KEYS, source)
    mechanism = section.get("mechanism")
    if mechanism not in SASL_MECHANISMS:
        raise ConfigError(
            f"{source}: {where}.mechanism: expected one of {', '.join(SASL_MECHANISMS)}, "
            f"got {mechanism!r}"
        )
    texts = {
        key: _text(section, key, where, source)
        for key in ("username", "token_endpoint_url", "client_id", "scope")
    }
    password = read_secret(section, "password", where, source)
    client_secret = read_secret(section, "client_secret", where, source)
    if mechanism == "OAUTHBEARER":
        needed: dict[str, object] = {
            "token_endpoint_url": texts["token_endpoint_url"],
            "client_id": texts["client_id"],
            "client_secret_file or client_secret_env": client_secret,
        }
    else:
        needed = {"username": texts["username"], "password_file or password_env": password}
    for key, found in needed.items():
        if found is None:
            raise ConfigError(f"{source}: {where}: {key} is required for {mechanism}")
    url = texts["token_endpoint_url"]
    if url is not None and not url.startswith(("https://", "http://")):
        raise ConfigError(f"{source}: {where}.token_endpoint_url: expected an http(s) URL")
    return UpstreamSaslConfig(
        mechanism=mechanism,
        username=texts["username"],
        password=password,
        token_endpoint_url=url,
        client_id=texts["client_id"],
        client_secret=client_secret,
        scope=texts["scope"],
    )


def _auto_create(value: object, source: str) -> str:
    if value not in _AUTO_CREATE_MODES:
        raise ConfigError(
            f"{source}: upstream.auto_create: expected judge, deny or pass, got {value!r}"
        )
    return str(value)


def _audit(raw: Mapping[str, Any], source: str) -> AuditConfig:
    """The ``audit`` section."""
    au = _section(raw, "audit", _AUDIT_KEYS, source)
    fsync = au.get("fsync", "interval")
    if fsync not in ("always", "segment", "interval"):
        raise ConfigError(
            f"{source}: audit.fsync: expected always, segment or interval, got {fsync!r}"
        )
    spool_dir = au.get("spool_dir")
    if spool_dir is not None and not isinstance(spool_dir, str):
        raise ConfigError(
            f"{source}: audit.spool_dir: expected a directory path, got {spool_dir!r}"
        )
    audit_topic = au.get("topic")
    if audit_topic is not None and (not isinstance(audit_topic, str) or not audit_topic):
        raise ConfigError(f"{source}: audit.topic: expected a topic name, got {audit_topic!r}")
    on_failure = au.get("on_failure", "continue")
    if on_failure not in AUDIT_ON_FAILURE:
        raise ConfigError(
            f"{source}: audit.on_failure: expected continue or deny, got {on_failure!r}"
        )
    return AuditConfig(
        spool_dir=spool_dir,
        topic=audit_topic,
        topic_replication_factor=int(
            _number(
                au.get("topic_replication_factor", -1),
                "audit.topic_replication_factor",
                source,
                minimum=-1,
            )
        ),
        segment_max_bytes=int(
            _number(
                au.get("segment_max_bytes", 64 * 1024 * 1024),
                "audit.segment_max_bytes",
                source,
                minimum=1024,
            )
        ),
        segment_max_age_s=float(
            _number(
                au.get("segment_max_age_s", 60.0),
                "audit.segment_max_age_s",
                source,
                minimum=0.1,
                integer=False,
            )
        ),
        fsync=fsync,
        queue_max_events=int(
            _number(au.get("queue_max_events", 10_000), "audit.queue_max_events", source, minimum=1)
        ),
        produce_summary_interval_s=float(
            _number(
                au.get("produce_summary_interval_s", 60.0),
                "audit.produce_summary_interval_s",
                source,
                minimum=0.1,
                integer=False,
            )
        ),
        produce_summary_max_keys=int(
            _number(
                au.get("produce_summary_max_keys", 10_000),
                "audit.produce_summary_max_keys",
                source,
                minimum=1,
            )
        ),
        instance=str(au.get("instance", "kpg")),
        on_failure=on_failure,
    )


def _state(raw: Mapping[str, Any], source: str) -> StateConfig:
    """The ``state`` section."""
    st = _section(raw, "state", _STATE_KEYS, source)
    if st.get("store", "sqlite") not in ("sqlite", "kafka"):
        raise ConfigError(f"{source}: state.store: expected sqlite or kafka, got {st['store']!r}")
    for key in ("path", "topic"):
        if key in st and (not isinstance(st[key], str) or not st[key]):
            raise ConfigError(f"{source}: state.{key}: expected a non-empty string")
    return StateConfig(
        store=st.get("store", "sqlite"),
        path=st.get("path", "var/kpg-state.db"),
        topic=st.get("topic", "_kpg_state"),
        refresh_interval_s=float(
            _number(
                st.get("refresh_interval_s", 0.5 if st.get("store") == "kafka" else 2.0),
                "state.refresh_interval_s",
                source,
                minimum=0.1,
                integer=False,
            )
        ),
    )


def _limits(raw: Mapping[str, Any], source: str) -> LimitsConfig:
    """The ``limits`` section."""
    lim = _section(raw, "limits", _LIMIT_KEYS, source)
    max_frame_bytes = int(
        _number(
            lim.get("max_frame_bytes", DEFAULT_MAX_FRAME_BYTES),
            "limits.max_frame_bytes",
            source,
            minimum=64,
        )
    )
    return LimitsConfig(
        max_frame_bytes=max_frame_bytes,
        max_in_flight_requests=int(
            _number(
                lim.get("max_in_flight_requests", 100),
                "limits.max_in_flight_requests",
                source,
                minimum=1,
            )
        ),
        connections_max_idle_ms=_limit_or_unlimited(
            lim.get("connections.max.idle.ms", 600_000), "connections.max.idle.ms", source, 1
        ),
        max_connections=int(
            _number(
                lim.get("max.connections", default_max_connections()),
                "limits.max.connections",
                source,
                minimum=1,
            )
        ),
        max_connections_per_ip=int(
            _number(
                lim.get("max.connections.per.ip", KAFKA_UNLIMITED),
                "limits.max.connections.per.ip",
                source,
                minimum=1,
            )
        ),
        max_connection_creation_rate=int(
            _number(
                lim.get("max.connection.creation.rate", KAFKA_UNLIMITED),
                "limits.max.connection.creation.rate",
                source,
                minimum=1,
            )
        ),
        max_connection_creation_rate_per_ip=int(
            _number(
                lim.get("max.connection.creation.rate.per.ip", KAFKA_UNLIMITED),
                "limits.max.connection.creation.rate.per.ip",
                source,
                minimum=1,
            )
        ),
        queued_max_request_bytes=_limit_or_unlimited(
            lim.get("queued.max.request.bytes", DEFAULT_QUEUED_MAX_REQUEST_BYTES),
            "queued.max.request.bytes",
            source,
            64,
        ),
        record_validation_max_records=int(
            _number(
                lim.get("record.validation.max.records", DEFAULT_RECORD_VALIDATION_MAX_RECORDS),
                "limits.record.validation.max.records",
                source,
                minimum=1,
            )
        ),
        record_validation_max_inflated_bytes=int(
            _number(
                lim.get("record.validation.max.inflated.bytes", max_frame_bytes),
                "limits.record.validation.max.inflated.bytes",
                source,
                minimum=1,
            )
        ),
        record_validation_max_record_bytes=int(
            _number(
                lim.get(
                    "record.validation.max.record.bytes",
                    DEFAULT_RECORD_VALIDATION_MAX_RECORD_BYTES,
                ),
                "limits.record.validation.max.record.bytes",
                source,
                minimum=7,
            )
        ),
        judged_request_max_bytes=_limit_or_unlimited(
            lim.get("judged.request.max.bytes", DEFAULT_JUDGED_REQUEST_MAX_BYTES),
            "judged.request.max.bytes",
            source,
            64,
        ),
        produce_max_partitions=_limit_or_unlimited(
            lim.get("produce.max.partitions", DEFAULT_PRODUCE_MAX_PARTITIONS),
            "produce.max.partitions",
            source,
            1,
        ),
        judged_request_max_items=_limit_or_unlimited(
            lim.get("judged.request.max.items", DEFAULT_JUDGED_REQUEST_MAX_ITEMS),
            "judged.request.max.items",
            source,
            1,
        ),
        client_configs_max_entities=_limit_or_unlimited(
            lim.get("client.configs.max.entities", DEFAULT_CLIENT_CONFIGS_MAX_ENTITIES),
            "client.configs.max.entities",
            source,
            1,
        ),
        client_audit_events_per_sec=_limit_or_unlimited(
            lim.get("client.audit.events.per.sec", DEFAULT_CLIENT_AUDIT_EVENTS_PER_SEC),
            "client.audit.events.per.sec",
            source,
            1,
        ),
        schema_registry_lookups_per_request=int(
            _number(
                lim.get(
                    "schema.registry.lookups.per.request",
                    DEFAULT_SCHEMA_REGISTRY_LOOKUPS_PER_REQUEST,
                ),
                "limits.schema.registry.lookups.per.request",
                source,
                minimum=1,
            )
        ),
        schema_registry_lookups_per_sec=int(
            _number(
                lim.get("schema.registry.lookups.per.sec", DEFAULT_SCHEMA_REGISTRY_LOOKUPS_PER_SEC),
                "limits.schema.registry.lookups.per.sec",
                source,
                minimum=1,
            )
        ),
    )


def _limit_or_unlimited(value: object, key: str, source: str, minimum: int) -> int:
    """A limit that also takes Kafka's -1 for none."""
    number = int(_number(value, f"limits.{key}", source, minimum=-math.inf))
    if number != UNLIMITED and number < minimum:
        raise ConfigError(
            f"{source}: limits.{key}: must be -1 (no limit) or at least {minimum}, got {number}"
        )
    return number


def _advertised_host(raw: Mapping[str, Any], listen: HostPort, source: str) -> str:
    """``advertised_host``, which defaults to the listen host unless that is a wildcard."""
    advertised = raw.get("advertised_host")
    if advertised is None:
        if listen.host in ("0.0.0.0", "::"):
            raise ConfigError(
                f"{source}: advertised_host: required when listen is {listen}: clients need a "
                "name or address they can reach"
            )
        advertised = listen.host
    if not isinstance(advertised, str) or not advertised:
        raise ConfigError(f"{source}: advertised_host: expected a host name, got {advertised!r}")
    return advertised


_VERDICT_KEYS = ("policies", "limits", "client_configs")
_VERDICT_UPSTREAM_KEYS = ("auto_create", "broker_defaults")


_JSON_SCHEMA_DIR: Final = "record.validation.json.schema.dir"
"""The built-in record rules' schema files (policies.records.JSON_SCHEMA_DIR)."""


def policy_version(raw: Mapping[str, Any]) -> str:
    """The version of the configuration that decides verdicts: a hash of ``policies``,
    ``limits``, ``client_configs`` and the upstream keys that change a judgement
    (``auto_create``, ``broker_defaults``), as parsed from YAML, keys sorted, and of the
    JSON Schema files the built-in record rules read (``json-schema:<name>``): an edited
    schema decides Produce requests otherwise. Addresses, audit, TLS and state settings do
    not change it; neither does the content of files a plug-in reads by path."""
    upstream = raw.get("upstream") or {}
    verdict: dict[str, Any] = {key: raw.get(key) for key in _VERDICT_KEYS}
    if isinstance(upstream, Mapping):
        verdict["upstream"] = {key: upstream.get(key) for key in _VERDICT_UPSTREAM_KEYS}
    policies = raw.get("policies")
    if isinstance(policies, Mapping) and isinstance(policies.get(_JSON_SCHEMA_DIR), str):
        verdict["json_schemas"] = _schema_digests(Path(policies[_JSON_SCHEMA_DIR]))
    text = json.dumps(verdict, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def _schema_digests(directory: Path) -> dict[str, str]:
    """File name -> SHA-256 of each ``*.json`` file the built-in record rules read in
    ``directory`` (none when it cannot be read: the rules' own check then stops start-up)."""
    try:
        paths = sorted(p for p in directory.glob("*.json") if p.is_file())
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}
    except OSError:
        return {}


RESTART_ONLY: Final = (
    "listen",
    "advertised_host",
    "node_port_base",
    "upstream.bootstrap_servers",
    "upstream.tls",
    "upstream.sasl",
    "metrics",
    "tls",
    "sasl",
    "state",
    "audit",
)
"""Settings a running gateway cannot change (open listeners, links, files and sinks): a
reload that changes them keeps them as they are and names them; they need a restart."""


def _setting(config: GatewayConfig, dotted: str) -> object:
    value: object = config
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def live_part(
    running: GatewayConfig, loaded: GatewayConfig
) -> tuple[GatewayConfig, tuple[str, ...]]:
    """What a reload puts in force: ``loaded`` with the :data:`RESTART_ONLY` settings kept
    as ``running`` has them, and the names of those that differ (each needs a restart)."""
    changed = tuple(key for key in RESTART_ONLY if _setting(running, key) != _setting(loaded, key))
    kept = replace(
        loaded,
        listen=running.listen,
        advertised_host=running.advertised_host,
        node_port_base=running.node_port_base,
        upstream=replace(
            loaded.upstream,
            bootstrap_servers=running.upstream.bootstrap_servers,
            tls=running.upstream.tls,
            sasl=running.upstream.sasl,
        ),
        metrics=running.metrics,
        tls=running.tls,
        sasl=running.sasl,
        state=running.state,
        audit=running.audit,
    )
    return kept, changed


def from_mapping(raw: Mapping[str, Any], source: str) -> GatewayConfig:
    """Build the config from parsed YAML.

    :raises ConfigError: naming the offending key and ``source``.
    """
    for key in raw:
        if key not in _TOP_KEYS:
            raise ConfigError(
                f"{source}: {key}: unknown key (known: {', '.join(sorted(_TOP_KEYS))})"
            )
    listen = parse_host_port(raw.get("listen", "127.0.0.1:9092"), "listen", source)
    advertised = _advertised_host(raw, listen, source)
    node_port_base = int(
        _number(raw.get("node_port_base", 9100), "node_port_base", source, minimum=0)
    )
    if node_port_base > 65535:
        raise ConfigError(f"{source}: node_port_base: must be a port number, got {node_port_base}")
    upstream = _upstream(raw, source)
    audit = _audit(raw, source)
    tls = _tls(raw, source)
    state = _state(raw, source)
    limits = _limits(raw, source)
    metrics_raw = raw.get("metrics")
    metrics = parse_host_port(metrics_raw, "metrics", source) if metrics_raw else None
    policies = raw.get("policies") or {}
    if not isinstance(policies, Mapping):
        raise ConfigError(f"{source}: policies: expected a mapping, got {policies!r}")
    return GatewayConfig(
        listen=listen,
        advertised_host=advertised,
        node_port_base=node_port_base,
        upstream=upstream,
        limits=limits,
        metrics=metrics,
        shutdown_timeout_s=float(
            _number(
                raw.get("shutdown_timeout_s", 10.0),
                "shutdown_timeout_s",
                source,
                minimum=0,
                integer=False,
            )
        ),
        audit=audit,
        tls=tls,
        sasl=_sasl_listener(raw, upstream, source),
        state=state,
        client_configs=_client_configs(raw, source),
        policies=MappingProxyType(dict(policies)),
        source=source,
        policy_version=policy_version(raw),
    )


def load(
    path: Path | None, overrides: Mapping[str, Any] | None = None, *, source: str | None = None
) -> GatewayConfig:
    """Read ``path`` (YAML; None for defaults), apply command-line ``overrides`` (same keys,
    dotted for nested ones: ``upstream.bootstrap_servers``), and check everything. Messages
    name ``source`` (default: ``path``): a worker reads the supervisor's copy of the file
    and names the operator's.

    :raises ConfigError: for an unreadable file, bad YAML, or a bad value.
    """
    raw: dict[str, Any] = {}
    source = source or (str(path) if path is not None else "<defaults>")
    if path is not None:
        try:
            loaded = strict_yaml.load(path.read_bytes(), name=source)
        except OSError as exc:
            raise ConfigError(f"{source}: cannot read: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{source}: not valid YAML: {exc}") from None
        if loaded is None:
            # what a reload reads while the file is being written in place (truncated, not
            # yet written): it read as no policies at all and every default
            raise ConfigError(
                f"{source}: holds no settings (empty, or only comments); write {{}} for every "
                "default. A file being written in place reads so: replace it by renaming a "
                "complete one over it"
            )
        if not isinstance(loaded, dict):
            raise ConfigError(f"{source}: expected a mapping at the top level")
        raw = loaded
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        section, _, key = dotted.rpartition(".")
        target = raw
        if section:
            target = raw.setdefault(section, {}) or {}
            raw[section] = target
        target[key] = value
    return from_mapping(raw, source)


def config_warnings(config: GatewayConfig) -> tuple[str, ...]:
    """What the configuration allows that it may not look like it does: logged at start-up
    and on reload, and printed by ``kpg run --check`` (a reviewer's CI sees them too)."""
    warnings = []
    if config.client_configs.admin_principals is None:
        warnings.append(
            "client_configs.admin_principals is not set: any client that reaches the "
            "gateway may change any user's dynamic client configs"
        )
    tls = config.upstream.tls
    if config.upstream.sasl is not None and tls is None:
        warnings.append(
            "upstream.sasl without upstream.tls: the gateway's own Kafka sessions are not "
            "encrypted (and a PLAIN password crosses the network as sent)"
        )
    if tls is not None and not tls.check_hostname:
        warnings.append(
            "upstream.tls.check_hostname is false: any broker certificate the CA signed is "
            "accepted for any broker address"
        )
    if config.upstream.auto_create == "pass":
        warnings.append(
            "upstream.auto_create is pass: the brokers create any topic a Metadata request "
            "names, unjudged and unaudited"
        )
    modes = _policy_modes(config)
    if not modes:
        warnings.append(
            "policies: no rule and no plug-in: every topic and config change the brokers "
            "accept is allowed (records are still validated where a topic sets "
            "record.validation.policy)"
        )
    elif modes == {"dry-run"}:
        warnings.append(
            "policies: every rule and plug-in is mode: dry-run: nothing is enforced, "
            "violations are only logged and audited"
        )
    return tuple(warnings)


def _policy_modes(config: GatewayConfig) -> set[str]:
    """The modes of the rules and plug-ins ``config`` sets, as the policy loader reads them
    (the section was checked when the configuration was: by ``--check``, at start-up and
    before a reload is applied)."""
    from policies.loader import parse_policy_config  # imports no plug-in

    parsed = parse_policy_config(config.policies, source=config.source)
    return {str(rule.mode) for rule in parsed.rules} | {str(p.mode) for p in parsed.plugins}


def with_embedded_upstream(config: GatewayConfig, server: HostPort) -> GatewayConfig:
    """The config fronting the embedded Tansu broker, with its known differences from Kafka."""
    return replace(
        config,
        upstream=replace(
            config.upstream,
            bootstrap_servers=(server,),
            ignores_validate_only=True,
            topic_config_source_unreliable=True,
            ignores_replica_assignments=True,
            accepts_produce_to_missing_topics=True,
            broker_defaults=TANSU_BROKER_DEFAULTS,
        ),
    )
