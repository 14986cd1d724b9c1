"""The audit event schema and the Produce summarizer: pure code, no Spark, no I/O."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.audit import ProduceSummarizer
from spark_audit.event import (
    SCHEMA_VERSION,
    SPARK_SCHEMA_DDL,
    AuditEvent,
    ConfigChange,
    TopicSpec,
    format_time,
    new_request_id,
    parse_time,
)
from tests.support import audit_event

pytestmark = pytest.mark.unit

SCHEMA_DOC = Path(__file__).resolve().parents[2] / "spark_audit" / "SCHEMA.md"


def make_event(**overrides: Any) -> AuditEvent:
    """``audit_event``'s denied CreateTopics of ``orders``, by terraform, with a message."""
    fields: dict[str, Any] = {
        "client_id": "terraform",
        "resource_name": "orders",
        "message": "replication_factor 1 is below the minimum 3",
    }
    return audit_event(**(fields | overrides))


def test_json_line_round_trips_and_is_one_line() -> None:
    event = make_event(validate_only=True)

    line = event.to_json_line()

    assert line.endswith("\n") and line.count("\n") == 1
    assert list(json.loads(line))[:3] == ["schema_version", "event_id", "time"]
    assert AuditEvent.from_json(line) == event
    assert AuditEvent.from_json(line.encode()) == event


def test_defaults_give_a_fresh_id_and_the_current_version() -> None:
    first, second = make_event(), make_event()

    assert first.event_id != second.event_id
    assert re.fullmatch(r"[0-9a-f-]{36}", first.event_id)
    assert first.schema_version == SCHEMA_VERSION
    assert first.event_count == 1 and not first.is_summary


def _top_level_columns(ddl: str) -> list[str]:
    """``ddl`` split at the commas outside ``<...>`` (nested struct fields stay together)."""
    columns, depth, start = [], 0, 0
    for index, char in enumerate(ddl):
        depth += {"<": 1, ">": -1}.get(char, 0)
        if char == "," and depth == 0:
            columns.append(ddl[start:index].strip())
            start = index + 1
    return [*columns, ddl[start:].strip()]


def test_spark_schema_lists_the_dataclass_fields_in_order() -> None:
    field_names = [field.name for field in dataclasses.fields(AuditEvent)]
    ddl_names = [column.split()[0] for column in _top_level_columns(SPARK_SCHEMA_DDL)]

    assert ddl_names == field_names


def test_schema_doc_documents_every_field_and_its_example_is_valid() -> None:
    doc = SCHEMA_DOC.read_text(encoding="utf-8")
    documented = re.findall(r"^\| `(\w+)` \|", doc, flags=re.MULTILINE)
    example = re.search(r"```json\n(.*?)\n```", doc, flags=re.DOTALL)

    assert documented == [field.name for field in dataclasses.fields(AuditEvent)]
    assert example is not None
    assert AuditEvent.from_json(example.group(1)).verdict == "denied"
    # The example is an event as the gateway writes it now: this version, every field, in
    # order (it was a version 2 line, without request_events, under a version 3 heading).
    assert json.loads(example.group(1))["schema_version"] == SCHEMA_VERSION
    assert list(json.loads(example.group(1))) == documented


def test_importing_the_schema_and_the_sinks_does_not_import_pyspark() -> None:
    code = (
        "import sys, spark_audit.event, gateway.audit; "
        "sys.exit(1 if 'pyspark' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


@pytest.mark.parametrize(
    ("overrides", "complaint"),
    [
        ({"verdict": "maybe"}, "verdict"),
        ({"mode": "audit"}, "mode"),
        ({"verdict": "would_deny", "mode": "enforce"}, "would_deny"),
        ({"time": "2026-11-21T09:00:00Z"}, "milliseconds"),
        ({"time": "2026-11-21T09:00:00.123+01:00"}, "milliseconds"),
        ({"interval_start": "2026-11-21T09:00:00.000Z"}, "together"),
        (
            {
                "interval_start": "2026-11-21T09:01:00.000Z",
                "interval_end": "2026-11-21T09:00:00.000Z",
            },
            "after",
        ),
        ({"event_count": 3}, "summary interval"),
        ({"bytes_examined": -1}, "negative"),
        ({"schema_version": 0}, "schema_version"),
    ],
)
def test_construction_rejects_events_that_break_the_schema(
    overrides: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(ValueError, match=complaint):
        make_event(**overrides)


def _as_dict(event: AuditEvent) -> dict[str, Any]:
    return dataclasses.asdict(event)


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        (lambda d: d.update(colour="red"), "unknown"),
        (lambda d: d.pop("principal"), "missing"),
        (lambda d: d.update(api_version="7"), "api_version"),
        (lambda d: d.update(api_version=True), "api_version"),
        (lambda d: d.update(validate_only=1), "validate_only"),
        (lambda d: d.update(resource_name=None), "cannot be null"),
        (lambda d: d.update(schema_version="1"), "schema_version"),
    ],
)
def test_from_json_rejects_malformed_events(change: Any, complaint: str) -> None:
    data = _as_dict(make_event())
    change(data)

    with pytest.raises(ValueError, match=complaint):
        AuditEvent.from_json(json.dumps(data))


def test_from_json_ignores_fields_added_by_a_newer_version() -> None:
    data = _as_dict(make_event()) | {"schema_version": SCHEMA_VERSION + 1, "colour": "red"}

    event = AuditEvent.from_json(json.dumps(data))

    assert event.schema_version == SCHEMA_VERSION + 1
    assert event.resource_name == "orders"


def test_v2_and_v3_fields_round_trip() -> None:
    event = make_event(
        request_id=new_request_id(),
        request_events=2,
        policy_version="sha256:0123456789abcdef",
        chain_id="c0ffee00-0000-4000-8000-000000000000",
        seq=3,
        prev_hash="ab" * 32,
        config_changes=(
            ConfigChange(name="retention.ms", before="604800000", after="86400000"),
            ConfigChange(name="ssl.key.password", before=None, after=None, sensitive=True),
            ConfigChange(name="cleanup.policy", before=None, after="compact"),
        ),
        topic_spec=TopicSpec(partitions=6, replication_factor=3, configs={"a.b": "c"}),
    )

    line = event.to_json_line()
    data = json.loads(line)

    assert AuditEvent.from_json(line) == event
    assert data["event_kind"] == "decision"
    assert data["config_changes"][1] == {
        "name": "ssl.key.password",
        "before": None,
        "after": None,
        "sensitive": True,
    }
    assert data["topic_spec"] == {
        "partitions": 6,
        "replication_factor": 3,
        "configs": {"a.b": "c"},
    }
    assert list(data)[-9:] == [
        "request_id",
        "policy_version",
        "event_kind",
        "chain_id",
        "seq",
        "prev_hash",
        "config_changes",
        "topic_spec",
        "request_events",
    ]


def test_a_v2_event_still_reads_without_request_events() -> None:
    data = _as_dict(make_event(request_id=new_request_id())) | {"schema_version": 2}
    del data["request_events"]

    event = AuditEvent.from_json(json.dumps(data))

    assert event.schema_version == 2 and event.request_events is None
    assert json.loads(event.to_json_line()) == data  # written back as it was
    with pytest.raises(ValueError, match="unknown"):
        AuditEvent.from_json(json.dumps(data | {"request_events": 1}))


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({"request_id": "5b0f1e0c9d8a4f7e8c2b6a1d3e4f5a6b", "request_events": 0}, ">= 1"),
        ({"request_id": None, "request_events": 1}, "goes with a request_id"),
        ({"schema_version": 2, "request_id": "r", "request_events": 1}, "version 3 fields"),
    ],
)
def test_request_events_breaking_the_schema_are_refused(
    fields: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(ValueError, match=complaint):
        make_event(**fields)


V1_LINE = (
    '{"schema_version":1,"event_id":"0d7c3f7e-0b7e-4d55-9a47-3c4cf0d5e0a1",'
    '"time":"2026-11-21T09:00:00.123Z","gateway_instance":"kpg-1",'
    '"client_address":null,"principal":null,"client_id":"p","api":"Produce",'
    '"api_version":9,"resource_type":"topic","resource_name":"orders","action":"produce",'
    '"policy":null,"mode":"enforce","verdict":"allowed","error_code":null,"message":null,'
    '"validate_only":false,"records_examined":4,"bytes_examined":400,'
    '"interval_start":"2026-11-21T09:00:00.000Z","interval_end":"2026-11-21T09:00:00.123Z",'
    '"event_count":2}'
)


def test_a_v1_event_still_reads_with_its_v2_fields_null() -> None:
    event = AuditEvent.from_json(V1_LINE)

    assert event.schema_version == 1
    assert event.event_kind is None and event.kind == "summary"
    assert event.request_id is None and event.chain_id is None and event.topic_spec is None
    assert event.to_json_line().rstrip("\n") == V1_LINE  # written back as it was


def test_v2_keys_in_a_v1_event_are_a_writer_bug() -> None:
    data = json.loads(V1_LINE) | {"request_id": "x"}

    with pytest.raises(ValueError, match="unknown"):
        AuditEvent.from_json(json.dumps(data))


def test_a_v2_event_must_have_its_v2_keys() -> None:
    data = _as_dict(make_event())
    del data["policy_version"]

    with pytest.raises(ValueError, match="missing"):
        AuditEvent.from_json(json.dumps(data))


@pytest.mark.parametrize(
    ("overrides", "complaint"),
    [
        ({"event_kind": "audit"}, "event_kind"),
        ({"event_kind": "summary"}, "summary"),
        ({"event_kind": "lifecycle"}, "lifecycle"),
        ({"chain_id": "c"}, "together"),
        ({"chain_id": "c", "seq": 0, "prev_hash": "ab"}, "first event"),
        ({"chain_id": "c", "seq": 1}, "every event"),
        ({"schema_version": 1, "request_id": "r"}, "version 1"),
    ],
)
def test_construction_rejects_v2_fields_that_break_the_schema(
    overrides: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(ValueError, match=complaint):
        make_event(**overrides)


def test_a_sensitive_config_change_has_no_values() -> None:
    with pytest.raises(ValueError, match="sensitive"):
        ConfigChange(name="sasl.jaas.config", before="secret", after=None, sensitive=True)


@pytest.mark.parametrize(
    "bad",
    [
        [{"name": "a", "before": 1, "after": None, "sensitive": False}],
        [{"name": "a", "before": None, "after": None}],
        {"name": "a"},
    ],
)
def test_from_json_rejects_malformed_config_changes(bad: object) -> None:
    data = _as_dict(make_event()) | {"config_changes": bad}

    with pytest.raises(ValueError, match="config change|array"):
        AuditEvent.from_json(json.dumps(data))


@pytest.mark.parametrize(
    ("epoch_ms", "text"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (1_795_251_600_123, "2026-11-21T09:00:00.123Z"),
        (1_795_305_599_999, "2026-11-21T23:59:59.999Z"),
    ],
)
def test_time_format_round_trips(epoch_ms: int, text: str) -> None:
    assert format_time(epoch_ms) == text
    assert parse_time(text) == epoch_ms


# --- ProduceSummarizer ----------------------------------------------------------------------

T0 = 1_795_251_600_000  # 2026-11-21T09:00:00.000Z


def _produce(
    summarizer: ProduceSummarizer,
    topic: str,
    principal: str | None,
    client_id: str | None,
    *,
    records: int,
    api_version: int = 9,
) -> None:
    summarizer.add(
        topic=topic,
        principal=principal,
        client_id=client_id,
        api_version=api_version,
        records_examined=records,
        bytes_examined=records * 100,
    )


def test_summarizer_emits_one_event_per_key_per_interval() -> None:
    summarizer = ProduceSummarizer(
        gateway_instance="kpg-1", mode="enforce", interval_ms=60_000, start_ms=T0
    )
    _produce(summarizer, "orders", "User:alice", "app", records=10, api_version=7)
    _produce(summarizer, "orders", "User:alice", "app", records=5, api_version=9)
    _produce(summarizer, "orders", "User:alice", "app", records=1, api_version=8)
    _produce(summarizer, "orders", None, "app", records=2)
    _produce(summarizer, "payments", "User:alice", "app", records=3)

    summaries = summarizer.flush(T0 + 60_000)

    assert [
        (e.resource_name, e.principal, e.event_count, e.records_examined, e.bytes_examined)
        for e in summaries
    ] == [
        ("orders", None, 1, 2, 200),
        ("orders", "User:alice", 3, 16, 1600),
        ("payments", "User:alice", 1, 3, 300),
    ]
    alice_orders = summaries[1]
    assert alice_orders.api_version == 9
    assert alice_orders.interval_start == "2026-11-21T09:00:00.000Z"
    assert alice_orders.interval_end == alice_orders.time == "2026-11-21T09:01:00.000Z"
    assert (alice_orders.api, alice_orders.action, alice_orders.verdict) == (
        "Produce",
        "produce",
        "allowed",
    )
    assert alice_orders.client_address is None and alice_orders.is_summary


def test_summarizer_starts_the_next_interval_where_the_last_ended() -> None:
    summarizer = ProduceSummarizer(
        gateway_instance="kpg-1", mode="dry-run", interval_ms=60_000, start_ms=T0
    )
    assert not summarizer.due(T0 + 59_999)
    assert summarizer.due(T0 + 60_000)
    assert summarizer.flush(T0 + 60_000) == ()

    _produce(summarizer, "orders", "User:bob", None, records=1)
    (summary,) = summarizer.flush(T0 + 90_000)

    assert summary.interval_start == "2026-11-21T09:01:00.000Z"
    assert summary.interval_end == "2026-11-21T09:01:30.000Z"
    assert summary.mode == "dry-run"
    assert summarizer.flush(T0 + 120_000) == ()


def test_a_clock_set_back_ends_the_summary_interval() -> None:
    """An NTP step back of an hour kept the interval open for the hour and the interval after
    it, every share folded into one late summary; it ends there now, and the next interval
    starts at the clock's time."""
    summarizer = ProduceSummarizer(
        gateway_instance="kpg-1", mode="enforce", interval_ms=60_000, start_ms=T0
    )
    _produce(summarizer, "orders", "User:bob", None, records=1)
    back = T0 + 30_000 - 3_600_000
    assert summarizer.due(back)
    (summary,) = summarizer.flush(back)
    assert summary.interval_start == summary.interval_end == "2026-11-21T09:00:00.000Z"
    assert not summarizer.due(back + 59_999)
    assert summarizer.due(back + 60_000)


def test_a_reload_within_an_interval_splits_the_summaries_by_policy_version() -> None:
    summarizer = ProduceSummarizer(
        gateway_instance="kpg-1", mode="enforce", interval_ms=60_000, start_ms=T0
    )
    for version in (
        "sha256:000000000000000a",
        "sha256:000000000000000a",
        "sha256:000000000000000b",
    ):
        summarizer.add(
            topic="orders",
            principal=None,
            client_id="app",
            api_version=9,
            records_examined=0,
            bytes_examined=0,
            policy_version=version,
        )

    summaries = summarizer.flush(T0 + 60_000)

    assert [(e.policy_version, e.event_count, e.kind) for e in summaries] == [
        ("sha256:000000000000000a", 2, "summary"),
        ("sha256:000000000000000b", 1, "summary"),
    ]


def test_keys_over_the_bound_and_illegal_names_fold_into_one_summary_that_counts_them() -> None:
    summarizer = ProduceSummarizer(
        gateway_instance="kpg-1", mode="enforce", interval_ms=60_000, start_ms=T0, max_keys=2
    )
    _produce(summarizer, "orders", "User:alice", "app", records=1)
    _produce(summarizer, "bad name!", "User:alice", "app", records=7)  # no topic has it
    _produce(summarizer, "payments", "User:bob", "app", records=2)
    _produce(summarizer, "made-up-1", "User:eve", "x", records=3)  # over the bound
    _produce(summarizer, "made-up-2", "User:eve", "x", records=4)
    _produce(summarizer, "orders", "User:alice", "app", records=5)  # a key already kept

    summaries = summarizer.flush(T0 + 60_000)

    assert [
        (e.resource_name, e.principal, e.client_id, e.event_count, e.records_examined)
        for e in summaries
    ] == [
        ("*", "User:alice", None, 1, 7),
        ("*", "User:eve", None, 2, 7),
        ("orders", "User:alice", "app", 2, 6),
        ("payments", "User:bob", "app", 1, 2),
    ]
    assert "audit.produce_summary_max_keys" in (summaries[0].message or "")
    assert summaries[2].message is None

    _produce(summarizer, "made-up-1", "User:eve", "x", records=1)  # a new interval: kept
    (summary,) = summarizer.flush(T0 + 120_000)
    assert (summary.resource_name, summary.message) == ("made-up-1", None)


def test_one_client_s_made_up_names_leave_the_others_writes_theirs() -> None:
    """Names are counted before any broker says the topic exists, so one client's made-up
    names filled the interval's keys, and every other principal's writes after them were
    folded under a null principal: User:eve's flood made User:alice's and User:bob's Produce
    traffic of the interval nobody's. The folded summary keeps its principal; past
    ``max_keys`` folded principals, further ones fold under a null principal."""
    summarizer = ProduceSummarizer(
        gateway_instance="kpg-1", mode="enforce", interval_ms=60_000, start_ms=T0, max_keys=3
    )
    for index in range(5):  # the flood: three keys kept, two shares folded
        _produce(summarizer, f"made-up-{index}", "User:eve", "x", records=1)
    _produce(summarizer, "orders", "User:alice", "app", records=2)
    _produce(summarizer, "orders", "User:alice", "app", records=3)
    _produce(summarizer, "payments", "User:bob", "app", records=4)
    _produce(summarizer, "payments", "User:carol", "app", records=5)  # past 3 folded ones

    summaries = summarizer.flush(T0 + 60_000)

    folded = [
        (e.principal, e.client_id, e.event_count, e.records_examined)
        for e in summaries
        if e.resource_name == "*"
    ]
    assert folded == [
        (None, None, 1, 5),
        ("User:alice", None, 2, 5),
        ("User:bob", None, 1, 4),
        ("User:eve", None, 2, 2),
    ]
    assert sum(e.event_count for e in summaries) == 9


def test_an_event_over_the_line_bound_keeps_what_fits() -> None:
    """An event within EVENT_MAX_BYTES is written as it is; a larger one has its long texts
    (config names and values, names, the message) shortened to start, length and SHA-256,
    then its config changes cut to the first that fit, its message saying so. A sensitive
    change stays without values."""
    from gateway.audit import EVENT_MAX_BYTES, bounded_event
    from spark_audit.event import ConfigChange as Change

    small = audit_event(config_changes=(Change(name="a", before="1", after="2"),))
    assert bounded_event(small) is small

    group = "g" * 600_000
    changes = (
        Change(name="secret", before=None, after=None, sensitive=True),
        *(Change(name=f"k{i}", before=None, after="v" * 3_000) for i in range(500)),
    )
    large = audit_event(resource_type="group", resource_name=group, config_changes=changes)

    bounded = bounded_event(large)

    assert len(bounded.to_json_line()) <= EVENT_MAX_BYTES < len(large.to_json_line())
    assert bounded.resource_name.startswith("g" * 1000 + "... (600000 characters, sha256 ")
    assert bounded.config_changes is not None
    kept = len(bounded.config_changes)
    assert 0 < kept < len(changes)
    assert bounded.config_changes[0] == changes[0]
    assert bounded.config_changes[1].after is not None
    assert bounded.config_changes[1].after.startswith("v" * 1000 + "... (3000 characters")
    assert bounded.message is not None
    assert f"{kept} of {len(changes)} config changes" in bounded.message
    assert (bounded.event_id, bounded.verdict) == (large.event_id, large.verdict)
