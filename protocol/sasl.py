"""SaslHandshake and SaslAuthenticate: the parts the gateway reads to learn who a client is."""

from __future__ import annotations

from typing import Final, TypeAlias, get_args

from kio.schema.sasl_authenticate import v0 as sasl_authenticate_v0
from kio.schema.sasl_authenticate import v1 as sasl_authenticate_v1
from kio.schema.sasl_authenticate import v2 as sasl_authenticate_v2
from kio.schema.sasl_handshake import v0 as sasl_handshake_v0
from kio.schema.sasl_handshake import v1 as sasl_handshake_v1

from .codec import decode_request_as, decode_response_as
from .framing import RequestHeader

SASL_HANDSHAKE: Final = 17
SASL_AUTHENTICATE: Final = 36

SaslHandshakeRequest: TypeAlias = (
    sasl_handshake_v0.SaslHandshakeRequest | sasl_handshake_v1.SaslHandshakeRequest
)
SaslAuthenticateRequest: TypeAlias = (
    sasl_authenticate_v0.SaslAuthenticateRequest
    | sasl_authenticate_v1.SaslAuthenticateRequest
    | sasl_authenticate_v2.SaslAuthenticateRequest
)
SaslAuthenticateResponse: TypeAlias = (
    sasl_authenticate_v0.SaslAuthenticateResponse
    | sasl_authenticate_v1.SaslAuthenticateResponse
    | sasl_authenticate_v2.SaslAuthenticateResponse
)

_HANDSHAKE_REQUESTS: Final[tuple[type[SaslHandshakeRequest], ...]] = get_args(SaslHandshakeRequest)
_AUTHENTICATE_REQUESTS: Final[tuple[type[SaslAuthenticateRequest], ...]] = get_args(
    SaslAuthenticateRequest
)
_AUTHENTICATE_RESPONSES: Final[tuple[type[SaslAuthenticateResponse], ...]] = get_args(
    SaslAuthenticateResponse
)


def read_mechanism(header: RequestHeader, frame: bytes) -> str:
    """:raises Undecodable:"""
    return str(decode_request_as(_HANDSHAKE_REQUESTS, header, frame).mechanism)


def read_auth_bytes(header: RequestHeader, frame: bytes) -> bytes:
    """:raises Undecodable:"""
    return bytes(decode_request_as(_AUTHENTICATE_REQUESTS, header, frame).auth_bytes)


def authenticate_result(api_version: int, frame: bytes) -> tuple[int, str | None]:
    """(error code, error message) of a SaslAuthenticate answer.

    :raises Undecodable:
    """
    payload = decode_response_as(_AUTHENTICATE_RESPONSES, SASL_AUTHENTICATE, api_version, frame)
    return int(payload.error_code), payload.error_message
