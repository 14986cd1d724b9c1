"""Sarama (Go, github.com/Shopify/sarama 1.22 from Debian) through the real gateway in front of
the real broker, with policies on.

Sarama 1.22 never asks which versions a broker takes: it picks each request's version from
its ``Config.Version``, a Kafka release, so one application speaks the versions of the release
it was told. Each test runs at several of them, and every version Sarama's encoders write is
sent raw as well: each must be judged alike. What Sarama sends, by ``Config.Version``:

==================  ============  ============  ========  ========  ===============
Config.Version      CreateTopics  DeleteTopics  Metadata  Produce   DescribeConfigs
==================  ============  ============  ========  ========  ===============
0.10.2.0            v0            v0            v1        v2        (needs 0.11)
0.11.0.0            v1            v1            v1        v3        v0
1.0.0 to 2.1.0      v2            v1            v5        v3        v0
==================  ============  ============  ========  ========  ===============

AlterConfigs (from 0.11.0.0), CreatePartitions (from 1.0.0) and DeleteRecords are v0 at
every version. Metadata v1-v3 always auto-create a missing topic, v4 and later as asked
(Sarama's client asks for it). CreateTopics v0 and v1 and DeleteTopics v0, which Kafka 4
dropped, are judged as v2 and v1 (DeleteTopics v0 closed the connection, its CreateTopics v0
was judged).
DescribeConfigs v0 (Sarama's ``DescribeConfig`` and ``ListTopics``) and Produce v0-v2 are
older than what Kafka 4 takes: the gateway closes the connection, as Kafka 4 does; the test
broker (Tansu) cannot serve them either (DescribeConfigs v0 is answered unreadably, Produce v2
refused), so neither works straight to it. Sarama's ``DeleteRecords`` ignores the partitions'
error codes, so its refusal is read from the raw answer.

``make test`` builds the driver (``make go-deps``) before the suite runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.config import HostPort
from tests.sarama import Sarama, needs_sarama
from tests.support import BrokerTap, GatewayThread, gateway_config, unique_name

pytestmark = [pytest.mark.inproc, needs_sarama]

POLICIES = {
    "rules": [
        # The test broker's default partition count is 3 (TEST_BROKER_DEFAULTS): every topic
        # created with the broker's defaults, auto-created ones included, is refused.
        {"name": "max-partitions", "type": "partitions", "max": 2},
        {"name": "keep-topics", "type": "protected.topics", "topics": ["keep-.*"]},
        {"name": "retention", "type": "config", "config": "retention.ms", "min": 3_600_000},
    ]
}
TRACED = "trace-id"
"""A built-in record.validation.policy: every record needs a trace-id header."""
POLICY_KEY = "record.validation.policy"

POLICY_VIOLATION, INVALID_RECORD, TOPIC_AUTHORIZATION_FAILED = 44, 87, 29
CLUSTER_AUTHORIZATION_FAILED = 31

VERSIONS = ("0.11.0.0", "1.0.0", "2.0.0", "2.1.0")
"""Sarama ``Config.Version``s whose every request the gateway takes (0.10.2.0: Produce v2)."""
CREATE_TOPICS_VERSION = {"0.10.2.0": 0, "0.11.0.0": 1}
"""The CreateTopics version Sarama sends at a ``Config.Version`` (v2 from 1.0.0)."""


@pytest.fixture(scope="module")
def sarama() -> Iterator[Sarama]:
    """One driver process for the module."""
    driver = Sarama()
    try:
        yield driver
    finally:
        driver.close()


@pytest.fixture
def gw(tap: BrokerTap) -> Iterator[GatewayThread]:
    """The gateway in front of the tapped broker: the tap records what reaches the broker."""
    running = GatewayThread(gateway_config(tap.address, policies=POLICIES)).start()
    try:
        yield running
    finally:
        running.stop()


def failed(result: dict[str, Any]) -> tuple[int | None, str]:
    """A step's error code (None where Sarama kept none) and its text."""
    assert not result["ok"], result
    return result["error"].get("code"), result["error"]["text"]


def on_broker(tapped_broker: BrokerTap, *topics: str, partitions: int = 1) -> None:
    """Create ``topics`` on the broker itself, past the gateway's policies."""
    direct = AdminClient({"bootstrap.servers": str(tapped_broker.broker)})
    for future in direct.create_topics([NewTopic(t, partitions, 1) for t in topics]).values():
        future.result(15)


def broker_topics(tapped_broker: BrokerTap) -> set[str]:
    direct = AdminClient({"bootstrap.servers": str(tapped_broker.broker)})
    return set(direct.list_topics(timeout=10).topics)


@pytest.mark.parametrize("version", VERSIONS)
def test_round_trip_with_every_codec_uses_only_gateway_addresses(
    sarama: Sarama, gw: GatewayThread, tap: BrokerTap, tapped_broker: BrokerTap, version: str
) -> None:
    """An allowed create, a produce in each codec Sarama has at this version (zstd from
    2.1.0) and a consume of every partition; every socket Sarama opened went to the
    gateway, and Sarama's own versions reached the broker."""
    topic = unique_name("go")
    codecs = ["none", "gzip", "snappy", "lz4"] + (["zstd"] if version == "2.1.0" else [])
    values = [f"{codec}-{i}" for codec in codecs for i in range(2)]
    run = sarama.run(
        gw.bootstrap,
        version,
        {"op": "createTopic", "topic": topic, "partitions": 2},
        *[
            {
                "op": "produce",
                "topic": topic,
                "partition": i % 2,
                "compression": codec,
                "values": [f"{codec}-0", f"{codec}-1"],
            }
            for i, codec in enumerate(codecs)
        ],
        {"op": "consume", "topic": topic, "count": len(values)},
        {"op": "describeCluster"},
    )
    created, *produced, consumed, cluster = run["results"]
    assert created == {"op": "createTopic", "ok": True, "result": True}
    assert [p["result"] for p in produced] == [2] * len(codecs), produced
    assert consumed["ok"] and consumed["result"] == sorted(values), consumed
    ours = gw.addresses()
    assert cluster["ok"] and set(cluster["result"]) <= ours, cluster
    assert run["connections"] and set(run["connections"]) <= ours
    assert not set(run["connections"]) & {str(tap.address), str(tapped_broker.broker)}
    create_version = CREATE_TOPICS_VERSION.get(version, 2)
    assert {(r.api_key, r.api_version) for r in tap.requests} >= {
        (19, max(create_version, 2)),  # v0 and v1 reach the broker as v2
        (0, 3),
    }
    assert gw.requests_seen("CreateTopics", create_version) == 1


@pytest.mark.parametrize("version", VERSIONS)
def test_record_validation_refuses_a_produce_as_invalid_record(
    sarama: Sarama, gw: GatewayThread, tap: BrokerTap, version: str
) -> None:
    """A topic created by Sarama with record.validation.policy: a record without the header
    is INVALID_RECORD in every codec, not retried, and never reaches the broker; one with it
    is stored and consumed."""
    topic = unique_name("go-rv")
    bad = [
        {"op": "produce", "topic": topic, "compression": codec, "values": ["bad"]}
        for codec in ("none", "gzip", "lz4")
    ]
    run = sarama.run(
        gw.bootstrap,
        version,
        {
            "op": "createTopic",
            "topic": topic,
            "partitions": 1,
            "configs": {POLICY_KEY: TRACED},
        },
        *bad,
        {"op": "produce", "topic": topic, "values": ["good"], "headers": {"trace-id": "abc"}},
        {"op": "consume", "topic": topic, "count": 1},
    )
    created, *refused, good, consumed = run["results"]
    assert created["ok"], created
    assert [failed(r)[0] for r in refused] == [INVALID_RECORD] * len(bad), refused
    assert good["ok"], good
    assert consumed["result"] == ["good"], consumed
    # One Produce per send: the refusals were not retried. Only the good record was stored.
    assert gw.requests_seen("Produce", 3) == len(bad) + 1
    assert len([r for r in tap.requests if r.api_key == 0]) == 1


@pytest.mark.parametrize("version", ("0.10.2.0", *VERSIONS))
def test_create_topics_refused_with_the_gateways_message_and_validate_only(
    sarama: Sarama, gw: GatewayThread, tap: BrokerTap, tapped_broker: BrokerTap, version: str
) -> None:
    """Sarama's ClusterAdmin.CreateTopic: too many partitions is a POLICY_VIOLATION with the
    gateway's message (CreateTopics v0 has no message field); with validateOnly (v1 on) an
    allowed topic is answered and not created, a refused one is a POLICY_VIOLATION. The
    test broker ignores validate_only, so no dry run reaches it."""
    many, dry, dry_many = unique_name("go-many"), unique_name("go-dry"), unique_name("go-drym")
    steps: list[dict[str, Any]] = [{"op": "createTopic", "topic": many, "partitions": 5}]
    dry_runs = version != "0.10.2.0"
    if dry_runs:
        steps += [
            {"op": "createTopic", "topic": dry, "partitions": 1, "validateOnly": True},
            {"op": "createTopic", "topic": dry_many, "partitions": 5, "validateOnly": True},
        ]
    run = sarama.run(gw.bootstrap, version, *steps)
    refused, *dry_answers = run["results"]
    code, text = failed(refused)
    assert code == POLICY_VIOLATION
    if dry_runs:
        assert refused["error"]["message"] and "max-partitions" in refused["error"]["message"]
        assert dry_answers[0] == {"op": "createTopic", "ok": True, "result": True}
        assert failed(dry_answers[1])[0] == POLICY_VIOLATION
        assert "max-partitions" in dry_answers[1]["error"]["message"]
    else:
        assert refused["error"].get("message") is None, refused
    assert gw.requests_seen("CreateTopics", CREATE_TOPICS_VERSION.get(version, 2)) == len(steps)
    assert 19 not in tap.api_keys()
    assert not {many, dry, dry_many} & broker_topics(tapped_broker)


@pytest.mark.parametrize("version", ("0.10.2.0", *VERSIONS))
def test_delete_topics_alter_configs_create_partitions_judged(
    sarama: Sarama, gw: GatewayThread, tap: BrokerTap, tapped_broker: BrokerTap, version: str
) -> None:
    """keep-* topics are protected: Sarama's DeleteTopic (v0 before 0.11.0.0, v1 after) of
    one is a POLICY_VIOLATION and not forwarded, an unprotected topic is deleted;
    AlterConfig (v0, from 0.11.0.0) under the retention minimum and CreatePartitions (v0,
    from 1.0.0) past the partitions maximum are POLICY_VIOLATIONs with the gateway's
    message, never forwarded (the test broker has neither API, so the allowed ones are left to
    test_kafkajs)."""
    kept, other = unique_name("keep"), unique_name("go-del")
    on_broker(tapped_broker, kept, other)
    admin_steps: list[dict[str, Any]] = [
        {"op": "deleteTopic", "topic": kept},
        {"op": "deleteTopic", "topic": other},
    ]
    # Sarama sends AlterConfigs from 0.11.0.0, CreatePartitions from 1.0.0
    if version != "0.10.2.0":
        admin_steps.append({"op": "alterConfig", "topic": kept, "configs": {"retention.ms": "1"}})
    if version not in ("0.10.2.0", "0.11.0.0"):
        admin_steps.append({"op": "createPartitions", "topic": kept, "count": 5})
    run = sarama.run(gw.bootstrap, version, *admin_steps)
    refused_delete, deleted, *changes = run["results"]
    assert failed(refused_delete)[0] == POLICY_VIOLATION
    assert deleted == {"op": "deleteTopic", "ok": True, "result": True}, deleted
    if changes:
        # Sarama keeps only AlterConfigs' message, as the error's text
        assert "rule retention" in failed(changes[0])[1], changes
    if changes[1:]:
        assert failed(changes[1])[0] == POLICY_VIOLATION
        assert "rule max-partitions" in changes[1]["error"]["message"], changes
    topics = broker_topics(tapped_broker)
    assert kept in topics and other not in topics
    delete_version = 0 if version == "0.10.2.0" else 1
    assert gw.requests_seen("DeleteTopics", delete_version) == 2
    assert [list(r.topic_names) for r in tap.forwarded(20)] == [[other]]
    assert not tap.api_keys() & {33, 37}


@pytest.mark.parametrize("version", ("0.10.2.0", "1.0.0"))
def test_refused_auto_creation_fails_the_send(
    sarama: Sarama, gw: GatewayThread, tap: BrokerTap, tapped_broker: BrokerTap, version: str
) -> None:
    """Sarama's producer sends to a missing topic: its Metadata (v1: always auto-creates; v5:
    asks to) would create it with the broker's default of 3 partitions, which is refused:
    TOPIC_AUTHORIZATION_FAILED, and the topic is never created."""
    topic = unique_name("go-auto")
    run = sarama.run(
        gw.bootstrap, version, {"op": "produce", "topic": topic, "values": ["x"], "retries": 0}
    )
    [sent] = run["results"]
    assert failed(sent)[0] == TOPIC_AUTHORIZATION_FAILED
    assert topic not in broker_topics(tapped_broker)
    assert 19 not in tap.api_keys()


# --- every version Sarama's encoders write --------------------------------------------------


def base(topic: str) -> str:
    """``many2-<x>`` -> ``many``: a topic's name without its version and suffix."""
    return topic.split("-")[0].rstrip("0123456789")


def judged(result: dict[str, Any]) -> Any:
    """Each topic's error code in the answer (a Fetch: its partition's code and how many
    records came; a DescribeConfigs: the topic's record.validation.policy), or "closed"
    (Sarama met the end of the connection)."""
    if not result["ok"]:
        assert result["error"]["text"] == "EOF", result
        return "closed"
    if "records" in result["result"]:
        return result["result"]
    if POLICY_KEY in result["result"]:  # DescribeConfigs: the configs by name
        return {POLICY_KEY: result["result"][POLICY_KEY]}
    return {
        base(topic): answer if isinstance(answer, int) else answer["code"]
        for topic, answer in result["result"].items()
    }


def test_every_version_sarama_writes_is_judged_alike(
    sarama: Sarama, gw: GatewayThread, tap: BrokerTap, tapped_broker: BrokerTap
) -> None:
    """Every version of each judged API that Sarama 1.22 has an encoder for, written by
    Sarama's own encoders: the same request is judged the same way in each version (the
    gateway's record.validation.policy shown in each DescribeConfigs), and a version older
    than Kafka 4 takes (DescribeConfigs v0, Produce v0-v2) closes the connection unforwarded,
    never passes unjudged. Produce v5-v7 are not sent: Sarama 1.22 reads their answers as v4's and
    fails."""
    x = unique_name("v").split("-")[1]
    keep, traced = f"keep-{x}", f"traced-{x}"
    on_broker(tapped_broker, keep)
    through = AdminClient({"bootstrap.servers": gw.bootstrap})
    through.create_topics([NewTopic(traced, 1, 1, config={POLICY_KEY: TRACED})])[traced].result(15)
    tap.requests.clear()

    def raw(api: str, version: int, **fields: Any) -> dict[str, Any]:
        return {"op": "raw", "api": api, "version": version, **fields}

    def topics(v: int, *specs: tuple[str, int | None]) -> list[dict[str, Any]]:
        return [
            {"name": f"{name}{v}-{x}"} | ({} if count is None else {"partitions": count})
            for name, count in specs
        ]

    steps = [
        *[
            raw("CreateTopics", v, topics=topics(v, ("many", 10), ("default", None), ("fine", 1)))
            for v in range(4)
        ],
        *[
            raw("CreateTopics", v, validateOnly=True, topics=topics(v, ("dry", 1), ("drym", 5)))
            for v in range(1, 4)
        ],
        *[raw("DeleteTopics", v, topics=[keep]) for v in range(2)],
        raw("DeleteRecords", 0, topic=keep, offset=-1),
        raw("AlterConfigs", 0, topic=keep, configs={"retention.ms": "7200000"}),
        raw("CreatePartitions", 0, topic=keep, count=2),
        *[raw("DescribeConfigs", v, topic=traced) for v in range(3)],
        *[raw("Produce", v, topic=traced, value="no header") for v in range(5)],
        # v0-v3 always auto-create a missing topic; v4 and v5 say so
        *[
            raw("Metadata", v, topics=[f"auto{v}-{x}"], allowAutoTopicCreation=True)
            for v in range(6)
        ],
    ]
    run = sarama.run(gw.bootstrap, "2.1.0", *steps)
    seen = [(s["api"], s["version"], judged(r)) for s, r in zip(steps, run["results"], strict=True)]
    refused_create = {"default": 44, "fine": 0, "many": 44}
    assert seen == [
        *[("CreateTopics", v, refused_create) for v in range(4)],
        *[("CreateTopics", v, {"dry": 0, "drym": 44}) for v in range(1, 4)],
        *[("DeleteTopics", v, {"keep": 44}) for v in range(2)],
        ("DeleteRecords", 0, {"keep": 44}),
        ("AlterConfigs", 0, {"keep": 44}),
        ("CreatePartitions", 0, {"keep": 44}),
        ("DescribeConfigs", 0, "closed"),
        *[("DescribeConfigs", v, {POLICY_KEY: TRACED}) for v in (1, 2)],
        *[("Produce", v, "closed") for v in range(3)],
        *[("Produce", v, {"traced": 87}) for v in (3, 4)],
        *[("Metadata", v, {"auto": 29}) for v in range(6)],
    ]
    assert tap.created() == [
        (2, [f"fine0-{x}"]),
        (2, [f"fine1-{x}"]),
        (2, [f"fine2-{x}"]),
        (3, [f"fine3-{x}"]),
    ]
    assert not tap.api_keys() & {0, 20, 21, 33, 37}
    assert not {f"auto{v}-{x}" for v in range(6)} & broker_topics(tapped_broker)


def test_the_gateways_own_topic_in_every_version_sarama_writes(
    sarama: Sarama, broker: HostPort
) -> None:
    """The gateway's state topic, in every version of the APIs Sarama reads and changes
    topics with: Fetch v4 and ListOffsets v1 get TOPIC_AUTHORIZATION_FAILED, the older ones
    (which name topics where the gateway does not read them, or which Kafka 4 dropped) close
    the connection, and every change is a POLICY_VIOLATION or TOPIC_AUTHORIZATION_FAILED, an
    ACL binding on it CLUSTER_AUTHORIZATION_FAILED (v0, which Kafka 4 dropped and Sarama
    1.22's ClusterAdmin always sends, closes the connection).
    Sarama failed to read the Fetch answer ("invalid byteslice length"): the gateway wrote the
    refused partition's records as null, where Kafka writes them empty."""
    state_topic = unique_name("kpg-state")
    config = gateway_config(broker, state={"store": "kafka", "topic": state_topic})
    gw = GatewayThread(config).start()
    try:

        def raw(api: str, version: int, **fields: Any) -> dict[str, Any]:
            return {"op": "raw", "api": api, "version": version, "topic": state_topic, **fields}

        steps = [
            *[raw("Fetch", v) for v in range(5)],
            *[raw("ListOffsets", v) for v in range(2)],
            *[raw("Produce", v, value="forged") for v in (3, 4)],
            raw("DeleteRecords", 0),
            *[raw("DeleteTopics", v, topics=[state_topic]) for v in range(2)],
            raw("AlterConfigs", 0, configs={"retention.ms": "7200000"}),
            raw("CreatePartitions", 0, count=4),
            *[raw(api, v) for api in ("CreateAcls", "DeleteAcls") for v in range(2)],
        ]
        run = sarama.run(gw.bootstrap, "2.1.0", *steps)
    finally:
        gw.stop()
    seen = [(s["api"], s["version"], judged(r)) for s, r in zip(steps, run["results"], strict=True)]
    own = base(state_topic)
    assert seen == [
        *[("Fetch", v, "closed") for v in range(4)],
        ("Fetch", 4, {"code": TOPIC_AUTHORIZATION_FAILED, "records": 0}),
        ("ListOffsets", 0, "closed"),
        ("ListOffsets", 1, {own: TOPIC_AUTHORIZATION_FAILED}),
        *[("Produce", v, {own: TOPIC_AUTHORIZATION_FAILED}) for v in (3, 4)],
        ("DeleteRecords", 0, {own: TOPIC_AUTHORIZATION_FAILED}),
        *[("DeleteTopics", v, {own: POLICY_VIOLATION}) for v in range(2)],
        ("AlterConfigs", 0, {own: POLICY_VIOLATION}),
        ("CreatePartitions", 0, {own: POLICY_VIOLATION}),
        *[
            (api, v, "closed" if v == 0 else {own: CLUSTER_AUTHORIZATION_FAILED})
            for api in ("CreateAcls", "DeleteAcls")
            for v in range(2)
        ],
    ]


@pytest.mark.parametrize("version", ("0.10.2.0", "0.11.0.0", "1.0.0", "2.1.0"))
def test_what_sarama_does_directly_it_does_through_the_gateway(
    sarama: Sarama, gw: GatewayThread, tapped_broker: BrokerTap, version: str
) -> None:
    """Allowed ClusterAdmin calls and an idempotent producer's round trip answer Sarama the
    same way straight from the broker and through the gateway. At 0.10.2.0 Sarama's DeleteTopic
    (DeleteTopics v0) closed the connection through the gateway, and deleted the topic
    directly; its producer (Produce v2) fails both ways, the test broker refusing it too."""

    def steps(prefix: str) -> list[dict[str, Any]]:
        topic = unique_name(prefix)
        return [
            {"op": "createTopic", "topic": topic, "partitions": 1},
            {"op": "describeTopics", "topics": [topic]},
            *(
                []
                if version == "0.10.2.0"
                else [
                    {
                        "op": "produce",
                        "topic": topic,
                        "values": ["a", "b"],
                        "compression": "lz4",
                        "idempotent": True,  # InitProducerId, then batches with sequences
                    },
                    {"op": "consume", "topic": topic, "count": 2},
                ]
            ),
            {"op": "deleteTopic", "topic": topic},
            # before 0.11.0.0 DescribeTopics is Metadata v0, which would auto-create it again
            *([] if version == "0.10.2.0" else [{"op": "describeTopics", "topics": [topic]}]),
        ]

    def answers(run: dict[str, Any]) -> list[Any]:
        return [
            (r["op"], r["ok"], list(r["result"].values()) if r["op"] == "describeTopics" else r)
            for r in run["results"]
        ]

    direct = sarama.run(str(tapped_broker.broker), version, *steps("go-direct"))
    through = sarama.run(gw.bootstrap, version, *steps("go-through"))
    assert answers(through) == answers(direct)
    assert all(r["ok"] for r in through["results"]), through["results"]


def test_offset_commits_in_every_version_sarama_writes(
    sarama: Sarama, gw: GatewayThread, tap: BrokerTap, tapped_broker: BrokerTap
) -> None:
    """Sarama's consumer groups commit with OffsetCommit v1 unless told a retention (v2 then).
    v1 was not carried: the connection closed, where the broker takes it. It is sent as v2
    with the broker's retention, its commit timestamps (from which Kafka counts the offset's
    retention) left out; every commit reaches the broker with retention -1, as v2-v4's
    retention is reset. v0 (Kafka 4 dropped both) still closes the connection."""
    topic = unique_name("go-commit")
    on_broker(tapped_broker, topic)
    tap.requests.clear()
    steps = [
        {
            "op": "raw",
            "api": "OffsetCommit",
            "version": v,
            "topic": topic,
            "groupId": f"{topic}-g{v}",
            "offset": 10 + v,
            "retentionMs": 1,
        }
        for v in range(5)
    ]
    run = sarama.run(gw.bootstrap, "2.1.0", *steps)
    assert [r["result"] if r["ok"] else r["error"]["text"] for r in run["results"]] == [
        "EOF",
        *[{"code": 0, "committed": 10 + v} for v in range(1, 5)],
    ]
    sent = [
        (r.api_version, int(c.retention_time.total_seconds() * 1000))
        for r, c in zip([r for r in tap.requests if r.api_key == 8], tap.forwarded(8), strict=True)
    ]
    assert sent == [(2, -1), (2, -1), (3, -1), (4, -1)]
