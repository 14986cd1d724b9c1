"""Event factories and spool helpers shared by the Spark tests."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from gateway.audit import EventLine, SpoolSink
from spark_audit.event import AuditEvent
from spark_audit.transforms import parse_lines, prepare_events
from tests.support import audit_event

_numbers = itertools.count()


def event(**overrides: Any) -> AuditEvent:
    """``audit_event``'s denied CreateTopics by User:alice, of a topic of its own, unless
    ``overrides`` say otherwise; an allowed one names no policy and no error code."""
    fields: dict[str, Any] = {
        "time": "2026-11-21T09:15:00.000Z",
        "resource_name": f"topic-{next(_numbers)}",
    }
    if overrides.get("verdict") == "allowed":
        fields.update(policy=None, error_code=None)
    return audit_event(**(fields | overrides))


def refused_authentication(user: str, policy: str = "broker", **overrides: Any) -> AuditEvent:
    """A refused authentication as the gateway records one (SCHEMA.md, "Refused
    authentications"): the broker's refusal of ``user``'s credentials (58), unless
    ``policy`` is the gateway's own ``sasl.client_auth`` (closed unanswered)."""
    fields: dict[str, Any] = {
        "principal": None,
        "api": "SaslAuthenticate",
        "action": "authenticate",
        "resource_type": "user",
        "resource_name": user,
        "policy": policy,
        "error_code": 58 if policy == "broker" else None,
    }
    return event(**(fields | overrides))


def write_segment(spool: Path, events: Sequence[AuditEvent]) -> Path:
    """Write ``events`` as one completed spool segment, the way the gateway does."""
    before = set(spool.glob("events-*.jsonl"))
    sink = SpoolSink(spool)
    sink.open()
    sink.write([EventLine.of(e) for e in events])
    sink.close()
    (segment,) = set(spool.glob("events-*.jsonl")) - before
    return segment


def raw_events(spark: SparkSession, lines: Iterable[str]) -> DataFrame:
    """Raw events from JSON lines, parsed the way the job parses the spool's lines."""
    rows = [(line.rstrip("\n"),) for line in lines]
    return parse_lines(spark.createDataFrame(rows, "value STRING"))


def table_rows(spark: SparkSession, events: Sequence[AuditEvent]) -> DataFrame:
    """Audit table rows for ``events``."""
    return prepare_events(raw_events(spark, [e.to_json_line() for e in events]))


def report_events() -> list[AuditEvent]:
    """A small day of decisions; ``EXPECTED_TOTALS`` and the report tests count them by hand."""
    alice = {"principal": "User:alice", "client_id": "app"}
    carol = {"principal": "User:carol", "client_id": "app2"}
    dry_run = {"mode": "dry-run", "verdict": "would_deny"}
    p1, p2, p3 = "min-replication-factor", "no-delete", "topic-naming"
    return [
        event(time="2026-11-21T09:15:00.000Z", resource_name="orders", policy=p1, **alice),
        event(time="2026-11-21T09:20:00.000Z", resource_name="payments", policy=p1, **alice),
        event(
            time="2026-11-21T10:05:00.000Z",
            resource_name="orders",
            action="delete",
            api="DeleteTopics",
            policy=p2,
            principal="User:bob",
            client_id="cli",
        ),
        event(
            time="2026-11-21T10:10:00.000Z",
            resource_type="broker",
            resource_name="1",
            action="alter_config",
            api="IncrementalAlterConfigs",
            policy=p2,
            principal=None,
            client_id=None,
        ),
        event(time="2026-11-21T09:30:00.000Z", resource_name="Tmp", policy=p3, **carol, **dry_run),
        event(time="2026-11-21T10:30:00.000Z", resource_name="tmp2", policy=p3, **carol, **dry_run),
        event(time="2026-11-21T10:40:00.000Z", resource_name="x", policy=p1, **alice, **dry_run),
        event(time="2026-11-21T09:40:00.000Z", verdict="allowed", validate_only=True, **alice),
        event(
            time="2026-11-21T09:45:00.000Z",
            resource_name="audit-check",
            policy=p1,
            validate_only=True,
            **alice,
        ),
        event(
            time="2026-11-21T09:01:00.000Z",
            verdict="allowed",
            api="Produce",
            api_version=9,
            action="produce",
            resource_name="orders",
            principal="User:bob",
            client_id="cli",
            client_address=None,
            records_examined=500,
            bytes_examined=64_000,
            interval_start="2026-11-21T09:00:00.000Z",
            interval_end="2026-11-21T09:01:00.000Z",
            event_count=5,
        ),
        event(time="2026-11-22T00:00:00.000Z", verdict="allowed", **alice),
    ]


EXPECTED_TOTALS = {
    "audit_events": 11,
    "decisions": 15,
    "allowed": 7,
    "denied": 5,
    "would_deny": 3,
    "produce_summaries": 1,
    "principals": 3,
    "first_time": "2026-11-21T09:01:00.000Z",
    "last_time": "2026-11-22T00:00:00.000Z",
}
