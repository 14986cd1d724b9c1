"""OffsetCommit (API key 8): read and reset ``retention_time_ms`` (v2-v4) in place, and v1
rewritten as v2.

In v2-v4 a client may say how long the broker keeps the offsets it commits. Kafka stores
``now + retention_time_ms`` as those offsets' expiry, and its periodic offset cleanup
(``offsets.retention.check.interval.ms``, 10 minutes by default) deletes them once it has
passed, if no member then consumes the topic (a classic group with no members, as one used for
commits alone; a KIP-848 consumer group not subscribed to it): with 1 ms, a commit deletes a
group's offsets of a topic as OffsetDelete would. -1 means the broker's
``offsets.retention.minutes``. The field sits behind the group id, the generation id and the
member id, all of fixed form in these versions (not flexible), so it is found without decoding
the rest.

v1 (Kafka 0.8.2's; Kafka 4.0 dropped it, KIP-896) has no retention time but a commit
timestamp per partition, from which Kafka counts the offset's retention: one in the past
expires it at the next cleanup, as a short retention does. Sarama 1.22's consumer groups
commit with v1 unless told a retention. :func:`v1_as_v2` writes such a request as v2 with the
broker's retention (-1) and no timestamps, so the broker counts from its own clock; v2's answer
has v1's layout, so it goes back to the client as it is.
"""

from __future__ import annotations

import struct
from typing import Final

from kio.serial.readers import read_legacy_string

from .framing import DECODE_ERRORS, FrameRejected, RequestHeader
from .versions import TAKEN

OFFSET_COMMIT: Final = 8
VERSIONS: Final = TAKEN[OFFSET_COMMIT]
"""v1 (sent as v2: :func:`v1_as_v2`) to the newest kio ships. v0 (no group generation, offsets
kept in ZooKeeper by old brokers) is gone from Kafka 4.0 (KIP-896) and not carried."""
V1: Final = 1
RETENTION_VERSIONS: Final = range(2, 5)
BROKER_RETENTION: Final = -1
"""``retention_time_ms`` meaning the broker's own ``offsets.retention.minutes``."""

_RETENTION: Final = struct.Struct(">q")
_GENERATION: Final = struct.Struct(">i")
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_PARTITION: Final = struct.Struct(">iq")
"""A v1 partition's index and committed offset; its commit timestamp (int64) follows."""
_TIMESTAMP_SIZE: Final = 8


def retention_time_ms(header: RequestHeader, frame: bytes) -> int | None:
    """The request's ``retention_time_ms``; None in a version without it.

    :raises FrameRejected: when the body is too short or a string in it malformed.
    """
    offset = _offset(header, frame)
    return None if offset is None else int(_RETENTION.unpack_from(frame, offset)[0])


def with_broker_retention(header: RequestHeader, frame: bytes) -> bytes:
    """The request frame (no size prefix) with ``retention_time_ms`` -1, every other byte as
    it was (the frame itself in a version without the field).

    :raises FrameRejected: as :func:`retention_time_ms`.
    """
    offset = _offset(header, frame)
    if offset is None:
        return frame
    return frame[:offset] + _RETENTION.pack(BROKER_RETENTION) + frame[offset + _RETENTION.size :]


def _offset(header: RequestHeader, frame: bytes) -> int | None:
    if header.api_key != OFFSET_COMMIT:
        raise ValueError(f"API key {header.api_key} is not OffsetCommit")
    if header.api_version not in RETENTION_VERSIONS:
        return None
    try:
        _, group_size = read_legacy_string(frame, header.size)
        offset = header.size + group_size + _GENERATION.size
        _, member_size = read_legacy_string(frame, offset)
    except DECODE_ERRORS as exc:  # short buffer or malformed string length
        raise FrameRejected(
            "bad_body", f"OffsetCommit request has no readable group or member id: {exc}"
        ) from None
    offset += member_size
    if offset + _RETENTION.size > len(frame):
        raise FrameRejected("bad_body", "OffsetCommit request has no readable retention time")
    return offset


def v1_as_v2(header: RequestHeader, frame: bytes) -> bytes:
    """A v1 request frame (no size prefix) as v2: the same group, generation, member and
    commits, ``retention_time_ms`` -1 and no commit timestamps; the header is the client's
    with version 2.

    :raises FrameRejected: when the body does not read as v1 to its last byte.
    """
    if header.api_key != OFFSET_COMMIT or header.api_version != V1:
        raise ValueError("not an OffsetCommit v1 request")
    try:
        return _rewrite_v1(header, frame)
    except (*DECODE_ERRORS, struct.error, IndexError) as exc:
        raise FrameRejected("bad_body", f"OffsetCommit v1 request does not read: {exc}") from None


def _rewrite_v1(header: RequestHeader, frame: bytes) -> bytes:
    view = memoryview(frame)
    pos = _string_end(frame, header.size, nullable=False)  # group id
    pos = _string_end(frame, pos + _GENERATION.size, nullable=False)  # member id
    out = bytearray(view[:2])
    out += _INT16.pack(2)
    out += view[4:pos]
    out += _RETENTION.pack(BROKER_RETENTION)
    topics, pos = _count(frame, pos)
    out += _INT32.pack(topics)
    unpack_int16, size_of_frame = _INT16.unpack_from, len(frame)
    for _ in range(topics):
        end = _string_end(frame, pos, nullable=False)
        partitions, after = _count(frame, end)
        out += view[pos:after]
        pos = after
        for _ in range(partitions):
            # index and committed offset kept, the commit timestamp dropped, then the
            # committed metadata (a nullable string), inline: a request may hold millions
            metadata = pos + _PARTITION.size + _TIMESTAMP_SIZE
            (size,) = unpack_int16(frame, metadata)
            end = metadata + 2 + size if size > 0 else metadata + 2
            if size < -1 or end > size_of_frame:
                raise FrameRejected("bad_body", "OffsetCommit v1 request has a malformed string")
            out += view[pos : pos + _PARTITION.size]
            out += view[metadata:end]
            pos = end
    if pos != len(frame):
        raise FrameRejected("bad_body", "OffsetCommit v1 request has bytes after its last field")
    return bytes(out)


def _string_end(frame: bytes, pos: int, *, nullable: bool) -> int:
    size = int(_INT16.unpack_from(frame, pos)[0])
    if size < 0 and not (nullable and size == -1):
        raise FrameRejected("bad_body", "OffsetCommit v1 request has a malformed string")
    end = pos + _INT16.size + max(size, 0)
    if end > len(frame):
        raise FrameRejected("bad_body", "OffsetCommit v1 request is cut short")
    return end


def _count(frame: bytes, pos: int) -> tuple[int, int]:
    """An array's length (each element takes bytes, so the frame bounds the loop) and where
    its elements start; null or negative is refused."""
    count = int(_INT32.unpack_from(frame, pos)[0])
    if count < 0:
        raise FrameRejected("bad_body", "OffsetCommit v1 request has a null or negative array")
    return count, pos + _INT32.size
