"""The shared step of the Metadata, FindCoordinator and DescribeCluster handlers: swap every
broker address in the broker's answer for the gateway listener of that node."""

from __future__ import annotations

from typing import TypeVar

from protocol.addresses import (
    AddressBearingResponse,
    broker_endpoints,
    decode_address_bearing,
    replace_endpoints,
)
from protocol.codec import encode_response

from ..engine import ClusterView, RequestContext
from ..outcomes import Forward, Outcome
from ..services import Services
from .base import Handler

R = TypeVar("R", bound=AddressBearingResponse)


async def with_gateway_addresses(api_key: int, services: Services, payload: R) -> R:
    """``payload`` (a decoded answer of ``api_key``) with each broker address replaced by the
    gateway's listener of that node.

    :raises KeyError: for a node without a listener; such an answer must never reach a client.
    """
    gateway = await services.nodes.gateway_addresses(broker_endpoints(api_key, payload))
    return replace_endpoints(api_key, payload, gateway)


def rewrite_addresses(
    api_key: int, services: Services, ctx: RequestContext, frame: bytes
) -> Forward:
    """Forward ``frame`` as sent; the answer leaves with the gateway's addresses."""
    version = ctx.api_version

    async def on_response(response: bytes) -> bytes:
        # Undecodable or a node without a listener raises: the connection is closed
        # rather than a broker address reaching the client.
        payload = decode_address_bearing(api_key, version, response)
        rewritten = await with_gateway_addresses(api_key, services, payload)
        return encode_response(ctx.correlation_id, api_key, version, rewritten)

    return Forward(frame=frame, on_response=on_response)


def address_rewriter(api_key: int, services: Services) -> Handler:
    async def handle(ctx: RequestContext, cluster: ClusterView, frame: bytes) -> Outcome:
        return rewrite_addresses(api_key, services, ctx, frame)

    return handle
