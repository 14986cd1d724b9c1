"""Dynamic client configs per user and client-id (seed 003): the domain model. Pure: no I/O.

The gateway keeps these configs in its state store and answers DescribeConfigs and
IncrementalAlterConfigs for two config resource types of its own:

- ``CLIENT``: an application fetches its own configs with its client-id as the resource name;
  the gateway puts the connection's user in front (:func:`user_of`).
- ``USER_CLIENT``: an admin names ``user:client-id`` (:func:`parse_user_client`).

Type and source codes. The seed's codes (resource types 16 and 32, config sources 7 and 8)
are taken in today's Kafka (CLIENT_METRICS, GROUP, CLIENT_METRICS_CONFIG, GROUP_CONFIG). Both
fields are int8 on the wire. Kafka numbers resource types as powers of two (0, 2, 4, 8, 16,
32: the next one is 64, the last that fits in int8) and config sources one by one (0..8,
growing with each KIP). The defaults sit at the far end of int8, away from both sequences:
types 120 (CLIENT) and 121 (USER_CLIENT), sources 120 (DYNAMIC_CLIENT_CONFIG) and 121
(DYNAMIC_DEFAULT_CLIENT_CONFIG). Negative values are refused: clients treat -1 as "unset".
:class:`ClientConfigCodes` makes them configurable and refuses Kafka's codes (and 64).

Resource names. The resource name carries the user *name*, not the principal:
``alice:app-1`` for principal ``User:alice``; ``alice:`` (empty client-id) is the user's
default. The name is split at its *last* colon: user names from OAuth subjects, SPIFFE ids
or certificate subjects may hold colons, client-ids in practice do not (Kafka's own are
``producer-1``, ``consumer-<group>-1``, Streams' and Connect's dashed names). A client-id
with a colon can still fetch its configs through CLIENT; an admin cannot address it.

Storage. Namespace :data:`STATE_NAMESPACE`, key ``<user>/<client-id>/<config>`` with user
and client-id percent-encoded (``urllib.parse.quote``, nothing safe) and ``<default>`` for
the empty client-id, as Kafka's ZooKeeper layout (``/config/users/<user>/clients/<default>``)
sanitizes its entity names. ``alice/app-1/acks``, ``alice/<default>/acks``; a client-id
literally named ``<default>`` is stored as ``%3Cdefault%3E``.

Precedence. The client-id entry overrides the user's default; DescribeConfigs reports the
value with the source of the entry it came from, and as synonyms the client-id value first,
then the default one (the seed's kafka-configs output).

Supported keys (:data:`KEYS`), the seed's examples and a few more that a running client can
change without breaking its own invariants, with Kafka's validators (ProducerConfig,
ConsumerConfig):

- producer: ``acks`` (all, -1, 0, 1), ``linger.ms`` (long >= 0), ``batch.size``
  (int >= 0), ``compression.type`` (none, gzip, snappy, lz4, zstd);
- consumer: ``session.timeout.ms`` and ``heartbeat.interval.ms`` (int >= 1; Kafka has no
  validator, but no value below 1 makes sense), ``max.poll.records`` (int >= 1),
  ``partition.assignment.strategy`` (list: the built-in assignors, Java class names or
  librdkafka's names; the only list key, so the only one APPEND and SUBTRACT apply to).

Left out on purpose: ``enable.idempotence``, ``retries``, ``delivery.timeout.ms`` and
``max.in.flight.requests.per.connection`` (tied to the producer's id and to each other; a
change can make a running producer fail), ``client.id`` and ``group.id`` (identity; the
client-id selects the entry), bootstrap, security, serializer and interceptor keys
(connections and code loading). The gateway's check is partial, as the seed says: the client
checks a value against its own configs (``acks=0`` with idempotence, a heartbeat interval not
below the session timeout) and drops what does not fit.

Quota keys (``producer_byte_rate``, ...) live under the same entities in Kafka but are
managed with AlterClientQuotas: they are refused here and never reported.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Final
from urllib.parse import quote, unquote

from policies.api import ConfigResourceType
from policies.rules import shown_value
from protocol.alter_configs import APPEND, DELETE, SUBTRACT, ConfigAlteration
from protocol.describe_configs import LocalConfig, Synonym

from .config_changes import ConfigChange, incremental

STATE_NAMESPACE: Final = "client.config"
DEFAULT_CLIENT_ID_SEGMENT: Final = "<default>"
ANONYMOUS_USER: Final = "ANONYMOUS"
INVALID_REQUEST: Final = 42

KAFKA_RESOURCE_TYPES: Final[Mapping[int, str]] = {
    0: "UNKNOWN",
    2: "TOPIC",
    4: "BROKER",
    8: "BROKER_LOGGER",
    16: "CLIENT_METRICS",
    32: "GROUP",
}
RESERVED_RESOURCE_TYPES: Final = frozenset(KAFKA_RESOURCE_TYPES) | {64}
"""Kafka's resource types and 64, the next power of two, which Kafka will use next."""

KAFKA_CONFIG_SOURCES: Final[Mapping[int, str]] = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "DYNAMIC_CLIENT_METRICS_CONFIG",
    8: "DYNAMIC_GROUP_CONFIG",
}
"""Wire code -> the name Kafka's admin client (and kafka-configs.sh) shows."""

QUOTA_KEYS: Final = frozenset(
    {"producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"}
)

# DescribeConfigs config_type (v3+), Kafka's ConfigDef types.
_STRING: Final = 2
_INT: Final = 3
_LONG: Final = 5
_LIST: Final = 7


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientConfigCodes:
    """The resource type and config source codes of dynamic client configs."""

    client_type: int = int(ConfigResourceType.CLIENT)
    user_client_type: int = int(ConfigResourceType.USER_CLIENT)
    dynamic_client_source: int = 120
    dynamic_default_client_source: int = 121

    def __post_init__(self) -> None:
        _check_codes({f.name: getattr(self, f.name) for f in fields(self)}, "")

    @classmethod
    def from_mapping(cls, raw: Mapping[str, object], key_prefix: str = "") -> ClientConfigCodes:
        """Codes from a config mapping (missing keys keep their defaults).

        :raises ValueError: naming the key (``key_prefix`` + field name) for an unknown key,
            a value that is not an int8 above 0, one of Kafka's codes, or a code used twice.
        """
        known = {f.name: f.default for f in fields(cls)}
        for key in raw:
            if key not in known:
                raise ValueError(
                    f"{key_prefix}{key}: unknown key (known: {', '.join(sorted(known))})"
                )
        merged = {**known, **raw}
        _check_codes(merged, key_prefix)
        return cls(**merged)  # type: ignore[arg-type]  # checked above

    @property
    def resource_types(self) -> frozenset[int]:
        return frozenset({self.client_type, self.user_client_type})

    def source_name(self, code: int) -> str:
        """The name kafka-configs.sh would print for a config source."""
        if code == self.dynamic_client_source:
            return "DYNAMIC_CLIENT_CONFIG"
        if code == self.dynamic_default_client_source:
            return "DYNAMIC_DEFAULT_CLIENT_CONFIG"
        return KAFKA_CONFIG_SOURCES.get(code, f"UNKNOWN({code})")


def _check_codes(codes: Mapping[str, object], prefix: str) -> None:
    groups = (
        (("client_type", "user_client_type"), KAFKA_RESOURCE_TYPES, "resource type"),
        (
            ("dynamic_client_source", "dynamic_default_client_source"),
            KAFKA_CONFIG_SOURCES,
            "config source",
        ),
    )
    for names, taken, what in groups:
        seen: dict[int, str] = {}
        for name in names:
            value = codes[name]
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 127:
                raise ValueError(
                    f"{prefix}{name}: expected a {what} code from 1 to 127 (int8), got {value!r}"
                )
            if value in taken:
                raise ValueError(
                    f"{prefix}{name}: {value} is Kafka's {what} {taken[value]}; choose another"
                )
            if what == "resource type" and value in RESERVED_RESOURCE_TYPES:
                raise ValueError(
                    f"{prefix}{name}: {value} is reserved: Kafka's resource types are powers "
                    "of two and 64 is the next one; choose another"
                )
            if value in seen:
                raise ValueError(f"{prefix}{name}: {value} is already {prefix}{seen[value]}")
            seen[value] = name


# --- keys and validators --------------------------------------------------------------------

_INTEGER = re.compile(r"[+-]?[0-9]+")


def _one_of(*choices: str) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        return None if value in choices else "String must be one of: " + ", ".join(choices)

    return check


def _number(kafka_type: str, bits: int, minimum: int) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        if not _INTEGER.fullmatch(value) or not -(2 ** (bits - 1)) <= int(value) < 2 ** (bits - 1):
            return f"Not a number of type {kafka_type}"
        if int(value) < minimum:
            return f"Value must be at least {minimum}"
        return None

    return check


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientConfigKey:
    name: str
    client: str
    """``producer`` or ``consumer``."""
    config_type: int
    """DescribeConfigs' config_type (Kafka's ConfigDef.Type id)."""
    documentation: str
    check: Callable[[str], str | None]
    """On a normalized value (a list's single item): None, or what is wrong (Kafka's words)."""
    is_list: bool = False


_ASSIGNORS: Final = (
    "org.apache.kafka.clients.consumer.RangeAssignor",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor",
    "org.apache.kafka.clients.consumer.StickyAssignor",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
    "range",
    "roundrobin",
    "cooperative-sticky",
)

KEYS: Final[Mapping[str, ClientConfigKey]] = {
    k.name: k
    for k in (
        ClientConfigKey(
            name="acks",
            client="producer",
            config_type=_STRING,
            documentation="Acknowledgments the producer requires before a request is complete.",
            check=_one_of("all", "-1", "0", "1"),
        ),
        ClientConfigKey(
            name="linger.ms",
            client="producer",
            config_type=_LONG,
            documentation="How long the producer waits for more records before sending a batch.",
            check=_number("LONG", 64, 0),
        ),
        ClientConfigKey(
            name="batch.size",
            client="producer",
            config_type=_INT,
            documentation="The producer's batch size in bytes per partition.",
            check=_number("INT", 32, 0),
        ),
        ClientConfigKey(
            name="compression.type",
            client="producer",
            config_type=_STRING,
            documentation="The compression the producer applies to its batches.",
            check=_one_of("none", "gzip", "snappy", "lz4", "zstd"),
        ),
        ClientConfigKey(
            name="session.timeout.ms",
            client="consumer",
            config_type=_INT,
            documentation="The consumer's group session timeout.",
            check=_number("INT", 32, 1),
        ),
        ClientConfigKey(
            name="heartbeat.interval.ms",
            client="consumer",
            config_type=_INT,
            documentation="The time between the consumer's heartbeats (below the session timeout).",
            check=_number("INT", 32, 1),
        ),
        ClientConfigKey(
            name="max.poll.records",
            client="consumer",
            config_type=_INT,
            documentation="The most records one poll returns.",
            check=_number("INT", 32, 1),
        ),
        ClientConfigKey(
            name="partition.assignment.strategy",
            client="consumer",
            config_type=_LIST,
            documentation="The consumer's partition assignors, in order of preference.",
            check=_one_of(*_ASSIGNORS),
            is_list=True,
        ),
    )
}


def quota_message(key: str) -> str:
    return (
        f"{key} is a client quota, not a dynamic client config: quotas are managed with "
        "AlterClientQuotas (kafka-configs.sh --alter --add-config against the cluster)"
    )


def normalize(key: str, value: str) -> str:
    """The value as a client parses it: trimmed; a list's items trimmed, empty ones dropped."""
    spec = KEYS.get(key)
    if spec is not None and spec.is_list:
        return ",".join(item.strip() for item in value.split(",") if item.strip())
    return value.strip()


def _key_problem(key: str) -> str | None:
    if key in QUOTA_KEYS:
        return quota_message(key)
    if key not in KEYS:
        return f"Unknown dynamic client config: {key} (supported: {', '.join(sorted(KEYS))})"
    return None


def validate(key: str, value: str | None) -> str | None:
    """None when ``key=value`` may be stored, else the INVALID_REQUEST message, naming the key:
    ``Invalid value 2 for configuration acks: String must be one of: all, -1, 0, 1``."""
    problem = _key_problem(key)
    if problem is not None:
        return problem
    if value is None:
        return f"Null value not supported for : {key}"
    spec = KEYS[key]
    normalized = normalize(key, value)
    if not spec.is_list:
        problem = spec.check(normalized)
        if problem is None:
            return None
        return f"Invalid value {shown_value(normalized)} for configuration {key}: {problem}"
    if not normalized:
        return f"Invalid value {shown_value(value)} for configuration {key}: List must not be empty"
    for item in normalized.split(","):
        problem = spec.check(item)
        if problem is not None:
            return f"Invalid value {shown_value(item)} for configuration {key}: {problem}"
    return None


# --- entities and names ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientEntity:
    """One entry of dynamic client configs: a user's default (``client_id == ""``) or one
    client-id of that user."""

    user: str
    client_id: str

    @property
    def is_default(self) -> bool:
        return self.client_id == ""

    @property
    def resource_name(self) -> str:
        """The USER_CLIENT resource name: ``user:client-id``."""
        return f"{self.user}:{self.client_id}"


def user_of(principal: str | None) -> str:
    """The user name of a connection's principal: ``User:alice`` -> ``alice``; no principal
    (unauthenticated) -> ``ANONYMOUS``, as Kafka names it."""
    if principal is None:
        return ANONYMOUS_USER
    _, sep, name = principal.partition(":")
    return name if sep else principal


def parse_user_client(name: str) -> ClientEntity:
    """The entity a USER_CLIENT resource name ``user:client-id`` names (split at the last
    colon; an empty client-id is the user's default).

    :raises ValueError: with the INVALID_REQUEST message for a malformed name.
    """
    user, sep, client_id = name.rpartition(":")
    if not sep:
        raise ValueError(
            f"Invalid resource name {name!r}: expected user:client-id "
            "(user:, with an empty client-id, for the user's default)"
        )
    if not user:
        raise ValueError(f"Invalid resource name {name!r}: the user name is empty")
    if user.startswith("User:"):
        raise ValueError(
            f"Invalid resource name {name!r}: it carries the user name, not the principal "
            f"({user[5:]}:{client_id}, not {name})"
        )
    return ClientEntity(user=user, client_id=client_id)


def entity_of(
    resource_type: int, resource_name: str, principal: str | None, codes: ClientConfigCodes
) -> ClientEntity | None:
    """The entity a DescribeConfigs or IncrementalAlterConfigs resource names; None when the
    resource is not a dynamic client config resource (the broker's business).

    CLIENT: the connection's user and the resource name as client-id. USER_CLIENT: the name.

    :raises ValueError: with the INVALID_REQUEST message for a malformed USER_CLIENT name.
    """
    if resource_type == codes.client_type:
        return ClientEntity(user=user_of(principal), client_id=resource_name)
    if resource_type == codes.user_client_type:
        return parse_user_client(resource_name)
    return None


LEGACY_ALTER_MESSAGE: Final = (
    "AlterConfigs does not support dynamic client configs: use IncrementalAlterConfigs"
)
"""The INVALID_REQUEST message for a legacy AlterConfigs on CLIENT or USER_CLIENT."""


# --- storage --------------------------------------------------------------------------------


def entity_prefix(user: str, client_id: str) -> str:
    """The store-key prefix of one entity's configs (for reads and ``delete_prefix``)."""
    segment = quote(client_id, safe="") if client_id else DEFAULT_CLIENT_ID_SEGMENT
    return f"{user_prefix(user)}{segment}/"


def user_prefix(user: str) -> str:
    """The store-key prefix of everything kept for ``user`` (default and client-ids)."""
    return f"{quote(user, safe='')}/"


def store_key(user: str, client_id: str, name: str) -> str:
    return entity_prefix(user, client_id) + name


def parse_store_key(key: str) -> tuple[str, str, str]:
    """(user, client-id, config name) of a store key; client-id "" for the default.

    :raises ValueError: for a key not made by :func:`store_key`.
    """
    parts = key.split("/", 2)
    if len(parts) != 3 or not parts[2]:
        raise ValueError(f"not a dynamic client config key: {key!r}")
    user, segment, name = parts
    client_id = "" if segment == DEFAULT_CLIENT_ID_SEGMENT else unquote(segment)
    return unquote(user), client_id, name


def config_of(
    items: Mapping[str, str], principal: str | None, client_id: str | None, name: str
) -> str | None:
    """The dynamic client config ``name`` for a connection's principal and a request's
    client-id: the client-id entry, else the user's default, else None."""
    if not items:
        return None
    user = user_of(principal)
    if client_id:
        value = items.get(store_key(user, client_id, name))
        if value is not None:
            return value
    return items.get(store_key(user, "", name))


def entity_configs(items: Mapping[str, str], user: str, client_id: str) -> dict[str, str]:
    """One entity's stored configs, name -> value (every stored key, known or not)."""
    prefix = entity_prefix(user, client_id)
    return {k[len(prefix) :]: v for k, v in items.items() if k.startswith(prefix)}


def configs_by_entity(items: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Every entity's stored configs, keyed by its :func:`entity_prefix`: one pass over the
    namespace for a request that looks up many entities (each :func:`entity_configs` reads
    all of it: a DescribeConfigs of 1,000 entities over 10,000 stored took 1.4 s)."""
    grouped: dict[str, dict[str, str]] = {}
    for key, value in items.items():
        user, slash, rest = key.partition("/")
        segment, second, name = rest.partition("/")
        if slash and second:
            grouped.setdefault(f"{user}/{segment}/", {})[name] = value
    return grouped


def entities(items: Mapping[str, str]) -> tuple[ClientEntity, ...]:
    """Every entity with a supported config stored in ``items`` (the namespace), sorted by
    user, then client-id (the user's default first)."""
    found = set()
    for key in items:
        try:
            user, client_id, name = parse_store_key(key)
        except ValueError:
            continue
        if name in KEYS:
            found.add((user, client_id))
    return tuple(ClientEntity(user=u, client_id=c) for u, c in sorted(found))


def describe(
    items: Mapping[str, str],
    user: str,
    client_id: str,
    codes: ClientConfigCodes,
    include_synonyms: bool = True,
    grouped: Mapping[str, Mapping[str, str]] | None = None,
) -> tuple[LocalConfig, ...]:
    """The DescribeConfigs entries for ``user``/``client_id`` from the namespace ``items``.

    The client-id entry overrides the user's default; each value carries the source of the
    entry it came from and, with ``include_synonyms``, the client-id value then the default
    value. Only supported keys are reported (quota and unknown keys are filtered out), sorted
    by name. ``client_id == ""`` describes the default alone. ``grouped``: the namespace as
    :func:`configs_by_entity` grouped it (``items`` is then not read), for a caller that
    describes many entities.
    """
    if grouped is None:
        default = entity_configs(items, user, "")
        own = entity_configs(items, user, client_id) if client_id else {}
    else:  # items grouped by configs_by_entity
        default = dict(grouped.get(entity_prefix(user, ""), {}))
        own = dict(grouped.get(entity_prefix(user, client_id), {})) if client_id else {}
    result = []
    for name in sorted((default.keys() | own.keys()) & KEYS.keys()):
        synonyms = []
        if name in own:
            synonyms.append(Synonym(name=name, value=own[name], source=codes.dynamic_client_source))
        if name in default:
            synonyms.append(
                Synonym(name=name, value=default[name], source=codes.dynamic_default_client_source)
            )
        spec = KEYS[name]
        result.append(
            LocalConfig(
                name=name,
                value=synonyms[0].value,
                source=synonyms[0].source,
                synonyms=tuple(synonyms) if include_synonyms else (),
                config_type=spec.config_type,
                documentation=spec.documentation,
            )
        )
    return tuple(result)


def apply_incremental(
    items: Mapping[str, str], user: str, client_id: str, ops: Sequence[ConfigAlteration]
) -> tuple[dict[str, str | None], tuple[int, str] | None]:
    """Apply one resource's IncrementalAlterConfigs operations to the stored entity.

    Returns the store writes (store key -> value, None deletes) and no error, or no writes
    and ``(INVALID_REQUEST, message)``: all or nothing per resource. SET(0), DELETE(1),
    APPEND(2) and SUBTRACT(3) as Kafka applies them (:func:`gateway.config_changes.incremental`),
    with Kafka's refusals (duplicate keys, missing values, unknown operations, APPEND or
    SUBTRACT on a key that is not a list) and these: a quota key, an unknown key (DELETE of
    a stored key is allowed, so keys dropped from :data:`KEYS` can be cleaned up), an
    invalid value. APPEND on a key that is not set starts from an empty list (the client's
    own value is not known here); a SUBTRACT that empties a list deletes the key.
    """
    before = entity_configs(items, user, client_id)
    change = incremental(before, ops)
    if not isinstance(change, ConfigChange):
        return {}, (INVALID_REQUEST, change.message)
    operation = {c.name: c.operation for c in ops}  # incremental() refused duplicate names
    for name, op in operation.items():
        problem = _operation_problem(name, op, before)
        if problem is not None:
            return {}, (INVALID_REQUEST, problem)
    after = _stored_after(change, operation)
    if isinstance(after, str):
        return {}, (INVALID_REQUEST, after)
    writes: dict[str, str | None] = {
        store_key(user, client_id, name): after.get(name)
        for name in sorted(before.keys() | after.keys())
        if before.get(name) != after.get(name)
    }
    return writes, None


def _operation_problem(name: str, op: int, before: Mapping[str, str]) -> str | None:
    """Why the gateway refuses operation ``op`` on key ``name``, or None."""
    if op == DELETE and name in before:
        return None
    problem = _key_problem(name)
    if problem is None and op in (APPEND, SUBTRACT) and not KEYS[name].is_list:
        verb = "append" if op == APPEND else "subtract"
        problem = f"Config value {verb} is not allowed for config key: {name}"
    return problem


def _stored_after(change: ConfigChange, operation: Mapping[str, int]) -> dict[str, str] | str:
    """The entity's configs after ``change``, values normalized (a SUBTRACT that empties a
    list deletes the key), or the problem with the first invalid value."""
    after = dict(change.after)
    for name, value in change.altered.items():
        if value is None:
            continue
        if operation[name] == SUBTRACT and not normalize(name, value):
            del after[name]
            continue
        problem = validate(name, value)
        if problem is not None:
            return problem
        after[name] = normalize(name, value)
    return after
