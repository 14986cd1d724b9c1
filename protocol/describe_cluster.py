"""DescribeCluster's endpoint type (KIP-919): which endpoints a client asks for."""

from __future__ import annotations

from typing import Final, TypeAlias, get_args

from kio.schema.describe_cluster import v0, v1, v2
from kio.schema.errors import ErrorCode

from .addresses import DescribeClusterResponse
from .codec import decode_request_as, encode_response, filled, schema_of
from .framing import RequestHeader

DESCRIBE_CLUSTER: Final = 60
BROKERS: Final = 1
"""The only endpoint type the gateway answers: 2 (controllers) and 3 would hand out
addresses it does not carry."""

DescribeClusterRequest: TypeAlias = (
    v0.DescribeClusterRequest | v1.DescribeClusterRequest | v2.DescribeClusterRequest
)
"""kio's request entity, any version."""

_REQUESTS: Final[tuple[type[DescribeClusterRequest], ...]] = get_args(DescribeClusterRequest)
_RESPONSES: Final[tuple[type[DescribeClusterResponse], ...]] = get_args(DescribeClusterResponse)


def endpoint_type(header: RequestHeader, frame: bytes) -> int:
    """The endpoint type a request asks for (1, brokers, before v1).

    :raises Undecodable: for a malformed body.
    """
    request = decode_request_as(_REQUESTS, header, frame)
    return BROKERS if isinstance(request, v0.DescribeClusterRequest) else int(request.endpoint_type)


def refusal(header: RequestHeader, code: int, message: str) -> bytes:
    """A response frame (no size prefix) carrying only ``code`` and ``message``."""
    payload = filled(
        schema_of(_RESPONSES, header.api_version),
        {
            "error_code": ErrorCode(code),
            "error_message": message,
            "cluster_id": "",
            "brokers": (),
        },
    )
    return encode_response(header.correlation_id, DESCRIBE_CLUSTER, header.api_version, payload)
