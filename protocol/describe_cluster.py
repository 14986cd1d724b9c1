"""DescribeCluster's endpoint type (KIP-919): which endpoints a client asks for."""

from __future__ import annotations

import importlib
from typing import Final

from kio.schema.errors import ErrorCode

from .codec import decode_request, encode_response, filled
from .framing import RequestHeader

DESCRIBE_CLUSTER: Final = 60
BROKERS: Final = 1
"""The only endpoint type the gateway answers: 2 (controllers) and 3 would hand out
addresses it does not carry."""


def endpoint_type(header: RequestHeader, frame: bytes) -> int:
    """The endpoint type a request asks for (1, brokers, before v1).

    :raises Undecodable: for a malformed body.
    """
    return int(getattr(decode_request(header, frame), "endpoint_type", BROKERS))


def refusal(header: RequestHeader, code: int, message: str) -> bytes:
    """A response frame (no size prefix) carrying only ``code`` and ``message``."""
    module = importlib.import_module(f"kio.schema.describe_cluster.v{header.api_version}.response")
    payload = filled(
        module.DescribeClusterResponse,
        {
            "error_code": ErrorCode(code),
            "error_message": message,
            "cluster_id": "",
            "brokers": (),
        },
    )
    return encode_response(header.correlation_id, DESCRIBE_CLUSTER, header.api_version, payload)
