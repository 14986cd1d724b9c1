"""A client on one broker's link judged with another broker's view: a topic created with
Kafka's defaults (-1 counts; or auto-created by Metadata) is judged with the broker's
``num.partitions`` and ``default.replication.factor``, which the gateway asks on the client's
own link (DescribeConfigs of a BROKER resource). It asked for the first broker Metadata lists.
Kafka describes a broker's configs only on that broker itself and answers INVALID_REQUEST for
any other id ("Unexpected broker id", ``ConfigHelper.describeConfigs``, per resource), so a
client whose link reached another broker (any node listener but the first broker's, or a
bootstrap link to another server) had the topic judged with the defaults unknown: denied
whatever the policies say, depending on which broker its client library picked.

Scripted upstream: the test broker (Tansu) is one node and reports no broker configs. Two
scripted brokers stand for a two-node Kafka cluster: each describes its own broker resource
only, INVALID_REQUEST for the other's id, as Kafka does; each creates what it is asked to.
The client talks to node 2 through the gateway's listener for node 2.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32

from protocol.addresses import METADATA
from protocol.framing import RequestHeader
from tests.scripted import (
    ScriptedBroker,
    ScriptedCluster,
    cluster_metadata_response,
    describe_configs_response,
    describe_configs_result,
)
from tests.support import (
    KAFKA_LIKE_UPSTREAM,
    GatewayThread,
    RawClient,
    create_topic_request,
    gateway_config,
    unique_name,
)

pytestmark = pytest.mark.adversarial

CREATE_TOPICS = 19
DESCRIBE_CONFIGS = 32
BROKER = 4
STATIC_BROKER_CONFIG = 4
MAX_PARTITIONS = 4
POLICIES = {"rules": [{"name": "partition-count", "type": "partitions", "max": MAX_PARTITIONS}]}


class KafkaNode:
    """One node of a two-node cluster: Metadata names both; DescribeConfigs describes this
    node's broker resource only; CreateTopics creates."""

    def __init__(self, node_id: int, cluster: dict[int, ScriptedBroker], partitions: int) -> None:
        self.node_id = node_id
        self.cluster = cluster
        self.partitions = partitions
        self.created: list[str] = []

    async def respond(self, me: ScriptedBroker, header: RequestHeader, request: Any) -> Any:
        if header.api_key == METADATA:
            names = [str(t.name) for t in request.topics or ()]
            return cluster_metadata_response(me, [(n, None) for n in names], self.cluster)
        if header.api_key == DESCRIBE_CONFIGS:
            return describe_configs_response(self._described(r) for r in request.resources)
        assert header.api_key == CREATE_TOPICS, f"unscripted API key {header.api_key}"
        self.created.extend(str(t.name) for t in request.topics)
        schema = importlib.import_module(f"kio.schema.create_topics.v{header.api_version}.response")
        fields = schema.CreatableTopicResult.__dataclass_fields__
        result = {
            "topic_id": None,
            "error_code": ErrorCode.none,
            "error_message": None,
            "topic_config_error_code": i16(0),
            "num_partitions": i32(self.partitions),
            "replication_factor": i16(1),
            "configs": (),
        }
        return schema.CreateTopicsResponse(
            throttle_time=timedelta(0),
            topics=tuple(
                schema.CreatableTopicResult(
                    name=t.name, **{k: v for k, v in result.items() if k in fields}
                )
                for t in request.topics
            ),
        )

    def _described(self, resource: Any) -> Any:
        name = str(resource.resource_name)
        if int(resource.resource_type) != BROKER or name != str(self.node_id):
            return describe_configs_result(
                int(resource.resource_type),
                name,
                (),
                error_code=ErrorCode.invalid_request,
                error_message=f"Unexpected broker id, expected {self.node_id} or empty "
                f"string, but received {name}",
            )
        return describe_configs_result(
            BROKER,
            name,
            (
                ("num.partitions", str(self.partitions), STATIC_BROKER_CONFIG),
                ("default.replication.factor", "1", STATIC_BROKER_CONFIG),
                ("auto.create.topics.enable", "true", STATIC_BROKER_CONFIG),
            ),
        )


@pytest.fixture
def on_node_2(scripted_cluster: ScriptedCluster) -> Iterator[Any]:
    """``start(partitions)``: both nodes with that ``num.partitions``, a gateway in front of
    node 1 (its bootstrap server), and a client on the gateway's listener for node 2."""
    opened: list[tuple[GatewayThread, RawClient]] = []

    def start(partitions: int) -> tuple[RawClient, KafkaNode]:
        cluster: dict[int, ScriptedBroker] = {}
        nodes = {n: KafkaNode(n, cluster, partitions) for n in (1, 2)}
        for n, node in nodes.items():
            cluster[n] = scripted_cluster.add(node.respond, f"node-{n}")
        config = gateway_config(cluster[1].address, upstream=KAFKA_LIKE_UPSTREAM, policies=POLICIES)
        gw = GatewayThread(config).start()
        bootstrap = RawClient(gw.bootstrap)
        try:
            answer = bootstrap.request(METADATA, 12, _metadata(()))
        finally:
            bootstrap.close()
        (node_2,) = [b for b in answer.brokers if int(b.node_id) == 2]
        client = RawClient(f"{node_2.host}:{node_2.port}")
        opened.append((gw, client))
        return client, nodes[2]

    try:
        yield start
    finally:
        for gw, client in opened:
            client.close()
            gw.stop()


def _metadata(topics: tuple[str, ...]) -> MetadataRequest:
    return MetadataRequest(
        topics=tuple(MetadataRequestTopic(topic_id=None, name=TopicName(t)) for t in topics),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )


@pytest.mark.parametrize(("partitions", "allowed"), [(3, True), (8, False)])
def test_create_topics_with_defaults_is_judged_by_the_linked_broker(
    on_node_2: Any, partitions: int, allowed: bool
) -> None:
    client, node = on_node_2(partitions)
    topic = unique_name("t")
    request = create_topic_request(topic, partitions=-1, replication_factor=-1)
    (result,) = client.request(CREATE_TOPICS, 7, request).topics
    message = result.error_message or ""
    assert "cannot read" not in message, message
    if allowed:
        assert (int(result.error_code), node.created) == (0, [topic]), message
    else:
        assert int(result.error_code) == 44, message
        assert f"{partitions}" in message and node.created == [], message


def test_auto_creation_is_judged_by_the_linked_broker(on_node_2: Any) -> None:
    """A topic the policies allow with node 2's defaults is created (answered
    UNKNOWN_TOPIC_OR_PARTITION: the client asks again), not denied (TOPIC_AUTHORIZATION_FAILED)
    for defaults unknown. (A denial by the policies looks the same to the client as one for
    unknown defaults: the CreateTopics case above tells them apart.)"""
    client, node = on_node_2(3)
    topic = unique_name("t")
    (answered,) = client.request(METADATA, 12, _metadata((topic,))).topics
    assert (int(answered.error_code), node.created) == (3, [topic])
