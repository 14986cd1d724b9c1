"""Produce requests: the parts the gateway needs without decoding the records."""

from __future__ import annotations

import struct
from typing import Final

from kio.serial.readers import read_compact_string_nullable, read_nullable_legacy_string

from .framing import FrameRejected, RequestHeader
from .versions import is_flexible

PRODUCE: Final = 0
_ACKS: Final = struct.Struct(">h")


def produce_acks(header: RequestHeader, frame: bytes) -> int:
    """The ``acks`` of a Produce request (0 means the client expects no response).

    Reads only the transactional id in front of it (v3 and later).

    :raises FrameRejected: when the body is too short to hold it.
    """
    offset = header.size
    try:
        if header.api_version >= 3:
            if is_flexible(PRODUCE, header.api_version):
                _, size = read_compact_string_nullable(frame, offset)
            else:
                _, size = read_nullable_legacy_string(frame, offset)
            offset += size
        return int(_ACKS.unpack_from(frame, offset)[0])
    except Exception as exc:  # short buffer or malformed string length
        raise FrameRejected("bad_body", f"produce request has no readable acks: {exc}") from None
