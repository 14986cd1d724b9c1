"""The Metadata handler's auto-creation judgement where the test broker cannot show it: brokers
that report their defaults and ``auto.create.topics.enable`` (Tansu reports no broker
configs), refuse DescribeConfigs to the client, or refuse the creation itself; and v13, which
Tansu does not take.

The real handler, engine, policy chain and decision recorder, in front of a stand-in
:class:`gateway.engine.ClusterView` (``tests/enforcement_support.py``) that also answers the
requests the handler sends itself (``send``): Metadata from its topics, CreateTopics by adding
them. No sockets; the adversarial suite runs the same handler against the real broker.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32, i32Timedelta

from gateway.config import BrokerDefaults, UpstreamConfig
from gateway.handlers.metadata import MetadataHandler
from gateway.outcomes import Answer
from protocol.addresses import METADATA, BrokerEndpoint
from protocol.admin import InternalRequest
from protocol.codec import decode_response, encode_request
from tests.enforcement_support import BROKER, Harness, StandInCluster, context, described, make

pytestmark = pytest.mark.unit

CREATE_TOPICS = 19
RULES = {"rules": [{"name": "partition-count", "type": "partitions", "max": 6}]}


class GatewayNodes:
    """Node N is reached through the gateway at gw:9100+N."""

    async def gateway_addresses(
        self, endpoints: Iterable[BrokerEndpoint], *, complete: bool = False
    ) -> dict[int, Any]:
        return {e.node_id: ("gw", 9100 + e.node_id) for e in endpoints}


@dataclasses.dataclass
class BrokerStandIn(StandInCluster):
    """Also answers Metadata (node 1 at broker-1:9092) and CreateTopics, as a broker would."""

    create_error: int = 0
    created: list[tuple[str, int, int]] = dataclasses.field(default_factory=list)
    sent: list[tuple[int, bool | None]] = dataclasses.field(default_factory=list)

    async def send(self, request: InternalRequest) -> Any:
        payload = request.payload
        if request.api_key == CREATE_TOPICS:
            self.sent.append((CREATE_TOPICS, None))
            return self._create(request.api_version, payload)
        self.sent.append((METADATA, payload.allow_auto_topic_creation))
        return self._metadata(request.api_version, [t.name for t in payload.topics or ()])

    def _create(self, version: int, payload: Any) -> Any:
        m = _module("create_topics", version, "response")
        for topic in payload.topics:
            if not self.create_error:
                self.created.append(
                    (topic.name, int(topic.num_partitions), int(topic.replication_factor))
                )
                self.add_topic(topic.name, partitions=int(topic.num_partitions))
        return m.CreateTopicsResponse(
            throttle_time=i32Timedelta.parse(timedelta(0)),
            topics=tuple(
                m.CreatableTopicResult(
                    name=t.name, error_code=ErrorCode(self.create_error), error_message=None
                )
                for t in payload.topics
            ),
        )

    def _metadata(self, version: int, names: list[str]) -> Any:
        m = _module("metadata", version, "response")

        def entry(name: str) -> Any:
            found = self.topics.get(name)
            partitions = tuple(
                make(
                    m.MetadataResponsePartition,
                    error_code=ErrorCode.none,
                    partition_index=i32(p),
                    leader_id=BrokerId(1),
                    leader_epoch=i32(0),
                    replica_nodes=(BrokerId(1),),
                    isr_nodes=(BrokerId(1),),
                    offline_replicas=(),
                )
                for p in (found.partitions if found else ())
            )
            code = ErrorCode.none if found else ErrorCode.unknown_topic_or_partition
            return make(
                m.MetadataResponseTopic,
                error_code=code,
                name=TopicName(name),
                topic_id=None,
                is_internal=False,
                partitions=partitions,
            )

        return make(
            m.MetadataResponse,
            throttle_time=i32Timedelta.parse(timedelta(0)),
            brokers=(
                make(
                    m.MetadataResponseBroker, node_id=BrokerId(1), host="broker-1", port=i32(9092)
                ),
            ),
            cluster_id="stand-in",
            controller_id=BrokerId(1),
            topics=tuple(entry(n) for n in names),
            cluster_authorized_operations=i32(-2147483648),
            error_code=ErrorCode.none,
        )


def _module(api: str, version: int, kind: str) -> Any:
    return importlib.import_module(f"kio.schema.{api}.v{version}.{kind}")


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    built = Harness.build(tmp_path, RULES, upstream=UpstreamConfig(bootstrap_servers=()))
    built.cluster = BrokerStandIn()
    try:
        yield built
    finally:
        built.close()


def ask(
    harness: Harness, version: int, names: list[str], **upstream: Any
) -> dict[str, tuple[int, int]]:
    """What the client gets for a Metadata request of ``version`` with auto-creation on."""
    services = dataclasses.replace(
        harness.services,
        nodes=GatewayNodes(),
        upstream=dataclasses.replace(harness.services.upstream, **upstream),
    )
    m = _module("metadata", version, "request")
    payload = make(
        m.MetadataRequest,
        topics=tuple(make(m.MetadataRequestTopic, name=TopicName(n), topic_id=None) for n in names),
        allow_auto_topic_creation=True,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    frame = encode_request(METADATA, version, 7, "app", payload)[4:]
    outcome = harness.run(MetadataHandler(services)(context(frame), harness.cluster, frame))
    assert isinstance(outcome, Answer), outcome
    answer = decode_response(METADATA, version, outcome.frame)
    assert [(b.host, b.port) for b in answer.brokers] == [("gw", 9101)]
    return {t.name: (int(t.error_code), len(t.partitions)) for t in answer.topics}


def test_the_defaults_a_broker_reports_are_judged_and_created(harness: Harness) -> None:
    cluster = harness.cluster
    assert isinstance(cluster, BrokerStandIn)
    cluster.set_broker_configs(1, {"num.partitions": "6", "default.replication.factor": "2"})

    assert ask(harness, 12, ["fresh"]) == {"fresh": (3, 0)}
    assert cluster.created == [("fresh", 6, 2)]
    assert cluster.sent == [(METADATA, False), (CREATE_TOPICS, None)]


def test_a_rule_judges_the_reported_default(harness: Harness) -> None:
    cluster = harness.cluster
    assert isinstance(cluster, BrokerStandIn)
    cluster.set_broker_configs(1, {"num.partitions": "7", "default.replication.factor": "1"})

    assert ask(harness, 12, ["too-wide"]) == {"too-wide": (29, 0)}
    assert cluster.created == []
    assert (CREATE_TOPICS, None) not in cluster.sent


def test_stated_defaults_come_before_reported_ones(harness: Harness) -> None:
    cluster = harness.cluster
    assert isinstance(cluster, BrokerStandIn)
    cluster.set_broker_configs(1, {"num.partitions": "9", "default.replication.factor": "3"})
    stated = BrokerDefaults(num_partitions=2, default_replication_factor=1)

    assert ask(harness, 12, ["stated"], broker_defaults=stated) == {"stated": (3, 0)}
    assert cluster.created == [("stated", 2, 1)]


def test_a_broker_without_auto_creation_creates_nothing_and_its_answer_stands(
    harness: Harness,
) -> None:
    """``auto.create.topics.enable=false``: nothing to judge; the gateway creates nothing the
    broker would not."""
    cluster = harness.cluster
    assert isinstance(cluster, BrokerStandIn)
    cluster.set_broker_configs(
        1,
        {
            "num.partitions": "1",
            "default.replication.factor": "1",
            "auto.create.topics.enable": "false",
        },
    )

    assert ask(harness, 12, ["nope"]) == {"nope": (3, 0)}
    assert cluster.created == [] and (CREATE_TOPICS, None) not in cluster.sent


def test_defaults_the_client_may_not_read_deny_and_say_why(harness: Harness) -> None:
    cluster = harness.cluster
    assert isinstance(cluster, BrokerStandIn)
    cluster.configs[(BROKER, "1")] = dataclasses.replace(
        described(BROKER, "1"),
        error_code=int(ErrorCode.cluster_authorization_failed),
    )

    assert ask(harness, 12, ["unread"]) == {"unread": (29, 0)}
    assert cluster.created == []
    messages = [e.message or "" for e in harness.sink.events if e.resource_name == "unread"]
    assert messages and "CLUSTER_AUTHORIZATION_FAILED" in messages[0]
    assert "upstream.broker_defaults" in messages[0]


def test_a_creation_the_broker_refuses_is_answered_with_its_error(harness: Harness) -> None:
    """The client lacks CREATE: the broker's TOPIC_AUTHORIZATION_FAILED, as Kafka answers."""
    cluster = harness.cluster
    assert isinstance(cluster, BrokerStandIn)
    cluster.set_broker_configs(1, {"num.partitions": "1", "default.replication.factor": "1"})
    cluster.create_error = int(ErrorCode.topic_authorization_failed)

    assert ask(harness, 12, ["refused"]) == {"refused": (29, 0)}


@pytest.mark.parametrize("version", [0, 3, 4, 13])
def test_every_version_kio_ships_is_judged(harness: Harness, version: int) -> None:
    cluster = harness.cluster
    assert isinstance(cluster, BrokerStandIn)
    cluster.set_broker_configs(1, {"num.partitions": "1", "default.replication.factor": "1"})
    cluster.add_topic("there", partitions=2)

    assert ask(harness, version, ["there", "new", "../x"]) == {
        "there": (0, 2),
        "new": (3, 0),
        "../x": (17, 0),
    }
    assert cluster.created == [("new", 1, 1)]
    assert all(allow is False for key, allow in cluster.sent if key == METADATA)


@pytest.mark.parametrize(
    "reported",
    [{"num.partitions": "1"}, {"default.replication.factor": "1"}],
    ids=["no-replication-factor", "no-partitions"],
)
def test_one_default_unknown_denies_and_says_why(
    harness: Harness, reported: dict[str, str]
) -> None:
    """Both counts are needed: a broker reporting one of them leaves the topic as unknown as
    one reporting neither, denied with TOPIC_AUTHORIZATION_FAILED and nothing created."""
    cluster = harness.cluster
    assert isinstance(cluster, BrokerStandIn)
    cluster.set_broker_configs(1, reported)

    assert ask(harness, 12, ["half"]) == {"half": (29, 0)}
    assert cluster.created == [] and (CREATE_TOPICS, None) not in cluster.sent
    messages = [e.message or "" for e in harness.sink.events if e.resource_name == "half"]
    assert messages and "does not know the partitions and replication factor" in messages[0]


def test_a_topic_created_meanwhile_is_answered_as_one_being_created(harness: Harness) -> None:
    """The gateway's CreateTopics finds the topic there (another client created it after the
    broker's answer): UNKNOWN_TOPIC_OR_PARTITION, which clients retry and then find it, as
    for a topic the gateway created; not TOPIC_ALREADY_EXISTS, no Metadata error."""
    cluster = harness.cluster
    assert isinstance(cluster, BrokerStandIn)
    cluster.set_broker_configs(1, {"num.partitions": "1", "default.replication.factor": "1"})
    cluster.create_error = int(ErrorCode.topic_already_exists)

    assert ask(harness, 12, ["raced"]) == {"raced": (3, 0)}
