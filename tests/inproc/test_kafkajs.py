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

import dataclasses
import importlib
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_response_schema
from kio.schema.api_versions.v3.response import ApiVersion, ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32Timedelta

from tests.kafkajs import kafkajs, kafkajs_raw, needs_kafkajs
from tests.scripted import (
    ScriptedBroker,
    ScriptedCluster,
    alter_configs_response,
    describe_configs_response,
    describe_configs_result,
    metadata_response,
)
from tests.support import (
    KAFKA_LIKE_UPSTREAM,
    BrokerTap,
    GatewayThread,
    gateway_config,
    unique_name,
)

pytestmark = [pytest.mark.inproc, needs_kafkajs]

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
    ours = gw.addresses()
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
    assert gw.requests_seen("CreateTopics", 3) == 2  # one each: no retry
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
    assert gw.requests_seen("Produce", 7) == 3
    assert len([r for r in tap.requests if r.api_key == 0]) == 1


def test_deletes_of_a_protected_topic_and_its_records_are_refused(
    gw: GatewayThread, tap: BrokerTap, tapped_broker: BrokerTap
) -> None:
    """keep-* topics are protected: KafkaJS's DeleteTopics v1 and DeleteRecords v1 of one are
    POLICY_VIOLATION, not retried, never forwarded, the topic stays; an unprotected topic in
    another request is deleted."""
    kept, other = unique_name("keep"), unique_name("js-del")
    # Made on the broker itself: the policy would refuse their creation through the gateway.
    direct = AdminClient({"bootstrap.servers": str(tapped_broker.broker)})
    for future in direct.create_topics([NewTopic(kept, 1, 1), NewTopic(other, 1, 1)]).values():
        future.result(15)
    run = kafkajs(
        gw.bootstrap,
        {"op": "deleteTopics", "topics": [kept]},
        {
            "op": "deleteTopicRecords",
            "topic": kept,
            "partitions": [{"partition": 0, "offset": "-1"}],
        },
        {"op": "deleteTopics", "topics": [other]},
        {"op": "listTopics"},
    )
    refused, records_refused, deleted, listed = run["results"]
    assert not refused["ok"]
    assert (refused["error"]["type"], refused["error"]["retriable"]) == ("POLICY_VIOLATION", False)
    # KafkaJS wraps the partitions' errors in a message of its own; the answer held 44.
    assert records_refused["error"] == {
        "name": "KafkaJSNonRetriableError",
        "retriable": False,
        "message": "Error while deleting records",
    }
    [answer] = run["wire"]["DeleteRecords"]
    assert [
        (t["topic"], p["partition"], p["errorCode"])
        for t in answer["data"]["topics"]
        for p in t["partitions"]
    ] == [(kept, 0, 44)]
    assert deleted["ok"], deleted
    assert kept in listed["result"] and other not in listed["result"]
    assert gw.requests_seen("DeleteTopics", 1) == 2
    assert gw.requests_seen("DeleteRecords", 1) == 1
    assert [list(r.topic_names) for r in tap.forwarded(20)] == [[other]]
    assert 21 not in tap.api_keys()


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
    metadata = gw.requests_seen("Metadata", 6)
    assert metadata <= 3, metadata


# --- a create left to the broker's defaults that the gateway cannot read ------------------

TOPIC_ACTION = "tests.plugins.kafka_test_policies.RecordingTopicActionPolicy"
UNREAD_DEFAULTS = {
    "protected only": (
        {"rules": [{"name": "keep", "type": "protected.topics", "topics": ["k-.*"]}]},
        None,
    ),
    "partitions rule": (
        {"rules": [{"name": "max-partitions", "type": "partitions", "max": 8}]},
        "num.partitions",
    ),
    "replication factor rule": (
        {"rules": [{"name": "rf", "type": "replication.factor", "max": 3}]},
        "default.replication.factor",
    ),
    "topic action plug-in": ({"topic.action.policy.class.name": TOPIC_ACTION}, "num.partitions"),
}


@pytest.mark.parametrize("policies, unknown", UNREAD_DEFAULTS.values(), ids=UNREAD_DEFAULTS.keys())
def test_a_create_left_to_unread_broker_defaults_is_refused_only_where_a_policy_reads_them(
    tap: BrokerTap, policies: dict[str, Any], unknown: str | None
) -> None:
    """KafkaJS leaves both counts to the broker (-1) unless told. In front of a broker that
    does not report its defaults, with none stated (``upstream.broker_defaults`` empty), the
    gateway refused every such create as unjudgeable, even where no policy looks at a count
    (with no policy at all: "every topic and config change the brokers accept is allowed").
    Now only a rule that bounds the unknown count, or a plug-in (Kafka gives it both counts),
    refuses it; otherwise the broker is sent -1 and creates its default."""
    config = gateway_config(tap.address, policies=policies, upstream={"broker_defaults": {}})
    gw = GatewayThread(config).start()
    topic = unique_name("js-defaults")
    try:
        run = kafkajs(
            gw.bootstrap,
            {"op": "createTopics", "topics": [{"topic": topic}]},
        )
    finally:
        gw.stop()
    [created] = run["results"]
    forwarded = [
        [(t.name, int(t.num_partitions), int(t.replication_factor)) for t in r.topics]
        for r in tap.forwarded(19)
    ]
    if unknown is None:
        assert created == {"op": "createTopics", "ok": True, "result": True}, created
        assert forwarded == [[(topic, -1, -1)]]
        return
    assert create_topics_errors(created) == [
        ("KafkaJSCreateTopicError", "POLICY_VIOLATION", 44, False)
    ]
    [(_, _, message)] = wire_messages(run, "CreateTopics")
    assert message is not None and f"upstream.broker_defaults.{unknown}" in message, message
    assert forwarded == []


# --- every version KafkaJS can write, by KafkaJS's own encoders ---------------------------------


def base(topic: str) -> str:
    """``many2-<x>`` -> ``many``: a topic's name without its version and suffix."""
    return topic.split("-")[0].rstrip("0123456789")


def judged(answer: dict[str, Any]) -> Any:
    """The answer's error codes by topic (partition 0 for the partitioned APIs), or
    "closed"."""
    if answer["closed"]:
        return "closed"
    data = answer["data"]
    if answer["api"] in ("CreateTopics", "DeleteTopics"):
        return {base(t["topic"]): t["errorCode"] for t in data["topicErrors"]}
    if answer["api"] == "DescribeConfigs":
        [resource] = data["resources"]
        return {e["configName"]: e["configValue"] for e in resource["configEntries"]}
    if answer["api"] == "Metadata":
        return {base(t["topic"]): t["topicErrorCode"] for t in data["topicMetadata"]}
    [topic] = data["topics"]  # DeleteRecords names it topic, Produce topicName
    name = topic.get("topic", topic.get("topicName"))
    return {base(name): [p["errorCode"] for p in topic["partitions"]]}


def test_every_version_kafkajs_writes_is_judged_alike(
    gw: GatewayThread, tap: BrokerTap, tapped_broker: BrokerTap
) -> None:
    """Every version of each judged API that KafkaJS has an encoder for, written by KafkaJS
    (an implementation of the protocol independent of the gateway's): the same request is
    judged the same way in each version the gateway advertises (DeleteTopics v0, which Kafka 4
    dropped, as v1, as CreateTopics v0 and v1 are judged as v2), and a version older than
    those (DescribeConfigs v0, Produce v0-v2: Kafka 4 takes none of them) closes the
    connection unforwarded, as Kafka closes it, never passes unjudged."""
    x = unique_name("v").split("-")[1]
    keep, traced = f"keep-{x}", f"traced-{x}"
    direct = AdminClient({"bootstrap.servers": str(tapped_broker.broker)})
    direct.create_topics([NewTopic(keep, 1, 1)])[keep].result(15)
    through = AdminClient({"bootstrap.servers": gw.bootstrap})
    through.create_topics([NewTopic(traced, 1, 1, config={"record.validation.policy": TRACED})])[
        traced
    ].result(15)
    tap.requests.clear()

    def topics(v: int, *specs: tuple[str, int | None]) -> dict[str, Any]:
        return {
            "timeout": 5000,
            "topics": [
                {"topic": f"{name}{v}-{x}", "replicationFactor": 1}
                | ({} if count is None else {"numPartitions": count})
                for name, count in specs
            ],
        }

    def partition_zero(topic: str, **fields: Any) -> dict[str, Any]:
        return {"topic": topic, "partitions": [{"partition": 0, **fields}]}

    requests: list[dict[str, Any]] = []
    for v in range(4):
        creates = topics(v, ("many", 10), ("default", None), ("fine", 1))
        requests.append({"api": "CreateTopics", "version": v, "args": creates})
    for v in range(1, 4):
        dry = topics(v, ("dry", 1)) | {"validateOnly": True}
        requests.append({"api": "CreateTopics", "version": v, "args": dry})
    for v in range(2):
        deletes = {"topics": [keep], "timeout": 5000}
        requests.append({"api": "DeleteTopics", "version": v, "args": deletes})
        records = {"topics": [partition_zero(keep, offset="-1")]}
        requests.append({"api": "DeleteRecords", "version": v, "args": records})
    for v in range(3):
        described = {"resources": [{"type": 2, "name": traced}]}
        requests.append({"api": "DescribeConfigs", "version": v, "args": described})
    for v in range(8):
        batch = partition_zero(traced, firstSequence=0, messages=[{"value": "no header"}])
        produced = {"acks": -1, "timeout": 5000, "compression": 0, "topicData": [batch]}
        requests.append({"api": "Produce", "version": v, "args": produced})
    for v in range(7):
        # v0-v3 always auto-create a missing topic; v4 and later say so
        asked = {"topics": [f"auto{v}-{x}"], "allowAutoTopicCreation": True}
        requests.append({"api": "Metadata", "version": v, "args": asked})

    seen = [(a["api"], a["version"], judged(a)) for a in kafkajs_raw(gw.bootstrap, requests)]

    refused_create = {"default": 44, "fine": 0, "many": 44}
    assert seen == [
        *[("CreateTopics", v, refused_create) for v in range(4)],
        *[("CreateTopics", v, {"dry": 0}) for v in range(1, 4)],
        ("DeleteTopics", 0, {"keep": 44}),
        ("DeleteRecords", 0, {"keep": [44]}),
        ("DeleteTopics", 1, {"keep": 44}),
        ("DeleteRecords", 1, {"keep": [44]}),
        ("DescribeConfigs", 0, "closed"),
        *[("DescribeConfigs", v, {"record.validation.policy": TRACED}) for v in (1, 2)],
        *[("Produce", v, "closed") for v in range(3)],
        *[("Produce", v, {"traced": [87]}) for v in range(3, 8)],
        *[("Metadata", v, {"auto": 29}) for v in range(7)],
    ]
    # Only the allowed topics were created (v0 and v1 sent as v2), nothing else changed.
    assert tap.created() == [
        (2, [f"fine0-{x}"]),
        (2, [f"fine1-{x}"]),
        (2, [f"fine2-{x}"]),
        (3, [f"fine3-{x}"]),
    ]
    assert not tap.api_keys() & {0, 20, 21}


# --- AlterConfigs and CreatePartitions: the test broker has neither --------------------------

DYNAMIC_TOPIC = 1
ADMIN_POLICIES = {
    "rules": [
        {"name": "retention", "type": "config", "config": "retention.ms", "min": 3_600_000},
        {"name": "max-partitions", "type": "partitions", "max": 4},
    ]
}


def in_version(entity: Any, api_key: int, version: int) -> Any:
    """``entity`` (a kio response of any version) as the response of ``version``: the fields
    that version has, nested entities included, the rest left at their defaults."""
    module = importlib.import_module(load_response_schema(api_key, version).__module__)

    def convert(value: Any) -> Any:
        if isinstance(value, tuple):
            return tuple(convert(v) for v in value)
        if not dataclasses.is_dataclass(value) or isinstance(value, type):
            return value
        cls = getattr(module, type(value).__name__)
        return cls(
            **{
                f.name: convert(getattr(value, f.name))
                for f in dataclasses.fields(cls)
                if hasattr(value, f.name)
            }
        )

    return convert(entity)


class AdminBroker:
    """Scripted upstream, for what the test broker cannot show: it has neither AlterConfigs
    (API 33) nor CreatePartitions (37), which KafkaJS's alterConfigs (v1) and
    createPartitions (v1) send. One broker, the controller, that knows ``configs``' topics
    (one partition each at first), describes their configs and applies the changes it is
    sent (with validate_only, only answers)."""

    def __init__(self, configs: dict[str, dict[str, str]]) -> None:
        self.configs = configs
        self.partitions = dict.fromkeys(configs, 1)

    async def respond(self, me: ScriptedBroker, header: Any, request: Any) -> Any:
        key = header.api_key
        if key == 18:
            payload: Any = ApiVersionsResponse(
                error_code=ErrorCode.none,
                throttle_time=i32Timedelta.parse(timedelta(0)),
                api_keys=tuple(
                    ApiVersion(api_key=i16(k), min_version=i16(lo), max_version=i16(hi))
                    for k, lo, hi in ((3, 0, 12), (18, 0, 3), (32, 1, 4), (33, 0, 2), (37, 0, 3))
                ),
            )
        elif key == 3:
            payload = metadata_response(me, [(t, [(1,)] * n) for t, n in self.partitions.items()])
        elif key == 32:
            payload = describe_configs_response(
                describe_configs_result(
                    2,
                    r.resource_name,
                    [(k, v, DYNAMIC_TOPIC) for k, v in self.configs[r.resource_name].items()],
                )
                for r in request.resources
            )
        elif key == 33:
            if not request.validate_only:
                for r in request.resources:
                    self.configs[r.resource_name] = {c.name: c.value for c in r.configs}
            return alter_configs_response(
                header, ((r, ErrorCode.none, None) for r in request.resources)
            )
        elif key == 37:
            if not request.validate_only:
                self.partitions.update((t.name, int(t.count)) for t in request.topics)
            module = importlib.import_module(
                load_response_schema(37, header.api_version).__module__
            )
            return module.CreatePartitionsResponse(
                throttle_time=i32Timedelta.parse(timedelta(0)),
                results=tuple(
                    module.CreatePartitionsTopicResult(
                        name=t.name, error_code=ErrorCode.none, error_message=None
                    )
                    for t in request.topics
                ),
            )
        else:
            raise AssertionError(f"unexpected API {key}")
        return in_version(payload, key, header.api_version)


@pytest.fixture
def admin_broker(
    scripted_cluster: ScriptedCluster,
) -> Iterator[tuple[GatewayThread, ScriptedBroker, AdminBroker]]:
    """The gateway with ADMIN_POLICIES in front of an :class:`AdminBroker` knowing one topic
    with a retention of a day."""
    state = AdminBroker({unique_name("js-admin"): {"retention.ms": "86400000"}})
    upstream = scripted_cluster.add(state.respond, "admin")
    assert upstream.address is not None
    config = gateway_config(upstream.address, upstream=KAFKA_LIKE_UPSTREAM, policies=ADMIN_POLICIES)
    gw = GatewayThread(config).start()
    try:
        yield gw, upstream, state
    finally:
        gw.stop()


def test_alter_configs_refused_allowed_and_validate_only(
    admin_broker: tuple[GatewayThread, ScriptedBroker, AdminBroker],
) -> None:
    """KafkaJS's legacy AlterConfigs v1: a retention under the rule's minimum is a
    POLICY_VIOLATION KafkaJS does not retry, the gateway's message in the answer; an allowed
    change reaches the broker; validateOnly reaches it as validate_only."""
    gw, upstream, state = admin_broker
    [topic] = state.configs

    def change(value: str, validate_only: bool = False) -> dict[str, Any]:
        entries = [{"name": "retention.ms", "value": value}]
        return {
            "op": "alterConfigs",
            "validateOnly": validate_only,
            "resources": [{"type": 2, "name": topic, "configEntries": entries}],
        }

    run = kafkajs(
        gw.bootstrap,
        change("1"),
        change("7200000", validate_only=True),
        change("7200000"),
        {"op": "describeConfigs", "resources": [{"type": 2, "name": topic}]},
    )
    refused, dry, changed, described = run["results"]
    assert not refused["ok"]
    error = refused["error"]
    assert (error["name"], error["type"], error["retriable"]) == (
        "KafkaJSProtocolError",
        "POLICY_VIOLATION",
        False,
    ), error
    [answer, *_] = run["wire"]["AlterConfigs"]
    [resource] = answer["data"]["resources"]
    assert resource["errorCode"] == 44 and "retention" in resource["errorMessage"], resource
    assert dry["ok"] and changed["ok"], run["results"]
    [entry] = described["result"]["resources"][0]["configEntries"]
    assert (entry["configName"], entry["configValue"]) == ("retention.ms", "7200000")
    sent = [(h.api_version, r.validate_only) for h, r in upstream.requests if h.api_key == 33]
    assert sent == [(1, True), (1, False)]
    assert gw.requests_seen("AlterConfigs", 1) == 3  # the refusal was not retried


def test_create_partitions_refused_and_allowed(
    admin_broker: tuple[GatewayThread, ScriptedBroker, AdminBroker],
) -> None:
    """KafkaJS's CreatePartitions v1 (no assignments: a null array): growing past the
    partitions rule's max is a POLICY_VIOLATION, not retried and never forwarded; within it
    the broker adds them."""
    gw, upstream, state = admin_broker
    [topic] = state.partitions
    run = kafkajs(
        gw.bootstrap,
        {"op": "createPartitions", "topicPartitions": [{"topic": topic, "count": 8}]},
        {"op": "createPartitions", "topicPartitions": [{"topic": topic, "count": 3}]},
    )
    refused, grown = run["results"]
    assert not refused["ok"]
    error = refused["error"]
    assert (error["type"], error["retriable"]) == ("POLICY_VIOLATION", False), error
    [answer, *_] = run["wire"]["CreatePartitions"]
    assert [(t["topic"], t["errorCode"]) for t in answer["data"]["topicErrors"]] == [(topic, 44)]
    assert "max-partitions" in answer["data"]["topicErrors"][0]["errorMessage"]
    assert grown["ok"], grown
    sent = [
        (h.api_version, [(t.name, int(t.count), t.assignments) for t in r.topics])
        for h, r in upstream.requests
        if h.api_key == 37
    ]
    assert sent == [(1, [(topic, 3, None)])]
    assert state.partitions[topic] == 3
    assert gw.requests_seen("CreatePartitions", 1) == 2
