"""Bytes the gateway reads one way and the broker another.

The gateway forwards a request it allowed as the client sent it, so whatever it judged must be
what Kafka's own parser reads from the same bytes; where the two could differ, the request is
refused (the connection closed, as Kafka closes one whose request does not parse), never
forwarded on the gateway's reading.

- Kafka reads an unsigned varint of five bytes into an int: the fifth byte's bits past the
  32nd are dropped (``ByteUtils.readUnsignedVarint``), so ``81 80 80 80 10`` is 1. Kafka's
  generated readers read a tagged field they know (Fetch's ``cluster_id``, tag 0, and
  ``replica_state``, tag 1) by its type, not by the size in front of it; the size bounds
  only the tags they do not know. A Fetch whose ``replica_state`` hides behind either (a tag
  number the gateway read as 4294967297, or inside a ``cluster_id`` declared longer than its
  string) was a consumer's fetch to the gateway and a follower's to Kafka.
- kio's reader makes room for a whole array before reading any of it: a compact array length
  of 2^32 asked for 32 GiB at once, and the failed allocation aborted the gateway process
  (every client's connections with it). Kafka refuses an array longer than the bytes that
  remain, and so does the gateway now, before kio reads it.

Against the tapped real broker (Fetch, which Tansu takes to v17), and against `kpg run` for the
crash (an abort would take the test process with an in-process gateway).
"""

from __future__ import annotations

import signal
import struct
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName

from protocol.addresses import METADATA
from protocol.codec import encode_request
from tests.adversarial.test_connection_limits import served
from tests.adversarial.test_replica_fetch import FETCH, TANSU_NODE, _fetch
from tests.e2e.test_gateway_process import kpg_config, start_kpg
from tests.support import BrokerTap, GatewayThread, RawClient

pytestmark = pytest.mark.adversarial

CREATE_TOPICS = 19


def _framed(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


def _replica_state(replica: int) -> bytes:
    """The ``replica_state`` struct: replica id, replica epoch, no tagged fields."""
    return struct.pack(">iq", replica, 1) + b"\x00"


HIDDEN = _replica_state(TANSU_NODE)
TAGS = {
    # tag 1 written in five bytes whose fifth carries bit 32: Kafka reads 1
    "overflowing-tag-number": b"\x01" + b"\x81\x80\x80\x80\x10" + bytes([len(HIDDEN)]) + HIDDEN,
    # a null cluster_id (one byte) declared 16 bytes long: Kafka reads the string, then the
    # next tag from the bytes behind it, which is replica_state; the gateway's second tag is
    # past what Kafka reads and Kafka ignores it
    "cluster-id-longer-than-its-string": b"\x02"
    + b"\x00"
    + bytes([1 + 2 + len(HIDDEN)])
    + b"\x00"
    + b"\x01"
    + bytes([len(HIDDEN)])
    + HIDDEN
    + b"\x7f\x00",
    # replica_state declared longer than the struct: Kafka reads a second replica_state
    # from inside it (the last one read wins); the first says consumer
    "replica-state-longer-than-its-struct": b"\x02"
    + b"\x01"
    + bytes([len(HIDDEN) * 2 + 2])
    + _replica_state(-1)
    + b"\x01"
    + bytes([len(HIDDEN)])
    + HIDDEN
    + b"\x7f\x00",
}


@pytest.mark.parametrize("tags", TAGS.values(), ids=TAGS.keys())
@pytest.mark.parametrize("version", [15, 17])
def test_a_replica_state_kafka_reads_and_the_gateway_did_not_never_reaches_the_broker(
    fetch_setup: tuple[GatewayThread, str, uuid.UUID], tap: BrokerTap, version: int, tags: bytes
) -> None:
    gw, topic, topic_id = fetch_setup
    frame = encode_request(FETCH, version, 1, "raw-test", _fetch(version, topic, topic_id, None))
    assert frame.endswith(b"\x00")  # the request's own tagged fields: none
    client = RawClient(gw.bootstrap, timeout=5)
    client.send_bytes(_framed(frame[4:-1] + tags))
    assert client.is_closed(5), "the gateway answered a follower's fetch"
    assert FETCH not in tap.api_keys()


def test_a_consumers_fetch_with_a_cluster_id_still_reaches_the_broker(
    fetch_setup: tuple[GatewayThread, str, uuid.UUID], tap: BrokerTap
) -> None:
    """The tags a consumer sends, each exactly as long as it says."""
    gw, topic, topic_id = fetch_setup
    frame = encode_request(FETCH, 17, 1, "raw-test", _fetch(17, topic, topic_id, None))
    cluster_id = b"\x04abc"
    consumer = _replica_state(-1)
    tags = (
        b"\x02\x00"
        + bytes([len(cluster_id)])
        + cluster_id
        + b"\x01"
        + bytes([len(consumer)])
        + consumer
    )
    client = RawClient(gw.bootstrap, timeout=5)
    client.send_bytes(_framed(frame[4:-1] + tags))
    assert client.recv_frame()
    assert len(tap.forwarded(FETCH)) == 1


# --- array lengths past the frame -------------------------------------------------------


def _metadata_of_huge_array() -> bytes:
    """Metadata v12 naming one topic, its topics array length made 2^32 - 16 (five bytes):
    kio asked for 32 GiB before reading the first element."""
    request = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=TopicName("t")),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    frame = encode_request(METADATA, 12, 1, "raw-test", request)[4:]
    body = frame.index(b"\x02" + b"\x00" * 16)  # one topic, then its null topic id
    return _framed(frame[:body] + b"\xf0\xff\xff\xff\x0f" + frame[body + 1 :])


def _create_topics_of_huge_array() -> bytes:
    """CreateTopics v5 of one topic whose configs array length is 2^32 + 1 (an overflowing
    fifth byte, which Kafka would read as 1)."""
    from kio.schema.create_topics.v5 import request as ct
    from kio.static.primitive import i16, i32

    request = ct.CreateTopicsRequest(
        topics=(
            ct.CreatableTopic(
                name=TopicName("huge"),
                num_partitions=i32(1),
                replication_factor=i16(1),
                assignments=(),
                configs=(ct.CreatableTopicConfig(name="k", value="v"),),
            ),
        ),
        validate_only=True,
    )
    frame = encode_request(CREATE_TOPICS, 5, 1, "raw-test", request)[4:]
    configs = frame.index(b"\x02\x02k\x02v")  # one config: "k" = "v"
    return _framed(frame[:configs] + b"\x82\x80\x80\x80\x10" + frame[configs + 1 :])


@pytest.mark.parametrize(
    "request_frame",
    [_metadata_of_huge_array(), _create_topics_of_huge_array()],
    ids=["metadata-topics", "create-topics-configs"],
)
def test_an_array_longer_than_its_frame_does_not_bring_the_gateway_down(
    tap: BrokerTap, tmp_path: Path, request_frame: bytes
) -> None:
    process, bootstrap = start_kpg("--config", str(kpg_config(tmp_path, tap.address)))
    try:
        client = RawClient(bootstrap, timeout=30)
        client.send_bytes(request_frame)
        assert client.is_closed(30)
        assert process.poll() is None, "the gateway process died"
        assert CREATE_TOPICS not in tap.api_keys()
        assert served(RawClient(bootstrap))
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)


# --- one item named twice in one request ---------------------------------------------------
#
# Kafka refuses them before any policy (KafkaApis: a topic named twice in CreateTopics or
# DeleteTopics gets INVALID_REQUEST; ConfigurationControlManager: "Error due to duplicate
# config keys"); were the gateway to judge one entry and forward both, the broker would apply
# an entry no policy saw. Pinned here end to end: answered INVALID_REQUEST, nothing reaches
# the broker.

INVALID_REQUEST = 42
INCREMENTAL_ALTER_CONFIGS = 44
DELETE_TOPICS = 20
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

TWICE = {
    "set-then-delete": [("cleanup.policy", SET, "compact"), ("cleanup.policy", DELETE, None)],
    "two-sets": [("retention.ms", SET, "1000"), ("retention.ms", SET, "-1")],
    "append-then-subtract": [
        ("cleanup.policy", APPEND, "compact"),
        ("cleanup.policy", SUBTRACT, "delete"),
    ],
}


@pytest.mark.parametrize("ops", TWICE.values(), ids=TWICE.keys())
def test_a_config_key_given_twice_is_refused_and_never_reaches_the_broker(
    fetch_setup: tuple[GatewayThread, str, uuid.UUID], tap: BrokerTap, ops: list[Any]
) -> None:
    from tests.adversarial.test_topic_state import alter

    gw, topic, _ = fetch_setup
    code, message = alter(gw.bootstrap, topic, ops)
    assert (code, message) == (INVALID_REQUEST, "Error due to duplicate config keys")
    assert INCREMENTAL_ALTER_CONFIGS not in tap.api_keys()


def test_a_topic_named_twice_is_neither_created_nor_deleted(
    fetch_setup: tuple[GatewayThread, str, uuid.UUID], tap: BrokerTap
) -> None:
    from kio.schema.create_topics.v7 import request as ct
    from kio.schema.delete_topics.v5 import request as dt
    from kio.static.primitive import i16, i32, i32Timedelta

    gw, topic, _ = fetch_setup
    new = f"n-{uuid.uuid4().hex[:8]}"
    created = RawClient(gw.bootstrap).request(
        CREATE_TOPICS,
        7,
        ct.CreateTopicsRequest(
            topics=tuple(
                ct.CreatableTopic(
                    name=TopicName(new),
                    num_partitions=i32(1),
                    replication_factor=i16(1),
                    assignments=(),
                    configs=(ct.CreatableTopicConfig(name="cleanup.policy", value=policy),),
                )
                for policy in ("delete", "compact")
            ),
            validate_only=False,
        ),
    )
    assert [int(t.error_code) for t in created.topics] == [INVALID_REQUEST]
    deleted = RawClient(gw.bootstrap).request(
        DELETE_TOPICS,
        5,
        dt.DeleteTopicsRequest(
            topic_names=(TopicName(topic),) * 2,
            timeout=i32Timedelta.parse(timedelta(seconds=5)),
        ),
    )
    assert [int(r.error_code) for r in deleted.responses] == [INVALID_REQUEST]
    assert {CREATE_TOPICS, DELETE_TOPICS}.isdisjoint(tap.api_keys())
