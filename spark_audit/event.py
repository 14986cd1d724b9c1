"""The audit event: one JSON object per line, written by the gateway, read by the Spark job.

This module is the only thing the gateway and ``spark_audit`` share, so it stays importable
without pyspark: the Spark schema is built lazily by :func:`spark_schema`. Every field is
documented for users in ``spark_audit/SCHEMA.md``; keep the two in step, and bump
:data:`SCHEMA_VERSION` by the rules written there.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Literal, get_args

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

SCHEMA_VERSION: Final = 3

SPOOL_SEGMENT_GLOB: Final = "events-*.jsonl"
"""Completed segments in a spool directory: the only files a reader may take (see SCHEMA.md)."""

Mode = Literal["enforce", "dry-run"]
Verdict = Literal["allowed", "denied", "would_deny"]
EventKind = Literal["decision", "summary", "lifecycle"]
LifecycleAction = Literal["start", "stop", "reload", "reload_refused"]

MODES: Final[tuple[str, ...]] = get_args(Mode)
VERDICTS: Final[tuple[str, ...]] = get_args(Verdict)
EVENT_KINDS: Final[tuple[str, ...]] = get_args(EventKind)
LIFECYCLE_ACTIONS: Final[tuple[str, ...]] = get_args(LifecycleAction)

LIFECYCLE_API: Final = "Gateway"
LIFECYCLE_RESOURCE_TYPE: Final = "gateway"

# Exactly what format_time writes: UTC, millisecond precision, a literal "Z".
_TIME_RE: Final = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def format_time(epoch_ms: int) -> str:
    """Render epoch milliseconds as the schema's time format, e.g. ``2026-11-21T09:00:00.123Z``."""
    moment = _EPOCH + timedelta(milliseconds=epoch_ms)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def parse_time(text: str) -> int:
    """Parse the schema's time format back into epoch milliseconds.

    :raises ValueError: if ``text`` is not UTC ISO-8601 with milliseconds and a ``Z``.
    """
    if not _TIME_RE.fullmatch(text):
        raise ValueError(f"not a UTC ISO-8601 time with milliseconds: {text!r}")
    moment = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def now_time() -> str:
    """The current wall-clock time in the schema's time format."""
    return format_time(time.time_ns() // 1_000_000)


def new_event_id() -> str:
    """A fresh random event id (UUID4, canonical lower-case text)."""
    return str(uuid.uuid4())


GATEWAY_TOPICS_RULE: Final = "gateway-topics"
GATEWAY_RULES: Final = frozenset({GATEWAY_TOPICS_RULE})
"""The ``policy`` of denials by rules the gateway adds to every policy chain (its own topics,
which no client may create, change or delete), whatever the ``policies:`` section says."""

GATEWAY_REFUSALS: Final = frozenset(
    {
        "gateway",
        "limits",
        "client_configs",
        "client_configs.admin_principals",
        "own_principal",
        "own_topics",
    }
)
"""The ``policy`` of refusals the gateway makes before or instead of asking the policies (a
limit, a dynamic client config it cannot take or a client not allowed to change it, the
credentials and quotas of the user it signs in as, its own topics read, written or named by
an ACL; in earlier events, a broker default it could not read, which the policies now
judge): no ``policies:`` section changes them, so ``kpg audit replay`` keeps them as
recorded."""


def new_request_id() -> str:
    """A fresh request id: 32 lower-case hex digits (a UUID4 without dashes), short enough to
    read in a client's error message and distinct from event ids at a glance."""
    return uuid.uuid4().hex


def line_hash(line: str | bytes) -> str:
    """Lower-case hex SHA-256 of one event's JSON line as written, without its newline: what
    the next event of the chain carries as ``prev_hash``."""
    data = line.encode("utf-8") if isinstance(line, str) else line
    return hashlib.sha256(data.rstrip(b"\n")).hexdigest()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ConfigChange:
    """One config key a decision was about, with its value before and after the change.

    ``before`` is the value set on the resource when the gateway judged (null: not set);
    ``after`` is what the request would leave (null: deleted or not set). Both are null when
    ``sensitive``: Kafka marks the key sensitive (passwords, keys), so its value is never
    written.
    """

    name: str
    before: str | None
    after: str | None
    sensitive: bool = False

    def __post_init__(self) -> None:
        if self.sensitive and (self.before is not None or self.after is not None):
            raise ValueError(f"config {self.name!r} is sensitive: its values must be null")

    @classmethod
    def from_mapping(cls, data: object) -> ConfigChange:
        """:raises ValueError: on missing keys or wrong types."""
        if not isinstance(data, Mapping) or set(data) != {"name", "before", "after", "sensitive"}:
            raise ValueError(f"a config change is {{name, before, after, sensitive}}: {data!r}")
        name, before, after, sensitive = (
            data["name"],
            data["before"],
            data["after"],
            data["sensitive"],
        )
        if not isinstance(name, str) or not isinstance(sensitive, bool):
            raise ValueError(f"config change name/sensitive of the wrong type: {data!r}")
        for value in (before, after):
            if value is not None and not isinstance(value, str):
                raise ValueError(f"config change values are strings or null: {data!r}")
        return cls(name=name, before=before, after=after, sensitive=sensitive)


SENSITIVE_TOPIC_CONFIG: Final = "(sensitive: not recorded)"
"""What a topic spec's ``configs`` record for a key named like a secret (a password, a key
store secret, ``sasl.jaas.config``): the key was set, its value is never written."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TopicSpec:
    """A topic creation as the policies judged it: partitions and replication factor (broker
    defaults resolved, null where unknown; for a replica assignment its partition count and
    largest replica list), and the topic configs the request set (a sensitive key's value as
    :data:`SENSITIVE_TOPIC_CONFIG`)."""

    partitions: int | None
    replication_factor: int | None
    configs: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_mapping(cls, data: object) -> TopicSpec:
        """:raises ValueError: on missing keys or wrong types."""
        if not isinstance(data, Mapping) or set(data) != {
            "partitions",
            "replication_factor",
            "configs",
        }:
            raise ValueError(
                f"a topic spec is {{partitions, replication_factor, configs}}: {data!r}"
            )
        counts = (data["partitions"], data["replication_factor"])
        for count in counts:
            if count is not None and (not isinstance(count, int) or isinstance(count, bool)):
                raise ValueError(f"topic spec counts are integers or null: {data!r}")
        configs = data["configs"]
        if not isinstance(configs, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in configs.items()
        ):
            raise ValueError(f"topic spec configs map strings to strings: {data!r}")
        return cls(partitions=counts[0], replication_factor=counts[1], configs=dict(configs))


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AuditEvent:
    """One audit record: a single gateway decision, a summary of allowed Produce traffic, or
    a gateway lifecycle event (start, stop, reload).

    A summary has ``interval_start`` and ``interval_end`` set and stands for ``event_count``
    allowed Produce requests; a single decision has both unset and ``event_count == 1``.
    ``event_kind`` is set on every event of version 2 or later (derived when not given); the
    chain fields are set by the emitter when it writes the event. Field meanings are in
    ``spark_audit/SCHEMA.md``.

    :raises ValueError: on construction, if a field breaks the schema's rules.
    """

    schema_version: int = SCHEMA_VERSION
    event_id: str = dataclasses.field(default_factory=new_event_id)
    time: str = dataclasses.field(default_factory=now_time)
    gateway_instance: str
    client_address: str | None
    principal: str | None
    client_id: str | None
    api: str
    api_version: int
    resource_type: str
    resource_name: str
    action: str
    policy: str | None = None
    mode: Mode
    verdict: Verdict
    error_code: int | None = None
    message: str | None = None
    validate_only: bool = False
    records_examined: int = 0
    bytes_examined: int = 0
    interval_start: str | None = None
    interval_end: str | None = None
    event_count: int = 1
    # version 2
    request_id: str | None = None
    policy_version: str | None = None
    event_kind: EventKind | None = None
    chain_id: str | None = None
    seq: int | None = None
    prev_hash: str | None = None
    config_changes: tuple[ConfigChange, ...] | None = None
    topic_spec: TopicSpec | None = None
    # version 3
    request_events: int | None = None

    def __post_init__(self) -> None:
        self._check_keywords()
        if self.schema_version < 1:
            raise ValueError(f"schema_version must be >= 1, got {self.schema_version}")
        parse_time(self.time)
        self._check_interval()
        if self.records_examined < 0 or self.bytes_examined < 0:
            raise ValueError("records_examined and bytes_examined cannot be negative")
        if self.schema_version >= 2 and self.event_kind is None:
            object.__setattr__(self, "event_kind", self.kind)
        self._check_v2()
        self._check_v3()

    def _check_v3(self) -> None:
        if self.request_events is not None:
            if self.request_events < 1:
                raise ValueError(f"request_events must be >= 1, got {self.request_events}")
            if self.request_id is None:
                raise ValueError("request_events goes with a request_id")
        for name, _, _, since in _FIELD_TYPES:
            if since > self.schema_version and getattr(self, name) is not None:
                raise ValueError(
                    f"version {since} fields in an event of version {self.schema_version}"
                )

    def _check_v2(self) -> None:
        if self.event_kind is not None and self.event_kind not in EVENT_KINDS:
            raise ValueError(f"event_kind must be one of {EVENT_KINDS}, got {self.event_kind!r}")
        if self.event_kind is not None and (self.event_kind == "summary") != self.is_summary:
            raise ValueError("event_kind 'summary' goes with a summary interval, and only it")
        if self.event_kind == "lifecycle" and self.action not in LIFECYCLE_ACTIONS:
            raise ValueError(f"a lifecycle action is one of {LIFECYCLE_ACTIONS}")
        if (self.chain_id is None) != (self.seq is None):
            raise ValueError("chain_id and seq are set together or not at all")
        if self.seq is not None and self.seq < 0:
            raise ValueError(f"seq must be >= 0, got {self.seq}")
        if self.prev_hash is not None and (self.seq is None or self.seq == 0):
            raise ValueError("prev_hash is null for the first event of a chain")
        if self.seq is not None and self.seq > 0 and self.prev_hash is None:
            raise ValueError("prev_hash is set on every event of a chain but the first")

    def _check_keywords(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if self.verdict == "would_deny" and self.mode != "dry-run":
            raise ValueError("verdict 'would_deny' is only possible in mode 'dry-run'")

    def _check_interval(self) -> None:
        """A summary has both ends of its interval, in order; a single decision neither."""
        if (self.interval_start is None) != (self.interval_end is None):
            raise ValueError("interval_start and interval_end are set together or not at all")
        if self.interval_start is not None and self.interval_end is not None:
            if parse_time(self.interval_start) > parse_time(self.interval_end):
                raise ValueError("interval_start is after interval_end")
        elif self.event_count != 1:
            raise ValueError("event_count other than 1 needs a summary interval")
        if self.event_count < 1:
            raise ValueError(f"event_count must be >= 1, got {self.event_count}")

    @property
    def is_summary(self) -> bool:
        """True for a Produce summary, false for a single decision."""
        return self.interval_start is not None

    @property
    def kind(self) -> EventKind:
        """``event_kind``, or for a version 1 event what its null means (see SCHEMA.md)."""
        if self.event_kind is not None:
            return self.event_kind
        return "summary" if self.is_summary else "decision"

    def chained(self, chain_id: str, seq: int, prev_hash: str | None) -> AuditEvent:
        """This event as link ``seq`` of chain ``chain_id``."""
        return dataclasses.replace(self, chain_id=chain_id, seq=seq, prev_hash=prev_hash)

    def to_json_line(self) -> str:
        """The event as one line of compact JSON, newline-terminated, keys in schema order."""
        return json.dumps(self.to_mapping(), separators=(",", ":")) + "\n"

    def to_mapping(self) -> dict[str, Any]:
        """The event as JSON-ready values, keys in schema order (an event of an older version
        has only its version's keys)."""
        data = dataclasses.asdict(self)
        for name, _, _, since in _FIELD_TYPES:
            if since > self.schema_version:
                del data[name]
        return data

    @classmethod
    def from_json(cls, text: str | bytes) -> AuditEvent:
        """Read an event written by :meth:`to_json_line` (any schema version so far).

        Keys this version does not know are an error for events of this version or older
        (they would be a writer bug) and are ignored for newer ones (versions only add fields).

        :raises ValueError: on malformed JSON, missing or unknown keys, or wrong types.
        """
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("an audit event is a JSON object")
        return cls.from_mapping(data)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> AuditEvent:
        """Build an event from already-decoded JSON; see :meth:`from_json`.

        :raises ValueError: on missing or unknown keys, or wrong types.
        """
        version = data.get("schema_version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise ValueError(f"schema_version must be an integer, got {version!r}")
        known = [name for name, _, _, since in _FIELD_TYPES if since <= version]
        unknown = sorted(set(data) - set(known))
        if unknown and version <= SCHEMA_VERSION:
            raise ValueError(f"unknown audit event keys for version {version}: {unknown}")
        missing = sorted(set(known) - set(data))
        if missing:
            raise ValueError(f"audit event is missing keys: {missing}")
        values: dict[str, Any] = {}
        for name in known:
            values[name] = _typed(name, data[name])
        return cls(**values)


_CONFIG_CHANGES_DDL: Final = (
    "ARRAY<STRUCT<name: STRING, before: STRING, after: STRING, sensitive: BOOLEAN>>"
)
_TOPIC_SPEC_DDL: Final = (
    "STRUCT<partitions: INT, replication_factor: INT, configs: MAP<STRING, STRING>>"
)

# The JSON type of every field, in schema order; the Spark schema is derived from it.
_FIELD_TYPES: Final[tuple[tuple[str, str, bool, int], ...]] = (
    # (name, Spark SQL type, nullable, schema version that added it)
    ("schema_version", "INT", False, 1),
    ("event_id", "STRING", False, 1),
    ("time", "STRING", False, 1),
    ("gateway_instance", "STRING", False, 1),
    ("client_address", "STRING", True, 1),
    ("principal", "STRING", True, 1),
    ("client_id", "STRING", True, 1),
    ("api", "STRING", False, 1),
    ("api_version", "INT", False, 1),
    ("resource_type", "STRING", False, 1),
    ("resource_name", "STRING", False, 1),
    ("action", "STRING", False, 1),
    ("policy", "STRING", True, 1),
    ("mode", "STRING", False, 1),
    ("verdict", "STRING", False, 1),
    ("error_code", "INT", True, 1),
    ("message", "STRING", True, 1),
    ("validate_only", "BOOLEAN", False, 1),
    ("records_examined", "BIGINT", False, 1),
    ("bytes_examined", "BIGINT", False, 1),
    ("interval_start", "STRING", True, 1),
    ("interval_end", "STRING", True, 1),
    ("event_count", "BIGINT", False, 1),
    ("request_id", "STRING", True, 2),
    ("policy_version", "STRING", True, 2),
    ("event_kind", "STRING", True, 2),
    ("chain_id", "STRING", True, 2),
    ("seq", "BIGINT", True, 2),
    ("prev_hash", "STRING", True, 2),
    ("config_changes", _CONFIG_CHANGES_DDL, True, 2),
    ("topic_spec", _TOPIC_SPEC_DDL, True, 2),
    ("request_events", "INT", True, 3),
)

_PYTHON_TYPES: Final[Mapping[str, type]] = {
    "STRING": str,
    "INT": int,
    "BIGINT": int,
    "BOOLEAN": bool,
}


def _typed(name: str, value: object) -> object:
    """``value`` of field ``name`` as the dataclass holds it, after checking its JSON type."""
    spark_type, nullable = next((t, n) for f, t, n, _ in _FIELD_TYPES if f == name)
    if value is None:
        if not nullable:
            raise ValueError(f"audit event field {name!r} cannot be null")
        return None
    if spark_type == _CONFIG_CHANGES_DDL:
        if not isinstance(value, list):
            raise ValueError(f"audit event field {name!r} must be an array, got {value!r}")
        return tuple(ConfigChange.from_mapping(item) for item in value)
    if spark_type == _TOPIC_SPEC_DDL:
        return TopicSpec.from_mapping(value)
    expected = _PYTHON_TYPES[spark_type]
    # bool is a subclass of int in Python, but not in JSON.
    if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
        raise ValueError(f"audit event field {name!r} must be {spark_type}, got {value!r}")
    return value


SPARK_SCHEMA_DDL: Final = ", ".join(
    f"{name} {spark_type}" for name, spark_type, _, _ in _FIELD_TYPES
)
"""The schema as Spark SQL DDL, for ``DataStreamReader.schema(...)`` and ``from_json``.

Times are strings here, exactly as written; the Spark job parses them into timestamps.
"""


def spark_schema() -> StructType:
    """The schema as a pyspark ``StructType`` (imports pyspark on first call)."""
    from pyspark.sql import types as T

    string, integer = T.StringType(), T.IntegerType()
    spark_types: dict[str, T.DataType] = {
        "STRING": string,
        "INT": integer,
        "BIGINT": T.LongType(),
        "BOOLEAN": T.BooleanType(),
        _CONFIG_CHANGES_DDL: T.ArrayType(
            T.StructType(
                [
                    T.StructField("name", string, False),
                    T.StructField("before", string, True),
                    T.StructField("after", string, True),
                    T.StructField("sensitive", T.BooleanType(), False),
                ]
            ),
            False,
        ),
        _TOPIC_SPEC_DDL: T.StructType(
            [
                T.StructField("partitions", integer, True),
                T.StructField("replication_factor", integer, True),
                T.StructField("configs", T.MapType(string, string, False), False),
            ]
        ),
    }
    return T.StructType(
        [
            T.StructField(name, spark_types[spark_type], nullable)
            for name, spark_type, nullable, _ in _FIELD_TYPES
        ]
    )
