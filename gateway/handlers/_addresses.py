"""The shared step of the Metadata, FindCoordinator and DescribeCluster handlers: swap every
broker address in the broker's answer for the gateway listener of that node."""

from __future__ import annotations

from protocol.addresses import broker_endpoints, replace_endpoints
from protocol.codec import decode_response, encode_response

from ..engine import ClusterView, RequestContext
from ..outcomes import Forward, Outcome
from ..services import Services
from .base import Handler


def address_rewriter(api_key: int, services: Services) -> Handler:
    async def handle(ctx: RequestContext, cluster: ClusterView, frame: bytes) -> Outcome:
        version = ctx.api_version

        async def on_response(response: bytes) -> bytes:
            # Undecodable or a node without a listener raises: the connection is closed
            # rather than a broker address reaching the client.
            payload = decode_response(api_key, version, response)
            gateway = await services.nodes.gateway_addresses(broker_endpoints(api_key, payload))
            rewritten = replace_endpoints(api_key, payload, gateway)
            return encode_response(ctx.correlation_id, api_key, version, rewritten)

        return Forward(frame=frame, on_response=on_response)

    return handle
