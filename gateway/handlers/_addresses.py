"""The shared step of the Metadata, FindCoordinator and DescribeCluster handlers: swap every
broker address in the broker's answer for the gateway listener of that node."""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol.addresses import broker_endpoints, replace_endpoints
from protocol.codec import decode_response, encode_response
from protocol.framing import RequestHeader

from . import Forward, Handler, Outcome

if TYPE_CHECKING:
    from gateway.connection import ConnectionContext


def address_rewriter(api_key: int) -> Handler:
    async def handle(ctx: ConnectionContext, header: RequestHeader, frame: bytes) -> Outcome:
        async def on_response(response: bytes) -> bytes:
            # Undecodable or a node without a listener raises: the connection is closed
            # rather than a broker address reaching the client.
            payload = decode_response(api_key, header.api_version, response)
            gateway = await ctx.gateway_addresses(broker_endpoints(api_key, payload))
            rewritten = replace_endpoints(api_key, payload, gateway)
            return encode_response(header.correlation_id, api_key, header.api_version, rewritten)

        return Forward(frame=frame, on_response=on_response)

    return handle
