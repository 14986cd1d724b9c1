"""ListConfigResources (API 74; v0 was ListClientMetricsResources): the config resources of
some types, by name. The gateway answers it for its own dynamic client config types;
``kpg configs --describe`` without an entity name asks it which entities there are.

Resource types are plain ints, as in :mod:`protocol.client_configs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Final

from kio.schema.errors import ErrorCode
from kio.schema.list_config_resources.v1.request import ListConfigResourcesRequest
from kio.schema.list_config_resources.v1.response import (
    ConfigResource,
    ListConfigResourcesResponse,
)
from kio.static.primitive import i8, i32Timedelta

from .codec import decode_request_as, decode_response_as, encode_request, encode_response
from .framing import RequestHeader
from .versions import DECODABLE

LIST_CONFIG_RESOURCES: Final = 74
VERSIONS: Final = DECODABLE[LIST_CONFIG_RESOURCES]
TYPED_VERSION: Final = 1
"""The first version that names resource types (v0 lists client metrics resources only)."""


def requested_types(header: RequestHeader, frame: bytes) -> tuple[int, ...] | None:
    """The resource types a v1 request asks for (() for "the broker's default types"); None
    for v0, which names none.

    :raises Undecodable:
    """
    if header.api_version < TYPED_VERSION:
        return None
    request = decode_request_as((ListConfigResourcesRequest,), header, frame)
    return tuple(int(t) for t in request.resource_types)


def answer(correlation_id: int, resources: Sequence[tuple[int, str]], error_code: int = 0) -> bytes:
    """A v1 answer frame (no size prefix) listing ``resources`` (type, name)."""
    payload = ListConfigResourcesResponse(
        throttle_time=i32Timedelta.parse(timedelta(0)),
        error_code=ErrorCode(error_code),
        config_resources=tuple(
            ConfigResource(resource_name=name, resource_type=i8(kind)) for kind, name in resources
        ),
    )
    return encode_response(correlation_id, LIST_CONFIG_RESOURCES, TYPED_VERSION, payload)


def list_request(types: Sequence[int], *, correlation_id: int, client_id: str) -> bytes:
    """A v1 request frame (size prefix included) for the resources of ``types``."""
    payload = ListConfigResourcesRequest(resource_types=tuple(i8(t) for t in types))
    return encode_request(LIST_CONFIG_RESOURCES, TYPED_VERSION, correlation_id, client_id, payload)


def read_list_response(frame: bytes) -> tuple[int, tuple[tuple[int, str], ...]]:
    """(error code, the (type, name) of each resource) of a v1 answer (no size prefix).

    :raises Undecodable:
    """
    payload = decode_response_as(
        (ListConfigResourcesResponse,), LIST_CONFIG_RESOURCES, TYPED_VERSION, frame
    )
    return int(payload.error_code), tuple(
        (int(r.resource_type), r.resource_name) for r in payload.config_resources
    )
