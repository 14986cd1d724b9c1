"""Each judged API's enforcement, run by the real engine and services against a stand-in
cluster view (no sockets; see tests/enforcement_support.py).

Each test sends a request frame to the API's handler and reads the outcome as the connection
would: an Answer is decoded as the client would decode it; a Forward's frame is decoded as
the broker would, and its merge is fed a broker answer encoded here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import logging
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from kio.static.primitive import i32

from gateway import client_configs
from gateway.audit import AuditEmitter, EventLine
from gateway.decisions import DecisionRecorder
from gateway.engine import Engine
from gateway.handlers.create_topics import CreateTopics
from gateway.outcomes import Answer, Close, Forward
from protocol.codec import Undecodable, decode_response, encode_response
from protocol.framing import parse_request_header
from protocol.versions import API_NAMES
from tests.batches import record, uncompressed_batch
from tests.enforcement_support import (
    ALTER_CONFIGS,
    ALTER_PARTITION_REASSIGNMENTS,
    APPEND,
    BROKER,
    CORRELATION_ID,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE,
    DELETE_GROUPS,
    DELETE_RECORDS,
    DELETE_TOPICS,
    DESCRIBE_CONFIGS,
    DESCRIBE_PRODUCERS,
    ELECT_LEADERS,
    FETCH,
    INCREMENTAL_ALTER_CONFIGS,
    LIST_OFFSETS,
    OFFSET_DELETE,
    OFFSET_FOR_LEADER_EPOCH,
    PLUGINS,
    PRODUCE,
    SET,
    SUBTRACT,
    TIMEOUT,
    TOPIC,
    UNCLEAN,
    Harness,
    ListSink,
    NewTopic,
    Partition,
    alter_configs,
    alter_configs_response,
    alter_partition_reassignments,
    answer_of,
    codes,
    configs_of,
    context,
    create_partitions,
    create_partitions_response,
    create_topics,
    create_topics_response,
    delete_groups,
    delete_groups_response,
    delete_records,
    delete_topics,
    delete_topics_response,
    describe_configs,
    describe_configs_response,
    describe_producers,
    described,
    elect_leaders,
    fetch,
    fetch_payload,
    forwarded,
    forwarded_partitions,
    items,
    legacy_fetch,
    list_offsets,
    make,
    offset_delete,
    offset_for_leader_epoch,
    partition_values,
    partitioned_response,
    produce,
    produce_response,
    record_errors,
    request,
    request_ids,
    top_level,
    upstream,
)

pytestmark = pytest.mark.unit

RULES = [
    {"name": "partition-count", "type": "partitions", "min": 3, "max": 12},
    {"name": "retention", "type": "config", "config": "retention.ms", "min": 3_600_000},
    {"name": "protected", "type": "protected.topics", "topics": ["protected-.*"]},
    {"name": "replication", "type": "replication.factor", "max": 3},
]
POLICIES = {
    "rules": RULES,
    "alter.config.v2.policy.class.name": "kafka_test_policies.RecordingAlterConfigV2Policy",
    "alter.config.v2.policy.class.path": PLUGINS,
}

NONE, UNKNOWN_TOPIC_OR_PARTITION, REQUEST_TIMED_OUT, TOPIC_AUTHORIZATION_FAILED = 0, 3, 7, 29
COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, INVALID_TOPIC_EXCEPTION = 15, 16, 17
GROUP_AUTHORIZATION_FAILED, UNKNOWN_SERVER_ERROR = 30, -1
TOPIC_ALREADY_EXISTS, INVALID_CONFIG, INVALID_REQUEST, POLICY_VIOLATION = 36, 40, 42, 44
INVALID_RECORD, UNKNOWN_TOPIC_ID = 87, 100
USER_CLIENT, CLIENT = 121, 120
POLICY_KEY = "record.validation.policy"


def too_few(topic: str, count: int) -> str:
    return f"topic {topic}: {count} partitions is below the minimum of 3 (rule partition-count)"


def too_many(topic: str, count: int) -> str:
    return f"topic {topic}: {count} partitions is above the maximum of 12 (rule partition-count)"


def protected(topic: str, verb: str) -> str:
    return f"topic {topic} is protected: no one may {verb} (rule protected)"


def short_retention(topic: str, value: str) -> str:
    return f"topic {topic}: retention.ms={value} is below the minimum of 3600000 (rule retention)"


@pytest.fixture
def gateway_with(tmp_path: Path) -> Iterator[Callable[..., Harness]]:
    """Builds a gateway's services with upstream options, own topics and policies of the
    test's."""
    built: list[Harness] = []

    def build(
        *,
        own_topics: Sequence[str] = (),
        policies: Mapping[str, object] = POLICIES,
        **upstream_options: bool,
    ) -> Harness:
        directory = tmp_path / f"gateway-{len(built)}"
        directory.mkdir()
        harness = Harness.build(
            directory, policies, upstream=upstream(**upstream_options), own_topics=own_topics
        )
        built.append(harness)
        return harness

    yield build
    for harness in built:
        harness.close()


@pytest.fixture
def gateway(gateway_with: Callable[..., Harness]) -> Harness:
    return gateway_with()


def assert_forwarded_as_sent(outcome: object, frame: bytes) -> None:
    assert outcome == Forward(frame=frame, expect_response=True, on_response=None)


# --- the engine ------------------------------------------------------------------------------


class GatedSink(ListSink):
    """Holds every write until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def write(self, lines: Sequence[EventLine]) -> None:
        self.release.wait(10)
        super().write(lines)


def test_a_denial_is_audited_before_the_client_is_answered(gateway: Harness) -> None:
    """The engine, with an audit sink that holds its writes: no answer while it holds."""
    sink = GatedSink()
    emitter = AuditEmitter([sink], tick_s=0.05)
    engine = Engine(DecisionRecorder(gateway.metrics, emitter, "unit"))
    frame = create_topics(5, NewTopic("few", num_partitions=1))

    async def scenario() -> None:
        await emitter.start()
        try:
            run = asyncio.create_task(
                engine.run(CreateTopics(gateway.services), context(frame), gateway.cluster, frame)
            )
            await asyncio.sleep(0.3)
            assert not run.done(), "answered while its audit event was not written yet"
            sink.release.set()
            outcome = await asyncio.wait_for(run, 5)
            assert isinstance(outcome, Answer)
            [event] = sink.events
            assert (event.resource_name, event.verdict, event.error_code) == ("few", "denied", 44)
        finally:
            sink.release.set()
            await emitter.close()

    gateway.run(scenario())
    assert gateway.decisions("CreateTopics", "partition-count", "denied") == 1


def test_every_decision_is_audited_with_who_asked(gateway: Harness) -> None:
    frame = create_topics(5, NewTopic("few", num_partitions=1), NewTopic("fine"))
    gateway.send(frame, principal="User:alice")
    seen = [
        (e.resource_name, e.verdict, e.policy, e.error_code, e.message) for e in gateway.sink.events
    ]
    assert seen == [
        ("few", "denied", "partition-count", POLICY_VIOLATION, too_few("few", 1)),
        ("fine", "allowed", None, None, None),
    ]
    assert {(e.principal, e.client_id, e.client_address) for e in gateway.sink.events} == {
        ("User:alice", "unit-client", "192.0.2.7:50123")
    }


# --- CreateTopics ----------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(2, 8))
def test_create_topics_all_allowed_forwards_the_clients_bytes(
    gateway: Harness, version: int
) -> None:
    frame = create_topics(
        version, NewTopic("a"), NewTopic("b", configs={"retention.ms": "7200000"})
    )
    assert_forwarded_as_sent(gateway.send(frame), frame)


@pytest.mark.parametrize("version", [0, 1])
def test_create_topics_v0_and_v1_go_to_the_broker_as_v2(gateway: Harness, version: int) -> None:
    outcome = gateway.send(create_topics(version, NewTopic("a"), NewTopic("b")))
    header, body = forwarded(outcome)
    assert (header.api_version, [t.name for t in body.topics]) == (2, ["a", "b"])
    answer = gateway.broker_answers(outcome, create_topics_response(2, {"a": 0, "b": 36}))
    broker_message = "broker error 36" if version == 1 else None
    assert items(CREATE_TOPICS, version, answer) == [("a", 0, None), ("b", 36, broker_message)]


@pytest.mark.parametrize("version", range(8))
def test_create_topics_all_denied_is_answered_here(gateway: Harness, version: int) -> None:
    frame = create_topics(version, NewTopic("few", num_partitions=1), NewTopic("many", 20))
    answer = answer_of(gateway.send(frame))
    has_message = version >= 1
    assert items(CREATE_TOPICS, version, answer) == [
        ("few", POLICY_VIOLATION, too_few("few", 1) if has_message else None),
        ("many", POLICY_VIOLATION, too_many("many", 20) if has_message else None),
    ]


def test_one_request_has_one_audit_request_id_in_its_events_and_its_denials(
    gateway: Harness,
) -> None:
    few, many = NewTopic("few", num_partitions=1), NewTopic("many", 20)
    outcome = gateway.send(create_topics(7, few, NewTopic("fine"), many))
    header, _ = forwarded(outcome)
    broker = create_topics_response(header.api_version, {"fine": 0})
    answer = gateway.broker_answers(outcome, broker)
    first = list(gateway.sink.events)
    gateway.send(create_topics(7, NewTopic("few", num_partitions=1)))

    (request_id,) = {e.request_id for e in first}
    assert [(e.resource_name, e.verdict) for e in first] == [
        ("few", "denied"),
        ("fine", "allowed"),
        ("many", "denied"),
    ]
    assert request_ids(CREATE_TOPICS, 7, answer) == [request_id, None, request_id]
    assert gateway.sink.events[-1].request_id not in (None, request_id)


def test_the_gateways_log_line_of_a_denial_names_its_audit_request_id(
    gateway: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="gateway.decisions"):
        gateway.send(create_topics(7, NewTopic("few", num_partitions=1)))

    (event,) = gateway.sink.events
    (line,) = [r.getMessage() for r in caplog.records if r.name == "gateway.decisions"]
    assert line.endswith(f"(audit request id {event.request_id})")


@pytest.mark.parametrize("version", [0, 1, 4, 7])
def test_create_topics_mixed_forwards_the_allowed_and_merges_in_request_order(
    gateway: Harness, version: int
) -> None:
    frame = create_topics(
        version,
        NewTopic("few", num_partitions=1),
        NewTopic("fine"),
        NewTopic("short", configs={"retention.ms": "1000"}),
        NewTopic("taken"),
    )
    outcome = gateway.send(frame)
    header, body = forwarded(outcome)
    assert header.api_version == max(version, 2)
    assert header.correlation_id == parse_request_header(frame).correlation_id
    assert [t.name for t in body.topics] == ["fine", "taken"]
    broker = create_topics_response(header.api_version, {"fine": 0, "taken": 36})
    answer = gateway.broker_answers(outcome, broker)
    assert codes(CREATE_TOPICS, version, answer) == [
        ("few", POLICY_VIOLATION),
        ("fine", NONE),
        ("short", POLICY_VIOLATION),
        ("taken", TOPIC_ALREADY_EXISTS),
    ]


def test_create_topics_duplicates_are_invalid_and_the_rest_goes_on(gateway: Harness) -> None:
    frame = create_topics(5, NewTopic("twice"), NewTopic("once"), NewTopic("twice"))
    outcome = gateway.send(frame)
    assert [t.name for t in forwarded(outcome)[1].topics] == ["once"]
    answer = gateway.broker_answers(outcome, create_topics_response(5, {"once": 0}))
    assert items(CREATE_TOPICS, 5, answer) == [
        ("twice", INVALID_REQUEST, "Topic 'twice' appears more than once in the request."),
        ("once", NONE, None),
    ]


@pytest.mark.parametrize(
    ("broker_default", "denial"), [("1", too_few("d", 1)), ("6", None)], ids=["1", "6"]
)
def test_create_topics_default_partitions_are_judged_as_the_broker_will_create_them(
    gateway: Harness, broker_default: str, denial: str | None
) -> None:
    """num_partitions -1: the count a broker of the cluster reports as num.partitions, and
    the broker is asked for that count (a default changed since would create another)."""
    gateway.cluster.brokers = [3]
    gateway.cluster.set_broker_configs(3, {"num.partitions": broker_default})
    frame = create_topics(7, NewTopic("d", num_partitions=-1))
    outcome = gateway.send(frame)
    assert ("describe_configs", ((4, "3"),)) in gateway.cluster.asked
    if denial is None:
        _, sent = forwarded(outcome)
        assert [(t.name, int(t.num_partitions)) for t in sent.topics] == [("d", 6)]
    else:
        assert items(CREATE_TOPICS, 7, answer_of(outcome)) == [("d", POLICY_VIOLATION, denial)]


@pytest.mark.parametrize(
    ("ignores", "denial"),
    [(False, too_few("a", 1)), (True, None)],
    ids=["broker-honours-them", "broker-ignores-them"],
)
def test_create_topics_assignments_are_judged_as_the_broker_will_create_the_topic(
    gateway_with: Callable[..., Harness], ignores: bool, denial: str | None
) -> None:
    """One partition assigned: judged as one partition by a broker that honours assignments
    (Kafka), as the broker's default count (6) by one that ignores them (Tansu creates its
    defaults), and then forwarded as sent."""
    gateway = gateway_with(ignores_replica_assignments=ignores)
    gateway.cluster.brokers = [3]
    gateway.cluster.set_broker_configs(
        3, {"num.partitions": "6", "default.replication.factor": "1"}
    )
    topic = NewTopic("a", num_partitions=-1, replication_factor=-1, assignments=((0, (3,)),))
    frame = create_topics(7, topic)
    outcome = gateway.send(frame)
    if denial is None:
        assert_forwarded_as_sent(outcome, frame)
        (event,) = gateway.sink.events
        assert event.topic_spec is not None
        assert (event.topic_spec.partitions, event.topic_spec.replication_factor) == (6, 1)
    else:
        assert items(CREATE_TOPICS, 7, answer_of(outcome)) == [("a", POLICY_VIOLATION, denial)]


def test_create_topics_audits_the_spec_judged_with_the_broker_default_resolved(
    gateway: Harness,
) -> None:
    gateway.cluster.brokers = [3]
    gateway.cluster.set_broker_configs(3, {"num.partitions": "6"})
    gateway.send(
        create_topics(7, NewTopic("d", num_partitions=-1, configs={"retention.ms": "90000"}))
    )

    (event,) = gateway.sink.events
    assert event.topic_spec is not None
    assert (event.topic_spec.partitions, event.topic_spec.replication_factor) == (6, 1)
    assert dict(event.topic_spec.configs) == {"retention.ms": "90000"}


@pytest.mark.parametrize("version", [1, 5])
def test_create_topics_validate_only_is_answered_here_before_a_broker_that_ignores_it(
    gateway_with: Callable[..., Harness], version: int
) -> None:
    gateway = gateway_with(ignores_validate_only=True)
    gateway.cluster.add_topic("existing")
    frame = create_topics(
        version,
        NewTopic("existing"),
        NewTopic("fresh", configs={POLICY_KEY: "trace-id"}),
        NewTopic("few", num_partitions=1),
        validate_only=True,
    )
    answer = answer_of(gateway.send(frame))
    assert items(CREATE_TOPICS, version, answer) == [
        ("existing", TOPIC_ALREADY_EXISTS, "Topic 'existing' already exists."),
        ("fresh", NONE, None),
        ("few", POLICY_VIOLATION, too_few("few", 1)),
    ]
    assert gateway.validation_policy("fresh") is None
    assert [e.validate_only for e in gateway.sink.events] == [True, True, True]


BROKER_REPORT = {
    "own": {"log.retention.hours": "72", "num.partitions": "4"},  # DYNAMIC_BROKER_CONFIG (2)
    "defaults": {  # DEFAULT_CONFIG (5)
        "log.retention.ms": None,  # unset: the next synonym (hours) stands
        "log.cleanup.policy": "delete",
        "min.insync.replicas": "1",
        "message.max.bytes": "1048588",
        "default.replication.factor": "1",
    },
}
NO_SYNONYM = [
    ("follower.replication.throttled.replicas", "", 5),
    ("leader.replication.throttled.replicas", "", 5),
    ("remote.log.copy.disable", "false", 5),
    ("remote.log.delete.on.disable", "false", 5),
    ("remote.storage.enable", "false", 5),
]


def dry_run_rows(version: int, frame: bytes) -> list[tuple[Any, ...]]:
    payload = decode_response(CREATE_TOPICS, version, frame)
    return [
        (
            t.name,
            int(t.error_code),
            int(t.num_partitions),
            int(t.replication_factor),
            None
            if t.configs is None
            else [
                (c.name, c.value, int(c.config_source), c.read_only, c.is_sensitive)
                for c in t.configs
            ],
            getattr(t, "topic_id", None) is not None,  # v7 has the field
        )
        for t in payload.topics
    ]


@pytest.mark.parametrize("version", [5, 6, 7])
def test_create_topics_dry_run_answered_here_is_filled_as_kafka_fills_it(
    gateway_with: Callable[..., Harness], version: int
) -> None:
    """KIP-525, as Kafka's controller answers a validate_only topic (ReplicationControlManager
    .createTopic: the row of the creation, validate_only discarding only the records): the
    counts the topic would get (-1 resolved), a topic id (v7), and every topic config sorted
    by name, the given ones DYNAMIC_TOPIC_CONFIG (1), the rest from the broker configs that
    stand for them with their source, none read-only or sensitive."""
    gateway = gateway_with(ignores_validate_only=True)
    gateway.cluster.brokers = [3]
    report: Any = BROKER_REPORT
    gateway.cluster.configs[(BROKER, "3")] = described(
        BROKER, "3", report["own"], {k: v for k, v in report["defaults"].items() if v}
    )
    gateway.cluster.add_topic("existing")
    frame = create_topics(
        version,
        NewTopic("existing"),
        NewTopic(
            "fresh",
            num_partitions=-1,
            configs={"cleanup.policy": "compact", POLICY_KEY: "trace-id"},
        ),
        validate_only=True,
    )
    rows = dry_run_rows(version, answer_of(gateway.send(frame)))
    has_id = version >= 7
    expected_configs = sorted(
        [
            ("cleanup.policy", "compact", 1, False, False),
            ("max.message.bytes", "1048588", 5, False, False),
            ("min.insync.replicas", "1", 5, False, False),
            (POLICY_KEY, "trace-id", 1, False, False),
            ("retention.ms", str(72 * 3_600_000), 2, False, False),
        ]
        + [(n, v, src, False, False) for n, v, src in NO_SYNONYM]
    )
    assert rows == [
        ("existing", TOPIC_ALREADY_EXISTS, -1, -1, None, False),
        ("fresh", NONE, 4, 1, expected_configs, has_id),
    ]


def test_create_topics_dry_run_lists_only_the_given_configs_when_the_broker_reports_none(
    gateway_with: Callable[..., Harness],
) -> None:
    """A broker that reports no broker configs (Tansu), or one the client may not describe:
    the topic configs not given are unknown, and left out rather than guessed."""
    gateway = gateway_with(ignores_validate_only=True)
    frame = create_topics(
        7,
        NewTopic("fresh", num_partitions=6, configs={"retention.ms": "7200000"}),
        validate_only=True,
    )
    assert dry_run_rows(7, answer_of(gateway.send(frame))) == [
        ("fresh", NONE, 6, 1, [("retention.ms", "7200000", 1, False, False)], True)
    ]


def test_create_topics_validate_only_is_forwarded_to_a_broker_that_honours_it(
    gateway: Harness,
) -> None:
    frame = create_topics(5, NewTopic("fresh"), validate_only=True)
    assert_forwarded_as_sent(gateway.send(frame), frame)


def test_create_topics_validation_policy_is_stored_before_forwarding_and_stripped(
    gateway: Harness,
) -> None:
    configs = {"cleanup.policy": "compact", POLICY_KEY: "trace-id"}
    frame = create_topics(
        7,
        NewTopic("orders", configs=configs),
        NewTopic("few", num_partitions=1, configs=configs),
        NewTopic("plain"),
    )
    outcome = gateway.send(frame)
    assert gateway.validation_policy("orders") == "trace-id"  # before the broker has it
    assert gateway.validation_policy("few") is None  # denied
    header, body = forwarded(outcome)
    assert header.api_version == 7
    assert {t.name: {c.name: c.value for c in t.configs} for t in body.topics} == {
        "orders": {"cleanup.policy": "compact"},
        "plain": {},
    }
    answer = gateway.broker_answers(outcome, create_topics_response(7, {"orders": 0, "plain": 0}))
    assert codes(CREATE_TOPICS, 7, answer) == [
        ("orders", NONE),
        ("few", POLICY_VIOLATION),
        ("plain", NONE),
    ]
    assert gateway.validation_policy("orders") == "trace-id"


@pytest.mark.parametrize("previous", [None, "key-required"])
def test_create_topics_validation_policy_is_restored_when_the_broker_does_not_create(
    gateway: Harness, previous: str | None
) -> None:
    gateway.set_validation_policy("orders", previous)
    outcome = gateway.send(create_topics(7, NewTopic("orders", configs={POLICY_KEY: "trace-id"})))
    assert gateway.validation_policy("orders") == "trace-id"
    answer = gateway.broker_answers(outcome, create_topics_response(7, {"orders": 36}))
    assert codes(CREATE_TOPICS, 7, answer) == [("orders", TOPIC_ALREADY_EXISTS)]
    assert gateway.validation_policy("orders") == previous


def test_create_topics_validation_policy_of_a_topic_metadata_does_not_describe_is_refused(
    gateway: Harness,
) -> None:
    """The policy is stored only once Metadata shows the topic does not exist: an answer that
    says nothing of it (the topic may exist, with a policy of its own) refuses the topic,
    before anything is stored or forwarded."""
    gateway.set_validation_policy("orders", "key-required")
    gateway.cluster.left_out_topics.add("orders")
    outcome = gateway.send(create_topics(7, NewTopic("orders", configs={POLICY_KEY: "trace-id"})))
    answer = answer_of(outcome)
    assert codes(CREATE_TOPICS, 7, answer) == [("orders", UNKNOWN_SERVER_ERROR)]
    assert gateway.validation_policy("orders") == "key-required"


def test_create_topics_validate_only_with_a_validation_policy_stores_nothing(
    gateway: Harness,
) -> None:
    frame = create_topics(
        5, NewTopic("orders", configs={POLICY_KEY: "trace-id"}), validate_only=True
    )
    outcome = gateway.send(frame)
    _, body = forwarded(outcome)
    assert body.validate_only
    assert [list(t.configs) for t in body.topics] == [[]]
    assert gateway.validation_policy("orders") is None


# --- CreatePartitions ------------------------------------------------------------------------


@pytest.fixture
def partitioned(gateway: Harness) -> Harness:
    for name in ("orders", "big", "protected-billing"):
        gateway.cluster.add_topic(name, partitions=3)
    return gateway


@pytest.mark.parametrize("version", range(4))
def test_create_partitions_all_allowed_forwards_the_clients_bytes(
    partitioned: Harness, version: int
) -> None:
    frame = create_partitions(version, ("orders", 6), ("big", 12))
    assert_forwarded_as_sent(partitioned.send(frame), frame)


@pytest.mark.parametrize("version", range(4))
def test_create_partitions_all_denied_is_answered_here(partitioned: Harness, version: int) -> None:
    frame = create_partitions(version, ("big", 20), ("protected-billing", 4))
    assert items(CREATE_PARTITIONS, version, answer_of(partitioned.send(frame))) == [
        ("big", POLICY_VIOLATION, too_many("big", 20)),
        (
            "protected-billing",
            POLICY_VIOLATION,
            protected("protected-billing", "add partitions to it"),
        ),
    ]


@pytest.mark.parametrize("version", [0, 3])
def test_create_partitions_mixed_and_duplicates(partitioned: Harness, version: int) -> None:
    frame = create_partitions(version, ("big", 20), ("orders", 6), ("twice", 4), ("twice", 5))
    outcome = partitioned.send(frame)
    header, body = forwarded(outcome)
    assert (header.api_version, [(t.name, t.count) for t in body.topics]) == (
        version,
        [("orders", 6)],
    )
    answer = partitioned.broker_answers(outcome, create_partitions_response(version, {"orders": 0}))
    assert items(CREATE_PARTITIONS, version, answer) == [
        ("big", POLICY_VIOLATION, too_many("big", 20)),
        ("orders", NONE, None),
        ("twice", INVALID_REQUEST, "Topic 'twice' appears more than once in the request."),
    ]


@pytest.mark.parametrize(
    ("metadata_error", "code", "message"),
    [
        (None, UNKNOWN_TOPIC_OR_PARTITION, "The topic 'ghost' does not exist."),
        (
            TOPIC_AUTHORIZATION_FAILED,
            TOPIC_AUTHORIZATION_FAILED,
            "Cannot read the state of topic 'ghost': Metadata answered TOPIC_AUTHORIZATION_FAILED.",
        ),
    ],
    ids=["absent", "not-authorized"],
)
def test_create_partitions_of_a_topic_the_cluster_does_not_describe_is_not_forwarded(
    partitioned: Harness, metadata_error: int | None, code: int, message: str
) -> None:
    if metadata_error is not None:
        partitioned.cluster.metadata_errors["ghost"] = metadata_error
    outcome = partitioned.send(create_partitions(2, ("ghost", 6), ("orders", 6)))
    assert [t.name for t in forwarded(outcome)[1].topics] == ["orders"]
    answer = partitioned.broker_answers(outcome, create_partitions_response(2, {"orders": 0}))
    assert items(CREATE_PARTITIONS, 2, answer) == [("ghost", code, message), ("orders", NONE, None)]


# --- DeleteTopics ----------------------------------------------------------------------------


@pytest.fixture
def deletable(gateway: Harness) -> Harness:
    for name in ("orders", "payments", "protected-billing"):
        gateway.cluster.add_topic(name)
    return gateway


@pytest.mark.parametrize("version", range(1, 7))
def test_delete_topics_all_allowed_forwards_the_clients_bytes(
    deletable: Harness, version: int
) -> None:
    frame = delete_topics(version, "orders", "payments")
    assert_forwarded_as_sent(deletable.send(frame), frame)


@pytest.mark.parametrize("version", range(1, 7))
def test_delete_topics_all_denied_is_answered_here(deletable: Harness, version: int) -> None:
    answer = answer_of(deletable.send(delete_topics(version, "protected-billing")))
    message = protected("protected-billing", "delete it") if version >= 5 else None
    assert items(DELETE_TOPICS, version, answer) == [
        ("protected-billing", POLICY_VIOLATION, message)
    ]


@pytest.mark.parametrize("version", [1, 5, 6])
def test_delete_topics_mixed_with_duplicates_and_an_absent_topic(
    deletable: Harness, version: int
) -> None:
    frame = delete_topics(version, "protected-billing", "orders", "ghost", "payments", "payments")
    outcome = deletable.send(frame)
    header, body = forwarded(outcome)
    names = body.topic_names if version < 6 else tuple(t.name for t in body.topics)
    assert (header.api_version, names) == (version, ("orders",))
    answer = deletable.broker_answers(
        outcome, delete_topics_response(version, [("orders", None, 0)])
    )
    assert codes(DELETE_TOPICS, version, answer) == [
        ("protected-billing", POLICY_VIOLATION),
        ("orders", NONE),
        ("ghost", UNKNOWN_TOPIC_OR_PARTITION),
        ("payments", INVALID_REQUEST),
    ]


TOPIC_ACTION_POLICIES = {
    "rules": RULES,
    "topic.action.policy.class.name": "kafka_test_policies.RecordingTopicActionPolicy",
    "topic.action.policy.class.path": PLUGINS,
}


def test_delete_topics_of_a_topic_whose_state_cannot_be_read_is_denied(
    gateway_with: Callable[..., Harness],
) -> None:
    """A TopicActionPolicy judges a deletion with the topic's configs: a topic whose configs
    the broker will not describe to the client is denied by the gateway, never forwarded
    unjudged; its neighbour goes on."""
    harness = gateway_with(policies=TOPIC_ACTION_POLICIES)
    for name in ("orders", "payments"):
        harness.cluster.add_topic(name)
    harness.cluster.configs[(TOPIC, "payments")] = described(
        TOPIC, "payments", error_code=TOPIC_AUTHORIZATION_FAILED, error_message="not for you"
    )
    outcome = harness.send(delete_topics(5, "orders", "payments"))
    _, body = forwarded(outcome)
    assert body.topic_names == ("orders",)
    answer = harness.broker_answers(outcome, delete_topics_response(5, [("orders", None, 0)]))
    message = (
        "the gateway cannot read the state of topic payments that its policies need: "
        "DescribeConfigs answered TOPIC_AUTHORIZATION_FAILED: not for you"
    )
    assert items(DELETE_TOPICS, 5, answer) == [
        ("orders", NONE, None),
        ("payments", POLICY_VIOLATION, message),
    ]


def test_delete_topics_by_id_are_resolved_judged_by_name_and_forwarded_as_ids(
    deletable: Harness,
) -> None:
    """DeleteTopics v6: ids resolved through Metadata of every topic; an unknown id and a
    repeated one answered here; the allowed entries go on as the client wrote them."""
    deletable.cluster.add_topic("refunds")
    payments, billing, refunds, unknown = (
        *(deletable.cluster.id_of(n) for n in ("payments", "protected-billing", "refunds")),
        uuid.uuid4(),
    )
    outcome = deletable.send(
        delete_topics(6, payments, billing, unknown, "orders", refunds, refunds)
    )
    assert ("describe_all_topics", ()) in deletable.cluster.asked
    _, body = forwarded(outcome)
    assert [(t.name, t.topic_id) for t in body.topics] == [(None, payments), ("orders", None)]
    broker = delete_topics_response(
        6, [("payments", payments, 0), ("orders", deletable.cluster.id_of("orders"), 0)]
    )
    assert items(DELETE_TOPICS, 6, deletable.broker_answers(outcome, broker)) == [
        ("payments", NONE, None),
        ("protected-billing", POLICY_VIOLATION, protected("protected-billing", "delete it")),
        (unknown, UNKNOWN_TOPIC_ID, "This server does not host this topic ID."),
        ("orders", NONE, None),
        (refunds, INVALID_REQUEST, "Duplicate topic id."),
    ]


@pytest.mark.parametrize(
    ("by_id", "broker_code", "kept"),
    [(False, NONE, None), (True, NONE, None), (False, REQUEST_TIMED_OUT, "trace-id")],
    ids=["deleted-by-name", "deleted-by-id", "not-deleted"],
)
def test_delete_topics_forgets_a_deleted_topics_validation_policy(
    deletable: Harness, by_id: bool, broker_code: int, kept: str | None
) -> None:
    deletable.set_validation_policy("orders", "trace-id")
    target: str | uuid.UUID = deletable.cluster.id_of("orders") if by_id else "orders"
    frame = delete_topics(6, target)
    outcome = deletable.send(frame)
    assert isinstance(outcome, Forward) and outcome.frame == frame
    assert deletable.validation_policy("orders") == "trace-id"  # until the broker says so
    name = None if by_id else "orders"
    broker = delete_topics_response(6, [(name, deletable.cluster.id_of("orders"), broker_code)])
    deletable.broker_answers(outcome, broker)
    assert deletable.validation_policy("orders") == kept


# --- AlterConfigs and IncrementalAlterConfigs ------------------------------------------------

ALTER_APIS = [(ALTER_CONFIGS, v) for v in range(3)] + [
    (INCREMENTAL_ALTER_CONFIGS, v) for v in range(2)
]
ALTER_IDS = [f"{'legacy' if k == ALTER_CONFIGS else 'incremental'}-v{v}" for k, v in ALTER_APIS]
ORDERS_CONFIGS = {"retention.ms": "86400000", "cleanup.policy": "delete"}


@pytest.fixture
def configured(gateway: Harness) -> Harness:
    for name in ("orders", "payments", "protected-billing"):
        gateway.cluster.add_topic(
            name, configs=ORDERS_CONFIGS, defaults={"segment.ms": "604800000"}
        )
    return gateway


def retention(topic: str, value: str) -> tuple[int, str, list[tuple[str, int, str | None]]]:
    return (TOPIC, topic, [("retention.ms", SET, value), ("cleanup.policy", SET, "delete")])


@pytest.mark.parametrize(("api_key", "version"), ALTER_APIS, ids=ALTER_IDS)
def test_alter_configs_all_allowed_forwards_the_clients_bytes(
    configured: Harness, api_key: int, version: int
) -> None:
    frame = alter_configs(api_key, version, [retention("orders", "7200000")])
    assert_forwarded_as_sent(configured.send(frame), frame)


@pytest.mark.parametrize(("api_key", "version"), ALTER_APIS, ids=ALTER_IDS)
def test_alter_configs_all_denied_is_answered_here(
    configured: Harness, api_key: int, version: int
) -> None:
    frame = alter_configs(
        api_key, version, [retention("orders", "1000"), retention("protected-billing", "7200000")]
    )
    assert items(api_key, version, answer_of(configured.send(frame))) == [
        ((TOPIC, "orders"), POLICY_VIOLATION, short_retention("orders", "1000")),
        (
            (TOPIC, "protected-billing"),
            POLICY_VIOLATION,
            protected("protected-billing", "change its configs"),
        ),
    ]


@pytest.mark.parametrize(("api_key", "version"), ALTER_APIS, ids=ALTER_IDS)
def test_alter_configs_mixed_with_duplicates_and_an_absent_topic(
    configured: Harness, api_key: int, version: int
) -> None:
    frame = alter_configs(
        api_key,
        version,
        [
            retention("ghost", "7200000"),
            retention("orders", "7200000"),
            retention("protected-billing", "7200000"),
            retention("payments", "7200000"),
            retention("payments", "9000000"),
        ],
    )
    outcome = configured.send(frame)
    header, body = forwarded(outcome)
    assert (header.api_key, header.api_version) == (api_key, version)
    assert [r.resource_name for r in body.resources] == ["orders"]
    answer = configured.broker_answers(
        outcome, alter_configs_response(api_key, version, {(TOPIC, "orders"): 0})
    )
    assert codes(api_key, version, answer) == [
        ((TOPIC, "ghost"), UNKNOWN_TOPIC_OR_PARTITION),
        ((TOPIC, "orders"), NONE),
        ((TOPIC, "protected-billing"), POLICY_VIOLATION),
        ((TOPIC, "payments"), INVALID_REQUEST),
        ((TOPIC, "payments"), INVALID_REQUEST),
    ]


@pytest.mark.parametrize(
    ("api_key", "after"),
    [
        (INCREMENTAL_ALTER_CONFIGS, {"retention.ms": "7200000", POLICY_KEY: "trace-id"}),
        (ALTER_CONFIGS, {"retention.ms": "7200000"}),
    ],
    ids=["incremental", "legacy"],
)
def test_alter_configs_v2_policy_sees_the_configs_before_and_after(
    configured: Harness, api_key: int, after: dict[str, str]
) -> None:
    configured.set_validation_policy("orders", "trace-id")
    changes = [("retention.ms", SET, "7200000"), ("cleanup.policy", DELETE, None)]
    if api_key == ALTER_CONFIGS:
        changes = changes[:1]  # the legacy API deletes by leaving out
    [plugin] = configured.chain.plugins  # kafka_test_policies.RecordingAlterConfigV2Policy
    calls = type(plugin.policy).seen
    calls.clear()
    configured.send(alter_configs(api_key, 1, [(TOPIC, "orders", changes)]))
    [seen] = calls
    assert (seen.resource.name, dict(seen.configs_before), dict(seen.configs_after)) == (
        "orders",
        {**ORDERS_CONFIGS, POLICY_KEY: "trace-id"},
        after,
    )


@pytest.mark.parametrize(
    ("operation", "value"), [(SET, "key-required"), (DELETE, None)], ids=["set", "delete"]
)
def test_alter_configs_validation_policy_alone_is_answered_and_stored_here(
    configured: Harness, operation: int, value: str | None
) -> None:
    configured.set_validation_policy("orders", "trace-id")
    frame = alter_configs(
        INCREMENTAL_ALTER_CONFIGS, 1, [(TOPIC, "orders", [(POLICY_KEY, operation, value)])]
    )
    answer = answer_of(configured.send(frame))
    assert codes(INCREMENTAL_ALTER_CONFIGS, 1, answer) == [((TOPIC, "orders"), NONE)]
    assert configured.validation_policy("orders") == value
    assert ("describe_topics", ("orders",)) in configured.cluster.asked


def test_alter_configs_validation_policy_the_broker_says_nothing_of_is_not_stored(
    configured: Harness,
) -> None:
    """The broker authorizes a change of the policy first: an answer that leaves the topic
    out authorizes nothing, and the change is refused, nothing stored."""
    configured.set_validation_policy("orders", "trace-id")
    configured.cluster.alter_unanswered.add((TOPIC, "orders"))
    frame = alter_configs(
        INCREMENTAL_ALTER_CONFIGS, 1, [(TOPIC, "orders", [(POLICY_KEY, DELETE, None)])]
    )
    assert items(INCREMENTAL_ALTER_CONFIGS, 1, answer_of(configured.send(frame))) == [
        (
            (TOPIC, "orders"),
            UNKNOWN_SERVER_ERROR,
            "The broker did not say whether 'orders' may be altered.",
        )
    ]
    assert configured.validation_policy("orders") == "trace-id"


def test_alter_configs_a_denied_validation_policy_change_is_not_stored(configured: Harness) -> None:
    changes = [(POLICY_KEY, SET, "trace-id")]
    frame = alter_configs(INCREMENTAL_ALTER_CONFIGS, 1, [(TOPIC, "protected-billing", changes)])
    assert items(INCREMENTAL_ALTER_CONFIGS, 1, answer_of(configured.send(frame))) == [
        (
            (TOPIC, "protected-billing"),
            POLICY_VIOLATION,
            protected("protected-billing", "change its configs"),
        )
    ]
    assert configured.validation_policy("protected-billing") is None


@pytest.mark.parametrize(
    ("broker_code", "stored"), [(NONE, "key-required"), (POLICY_VIOLATION, "trace-id")]
)
def test_alter_configs_validation_policy_with_other_configs_is_stripped_and_stored_after(
    configured: Harness, broker_code: int, stored: str
) -> None:
    configured.set_validation_policy("orders", "trace-id")
    changes = [("retention.ms", SET, "7200000"), (POLICY_KEY, SET, "key-required")]
    outcome = configured.send(
        alter_configs(INCREMENTAL_ALTER_CONFIGS, 1, [(TOPIC, "orders", changes)])
    )
    _, body = forwarded(outcome)
    assert [[c.name for c in r.configs] for r in body.resources] == [["retention.ms"]]
    assert configured.validation_policy("orders") == "trace-id"
    broker = alter_configs_response(INCREMENTAL_ALTER_CONFIGS, 1, {(TOPIC, "orders"): broker_code})
    answer = configured.broker_answers(outcome, broker)
    assert codes(INCREMENTAL_ALTER_CONFIGS, 1, answer) == [((TOPIC, "orders"), broker_code)]
    assert configured.validation_policy("orders") == stored


@pytest.mark.parametrize(
    ("api_key", "version", "frame_changes"),
    [
        (
            INCREMENTAL_ALTER_CONFIGS,
            1,
            [("retention.ms", SET, "7200000"), (POLICY_KEY, SET, "key-required")],
        ),
        (ALTER_CONFIGS, 2, [("retention.ms", SET, "7200000")]),  # implicitly deletes it
    ],
    ids=["incremental", "legacy"],
)
def test_alter_configs_validate_only_with_the_validation_policy_stores_nothing(
    configured: Harness, api_key: int, version: int, frame_changes: list[Any]
) -> None:
    """A dry run before a broker that honours validate_only is forwarded as one; the broker's
    success says the change would be made, so the stored policy stays as it was."""
    configured.set_validation_policy("orders", "trace-id")
    frame = alter_configs(api_key, version, [(TOPIC, "orders", frame_changes)], validate_only=True)
    outcome = configured.send(frame)
    _, body = forwarded(outcome)
    assert body.validate_only
    broker = alter_configs_response(api_key, version, {(TOPIC, "orders"): NONE})
    answer = configured.broker_answers(outcome, broker)
    assert codes(api_key, version, answer) == [((TOPIC, "orders"), NONE)]
    assert configured.validation_policy("orders") == "trace-id"


@pytest.mark.parametrize(("broker_code", "stored"), [(NONE, None), (POLICY_VIOLATION, "trace-id")])
def test_legacy_alter_configs_leaving_out_the_validation_policy_removes_it_after(
    configured: Harness, broker_code: int, stored: str | None
) -> None:
    configured.set_validation_policy("orders", "trace-id")
    frame = alter_configs(ALTER_CONFIGS, 2, [retention("orders", "7200000")])
    outcome = configured.send(frame)
    assert isinstance(outcome, Forward) and outcome.frame == frame
    assert configured.validation_policy("orders") == "trace-id"
    broker = alter_configs_response(ALTER_CONFIGS, 2, {(TOPIC, "orders"): broker_code})
    answer = configured.broker_answers(outcome, broker)
    assert codes(ALTER_CONFIGS, 2, answer) == [((TOPIC, "orders"), broker_code)]
    assert configured.validation_policy("orders") == stored


@pytest.mark.parametrize(("operation", "word"), [(APPEND, "APPEND"), (SUBTRACT, "SUBTRACT")])
def test_alter_configs_append_or_subtract_on_the_validation_policy_is_invalid_config(
    configured: Harness, operation: int, word: str
) -> None:
    frame = alter_configs(
        INCREMENTAL_ALTER_CONFIGS, 0, [(TOPIC, "orders", [(POLICY_KEY, operation, "json")])]
    )
    assert items(INCREMENTAL_ALTER_CONFIGS, 0, answer_of(configured.send(frame))) == [
        (
            (TOPIC, "orders"),
            INVALID_CONFIG,
            f"Can't {word} to key {POLICY_KEY} because its type is not LIST.",
        )
    ]
    assert configured.validation_policy("orders") is None


def test_alter_configs_dynamic_client_configs_are_stored_here_and_never_forwarded(
    configured: Harness,
) -> None:
    frame = alter_configs(
        INCREMENTAL_ALTER_CONFIGS,
        1,
        [(USER_CLIENT, "alice:app-1", [("acks", SET, "all")]), retention("orders", "7200000")],
    )
    outcome = configured.send(frame)
    _, body = forwarded(outcome)
    assert [(r.resource_type, r.resource_name) for r in body.resources] == [(TOPIC, "orders")]
    broker = alter_configs_response(INCREMENTAL_ALTER_CONFIGS, 1, {(TOPIC, "orders"): 0})
    answer = configured.broker_answers(outcome, broker)
    assert codes(INCREMENTAL_ALTER_CONFIGS, 1, answer) == [
        ((USER_CLIENT, "alice:app-1"), NONE),
        ((TOPIC, "orders"), NONE),
    ]
    assert (
        client_configs.config_of(
            configured.store.items(client_configs.STATE_NAMESPACE), "User:alice", "app-1", "acks"
        )
        == "all"
    )


@pytest.mark.parametrize("version", range(3))
def test_legacy_alter_configs_on_dynamic_client_configs_is_invalid(
    configured: Harness, version: int
) -> None:
    frame = alter_configs(
        ALTER_CONFIGS, version, [(USER_CLIENT, "alice:app-1", [("acks", SET, "all")])]
    )
    assert items(ALTER_CONFIGS, version, answer_of(configured.send(frame))) == [
        ((USER_CLIENT, "alice:app-1"), INVALID_REQUEST, client_configs.LEGACY_ALTER_MESSAGE)
    ]


# --- Produce ---------------------------------------------------------------------------------

TRACED = uncompressed_batch((record(0, b"k", b"v", headers=((b"trace-id", b"1"),)),))
UNTRACED = uncompressed_batch((record(0, b"k", b"v"), record(1, b"k", b"v")))
NO_TRACE_ID = "Record is missing required header 'trace-id' (record.validation.policy=trace-id)"


@pytest.fixture
def validating(gateway: Harness) -> Harness:
    gateway.set_validation_policy("orders", "trace-id")
    return gateway


@pytest.mark.parametrize(("acks", "expect_response"), [(1, True), (0, False)])
def test_produce_to_topics_nobody_validates_is_forwarded_unread(
    gateway: Harness, acks: int, expect_response: bool
) -> None:
    """A frame that does not decode still goes through as sent: nothing read it."""
    frame = produce(9, {("plain", 0): UNTRACED}, acks=acks) + b"unreadable trailing bytes"
    with pytest.raises(Undecodable):
        forwarded(Forward(frame=frame))  # what reading it would do
    outcome = gateway.send(frame)
    assert outcome == Forward(frame=frame, expect_response=expect_response)


def test_produce_of_valid_records_forwards_the_clients_bytes(validating: Harness) -> None:
    frame = produce(9, {("orders", 0): TRACED, ("plain", 0): UNTRACED})
    assert_forwarded_as_sent(validating.send(frame), frame)


@pytest.mark.parametrize("version", range(3, 10))
def test_produce_of_a_rejected_record_is_invalid_record(validating: Harness, version: int) -> None:
    answer = answer_of(validating.send(produce(version, {("orders", 0): UNTRACED})))
    [(item, code, message)] = items(PRODUCE, version, answer)
    assert (item, code) == (("orders", 0), INVALID_RECORD)
    if version < 8:  # no record_errors and error_message before KIP-467
        assert message is None
        return
    assert message is not None
    assert message.startswith("One or more records have been rejected due to 2 record errors")
    assert record_errors(version, answer) == {("orders", 0): [(0, NO_TRACE_ID), (1, NO_TRACE_ID)]}


@pytest.mark.parametrize("version", [3, 9])
def test_produce_mixed_forwards_the_valid_partitions_and_merges(
    validating: Harness, version: int
) -> None:
    frame = produce(
        version, {("orders", 0): UNTRACED, ("plain", 0): UNTRACED, ("orders", 1): TRACED}
    )
    outcome = validating.send(frame)
    header, body = forwarded(outcome)
    assert header.api_version == version
    kept = [(t.name, int(p.index)) for t in body.topic_data for p in t.partition_data]
    assert kept == [("orders", 1), ("plain", 0)]
    broker = produce_response(version, {("plain", 0): 0, ("orders", 1): 0})
    answer = validating.broker_answers(outcome, broker)
    assert codes(PRODUCE, version, answer) == [
        (("orders", 0), INVALID_RECORD),
        (("orders", 1), NONE),
        (("plain", 0), NONE),
    ]


def summaries_written(gateway: Harness) -> list[tuple[str, int]]:
    """The produce summaries the audit writes, once it has written everything (closed)."""
    gateway.run(gateway.emitter.close())
    return [
        (e.resource_name, e.event_count) for e in gateway.sink.events if e.event_kind == "summary"
    ]


def test_produce_with_acks_0_and_a_rejection_closes_the_connection(validating: Harness) -> None:
    outcome = validating.send(produce(9, {("orders", 0): UNTRACED, ("plain", 0): TRACED}, acks=0))
    assert isinstance(outcome, Close) and outcome.metric_reason == "rejected_acks0_produce"
    assert summaries_written(validating) == []


@pytest.mark.parametrize("version", [3, 9])
def test_produce_too_short_to_hold_acks_closes_the_connection(
    validating: Harness, version: int
) -> None:
    """Nothing of it can be judged, so nothing of it reaches the broker."""
    frame = produce(version, {("orders", 0): TRACED})
    cut = frame[: parse_request_header(frame).size + 2]
    outcome = validating.send(cut)
    assert isinstance(outcome, Close) and outcome.metric_reason == "bad_body"


def test_produce_with_acks_0_of_valid_records_waits_for_no_answer(validating: Harness) -> None:
    """Read and judged (a validated topic), an acks=0 request still gets no answer from the
    broker: waiting for one would hold every later answer on the connection behind it."""
    frame = produce(9, {("orders", 0): TRACED, ("plain", 0): UNTRACED}, acks=0)
    outcome = validating.send(frame)
    assert isinstance(outcome, Forward) and outcome.frame == frame
    assert outcome.expect_response is False


def test_produce_transactional_with_a_rejection_refuses_every_partition(
    validating: Harness,
) -> None:
    frame = produce(
        9,
        {("orders", 0): UNTRACED, ("orders", 1): TRACED, ("plain", 0): UNTRACED},
        transactional_id="tx-1",
    )
    answer = answer_of(validating.send(frame))
    results = items(PRODUCE, 9, answer)
    assert [(item, code) for item, code, _ in results] == [
        (("orders", 0), INVALID_RECORD),
        (("orders", 1), INVALID_RECORD),
        (("plain", 0), INVALID_RECORD),
    ]
    assert all(m is not None and m.startswith("Not written") for _, _, m in results[1:])
    # nothing of it is written, so nothing of it is counted as written in the summaries
    assert summaries_written(validating) == []


def test_produce_to_the_gateways_own_topics_is_refused(
    gateway_with: Callable[..., Harness],
) -> None:
    gateway = gateway_with(own_topics=["_kpg_audit"])
    outcome = gateway.send(produce(9, {("_kpg_audit", 0): TRACED, ("plain", 0): TRACED}))
    _, body = forwarded(outcome)
    assert [t.name for t in body.topic_data] == ["plain"]
    answer = gateway.broker_answers(outcome, produce_response(9, {("plain", 0): 0}))
    assert items(PRODUCE, 9, answer) == [
        (
            ("_kpg_audit", 0),
            TOPIC_AUTHORIZATION_FAILED,
            "Topic '_kpg_audit' is written by the gateway only.",
        ),
        (("plain", 0), NONE, None),
    ]


# --- Produce v13: topics named by id (KIP-516), judged by the names they resolve to --------


@pytest.fixture
def validating_by_id(validating: Harness) -> tuple[Harness, uuid.UUID, uuid.UUID]:
    """``orders`` validated (trace-id) and ``plain`` not, both known to the cluster."""
    return validating, validating.cluster.add_topic("orders"), validating.cluster.add_topic("plain")


def test_produce_v13_validates_a_topic_named_by_id_as_by_name(
    validating_by_id: tuple[Harness, uuid.UUID, uuid.UUID],
) -> None:
    gateway, orders, plain = validating_by_id
    unknown = uuid.uuid4()
    frame = produce(
        13,
        {(orders, 0): UNTRACED, (plain, 0): UNTRACED, (unknown, 2): TRACED, (orders, 1): TRACED},
    )
    outcome = gateway.send(frame)
    header, body = forwarded(outcome)
    assert header.api_version == 13
    kept = [(t.topic_id, int(p.index)) for t in body.topic_data for p in t.partition_data]
    assert kept == [(orders, 1), (plain, 0)]
    answer = gateway.broker_answers(outcome, produce_response(13, {(plain, 0): 0, (orders, 1): 0}))
    assert [(item, code) for item, code, _ in items(PRODUCE, 13, answer)] == [
        ((orders, 0), INVALID_RECORD),
        ((orders, 1), NONE),
        ((plain, 0), NONE),
        ((unknown, 2), UNKNOWN_TOPIC_ID),
    ]
    assert record_errors(13, answer)[(orders, 0)] == [(0, NO_TRACE_ID), (1, NO_TRACE_ID)]
    # judged and audited under the topic's name, as a v9 request naming it
    assert gateway.decisions("Produce", gateway.services.records.name, "denied") == 1


def test_produce_v13_of_valid_records_forwards_the_clients_bytes(
    validating_by_id: tuple[Harness, uuid.UUID, uuid.UUID],
) -> None:
    gateway, orders, plain = validating_by_id
    frame = produce(13, {(orders, 0): TRACED, (plain, 0): UNTRACED})
    outcome = gateway.send(frame)
    assert isinstance(outcome, Forward) and outcome.frame == frame


def test_produce_v13_learns_topic_ids_once_and_again_for_a_new_id(
    validating_by_id: tuple[Harness, uuid.UUID, uuid.UUID], monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway, orders, _ = validating_by_id
    monkeypatch.setattr("gateway.handlers._partitioned._ASK_INTERVAL_S", 0.0)
    monkeypatch.setattr("gateway.handlers._partitioned._GATEWAY_ASK_INTERVAL_S", 0.0)

    def lookups() -> int:
        return gateway.cluster.asked.count(("describe_all_topics", ()))

    answer_of(gateway.send(produce(13, {(orders, 0): UNTRACED})))
    answer_of(gateway.send(produce(13, {(orders, 0): UNTRACED})))
    assert lookups() == 1
    later = gateway.cluster.add_topic("later")
    gateway.set_validation_policy("later", "trace-id")
    # beside an id already known, the new one is asked for all the same
    answer = answer_of(gateway.send(produce(13, {(orders, 0): UNTRACED, (later, 0): UNTRACED})))
    assert lookups() == 2
    assert [(item, code) for item, code, _ in items(PRODUCE, 13, answer)] == [
        ((orders, 0), INVALID_RECORD),
        ((later, 0), INVALID_RECORD),
    ]


def test_produce_v13_asks_for_every_topic_at_most_once_a_second_per_connection(
    validating_by_id: tuple[Harness, uuid.UUID, uuid.UUID], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each made-up id would have the gateway ask for and decode the cluster's whole
    metadata: within the second after it asked, an id it does not know is UNKNOWN_TOPIC_ID
    (retriable) without asking again."""
    gateway, orders, _ = validating_by_id
    monkeypatch.setattr(
        "gateway.handlers._partitioned._ASK_INTERVAL_S", 3600.0, raising=False
    )  # no clock

    def lookups() -> int:
        return gateway.cluster.asked.count(("describe_all_topics", ()))

    answer_of(gateway.send(produce(13, {(orders, 0): UNTRACED})))
    for _ in range(20):
        answer = answer_of(gateway.send(produce(13, {(uuid.uuid4(), 0): UNTRACED})))
        assert [code for _, code, _ in items(PRODUCE, 13, answer)] == [UNKNOWN_TOPIC_ID]
    assert lookups() == 1


def test_produce_v13_to_topics_nobody_validates_is_summarized_by_name(
    gateway: Harness,
) -> None:
    """With the audit on, a v13 request to unvalidated topics is still counted in the produce
    summaries (every Produce is), under the names its ids resolve to, not the ids; the
    client's bytes go on as sent."""
    plain = gateway.cluster.add_topic("plain")
    frame = produce(13, {(plain, 0): UNTRACED, (plain, 1): UNTRACED})
    outcome = gateway.send(frame)
    assert isinstance(outcome, Forward) and outcome.frame == frame
    summaries = gateway.summarizer.flush(60_000)
    assert [(e.resource_name, e.event_count) for e in summaries] == [("plain", 1)]


def test_produce_v13_to_the_gateways_own_topics_is_refused(
    gateway_with: Callable[..., Harness],
) -> None:
    gateway = gateway_with(own_topics=["_kpg_audit"])
    own, plain = gateway.cluster.add_topic("_kpg_audit"), gateway.cluster.add_topic("plain")
    for _ in range(2):  # the second time with the own ids learnt: the unread path's check
        outcome = gateway.send(produce(13, {(own, 0): TRACED, (plain, 0): TRACED}))
        _, body = forwarded(outcome)
        assert [t.topic_id for t in body.topic_data] == [plain]
        answer = gateway.broker_answers(outcome, produce_response(13, {(plain, 0): 0}))
        assert items(PRODUCE, 13, answer) == [
            (
                (own, 0),
                TOPIC_AUTHORIZATION_FAILED,
                "Topic '_kpg_audit' is written by the gateway only.",
            ),
            ((plain, 0), NONE, None),
        ]
    # with nothing validated and the own ids learnt, a request to other topics goes unread
    frame = produce(13, {(plain, 0): TRACED})
    outcome = gateway.send(frame)
    assert outcome == Forward(frame=frame, expect_response=True, on_response=outcome.on_response)
    assert gateway.broker_answers(outcome, produce_response(13, {(plain, 0): 0})) == (
        produce_response(13, {(plain, 0): 0})
    )


# --- DescribeConfigs -------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(1, 5))
def test_describe_configs_adds_the_validation_policy_to_a_forwarded_topic(
    gateway: Harness, version: int
) -> None:
    gateway.set_validation_policy("orders", "trace-id")
    frame = describe_configs(version, [(TOPIC, "orders"), (TOPIC, "plain")])
    outcome = gateway.send(frame)
    assert isinstance(outcome, Forward) and outcome.frame == frame
    broker = describe_configs_response(
        version, [(TOPIC, "orders", {"retention.ms": "1"}), (TOPIC, "plain", {"retention.ms": "2"})]
    )
    answer = gateway.broker_answers(outcome, broker)
    assert configs_of(version, answer) == [
        {"retention.ms": ("1", 1), POLICY_KEY: ("trace-id", 1)},
        {"retention.ms": ("2", 1)},
    ]


def test_describe_configs_without_gateway_configs_forwards_the_clients_bytes(
    gateway: Harness,
) -> None:
    # (a BROKER resource's answer is rewritten: its addresses hidden, see
    # tests/adversarial/test_node_listeners.py)
    frame = describe_configs(4, [(TOPIC, "plain"), (TOPIC, "other")])
    assert_forwarded_as_sent(gateway.send(frame), frame)


@pytest.mark.parametrize(
    ("resource", "principal"),
    [((USER_CLIENT, "alice:app-1"), "User:admin"), ((CLIENT, "app-1"), "User:alice")],
    ids=["user-client", "client"],
)
def test_describe_configs_of_dynamic_client_configs_is_answered_here(
    gateway: Harness, resource: tuple[int, str], principal: str
) -> None:
    key = client_configs.store_key("alice", "app-1", "acks")
    gateway.run(gateway.store.put(client_configs.STATE_NAMESPACE, key, "all"))
    answer = answer_of(gateway.send(describe_configs(4, [resource]), principal=principal))
    assert codes(DESCRIBE_CONFIGS, 4, answer) == [(resource, NONE)]
    assert configs_of(4, answer) == [{"acks": ("all", 120)}]


def test_describe_configs_split_between_the_broker_and_the_gateway(gateway: Harness) -> None:
    frame = describe_configs(3, [(USER_CLIENT, "alice:app-1"), (TOPIC, "plain")])
    outcome = gateway.send(frame)
    _, body = forwarded(outcome)
    assert [(r.resource_type, r.resource_name) for r in body.resources] == [(TOPIC, "plain")]
    broker = describe_configs_response(3, [(TOPIC, "plain", {"retention.ms": "2"})])
    answer = gateway.broker_answers(outcome, broker)
    assert codes(DESCRIBE_CONFIGS, 3, answer) == [
        ((USER_CLIENT, "alice:app-1"), NONE),
        ((TOPIC, "plain"), NONE),
    ]
    assert configs_of(3, answer) == [{}, {"retention.ms": ("2", 1)}]


# --- the APIs that name topic partitions -----------------------------------------------------
#
# Every topic they name gets the same checks first: an illegal name is INVALID_TOPIC_EXCEPTION
# and the gateway's own topics TOPIC_AUTHORIZATION_FAILED, partition by partition, never
# forwarded. "orders/" is an alias a broker may read as "orders" (issue 11).

OWN = "_kpg_audit"
ALIAS = "orders/"
OWN_REFUSAL = "This topic is the policy gateway's own; clients may not read, write or change it."
ILLEGAL = (
    'Topic name "orders/" is illegal, it contains a character other than ASCII alphanumerics, '
    "'.', '_' and '-'"
)
NO_UNCLEAN = {
    "rules": [
        *RULES,
        {
            "name": "no-unclean",
            "type": "forbidden.configs",
            "configs": ["unclean.leader.election.enable"],
        },
    ]
}


@pytest.fixture
def guarded(gateway_with: Callable[..., Harness]) -> Harness:
    """A gateway whose own topic is ``_kpg_audit``, in a cluster that has it (three
    partitions, as every topic here) besides orders, payments and protected-billing."""
    gateway = gateway_with(own_topics=[OWN])
    for name in ("orders", "payments", "protected-billing", OWN):
        gateway.cluster.add_topic(name)
    return gateway


def audited(gateway: Harness) -> list[tuple[str, str, str, str | None]]:
    """(resource, action, verdict, message) of each audit event, in order."""
    return [(e.resource_name, e.action, e.verdict, e.message) for e in gateway.sink.events]


def decided(gateway: Harness) -> list[tuple[str, str, str, str | None]]:
    """:func:`audited`, each event once (a topic's decision is one event whatever its
    partitions: test_a_topic_decision_is_audited_once_whatever_its_partitions)."""
    return list(dict.fromkeys(audited(gateway)))


# --- DeleteRecords and OffsetDelete ----------------------------------------------------------

DATA_APIS = [(DELETE_RECORDS, v) for v in range(3)] + [(OFFSET_DELETE, 0)]
DATA_IDS = [
    f"{'DeleteRecords' if k == DELETE_RECORDS else 'OffsetDelete'}-v{v}" for k, v in DATA_APIS
]
DATA_ACTIONS = {DELETE_RECORDS: "delete_records", OFFSET_DELETE: "delete_offsets"}
DATA_VERBS = {
    DELETE_RECORDS: "delete records from it",
    OFFSET_DELETE: "delete a consumer group's offsets of it",
}


def data_request(api_key: int, version: int, *partitions: Partition) -> bytes:
    if api_key == DELETE_RECORDS:
        return delete_records(version, *partitions)
    return offset_delete(version, "billing-app", *partitions)


@pytest.mark.parametrize(("api_key", "version"), DATA_APIS, ids=DATA_IDS)
def test_data_deletion_all_allowed_forwards_the_clients_bytes(
    guarded: Harness, api_key: int, version: int
) -> None:
    frame = data_request(api_key, version, ("orders", 0), ("orders", 1), ("payments", 2))
    assert_forwarded_as_sent(guarded.send(frame), frame)
    action = DATA_ACTIONS[api_key]
    assert decided(guarded) == [
        ("orders", action, "allowed", None),
        ("payments", action, "allowed", None),
    ]


@pytest.mark.parametrize(("api_key", "version"), DATA_APIS, ids=DATA_IDS)
def test_data_deletion_of_protected_own_or_illegal_topics_is_answered_here(
    guarded: Harness, api_key: int, version: int
) -> None:
    """DeleteRecords and OffsetDelete answers carry no message: the reason is in the audit."""
    frame = data_request(
        api_key,
        version,
        ("protected-billing", 0),
        ("protected-billing", 1),
        (OWN, 0),
        (ALIAS, 0),
    )
    assert items(api_key, version, answer_of(guarded.send(frame))) == [
        (("protected-billing", 0), POLICY_VIOLATION, None),
        (("protected-billing", 1), POLICY_VIOLATION, None),
        ((OWN, 0), TOPIC_AUTHORIZATION_FAILED, None),
        ((ALIAS, 0), INVALID_TOPIC_EXCEPTION, None),
    ]
    assert decided(guarded) == [
        (
            "protected-billing",
            DATA_ACTIONS[api_key],
            "denied",
            protected("protected-billing", DATA_VERBS[api_key]),
        ),
        (OWN, DATA_ACTIONS[api_key], "denied", OWN_REFUSAL),
    ]


@pytest.mark.parametrize(("api_key", "version"), DATA_APIS, ids=DATA_IDS)
def test_data_deletion_mixed_forwards_the_allowed_partitions_and_merges_in_request_order(
    guarded: Harness, api_key: int, version: int
) -> None:
    frame = data_request(
        api_key,
        version,
        ("protected-billing", 0),
        ("orders", 0),
        ("orders", 1),
        (OWN, 1),
        (ALIAS, 0),
        ("payments", 2),
    )
    outcome = guarded.send(frame)
    header, body = forwarded(outcome)
    assert (header.api_version, header.correlation_id) == (version, CORRELATION_ID)
    if api_key == OFFSET_DELETE:
        assert body.group_id == "billing-app"
    assert forwarded_partitions(outcome) == [("orders", 0), ("orders", 1), ("payments", 2)]
    broker = partitioned_response(
        api_key,
        version,
        {("orders", 0): NONE, ("orders", 1): NONE, ("payments", 2): UNKNOWN_TOPIC_OR_PARTITION},
    )
    answer = guarded.broker_answers(outcome, broker)
    assert codes(api_key, version, answer) == [
        (("protected-billing", 0), POLICY_VIOLATION),
        (("orders", 0), NONE),
        (("orders", 1), NONE),
        ((OWN, 1), TOPIC_AUTHORIZATION_FAILED),
        ((ALIAS, 0), INVALID_TOPIC_EXCEPTION),
        (("payments", 2), UNKNOWN_TOPIC_OR_PARTITION),
    ]
    if api_key == DELETE_RECORDS:  # the broker's own numbers where it answered
        watermarks = partition_values(api_key, version, answer, "low_watermark")
        assert watermarks == [-1, 10, 10, -1, -1, 10]


def test_data_deletion_by_an_allowed_principal_is_forwarded(
    gateway_with: Callable[..., Harness],
) -> None:
    policies = {
        "rules": [
            {
                "name": "protected",
                "type": "protected.topics",
                "topics": ["protected-.*"],
                "allowed.principals": ["User:ops"],
            }
        ]
    }
    gateway = gateway_with(policies=policies)
    frame = delete_records(2, ("protected-billing", 0))
    assert_forwarded_as_sent(gateway.send(frame, principal="User:ops"), frame)
    assert items(DELETE_RECORDS, 2, answer_of(gateway.send(frame, principal="User:eve"))) == [
        (("protected-billing", 0), POLICY_VIOLATION, None)
    ]


@pytest.mark.parametrize(
    "frame",
    [
        delete_records(2, ("protected-billing", 0), ("protected-billing", 1), ("orders", 0)),
        offset_delete(0, "app", ("protected-billing", 0), ("protected-billing", 1), ("orders", 0)),
        elect_leaders(
            2,
            [("protected-billing", 0), ("protected-billing", 1), ("orders", 0)],
            election_type=UNCLEAN,
        ),
        alter_partition_reassignments(
            1, ("protected-billing", 0, (2,)), ("protected-billing", 1, (2,)), ("orders", 0, (2,))
        ),
    ],
    ids=["DeleteRecords", "OffsetDelete", "ElectLeaders", "AlterPartitionReassignments"],
)
def test_a_topic_decision_is_audited_once_whatever_its_partitions(
    guarded: Harness, frame: bytes
) -> None:
    api = API_NAMES[parse_request_header(frame).api_key]
    guarded.send(frame)
    assert [(e.resource_name, e.verdict) for e in guarded.sink.events] == [
        ("protected-billing", "denied"),
        ("orders", "allowed"),
    ]
    assert guarded.decisions(api, "protected", "denied") == 1


# --- ListOffsets, OffsetForLeaderEpoch, DescribeProducers: reads ----------------------------

READS: dict[int, Callable[..., bytes]] = {
    LIST_OFFSETS: list_offsets,
    OFFSET_FOR_LEADER_EPOCH: offset_for_leader_epoch,
    DESCRIBE_PRODUCERS: describe_producers,
}
READ_APIS = (
    [(LIST_OFFSETS, v) for v in range(1, 12)]
    + [(OFFSET_FOR_LEADER_EPOCH, v) for v in range(2, 5)]
    + [(DESCRIBE_PRODUCERS, 0)]
)
"""Every version each takes (kio's)."""
READ_NAMES = {
    LIST_OFFSETS: "ListOffsets",
    OFFSET_FOR_LEADER_EPOCH: "OffsetForLeaderEpoch",
    DESCRIBE_PRODUCERS: "DescribeProducers",
}
READ_IDS = [f"{READ_NAMES[k]}-v{v}" for k, v in READ_APIS]
READ_VALUES = {LIST_OFFSETS: "offset", OFFSET_FOR_LEADER_EPOCH: "end_offset"}
"""A number the broker answers each partition with (10 in the answers written here)."""


@pytest.mark.parametrize(("api_key", "version"), READ_APIS, ids=READ_IDS)
def test_reads_of_any_other_topic_forward_the_clients_bytes(
    guarded: Harness, api_key: int, version: int
) -> None:
    """Protected topics are readable: the rules guard changes, not reads."""
    frame = READS[api_key](version, ("orders", 0), ("protected-billing", 1), ("ghost", 0))
    assert_forwarded_as_sent(guarded.send(frame), frame)
    assert guarded.sink.events == []


@pytest.mark.parametrize(("api_key", "version"), READ_APIS, ids=READ_IDS)
def test_reads_of_own_or_illegal_topics_are_answered_here(
    guarded: Harness, api_key: int, version: int
) -> None:
    frame = READS[api_key](version, (OWN, 0), (OWN, 2), (ALIAS, 1))
    with_message = api_key == DESCRIBE_PRODUCERS  # the others' answers carry no message
    assert items(api_key, version, answer_of(guarded.send(frame))) == [
        ((OWN, 0), TOPIC_AUTHORIZATION_FAILED, OWN_REFUSAL if with_message else None),
        ((OWN, 2), TOPIC_AUTHORIZATION_FAILED, OWN_REFUSAL if with_message else None),
        ((ALIAS, 1), INVALID_TOPIC_EXCEPTION, ILLEGAL if with_message else None),
    ]


@pytest.mark.parametrize(("api_key", "version"), READ_APIS, ids=READ_IDS)
def test_reads_mixed_forward_the_other_topics_and_merge_in_request_order(
    guarded: Harness, api_key: int, version: int
) -> None:
    frame = READS[api_key](version, ("orders", 0), ("orders", 2), (OWN, 0), (ALIAS, 0))
    outcome = guarded.send(frame)
    assert forwarded(outcome)[0].api_version == version
    assert forwarded_partitions(outcome) == [("orders", 0), ("orders", 2)]
    broker = partitioned_response(
        api_key, version, {("orders", 0): NONE, ("orders", 2): NOT_COORDINATOR}
    )
    answer = guarded.broker_answers(outcome, broker)
    assert codes(api_key, version, answer) == [
        (("orders", 0), NONE),
        (("orders", 2), NOT_COORDINATOR),
        ((OWN, 0), TOPIC_AUTHORIZATION_FAILED),
        ((ALIAS, 0), INVALID_TOPIC_EXCEPTION),
    ]
    if api_key in READ_VALUES:
        assert partition_values(api_key, version, answer, READ_VALUES[api_key]) == [10, 10, -1, -1]


# --- Fetch -----------------------------------------------------------------------------------

FETCH_BY_NAME = range(4, 13)
"""The versions the gateway takes (up to 15) that kio ships (from 4) and name topics."""
FETCH_BY_ID = range(13, 16)
GARBAGE = b"bytes no Fetch schema reads"


def test_fetch_through_a_gateway_without_own_topics_is_forwarded_unread(
    gateway: Harness,
) -> None:
    """Nothing is read: a frame that does not decode goes through as sent."""
    for frame in (fetch(12, ("orders", 0)) + GARBAGE, fetch(13, (uuid.uuid4(), 0)) + GARBAGE):
        assert gateway.send(frame) == Forward(frame=frame)
    assert gateway.cluster.asked == []


@pytest.mark.parametrize("version", [0, 1, 2, 3, *FETCH_BY_NAME])
def test_fetch_whose_bytes_name_no_own_topic_is_forwarded_unread(
    guarded: Harness, version: int
) -> None:
    build = legacy_fetch if version < 4 else fetch
    frame = build(version, ("orders", 0), ("protected-billing", 1)) + GARBAGE
    assert guarded.send(frame) == Forward(frame=frame)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_fetch_older_than_v4_naming_an_own_topic_closes_the_connection(
    guarded: Harness, version: int
) -> None:
    """kio cannot read Fetch v0-v3, so a request that may name an own topic cannot be split."""
    outcome = guarded.send(legacy_fetch(version, ("orders", 0), (OWN, 0)))
    assert isinstance(outcome, Close) and outcome.metric_reason == "undecodable"


@pytest.mark.parametrize("version", FETCH_BY_NAME)
def test_fetch_naming_an_own_topic_is_read_and_those_partitions_refused(
    guarded: Harness, version: int
) -> None:
    frame = fetch(version, ("orders", 0), (OWN, 0), (OWN, 1), ("payments", 1))
    outcome = guarded.send(frame)
    assert forwarded(outcome)[0].api_version == version
    assert forwarded_partitions(outcome) == [("orders", 0), ("payments", 1)]
    broker = partitioned_response(FETCH, version, {("orders", 0): NONE, ("payments", 1): NONE})
    answer = guarded.broker_answers(outcome, broker)
    assert codes(FETCH, version, answer) == [
        (("orders", 0), NONE),
        ((OWN, 0), TOPIC_AUTHORIZATION_FAILED),
        ((OWN, 1), TOPIC_AUTHORIZATION_FAILED),
        (("payments", 1), NONE),
    ]
    assert partition_values(FETCH, version, answer, "high_watermark") == [10, -1, -1, 10]


@pytest.mark.parametrize("version", FETCH_BY_NAME)
def test_fetch_of_an_own_topic_or_an_alias_of_it_alone_is_answered_here(
    guarded: Harness, version: int
) -> None:
    alias = f"{OWN}/"
    answer = answer_of(guarded.send(fetch(version, (OWN, 2), (alias, 0))))
    assert codes(FETCH, version, answer) == [
        ((OWN, 2), TOPIC_AUTHORIZATION_FAILED),
        ((alias, 0), INVALID_TOPIC_EXCEPTION),
    ]


@pytest.mark.parametrize("version", FETCH_BY_NAME)
def test_fetch_naming_an_own_topic_and_allowed_ones_only_is_forwarded_as_sent(
    guarded: Harness, version: int
) -> None:
    """A topic whose name holds the own topic's (so its bytes are read) is someone else's."""
    guarded.cluster.add_topic(f"{OWN}-archive")
    frame = fetch(version, (f"{OWN}-archive", 0), ("orders", 0))
    assert_forwarded_as_sent(guarded.send(frame), frame)


@pytest.mark.parametrize("version", FETCH_BY_ID)
def test_fetch_by_topic_id_learns_the_own_topics_ids_once_and_refuses_them(
    guarded: Harness, version: int
) -> None:
    cluster = guarded.cluster
    own, orders, payments = (cluster.id_of(n) for n in (OWN, "orders", "payments"))

    first = fetch(version, (orders, 0))  # ids not learned yet: read, and the ids learned
    assert_forwarded_as_sent(guarded.send(first), first)
    assert cluster.asked == [("describe_all_topics", ())]

    unread = fetch(version, (payments, 1)) + GARBAGE  # no own id in its bytes: unread
    assert guarded.send(unread) == Forward(frame=unread)

    outcome = guarded.send(fetch(version, (own, 0), (own, 2), (orders, 1)))
    assert forwarded_partitions(outcome) == [(orders, 1)]
    answer = guarded.broker_answers(outcome, partitioned_response(FETCH, version, {(orders, 1): 0}))
    assert codes(FETCH, version, answer) == [
        ((own, 0), TOPIC_AUTHORIZATION_FAILED),
        ((own, 2), TOPIC_AUTHORIZATION_FAILED),
        ((orders, 1), NONE),
    ]
    # learnt once a minute, not for each request read: a Fetch naming an own topic's id
    # made the gateway ask and decode the cluster's whole Metadata each time
    assert cluster.asked == [("describe_all_topics", ())]
    assert items(FETCH, version, answer_of(guarded.send(fetch(version, (own, 1))))) == [
        ((own, 1), TOPIC_AUTHORIZATION_FAILED, None)
    ]
    # each refusal audited once per request, under the topic's name, not its id
    assert audited(guarded) == [(OWN, "fetch", "denied", OWN_REFUSAL)] * 2


INCREMENTAL_SESSION = [pytest.param(v, id=f"v{v}") for v in (7, 12, 13, 15)]
"""Fetch sessions (KIP-227) from v7; by name and by id."""


@pytest.mark.parametrize("version", INCREMENTAL_SESSION)
def test_an_incremental_fetch_keeps_the_sessions_partitions_it_did_not_name(
    guarded: Harness, version: int
) -> None:
    """An incremental fetch (session id and epoch over 0) lists only the partitions whose
    fetch state changed; Kafka answers it with every partition of the session that has news
    (records, a moved high watermark), named or not. Read to refuse an own topic, the
    merged answer held the request's partitions only: orders-0's records, already counted
    as fetched by the broker's session, never reached the client. The broker's answer is
    kept whole, the gateway's refusals added; an unnamed partition of an own topic in it is
    refused still.

    Tansu keeps no fetch sessions (it answers session id 0 to every Fetch), so the broker's
    incremental answer is written here."""
    cluster = guarded.cluster
    by_id = version >= 13
    own, orders = (cluster.id_of(n) if by_id else n for n in (OWN, "orders"))
    if by_id:
        guarded.send(fetch(version, (orders, 0)))  # the ids learnt
    payload = dataclasses.replace(
        fetch_payload(version, (own, 0), (orders, 1)), session_id=i32(7), session_epoch=i32(3)
    )
    outcome = guarded.send(request(FETCH, version, payload))
    assert forwarded_partitions(outcome) == [(orders, 1)]
    broker = in_session(
        partitioned_response(
            FETCH, version, {(orders, 0): NONE, (orders, 1): NONE, (own, 2): NONE}
        ),
        version,
    )
    answer = guarded.broker_answers(outcome, broker)
    # the partitions refused never reached the broker's session: the client's is closed, and
    # its next fetch, a full one, names them again
    assert int(decode_response(FETCH, version, answer).session_id) == 0
    assert codes(FETCH, version, answer) == [
        ((own, 0), TOPIC_AUTHORIZATION_FAILED),
        ((own, 2), TOPIC_AUTHORIZATION_FAILED),
        ((orders, 1), NONE),
        ((orders, 0), NONE),
    ]


def in_session(frame: bytes, version: int, session_id: int = 7) -> bytes:
    """A broker's Fetch answer, as given in session ``session_id``."""
    payload = decode_response(FETCH, version, frame)
    return encode_response(
        CORRELATION_ID, FETCH, version, dataclasses.replace(payload, session_id=i32(session_id))
    )


@pytest.mark.parametrize("version", INCREMENTAL_SESSION)
def test_a_fetch_opening_a_session_with_a_refused_partition_opens_none(
    guarded: Harness, version: int
) -> None:
    """A full fetch asking for a session (id 0, epoch 0) that names an own topic's partition:
    the broker's session would hold the other partitions only, while the client's holds
    them all, and it would never fetch the refused one again (an id not known yet, say,
    answered UNKNOWN_TOPIC_ID). The rest goes to the broker sessionless (epoch -1), and the
    answer opens no session: the next fetch is a full one again."""
    cluster = guarded.cluster
    by_id = version >= 13
    own, orders = (cluster.id_of(n) if by_id else n for n in (OWN, "orders"))
    if by_id:
        guarded.send(fetch(version, (orders, 0)))  # the ids learnt
    payload = dataclasses.replace(
        fetch_payload(version, (own, 0), (orders, 1)), session_id=i32(0), session_epoch=i32(0)
    )
    outcome = guarded.send(request(FETCH, version, payload))
    header, body = forwarded(outcome)
    assert (int(body.session_id), int(body.session_epoch)) == (0, -1)
    answer = guarded.broker_answers(
        outcome, partitioned_response(FETCH, version, {(orders, 1): NONE})
    )
    assert int(decode_response(FETCH, version, answer).session_id) == 0
    # nothing refused: the session is asked for as the client asked
    plain = request(
        FETCH,
        version,
        dataclasses.replace(
            fetch_payload(version, (orders, 1)), session_id=i32(0), session_epoch=i32(0)
        ),
    )
    assert_forwarded_as_sent(guarded.send(plain), plain)


@pytest.mark.parametrize("version", FETCH_BY_ID)
def test_own_topic_ids_one_client_cannot_see_are_not_taken_as_all_of_them(
    guarded: Harness, version: int
) -> None:
    """The broker hides the own topic from alice (its ACLs): her link's answer lacks its id.
    Taken as all of them, it let mallory's fetch by that id go on unread, past the own-topic
    refusal, for a minute. The id is not known: mallory's fetch is read, and refused, as the
    own topic's once her link may ask, else as an id not known (UNKNOWN_TOPIC_ID, retried
    after a metadata refresh); never forwarded."""
    full = guarded.cluster
    own, orders = full.id_of(OWN), full.id_of("orders")
    guarded.cluster = dataclasses.replace(
        full,
        topics={n: t for n, t in full.topics.items() if n != OWN},
        topic_ids={i: n for i, n in full.topic_ids.items() if n != OWN},
        asked=[],
    )
    first = fetch(version, (orders, 0))
    assert_forwarded_as_sent(guarded.send(first, principal="User:alice"), first)
    guarded.cluster = full
    outcome = guarded.send(fetch(version, (own, 0)), principal="User:mallory")
    [(item, error, _)] = items(FETCH, version, answer_of(outcome))
    assert item == (own, 0)
    assert error in (TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_ID)


# --- ShareFetch and ShareAcknowledge: topics by id, the gateway's own refused ---------------


def share_request(api_key: int, version: int, topic_id: uuid.UUID) -> bytes:
    """A ShareFetch (78) or ShareAcknowledge (79) of partition 0 of ``topic_id``."""
    m = importlib.import_module(
        f"kio.schema.{'share_fetch' if api_key == 78 else 'share_acknowledge'}.v{version}.request"
    )
    if api_key == 78:
        topic = m.FetchTopic(
            topic_id=topic_id,
            partitions=(m.FetchPartition(partition_index=0, acknowledgement_batches=()),),
        )
        payload = make(
            m.ShareFetchRequest,
            group_id="g",
            member_id="m",
            share_session_epoch=0,
            max_wait=TIMEOUT,
            min_bytes=1,
            max_bytes=1 << 20,
            max_records=500,
            batch_size=500,
            topics=(topic,),
            forgotten_topics_data=(),
        )
    else:
        partition = m.AcknowledgePartition(partition_index=0, acknowledgement_batches=())
        payload = m.ShareAcknowledgeRequest(
            group_id="g",
            member_id="m",
            share_session_epoch=1,
            topics=(m.AcknowledgeTopic(topic_id=topic_id, partitions=(partition,)),),
        )
    return request(api_key, version, payload)


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("api_key", [78, 79], ids=["ShareFetch", "ShareAcknowledge"])
def test_share_requests_naming_an_own_topic_id_are_refused(
    guarded: Harness, api_key: int, version: int
) -> None:
    cluster = guarded.cluster
    other = share_request(api_key, version, cluster.id_of("orders"))
    outcome = guarded.send(other)
    assert isinstance(outcome, Forward) and outcome.frame == other
    assert cluster.asked == [("describe_all_topics", ())]  # learnt once
    refused = guarded.send(share_request(api_key, version, cluster.id_of(OWN)))
    assert isinstance(refused, Close) and refused.metric_reason == "own_topic"
    assert cluster.asked == [("describe_all_topics", ())]


# --- ElectLeaders ----------------------------------------------------------------------------

ELECTIONS = [1, 2]
"""The versions with an election type (v0 elects preferred leaders only)."""


@pytest.fixture
def electing(gateway_with: Callable[..., Harness]) -> Harness:
    """A gateway whose rules forbid unclean.leader.election.enable."""
    gateway = gateway_with(own_topics=[OWN], policies=NO_UNCLEAN)
    for name in ("orders", "payments", "protected-billing", OWN):
        gateway.cluster.add_topic(name)
    return gateway


def unclean_forbidden(topic: str) -> str:
    return f"topic {topic}: config unclean.leader.election.enable may not be set (rule no-unclean)"


@pytest.mark.parametrize("version", [0, 1, 2])
def test_elect_preferred_leaders_is_forwarded_unjudged(electing: Harness, version: int) -> None:
    """A preferred election changes no data: even of a protected topic, nothing is asked."""
    frame = elect_leaders(version, [("orders", 0), ("protected-billing", 1)])
    assert_forwarded_as_sent(electing.send(frame), frame)
    everything = elect_leaders(version, None)
    assert_forwarded_as_sent(electing.send(everything), everything)
    assert (electing.cluster.asked, electing.sink.events) == ([], [])


@pytest.mark.parametrize("version", ELECTIONS)
def test_elect_unclean_leaders_where_a_rule_forbids_the_config_is_denied(
    electing: Harness, version: int
) -> None:
    frame = elect_leaders(
        version, [("orders", 0), ("orders", 1), ("payments", 2)], election_type=UNCLEAN
    )
    answer = answer_of(electing.send(frame))
    assert items(ELECT_LEADERS, version, answer) == [
        (("orders", 0), POLICY_VIOLATION, unclean_forbidden("orders")),
        (("orders", 1), POLICY_VIOLATION, unclean_forbidden("orders")),
        (("payments", 2), POLICY_VIOLATION, unclean_forbidden("payments")),
    ]
    assert top_level(ELECT_LEADERS, version, answer)["error_code"] == NONE
    assert ("describe_configs", ((TOPIC, "orders"), (TOPIC, "payments"))) in electing.cluster.asked
    assert decided(electing) == [
        ("orders", "elect_unclean_leader", "denied", unclean_forbidden("orders")),
        ("payments", "elect_unclean_leader", "denied", unclean_forbidden("payments")),
    ]


@pytest.mark.parametrize("version", ELECTIONS)
def test_elect_unclean_leaders_mixed_forwards_the_allowed_and_merges_in_request_order(
    guarded: Harness, version: int
) -> None:
    """No rule forbids the config here: only protected, own and illegal topics are refused."""
    frame = elect_leaders(
        version,
        [("protected-billing", 0), ("orders", 0), ("orders", 1), (OWN, 0), (ALIAS, 0)],
        election_type=UNCLEAN,
    )
    outcome = guarded.send(frame)
    _, body = forwarded(outcome)
    assert body.election_type == UNCLEAN
    assert forwarded_partitions(outcome) == [("orders", 0), ("orders", 1)]
    broker = partitioned_response(ELECT_LEADERS, version, {("orders", 0): 0, ("orders", 1): 0})
    answer = guarded.broker_answers(outcome, broker)
    assert items(ELECT_LEADERS, version, answer) == [
        (
            ("protected-billing", 0),
            POLICY_VIOLATION,
            protected("protected-billing", "elect an unclean leader for it"),
        ),
        (("orders", 0), NONE, None),
        (("orders", 1), NONE, None),
        ((OWN, 0), TOPIC_AUTHORIZATION_FAILED, OWN_REFUSAL),
        ((ALIAS, 0), INVALID_TOPIC_EXCEPTION, ILLEGAL),
    ]


@pytest.mark.parametrize("version", ELECTIONS)
def test_elect_unclean_leaders_of_every_partition_is_invalid_request(
    guarded: Harness, version: int
) -> None:
    """The gateway judges unclean elections topic by topic, so it must be told the topics.
    The refusal is audited (it was answered with no event: an unclean election of the whole
    cluster, the widest a client can ask for, left no trace)."""
    answer = answer_of(guarded.send(elect_leaders(version, None, election_type=UNCLEAN)))
    assert top_level(ELECT_LEADERS, version, answer)["error_code"] == INVALID_REQUEST
    assert items(ELECT_LEADERS, version, answer) == []
    assert guarded.cluster.asked == []
    [event] = guarded.sink.events
    assert (event.api, event.action, event.resource_type, event.resource_name) == (
        "ElectLeaders",
        "elect_unclean_leader",
        "cluster",
        "",
    )
    assert (event.verdict, event.policy, event.error_code) == ("denied", "gateway", INVALID_REQUEST)
    assert event.message is not None and "topic by topic" in event.message


# --- AlterPartitionReassignments -------------------------------------------------------------


@pytest.fixture
def reassigning(guarded: Harness) -> Harness:
    """orders and payments on broker 1 (replication factor 1); brokers 1-4."""
    guarded.cluster.brokers = [1, 2, 3, 4]
    return guarded


def too_many_replicas(topic: str, factor: int) -> str:
    return (
        f"topic {topic}: replication factor {factor} is above the maximum of 3 (rule replication)"
    )


@pytest.mark.parametrize("version", [0, 1])
def test_reassignments_within_the_rules_forward_the_clients_bytes(
    reassigning: Harness, version: int
) -> None:
    """A move, a cancellation (null replicas) and a replication factor of 3, the maximum."""
    frame = alter_partition_reassignments(
        version, ("orders", 0, (2,)), ("orders", 1, None), ("payments", 0, (1, 2, 3))
    )
    assert_forwarded_as_sent(reassigning.send(frame), frame)
    assert decided(reassigning) == [
        ("orders", "reassign_partitions", "allowed", None),
        ("payments", "reassign_partitions", "allowed", None),
    ]


@pytest.mark.parametrize("version", [0, 1])
def test_reassignments_all_denied_are_answered_here(reassigning: Harness, version: int) -> None:
    """A topic is judged whole: one partition over the limit refuses all of its partitions."""
    frame = alter_partition_reassignments(
        version,
        ("orders", 0, (1, 2, 3, 4)),
        ("orders", 1, (2,)),
        ("protected-billing", 0, (2,)),
        allow_replication_factor_change=False,
    )
    answer = answer_of(reassigning.send(frame))
    assert items(ALTER_PARTITION_REASSIGNMENTS, version, answer) == [
        (("orders", 0), POLICY_VIOLATION, too_many_replicas("orders", 4)),
        (("orders", 1), POLICY_VIOLATION, too_many_replicas("orders", 4)),
        (
            ("protected-billing", 0),
            POLICY_VIOLATION,
            protected("protected-billing", "move its replicas"),
        ),
    ]
    top = top_level(ALTER_PARTITION_REASSIGNMENTS, version, answer)
    assert (top["error_code"], top["error_message"]) == (NONE, None)


@pytest.mark.parametrize("version", [0, 1])
def test_reassignments_mixed_forward_the_allowed_and_merge_in_request_order(
    reassigning: Harness, version: int
) -> None:
    frame = alter_partition_reassignments(
        version,
        ("orders", 0, (1, 2, 3, 4)),
        ("payments", 0, (2,)),
        ("ghost", 0, (1,)),
        (OWN, 0, (2,)),
        ("payments", 1, None),
        ("protected-billing", 0, (2,)),
    )
    outcome = reassigning.send(frame)
    _, body = forwarded(outcome)
    assert [
        (t.name, [(p.partition_index, p.replicas) for p in t.partitions]) for t in body.topics
    ] == [("payments", [(0, (2,)), (1, None)])]
    broker = partitioned_response(
        ALTER_PARTITION_REASSIGNMENTS, version, {("payments", 0): 0, ("payments", 1): 0}
    )
    answer = reassigning.broker_answers(outcome, broker)
    assert items(ALTER_PARTITION_REASSIGNMENTS, version, answer) == [
        (("orders", 0), POLICY_VIOLATION, too_many_replicas("orders", 4)),
        (("payments", 0), NONE, None),
        (("payments", 1), NONE, None),
        (("ghost", 0), UNKNOWN_TOPIC_OR_PARTITION, "The topic 'ghost' does not exist."),
        ((OWN, 0), TOPIC_AUTHORIZATION_FAILED, OWN_REFUSAL),
        (
            ("protected-billing", 0),
            POLICY_VIOLATION,
            protected("protected-billing", "move its replicas"),
        ),
    ]


def test_reassignment_of_a_topic_whose_state_cannot_be_read_is_denied(
    gateway_with: Callable[..., Harness],
) -> None:
    """As for a deletion: a TopicActionPolicy needs the topic's configs, and a topic whose
    configs the broker will not describe is denied by the gateway, not forwarded unjudged."""
    harness = gateway_with(policies=TOPIC_ACTION_POLICIES)
    for name in ("orders", "payments"):
        harness.cluster.add_topic(name)
    harness.cluster.configs[(TOPIC, "payments")] = described(
        TOPIC, "payments", error_code=TOPIC_AUTHORIZATION_FAILED, error_message="not for you"
    )
    frame = alter_partition_reassignments(0, ("orders", 0, (2,)), ("payments", 0, (2,)))
    outcome = harness.send(frame)
    _, body = forwarded(outcome)
    assert [t.name for t in body.topics] == ["orders"]
    broker = partitioned_response(ALTER_PARTITION_REASSIGNMENTS, 0, {("orders", 0): 0})
    answer = harness.broker_answers(outcome, broker)
    message = (
        "the gateway cannot read the state of topic payments that its policies need: "
        "DescribeConfigs answered TOPIC_AUTHORIZATION_FAILED: not for you"
    )
    assert items(ALTER_PARTITION_REASSIGNMENTS, 0, answer) == [
        (("orders", 0), NONE, None),
        (("payments", 0), POLICY_VIOLATION, message),
    ]


# --- DeleteGroups ----------------------------------------------------------------------------


@pytest.fixture
def grouped(gateway: Harness) -> Harness:
    """Groups with committed offsets: billing-app of protected-billing and orders, orders-app
    of orders and payments; idle-app has none."""
    gateway.cluster.committed.update(
        {"billing-app": ("orders", "protected-billing"), "orders-app": ("orders", "payments")}
    )
    return gateway


@pytest.mark.parametrize("version", range(3))
def test_delete_groups_without_offsets_of_protected_topics_forwards_the_clients_bytes(
    grouped: Harness, version: int
) -> None:
    frame = delete_groups(version, "orders-app", "idle-app")
    assert_forwarded_as_sent(grouped.send(frame), frame)
    assert grouped.cluster.asked == [("offset_fetch", (8, "orders-app", "idle-app"))]
    assert audited(grouped) == [
        ("orders-app", "delete_group", "allowed", None),
        ("idle-app", "delete_group", "allowed", None),
    ]


@pytest.mark.parametrize("version", range(3))
def test_delete_groups_with_offsets_of_a_protected_topic_is_answered_here(
    grouped: Harness, version: int
) -> None:
    answer = answer_of(grouped.send(delete_groups(version, "billing-app")))
    assert items(DELETE_GROUPS, version, answer) == [("billing-app", POLICY_VIOLATION, None)]
    assert audited(grouped) == [
        (
            "billing-app",
            "delete_group",
            "denied",
            protected("protected-billing", "delete a consumer group's offsets of it"),
        )
    ]


@pytest.mark.parametrize("version", range(3))
def test_delete_groups_mixed_forwards_the_allowed_and_merges_in_request_order(
    grouped: Harness, version: int
) -> None:
    """A group whose offsets cannot be read gets its coordinator's error (or
    COORDINATOR_NOT_AVAILABLE when the answer leaves it out), never a blind forward; a group
    named twice is answered once, as Kafka answers it."""
    cluster = grouped.cluster
    cluster.group_errors["locked-app"] = GROUP_AUTHORIZATION_FAILED
    cluster.left_out_groups.add("lost-app")
    frame = delete_groups(
        version, "billing-app", "orders-app", "locked-app", "idle-app", "lost-app", "orders-app"
    )
    outcome = grouped.send(frame)
    _, body = forwarded(outcome)
    assert list(dict.fromkeys(body.groups_names)) == ["orders-app", "idle-app"]
    broker = delete_groups_response(version, {"orders-app": NONE, "idle-app": NOT_COORDINATOR})
    answer = grouped.broker_answers(outcome, broker)
    assert codes(DELETE_GROUPS, version, answer) == [
        ("billing-app", POLICY_VIOLATION),
        ("orders-app", NONE),
        ("locked-app", GROUP_AUTHORIZATION_FAILED),
        ("idle-app", NOT_COORDINATOR),
        ("lost-app", COORDINATOR_NOT_AVAILABLE),
    ]


# --- dry-run notes on validate_only ----------------------------------------------------------

DRY_RUN_NAMING = {
    "rules": [*RULES, {"name": "naming", "type": "topic.name", "mode": "dry-run", "pattern": "ok"}]
}


def naming(topic: str) -> str:
    return (
        f"would deny (dry-run): topic name {topic!r} does not match the pattern 'ok' (rule naming)"
    )


@pytest.mark.parametrize("version", [1, 5])
def test_create_topics_validate_only_answers_what_dry_run_rules_would_deny(
    gateway_with: Callable[..., Harness], version: int
) -> None:
    """A real create would succeed, so the topic is answered with success; its message lists
    the dry-run rule. A denied topic's message lists the dry-run rule after the enforced one."""
    gateway = gateway_with(ignores_validate_only=True, policies=DRY_RUN_NAMING)
    frame = create_topics(
        version,
        NewTopic("ok"),
        NewTopic("named"),
        NewTopic("few", num_partitions=1),
        validate_only=True,
    )
    answer = answer_of(gateway.send(frame))
    assert items(CREATE_TOPICS, version, answer) == [
        ("ok", NONE, None),
        ("named", NONE, naming("named")),
        (
            "few",
            POLICY_VIOLATION,
            f"2 policy violations: 1) {too_few('few', 1)}; 2) {naming('few')}",
        ),
    ]


def test_create_topics_dry_run_answered_here_keeps_what_it_fills_beside_the_note(
    gateway_with: Callable[..., Harness],
) -> None:
    """A dry run the gateway answers itself, of a topic a dry-run rule objects to: the answer
    is both the filled-in topic (KIP-525) and the rule's message, not one instead of the
    other."""
    gateway = gateway_with(ignores_validate_only=True, policies=DRY_RUN_NAMING)
    frame = create_topics(7, NewTopic("named", num_partitions=6), validate_only=True)
    answer = answer_of(gateway.send(frame))
    assert dry_run_rows(7, answer) == [("named", NONE, 6, 1, [], True)]
    assert items(CREATE_TOPICS, 7, answer) == [("named", NONE, naming("named"))]


def test_create_topics_validate_only_puts_the_note_on_the_brokers_success_only(
    gateway_with: Callable[..., Harness],
) -> None:
    """In front of a broker that honours validate_only (a scripted answer: Tansu ignores it),
    the note goes on the broker's success and the broker's refusal stands."""
    gateway = gateway_with(policies=DRY_RUN_NAMING)
    frame = create_topics(5, NewTopic("named"), NewTopic("taken"), validate_only=True)
    outcome = gateway.send(frame)
    header, body = forwarded(outcome)
    assert [t.name for t in body.topics] == ["named", "taken"]
    broker = create_topics_response(header.api_version, {"named": 0, "taken": 36})
    assert items(CREATE_TOPICS, 5, gateway.broker_answers(outcome, broker)) == [
        ("named", NONE, naming("named")),
        ("taken", TOPIC_ALREADY_EXISTS, "broker error 36"),
    ]


def test_create_topics_a_real_create_carries_no_dry_run_note(
    gateway_with: Callable[..., Harness],
) -> None:
    """Only a dry run is answered with the note: a real create goes as sent, its answer too."""
    gateway = gateway_with(policies=DRY_RUN_NAMING)
    frame = create_topics(5, NewTopic("named"))
    assert_forwarded_as_sent(gateway.send(frame), frame)


# --- judged.request.max.items -------------------------------------------------------------

OVER = 1_001
"""One past the default of ``judged.request.max.items``."""


@pytest.mark.parametrize(
    ("api_key", "version", "frame"),
    [
        (DELETE_TOPICS, 5, lambda: delete_topics(5, *(f"t{i}" for i in range(OVER)))),
        (
            INCREMENTAL_ALTER_CONFIGS,
            1,
            lambda: alter_configs(
                INCREMENTAL_ALTER_CONFIGS,
                1,
                [(2, f"t{i}", [("retention.ms", 0, "1000")]) for i in range(OVER)],
            ),
        ),
        (DELETE_GROUPS, 2, lambda: delete_groups(2, *(f"g{i}" for i in range(OVER)))),
        (DELETE_RECORDS, 2, lambda: delete_records(2, *((f"t{i}", 0) for i in range(OVER)))),
        (
            ELECT_LEADERS,
            2,
            lambda: elect_leaders(2, [(f"t{i}", 0) for i in range(OVER)], election_type=UNCLEAN),
        ),
        (
            ALTER_PARTITION_REASSIGNMENTS,
            0,
            lambda: alter_partition_reassignments(0, *((f"t{i}", 0, (1,)) for i in range(OVER))),
        ),
    ],
    ids=[
        "DeleteTopics",
        "IncrementalAlterConfigs",
        "DeleteGroups",
        "DeleteRecords",
        "ElectLeaders-unclean",
        "AlterPartitionReassignments",
    ],
)
def test_a_request_over_the_items_limit_is_refused_whole_unjudged(
    gateway: Harness, api_key: int, version: int, frame: Callable[[], bytes]
) -> None:
    outcome = gateway.send(frame())
    answer = items(api_key, version, answer_of(outcome))
    assert len(answer) == OVER
    assert {code for _, code, _ in answer} == {POLICY_VIOLATION}
    # (versions whose answer carries no message read as None)
    assert all("judged.request.max.items" in m for _, _, m in answer if m is not None)
    assert not gateway.cluster.asked  # nothing looked up for a request judged not at all


def test_partitions_of_one_topic_count_once_and_reads_count_not_at_all(
    gateway: Harness,
) -> None:
    gateway.cluster.add_topic("orders", partitions=OVER)
    frame = delete_records(2, *(("orders", p) for p in range(OVER)))
    answer = gateway.send(frame)
    if isinstance(answer, Answer):
        messages = [m or "" for _, _, m in items(DELETE_RECORDS, 2, answer.frame)]
        assert all("judged.request.max.items" not in m for m in messages)
    reads = list_offsets(7, *((f"t{i}", 0) for i in range(OVER)))
    assert not isinstance(gateway.send(reads), Answer)
