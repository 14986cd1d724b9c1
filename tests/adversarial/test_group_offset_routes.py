"""Routes to a group's committed offsets around OffsetDelete and DeleteGroups, which the gateway
judges (a protected topic's offsets are kept).

OffsetCommit v2-v4 carries a ``retention_time_ms``: Kafka stores ``now + retention`` as the
offsets' expiry and its periodic cleanup (every ``offsets.retention.check.interval.ms``, 10
minutes by default) deletes them once it has passed, when no member consumes the topic (a
classic group with no members, as one used for commits alone). A commit with a retention of
1 ms is an OffsetDelete a few minutes late. OffsetCommit v1 has a commit timestamp per
partition that starts the offset's retention instead: one from 1970 expires it at the next
cleanup the same way. The gateway sets the retention to -1, the broker's own, and sends v1
(which Sarama 1.22's consumer groups send) as v2 with -1 and no commit timestamps; it carries
no v0 (Kafka 4.0 dropped v0 and v1).

Against the tapped real broker (the test broker does not expire offsets: the tap shows what
reached it); real clients' commits still land.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.structs import OffsetAndMetadata
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.offset_commit.v2 import request as v2
from kio.schema.offset_commit.v3 import request as v3
from kio.schema.offset_commit.v4 import request as v4
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i64, i64Timedelta

from tests.support import BrokerTap, GatewayThread, RawClient, gateway_config, outcome

pytestmark = pytest.mark.adversarial

OFFSET_COMMIT, API_VERSIONS = 8, 18
BROKER_RETENTION = i64Timedelta.parse(timedelta(milliseconds=-1))


@pytest.fixture
def setup(tap: BrokerTap) -> Iterator[tuple[GatewayThread, str]]:
    topic = f"keep-{uuid.uuid4().hex[:8]}"
    direct = AdminClient({"bootstrap.servers": str(tap.address)})
    assert outcome(direct.create_topics([NewTopic(topic, 1, 1)])[topic]) is None
    policies = {"rules": [{"name": "keep", "type": "protected.topics", "topics": ["keep-.*"]}]}
    gw = GatewayThread(gateway_config(tap.address, policies=policies)).start()
    tap.requests.clear()
    try:
        yield gw, topic
    finally:
        gw.stop()


@pytest.mark.parametrize(
    ("m", "retention_ms"),
    [(v2, 1), (v3, 1), (v4, 1), (v2, -2)],
    ids=["v2", "v3", "v4", "v2-negative"],
)
def test_a_commit_cannot_have_its_offsets_expire_at_once(
    setup: tuple[GatewayThread, str], tap: BrokerTap, m: object, retention_ms: int
) -> None:
    """Any retention but -1 is the client's: a negative one (Kafka stores ``now +
    retention``) expires the offsets at the next cleanup as surely as 1 ms does."""
    gw, topic = setup
    version = int(m.OffsetCommitRequest.__version__)  # type: ignore[attr-defined]
    partition = m.OffsetCommitRequestPartition(  # type: ignore[attr-defined]
        partition_index=i32(0), committed_offset=i64(0), committed_metadata=""
    )
    request = m.OffsetCommitRequest(  # type: ignore[attr-defined]
        group_id=GroupId(f"g-{uuid.uuid4().hex[:6]}"),
        generation_id_or_member_epoch=i32(-1),
        member_id="",
        retention_time=i64Timedelta.parse(timedelta(milliseconds=retention_ms)),
        topics=(
            m.OffsetCommitRequestTopic(  # type: ignore[attr-defined]
                name=TopicName(topic), partitions=(partition,)
            ),
        ),
    )
    answer = RawClient(gw.bootstrap).request(OFFSET_COMMIT, version, request)
    assert [int(p.error_code) for t in answer.topics for p in t.partitions] == [0]
    forwarded = tap.forwarded(OFFSET_COMMIT)
    assert [r.retention_time for r in forwarded] == [BROKER_RETENTION]
    # only the retention changed
    assert [r.topics for r in forwarded] == [request.topics]
    assert [(r.group_id, r.member_id) for r in forwarded] == [(request.group_id, "")]


def test_offset_commit_v1_is_sent_without_its_commit_timestamps(
    setup: tuple[GatewayThread, str], tap: BrokerTap
) -> None:
    """v1 (kio has no schema for it: written here) commits offset 0 with a commit timestamp of
    1970, which Kafka takes as the start of its retention: it reaches the broker as v2 with
    the broker's retention and no timestamp, and the commit lands."""
    gw, topic = setup
    client = RawClient(gw.bootstrap, timeout=5)
    versions = client.request(
        API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1")
    )
    advertised = {int(k.api_key): int(k.min_version) for k in versions.api_keys}
    assert advertised[OFFSET_COMMIT] == 1

    def string(text: str) -> bytes:
        return struct.pack(">h", len(text)) + text.encode()

    group = "g-" + uuid.uuid4().hex[:6]
    body = (
        string(group)
        + struct.pack(">i", -1)
        + string("")
        + struct.pack(">i", 1)
        + string(topic)
        + struct.pack(">i", 1)
        + struct.pack(">iqq", 0, 0, 0)
        + string("")
    )
    frame = struct.pack(">hhi", OFFSET_COMMIT, 1, 7) + string("raw") + body
    client.send_bytes(struct.pack(">i", len(frame)) + frame)
    # v1's answer: correlation id, one topic, one partition, error code 0
    answer = client.recv_frame()
    assert answer == struct.pack(">ii", 7, 1) + string(topic) + struct.pack(">iih", 1, 0, 0)
    [sent] = [r.api_version for r in tap.requests if r.api_key == OFFSET_COMMIT]
    [forwarded] = tap.forwarded(OFFSET_COMMIT)
    assert (sent, forwarded.retention_time, forwarded.group_id) == (2, BROKER_RETENTION, group)
    assert [
        (p.partition_index, p.committed_offset) for t in forwarded.topics for p in t.partitions
    ] == [(0, 0)]


def test_real_clients_commits_still_land(setup: tuple[GatewayThread, str], tap: BrokerTap) -> None:
    """librdkafka and kafka-python commit through the gateway (each at the version it picks)
    and read back what they committed."""
    gw, topic = setup
    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": gw.bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
        committed = consumer.committed([TopicPartition(topic, 0)], timeout=10)
    finally:
        consumer.close()
    assert [tp.offset for tp in committed] == [0]
    legacy = KafkaConsumer(bootstrap_servers=gw.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        partition = KafkaTopicPartition(topic, 0)
        legacy.commit({partition: OffsetAndMetadata(0, "", -1)})
        assert legacy.committed(partition) == 0
    finally:
        legacy.close()
    assert len(tap.forwarded(OFFSET_COMMIT)) == 2
