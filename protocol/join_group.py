"""JoinGroup (API key 11, v0-v9): read and set ``session_timeout_ms`` in place, and the
gateway's refusal of one, in the client's version.

The field sits right behind the group id in every version, so the gateway reads and writes
it without decoding the rest (the members' protocol metadata is carried byte for byte).
"""

from __future__ import annotations

import struct
from typing import Final, TypeAlias, get_args

from kio.schema.errors import ErrorCode
from kio.schema.join_group import v0, v1, v2, v3, v4, v5, v6, v7, v8, v9
from kio.serial.readers import read_compact_string, read_legacy_string

from .codec import encode_response, filled, schema_of
from .framing import FrameRejected, RequestHeader
from .versions import DECODABLE, is_flexible

JOIN_GROUP: Final = 11
VERSIONS: Final = DECODABLE[JOIN_GROUP]
"""The versions kio ships (0-9): the gateway knows where the field is in each."""

_SESSION_TIMEOUT: Final = struct.Struct(">i")

_Response: TypeAlias = (
    v0.JoinGroupResponse
    | v1.JoinGroupResponse
    | v2.JoinGroupResponse
    | v3.JoinGroupResponse
    | v4.JoinGroupResponse
    | v5.JoinGroupResponse
    | v6.JoinGroupResponse
    | v7.JoinGroupResponse
    | v8.JoinGroupResponse
    | v9.JoinGroupResponse
)
_RESPONSES: Final[tuple[type[_Response], ...]] = get_args(_Response)


def refusal(correlation_id: int, api_version: int, error_code: int) -> bytes:
    """An answer frame (no size prefix) carrying only ``error_code`` (JoinGroup has no error
    message), the rest Kafka's "unknown" (generation -1, no member id, no members).

    :raises LookupError: for a version outside :data:`VERSIONS`.
    """
    payload = filled(schema_of(_RESPONSES, api_version), {"error_code": ErrorCode(error_code)})
    return encode_response(correlation_id, JOIN_GROUP, api_version, payload)


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
