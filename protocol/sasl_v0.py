"""SaslHandshake v0, which the gateway lists but does not carry (see
:mod:`gateway.handlers.sasl_handshake`)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.sasl_handshake import v0 as sasl_handshake_v0

from .codec import encode_response
from .sasl import SASL_HANDSHAKE


def handshake_v0_refusal(correlation_id: int) -> bytes:
    """The answer to a SaslHandshake v0: UNSUPPORTED_VERSION and no mechanism. After a v0
    handshake a client sends bare SASL tokens, without Kafka's framing, which no one between
    it and the broker could read; every client since Kafka 1.0 sends v1 when it is offered."""
    payload = sasl_handshake_v0.SaslHandshakeResponse(
        error_code=ErrorCode.unsupported_version, mechanisms=()
    )
    return encode_response(correlation_id, SASL_HANDSHAKE, 0, payload)
