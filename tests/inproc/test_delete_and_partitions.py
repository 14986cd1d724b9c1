"""DeleteTopics and CreatePartitions through the policy chain (KIP-201 DELETE and MODIFY).

DeleteTopics runs against the real broker. The test broker has no CreatePartitions (API 37,
TEST_BROKER.md), so the CreatePartitions tests put a scripted upstream behind the gateway.
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32, i32Timedelta

from gateway.config import HostPort
from protocol.codec import encode_request
from tests.plugins.kafka_test_policies import RecordingTopicActionPolicy
from tests.scripted import (
    ZERO,
    ScriptedBroker,
    ScriptedCluster,
    describe_configs_response,
    describe_configs_result,
    metadata_response,
)
from tests.support import (
    KAFKA_LIKE_UPSTREAM,
    BrokerTap,
    GatewayThread,
    RawClient,
    existing_topics,
    gateway_config,
    make_pki,
    noted,
    outcome,
    ssl_client,
    tls_listener,
    unique_name,
)

pytestmark = pytest.mark.inproc

# By its full module name, so the test reads the same class object the gateway loaded.
TOPIC_ACTION = {
    "topic.action.policy.class.name": (
        "tests.plugins.kafka_test_policies.RecordingTopicActionPolicy"
    ),
}
ADMIN = "User:CN=platform-admin"
TIMEOUT = i32Timedelta.parse(timedelta(seconds=10))


def protected(mode: str = "enforce", principals: tuple[str, ...] = ()) -> dict[str, Any]:
    rule: dict[str, Any] = {
        "name": "keep-topics",
        "type": "protected.topics",
        "topics": ["keep-.*"],
        "mode": mode,
    }
    if principals:
        rule["allowed.principals"] = list(principals)
    return {"rules": [rule]}


def create(bootstrap: str, *topics: NewTopic) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(list(topics)).values():
        future.result(15)


def keep_and_gone(broker: str) -> tuple[str, str]:
    """Creates a ``keep-`` topic (protected by ``protected()``) and a ``gone-`` one (not),
    straight on the broker: ``protected.topics`` refuses to create a ``keep-`` topic through
    the gateway."""
    kept, gone = unique_name("keep"), unique_name("gone")
    create(broker, NewTopic(kept, 1, 1), NewTopic(gone, 1, 1))
    return kept, gone


def assert_only_gone_deleted(bootstrap: str, kept: str, gone: str) -> None:
    topics = existing_topics(bootstrap)
    assert kept in topics and gone not in topics


def request_schema(api: str, version: int, cls: str) -> Any:
    return getattr(importlib.import_module(f"kio.schema.{api}.v{version}.request"), cls)


def response_schema(api: str, version: int, cls: str) -> Any:
    return getattr(importlib.import_module(f"kio.schema.{api}.v{version}.response"), cls)


# --- DeleteTopics against the real broker -------------------------------------------------------


@pytest.fixture
def tapped(tap: BrokerTap) -> Iterator[tuple[GatewayThread, BrokerTap]]:
    """The gateway with the protected-topics rule, in front of the tapped broker: every
    connection the gateway opens, node listeners included, passes the tap."""
    gw = GatewayThread(gateway_config(tap.address, policies=protected())).start()
    try:
        yield gw, tap
    finally:
        gw.stop()


def test_confluent_protected_topic_is_kept_and_the_other_deleted(
    tapped: tuple[GatewayThread, BrokerTap],
) -> None:
    gw, tap = tapped
    kept, gone = keep_and_gone(str(tap.address))
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    futures = admin.delete_topics([kept, gone], operation_timeout=10)
    # librdkafka speaks DeleteTopics v4, which has no error_message: only the code reaches it.
    assert outcome(futures[kept]) == (KafkaError.POLICY_VIOLATION, "Broker: Policy violation")
    assert outcome(futures[gone]) is None
    assert_only_gone_deleted(gw.bootstrap, kept, gone)


def test_kafka_python_gets_the_policy_message(tapped: tuple[GatewayThread, BrokerTap]) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.errors import PolicyViolationError

    gw, tap = tapped
    kept, gone = keep_and_gone(str(tap.address))
    admin = KafkaAdminClient(bootstrap_servers=gw.bootstrap)
    try:
        with pytest.raises(PolicyViolationError) as raised:
            admin.delete_topics([kept, gone])
    finally:
        admin.close()
    assert f"topic {kept} is protected: no one may delete it (rule keep-topics)" in str(
        raised.value
    )
    assert_only_gone_deleted(gw.bootstrap, kept, gone)


def _delete_request(version: int, topics: list[str | uuid.UUID]) -> Any:
    request = request_schema("delete_topics", version, "DeleteTopicsRequest")
    if version < 6:
        return request(topic_names=tuple(TopicName(str(t)) for t in topics), timeout=TIMEOUT)
    state = request_schema("delete_topics", version, "DeleteTopicState")
    return request(
        topics=tuple(
            state(name=None, topic_id=t)
            if isinstance(t, uuid.UUID)
            else state(name=TopicName(t), topic_id=None)
            for t in topics
        ),
        timeout=TIMEOUT,
    )


def _names(version: int, request: Any) -> list[str | None]:
    if version < 6:
        return list(request.topic_names)
    return [t.name for t in request.topics]


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6])
def test_raw_delete_every_version(tapped: tuple[GatewayThread, BrokerTap], version: int) -> None:
    gw, tap = tapped
    kept, gone = keep_and_gone(str(tap.address))
    missing = unique_name("missing")
    answer = RawClient(gw.bootstrap).request(
        20, version, _delete_request(version, [kept, gone, missing])
    )
    results = [(r.name, int(r.error_code)) for r in answer.responses]
    assert results == [(kept, 44), (gone, 0), (missing, 3)]
    denial = answer.responses[0]
    if version >= 5:
        assert denial.error_message == noted(
            f"topic {kept} is protected: no one may delete it (rule keep-topics)"
        )
    else:
        assert not hasattr(denial, "error_message")
    if version >= 5:
        assert answer.responses[2].error_message == f"The topic '{missing}' does not exist."
    # Only the allowed topic went to the broker, in the client's version; the unknown one was
    # answered by the gateway, which has no state to judge it by.
    (sent,) = tap.forwarded(20)
    assert [r.api_version for r in tap.requests if r.api_key == 20] == [version]
    assert _names(version, sent) == [gone]
    assert_only_gone_deleted(gw.bootstrap, kept, gone)


def test_all_allowed_forwards_the_clients_bytes(tapped: tuple[GatewayThread, BrokerTap]) -> None:
    gw, tap = tapped
    gone = unique_name("gone")
    create(gw.bootstrap, NewTopic(gone, 1, 1))
    payload = _delete_request(5, [gone])
    answer = RawClient(gw.bootstrap).request(20, 5, payload)
    assert [(r.name, int(r.error_code)) for r in answer.responses] == [(gone, 0)]
    frames = [r for r in tap.requests if r.api_key == 20]
    assert [r.frame for r in frames] == [
        encode_request(20, 5, frames[0].correlation_id, "raw-test", payload)[4:]
    ]


def test_all_denied_is_answered_without_the_broker(
    tapped: tuple[GatewayThread, BrokerTap],
) -> None:
    gw, tap = tapped
    kept = unique_name("keep")
    create(str(tap.address), NewTopic(kept, 1, 1))
    tap.requests.clear()
    answer = RawClient(gw.bootstrap).request(20, 6, _delete_request(6, [kept]))
    assert [(r.name, int(r.error_code)) for r in answer.responses] == [(kept, 44)]
    assert not [r for r in tap.requests if r.api_key == 20]
    assert kept in existing_topics(gw.bootstrap)


def test_v6_topic_ids_are_resolved_and_unknown_ids_never_forwarded(
    tapped: tuple[GatewayThread, BrokerTap],
) -> None:
    from kafka.admin import KafkaAdminClient

    gw, tap = tapped
    kept, gone = keep_and_gone(str(tap.address))
    admin = KafkaAdminClient(bootstrap_servers=gw.bootstrap)
    try:
        ids = {t["name"]: uuid.UUID(t["topic_id"]) for t in admin.describe_topics([kept, gone])}
    finally:
        admin.close()
    unknown = uuid.uuid4()
    answer = RawClient(gw.bootstrap).request(
        20, 6, _delete_request(6, [ids[kept], ids[gone], unknown])
    )
    by_id = {r.topic_id: (r.name, int(r.error_code), r.error_message) for r in answer.responses}
    assert [r.topic_id for r in answer.responses] == [ids[kept], ids[gone], unknown]
    # The protected topic is judged by the name its id resolves to.
    assert by_id[ids[kept]] == (
        kept,
        44,
        noted(f"topic {kept} is protected: no one may delete it (rule keep-topics)"),
    )
    assert by_id[ids[gone]][1] == 0
    assert by_id[unknown] == (None, 100, "This server does not host this topic ID.")
    (sent,) = tap.forwarded(20)
    assert [(t.name, t.topic_id) for t in sent.topics] == [(None, ids[gone])]
    assert_only_gone_deleted(gw.bootstrap, kept, gone)


def test_kafka_python_deletes_by_topic_id(tapped: tuple[GatewayThread, BrokerTap]) -> None:
    from kafka.admin import KafkaAdminClient

    gw, tap = tapped
    kept, gone = keep_and_gone(str(tap.address))
    admin = KafkaAdminClient(bootstrap_servers=gw.bootstrap)
    try:
        ids = {t["name"]: uuid.UUID(t["topic_id"]) for t in admin.describe_topics([kept, gone])}
        result = admin.delete_topics([ids[kept], ids[gone]], raise_errors=False)
    finally:
        admin.close()
    codes = {uuid.UUID(t["topic_id"]): t["error_code"] for t in result["topics"]}
    assert codes == {ids[kept]: 44, ids[gone]: 0}
    assert_only_gone_deleted(gw.bootstrap, kept, gone)


def test_topic_action_policy_sees_the_delete(broker: HostPort) -> None:
    RecordingTopicActionPolicy.seen.clear()
    gw = GatewayThread(gateway_config(broker, policies=TOPIC_ACTION)).start()
    try:
        gone, forbidden, missing = (
            unique_name("gone"),
            unique_name("forbidden"),
            unique_name("missing"),
        )
        # Straight on the broker: the policy would refuse to create the "forbidden-" one.
        create(
            str(broker),
            NewTopic(gone, 3, 1, config={"retention.ms": "7200000"}),
            NewTopic(forbidden, 1, 1),
        )
        admin = AdminClient({"bootstrap.servers": gw.bootstrap})
        futures = admin.delete_topics([gone, forbidden, missing], operation_timeout=10)
        assert outcome(futures[gone]) is None
        assert outcome(futures[forbidden]) == (
            KafkaError.POLICY_VIOLATION,
            "Broker: Policy violation",
        )
        # A topic the cluster does not describe is answered by the gateway, and the policy
        # never sees it (that it is not forwarded either: test_raw_delete_every_version).
        assert outcome(futures[missing])[0] == KafkaError.UNKNOWN_TOPIC_OR_PART  # type: ignore[index]
        deletes = {m.topic: m for m in RecordingTopicActionPolicy.seen if m.action.name == "DELETE"}
        assert set(deletes) == {gone, forbidden}
        seen = deletes[gone]
        assert seen.principal is None
        assert seen.post_request_state is None
        pre = seen.pre_request_state
        assert pre is not None
        assert (pre.num_partitions, pre.replication_factor) == (3, 1)
        assert set(pre.replicas_assignments or {}) == {0, 1, 2}
        # Tansu reports a topic's own configs with the DEFAULT source; the test config says so
        # (topic_config_source_unreliable), so they count as set on the topic.
        assert dict(pre.configs) == {"retention.ms": "7200000"}
        assert forbidden in existing_topics(gw.bootstrap)
        assert gone not in existing_topics(gw.bootstrap)
    finally:
        gw.stop()


def test_dry_run_rule_lets_the_delete_through_and_counts_it(broker: HostPort) -> None:
    gw = GatewayThread(gateway_config(broker, policies=protected(mode="dry-run"))).start()
    try:
        kept = unique_name("keep")
        create(gw.bootstrap, NewTopic(kept, 1, 1))
        admin = AdminClient({"bootstrap.servers": gw.bootstrap})
        futures = admin.delete_topics([kept], operation_timeout=10)
        assert outcome(futures[kept]) is None
        assert kept not in existing_topics(gw.bootstrap)
        labels = {"api": "DeleteTopics", "policy": "keep-topics"}
        assert gw.metric("kpg_policy_decisions_total", outcome="would_deny", **labels) == 1
        assert gw.metric("kpg_policy_decisions_total", outcome="denied", **labels) == 0
    finally:
        gw.stop()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Client certificates for CN=platform-admin and CN=alice: over TLS the client
    certificate is the principal."""
    return make_pki(
        tmp_path_factory.mktemp("pki"),
        {"platform-admin": "/CN=platform-admin", "alice": "/CN=alice"},
    )


def test_only_the_allowed_principal_deletes_a_protected_topic(broker: HostPort, pki: Path) -> None:
    gw = GatewayThread(
        gateway_config(broker, policies=protected(principals=(ADMIN,)), tls=tls_listener(pki))
    ).start()
    try:
        kept = unique_name("keep")
        alice = AdminClient(ssl_client(gw.bootstrap, pki, "alice"))
        platform = AdminClient(ssl_client(gw.bootstrap, pki, "platform-admin"))
        create(str(broker), NewTopic(kept, 1, 1))  # protected.topics refuses alice's create
        assert outcome(alice.delete_topics([kept], operation_timeout=10)[kept]) == (
            KafkaError.POLICY_VIOLATION,
            "Broker: Policy violation",
        )
        assert kept in alice.list_topics(timeout=10).topics
        assert outcome(platform.delete_topics([kept], operation_timeout=10)[kept]) is None
        assert kept not in platform.list_topics(timeout=10).topics
    finally:
        gw.stop()


# --- CreatePartitions against a scripted upstream ------------------------------------------------


@dataclass
class PartitionsCluster:
    """What the scripted broker knows: topics, each with its replicas per partition and its
    configs as (value, config source)."""

    replicas: dict[str, list[tuple[int, ...]]] = field(default_factory=dict)
    configs: dict[str, dict[str, tuple[str, int]]] = field(default_factory=dict)
    unreadable_configs: set[str] = field(default_factory=set)

    async def respond(self, me: ScriptedBroker, header: Any, request: Any) -> Any:
        if header.api_key == 3:
            assert header.api_version == 12, "only the gateway's own Metadata is expected"
            topics = [(t.name, self.replicas.get(t.name)) for t in request.topics or ()]
            return metadata_response(me, topics, brokers=(1, 2, 3))
        if header.api_key == 32:
            return describe_configs_response(
                self._describe_configs(r.resource_type, r.resource_name) for r in request.resources
            )
        if header.api_key == 37:
            return self._create_partitions(header.api_version, request)
        raise AssertionError(f"unexpected API {header.api_key}")

    def _describe_configs(self, resource_type: int, topic: str) -> Any:
        entries = [
            (key, value, source) for key, (value, source) in self.configs.get(topic, {}).items()
        ]
        if topic in self.unreadable_configs:
            return describe_configs_result(
                resource_type, topic, entries, ErrorCode.topic_authorization_failed, "not for you"
            )
        return describe_configs_result(resource_type, topic, entries)

    def _create_partitions(self, version: int, request: Any) -> Any:
        result = response_schema("create_partitions", version, "CreatePartitionsTopicResult")
        response = response_schema("create_partitions", version, "CreatePartitionsResponse")
        results = []
        for t in request.topics:
            current = self.replicas[t.name]
            if not request.validate_only:
                current.extend([(1,)] * (int(t.count) - len(current)))
            results.append(result(name=t.name, error_code=ErrorCode.none, error_message=None))
        return response(throttle_time=ZERO, results=tuple(results))


@dataclass
class ScriptedGateway:
    gateway: GatewayThread
    upstream: ScriptedBroker
    state: PartitionsCluster

    def create_partitions(self, version: int, payload: Any) -> Any:
        return RawClient(self.gateway.bootstrap).request(37, version, payload)

    def received(self) -> list[tuple[int, Any]]:
        """The CreatePartitions requests the scripted broker got: (version, request)."""
        return [(h.api_version, r) for h, r in self.upstream.requests if h.api_key == 37]


@pytest.fixture
def scripted(
    request: pytest.FixtureRequest, scripted_cluster: ScriptedCluster, ignores_validate_only: bool
) -> Iterator[ScriptedGateway]:
    """A scripted upstream with CreatePartitions, which the test broker lacks.

    ``request.param`` is the ``policies:`` section (default: partitions max 8, protected
    ``keep-.*`` topics).
    """
    policies = getattr(request, "param", None) or {
        "rules": [
            {"name": "max-partitions", "type": "partitions", "max": 8},
            *protected()["rules"],
        ]
    }
    state = PartitionsCluster(
        replicas={
            "small": [(1, 2)] * 4,
            "big": [(1, 2)] * 4,
            "keep-offsets": [(1, 2)] * 4,
            "forbidden-growth": [(1, 2)] * 2,
        },
        configs={
            "small": {"retention.ms": ("7200000", 1), "cleanup.policy": ("delete", 5)},
        },
    )
    upstream = scripted_cluster.add(state.respond, "partitions-broker")
    assert upstream.address is not None
    config = gateway_config(
        upstream.address,
        upstream={**KAFKA_LIKE_UPSTREAM, "ignores_validate_only": ignores_validate_only},
        policies=policies,
    )
    gw = GatewayThread(config).start()
    try:
        yield ScriptedGateway(gateway=gw, upstream=upstream, state=state)
    finally:
        gw.stop()


@pytest.fixture
def ignores_validate_only() -> bool:
    """Whether the gateway is told its upstream ignores validate_only (overridden by
    parametrizing it)."""
    return False


def _partitions_request(
    version: int,
    topics: list[tuple[str, int, list[list[int]] | None]],
    validate_only: bool = False,
) -> Any:
    request = request_schema("create_partitions", version, "CreatePartitionsRequest")
    topic = request_schema("create_partitions", version, "CreatePartitionsTopic")
    assignment = request_schema("create_partitions", version, "CreatePartitionsAssignment")
    return request(
        topics=tuple(
            topic(
                name=TopicName(t),
                count=i32(count),
                assignments=None
                if assignments is None
                else tuple(
                    assignment(broker_ids=tuple(BrokerId(b) for b in a)) for a in assignments
                ),
            )
            for t, count, assignments in topics
        ),
        timeout=TIMEOUT,
        validate_only=validate_only,
    )


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_partitions_mixed_request_every_version(scripted: ScriptedGateway, version: int) -> None:
    answer = scripted.create_partitions(
        version,
        _partitions_request(
            version,
            [("small", 6, None), ("big", 20, None), ("keep-offsets", 5, None), ("ghost", 4, None)],
        ),
    )
    # RawClient decodes with kio's schema for the version (flexible header and tagged fields
    # from v2 on) and refuses trailing bytes: the layout is the client's version's.
    assert type(answer).__module__ == f"kio.schema.create_partitions.v{version}.response"
    assert [(r.name, int(r.error_code), r.error_message) for r in answer.results] == [
        ("small", 0, None),
        (
            "big",
            44,
            noted("topic big: 20 partitions is above the maximum of 8 (rule max-partitions)"),
        ),
        (
            "keep-offsets",
            44,
            noted(
                "topic keep-offsets is protected: no one may add partitions to it "
                "(rule keep-topics)"
            ),
        ),
        ("ghost", 3, "The topic 'ghost' does not exist."),
    ]
    ((sent_version, sent),) = scripted.received()
    assert sent_version == version
    assert [(t.name, int(t.count)) for t in sent.topics] == [("small", 6)]
    assert len(scripted.state.replicas["small"]) == 6
    assert len(scripted.state.replicas["big"]) == 4


def test_partitions_all_allowed_are_forwarded_as_sent(scripted: ScriptedGateway) -> None:
    payload = _partitions_request(3, [("small", 5, [[2, 3]]), ("big", 8, None)])
    answer = scripted.create_partitions(3, payload)
    assert [int(r.error_code) for r in answer.results] == [0, 0]
    assert scripted.received() == [(3, payload)]


def test_partitions_all_denied_are_answered_locally(scripted: ScriptedGateway) -> None:
    answer = scripted.create_partitions(2, _partitions_request(2, [("big", 9, None)]))
    assert [(r.name, int(r.error_code)) for r in answer.results] == [("big", 44)]
    assert scripted.received() == []


def test_partitions_validate_only_is_forwarded_after_the_policies(
    scripted: ScriptedGateway,
) -> None:
    answer = scripted.create_partitions(
        1, _partitions_request(1, [("small", 7, None), ("big", 30, None)], validate_only=True)
    )
    assert [(r.name, int(r.error_code)) for r in answer.results] == [("small", 0), ("big", 44)]
    ((_, sent),) = scripted.received()
    assert sent.validate_only is True
    assert [t.name for t in sent.topics] == ["small"]
    assert len(scripted.state.replicas["small"]) == 4


@pytest.mark.parametrize("ignores_validate_only", [True])
def test_partitions_validate_only_is_answered_here_before_a_broker_that_would_add_them(
    scripted: ScriptedGateway,
) -> None:
    """``upstream.ignores_validate_only``: a broker that would carry out a dry run would add
    partitions, which cannot be taken away again; the gateway answers the dry run itself, with
    Kafka's errors for counts that are no increase or assignments that do not match."""
    answer = scripted.create_partitions(
        3,
        _partitions_request(
            3,
            [
                ("small", 7, None),
                ("big", 30, None),
                ("forbidden-growth", 1, None),
                ("keep-offsets", 4, None),
                ("ghost", 5, None),
            ],
            validate_only=True,
        ),
    )
    assert [(r.name, int(r.error_code), r.error_message) for r in answer.results] == [
        ("small", 0, None),
        (
            "big",
            44,
            noted("topic big: 30 partitions is above the maximum of 8 (rule max-partitions)"),
        ),
        (
            "forbidden-growth",
            37,
            "The topic forbidden-growth currently has 2 partition(s); 1 would not be an increase.",
        ),
        (
            "keep-offsets",
            44,
            noted(
                "topic keep-offsets is protected: no one may add partitions to it "
                "(rule keep-topics)"
            ),
        ),
        ("ghost", 3, "The topic 'ghost' does not exist."),
    ]
    answer = scripted.create_partitions(
        1,
        _partitions_request(1, [("small", 4, None), ("big", 7, [[1, 2]])], validate_only=True),
    )
    assert [(r.name, int(r.error_code), r.error_message) for r in answer.results] == [
        ("small", 37, "Topic already has 4 partition(s)."),
        (
            "big",
            39,
            "Attempted to add 3 additional partition(s), but only 1 assignment(s) were specified.",
        ),
    ]
    # each new partition's replicas as Kafka's controller walks them (the brokers: 1, 2, 3)
    cases = {
        (): "The manual partition assignment includes an empty replica list.",
        (1, 9): "The manual partition assignment includes broker 9, but no such broker is "
        "registered.",
        (3, 1, 3): "The manual partition assignment includes the broker 3 more than once.",
        (1,): "The manual partition assignment includes a partition with 1 replica(s), but this "
        "is not consistent with previous partitions, which have 2 replica(s).",
        (2, 3): None,
    }
    for replicas, refusal in cases.items():
        answer = scripted.create_partitions(
            3,
            _partitions_request(3, [("small", 5, [list(replicas)])], validate_only=True),
        )
        [(code, message)] = [(int(r.error_code), r.error_message) for r in answer.results]
        assert (code, message) == ((39, refusal) if refusal else (0, None)), replicas
    assert scripted.received() == []
    assert len(scripted.state.replicas["small"]) == 4


def test_partitions_topic_named_twice_is_invalid(scripted: ScriptedGateway) -> None:
    answer = scripted.create_partitions(
        3, _partitions_request(3, [("small", 5, None), ("small", 6, None), ("big", 5, None)])
    )
    assert [(r.name, int(r.error_code)) for r in answer.results] == [("small", 42), ("big", 0)]
    ((_, sent),) = scripted.received()
    assert [t.name for t in sent.topics] == ["big"]


@pytest.mark.parametrize("scripted", [TOPIC_ACTION], indirect=True)
def test_topic_action_policy_sees_modify_before_and_after(scripted: ScriptedGateway) -> None:
    RecordingTopicActionPolicy.seen.clear()
    answer = scripted.create_partitions(
        3,
        _partitions_request(
            3, [("small", 6, None), ("big", 6, [[3, 1], [2, 3]]), ("forbidden-growth", 3, None)]
        ),
    )
    assert [(r.name, int(r.error_code), r.error_message) for r in answer.results] == [
        ("small", 0, None),
        ("big", 0, None),
        ("forbidden-growth", 44, noted("MODIFY of forbidden-growth is not allowed")),
    ]
    seen = {m.topic: m for m in RecordingTopicActionPolicy.seen}
    assert {m.action.name for m in seen.values()} == {"MODIFY"}
    assert {m.principal for m in seen.values()} == {None}
    small = seen["small"]
    assert small.pre_request_state is not None and small.post_request_state is not None
    pre, post = small.pre_request_state, small.post_request_state
    assert (pre.num_partitions, pre.replication_factor) == (4, 2)
    assert pre.replicas_assignments == {p: (1, 2) for p in range(4)}
    # This upstream reports config sources truthfully: only the topic's own config counts.
    assert pre.configs == {"retention.ms": "7200000"}
    assert (post.num_partitions, post.replication_factor) == (6, 2)
    assert post.replicas_assignments is None  # left to the controller
    assert post.configs == pre.configs
    big = seen["big"].post_request_state
    assert big is not None
    assert big.replicas_assignments == {**{p: (1, 2) for p in range(4)}, 4: (3, 1), 5: (2, 3)}
    ((_, sent),) = scripted.received()
    assert [t.name for t in sent.topics] == ["small", "big"]


@pytest.mark.parametrize("scripted", [TOPIC_ACTION], indirect=True)
def test_unreadable_configs_deny_when_a_topic_action_policy_needs_them(
    scripted: ScriptedGateway,
) -> None:
    RecordingTopicActionPolicy.seen.clear()
    scripted.state.unreadable_configs.add("big")
    answer = scripted.create_partitions(
        0, _partitions_request(0, [("small", 5, None), ("big", 5, None)])
    )
    (small, big) = answer.results
    assert (small.name, int(small.error_code)) == ("small", 0)
    assert (big.name, int(big.error_code)) == ("big", 44)
    assert "cannot read the state of topic big" in big.error_message
    assert [m.topic for m in RecordingTopicActionPolicy.seen] == ["small"]
    ((_, sent),) = scripted.received()
    assert [t.name for t in sent.topics] == ["small"]
