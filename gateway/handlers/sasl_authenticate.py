"""SaslAuthenticate: forwarded untouched; the connection's principal is set from the user
name of the client's first message once the broker has answered the whole exchange with
success (see :mod:`gateway.principal`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol.framing import RequestHeader
from protocol.sasl import SASL_AUTHENTICATE, authenticate_result, read_auth_bytes
from protocol.versions import DECODABLE

from . import Forward, Outcome

if TYPE_CHECKING:
    from gateway.connection import ConnectionContext

API_KEY = SASL_AUTHENTICATE
VERSIONS = DECODABLE[API_KEY]


async def handle(ctx: ConnectionContext, header: RequestHeader, frame: bytes) -> Outcome:
    ctx.sasl.client_message(read_auth_bytes(header, frame))

    async def on_response(response: bytes) -> bytes:
        code, _ = authenticate_result(header.api_version, response)
        principal = ctx.sasl.broker_answered(code == 0)
        if principal is not None:
            ctx.principal = principal
        return response

    return Forward(frame=frame, on_response=on_response)
