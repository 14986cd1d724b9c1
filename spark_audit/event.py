"""The audit event: one JSON object per line, written by the gateway, read by the Spark job.

This module is the only thing the gateway and ``spark_audit`` share, so it stays importable
without pyspark: the Spark schema is built lazily by :func:`spark_schema`. Every field is
documented for users in ``spark_audit/SCHEMA.md``; keep the two in step, and bump
:data:`SCHEMA_VERSION` by the rules written there.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Literal, get_args

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

SCHEMA_VERSION: Final = 1

SPOOL_SEGMENT_GLOB: Final = "events-*.jsonl"
"""Completed segments in a spool directory: the only files a reader may take (see SCHEMA.md)."""

Mode = Literal["enforce", "dry-run"]
Verdict = Literal["allowed", "denied", "would_deny"]

MODES: Final[tuple[str, ...]] = get_args(Mode)
VERDICTS: Final[tuple[str, ...]] = get_args(Verdict)

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


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AuditEvent:
    """One audit record: a single gateway decision, or a summary of allowed Produce traffic.

    A summary has ``interval_start`` and ``interval_end`` set and stands for ``event_count``
    allowed Produce requests; a single decision has both unset and ``event_count == 1``.
    Field meanings are in ``spark_audit/SCHEMA.md``.

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

    def __post_init__(self) -> None:
        self._check_keywords()
        if self.schema_version < 1:
            raise ValueError(f"schema_version must be >= 1, got {self.schema_version}")
        parse_time(self.time)
        self._check_interval()
        if self.records_examined < 0 or self.bytes_examined < 0:
            raise ValueError("records_examined and bytes_examined cannot be negative")

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

    def to_json_line(self) -> str:
        """The event as one line of compact JSON, newline-terminated, keys in schema order."""
        return json.dumps(dataclasses.asdict(self), separators=(",", ":")) + "\n"

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
        known = {field.name: field for field in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown and version <= SCHEMA_VERSION:
            raise ValueError(f"unknown audit event keys for version {version}: {unknown}")
        missing = sorted(set(known) - set(data))
        if missing:
            raise ValueError(f"audit event is missing keys: {missing}")
        values = {name: data[name] for name in known}
        for name, value in values.items():
            _check_type(name, value)
        return cls(**values)


# The JSON type of every field, in schema order; the Spark schema is derived from it.
_FIELD_TYPES: Final[tuple[tuple[str, str, bool], ...]] = (
    # (name, Spark SQL type, nullable)
    ("schema_version", "INT", False),
    ("event_id", "STRING", False),
    ("time", "STRING", False),
    ("gateway_instance", "STRING", False),
    ("client_address", "STRING", True),
    ("principal", "STRING", True),
    ("client_id", "STRING", True),
    ("api", "STRING", False),
    ("api_version", "INT", False),
    ("resource_type", "STRING", False),
    ("resource_name", "STRING", False),
    ("action", "STRING", False),
    ("policy", "STRING", True),
    ("mode", "STRING", False),
    ("verdict", "STRING", False),
    ("error_code", "INT", True),
    ("message", "STRING", True),
    ("validate_only", "BOOLEAN", False),
    ("records_examined", "BIGINT", False),
    ("bytes_examined", "BIGINT", False),
    ("interval_start", "STRING", True),
    ("interval_end", "STRING", True),
    ("event_count", "BIGINT", False),
)

_PYTHON_TYPES: Final[Mapping[str, type]] = {
    "STRING": str,
    "INT": int,
    "BIGINT": int,
    "BOOLEAN": bool,
}


def _check_type(name: str, value: object) -> None:
    spark_type, nullable = next((t, n) for f, t, n in _FIELD_TYPES if f == name)
    if value is None:
        if not nullable:
            raise ValueError(f"audit event field {name!r} cannot be null")
        return
    expected = _PYTHON_TYPES[spark_type]
    # bool is a subclass of int in Python, but not in JSON.
    if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
        raise ValueError(f"audit event field {name!r} must be {spark_type}, got {value!r}")


SPARK_SCHEMA_DDL: Final = ", ".join(f"{name} {spark_type}" for name, spark_type, _ in _FIELD_TYPES)
"""The schema as Spark SQL DDL, for ``DataStreamReader.schema(...)`` and ``from_json``.

Times are strings here, exactly as written; the Spark job parses them into timestamps.
"""


def spark_schema() -> StructType:
    """The schema as a pyspark ``StructType`` (imports pyspark on first call)."""
    from pyspark.sql import types as T

    spark_types = {
        "STRING": T.StringType(),
        "INT": T.IntegerType(),
        "BIGINT": T.LongType(),
        "BOOLEAN": T.BooleanType(),
    }
    return T.StructType(
        [
            T.StructField(name, spark_types[spark_type], nullable)
            for name, spark_type, nullable in _FIELD_TYPES
        ]
    )
