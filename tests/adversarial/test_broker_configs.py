"""Routes around the topic rules through broker-side config resources, and around
``protected.topics`` by creating (issue 11 items 3 and 13).

A retention rule on ``retention.ms`` means nothing if a client can set ``log.retention.ms=1``
on the cluster-wide default (resource BROKER ``""``) that every topic without its own value
uses, or the same in hours on one broker. Each case is sent as raw IncrementalAlterConfigs
through the gateway in front of the real broker, with the tap recording what reaches it: a
refused resource gets POLICY_VIOLATION with the rule's message and never reaches the broker.

Where the test broker cannot show a case, a scripted Kafka-like upstream answers instead: the
test broker (Tansu) reports no broker configs in DescribeConfigs, so a change that hands the
default to another synonym (deleting ``log.retention.ms`` while ``log.retention.hours`` is
set) cannot arise there, and it has no legacy AlterConfigs (API 33). Nor can an APPEND to a
list config a topic does not set, which Kafka starts from the config's own default while a
broker config gives the topic another value.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta

from tests.plugins.kafka_test_policies import RecordingAlterConfigV2Policy
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
    make_pki,
    noted,
    policy_message,
    tls_context,
    tls_listener,
    unique_name,
)

pytestmark = pytest.mark.adversarial

BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 4, 8, 16, 32
SET, DELETE = 0, 1
INCREMENTAL, LEGACY = 44, 33
POLICY_VIOLATION = 44
TANSU_NODE = "111"
CLUSTER_DEFAULT = "the cluster-wide broker default"
ADMIN = "User:CN=platform-admin"

RETENTION = {"name": "retention-time", "type": "config", "config": "retention.ms", "min": 3_600_000}
TOPIC_RULES = {
    "rules": [
        RETENTION,
        {"name": "max-message", "type": "config", "config": "max.message.bytes", "max": 1_048_576},
        {
            "name": "no-unclean",
            "type": "forbidden.configs",
            "configs": ["unclean.leader.election.enable"],
        },
    ]
}
BROKER_CONFIGS = {
    "rules": [{"name": "broker-configs", "type": "broker.configs", "allowed.principals": [ADMIN]}]
}
PROTECTED = {
    "rules": [
        {
            "name": "platform-topics",
            "type": "protected.topics",
            "topics": ["__.*"],
            "allowed.principals": [ADMIN],
        }
    ]
}

Resource = tuple[int, str, list[tuple[str, int, str | None]]]


def incremental(resources: list[Resource], version: int = 1) -> Any:
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


def results(answer: Any) -> list[tuple[int, str, int, str | None]]:
    """(type, name, code, message) per resource; a denial's audit request id note is
    checked and taken off (tests/inproc/test_audit_v2.py checks the id itself)."""
    found = []
    for r in answer.responses:
        message = r.error_message or None
        if int(r.error_code) == POLICY_VIOLATION:
            assert message == noted(policy_message(message) or "")
            message = policy_message(message)
        found.append((int(r.resource_type), r.resource_name, int(r.error_code), message))
    return found


def reached_broker(tap: BrokerTap, api_key: int = INCREMENTAL) -> list[tuple[int, str]]:
    """The config resources of every ``api_key`` request that reached the broker."""
    return [
        (int(r.resource_type), r.resource_name)
        for request in tap.forwarded(api_key)
        for r in request.resources
    ]


@pytest.fixture
def start(tap: BrokerTap) -> Iterator[Any]:
    """Starts gateways in front of the tapped broker: ``start(policies, **config)``."""
    started: list[GatewayThread] = []

    def run(policies: dict[str, Any], **extra: Any) -> GatewayThread:
        gw = GatewayThread(gateway_config(tap.address, policies=policies, **extra)).start()
        started.append(gw)
        return gw

    try:
        yield run
    finally:
        for gw in started:
            gw.stop()


# --- the topic rules hold for the broker configs that are the topics' defaults ----------------

REFUSED_BY_TOPIC_RULES = [
    pytest.param(
        (BROKER, "", [("log.retention.ms", SET, "1")]),
        f"{CLUSTER_DEFAULT}: log.retention.ms=1 (retention.ms=1) is below the minimum of "
        "3600000 (rule retention-time)",
        id="cluster-default-log.retention.ms",
    ),
    pytest.param(
        (BROKER, "", [("log.retention.hours", SET, "0")]),
        f"{CLUSTER_DEFAULT}: log.retention.hours=0 (retention.ms=0) is below the minimum of "
        "3600000 (rule retention-time)",
        id="cluster-default-log.retention.hours",
    ),
    pytest.param(
        (BROKER, TANSU_NODE, [("log.retention.minutes", SET, "59")]),
        f"broker {TANSU_NODE}: log.retention.minutes=59 (retention.ms=3540000) is below the "
        "minimum of 3600000 (rule retention-time)",
        id="one-broker-log.retention.minutes",
    ),
    pytest.param(
        (BROKER, "", [("log.retention.hours", SET, "24"), ("log.retention.ms", SET, "1")]),
        f"{CLUSTER_DEFAULT}: log.retention.ms=1 (retention.ms=1) is below the minimum of "
        "3600000 (rule retention-time)",
        id="ms-wins-over-hours-in-one-request",
    ),
    pytest.param(
        (BROKER, "", [("message.max.bytes", SET, "104857600")]),
        f"{CLUSTER_DEFAULT}: message.max.bytes=104857600 (max.message.bytes=104857600) is above "
        "the maximum of 1048576 (rule max-message)",
        id="cluster-default-message.max.bytes",
    ),
    pytest.param(
        (BROKER, TANSU_NODE, [("unclean.leader.election.enable", SET, "true")]),
        f"broker {TANSU_NODE}: config unclean.leader.election.enable may not be set "
        "(rule no-unclean)",
        id="one-broker-unclean.leader.election.enable",
    ),
]


@pytest.mark.parametrize(("resource", "message"), REFUSED_BY_TOPIC_RULES)
@pytest.mark.parametrize("version", [0, 1])
def test_a_broker_config_that_breaks_a_topic_rule_never_reaches_the_broker(
    start: Any, tap: BrokerTap, resource: Resource, message: str, version: int
) -> None:
    gw = start(TOPIC_RULES)
    answer = RawClient(gw.bootstrap).request(INCREMENTAL, version, incremental([resource], version))
    assert results(answer) == [(resource[0], resource[1], POLICY_VIOLATION, message)]
    assert reached_broker(tap) == []


def test_an_allowed_broker_config_goes_on_and_a_refused_one_in_the_same_request_does_not(
    start: Any, tap: BrokerTap
) -> None:
    gw = start(TOPIC_RULES)
    request = incremental(
        [
            (BROKER, "", [("log.retention.ms", SET, "1")]),
            (BROKER, TANSU_NODE, [("log.retention.hours", SET, "24")]),
        ]
    )
    answer = RawClient(gw.bootstrap).request(INCREMENTAL, 1, request)
    assert [(name, code) for _, name, code, _ in results(answer)] == [
        ("", POLICY_VIOLATION),
        (TANSU_NODE, 0),
    ]
    assert reached_broker(tap) == [(BROKER, TANSU_NODE)]


# --- who may change broker configs at all ------------------------------------------------------

CLUSTER_RESOURCES = [
    pytest.param((BROKER, "", "the cluster-wide broker default"), id="cluster-default"),
    pytest.param((BROKER, TANSU_NODE, f"broker {TANSU_NODE}"), id="one-broker"),
    pytest.param(
        (BROKER_LOGGER, TANSU_NODE, f"the loggers of broker {TANSU_NODE}"), id="broker-logger"
    ),
    pytest.param(
        (CLIENT_METRICS, "all-clients", "client metrics subscription all-clients"),
        id="client-metrics",
    ),
]
SOME_CONFIG = {BROKER: "log.cleaner.threads", BROKER_LOGGER: "kafka.server", CLIENT_METRICS: "a"}


@pytest.mark.parametrize("resource", CLUSTER_RESOURCES)
def test_an_unauthenticated_client_changes_no_broker_config(
    start: Any, tap: BrokerTap, resource: tuple[int, str, str]
) -> None:
    resource_type, name, label = resource
    gw = start(BROKER_CONFIGS)
    request = incremental([(resource_type, name, [(SOME_CONFIG[resource_type], SET, "2")])])
    answer = RawClient(gw.bootstrap).request(INCREMENTAL, 1, request)
    assert results(answer) == [
        (
            resource_type,
            name,
            POLICY_VIOLATION,
            f"{label}: an unauthenticated client may not change its configs (rule broker-configs)",
        )
    ]
    assert reached_broker(tap) == []


def test_group_configs_are_not_broker_configs(start: Any, tap: BrokerTap) -> None:
    """Kafka authorizes a group's configs on the group, not the cluster: the broker.configs
    rule lets them through, to the plug-ins and the broker's own authorizer."""
    gw = start(BROKER_CONFIGS)
    request = incremental([(GROUP, "g", [("consumer.session.timeout.ms", SET, "45000")])])
    answer = RawClient(gw.bootstrap).request(INCREMENTAL, 1, request)
    assert results(answer) == [(GROUP, "g", 0, None)]
    assert reached_broker(tap) == [(GROUP, "g")]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pki(
        tmp_path_factory.mktemp("pki"),
        {"platform-admin": "/CN=platform-admin", "bob": "/CN=bob"},
    )


def test_only_the_allowed_principal_changes_broker_configs(
    start: Any, tap: BrokerTap, pki: Path
) -> None:
    gw = start(BROKER_CONFIGS, tls=tls_listener(pki))
    request = incremental([(BROKER, "", [("log.cleaner.threads", SET, "2")])])
    bob = RawClient(gw.bootstrap, tls=tls_context(pki, "bob"))
    assert results(bob.request(INCREMENTAL, 1, request)) == [
        (
            BROKER,
            "",
            POLICY_VIOLATION,
            f"{CLUSTER_DEFAULT}: User:CN=bob may not change its configs (rule broker-configs)",
        )
    ]
    assert reached_broker(tap) == []
    admin = RawClient(gw.bootstrap, tls=tls_context(pki, "platform-admin"))
    assert results(admin.request(INCREMENTAL, 1, request)) == [(BROKER, "", 0, None)]
    assert reached_broker(tap) == [(BROKER, "")]


# --- protected.topics: creating one ------------------------------------------------------------


def test_an_unauthenticated_client_creates_no_protected_topic(start: Any, tap: BrokerTap) -> None:
    gw = start(PROTECTED)
    topic = unique_name("__evil")
    request = CreateTopicsRequest(
        topics=(
            CreatableTopic(
                name=TopicName(topic),
                num_partitions=i32(1),
                replication_factor=i16(1),
                assignments=(),
                configs=(),
            ),
        ),
        timeout=i32Timedelta.parse(timedelta(seconds=10)),
        validate_only=False,
    )
    answer = RawClient(gw.bootstrap).request(19, 7, request)
    assert [(t.name, t.error_code, t.error_message) for t in answer.topics] == [
        (
            topic,
            ErrorCode.policy_violation,
            noted(
                f"topic {topic} is protected: an unauthenticated client may not create it "
                "(rule platform-topics)"
            ),
        )
    ]
    assert [t.name for r in tap.forwarded(19) for t in r.topics] == []
    metadata = [t for r in tap.forwarded(3) for t in r.topics or ()]
    assert all(t.name != topic for t in metadata)


# --- a scripted Kafka-like upstream: broker configs that are set -------------------------------

DYNAMIC_DEFAULT_BROKER, DEFAULT, GROUP_CONFIG = 3, 5, 8


class KafkaLikeConfigs:
    """Answers DescribeConfigs from ``configs`` ((type, name) -> entries (key, value,
    source)) and accepts every config change, as a Kafka broker would."""

    def __init__(self, configs: dict[tuple[int, str], list[tuple[str, str, int]]]) -> None:
        self.configs = configs

    async def respond(self, me: ScriptedBroker, header: Any, request: Any) -> Any:
        if header.api_key == 32:
            return describe_configs_response(
                describe_configs_result(
                    int(r.resource_type),
                    r.resource_name,
                    self.configs.get((int(r.resource_type), r.resource_name), []),
                )
                for r in request.resources
            )
        if header.api_key in (LEGACY, INCREMENTAL):
            return alter_configs_response(
                header, ((r, ErrorCode.none, None) for r in request.resources)
            )
        raise AssertionError(f"unexpected API {header.api_key}")


def scripted(cluster: ScriptedCluster, configs: KafkaLikeConfigs, policies: Any) -> Any:
    upstream = cluster.add(configs.respond, "kafka-like")
    assert upstream.address is not None
    config = gateway_config(upstream.address, upstream=KAFKA_LIKE_UPSTREAM, policies=policies)
    return upstream, GatewayThread(config).start()


def changes_sent(upstream: ScriptedBroker) -> list[tuple[int, str]]:
    return [
        (int(r.resource_type), r.resource_name)
        for header, request in upstream.requests
        if header.api_key in (LEGACY, INCREMENTAL)
        for r in request.resources
    ]


HOURS_UNDER_MS = [
    ("log.retention.ms", "86400000", DYNAMIC_DEFAULT_BROKER),
    ("log.retention.hours", "0", DYNAMIC_DEFAULT_BROKER),
    ("log.retention.bytes", "-1", DEFAULT),
]
HANDED_TO_HOURS = (
    f"{CLUSTER_DEFAULT}: log.retention.hours=0 (retention.ms=0) is below the minimum of 3600000 "
    "(rule retention-time)"
)


@pytest.mark.parametrize(
    ("api_key", "version", "request_"),
    [
        pytest.param(
            INCREMENTAL,
            1,
            incremental([(BROKER, "", [("log.retention.ms", DELETE, None)])]),
            id="incremental-delete",
        ),
        pytest.param(
            LEGACY,
            2,
            legacy_alter_configs_request(2, [(BROKER, "", {"log.retention.hours": "0"})]),
            id="legacy-implicit-delete",
        ),
    ],
)
def test_deleting_the_synonym_that_wins_is_judged_on_the_one_that_takes_over(
    scripted_cluster: ScriptedCluster, api_key: int, version: int, request_: Any
) -> None:
    """Scripted upstream: the test broker reports no broker configs, and has no legacy
    AlterConfigs. The cluster default sets log.retention.ms=86400000 and
    log.retention.hours=0; Kafka uses the ms one, so hours=0 changes no topic's retention (and
    setting it goes on) until log.retention.ms goes: then every topic without its own
    retention.ms would keep data for 0 ms."""
    upstream, gw = scripted(
        scripted_cluster, KafkaLikeConfigs({(BROKER, ""): HOURS_UNDER_MS}), TOPIC_RULES
    )
    try:
        client = RawClient(gw.bootstrap)
        harmless = incremental([(BROKER, "", [("log.retention.hours", SET, "0")])])
        assert results(client.request(INCREMENTAL, 1, harmless)) == [(BROKER, "", 0, None)]
        assert changes_sent(upstream) == [(BROKER, "")]
        answer = client.request(api_key, version, request_)
    finally:
        gw.stop()
    assert results(answer) == [(BROKER, "", POLICY_VIOLATION, HANDED_TO_HOURS)]
    assert changes_sent(upstream) == [(BROKER, "")]


V2 = {
    "alter.config.v2.policy.class.name": (
        "tests.plugins.kafka_test_policies.RecordingAlterConfigV2Policy"
    )
}


def test_config_plugins_see_a_groups_configs_before_and_after(
    scripted_cluster: ScriptedCluster,
) -> None:
    """Scripted upstream: the test broker reports no group configs. A plug-in judging a
    group's change (say, no shorter session timeout than today's) sees what is set on the
    group (config source GROUP_CONFIG), as Kafka's policies would, and not an empty before."""
    group = unique_name("g")
    upstream, gw = scripted(
        scripted_cluster,
        KafkaLikeConfigs(
            {
                (GROUP, group): [
                    ("consumer.session.timeout.ms", "45000", GROUP_CONFIG),
                    ("consumer.heartbeat.interval.ms", "5000", DEFAULT),
                ]
            }
        ),
        V2,
    )
    try:
        request = incremental([(GROUP, group, [("consumer.heartbeat.interval.ms", SET, "3000")])])
        answer = RawClient(gw.bootstrap).request(INCREMENTAL, 1, request)
    finally:
        gw.stop()
    assert results(answer) == [(GROUP, group, 0, None)]
    (seen,) = [m for m in RecordingAlterConfigV2Policy.seen if m.resource.name == group]
    assert (int(seen.resource.type), seen.configs_before, seen.configs_after) == (
        GROUP,
        {"consumer.session.timeout.ms": "45000"},
        {"consumer.session.timeout.ms": "45000", "consumer.heartbeat.interval.ms": "3000"},
    )
    assert changes_sent(upstream) == [(GROUP, group)]


# --- APPEND to a list config the topic does not set starts from Kafka's default ---------------

TOPIC = 2
APPEND = 2
STATIC_BROKER, DYNAMIC_BROKER, DYNAMIC_TOPIC = 4, 2, 1
COMPACT_ONLY = {
    "rules": [
        {
            "name": "compact-only",
            "type": "config",
            "config": "cleanup.policy",
            "allowed": ["compact"],
        }
    ]
}


class KafkaWithSynonyms(KafkaLikeConfigs):
    """As :class:`KafkaLikeConfigs`, and each entry's synonyms (name, value, source) go into
    the answer when the request asks for them (``include_synonyms``), as Kafka answers."""

    def __init__(
        self,
        configs: dict[tuple[int, str], list[tuple[str, str, int]]],
        synonyms: dict[str, list[tuple[str, str, int]]],
    ) -> None:
        super().__init__(configs)
        self.synonyms = synonyms

    async def respond(self, me: ScriptedBroker, header: Any, request: Any) -> Any:
        answer = await super().respond(me, header, request)
        if header.api_key != 32 or not request.include_synonyms:
            return answer
        module = importlib.import_module(
            f"kio.schema.describe_configs.v{header.api_version}.response"
        )
        return dataclasses.replace(
            answer,
            results=tuple(
                dataclasses.replace(
                    result,
                    configs=tuple(
                        dataclasses.replace(
                            entry,
                            synonyms=tuple(
                                module.DescribeConfigsSynonym(name=n, value=v, source=i8(s))
                                for n, v, s in self.synonyms.get(entry.name, [])
                            ),
                        )
                        for entry in result.configs
                    ),
                )
                for result in answer.results
            ),
        )


DELETE_AND_COMPACT = (
    POLICY_VIOLATION,
    "topic {t}: cleanup.policy=delete,compact: 'delete' is not one of compact (rule compact-only)",
)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param(STATIC_BROKER, DELETE_AND_COMPACT, id="from-a-static-broker-config"),
        pytest.param(
            DYNAMIC_DEFAULT_BROKER, DELETE_AND_COMPACT, id="from-the-dynamic-cluster-default"
        ),
        pytest.param(DYNAMIC_BROKER, DELETE_AND_COMPACT, id="from-a-dynamic-broker-config"),
        pytest.param(DYNAMIC_TOPIC, (0, None), id="set-on-the-topic"),
    ],
)
def test_append_to_a_list_config_the_topic_does_not_set_starts_from_kafkas_default(
    scripted_cluster: ScriptedCluster, source: int, expected: tuple[int, str | None]
) -> None:
    """Scripted upstream: the test broker starts an APPEND on a key the topic does not set
    from nothing, and reports no broker configs. Kafka starts it from the config's own default
    (ConfigurationControlManager.getParts: cleanup.policy ``delete``), whatever the brokers
    set: behind ``log.cleanup.policy=compact`` a topic without its own cleanup.policy is
    compacted, and APPEND ``compact`` looked like a change to ``compact`` alone, which the rule
    allows, while Kafka makes it ``delete,compact``: retention then deletes the topic's data.
    A dynamic broker config was worse: reported as the topic's value, it counted as set on
    the topic."""
    topic = unique_name("append")
    broker_default = [("log.cleanup.policy", "compact", STATIC_BROKER)]
    configs = KafkaWithSynonyms(
        {(TOPIC, topic): [("cleanup.policy", "compact", source)]},
        {"cleanup.policy": [*broker_default, ("log.cleanup.policy", "delete", DEFAULT)]},
    )
    upstream, gw = scripted(scripted_cluster, configs, COMPACT_ONLY)
    try:
        request = incremental([(TOPIC, topic, [("cleanup.policy", APPEND, "compact")])])
        answer = RawClient(gw.bootstrap).request(INCREMENTAL, 1, request)
    finally:
        gw.stop()
    code, message = expected
    assert results(answer) == [(TOPIC, topic, code, message and message.format(t=topic))]
    assert changes_sent(upstream) == ([] if code else [(TOPIC, topic)])
