"""Config changes through the gateway: IncrementalAlterConfigs against the real broker, the
legacy AlterConfigs against a scripted one (the test broker has no AlterConfigs).

Kafka's semantics: an ``AlterConfigPolicy`` denial fails only its resource with
POLICY_VIOLATION (44) and the policy's message, the other resources of the request are
applied, and validate_only runs the policies and changes nothing. ``AlterConfigV2Policy`` sees
the configs set on the resource before and after the change; ``TopicActionPolicy`` sees a
MODIFY with the topic's state before and after.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from gateway.config import HostPort
from policies.api import TopicAction, TopicState
from protocol.codec import encode_request
from tests.plugins.kafka_test_policies import (
    MinInsyncAlterConfigPolicy,
    RecordingAlterConfigV2Policy,
    RecordingTopicActionPolicy,
)
from tests.scripted import (
    ScriptedBroker,
    ScriptedCluster,
    alter_configs_response,
    describe_configs_response,
    describe_configs_result,
)
from tests.support import (
    KAFKA_LIKE_UPSTREAM,
    BrokerTap,
    GatewayThread,
    RawClient,
    gateway_config,
    legacy_alter_configs_request,
    noted,
    outcome,
    topic_configs,
    unique_name,
)

pytestmark = pytest.mark.inproc

# By full module name, so the tests read the same classes (and ``seen`` lists) the gateway
# loaded.
PLUGINS = "tests.plugins.kafka_test_policies"
MIN_INSYNC = {"alter.config.policy.class.name": f"{PLUGINS}.MinInsyncAlterConfigPolicy"}
V2 = {"alter.config.v2.policy.class.name": f"{PLUGINS}.RecordingAlterConfigV2Policy"}
TOPIC_ACTION = {"topic.action.policy.class.name": f"{PLUGINS}.RecordingTopicActionPolicy"}
MIN_INSYNC_MESSAGE = noted("Changing min.insync.replicas is not allowed")


def create_topic(bootstrap: str, topic: str, configs: dict[str, str], partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs)])[topic].result(15)


def op(key: str, value: str | None, kind: AlterConfigOpType) -> ConfigEntry:
    return ConfigEntry(key, value, incremental_operation=kind)


def alter(
    bootstrap: str, changes: dict[str, list[ConfigEntry]], validate_only: bool = False
) -> dict[str, tuple[int, str] | None]:
    """IncrementalAlterConfigs with confluent-kafka: topic -> (error code, message) or None."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resources = [ConfigResource("topic", t, incremental_configs=e) for t, e in changes.items()]
    futures = admin.incremental_alter_configs(resources, validate_only=validate_only)
    return {resource.name: outcome(future) for resource, future in futures.items()}


Tapped = tuple[GatewayThread, BrokerTap]


@pytest.fixture
def broker(tap: BrokerTap) -> HostPort:
    """In this module the broker is the tapped one: the gateway in front of it and the test's
    own admin calls reach the same broker, and what the gateway sends it is recorded."""
    return tap.address


@pytest.fixture
def start_tapped(tap: BrokerTap) -> Iterator[Any]:
    """Starts the gateway, with the given policy sections, in front of the tapped broker."""
    started: list[Tapped] = []

    def start(*sections: dict[str, str]) -> Tapped:
        policies: dict[str, str] = {}
        for section in sections:
            policies.update(section)
        gw = GatewayThread(gateway_config(tap.address, policies=policies)).start()
        started.append((gw, tap))
        return gw, tap

    try:
        yield start
    finally:
        for gw, _ in started:
            gw.stop()


@pytest.fixture
def tapped(start_tapped: Any) -> Tapped:
    """The gateway with Kafka's test AlterConfigPolicy (min.insync.replicas is fixed)."""
    return start_tapped(MIN_INSYNC)  # type: ignore[no-any-return]


# --- IncrementalAlterConfigs against the real broker ------------------------------------------


def alter_guarded_and_free(
    broker: HostPort, gw: GatewayThread, validate_only: bool = False
) -> tuple[str, str]:
    """Makes two topics with retention.ms=1000 and, in one request through ``gw``, changes
    min.insync.replicas of the first ("guarded": the policy refuses) and retention.ms of the
    second ("free") to 12345. Checks that only the guarded one was refused."""
    guarded, free = unique_name("guarded"), unique_name("free")
    for topic in (guarded, free):
        create_topic(str(broker), topic, {"retention.ms": "1000"})
    results = alter(
        gw.bootstrap,
        {
            guarded: [op("min.insync.replicas", "2", AlterConfigOpType.SET)],
            free: [op("retention.ms", "12345", AlterConfigOpType.SET)],
        },
        validate_only=validate_only,
    )
    assert results == {guarded: (KafkaError.POLICY_VIOLATION, MIN_INSYNC_MESSAGE), free: None}
    return guarded, free


def test_min_insync_change_fails_only_its_resource(broker: HostPort, tapped: Tapped) -> None:
    gw, _ = tapped
    guarded, free = alter_guarded_and_free(broker, gw)
    assert topic_configs(gw.bootstrap, guarded) == {"retention.ms": "1000"}
    assert topic_configs(gw.bootstrap, free) == {"retention.ms": "12345"}
    assert (
        gw.metric(
            "kpg_policy_decisions_total",
            api="IncrementalAlterConfigs",
            policy=f"{PLUGINS}.MinInsyncAlterConfigPolicy",
            outcome="denied",
        )
        == 1
    )


def test_validate_only_runs_the_policy_and_changes_nothing(
    broker: HostPort, tapped: Tapped
) -> None:
    gw, _ = tapped
    guarded, free = alter_guarded_and_free(broker, gw, validate_only=True)
    assert topic_configs(gw.bootstrap, guarded) == {"retention.ms": "1000"}
    assert topic_configs(gw.bootstrap, free) == {"retention.ms": "1000"}


def test_validate_only_on_a_missing_topic(tapped: Tapped) -> None:
    gw, _ = tapped
    missing = unique_name("missing")
    results = alter(gw.bootstrap, {missing: [op("retention.ms", "5", AlterConfigOpType.SET)]}, True)
    assert results == {
        missing: (KafkaError.UNKNOWN_TOPIC_OR_PART, f"The topic '{missing}' does not exist.")
    }


def test_the_test_broker_applies_validate_only_config_changes(broker: HostPort) -> None:
    """Why the test gateway runs with ``upstream.ignores_validate_only``: Tansu changes the
    config of a validate_only IncrementalAlterConfigs. Once this fails, Tansu honours it."""
    topic = unique_name("tansu-dry")
    create_topic(str(broker), topic, {"retention.ms": "1000"})
    assert alter(str(broker), {topic: [op("retention.ms", "7", AlterConfigOpType.SET)]}, True) == {
        topic: None
    }
    assert topic_configs(str(broker), topic) == {"retention.ms": "7"}


BEFORE = {
    "cleanup.policy": "delete",
    "retention.ms": "1000",
    "leader.replication.throttled.replicas": "0:111,1:111",
}


@pytest.mark.parametrize(
    ("entries", "after"),
    [
        pytest.param(
            [op("retention.ms", "2000", AlterConfigOpType.SET)],
            {**BEFORE, "retention.ms": "2000"},
            id="set",
        ),
        pytest.param(
            [op("retention.ms", None, AlterConfigOpType.DELETE)],
            {k: v for k, v in BEFORE.items() if k != "retention.ms"},
            id="delete",
        ),
        pytest.param(
            [op("cleanup.policy", "compact", AlterConfigOpType.APPEND)],
            {**BEFORE, "cleanup.policy": "delete,compact"},
            id="append",
        ),
        pytest.param(
            [op("leader.replication.throttled.replicas", "0:111", AlterConfigOpType.SUBTRACT)],
            {**BEFORE, "leader.replication.throttled.replicas": "1:111"},
            id="subtract",
        ),
        pytest.param(
            [
                op("segment.ms", "60000", AlterConfigOpType.SET),
                op("retention.ms", None, AlterConfigOpType.DELETE),
                op("cleanup.policy", "compact", AlterConfigOpType.APPEND),
                op("leader.replication.throttled.replicas", "1:111", AlterConfigOpType.SUBTRACT),
            ],
            {
                "segment.ms": "60000",
                "cleanup.policy": "delete,compact",
                "leader.replication.throttled.replicas": "0:111",
            },
            id="all-four",
        ),
    ],
)
def test_v2_policy_sees_before_and_after(
    broker: HostPort, start_tapped: Any, entries: list[ConfigEntry], after: dict[str, str]
) -> None:
    gw, _ = start_tapped(V2)
    topic = unique_name("v2")
    create_topic(str(broker), topic, BEFORE)
    assert alter(gw.bootstrap, {topic: entries}) == {topic: None}
    seen = [m for m in RecordingAlterConfigV2Policy.seen if m.resource.name == topic]
    assert [(m.configs_before, m.configs_after) for m in seen] == [(BEFORE, after)]
    # What the policy was told the change leads to is what the broker then holds.
    assert topic_configs(gw.bootstrap, topic) == after


def test_topic_action_policy_sees_a_modify(broker: HostPort, start_tapped: Any) -> None:
    gw, _ = start_tapped(TOPIC_ACTION)
    topic, forbidden, missing = unique_name("modify"), unique_name("forbidden"), unique_name("gone")
    for t in (topic, forbidden):
        create_topic(str(broker), t, {"retention.ms": "1000"}, partitions=3)
    metadata = AdminClient({"bootstrap.servers": str(broker)}).list_topics(topic, timeout=10)
    assignments = {p: tuple(m.replicas) for p, m in metadata.topics[topic].partitions.items()}
    assert len(assignments) == 3
    results = alter(
        gw.bootstrap,
        {
            topic: [op("retention.ms", "2000", AlterConfigOpType.SET)],
            forbidden: [op("retention.ms", "2000", AlterConfigOpType.SET)],
            missing: [op("retention.ms", "2000", AlterConfigOpType.SET)],
        },
    )
    assert results == {
        topic: None,
        forbidden: (KafkaError.POLICY_VIOLATION, noted(f"MODIFY of {forbidden} is not allowed")),
        missing: (KafkaError.UNKNOWN_TOPIC_OR_PART, f"The topic '{missing}' does not exist."),
    }
    seen = [m for m in RecordingTopicActionPolicy.seen if m.topic == topic]
    assert [(m.action, m.principal) for m in seen] == [(TopicAction.MODIFY, None)]

    def state(configs: dict[str, str]) -> TopicState:
        return TopicState(
            num_partitions=3,
            replication_factor=1,
            replicas_assignments=assignments,
            configs=configs,
        )

    assert seen[0].pre_request_state == state({"retention.ms": "1000"})
    assert seen[0].post_request_state == state({"retention.ms": "2000"})
    assert not [m for m in RecordingTopicActionPolicy.seen if m.topic == missing]
    assert topic_configs(gw.bootstrap, forbidden) == {"retention.ms": "1000"}
    assert topic_configs(gw.bootstrap, topic) == {"retention.ms": "2000"}


def _incremental_payload(
    version: int, resources: list[tuple[int, str, list[tuple[str, int, str | None]]]]
) -> Any:
    module = importlib.import_module(f"kio.schema.incremental_alter_configs.v{version}.request")
    return module.IncrementalAlterConfigsRequest(
        resources=tuple(
            module.AlterConfigsResource(
                resource_type=i8(t),
                resource_name=n,
                configs=tuple(
                    module.AlterableConfig(name=k, config_operation=i8(o), value=v)
                    for k, o, v in configs
                ),
            )
            for t, n, configs in resources
        ),
        validate_only=False,
    )


def _results(answer: Any) -> list[tuple[int, str, int, str | None]]:
    return [
        (int(r.resource_type), r.resource_name, int(r.error_code), r.error_message)
        for r in answer.responses
    ]


@pytest.mark.parametrize("version", [0, 1])
def test_answered_here_in_the_clients_version(
    broker: HostPort, tapped: Tapped, version: int
) -> None:
    gw, tap = tapped
    guarded, twice = unique_name("raw-guarded"), unique_name("raw-twice")
    for topic in (guarded, twice):
        create_topic(str(broker), topic, {})
    payload = _incremental_payload(
        version,
        [
            (2, guarded, [("min.insync.replicas", 0, "2")]),
            (2, twice, [("retention.ms", 0, "5")]),
            (99, "what", [("a", 0, "b")]),
            (2, twice, [("retention.ms", 0, "6")]),
            (2, guarded, [("retention.ms", 0, "5"), ("retention.ms", 1, None)]),
        ],
    )
    # kio decodes the answer in the layout of ``version``, trailing bytes refused.
    answer = RawClient(gw.bootstrap).request(44, version, payload)
    once = "Each resource must appear at most once."
    assert _results(answer) == [
        (2, guarded, 42, once),
        (2, twice, 42, once),
        (99, "what", 42, "Unknown resource type 99"),
        (2, twice, 42, once),
        (2, guarded, 42, once),
    ]
    single = _incremental_payload(version, [(2, guarded, [("min.insync.replicas", 0, "2")])])
    answer = RawClient(gw.bootstrap).request(44, version, single)
    assert _results(answer) == [(2, guarded, 44, MIN_INSYNC_MESSAGE)]
    assert tap.forwarded(44) == []


@pytest.mark.parametrize("validate_only", [False, True])
def test_mixed_request_sends_the_broker_only_the_allowed_resources(
    broker: HostPort, tapped: Tapped, validate_only: bool
) -> None:
    """On one connection (the tap sees the bootstrap connection only; confluent-kafka may
    use the broker's own listener)."""
    gw, tap = tapped
    guarded, free = unique_name("mix-guarded"), unique_name("mix-free")
    for topic in (guarded, free):
        create_topic(str(broker), topic, {"retention.ms": "1000"})
    payload = dataclasses.replace(
        _incremental_payload(
            1,
            [
                (2, guarded, [("min.insync.replicas", 0, "2")]),
                (2, free, [("retention.ms", 0, "5")]),
            ],
        ),
        validate_only=validate_only,
    )
    answer = RawClient(gw.bootstrap).request(44, 1, payload)
    assert [(n, code) for _, n, code, _ in _results(answer)] == [(guarded, 44), (free, 0)]
    sent = tap.forwarded(44)
    if validate_only:
        # The broker applies validate_only changes, so the dry run never reaches it.
        assert sent == []
        assert topic_configs(gw.bootstrap, free) == {"retention.ms": "1000"}
    else:
        assert [([r.resource_name for r in s.resources], s.validate_only) for s in sent] == [
            ([free], False)
        ]
        assert topic_configs(gw.bootstrap, free) == {"retention.ms": "5"}


def test_all_allowed_forwards_the_clients_bytes(broker: HostPort, tapped: Tapped) -> None:
    gw, tap = tapped
    topic = unique_name("bytes")
    create_topic(str(broker), topic, {})
    payload = _incremental_payload(1, [(2, topic, [("retention.ms", 0, "5")])])
    client = RawClient(gw.bootstrap)
    answer = client.request(44, 1, payload)
    assert [(n, code) for _, n, code, _ in _results(answer)] == [(topic, 0)]
    sent = [r for r in tap.requests if r.api_key == 44]
    assert [r.frame for r in sent] == [
        encode_request(44, 1, sent[0].correlation_id, "raw-test", payload)[4:]
    ]
    assert topic_configs(gw.bootstrap, topic) == {"retention.ms": "5"}


# --- a scripted upstream: the legacy AlterConfigs and DescribeConfigs errors ------------------

DYNAMIC_TOPIC, DYNAMIC_BROKER, STATIC_BROKER, DEFAULT = 1, 2, 4, 5


class ScriptedConfigs:
    """A broker that answers DescribeConfigs from ``configs`` ((type, name) -> entries
    (key, value, source), or (error code, message)) and accepts every config change."""

    def __init__(self, configs: dict[tuple[int, str], Any]) -> None:
        self.configs = configs

    async def respond(self, me: ScriptedBroker, header: Any, request: Any) -> Any:
        if header.api_key == 32:
            return describe_configs_response(
                self._describe(int(r.resource_type), r.resource_name) for r in request.resources
            )
        if header.api_key in (33, 44):
            return alter_configs_response(
                header, ((r, ErrorCode.none, None) for r in request.resources)
            )
        raise AssertionError(f"unexpected API {header.api_key}")

    def _describe(self, resource_type: int, resource_name: str) -> Any:
        found = self.configs.get((resource_type, resource_name), [])
        if isinstance(found, tuple):
            code, message = found
            return describe_configs_result(
                resource_type, resource_name, [], ErrorCode(code), message
            )
        return describe_configs_result(resource_type, resource_name, found)


def scripted_gateway(upstream: ScriptedBroker, *policies: dict[str, str]) -> GatewayThread:
    assert upstream.address is not None
    section: dict[str, str] = {}
    for p in policies:
        section.update(p)
    config = gateway_config(upstream.address, upstream=KAFKA_LIKE_UPSTREAM, policies=section)
    return GatewayThread(config).start()


@pytest.mark.parametrize("validate_only", [False, True])
@pytest.mark.parametrize("version", [0, 1, 2])
def test_legacy_alter_configs(
    scripted_cluster: ScriptedCluster, version: int, validate_only: bool
) -> None:
    """Scripted upstream: the test broker has no AlterConfigs (API key 33), so a broker that
    answers DescribeConfigs with the current configs and accepts AlterConfigs is scripted."""
    guarded, replaced, emptied = (
        unique_name("l-guarded"),
        unique_name("l-replaced"),
        unique_name("l-emptied"),
    )
    default_entry = ("segment.bytes", "1073741824", DEFAULT)
    upstream = scripted_cluster.add(
        ScriptedConfigs(
            {
                (2, guarded): [("min.insync.replicas", "1", DYNAMIC_TOPIC), default_entry],
                (2, replaced): [
                    ("retention.ms", "100", DYNAMIC_TOPIC),
                    ("cleanup.policy", "compact", DYNAMIC_TOPIC),
                    default_entry,
                ],
                (2, emptied): [("min.insync.replicas", "2", DYNAMIC_TOPIC)],
                (4, "0"): [
                    ("log.cleaner.threads", "2", DYNAMIC_BROKER),
                    ("log.dirs", "/data", STATIC_BROKER),
                ],
            }
        ).respond,
        "legacy",
    )
    gw = scripted_gateway(upstream, MIN_INSYNC, V2)
    v2_start, v1_start = (
        len(RecordingAlterConfigV2Policy.seen),
        len(MinInsyncAlterConfigPolicy.seen),
    )
    try:
        payload = legacy_alter_configs_request(
            version,
            [
                (2, guarded, {"min.insync.replicas": "2"}),
                (2, replaced, {"retention.ms": "200"}),
                (2, emptied, {}),
                (4, "0", {"log.cleaner.threads": "4"}),
            ],
            validate_only,
        )
        answer = RawClient(gw.bootstrap).request(33, version, payload)
    finally:
        gw.stop()
    assert _results(answer) == [
        (2, guarded, 44, MIN_INSYNC_MESSAGE),
        (2, replaced, 0, None),
        (2, emptied, 44, MIN_INSYNC_MESSAGE),  # the implicit delete of min.insync.replicas
        (4, "0", 0, None),
    ]
    sent = [(h, r) for h, r in upstream.requests if h.api_key == 33]
    assert [(h.api_version, r.validate_only) for h, r in sent] == [(version, validate_only)]
    assert [(int(r.resource_type), r.resource_name) for r in sent[0][1].resources] == [
        (2, replaced),
        (4, "0"),
    ]
    # Before and after hold what is set on the resource: DEFAULT and STATIC_BROKER entries
    # are not; keys missing from the request are deleted.
    assert [
        (m.resource.name, m.configs_before, m.configs_after)
        for m in RecordingAlterConfigV2Policy.seen[v2_start:]
    ] == [
        (guarded, {"min.insync.replicas": "1"}, {"min.insync.replicas": "2"}),
        (replaced, {"retention.ms": "100", "cleanup.policy": "compact"}, {"retention.ms": "200"}),
        (emptied, {"min.insync.replicas": "2"}, {}),
        ("0", {"log.cleaner.threads": "2"}, {"log.cleaner.threads": "4"}),
    ]
    # The old policy sees every key sent, and the implicitly deleted ones as None.
    assert [(m.resource.name, m.configs) for m in MinInsyncAlterConfigPolicy.seen[v1_start:]] == [
        (guarded, {"min.insync.replicas": "2"}),
        (replaced, {"retention.ms": "200", "cleanup.policy": None}),
        (emptied, {"min.insync.replicas": None}),
        ("0", {"log.cleaner.threads": "4"}),
    ]


def test_resource_whose_state_cannot_be_read_is_refused(
    scripted_cluster: ScriptedCluster,
) -> None:
    """Scripted upstream: the test broker describes every resource without error, even a
    topic that does not exist, so a DescribeConfigs error is scripted here."""
    secret, open_topic = unique_name("secret"), unique_name("open")
    upstream = scripted_cluster.add(
        ScriptedConfigs(
            {
                (2, secret): (29, "Topic authorization failed."),
                (2, open_topic): [("retention.ms", "100", DYNAMIC_TOPIC)],
            }
        ).respond,
        "unreadable",
    )
    gw = scripted_gateway(upstream, V2)
    try:
        client = RawClient(gw.bootstrap)
        both = _incremental_payload(
            1,
            [(2, secret, [("retention.ms", 0, "5")]), (2, open_topic, [("retention.ms", 0, "5")])],
        )
        assert _results(client.request(44, 1, both)) == [
            (2, secret, 29, "Topic authorization failed."),
            (2, open_topic, 0, None),
        ]
        alone = _incremental_payload(1, [(2, secret, [("retention.ms", 0, "5")])])
        assert _results(client.request(44, 1, alone)) == [
            (2, secret, 29, "Topic authorization failed.")
        ]
    finally:
        gw.stop()
    sent = [r for h, r in upstream.requests if h.api_key == 44]
    assert [[x.resource_name for x in r.resources] for r in sent] == [[open_topic]]
    assert [
        m.resource.name
        for m in RecordingAlterConfigV2Policy.seen
        if m.resource.name in (secret, open_topic)
    ] == [open_topic]
