"""Routes through the APIs that name topic partitions, and through address-bearing and internal
APIs: each refused by the gateway, shown by what the client gets and by the tap (the relay
between gateway and broker), which must not have carried the refused request.

The protected and own topics are created straight at the broker: the gateway itself would not
let an anonymous client create them.
"""

from __future__ import annotations

import contextlib
import struct
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.alter_partition_reassignments.v0 import request as apr
from kio.schema.delete_records.v2 import request as dr
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.describe_quorum.v2 import request as dq
from kio.schema.elect_leaders.v2 import request as el
from kio.schema.list_offsets.v7 import request as lo
from kio.schema.offset_delete.v0 import request as od
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import BrokerId, GroupId, TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from gateway.record_validation import STATE_NAMESPACE
from tests.batches import batch_with, record
from tests.support import (
    BrokerTap,
    GatewayThread,
    RawClient,
    fetch_request,
    gateway_config,
    outcome,
)

pytestmark = pytest.mark.adversarial

TIMEOUT = i32Timedelta.parse(timedelta(seconds=5))
POLICY_VIOLATION = 44
TOPIC_AUTHORIZATION_FAILED = 29
INVALID_TOPIC_EXCEPTION = 17
UNSUPPORTED_ENDPOINT_TYPE = 115


@dataclass(frozen=True)
class Topics:
    protected: str
    own: str
    plain: str


@pytest.fixture
def setup(tap: BrokerTap) -> Iterator[tuple[GatewayThread, Topics, BrokerTap]]:
    suffix = uuid.uuid4().hex[:8]
    topics = Topics(protected=f"keep-{suffix}", own=f"kpg-audit-{suffix}", plain=f"t-{suffix}")
    direct = AdminClient({"bootstrap.servers": str(tap.address)})
    futures = direct.create_topics([NewTopic(t, 1, 1) for t in (topics.protected, topics.plain)])
    for future in futures.values():
        assert outcome(future) is None
    policies = {
        "rules": [
            {"name": "keep", "type": "protected.topics", "topics": ["keep-.*"]},
            {"name": "rf", "type": "replication.factor", "max": 1},
            {
                "name": "no-unclean",
                "type": "forbidden.configs",
                "configs": ["unclean.leader.election.enable"],
            },
        ]
    }
    gw = GatewayThread(
        gateway_config(tap.address, policies=policies, audit={"topic": topics.own})
    ).start()
    # plain is validated: a record without the trace-id header must not land in it
    gw.run(gw.gateway.state.put(STATE_NAMESPACE, topics.plain, "trace-id"))
    tap.requests.clear()
    try:
        yield gw, topics, tap
    finally:
        gw.stop()


def _delete_records(topic: str) -> Any:
    partition = dr.DeleteRecordsPartition(partition_index=i32(0), offset=i64(-1))
    return dr.DeleteRecordsRequest(
        topics=(dr.DeleteRecordsTopic(name=TopicName(topic), partitions=(partition,)),),
        timeout=TIMEOUT,
    )


def _offset_delete(topic: str) -> Any:
    return od.OffsetDeleteRequest(
        group_id=GroupId("g"),
        topics=(
            od.OffsetDeleteRequestTopic(
                name=TopicName(topic),
                partitions=(od.OffsetDeleteRequestPartition(partition_index=i32(0)),),
            ),
        ),
    )


def _reassign(topic: str) -> Any:
    partition = apr.ReassignablePartition(
        partition_index=i32(0), replicas=(BrokerId(1), BrokerId(2), BrokerId(3))
    )
    return apr.AlterPartitionReassignmentsRequest(
        timeout=TIMEOUT,
        topics=(apr.ReassignableTopic(name=TopicName(topic), partitions=(partition,)),),
    )


def _unclean(topic: str) -> Any:
    return el.ElectLeadersRequest(
        election_type=i8(1),
        topic_partitions=(el.TopicPartitions(topic=TopicName(topic), partitions=(i32(0),)),),
        timeout=TIMEOUT,
    )


def _fetch(topic: str) -> Any:
    return fetch_request(topic, max_wait=timedelta(milliseconds=50), min_bytes=0)


def _list_offsets(topic: str) -> Any:
    partition = lo.ListOffsetsPartition(
        partition_index=i32(0), current_leader_epoch=i32(-1), timestamp=i64(-1)
    )
    return lo.ListOffsetsRequest(
        replica_id=BrokerId(-1),
        isolation_level=i8(0),
        topics=(lo.ListOffsetsTopic(name=TopicName(topic), partitions=(partition,)),),
    )


def _produce(topic: str) -> Any:
    batch = batch_with("none", (record(0, b"k", b"v"),), idempotent=False)
    return ProduceRequest(
        transactional_id=None,
        acks=i16(1),
        timeout=TIMEOUT,
        topic_data=(
            TopicProduceData(
                name=TopicName(topic),
                partition_data=(PartitionProduceData(index=i32(0), records=batch),),
            ),
        ),
    )


def _codes(answer: Any, topics_field: str, partitions_field: str) -> list[int]:
    return [
        int(p.error_code)
        for t in getattr(answer, topics_field)
        for p in getattr(t, partitions_field)
    ]


@dataclass(frozen=True)
class Route:
    id: str
    api_key: int
    version: int
    build: Callable[[str], Any]
    target: Callable[[Topics], str]
    code: int
    fields: tuple[str, str]


ROUTES = [
    Route("delete-records-protected", 21, 2, _delete_records, lambda t: t.protected,
          POLICY_VIOLATION, ("topics", "partitions")),
    Route("delete-records-own", 21, 2, _delete_records, lambda t: t.own,
          TOPIC_AUTHORIZATION_FAILED, ("topics", "partitions")),
    Route("delete-records-alias", 21, 2, _delete_records, lambda t: t.protected + "/",
          INVALID_TOPIC_EXCEPTION, ("topics", "partitions")),
    Route("offset-delete-protected", 47, 0, _offset_delete, lambda t: t.protected,
          POLICY_VIOLATION, ("topics", "partitions")),
    Route("reassign-past-max-replication-factor", 45, 0, _reassign, lambda t: t.plain,
          POLICY_VIOLATION, ("responses", "partitions")),
    Route("reassign-protected", 45, 0, _reassign, lambda t: t.protected,
          POLICY_VIOLATION, ("responses", "partitions")),
    Route("unclean-election-forbidden", 43, 2, _unclean, lambda t: t.plain,
          POLICY_VIOLATION, ("replica_election_results", "partition_result")),
    Route("fetch-own", 1, 12, _fetch, lambda t: t.own,
          TOPIC_AUTHORIZATION_FAILED, ("responses", "partitions")),
    Route("fetch-own-alias", 1, 12, _fetch, lambda t: t.own + "/",
          INVALID_TOPIC_EXCEPTION, ("responses", "partitions")),
    Route("list-offsets-own", 2, 7, _list_offsets, lambda t: t.own,
          TOPIC_AUTHORIZATION_FAILED, ("topics", "partitions")),
    Route("produce-own", 0, 9, _produce, lambda t: t.own,
          TOPIC_AUTHORIZATION_FAILED, ("responses", "partition_responses")),
    Route("produce-own-alias", 0, 9, _produce, lambda t: t.own + "/",
          INVALID_TOPIC_EXCEPTION, ("responses", "partition_responses")),
    Route("produce-validated-alias-suffix", 0, 9, _produce, lambda t: t.plain + "/",
          INVALID_TOPIC_EXCEPTION, ("responses", "partition_responses")),
    Route("produce-validated-alias-prefix", 0, 9, _produce, lambda t: "/" + t.plain,
          INVALID_TOPIC_EXCEPTION, ("responses", "partition_responses")),
    Route("produce-validated-alias-double", 0, 9, _produce, lambda t: t.plain + "//",
          INVALID_TOPIC_EXCEPTION, ("responses", "partition_responses")),
]  # fmt: skip


@pytest.mark.parametrize("route", ROUTES, ids=[r.id for r in ROUTES])
def test_partitioned_route_is_refused_before_the_broker(
    setup: tuple[GatewayThread, Topics, BrokerTap], route: Route
) -> None:
    gw, topics, tap = setup
    target = route.target(topics)
    answer = RawClient(gw.bootstrap).request(route.api_key, route.version, route.build(target))
    assert _codes(answer, *route.fields) == [route.code]
    # kpg-audit: the gateway's audit topic sink, writing its lifecycle events
    reached = [r for r in tap.requests if r.api_key == route.api_key and r.client_id != "kpg-audit"]
    assert not reached, f"{len(reached)} request(s) reached the broker"


def test_the_allowed_neighbour_still_reaches_the_broker(
    setup: tuple[GatewayThread, Topics, BrokerTap],
) -> None:
    """The same request on a topic no rule guards goes through: the refusals above are the
    rules', not a blanket one. (The test broker has no DeleteRecords: it drops the
    connection, which the client sees as a closed one; the tap shows the request went.)"""
    gw, topics, tap = setup
    client = RawClient(gw.bootstrap, timeout=5)
    client.send(21, 2, _delete_records(topics.plain))
    with contextlib.suppress(ConnectionError, OSError):
        client.recv_frame()
    forwarded = tap.forwarded(21)
    assert [str(t.name) for r in forwarded for t in r.topics] == [topics.plain]


def test_describe_cluster_for_controllers_is_refused(
    setup: tuple[GatewayThread, Topics, BrokerTap],
) -> None:
    gw, _, tap = setup
    request = DescribeClusterRequest(
        include_cluster_authorized_operations=False, endpoint_type=i8(2)
    )
    answer = RawClient(gw.bootstrap).request(60, 1, request)
    assert int(answer.error_code) == UNSUPPORTED_ENDPOINT_TYPE
    assert answer.brokers == ()
    assert 60 not in tap.api_keys()


@pytest.mark.parametrize(
    ("api_key", "version", "body"),
    [
        pytest.param(55, 2, dq.DescribeQuorumRequest(topics=()), id="describe-quorum"),
        pytest.param(58, 0, b"\x00\x00\x00\x00\x00", id="envelope"),
        pytest.param(27, 1, b"\x00\x00\x00\x00", id="write-txn-markers"),
        pytest.param(62, 0, b"\x00\x00\x00\x00", id="broker-registration"),
    ],
)
def test_refused_apis_close_the_connection_and_never_reach_the_broker(
    setup: tuple[GatewayThread, Topics, BrokerTap], api_key: int, version: int, body: Any
) -> None:
    gw, _, tap = setup
    client = RawClient(gw.bootstrap, timeout=5)
    if isinstance(body, bytes):
        header = struct.pack(">hhih", api_key, version, 1, 3) + b"raw"
        frame = header + body
        client.send_bytes(struct.pack(">i", len(frame)) + frame)
    else:
        client.send(api_key, version, body)
    with pytest.raises((ConnectionError, OSError)):
        client.recv_frame()
    assert api_key not in tap.api_keys()


def _commit(bootstrap: str, group: str, topic: str) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        consumer.close()


def test_delete_groups_holding_offsets_of_a_protected_topic_is_refused(
    setup: tuple[GatewayThread, Topics, BrokerTap],
) -> None:
    """Deleting a group deletes its committed offsets: a group with offsets of a protected
    topic is kept, the neighbour with offsets of a plain topic goes."""
    gw, topics, tap = setup
    guarded, plain = f"g-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    _commit(gw.bootstrap, guarded, topics.protected)
    _commit(gw.bootstrap, plain, topics.plain)
    tap.requests.clear()
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    futures = admin.delete_consumer_groups([guarded, plain], request_timeout=10)
    assert outcome(futures[guarded]) == (KafkaError.POLICY_VIOLATION, "Broker: Policy violation")
    assert outcome(futures[plain]) is None
    deleted = [str(g) for r in tap.forwarded(42) for g in r.groups_names]
    assert deleted == [plain]
