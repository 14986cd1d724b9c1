"""``kpg audit replay`` with the configuration that decided agrees with the live gateway: the
requests a real gateway judged (creations real and validate_only, with several violations,
dry-run rules, the broker's default counts, the gateway's own topic; topic config changes;
a dynamic client config the gateway refuses before its policies) are replayed against the
same ``policies:`` section, and no outcome changes, each replayed request names the rules
that denied it live, and what the events cannot tell is counted as not replayable rather
than judged wrong.

One Spark session (the suite's), one in-process gateway before the session broker, the
replay read straight from the gateway's spool.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from gateway.config import HostPort
from gateway.exchange import exchange
from protocol import client_configs as wire
from protocol import create_topics as ct
from protocol.alter_configs import DELETE, SET
from protocol.results import ItemError
from spark_audit.replay import changed_requests, replay_requests
from spark_audit.report import load_events
from spark_audit.transforms import with_topic
from tests.support import GatewayThread, gateway_config

pytestmark = pytest.mark.e2e

TOPIC, USER_CLIENT = 2, 121
POLICIES: dict[str, Any] = {
    "rules": [
        {
            "name": "naming",
            "type": "topic.name",
            "mode": "dry-run",
            "pattern": r"[a-z]+\.[a-z0-9-]+\.v[0-9]+",
        },
        {"name": "partition-count", "type": "partitions", "min": 2, "max": 50},
        {"name": "retention-required", "type": "required.configs", "configs": ["retention.ms"]},
        {"name": "retention-max", "type": "config", "config": "retention.ms", "max": 604800000},
    ]
}


def _send(gw: GatewayThread, frame: bytes) -> bytes:
    host, _, port = gw.bootstrap.rpartition(":")
    return exchange(host, int(port), frame, 10.0)


def create(
    gw: GatewayThread, name: str, partitions: int, configs: dict[str, str], validate_only: bool
) -> ItemError:
    spec = ct.TopicSpec(
        name=name,
        num_partitions=partitions,
        replication_factor=-1 if partitions == -1 else 1,
        assignments=(),
        configs=tuple(configs.items()),
    )
    frame = ct.build_request(
        [spec], validate_only=validate_only, timeout_ms=10_000, correlation_id=3, client_id="rp"
    )
    return ct.read_answer(4, _send(gw, frame))[name]


def alter(gw: GatewayThread, resource_type: int, name: str, op: tuple[str, int, str | None]) -> int:
    frame = wire.incremental_alter_request(
        [(resource_type, name, [op])], validate_only=False, correlation_id=5, client_id="rp"
    )
    [answer] = wire.read_incremental_alter_response(_send(gw, frame))
    return answer.error_code


def test_replaying_the_deciding_configuration_changes_nothing(
    spark: SparkSession, broker: HostPort, tmp_path: Path
) -> None:
    token = uuid.uuid4().hex[:8]
    spool = tmp_path / "spool"
    own = f"_kpg_audit_{token}"
    gw = GatewayThread(
        gateway_config(broker, policies=POLICIES, audit={"spool_dir": str(spool), "topic": own})
    ).start()
    good = f"team.good{token}.v1"
    hour = {"retention.ms": "3600000"}
    try:
        codes = {
            "created": create(gw, good, 3, hour, validate_only=False).error_code,
            # several violations at once, and a dry-run rule among them
            "many": create(gw, f"Odd{token}", 100, {}, validate_only=True).error_code,
            # only a dry-run rule objects: allowed, with its note
            "noted": create(gw, f"Odd2{token}", 3, hour, validate_only=True).error_code,
            # the gateway's own audit topic: its own rule, beside the policies
            "own": create(gw, own, 3, hour, validate_only=True).error_code,
            # -1: the broker's default, 3 partitions, judged as such
            "default": create(gw, f"team.d{token}.v1", -1, hour, validate_only=True).error_code,
            # a change that leaves retention.ms as it is: allowed, the topic has it
            "untouched": alter(gw, TOPIC, good, ("min.insync.replicas", SET, "1")),
            "too-long": alter(gw, TOPIC, good, ("retention.ms", SET, "999999999999")),
            "deleted": alter(gw, TOPIC, good, ("retention.ms", DELETE, None)),
            # refused by the gateway before any policy: a value Kafka's validators refuse
            "client-config": alter(gw, USER_CLIENT, f"u{token}:app", ("acks", SET, "2")),
        }
    finally:
        gw.stop()
    assert codes == {
        "created": 0,
        "many": 44,
        "noted": 0,
        "own": 44,
        "default": 0,
        "untouched": 0,
        "too-long": 44,
        "deleted": 44,
        "client-config": 42,
    }

    events = with_topic(load_events(spark, str(spool)))
    replayed = replay_requests(events, POLICIES).cache()
    try:
        rows = [r.asDict() for r in replayed.collect()]
        assert changed_requests(replayed).count() == 0
    finally:
        replayed.unpersist()

    # every request the gateway judged, replayed with the rules that denied it
    judged = [r for r in rows if r["api"] in ("CreateTopics", "IncrementalAlterConfigs")]
    assert len(judged) == 9
    for row in judged:
        if row["replayable"]:
            assert row["replayed_rules"] == row["recorded_rules"], row
            assert row["replayed_denied"] == row["recorded_denied"], row
    [many] = [r for r in judged if r["topics"] == [f"Odd{token}"]]
    assert many["replayed_rules"] == ["partition-count", "retention-required"]
    assert many["replayed_would_deny_rules"] == ["naming"]
    [own_topic] = [r for r in judged if r["topics"] == [own]]
    assert own_topic["replayed_rules"] == ["gateway-topics"]
    client = next(r for r in judged if r["api"] == "IncrementalAlterConfigs" and not r["topics"])
    assert (client["replayable"], client["replayed_rules"]) == (True, ["client_configs"])
    # The topic config changes: the one that leaves retention.ms unchanged cannot be told
    # from its event (the topic's other configs are not recorded); the two that set or
    # delete it can.
    changes = [r for r in judged if r["topics"] == [good] and r["api"] != "CreateTopics"]
    assert sorted((r["replayable"], r["replayed_rules"]) for r in changes) == [
        (False, []),
        (True, ["retention-max"]),
        (True, ["retention-required"]),
    ]
    [unknown] = [r for r in changes if not r["replayable"]]
    assert "required.configs" in unknown["not_replayable_because"]


def test_a_create_left_to_unread_broker_defaults_is_replayed_as_the_gateway_judged_it(
    spark: SparkSession, broker: HostPort, tmp_path: Path
) -> None:
    """A gateway that cannot read the broker's defaults (none stated, and the test broker
    reports none) judges a -1 count by the policies that do not need it; the event records
    the count as null, and a replay judges it the same way: the deciding configuration changes
    nothing, and a candidate that drops the partitions rule allows what that rule denied."""
    token = uuid.uuid4().hex[:8]
    spool = tmp_path / "spool"
    naming = {"name": "naming", "type": "topic.name", "pattern": r"[a-z]+\.[a-z0-9-]+\.v[0-9]+"}
    counted = {"name": "partition-count", "type": "partitions", "max": 50}
    deciding = {"rules": [naming, counted]}
    gw = GatewayThread(
        gateway_config(
            broker,
            policies=deciding,
            upstream={"broker_defaults": {}},
            audit={"spool_dir": str(spool)},
        )
    ).start()
    try:
        answers = {
            "named": create(gw, f"team.n{token}.v1", -1, {}, validate_only=True),
            "odd": create(gw, f"Odd{token}", -1, {}, validate_only=True),
        }
    finally:
        gw.stop()
    assert {k: a.error_code for k, a in answers.items()} == {"named": 44, "odd": 44}
    assert "upstream.broker_defaults.num.partitions" in (answers["named"].error_message or "")

    events = with_topic(load_events(spark, str(spool)))
    same = {r["topics"][0]: r for r in replay_requests(events, deciding).collect()}
    assert [(r["replayable"], r["replayed_rules"]) for r in same.values()] == [
        (True, ["partition-count"]),
        (True, ["naming", "partition-count"]),
    ]
    assert changed_requests(replay_requests(events, deciding)).count() == 0

    candidate = {"rules": [naming]}
    changed = changed_requests(replay_requests(events, candidate)).collect()
    assert [(r["change"], r["topics"]) for r in changed] == [("newly allowed", f"team.n{token}.v1")]
