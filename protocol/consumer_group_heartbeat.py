"""ConsumerGroupHeartbeat (API key 68, KIP-848): whether a request leaves its group, and the
gateway's refusal of one, in the client's version."""

from __future__ import annotations

from datetime import timedelta
from typing import Final, TypeAlias, get_args

from kio.schema.consumer_group_heartbeat import v0, v1
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from .codec import decode_request_as, encode_response, filled, schema_of
from .framing import RequestHeader
from .versions import DECODABLE

CONSUMER_GROUP_HEARTBEAT: Final = 68
VERSIONS: Final = DECODABLE[CONSUMER_GROUP_HEARTBEAT]

_Request: TypeAlias = v0.ConsumerGroupHeartbeatRequest | v1.ConsumerGroupHeartbeatRequest
_Response: TypeAlias = v0.ConsumerGroupHeartbeatResponse | v1.ConsumerGroupHeartbeatResponse
_REQUESTS: Final[tuple[type[_Request], ...]] = get_args(_Request)
_RESPONSES: Final[tuple[type[_Response], ...]] = get_args(_Response)


def leaves_group(header: RequestHeader, frame: bytes) -> bool:
    """Whether the request leaves the group: member epoch -1 (leave) or -2 (a static member
    leaving for now), as KIP-848 signals it.

    :raises Undecodable:
    """
    request = decode_request_as(_REQUESTS, header, frame)
    return int(request.member_epoch) < 0


def refusal(correlation_id: int, api_version: int, error_code: int, error_message: str) -> bytes:
    """An answer frame (no size prefix) carrying only ``error_code`` and ``error_message``.

    :raises LookupError: for a version outside :data:`VERSIONS`.
    """
    payload = filled(
        schema_of(_RESPONSES, api_version),
        {
            "throttle_time": i32Timedelta.parse(timedelta(0)),
            "error_code": ErrorCode(error_code),
            "error_message": error_message,
        },
    )
    return encode_response(correlation_id, CONSUMER_GROUP_HEARTBEAT, api_version, payload)
