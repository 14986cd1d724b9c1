"""OffsetCommit's ``retention_time_ms`` (v2-v4), read and reset in place without decoding the
request (protocol/offset_commit.py), and ListOffsets's replica id (protocol/fetch_replica.py):
every byte but the field is kept, and a body cut short is refused, never forwarded."""

from __future__ import annotations

import importlib
import struct
from datetime import timedelta

import pytest
from kio.schema.list_offsets.v7 import request as lo
from kio.schema.types import BrokerId, GroupId, TopicName
from kio.static.primitive import i8, i32, i64, i64Timedelta

from protocol.codec import Undecodable, decode_request, encode_request
from protocol.fetch_replica import list_offsets_replica_id
from protocol.framing import FrameRejected, parse_request_header
from protocol.offset_commit import retention_time_ms, v1_as_v2, with_broker_retention

pytestmark = pytest.mark.unit


def _commit(version: int, retention_ms: int | None) -> bytes:
    m = importlib.import_module(f"kio.schema.offset_commit.v{version}.request")
    extra = (
        {}
        if retention_ms is None
        else {"retention_time": i64Timedelta.parse(timedelta(milliseconds=retention_ms))}
    )
    payload = m.OffsetCommitRequest(
        group_id=GroupId("group-ü"),
        generation_id_or_member_epoch=i32(7),
        member_id="member-1",
        topics=(
            m.OffsetCommitRequestTopic(
                name=TopicName("t"),
                partitions=(
                    m.OffsetCommitRequestPartition(
                        partition_index=i32(0), committed_offset=i64(42), committed_metadata="m"
                    ),
                ),
            ),
        ),
        **extra,
    )
    return encode_request(8, version, 3, "c", payload)[4:]


@pytest.mark.parametrize("version", [2, 3, 4])
def test_a_clients_retention_becomes_the_brokers_and_nothing_else_changes(version: int) -> None:
    frame = _commit(version, 1)
    header = parse_request_header(frame)
    assert retention_time_ms(header, frame) == 1
    rewritten = with_broker_retention(header, frame)
    assert retention_time_ms(header, rewritten) == -1
    assert decode_request(header, rewritten) == decode_request(header, _commit(version, -1))


@pytest.mark.parametrize("version", [5, 9])
def test_versions_without_a_retention_are_left_as_sent(version: int) -> None:
    frame = _commit(version, None)
    header = parse_request_header(frame)
    assert retention_time_ms(header, frame) is None
    assert with_broker_retention(header, frame) is frame


def test_a_commit_cut_short_is_refused() -> None:
    frame = _commit(2, 1)
    header = parse_request_header(frame)
    for cut in (header.size, header.size + 5, header.size + 20, header.size + 30):
        with pytest.raises(FrameRejected):
            retention_time_ms(header, frame[:cut])


def test_the_replica_id_of_list_offsets_is_its_first_field() -> None:
    payload = lo.ListOffsetsRequest(replica_id=BrokerId(4), isolation_level=i8(1), topics=())
    frame = encode_request(2, 7, 3, "c", payload)[4:]
    header = parse_request_header(frame)
    assert list_offsets_replica_id(header, frame) == 4
    with pytest.raises(Undecodable):
        list_offsets_replica_id(header, frame[: header.size + 3])


def _commit_v1(*partitions: tuple[int, int, int, str | None], tail: bytes = b"") -> bytes:
    """An OffsetCommit v1 frame, which kio lacks, written here: group, generation, member,
    then topic ``t`` with (index, offset, commit timestamp, metadata) per partition."""

    def string(value: str | None) -> bytes:
        if value is None:
            return struct.pack(">h", -1)
        raw = value.encode()
        return struct.pack(">h", len(raw)) + raw

    body = string("group-ü") + struct.pack(">i", 7) + string("member-1")
    body += struct.pack(">i", 1) + string("t") + struct.pack(">i", len(partitions))
    for index, offset, timestamp, metadata in partitions:
        body += struct.pack(">iqq", index, offset, timestamp) + string(metadata)
    return struct.pack(">hhi", 8, 1, 3) + string("c") + body + tail


def test_v1_is_sent_as_v2_with_the_brokers_retention_and_no_commit_timestamps() -> None:
    """v1's commit timestamp per partition is where Kafka counts the offset's retention from:
    0 expired it at the next cleanup. Sarama 1.22's consumer groups commit with v1; it was not
    carried (the connection closed). It is v2 now, with retention -1 and the broker's clock."""
    frame = _commit_v1((0, 42, 0, "m"), (3, 7, -1, None))
    v2 = v1_as_v2(parse_request_header(frame), frame)
    header = parse_request_header(v2)
    assert (header.api_key, header.api_version, header.correlation_id) == (8, 2, 3)
    assert header.client_id == "c"
    m = importlib.import_module("kio.schema.offset_commit.v2.request")
    partition = m.OffsetCommitRequestPartition
    assert decode_request(header, v2) == m.OffsetCommitRequest(
        group_id=GroupId("group-ü"),
        generation_id_or_member_epoch=i32(7),
        member_id="member-1",
        retention_time=i64Timedelta.parse(timedelta(milliseconds=-1)),
        topics=(
            m.OffsetCommitRequestTopic(
                name=TopicName("t"),
                partitions=(
                    partition(
                        partition_index=i32(0), committed_offset=i64(42), committed_metadata="m"
                    ),
                    partition(
                        partition_index=i32(3), committed_offset=i64(7), committed_metadata=None
                    ),
                ),
            ),
        ),
    )


@pytest.mark.parametrize(
    "frame",
    [
        _commit_v1((0, 42, 0, "m"))[:-3],  # cut short
        _commit_v1((0, 42, 0, "m"), tail=b"\x00"),  # a byte after the last field
        _commit_v1((0, 42, 0, "m"))[:-27] + struct.pack(">i", -1),  # a null partitions array
        _commit_v1()[:-4] + struct.pack(">i", 2**31 - 1),  # more partitions than bytes
        _commit_v1((0, 42, 0, "m"))[:-3] + struct.pack(">h", -2),  # metadata of length -2
        _commit_v1((0, 42, 0, "m"))[:-3] + struct.pack(">h", 5) + b"m",  # past the end
        _commit_v1((0, 42, 0, "m"))[:-5],  # the last partition cut inside its timestamp
    ],
    ids=[
        "cut-short",
        "trailing-byte",
        "null-partitions",
        "huge-count",
        "negative-metadata",
        "metadata-past-the-end",
        "cut-in-timestamp",
    ],
)
def test_a_v1_body_that_does_not_read_is_refused(frame: bytes) -> None:
    with pytest.raises(FrameRejected):
        v1_as_v2(parse_request_header(frame), frame)
