"""Request-level reports (schema v2 request ids, v3 request_events), on hand-made events
counted by hand."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from spark_audit.event import ConfigChange
from spark_audit.transforms import (
    config_changes,
    denied_requests,
    denied_requests_by,
    dry_run_requests,
    filter_events,
    principals,
    refused_authentications,
    request_offenders,
    request_totals,
    requests_of,
    requests_per_hour,
    with_topic,
)
from tests.spark.support import event, refused_authentication, table_rows

pytestmark = pytest.mark.e2e

P1, P2, P3, P4 = "min-replication-factor", "no-delete", "topic-naming", "record-validation"
ALICE = {"principal": "User:alice", "client_id": "app"}
BOB = {"principal": "User:bob", "client_id": "cli"}


def _request(request_id: str, *items: dict[str, Any], **common: Any) -> list[Any]:
    return [event(request_id=request_id, **(common | item)) for item in items]


def request_events() -> list[Any]:
    at = {"time": "2026-11-21T09:10:00.000Z"}
    produce = {"api": "Produce", "action": "produce", "policy": P4, **BOB}
    return [
        # R1: two topics, three broken rules: one denied request.
        *_request(
            "r1",
            {"resource_name": "orders", "policy": P1},
            {"resource_name": "orders", "policy": P2},
            {"resource_name": "payments", "policy": P1},
            **ALICE,
            **at,
        ),
        # R2: a dry-run rule objects: allowed, with an objection.
        *_request(
            "r2",
            {"resource_name": "tmp", "policy": P3, "mode": "dry-run", "verdict": "would_deny"},
            **ALICE,
            error_code=None,
            time="2026-11-21T10:00:00.000Z",
        ),
        # R3: Produce to two partitions of orders.
        *_request("r3", {"resource_name": "orders-3"}, {"resource_name": "orders-7"}, **produce),
        # R4: an unauthenticated config change, allowed.
        *_request(
            "r4",
            {
                "api": "IncrementalAlterConfigs",
                "resource_type": "broker",
                "resource_name": "1",
                "action": "alter_config",
                "verdict": "allowed",
                "policy": None,
                "error_code": None,
                "principal": None,
                "client_id": None,
                "config_changes": (
                    ConfigChange(name="log.retention.ms", before="1000", after="2000"),
                    ConfigChange(name="ssl.key.password", before=None, after=None, sensitive=True),
                ),
            },
        ),
        # R5: a real request from a client calling itself kpg-dry-run (the tool's client id):
        # not a dry run, an offence. R6: a dry run (validate_only, as kpg dry-run sends).
        *_request(
            "r5", {"resource_name": "dry1", "principal": "User:carol"}, client_id="kpg-dry-run"
        ),
        *_request("r6", {"resource_name": "dry2", "validate_only": True}, **ALICE),
        # A v1 event: a request of its own.
        event(schema_version=1, resource_name="old", policy=P2, **BOB),
        # Five allowed Produce requests in a summary; a lifecycle event, no request.
        event(
            verdict="allowed",
            api="Produce",
            action="produce",
            resource_name="orders",
            client_address=None,
            interval_start="2026-11-21T09:00:00.000Z",
            interval_end="2026-11-21T09:01:00.000Z",
            time="2026-11-21T09:01:00.000Z",
            event_count=5,
            **BOB,
        ),
        event(
            verdict="allowed",
            event_kind="lifecycle",
            api="Gateway",
            api_version=0,
            resource_type="gateway",
            resource_name="kpg-1",
            action="start",
            principal=None,
            client_id=None,
            client_address=None,
        ),
    ]


@pytest.fixture(scope="module")
def events(spark: SparkSession) -> Iterator[DataFrame]:
    frame = with_topic(table_rows(spark, request_events()))
    # Each event says how many its request has, as the gateway writes them (schema v3).
    per_request = F.count(F.lit(1)).over(Window.partitionBy("request_id")).cast("int")
    frame = frame.withColumn(
        "request_events", F.when(F.col("request_id").isNotNull(), per_request)
    ).cache()
    try:
        yield frame
    finally:
        frame.unpersist()


@pytest.fixture(scope="module")
def requests(events: DataFrame) -> DataFrame:
    return requests_of(events)


def rows(frame: DataFrame) -> list[dict[str, Any]]:
    return [row.asDict() for row in frame.collect()]


def test_a_request_is_counted_once_with_every_rule_it_broke(requests: DataFrame) -> None:
    (totals,) = rows(request_totals(requests))
    assert totals == {
        "requests": 12,
        "requests_denied": 5,
        "requests_allowed": 7,
        "requests_would_deny": 1,
        "dry_run_requests": 1,
        "request_principals": 4,
    }
    (r1,) = rows(requests.where("request_id = 'r1'"))
    assert (r1["outcome"], r1["denied_rules"], r1["topics"], r1["events"]) == (
        "denied",
        [P1, P2],
        ["orders", "payments"],
        3,
    )


def test_a_request_of_one_event_is_counted_as_grouping_would(events: DataFrame) -> None:
    """Requests of one event (request_events 1, summaries) are taken as they are, the others
    grouped by request id; with no request_events (v1 and v2 events) every request is
    grouped. Both give the same rows."""
    assert events.where("request_events = 1").count() > 0
    assert events.where("request_events > 1").count() > 0
    unsaid = events.withColumn("request_events", F.lit(None).cast("int"))

    def by_key(frame: DataFrame) -> list[dict[str, Any]]:
        return sorted(rows(frame), key=lambda row: str(row["request_key"]))

    assert by_key(requests_of(events)) == by_key(requests_of(unsaid))


def test_denied_requests_by_rule_and_by_topic_not_partition(requests: DataFrame) -> None:
    assert rows(denied_requests_by(requests, "policy")) == [
        {"policy": P1, "denied_requests": 3},
        {"policy": P2, "denied_requests": 2},
        {"policy": P4, "denied_requests": 1},
    ]
    by_topic = {
        r["topic"]: r["denied_requests"] for r in rows(denied_requests_by(requests, "topic"))
    }
    assert by_topic == {"orders": 2, "payments": 1, "dry1": 1, "dry2": 1, "old": 1}


def test_dry_runs_are_kept_apart_from_offenders(requests: DataFrame) -> None:
    """validate_only requests are dry runs; a client id alone is not: a client calling itself
    kpg-dry-run (the tool's client id) to change the cluster is counted among offenders."""
    offenders = rows(request_offenders(requests))
    assert [
        (r["principal"], r["client_id"], r["denied_requests"], r["would_deny_requests"])
        for r in offenders
    ] == [
        ("User:alice", "app", 1, 1),
        ("User:bob", "cli", 2, 0),
        ("User:carol", "kpg-dry-run", 1, 0),
    ]
    dry = {
        (r["client_id"], r["validate_only"], r["outcome"]): r["requests"]
        for r in rows(dry_run_requests(requests))
    }
    assert dry == {("app", True, "denied"): 1}


def test_unauthenticated_clients_are_anonymous_principals(requests: DataFrame) -> None:
    named = {r["principal"]: r["requests"] for r in rows(principals(requests))}
    assert named["ANONYMOUS"] == 1
    assert named["User:bob"] == 7


def test_requests_per_hour_keep_denials_and_objections_apart(requests: DataFrame) -> None:
    assert rows(requests_per_hour(requests)) == [
        {"hour": datetime(2026, 11, 21, 9), "denied": 5, "would_deny": 0, "allowed": 6},
        {"hour": datetime(2026, 11, 21, 10), "denied": 0, "would_deny": 1, "allowed": 0},
    ]


def test_config_changes_have_before_and_after(events: DataFrame) -> None:
    changes = rows(
        config_changes(events).select("config", "before", "after", "sensitive", "principal")
    )
    assert changes == [
        {
            "config": "log.retention.ms",
            "before": "1000",
            "after": "2000",
            "sensitive": False,
            "principal": "ANONYMOUS",
        },
        {
            "config": "ssl.key.password",
            "before": None,
            "after": None,
            "sensitive": True,
            "principal": "ANONYMOUS",
        },
    ]


def test_filters(events: DataFrame) -> None:
    def request_ids(**filters: Any) -> set[str | None]:
        frame = filter_events(events, **filters)
        return {r["request_id"] for r in rows(requests_of(frame))}

    assert request_ids(topic="orders") == {"r1", "r3", None}  # None: the summary
    assert request_ids(principal="ANONYMOUS") == {"r4"}
    assert request_ids(since="2026-11-21T09:30:00", until="2026-11-21T11:00:00") == {"r2"}


def _refused(user: str, address: str, policy: str = "broker", **fields: Any) -> Any:
    return refused_authentication(user, policy, client_address=address, **fields)


def test_refused_authentications_show_who_tried_which_user_from_where(
    spark: SparkSession,
) -> None:
    """A guesser reconnects from new ports: its refusals are counted per host, per user name
    claimed and per rule, most first; an accepted request and other denials are not here."""
    events = [
        _refused("alice", "10.0.0.9:50001", client_id="x"),
        _refused("alice", "10.0.0.9:50002", client_id="y"),
        _refused("alice", "10.0.0.9:50003", client_id="x", time="2026-11-21T09:30:00.000Z"),
        _refused("bob", "[fe80::1]:40000"),
        _refused("", "10.0.0.5:1234", policy="sasl.client_auth", api="Metadata"),
        event(resource_name="orders", **ALICE),  # a denied CreateTopics: not an authentication
        event(verdict="allowed", resource_name="orders", **ALICE),
    ]

    got = rows(refused_authentications(table_rows(spark, events)))

    assert [
        (r["user"], r["client_host"], r["policy"], r["refusals"], r["client_ids"]) for r in got
    ] == [
        ("alice", "10.0.0.9", "broker", 3, 2),
        ("", "10.0.0.5", "sasl.client_auth", 1, 1),
        ("bob", "[fe80::1]", "broker", 1, 1),
    ]
    assert got[0]["last_time"] == datetime(2026, 11, 21, 9, 30)


def test_a_client_chosen_name_holding_the_separator_reads_as_one_name(
    spark: SparkSession,
) -> None:
    """Denied requests list the resources a rule refused, joined by ", ": a client that named
    its group "orders-app, billing-app" was listed as having gone for two groups, one of them
    someone else's. A name holding ", ", starting with a double quote, or empty, is listed as a
    JSON string; other names as they are."""
    names = ["orders-app, billing-app", '"x" \\ y', "", "plain", 'a "b"']
    group = {"api": "DeleteGroups", "resource_type": "group", "action": "delete", **ALICE}
    events = [event(request_id="g", resource_name=name, **group) for name in names]

    [request] = rows(denied_requests(requests_of(with_topic(table_rows(spark, events)))))

    assert request["resources"] == ('"", "\\"x\\" \\\\ y", a "b", "orders-app, billing-app", plain')
