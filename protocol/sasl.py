"""SaslHandshake and SaslAuthenticate: the parts the gateway reads to learn who a client is."""

from __future__ import annotations

from typing import Final

from .codec import decode_request, decode_response
from .framing import RequestHeader

SASL_HANDSHAKE: Final = 17
SASL_AUTHENTICATE: Final = 36


def read_mechanism(header: RequestHeader, frame: bytes) -> str:
    """:raises Undecodable:"""
    return str(decode_request(header, frame).mechanism)


def read_auth_bytes(header: RequestHeader, frame: bytes) -> bytes:
    """:raises Undecodable:"""
    return bytes(decode_request(header, frame).auth_bytes)


def authenticate_result(api_version: int, frame: bytes) -> tuple[int, str | None]:
    """(error code, error message) of a SaslAuthenticate answer.

    :raises Undecodable:
    """
    payload = decode_response(SASL_AUTHENTICATE, api_version, frame)
    return int(payload.error_code), payload.error_message
