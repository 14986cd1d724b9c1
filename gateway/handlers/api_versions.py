"""ApiVersions: the broker's answer, narrowed to what the gateway can carry.

For the APIs the gateway inspects or rewrites, the advertised range is the intersection of
the broker's and the handler's; unknown API keys are removed. A version of ApiVersions the
gateway cannot decode gets the broker's own answer to that case: v0, UNSUPPORTED_VERSION.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol.api_versions import (
    broker_ranges,
    decode_api_versions,
    narrow,
    unsupported_version_answer,
)
from protocol.codec import can_decode, encode_response
from protocol.framing import RequestHeader
from protocol.versions import API_VERSIONS_KEY, DECODABLE

from . import Answer, Forward, Outcome

if TYPE_CHECKING:
    from gateway.connection import ConnectionContext

API_KEY = API_VERSIONS_KEY
VERSIONS = DECODABLE[API_KEY]


async def handle(ctx: ConnectionContext, header: RequestHeader, frame: bytes) -> Outcome:
    if not can_decode(API_KEY, header.api_version):
        return Answer(frame=unsupported_version_answer(header.correlation_id))

    async def on_response(response: bytes) -> bytes:
        payload = decode_api_versions(header.api_version, response)
        ctx.remember_broker_versions(broker_ranges(payload))
        narrowed = narrow(payload, ctx.version_caps)
        return encode_response(header.correlation_id, API_KEY, payload.__version__, narrowed)

    return Forward(frame=frame, on_response=on_response)
