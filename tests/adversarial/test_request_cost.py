"""Routes to make the gateway do far more work than a request costs its sender (issue 11,
item 11): requests that are cheap to send and expensive for the gateway to take apart. Each
case runs the real gateway in front of the tapped real broker.

A judged request is decoded whole into Python objects before it is judged: 10 to 18 times its
size in memory, with the event loop held (every other client waiting) while it decodes. An
8 MB DescribeProducers of two million partitions grew a process by 140 MB and took 0.5 s of
CPU in one step; at the 100 MiB frame limit, over 1.5 GB and seconds per request. So is an
OffsetCommit v1, which the gateway writes again as v2 partition by partition (88 MB: 6 s and
1.2 GB), and a consumer's Fetch v15+, walked to its tagged fields partition by partition
(96 MB: 1.8 s). Kafka's
brokers decode in request handler threads beside each other; the gateway has one loop.
``limits."judged.request.max.bytes"`` (8 MiB) closes such a connection unread, as Kafka
closes one over ``socket.request.max.bytes``.
"""

from __future__ import annotations

import hashlib
import importlib
import re
import signal
import struct
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import ProduceRequest
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from gateway import client_configs as cc
from protocol import client_configs as wire
from protocol.alter_configs import SET
from protocol.codec import encode_request
from spark_audit.event import AuditEvent
from tests.adversarial.test_connection_limits import served
from tests.adversarial.test_produce_by_topic_id import topic_ids
from tests.batches import one_record_batch, produce_v9
from tests.e2e.test_gateway_process import kpg_config, start_kpg
from tests.inproc.test_client_configs import INVALID_REQUEST, USER_CLIENT, alter, stored
from tests.inproc.test_record_validation import create_validated_topic
from tests.support import (
    BrokerTap,
    GatewayThread,
    RawClient,
    create_topic_request,
    gateway_config,
    outcome,
    spool_events,
    wait_for,
)

pytestmark = pytest.mark.adversarial

MiB = 1024 * 1024
PRODUCE, FETCH, METADATA, LIST_OFFSETS, OFFSET_COMMIT, CREATE_TOPICS, DESCRIBE_PRODUCERS = (
    0,
    1,
    3,
    2,
    8,
    19,
    61,
)
POLICY_VIOLATION = 44
JUDGED_MAX = 8 * MiB
"""The default of ``judged.request.max.bytes``."""


def list_offsets(partitions: int) -> bytes:
    """A ListOffsets v7 frame asking the earliest offset of ``partitions`` partitions of one
    topic: 16 bytes each on the wire."""
    parts = tuple(
        ListOffsetsPartition(
            partition_index=i32(index), current_leader_epoch=i32(-1), timestamp=i64(-2)
        )
        for index in range(partitions)
    )
    request = ListOffsetsRequest(
        replica_id=BrokerId(-1),
        isolation_level=i8(0),
        topics=(ListOffsetsTopic(name=TopicName("cost"), partitions=parts),),
    )
    return encode_request(LIST_OFFSETS, 7, 1, "cost", request)


def describe_producers(partitions: int) -> bytes:
    """A DescribeProducers v0 frame: partition indexes as bare int32, 4 bytes each."""
    request = DescribeProducersRequest(
        topics=(
            TopicRequest(
                name=TopicName("cost"),
                partition_indexes=tuple(i32(index) for index in range(partitions)),
            ),
        )
    )
    return encode_request(DESCRIBE_PRODUCERS, 0, 1, "cost", request)


def metadata(topics: int) -> bytes:
    """A Metadata v12 frame naming ``topics`` topics of 40 characters."""
    request = MetadataRequest(
        topics=tuple(
            MetadataRequestTopic(topic_id=None, name=TopicName(f"cost-{index:035d}"))
            for index in range(topics)
        ),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    return encode_request(METADATA, 12, 1, "cost", request)


def offset_commit_v1(partitions: int) -> bytes:
    """An OffsetCommit v1 frame (kio has no schema for it: written here) committing
    ``partitions`` partitions of one topic, 22 bytes each: the gateway writes it again as v2,
    partition by partition."""
    body = (
        struct.pack(">h", 1)
        + b"g"
        + struct.pack(">ih", -1, 0)
        + struct.pack(">ih", 1, 4)
        + b"cost"
        + struct.pack(">i", partitions)
        + struct.pack(">iqqh", 0, 0, 0, 0) * partitions
    )
    frame = struct.pack(">hhih", OFFSET_COMMIT, 1, 1, 4) + b"cost" + body
    return struct.pack(">i", len(frame)) + frame


def fetch_v17(partitions: int) -> bytes:
    """A consumer's Fetch v17 of ``partitions`` partitions of one topic id, 33 bytes each: the
    gateway walks every one to the request's tagged fields, where v15+ says who fetches."""

    def uvarint(value: int) -> bytes:
        out = b""
        while value > 0x7F:
            out += bytes([value & 0x7F | 0x80])
            value >>= 7
        return out + bytes([value])

    body = struct.pack(">iiibii", 10, 0, MiB, 0, 0, -1)
    body += uvarint(2) + uuid.uuid4().bytes + uvarint(partitions + 1)
    body += (struct.pack(">iiqiqi", 0, -1, 0, -1, -1, MiB) + b"\x00") * partitions
    body += b"\x00" + uvarint(1) + uvarint(1) + b"\x00"  # no forgotten topics, rack id ""
    frame = struct.pack(">hhih", FETCH, 17, 1, 4) + b"cost\x00" + body
    return struct.pack(">i", len(frame)) + frame


def _uvarint(value: int) -> bytes:
    out = b""
    while value > 0x7F:
        out += bytes([value & 0x7F | 0x80])
        value >>= 7
    return out + bytes([value])


def fetch_v13(partitions: int, topic_id: uuid.UUID) -> bytes:
    """A consumer's Fetch v13 of ``partitions`` partitions of ``topic_id``, 33 bytes each:
    where the gateway has own topics, it walks every one to read the topic ids."""
    body = struct.pack(">iiiibii", -1, 10, 0, MiB, 0, 0, -1)
    body += _uvarint(2) + topic_id.bytes + _uvarint(partitions + 1)
    body += (struct.pack(">iiqiqi", 0, -1, 0, -1, -1, MiB) + b"\x00") * partitions
    body += b"\x00" + _uvarint(1) + _uvarint(1) + b"\x00"  # no forgotten topics, rack id ""
    frame = struct.pack(">hhih", FETCH, 13, 1, 4) + b"cost\x00" + body
    return struct.pack(">i", len(frame)) + frame


SHARE_FETCH, SHARE_ACKNOWLEDGE = 78, 79


def share_request(api_key: int, partitions: int, topic_id: uuid.UUID) -> bytes:
    """A ShareFetch or ShareAcknowledge v1 of ``partitions`` partitions of ``topic_id``, 6
    bytes each (no acknowledgements): where the gateway has own topics, it reads the topic
    ids of every one."""
    body = _uvarint(2) + b"g" + _uvarint(2) + b"m" + struct.pack(">i", 1)
    if api_key == SHARE_FETCH:  # max_wait_ms, min_bytes, max_bytes, max_records, batch_size
        body += struct.pack(">iiiii", 10, 0, MiB, 500, 500)
    body += _uvarint(2) + topic_id.bytes + _uvarint(partitions + 1)
    body += (struct.pack(">i", 0) + b"\x01\x00") * partitions
    body += b"\x00"  # the topic's tagged fields
    if api_key == SHARE_FETCH:
        body += _uvarint(1)  # no forgotten topics
    body += b"\x00"
    frame = struct.pack(">hhih", api_key, 1, 1, 4) + b"cost\x00" + body
    return struct.pack(">i", len(frame)) + frame


OVERSIZED: dict[str, tuple[int, Callable[[], bytes]]] = {
    # name: (API key, a frame just over 8 MiB)
    "ListOffsets of 600,000 partitions": (LIST_OFFSETS, lambda: list_offsets(600_000)),
    "DescribeProducers of 2,200,000 partitions": (
        DESCRIBE_PRODUCERS,
        lambda: describe_producers(2_200_000),
    ),
    "Metadata naming 220,000 topics": (METADATA, lambda: metadata(220_000)),
    "OffsetCommit v1 of 390,000 partitions": (OFFSET_COMMIT, lambda: offset_commit_v1(390_000)),
    "Fetch v17 of 260,000 partitions": (FETCH, lambda: fetch_v17(260_000)),
}
WALKED_BY_ID: dict[str, tuple[int, Callable[[uuid.UUID], bytes]]] = {
    # name: (API key, a frame just over 8 MiB naming a topic id), read for its topic ids
    # where the gateway has own topics
    "Fetch v13 of 260,000 partitions": (FETCH, lambda topic_id: fetch_v13(260_000, topic_id)),
    "ShareFetch of 1,400,000 partitions": (
        SHARE_FETCH,
        lambda topic_id: share_request(SHARE_FETCH, 1_400_000, topic_id),
    ),
    "ShareAcknowledge of 1,400,000 partitions": (
        SHARE_ACKNOWLEDGE,
        lambda topic_id: share_request(SHARE_ACKNOWLEDGE, 1_400_000, topic_id),
    ),
}


@contextmanager
def gateway_with(tap: BrokerTap, spool: Path, **limits: Any) -> Iterator[GatewayThread]:
    config = gateway_config(tap.address, limits=limits, audit={"spool_dir": str(spool)})
    gw = GatewayThread(config).start()
    try:
        yield gw
    finally:
        gw.stop()


@pytest.mark.parametrize("name", list(OVERSIZED))
def test_a_judged_request_too_large_to_decode_is_refused_unread(
    tap: BrokerTap, tmp_path: Path, name: str
) -> None:
    api_key, build = OVERSIZED[name]
    frame = build()
    assert len(frame) - 4 > JUDGED_MAX
    with gateway_with(tap, tmp_path / "audit") as gw:
        client = RawClient(gw.bootstrap, timeout=30)
        client.send_bytes(frame)
        assert client.is_closed(30), f"{name}: the connection stays open"
        assert not [r for r in tap.requests if r.api_key == api_key], "it reached the broker"
        assert gw.metric("kpg_rejected_frames_total", reason="oversized") == 1
        assert served(RawClient(gw.bootstrap))
        events = spool_events(tmp_path / "audit", lambda e: e.policy == "limits")
    assert len(events) == 1
    assert events[0].verdict == "denied"
    assert "judged.request.max.bytes" in (events[0].message or "")


@pytest.mark.parametrize("name", list(WALKED_BY_ID))
def test_a_request_by_topic_id_too_large_to_read_is_refused_unread(
    tap: BrokerTap, name: str
) -> None:
    """With own topics, a Fetch v13+ is walked, and a ShareFetch or ShareAcknowledge
    decoded, to read its topic ids: over ``judged.request.max.bytes`` the connection is
    closed unread, as a judged request's is. ShareFetch and ShareAcknowledge had no cap:
    every byte was scanned for the own topics' ids (Tansu has no share groups: what reaches
    it is seen at the tap). The topic id is one the gateway has learnt (a small request of
    it read first), so that the large one would go on unread once walked."""
    api_key, build = WALKED_BY_ID[name]
    topic = f"walked-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": str(tap.broker)})
    assert outcome(admin.create_topics([NewTopic(topic, 1, 1)])[topic]) is None
    assert wait_for(lambda: topic_ids(tap, [topic])[topic] is not None)
    topic_id = topic_ids(tap, [topic])[topic]
    assert topic_id is not None
    frame = build(topic_id)
    assert len(frame) - 4 > JUDGED_MAX
    config = gateway_config(tap.address, audit={"topic": f"kpg-audit-{uuid.uuid4().hex[:8]}"})
    gw = GatewayThread(config).start()
    try:
        small = RawClient(gw.bootstrap, timeout=30)
        small.send_bytes(fetch_v13(1, topic_id))
        assert small.recv_frame()  # read: the gateway learns the topic's id
        assert gw.metric("kpg_rejected_frames_total", reason="oversized") == 0
        tap.requests.clear()
        client = RawClient(gw.bootstrap, timeout=30)
        client.send_bytes(frame)
        assert client.is_closed(30), f"{name}: the connection stays open"
        assert not [r for r in tap.requests if r.api_key == api_key], "it reached the broker"
        assert gw.metric("kpg_rejected_frames_total", reason="oversized") == 1
        assert served(RawClient(gw.bootstrap))
    finally:
        gw.stop()


def test_a_judged_request_within_the_limit_is_judged_as_before(
    tap: BrokerTap, tmp_path: Path
) -> None:
    """The limit is a reload's to change (-1: none), and a request under it is carried."""
    with gateway_with(tap, tmp_path / "audit", **{"judged.request.max.bytes": -1}) as gw:
        client = RawClient(gw.bootstrap, timeout=60)
        client.send_bytes(list_offsets(600_000))
        assert client.recv_frame()  # the broker's answer, whatever it says of a missing topic
        assert [r for r in tap.requests if r.api_key == LIST_OFFSETS]


def _peak_rss(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmHWM:\s+(\d+) kB", status, flags=re.M)
    assert match is not None
    return int(match.group(1)) * 1024


def test_an_oversized_judged_request_does_not_grow_the_gateway_process(
    tap: BrokerTap, tmp_path: Path
) -> None:
    """Against `kpg run`, by its peak resident memory: a 40 MiB DescribeProducers (ten million
    partitions) grows it by about the frame it reads (83 MiB), not by the 1.6 GB its decoding
    took."""
    config = kpg_config(tmp_path, tap.address)
    frame = describe_producers(10_000_000)
    process, bootstrap = start_kpg("--config", str(config))
    try:
        assert served(RawClient(bootstrap))
        before = _peak_rss(process.pid)
        client = RawClient(bootstrap, timeout=120)
        client.send_bytes(frame)
        client.is_closed(120)  # closed unread, or answered by the broker (as it was before)
        assert served(RawClient(bootstrap))
        grown = _peak_rss(process.pid) - before
        assert grown < 3 * len(frame), f"kpg's peak grew by {grown / MiB:.0f} MiB"
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)


# --- Produce: partitions with nothing in them ----------------------------------------------

PRODUCE_MAX_PARTITIONS = 20_000
"""The default of ``produce.max.partitions``."""


def empty_partitions(topic: str, partitions: int) -> bytes:
    """A Produce v9 frame of ``partitions`` partition entries with no records: 6 bytes each,
    10 to 17 us each for the gateway to decode and judge (2,000,000 held it for 34 s)."""
    request = produce_v9({topic: dict.fromkeys(range(partitions))})
    return encode_request(PRODUCE, 9, 1, "cost", request)


@pytest.mark.parametrize("validated", [True, False], ids=["validated topic", "audit summary"])
def test_a_produce_of_too_many_partitions_is_refused_unread(
    tap: BrokerTap, tmp_path: Path, validated: bool
) -> None:
    """Read to validate its records, or walked to count it in the audit's produce summaries,
    a request of 30,000 empty partitions (180 KB) is refused before either."""
    with gateway_with(tap, tmp_path / "audit") as gw:
        topic = create_validated_topic(gw.bootstrap) if validated else "cost"
        client = RawClient(gw.bootstrap, timeout=30)
        client.send_bytes(empty_partitions(topic, PRODUCE_MAX_PARTITIONS + 10_000))
        assert client.is_closed(30), "the connection stays open"
        assert not [r for r in tap.requests if r.api_key == PRODUCE], "it reached the broker"
        assert gw.metric("kpg_rejected_frames_total", reason="oversized") == 1
        assert served(RawClient(gw.bootstrap))
        events = spool_events(tmp_path / "audit", lambda e: e.policy == "limits")
    assert len(events) == 1
    assert "produce.max.partitions" in (events[0].message or "")


# --- a rule's pattern against a client's topic name ----------------------------------------

BACKTRACKING = r"([a-z]+-?)+"
"""Words joined by optional hyphens, as an operator may write a naming rule. Python's ``re``
tries every way to split a run of letters between the group's turns before it gives up on
a name that does not match: 0.8 s for 24 letters and a dot, doubling with each letter more,
all of it on the event loop."""


def test_a_topic_name_cannot_make_a_rules_pattern_backtrack(tap: BrokerTap, tmp_path: Path) -> None:
    """Against `kpg run` (a pattern stuck in Python's ``re`` cannot be interrupted): a
    CreateTopics of a 49-character name is answered, and the gateway serves others after it.
    Before, the gateway would have been held for about 2^49 steps."""
    rule = {"name": "naming", "type": "topic.name", "pattern": BACKTRACKING}
    config = kpg_config(tmp_path, tap.address, policies={"rules": [rule]})
    process, bootstrap = start_kpg("--config", str(config))
    try:
        client = RawClient(bootstrap, timeout=30)  # generous: the answer takes milliseconds
        request = create_topic_request("a" * 48 + ".", validate_only=True)
        answer = client.request(CREATE_TOPICS, 7, request)
        assert answer.topics[0].error_code == POLICY_VIOLATION
        assert "does not match the pattern" in (answer.topics[0].error_message or "")
        assert served(RawClient(bootstrap))
    finally:
        process.kill()  # a loop held in the regular expression engine takes no SIGTERM
        process.wait(30)


# --- many items in one judged request ---------------------------------------------------------

JUDGED_MAX_ITEMS = 1_000
"""The default of ``judged.request.max.items``."""


def create_topics(names: list[str]) -> CreateTopicsRequest:
    return CreateTopicsRequest(
        topics=tuple(
            CreatableTopic(
                name=TopicName(name),
                num_partitions=i32(1),
                replication_factor=i16(1),
                assignments=(),
                configs=(),
            )
            for name in names
        ),
        timeout=i32Timedelta.parse(timedelta(seconds=10)),
        validate_only=True,
    )


def test_a_request_with_more_items_than_the_gateway_judges_is_refused_whole(
    tap: BrokerTap, tmp_path: Path
) -> None:
    """1,500 topics a naming rule denies, in one 25 KB CreateTopics: one audit event, not
    1,500 (10,000 made 8.8 MiB of audit and took the gateway 2.9 s)."""
    names = [f"t{index:x}" for index in range(JUDGED_MAX_ITEMS + 500)]
    rule = {"name": "naming", "type": "topic.name", "pattern": r"[a-z]+\.v[0-9]+"}
    config = gateway_config(
        tap.address, policies={"rules": [rule]}, audit={"spool_dir": str(tmp_path / "audit")}
    )
    gw = GatewayThread(config).start()
    try:
        client = RawClient(gw.bootstrap, timeout=30)
        answer = client.request(CREATE_TOPICS, 7, create_topics(names))
        assert [t.name for t in answer.topics] == names
        assert {t.error_code for t in answer.topics} == {POLICY_VIOLATION}
        assert "limits: judged.request.max.items" in (answer.topics[0].error_message or "")
        assert not [r for r in tap.requests if r.api_key == CREATE_TOPICS]
        events = spool_events(tmp_path / "audit", lambda e: e.api == "CreateTopics", timeout=2)
        assert len(events) == 1
        assert events[0].policy == "limits"
        assert served(RawClient(gw.bootstrap))
    finally:
        gw.stop()


# --- Produce v13: a made-up topic id in every request -------------------------------------


def produce_by_id(topic_id: uuid.UUID) -> bytes:
    module = importlib.import_module("kio.schema.produce.v13.request")
    request = module.ProduceRequest(
        transactional_id=None,
        acks=i16(1),
        timeout=i32Timedelta.parse(timedelta(seconds=5)),
        topic_data=(
            module.TopicProduceData(
                topic_id=topic_id,
                partition_data=(module.PartitionProduceData(index=i32(0), records=None),),
            ),
        ),
    )
    return encode_request(PRODUCE, 13, 1, "cost", request)


def test_made_up_topic_ids_do_not_make_the_gateway_read_the_whole_cluster_each_time(
    tap: BrokerTap, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each id the gateway does not know had it ask the broker for every topic of the cluster
    and decode the answer (megabytes in a large cluster), for a request of 80 bytes. One
    connection now asks at most once a second (here: once an hour, so that no clock counts)."""
    monkeypatch.setattr("gateway.handlers._partitioned._ASK_INTERVAL_S", 3600.0, raising=False)
    with gateway_with(tap, tmp_path / "audit") as gw:  # the audit reads every v13 request
        client = RawClient(gw.bootstrap, timeout=30)
        tap.requests.clear()
        for _ in range(30):
            client.send_bytes(produce_by_id(uuid.uuid4()))
            assert client.recv_frame()  # UNKNOWN_TOPIC_ID
        everything = [r for r in tap.requests if r.api_key == METADATA]
        assert len(everything) <= 1, f"{len(everything)} Metadata requests for 30 produces"


def test_made_up_topic_ids_over_many_connections_do_not_multiply_the_asks(
    tap: BrokerTap, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The once-a-second bound was per connection: 40 connections, each sending one Produce
    v13 of a made-up id, had the gateway ask the cluster for every topic 40 times (and a
    client with thousands of connections could keep it asking). The gateway now asks at most
    ten times a second over all connections (here: once an hour), and a request that finds an
    ask under way waits for its answer."""
    monkeypatch.setattr(
        "gateway.handlers._partitioned._GATEWAY_ASK_INTERVAL_S", 3600.0, raising=False
    )
    with gateway_with(tap, tmp_path / "audit") as gw:
        clients = [RawClient(gw.bootstrap, timeout=30) for _ in range(40)]
        tap.requests.clear()
        for client in clients:
            client.send_bytes(produce_by_id(uuid.uuid4()))
        for client in clients:
            assert client.recv_frame()  # UNKNOWN_TOPIC_ID
        everything = [r for r in tap.requests if r.api_key == METADATA]
        assert len(everything) <= 1, f"{len(everything)} Metadata requests for 40 connections"


# --- dynamic client configs: what anyone may make every gateway instance hold ---------------


def test_a_dynamic_client_config_entity_is_held_to_4_kib(tap: BrokerTap, tmp_path: Path) -> None:
    """With ``client_configs.admin_principals`` unset (the default) anyone may write dynamic
    client configs, and every gateway instance holds the whole store and reads it all again
    after each change: a client-id of 100,000 characters was stored as sent."""
    with gateway_with(tap, tmp_path / "audit") as gw:
        big = f"user:{'c' * 100_000}"
        [(_, _, code, message)] = alter(gw.bootstrap, [(USER_CLIENT, big, [("acks", SET, "1")])])
        assert code == INVALID_REQUEST and "at most 4096" in (message or "")
        assert all("c" * 100 not in key for key in stored(gw))


def test_dynamic_client_config_entities_are_bounded(tap: BrokerTap, tmp_path: Path) -> None:
    """``limits."client.configs.max.entities"``: a change adding one more is refused; one to an
    entity already kept is not."""
    with gateway_with(tap, tmp_path / "audit", **{"client.configs.max.entities": 3}) as gw:
        names = [f"user-{index}:app" for index in range(4)]
        results = alter(gw.bootstrap, [(USER_CLIENT, n, [("acks", SET, "1")]) for n in names])
        assert [code for _, _, code, _ in results] == [0, 0, 0, POLICY_VIOLATION]
        assert "limits: client.configs.max.entities" in (results[3][3] or "")
        [(_, _, code, _)] = alter(gw.bootstrap, [(USER_CLIENT, names[0], [("acks", SET, "-1")])])
        assert code == 0


def test_made_up_topic_ids_in_delete_topics_do_not_read_the_whole_cluster_each_time(
    tap: BrokerTap, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Produce v13's: each id resolved from the id cache, the cluster asked for every topic
    at most once a second per connection (here once an hour, so that no clock counts)."""
    monkeypatch.setattr("gateway.handlers._partitioned._ASK_INTERVAL_S", 3600.0, raising=False)
    module = importlib.import_module("kio.schema.delete_topics.v6.request")
    with gateway_with(tap, tmp_path / "audit") as gw:
        client = RawClient(gw.bootstrap, timeout=30)
        tap.requests.clear()
        for _ in range(30):
            request = module.DeleteTopicsRequest(
                topics=(module.DeleteTopicState(name=None, topic_id=uuid.uuid4()),),
                timeout=i32Timedelta.parse(timedelta(seconds=5)),
            )
            client.send_bytes(encode_request(20, 6, 1, "cost", request))
            assert client.recv_frame()  # UNKNOWN_TOPIC_ID
        everything = [r for r in tap.requests if r.api_key == METADATA]
        assert len(everything) <= 1, f"{len(everything)} Metadata requests for 30 deletions"


# --- the policy threads: one client's slow validations against everyone else's -----------


PLUGINS = str(Path(__file__).resolve().parents[1] / "plugins")


def validated_topic(bootstrap: str, prefix: str) -> str:
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"record.validation.policy": "any"}
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(15)
    return topic


def produce_one(topic: str) -> ProduceRequest:
    return produce_v9({topic: {0: one_record_batch()}})


def test_slow_validations_of_one_client_do_not_refuse_another_clients_records(
    tap: BrokerTap, tmp_path: Path
) -> None:
    """A plug-in call that found every policy thread busy was refused at once, so a client
    keeping ``policy.threads`` slow (not hung) calls in flight had every other client's
    validated produce refused. Such a call now waits for a thread, within
    ``policy.timeout.ms``."""
    policies = {
        "record.validation.policy.class.name": "kafka_test_policies.SlowRecordValidationPolicy",
        "record.validation.policy.class.path": PLUGINS,
        "policy.timeout.ms": 10_000,
        "policy.threads": 2,
    }
    gw = GatewayThread(gateway_config(tap.address, policies=policies)).start()
    try:
        slow, other = validated_topic(gw.bootstrap, "slow"), validated_topic(gw.bootstrap, "fast")
        hogs = [RawClient(gw.bootstrap, timeout=30) for _ in range(2)]
        for hog in hogs:  # each holds a policy thread for 1.5 s
            hog.send_bytes(encode_request(PRODUCE, 9, 1, "hog", produce_one(slow)))
        pool = gw.gateway.generation.policies.pool
        assert wait_for(lambda: pool._busy == 2)  # noqa: SLF001 - both threads taken
        answer = RawClient(gw.bootstrap, timeout=30).request(PRODUCE, 9, produce_one(other))
        (partition,) = answer.responses[0].partition_responses
        assert int(partition.error_code) == 0, partition.error_message
    finally:
        gw.stop()


def counted_reads(gw: GatewayThread, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The namespace of each read of the gateway's state store from now on."""
    store = gw.gateway.state
    reads: list[str] = []
    real_get, real_items = store.get, store.items

    def get(namespace: str, key: str) -> Any:
        reads.append(namespace)
        return real_get(namespace, key)

    def items(namespace: str) -> Any:
        reads.append(namespace)
        return real_items(namespace)

    monkeypatch.setattr(store, "get", get)
    monkeypatch.setattr(store, "items", items)
    return reads


def test_describing_many_client_entities_reads_the_store_once(
    tap: BrokerTap, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each dynamic client config resource of a DescribeConfigs was looked up with a pass over
    every stored key: 1,000 resources over 10,000 stored entities took 1.4 s of CPU (14 ms
    grouped), all in one step of the event loop, and the frame allows hundreds of thousands.
    The store is read once per request and grouped by entity; each read here is counted."""
    with gateway_with(tap, tmp_path / "audit") as gw:
        names = [f"user-{index}:app" for index in range(300)]
        assert all(
            code == 0
            for _, _, code, _ in alter(
                gw.bootstrap, [(USER_CLIENT, n, [("acks", SET, "1")]) for n in names]
            )
        )
        reads = counted_reads(gw, monkeypatch)
        frame = wire.describe_request(
            [(USER_CLIENT, n) for n in names], correlation_id=3, client_id="cost"
        )
        client = RawClient(gw.bootstrap, timeout=30)
        client.send_bytes(frame)
        described = wire.read_describe_response(client.recv_frame())
        assert [r.error_code for r in described] == [0] * len(names)
        assert all(r.configs for r in described)
        assert reads.count(cc.STATE_NAMESPACE) <= 1, f"{len(reads)} reads of the store"


def test_describing_many_topics_reads_the_store_once(
    tap: BrokerTap, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each topic of a DescribeConfigs was looked up in the state store for its
    record.validation.policy, and each SQLite read first asks the file for changes: 400,000
    topic resources (a 3.9 MB request) held the event loop 1.5 s for the look-ups alone
    (measured in-process: 4 us a read). The store is now read once per request; each read
    here is counted."""
    with gateway_with(tap, tmp_path / "audit") as gw:
        topic = validated_topic(gw.bootstrap, "described")
        reads = counted_reads(gw, monkeypatch)
        names = [topic] + [f"absent-{index}" for index in range(300)]
        frame = wire.describe_request(
            [(2, name) for name in names], correlation_id=3, client_id="cost"
        )
        client = RawClient(gw.bootstrap, timeout=30)
        client.send_bytes(frame)
        described = wire.read_describe_response(client.recv_frame())
        assert [r.resource_name for r in described] == names
        assert len(reads) <= 1, f"{len(reads)} reads of the store for one request"


def test_made_up_api_versions_do_not_multiply_the_request_metrics(
    tap: BrokerTap, tmp_path: Path
) -> None:
    """``kpg_requests_total`` was labelled with the version each request's header claims, any
    int16: a client sending versions 0 to 32767 of each of the 80-odd APIs could make 2.6
    million series (held by the gateway and written at every scrape). A version the gateway
    cannot decode is now counted as ``unsupported``."""
    bogus = range(1_000, 1_200)
    with gateway_with(tap, tmp_path / "audit") as gw:
        for version in bogus:
            client = RawClient(gw.bootstrap, timeout=10)
            client.send_bytes(struct.pack(">ihhihb", 11, METADATA, version, 1, -1, 0))  # v2 header
            client.is_closed(10)  # answered or closed, either way the request was read
        registry = gw.gateway.metrics.registry
        series = {
            sample.labels["version"]
            for metric in registry.collect()
            if metric.name == "kpg_requests"
            for sample in metric.samples
            if sample.name == "kpg_requests_total" and sample.labels["api"] == "Metadata"
        }
        assert series == {"unsupported"}
        assert gw.metric("kpg_requests_total", api="Metadata", version="unsupported") == len(bogus)


# --- a client's text echoed back, into the log and into the audit -------------------------


def test_a_long_config_value_is_not_echoed_whole(tap: BrokerTap, tmp_path: Path) -> None:
    """A denial quoted a 1 MB config value twice: a 1 MB IncrementalAlterConfigs got a 2 MB
    answer and wrote 3 MB of audit and a 2 MB log line. The message now quotes its first 200
    characters and its length; the audit event's config changes hold its first 1,000
    characters, its length and its SHA-256 (an event over 512 KiB: see test_audit_records)."""
    rule = {"name": "cp", "type": "config", "config": "cleanup.policy", "allowed": ["delete"]}
    value = "x" * 1_000_000
    config = gateway_config(
        tap.address, policies={"rules": [rule]}, audit={"spool_dir": str(tmp_path / "audit")}
    )
    gw = GatewayThread(config).start()
    try:
        topic = validated_topic(gw.bootstrap, "echo")
        [(_, _, code, message)] = alter(
            gw.bootstrap, [(2, topic, [("cleanup.policy", SET, value)])]
        )
        assert code == POLICY_VIOLATION
        assert message is not None and len(message) < 1_000
        assert "(1000000 characters)" in message
        [event] = spool_events(tmp_path / "audit", lambda e: e.policy == "cp")
        assert event.message is not None and len(event.message) < 1_000
        digest = hashlib.sha256(value.encode()).hexdigest()
        assert [c.after for c in event.config_changes or ()] == [
            f"{value[:1000]}... (1000000 characters, sha256 {digest})"
        ]
        [(_, _, code, message)] = alter(
            gw.bootstrap, [(USER_CLIENT, "user:app", [("acks", SET, value)])]
        )
        assert code == INVALID_REQUEST
        assert message is not None and len(message) < 1_000
    finally:
        gw.stop()


def test_a_produce_of_too_many_empty_topics_is_refused_unread(
    tap: BrokerTap, tmp_path: Path
) -> None:
    """Topic entries with no partitions: read for the audit's produce summaries (one tally,
    then one summary event, per topic, principal and client id), 6 bytes each. 30,000 of them
    are refused as 30,000 partitions are."""
    request = produce_v9({f"e{index:x}": {} for index in range(PRODUCE_MAX_PARTITIONS + 10_000)})
    with gateway_with(tap, tmp_path / "audit") as gw:
        client = RawClient(gw.bootstrap, timeout=30)
        client.send_bytes(encode_request(PRODUCE, 9, 1, "cost", request))
        assert client.is_closed(30), "the connection stays open"
        assert not [r for r in tap.requests if r.api_key == PRODUCE], "it reached the broker"
        assert gw.metric("kpg_rejected_frames_total", reason="oversized") == 1


def test_made_up_topic_names_do_not_multiply_the_produce_summaries(
    tap: BrokerTap, tmp_path: Path
) -> None:
    """The produce summaries kept one tally, and wrote one summary event, per topic name,
    principal and client id a Produce request names, whether the topic exists or not: a
    request of 5,000 one-letter names (a 66 KB frame) wrote 5,000 summary events (4.0 MB of
    spool), and new names every request grew the tallies without bound. An interval now keeps
    ``audit.produce_summary_max_keys`` keys (50 here) and folds the rest into one summary of
    topic ``*``, which still counts every share."""
    names = [f"s{index:x}" for index in range(5_000)]
    request = produce_v9({name: {0: None} for name in names})
    spool = tmp_path / "audit"
    audit = {
        "spool_dir": str(spool),
        "produce_summary_interval_s": 0.5,
        "produce_summary_max_keys": 50,
    }
    gw = GatewayThread(gateway_config(tap.address, audit=audit)).start()
    try:
        client = RawClient(gw.bootstrap, timeout=30)
        # counted as it is forwarded (the test broker then drops a request this large)
        client.send_bytes(encode_request(PRODUCE, 9, 1, "cost", request))

        def summary(event: AuditEvent) -> bool:
            return event.event_kind == "summary"

        spool_events(spool, summary, count=1, timeout=10)  # the interval has ended
        summaries = spool_events(spool, summary, count=len(names), timeout=3)
        assert len(summaries) == 51, f"{len(summaries)} summary events for one request"
        [folded] = [e for e in summaries if e.resource_name == "*"]
        assert folded.event_count == len(names) - 50
        assert folded.principal is None and folded.client_id is None
        assert "audit.produce_summary_max_keys" in (folded.message or "")
        assert sum(e.event_count for e in summaries) == len(names)
    finally:
        gw.stop()
