"""Leader endpoints (KIP-951) reach clients as gateway addresses only: Produce v10+, Fetch v16+,
ShareFetch and ShareAcknowledge; and Produce v13, naming topics by id, judged by the names the
ids resolve to.

Scripted upstream: the test broker (Tansu) sends no leader endpoints, takes Produce only to
v11 and Fetch to v17, and has no ShareFetch or ShareAcknowledge. So a scripted broker
(tests/scripted.py) answers every partition NOT_LEADER_OR_FOLLOWER with the new leader, node
2, and names node 2's real address (a second scripted broker, as ``localhost``) in
``node_endpoints``, as a Kafka broker does after a leader moved. The tests decode the bytes
the client receives and check that every endpoint in them is a gateway listener, that the
broker's address is nowhere in them, and that the gateway's address for node 2 leads to node
2.
"""

from __future__ import annotations

import datetime
import importlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.static.primitive import i16, i32, i32Timedelta, i64

from gateway.record_validation import STATE_NAMESPACE
from protocol.framing import RequestHeader
from tests.batches import batch_with, record
from tests.enforcement_support import fetch_payload
from tests.scripted import ScriptedBroker, ScriptedCluster, metadata_response
from tests.support import GatewayThread, RawClient, gateway_config

ZERO = i32Timedelta.parse(datetime.timedelta(0))
TOPICS = ("orders", "payments")
"""The topics the scripted cluster has (ids: uuid5 of the name, as metadata_response says)."""
UNKNOWN_ID = uuid.uuid4()


def topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_DNS, name)


def module(api: str, version: int, kind: str) -> Any:
    return importlib.import_module(f"kio.schema.{api}.v{version}.{kind}")


class MovedLeaders:
    """Node 1 of the scripted cluster: every partition's leader moved to node 2, whose
    address (``localhost`` and node 2's port) it names in ``node_endpoints``."""

    def __init__(self, node2: ScriptedBroker) -> None:
        self.node2 = node2

    def endpoint(self, schema: Any) -> Any:
        assert self.node2.address is not None
        return schema.NodeEndpoint(
            node_id=i32(2), host="localhost", port=i32(self.node2.address.port), rack="rack-2"
        )

    async def respond(self, me: ScriptedBroker, header: RequestHeader, request: Any) -> Any:
        version = header.api_version
        if header.api_key == 3:
            return metadata_response(me, [(t, [(1,)]) for t in TOPICS])
        if header.api_key == 0:
            return self.produce(version, request)
        if header.api_key == 1:
            return self.fetch(version, request)
        if header.api_key == 78:
            return self.share_fetch(version, request)
        if header.api_key == 79:
            return self.share_acknowledge(version, request)
        raise AssertionError(f"unscripted API key {header.api_key}")

    def produce(self, version: int, request: Any) -> Any:
        schema = module("produce", version, "response")
        return schema.ProduceResponse(
            responses=tuple(
                schema.TopicProduceResponse(
                    **_named(version >= 13, topic),
                    partition_responses=tuple(
                        schema.PartitionProduceResponse(
                            index=p.index,
                            error_code=ErrorCode.not_leader_or_follower,
                            base_offset=i64(-1),
                            record_errors=(),
                            current_leader=schema.LeaderIdAndEpoch(
                                leader_id=i32(2), leader_epoch=i32(5)
                            ),
                        )
                        for p in topic.partition_data
                    ),
                )
                for topic in request.topic_data
            ),
            throttle_time=ZERO,
            node_endpoints=(self.endpoint(schema),),
        )

    def fetch(self, version: int, request: Any) -> Any:
        schema = module("fetch", version, "response")
        return schema.FetchResponse(
            throttle_time=ZERO,
            error_code=ErrorCode.none,
            session_id=i32(0),
            responses=tuple(
                schema.FetchableTopicResponse(
                    topic_id=topic.topic_id,
                    partitions=tuple(
                        schema.PartitionData(
                            partition_index=p.partition,
                            error_code=ErrorCode.not_leader_or_follower,
                            high_watermark=i64(-1),
                            aborted_transactions=None,
                            records=None,
                            current_leader=schema.LeaderIdAndEpoch(
                                leader_id=i32(2), leader_epoch=i32(5)
                            ),
                        )
                        for p in topic.partitions
                    ),
                )
                for topic in request.topics
            ),
            node_endpoints=(self.endpoint(schema),),
        )

    def share_fetch(self, version: int, request: Any) -> Any:
        schema = module("share_fetch", version, "response")
        return schema.ShareFetchResponse(
            throttle_time=ZERO,
            error_code=ErrorCode.none,
            error_message=None,
            acquisition_lock_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
            responses=tuple(
                schema.ShareFetchableTopicResponse(
                    topic_id=topic.topic_id,
                    partitions=tuple(
                        schema.PartitionData(
                            partition_index=p.partition_index,
                            error_code=ErrorCode.not_leader_or_follower,
                            error_message=None,
                            acknowledge_error_code=ErrorCode.none,
                            acknowledge_error_message=None,
                            current_leader=schema.LeaderIdAndEpoch(
                                leader_id=i32(2), leader_epoch=i32(5)
                            ),
                            records=b"",
                            acquired_records=(),
                        )
                        for p in topic.partitions
                    ),
                )
                for topic in request.topics
            ),
            node_endpoints=(self.endpoint(schema),),
        )

    def share_acknowledge(self, version: int, request: Any) -> Any:
        schema = module("share_acknowledge", version, "response")
        fields: dict[str, Any] = {}
        if version >= 2:
            fields["acquisition_lock_timeout"] = i32Timedelta.parse(datetime.timedelta(seconds=30))
        return schema.ShareAcknowledgeResponse(
            **fields,
            throttle_time=ZERO,
            error_code=ErrorCode.none,
            error_message=None,
            responses=tuple(
                schema.ShareAcknowledgeTopicResponse(
                    topic_id=topic.topic_id,
                    partitions=tuple(
                        schema.PartitionData(
                            partition_index=p.partition_index,
                            error_code=ErrorCode.not_leader_or_follower,
                            error_message=None,
                            current_leader=schema.LeaderIdAndEpoch(
                                leader_id=i32(2), leader_epoch=i32(5)
                            ),
                        )
                        for p in topic.partitions
                    ),
                )
                for topic in request.topics
            ),
            node_endpoints=(self.endpoint(schema),),
        )


def _named(by_id: bool, topic: Any) -> dict[str, Any]:
    return {"topic_id": topic.topic_id} if by_id else {"name": topic.name}


class Node2:
    """Node 2: answers Metadata, so a test can tell a connection reached it."""

    async def respond(self, me: ScriptedBroker, header: RequestHeader, request: Any) -> Any:
        assert header.api_key == 3
        return metadata_response(me, [], brokers=(2,))


@pytest.fixture
def cluster(scripted_cluster: ScriptedCluster) -> Iterator[tuple[GatewayThread, ScriptedBroker]]:
    node2 = scripted_cluster.add(Node2().respond, "node-2")
    node1 = scripted_cluster.add(MovedLeaders(node2).respond, "node-1")
    gw = GatewayThread(gateway_config(node1.address)).start()
    try:
        yield gw, node2
    finally:
        gw.stop()


def raw_answer(gw: GatewayThread, api_key: int, version: int, payload: Any) -> tuple[bytes, Any]:
    """The bytes the client receives, and what they decode to."""
    from protocol.codec import decode_response

    client = RawClient(gw.bootstrap)
    try:
        client.send(api_key, version, payload)
        frame = client.recv_frame()
    finally:
        client.close()
    return frame, decode_response(api_key, version, frame)


def assert_gateway_addresses_only(
    gw: GatewayThread, node2: ScriptedBroker, frame: bytes, answer: Any
) -> None:
    assert node2.address is not None
    endpoints = [(int(e.node_id), e.host, int(e.port), e.rack) for e in answer.node_endpoints]
    assert len(endpoints) == 1
    node_id, host, port, rack = endpoints[0]
    assert (node_id, rack) == (2, "rack-2")
    assert (host, port) in gw.gateway.nodes.gateway_addresses_snapshot()
    assert port != node2.address.port
    assert b"localhost" not in frame  # the broker's host is nowhere in what the client got
    # the gateway's address for node 2 leads to node 2
    before = len(node2.requests)
    RawClient(f"{host}:{port}").request(
        3,
        12,
        MetadataRequest(
            topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False
        ),
    )
    assert len(node2.requests) == before + 1


def produce_request(
    version: int, topics: tuple[tuple[Any, int], ...], key: bytes | None = b"k"
) -> Any:
    """Three records to each (topic name or id, partition); from v13 by id."""
    m = module("produce", version, "request")
    batch = batch_with("none", tuple(record(i, key, b"v", ()) for i in range(3)), idempotent=False)
    return m.ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
        topic_data=tuple(
            m.TopicProduceData(
                **({"topic_id": t} if version >= 13 else {"name": t}),
                partition_data=(m.PartitionProduceData(index=i32(p), records=batch),),
            )
            for t, p in topics
        ),
    )


@pytest.mark.parametrize("version", [10, 11, 12, 13])
def test_produce_leader_endpoints_reach_the_client_as_gateway_addresses(
    cluster: tuple[GatewayThread, ScriptedBroker], version: int
) -> None:
    gw, node2 = cluster
    topic = topic_id("orders") if version >= 13 else "orders"
    frame, answer = raw_answer(gw, 0, version, produce_request(version, ((topic, 0),)))
    (partition,) = answer.responses[0].partition_responses
    assert partition.error_code == ErrorCode.not_leader_or_follower
    assert int(partition.current_leader.leader_id) == 2
    assert_gateway_addresses_only(gw, node2, frame, answer)


@pytest.mark.parametrize("version", [10, 12])
def test_a_merged_produce_answer_carries_gateway_addresses_too(
    cluster: tuple[GatewayThread, ScriptedBroker], version: int
) -> None:
    """A partition the gateway answers itself (records without the key ``payments``
    requires) and one the broker answers: the merged answer keeps the broker's leader
    endpoints, rewritten."""
    gw, node2 = cluster
    gw.run(gw.gateway.state.put_all(STATE_NAMESPACE, {"payments": "key-required"}))
    frame, answer = raw_answer(
        gw, 0, version, produce_request(version, (("orders", 0), ("payments", 0)), key=None)
    )
    codes = {
        str(t.name): int(p.error_code) for t in answer.responses for p in t.partition_responses
    }
    assert codes == {"orders": 6, "payments": 87}  # NOT_LEADER_OR_FOLLOWER, INVALID_RECORD
    assert_gateway_addresses_only(gw, node2, frame, answer)


@pytest.mark.parametrize("version", [16, 17, 18])
def test_fetch_leader_endpoints_reach_the_client_as_gateway_addresses(
    cluster: tuple[GatewayThread, ScriptedBroker], version: int
) -> None:
    gw, node2 = cluster
    frame, answer = raw_answer(
        gw, 1, version, fetch_payload(version, (topic_id("orders"), 0), (topic_id("payments"), 0))
    )
    assert [int(p.error_code) for t in answer.responses for p in t.partitions] == [6, 6]
    assert_gateway_addresses_only(gw, node2, frame, answer)


@pytest.mark.parametrize("version", [1, 2])
def test_share_fetch_leader_endpoints_reach_the_client_as_gateway_addresses(
    cluster: tuple[GatewayThread, ScriptedBroker], version: int
) -> None:
    gw, node2 = cluster
    m = module("share_fetch", version, "request")
    fields: dict[str, Any] = {
        "group_id": "share-group",
        "member_id": "member-1",
        "share_session_epoch": i32(0),
        "max_wait": i32Timedelta.parse(datetime.timedelta(milliseconds=10)),
        "min_bytes": i32(1),
        "max_bytes": i32(1 << 20),
        "topics": (
            m.FetchTopic(
                topic_id=topic_id("orders"),
                partitions=(m.FetchPartition(partition_index=i32(0), acknowledgement_batches=()),),
            ),
        ),
        "forgotten_topics_data": (),
    }
    import dataclasses

    names = {f.name for f in dataclasses.fields(m.ShareFetchRequest)}
    if "max_records" in names:
        fields["max_records"] = i32(500)
    if "batch_size" in names:
        fields["batch_size"] = i32(500)
    frame, answer = raw_answer(
        gw, 78, version, m.ShareFetchRequest(**{k: v for k, v in fields.items() if k in names})
    )
    assert [int(p.error_code) for t in answer.responses for p in t.partitions] == [6]
    assert_gateway_addresses_only(gw, node2, frame, answer)


@pytest.mark.parametrize("version", [1, 2])
def test_share_acknowledge_leader_endpoints_reach_the_client_as_gateway_addresses(
    cluster: tuple[GatewayThread, ScriptedBroker], version: int
) -> None:
    gw, node2 = cluster
    m = module("share_acknowledge", version, "request")
    payload = m.ShareAcknowledgeRequest(
        group_id="share-group",
        member_id="member-1",
        share_session_epoch=i32(1),
        topics=(
            m.AcknowledgeTopic(
                topic_id=topic_id("orders"),
                partitions=(
                    m.AcknowledgePartition(
                        partition_index=i32(0),
                        acknowledgement_batches=(
                            m.AcknowledgementBatch(
                                first_offset=i64(0), last_offset=i64(2), acknowledge_types=(1,)
                            ),
                        ),
                    ),
                ),
            ),
        ),
    )
    frame, answer = raw_answer(gw, 79, version, payload)
    assert [int(p.error_code) for t in answer.responses for p in t.partitions] == [6]
    assert_gateway_addresses_only(gw, node2, frame, answer)


def test_produce_v13_answers_an_unknown_topic_id_itself(
    cluster: tuple[GatewayThread, ScriptedBroker], scripted_cluster: ScriptedCluster
) -> None:
    """An id the cluster does not know: UNKNOWN_TOPIC_ID for its partitions, as Kafka answers,
    and not forwarded; the known topic's partition goes to the broker. (With no topic
    validated the gateway reads no Produce, and the broker answers an unknown id itself.)"""
    gw, _ = cluster
    gw.run(gw.gateway.state.put_all(STATE_NAMESPACE, {"payments": "key-required"}))
    node1 = scripted_cluster.brokers[1]
    _, answer = raw_answer(
        gw, 0, 13, produce_request(13, ((topic_id("orders"), 0), (UNKNOWN_ID, 3)))
    )
    codes = {
        t.topic_id: [(int(p.index), int(p.error_code)) for p in t.partition_responses]
        for t in answer.responses
    }
    assert codes == {topic_id("orders"): [(0, 6)], UNKNOWN_ID: [(3, 100)]}
    (forwarded,) = [r for h, r in node1.requests if h.api_key == 0]
    assert [t.topic_id for t in forwarded.topic_data] == [topic_id("orders")]
