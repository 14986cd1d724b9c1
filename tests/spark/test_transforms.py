"""The pure transforms, on the session's local Spark."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import date, datetime

import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from spark_audit.event import line_hash
from spark_audit.transforms import (
    DenialDimension,
    decisions_per_hour,
    dedupe_events,
    denials_by,
    malformed_events,
    normalize_events,
    top_offenders,
    totals,
    validate_only_outcomes,
    with_date,
    would_deny_by_policy,
)
from tests.spark.support import event, raw_events, report_events, table_rows

pytestmark = pytest.mark.e2e

P1, P2, P3 = "min-replication-factor", "no-delete", "topic-naming"


@pytest.fixture(scope="module")
def report_table(spark: SparkSession) -> Iterator[DataFrame]:
    """Table rows of ``report_events()``, cached for the report tests."""
    table = table_rows(spark, report_events()).cache()
    try:
        yield table
    finally:
        table.unpersist()


def test_normalize_types_times_and_keywords_and_drops_malformed_lines(spark: SparkSession) -> None:
    good = event(time="2026-11-21T09:00:00.123Z")
    shouty = json.loads(event(time="2026-11-21T10:00:00.000Z").to_json_line())
    shouty.update(verdict=" DENIED ", mode="Enforce", event_id=shouty["event_id"].upper())
    bad_time = json.loads(event().to_json_line()) | {"time": "2026-11-21 09:00:00"}
    no_id = json.loads(event().to_json_line()) | {"event_id": None}
    bad_verdict = json.loads(event().to_json_line()) | {"verdict": "maybe"}
    lines = [
        good.to_json_line(),
        json.dumps(shouty),
        good.to_json_line()[:60],  # torn
        json.dumps(bad_time),
        json.dumps(no_id),
        json.dumps(bad_verdict),
    ]
    raw = raw_events(spark, lines)

    normalized = normalize_events(raw).select("event_id", "time", "verdict", "mode")

    assertDataFrameEqual(
        normalized,
        [
            Row(
                event_id=good.event_id,
                time=datetime(2026, 11, 21, 9, 0, 0, 123000),
                verdict="denied",
                mode="enforce",
            ),
            Row(
                event_id=shouty["event_id"].lower(),
                time=datetime(2026, 11, 21, 10),
                verdict="denied",
                mode="enforce",
            ),
        ],
    )
    assert malformed_events(raw).count() == 4


def test_dedupe_keeps_one_row_per_event_id_and_dates_are_utc(spark: SparkSession) -> None:
    late = event(time="2026-11-21T23:59:59.999Z")
    early = event(time="2026-11-22T00:00:00.000Z")
    events = normalize_events(
        raw_events(spark, [late.to_json_line(), early.to_json_line(), late.to_json_line()])
    )

    dated = with_date(dedupe_events(events)).select("event_id", "date")

    assertDataFrameEqual(
        dated,
        [
            Row(event_id=late.event_id, date=date(2026, 11, 21)),
            Row(event_id=early.event_id, date=date(2026, 11, 22)),
        ],
    )


def test_with_date_refuses_a_session_that_is_not_utc(spark: SparkSession) -> None:
    events = normalize_events(raw_events(spark, [event().to_json_line()]))
    spark.conf.set("spark.sql.session.timeZone", "Europe/Paris")
    try:
        with pytest.raises(ValueError, match="UTC"):
            with_date(events)
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")


def test_totals(report_table: DataFrame) -> None:
    result = totals(report_table)

    assertDataFrameEqual(
        result,
        [
            Row(
                audit_events=11,
                decisions=15,
                allowed=7,
                denied=5,
                would_deny=3,
                produce_summaries=1,
                principals=3,
                first_time=datetime(2026, 11, 21, 9, 1),
                last_time=datetime(2026, 11, 22, 0, 0),
            )
        ],
    )


def test_decisions_per_hour_weighs_summaries_by_event_count(report_table: DataFrame) -> None:
    result = decisions_per_hour(report_table)

    assertDataFrameEqual(
        result,
        [
            Row(hour=datetime(2026, 11, 21, 9), verdict="allowed", decisions=6),
            Row(hour=datetime(2026, 11, 21, 9), verdict="denied", decisions=3),
            Row(hour=datetime(2026, 11, 21, 9), verdict="would_deny", decisions=1),
            Row(hour=datetime(2026, 11, 21, 10), verdict="denied", decisions=2),
            Row(hour=datetime(2026, 11, 21, 10), verdict="would_deny", decisions=2),
            Row(hour=datetime(2026, 11, 22, 0), verdict="allowed", decisions=1),
        ],
        checkRowOrder=True,
    )


@pytest.mark.parametrize(
    ("dimension", "expected"),
    [
        ("policy", [(P1, 3), (P2, 2)]),
        ("principal", [("User:alice", 3), (None, 1), ("User:bob", 1)]),
        ("client_id", [("app", 3), (None, 1), ("cli", 1)]),
        ("topic", [("orders", 2), ("audit-check", 1), ("payments", 1)]),
    ],
)
def test_denials_by(
    report_table: DataFrame, dimension: DenialDimension, expected: list[tuple[str | None, int]]
) -> None:
    result = denials_by(report_table, dimension)

    assert result.columns == [dimension, "denials"]
    assertDataFrameEqual(
        result, [Row(key, denials) for key, denials in expected], checkRowOrder=True
    )


def test_top_offenders_rank_denials_and_would_deny_together(report_table: DataFrame) -> None:
    result = top_offenders(report_table, limit=3)

    assertDataFrameEqual(
        result,
        [
            Row(
                principal="User:alice",
                client_id="app",
                denials=3,
                would_deny=1,
                policies=1,
                resources=4,
                last_time=datetime(2026, 11, 21, 10, 40),
            ),
            Row(
                principal="User:carol",
                client_id="app2",
                denials=0,
                would_deny=2,
                policies=1,
                resources=2,
                last_time=datetime(2026, 11, 21, 10, 30),
            ),
            Row(
                principal=None,
                client_id=None,
                denials=1,
                would_deny=0,
                policies=1,
                resources=1,
                last_time=datetime(2026, 11, 21, 10, 10),
            ),
        ],
        checkRowOrder=True,
    )


def test_would_deny_by_policy(report_table: DataFrame) -> None:
    result = would_deny_by_policy(report_table)

    assertDataFrameEqual(
        result,
        [
            Row(
                policy=P3,
                would_deny=2,
                principals=1,
                resources=2,
                first_time=datetime(2026, 11, 21, 9, 30),
                last_time=datetime(2026, 11, 21, 10, 30),
            ),
            Row(
                policy=P1,
                would_deny=1,
                principals=1,
                resources=1,
                first_time=datetime(2026, 11, 21, 10, 40),
                last_time=datetime(2026, 11, 21, 10, 40),
            ),
        ],
        checkRowOrder=True,
    )


def test_validate_only_outcomes(report_table: DataFrame) -> None:
    result = validate_only_outcomes(report_table)

    assertDataFrameEqual(
        result,
        [
            Row(api="CreateTopics", verdict="allowed", policy=None, requests=1),
            Row(api="CreateTopics", verdict="denied", policy=P1, requests=1),
        ],
        checkRowOrder=True,
    )


def test_parse_lines_hashes_each_line_as_written(spark: SparkSession) -> None:
    lines = [event().to_json_line() for _ in range(2)] + ["{torn"]
    raw = raw_events(spark, lines).collect()

    assert [row.line_hash for row in raw] == [line_hash(line) for line in lines]
    assert raw[2].event_id is None and raw[2].line_hash == line_hash("{torn")
