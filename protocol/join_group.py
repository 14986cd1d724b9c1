"""JoinGroup (API key 11, v0-v9): read and set ``session_timeout_ms`` in place.

The field sits right behind the group id in every version, so the gateway reads and writes
it without decoding the rest (the members' protocol metadata is carried byte for byte).
"""

from __future__ import annotations

import struct
from typing import Final

from kio.serial.readers import read_compact_string, read_legacy_string

from .framing import FrameRejected, RequestHeader
from .versions import DECODABLE, is_flexible

JOIN_GROUP: Final = 11
VERSIONS: Final = DECODABLE[JOIN_GROUP]
"""The versions kio ships (0-9): the gateway knows where the field is in each."""

_SESSION_TIMEOUT: Final = struct.Struct(">i")


def session_timeout_ms(header: RequestHeader, frame: bytes) -> int:
    """The request's ``session_timeout_ms``.

    :raises FrameRejected: when the body is too short or its group id malformed.
    """
    return int(_SESSION_TIMEOUT.unpack_from(frame, _offset(header, frame))[0])


def with_session_timeout(header: RequestHeader, frame: bytes, timeout_ms: int) -> bytes:
    """The request frame (no size prefix) with ``session_timeout_ms`` set, every other byte
    as it was.

    :raises FrameRejected: as :func:`session_timeout_ms`.
    """
    offset = _offset(header, frame)
    return frame[:offset] + _SESSION_TIMEOUT.pack(timeout_ms) + frame[offset + 4 :]


def _offset(header: RequestHeader, frame: bytes) -> int:
    if header.api_key != JOIN_GROUP:
        raise ValueError(f"API key {header.api_key} is not JoinGroup")
    try:
        if is_flexible(JOIN_GROUP, header.api_version):
            _, size = read_compact_string(frame, header.size)
        else:
            _, size = read_legacy_string(frame, header.size)
    except Exception as exc:  # short buffer or malformed string length
        raise FrameRejected(
            "bad_body", f"JoinGroup request has no readable group id: {exc}"
        ) from None
    offset = header.size + size
    if offset + _SESSION_TIMEOUT.size > len(frame):
        raise FrameRejected("bad_body", "JoinGroup request has no readable session timeout")
    return offset
