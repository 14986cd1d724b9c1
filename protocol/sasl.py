"""SaslHandshake and SaslAuthenticate: the parts the gateway reads to learn who a client is."""

from __future__ import annotations

from typing import Final, TypeAlias, get_args

from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate import v0 as sasl_authenticate_v0
from kio.schema.sasl_authenticate import v1 as sasl_authenticate_v1
from kio.schema.sasl_authenticate import v2 as sasl_authenticate_v2
from kio.schema.sasl_handshake import v0 as sasl_handshake_v0
from kio.schema.sasl_handshake import v1 as sasl_handshake_v1

from .codec import decode_request_as, decode_response_as, encode_request, encode_response
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


def unsupported_mechanism_answer(correlation_id: int, enabled: tuple[str, ...]) -> bytes:
    """A SaslHandshake v1 answer UNSUPPORTED_SASL_MECHANISM listing ``enabled``: what a Kafka
    broker answers a mechanism it does not enable (and then closes the connection)."""
    payload = sasl_handshake_v1.SaslHandshakeResponse(
        error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=enabled
    )
    return encode_response(correlation_id, SASL_HANDSHAKE, 1, payload)


# --- the client's side, for the kpg tools ----------------------------------------------------

CLIENT_HANDSHAKE_VERSION: Final = 1
CLIENT_AUTHENTICATE_VERSION: Final = 2


def handshake_request(mechanism: str, *, correlation_id: int, client_id: str) -> bytes:
    """A SaslHandshake v1 request frame (size prefix included)."""
    payload = sasl_handshake_v1.SaslHandshakeRequest(mechanism=mechanism)
    return encode_request(
        SASL_HANDSHAKE, CLIENT_HANDSHAKE_VERSION, correlation_id, client_id, payload
    )


def read_handshake_response(frame: bytes) -> tuple[int, tuple[str, ...]]:
    """(error code, the mechanisms the server enables) of a SaslHandshake v1 answer.

    :raises Undecodable:
    """
    payload = decode_response_as(
        (sasl_handshake_v1.SaslHandshakeResponse,), SASL_HANDSHAKE, CLIENT_HANDSHAKE_VERSION, frame
    )
    return int(payload.error_code), tuple(payload.mechanisms)


def authenticate_request(auth_bytes: bytes, *, correlation_id: int, client_id: str) -> bytes:
    """A SaslAuthenticate v2 request frame (size prefix included)."""
    payload = sasl_authenticate_v2.SaslAuthenticateRequest(auth_bytes=auth_bytes)
    return encode_request(
        SASL_AUTHENTICATE, CLIENT_AUTHENTICATE_VERSION, correlation_id, client_id, payload
    )


def read_authenticate_response(frame: bytes) -> tuple[int, str | None, bytes]:
    """(error code, error message, the server's auth bytes) of a SaslAuthenticate v2 answer.

    :raises Undecodable:
    """
    payload = decode_response_as(
        (sasl_authenticate_v2.SaslAuthenticateResponse,),
        SASL_AUTHENTICATE,
        CLIENT_AUTHENTICATE_VERSION,
        frame,
    )
    return int(payload.error_code), payload.error_message, bytes(payload.auth_bytes)


def handshake_v0_refusal(correlation_id: int) -> bytes:
    """The answer to a SaslHandshake v0, which the gateway lists but does not carry (see
    :mod:`gateway.handlers.sasl_handshake`): UNSUPPORTED_VERSION and no mechanism. After a v0
    handshake a client sends bare SASL tokens, without Kafka's framing, which no one between
    it and the broker could read; every client since Kafka 1.0 sends v1 when it is offered."""
    payload = sasl_handshake_v0.SaslHandshakeResponse(
        error_code=ErrorCode.unsupported_version, mechanisms=()
    )
    return encode_response(correlation_id, SASL_HANDSHAKE, 0, payload)
