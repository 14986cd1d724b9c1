"""KafkaJS (Node.js) through the real gateway in front of the real broker, with policies on.

KafkaJS speaks older versions than the other clients the tests drive, and picks each API's
version as the lower of its own newest and the gateway's advertised newest (it ignores the
advertised oldest): CreateTopics v3 with -1 counts unless told, DeleteTopics v1, DescribeConfigs
v2, AlterConfigs v1, Metadata v6 (auto-creation on by default for its producers), Produce v7
(no error message in the answer). Its errors carry the error code's type, never the answer's
message: where the gateway's message is on the wire, the tests read what KafkaJS decoded
before it raised (the driver's ``wire``). KafkaJS runs with its default retries, so a refusal
it took for retriable would show as repeated requests.

``make test`` installs KafkaJS (``tests/clients/package-lock.json``) before the suite runs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support import BrokerTap, GatewayThread, gateway_config, unique_name

pytestmark = pytest.mark.inproc

CLIENTS = Path(__file__).resolve().parents[1] / "clients"
DRIVER = CLIENTS / "kafkajs_driver.js"
NODE = shutil.which("node")

if NODE is None or not (CLIENTS / "node_modules" / "kafkajs").is_dir():
    pytest.skip("KafkaJS is installed by `make test` (make node-deps)", allow_module_level=True)

POLICIES = {
    "rules": [
        # The test broker's default partition count is 3 (TEST_BROKER_DEFAULTS): every topic
        # created with the broker's defaults, auto-created ones included, is refused.
        {"name": "max-partitions", "type": "partitions", "max": 2},
        {"name": "keep-topics", "type": "protected.topics", "topics": ["keep-.*"]},
    ]
}
TRACED = "trace-id"
"""A built-in record.validation.policy: every record needs a trace-id header."""


@pytest.fixture
def gw(tap: BrokerTap) -> Iterator[GatewayThread]:
    """The gateway in front of the tapped broker: the tap records what reaches the broker."""
    running = GatewayThread(gateway_config(tap.address, policies=POLICIES)).start()
    try:
        yield running
    finally:
        running.stop()


def kafkajs(bootstrap: str, *steps: dict[str, Any]) -> dict[str, Any]:
    """Run ``steps`` in one KafkaJS process: each step's result or error, the addresses
    KafkaJS connected to, and what it decoded from the judged APIs' answers."""
    assert NODE is not None
    spec = json.dumps({"bootstrap": bootstrap, "steps": list(steps)})
    done = subprocess.run(
        [NODE, str(DRIVER), spec], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def requests_seen(gw: GatewayThread, api: str, version: int) -> int:
    return int(gw.metric("kpg_requests_total", api=api, version=str(version)))


def gateway_addresses(gw: GatewayThread) -> set[str]:
    nodes = {f"{host}:{port}" for host, port in gw.gateway.nodes.gateway_addresses_snapshot()}
    return nodes | {gw.bootstrap}


def create_topics_errors(result: dict[str, Any]) -> list[tuple[str, str, int, bool]]:
    assert not result["ok"], result
    error = result["error"]
    assert error["name"] == "KafkaJSAggregateError", error
    return [(e["name"], e["type"], e["code"], e["retriable"]) for e in error["errors"]]


def wire_messages(run: dict[str, Any], api: str) -> list[tuple[str, int, str | None]]:
    """(topic, error code, error message) of every topic in KafkaJS's decoded answers."""
    return [
        (t["topic"], t["errorCode"], t.get("errorMessage"))
        for answer in run["wire"].get(api, [])
        for t in answer["data"]["topicErrors"]
    ]


def test_round_trip_uses_only_gateway_addresses(
    gw: GatewayThread, tap: BrokerTap, tapped_broker: BrokerTap
) -> None:
    """An allowed create, produce (uncompressed and gzip, KafkaJS's built-in codec) and a
    consumer group's consume; every socket KafkaJS opened went to the gateway."""
    topic = unique_name("js")
    values = [f"v{i}" for i in range(6)]
    run = kafkajs(
        gw.bootstrap,
        {"op": "createTopics", "topics": [{"topic": topic, "numPartitions": 2}]},
        {"op": "produce", "topic": topic, "messages": [{"value": v} for v in values[:3]]},
        {
            "op": "produce",
            "topic": topic,
            "compression": "GZIP",
            "messages": [{"value": v} for v in values[3:]],
        },
        {"op": "consume", "topic": topic, "groupId": unique_name("g"), "count": len(values)},
        {"op": "describeCluster"},
    )
    created, plain, gzipped, consumed, cluster = run["results"]
    assert created == {"op": "createTopics", "ok": True, "result": True}
    assert plain["ok"] and gzipped["ok"], run["results"]
    assert consumed["ok"] and sorted(consumed["result"]) == values, consumed
    assert cluster["ok"], cluster
    ours = gateway_addresses(gw)
    assert {f"{b['host']}:{b['port']}" for b in cluster["result"]["brokers"]} <= ours
    broker = {str(tap.address), str(tapped_broker.broker)}
    assert run["connections"] and set(run["connections"]) <= ours
    assert not set(run["connections"]) & broker
    # KafkaJS's own versions reached the broker through the gateway.
    assert {(r.api_key, r.api_version) for r in tap.requests} >= {(19, 3), (0, 7)}


def test_refused_create_topics_is_a_non_retriable_policy_violation(
    gw: GatewayThread, tap: BrokerTap
) -> None:
    """Too many partitions, and KafkaJS's -1 (the broker's default of 3) on CreateTopics v3:
    each a POLICY_VIOLATION KafkaJS does not retry, the gateway's message in the answer."""
    too_many, defaulted = unique_name("js-many"), unique_name("js-default")
    run = kafkajs(
        gw.bootstrap,
        {"op": "createTopics", "topics": [{"topic": too_many, "numPartitions": 10}]},
        {"op": "createTopics", "topics": [{"topic": defaulted}]},
        {"op": "listTopics"},
    )
    refused = [("KafkaJSCreateTopicError", "POLICY_VIOLATION", 44, False)]
    assert create_topics_errors(run["results"][0]) == refused
    assert create_topics_errors(run["results"][1]) == refused
    messages = wire_messages(run, "CreateTopics")
    assert [(t, c) for t, c, _ in messages] == [(too_many, 44), (defaulted, 44)]
    assert all(m and "max-partitions" in m for _, _, m in messages), messages
    assert "10" in messages[0][2] and "3" in messages[1][2], messages
    assert not {too_many, defaulted} & set(run["results"][2]["result"])
    assert requests_seen(gw, "CreateTopics", 3) == 2  # one each: no retry
    assert 19 not in tap.api_keys()


def test_validate_only_dry_runs(gw: GatewayThread, tap: BrokerTap) -> None:
    """validateOnly: an allowed topic is answered true and not created, a refused one is a
    POLICY_VIOLATION; the test broker ignores validate_only, so neither reaches it."""
    allowed, refused = unique_name("js-dry"), unique_name("js-dry-many")
    run = kafkajs(
        gw.bootstrap,
        {
            "op": "createTopics",
            "validateOnly": True,
            "topics": [{"topic": allowed, "numPartitions": 2}],
        },
        {
            "op": "createTopics",
            "validateOnly": True,
            "topics": [{"topic": refused, "numPartitions": 5}],
        },
        {"op": "listTopics"},
    )
    assert run["results"][0] == {"op": "createTopics", "ok": True, "result": True}
    assert create_topics_errors(run["results"][1]) == [
        ("KafkaJSCreateTopicError", "POLICY_VIOLATION", 44, False)
    ]
    assert not {allowed, refused} & set(run["results"][2]["result"])
    assert 19 not in tap.api_keys()


def test_record_validation_refuses_a_produce_with_invalid_record(
    gw: GatewayThread, tap: BrokerTap
) -> None:
    """A topic created by KafkaJS with record.validation.policy: a record without the header
    is INVALID_RECORD, not retried, and never reaches the broker; one with it is stored."""
    topic = unique_name("js-rv")
    traced = {"value": "good", "headers": {"trace-id": "abc"}}
    run = kafkajs(
        gw.bootstrap,
        {
            "op": "createTopics",
            "topics": [
                {
                    "topic": topic,
                    "numPartitions": 1,
                    "configEntries": [{"name": "record.validation.policy", "value": TRACED}],
                }
            ],
        },
        {"op": "describeConfigs", "resources": [{"type": 2, "name": topic}]},
        {"op": "produce", "topic": topic, "messages": [{"value": "bad"}]},
        {"op": "produce", "topic": topic, "compression": "GZIP", "messages": [{"value": "bad"}]},
        {"op": "produce", "topic": topic, "messages": [traced]},
        {"op": "consume", "topic": topic, "groupId": unique_name("g"), "count": 1},
    )
    created, described, bad, bad_gzip, good, consumed = run["results"]
    assert created["ok"], created
    [resource] = described["result"]["resources"]
    assert {e["configName"]: e["configValue"] for e in resource["configEntries"]}.get(
        "record.validation.policy"
    ) == TRACED
    for refused in (bad, bad_gzip):
        assert not refused["ok"]
        error = refused["error"]
        assert (error["name"], error["type"], error["retriable"]) == (
            "KafkaJSProtocolError",
            "INVALID_RECORD",
            False,
        ), error
    assert good["ok"], good
    assert consumed["result"] == ["good"]
    # One Produce per send: the refusals were not retried. Only the good record was stored.
    assert requests_seen(gw, "Produce", 7) == 3
    assert len([r for r in tap.requests if r.api_key == 0]) == 1


def test_delete_of_a_protected_topic_is_refused(
    gw: GatewayThread, tap: BrokerTap, tapped_broker: BrokerTap
) -> None:
    """keep-* topics are protected: KafkaJS's DeleteTopics v1 is refused and not retried,
    the topic stays; an unprotected topic in another request is deleted."""
    kept, other = unique_name("keep"), unique_name("js-del")
    # Made on the broker itself: the policy would refuse their creation through the gateway.
    direct = AdminClient({"bootstrap.servers": str(tapped_broker.broker)})
    for future in direct.create_topics([NewTopic(kept, 1, 1), NewTopic(other, 1, 1)]).values():
        future.result(15)
    run = kafkajs(
        gw.bootstrap,
        {"op": "deleteTopics", "topics": [kept]},
        {"op": "deleteTopics", "topics": [other]},
        {"op": "listTopics"},
    )
    refused, deleted, listed = run["results"]
    assert not refused["ok"]
    assert (refused["error"]["type"], refused["error"]["retriable"]) == ("POLICY_VIOLATION", False)
    assert deleted["ok"], deleted
    assert kept in listed["result"] and other not in listed["result"]
    assert requests_seen(gw, "DeleteTopics", 1) == 2
    assert [list(r.topic_names) for r in tap.forwarded(20)] == [[other]]


def test_refused_auto_creation_fails_the_send_without_a_retry_storm(
    gw: GatewayThread, tap: BrokerTap
) -> None:
    """A KafkaJS producer with auto-creation on sends to a missing topic: the broker's default
    of 3 partitions is refused, the send fails with a non-retriable error, and the topic is
    never created."""
    topic = unique_name("js-auto")
    run = kafkajs(
        gw.bootstrap,
        {
            "op": "produce",
            "topic": topic,
            "allowAutoTopicCreation": True,
            "messages": [{"value": "x"}],
        },
        {"op": "listTopics"},
    )
    sent, listed = run["results"]
    assert not sent["ok"]
    # KafkaJS wraps the metadata error (TOPIC_AUTHORIZATION_FAILED) without its type.
    assert sent["error"] == {
        "name": "KafkaJSNonRetriableError",
        "retriable": False,
        "message": "Not authorized to access topics: [Topic authorization failed]",
    }
    assert topic not in listed["result"]
    assert 19 not in tap.api_keys()
    metadata = requests_seen(gw, "Metadata", 6)
    assert metadata <= 3, metadata
