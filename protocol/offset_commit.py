"""OffsetCommit (API key 8): read and reset ``retention_time_ms`` (v2-v4) in place.

In v2-v4 a client may say how long the broker keeps the offsets it commits. Kafka stores
``now + retention_time_ms`` as those offsets' expiry, and its periodic offset cleanup
(``offsets.retention.check.interval.ms``, 10 minutes by default) deletes them once it has
passed, if no member then consumes the topic (a classic group with no members, as one used for
commits alone; a KIP-848 consumer group not subscribed to it): with 1 ms, a commit deletes a
group's offsets of a topic as OffsetDelete would. -1 means the broker's
``offsets.retention.minutes``. The field sits behind the group id, the generation id and the
member id, all of fixed form in these versions (not flexible), so it is found without decoding
the rest.
"""

from __future__ import annotations

import struct
from typing import Final

from kio.serial.readers import read_legacy_string

from .framing import DECODE_ERRORS, FrameRejected, RequestHeader
from .versions import DECODABLE

OFFSET_COMMIT: Final = 8
VERSIONS: Final = DECODABLE[OFFSET_COMMIT]
"""The versions kio ships (2-10): v0 and v1 (v1 with a commit timestamp per partition, the
start of its offset's retention, as the client wants it) are gone from Kafka 4.0 (KIP-896)."""
RETENTION_VERSIONS: Final = range(2, 5)
BROKER_RETENTION: Final = -1
"""``retention_time_ms`` meaning the broker's own ``offsets.retention.minutes``."""

_RETENTION: Final = struct.Struct(">q")
_GENERATION: Final = struct.Struct(">i")


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
