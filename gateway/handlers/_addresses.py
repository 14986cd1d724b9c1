"""The shared step of the handlers whose answers carry broker addresses (Metadata,
FindCoordinator, DescribeCluster; the leader endpoints of Produce v10+, Fetch v16+, ShareFetch
and ShareAcknowledge): swap every broker address in the broker's answer for the gateway
listener of that node."""

from __future__ import annotations

import dataclasses
from typing import TypeVar

from protocol.addresses import (
    METADATA,
    AddressBearingResponse,
    broker_endpoints,
    decode_address_bearing,
    replace_endpoints,
)
from protocol.codec import encode_response
from protocol.node_endpoints import carries_node_endpoints, has_node_endpoints

from ..engine import ClusterView, RequestContext
from ..outcomes import Forward, Outcome
from ..services import Services
from .base import Handler

R = TypeVar("R", bound=AddressBearingResponse)


async def with_gateway_addresses(api_key: int, services: Services, payload: R) -> R:
    """``payload`` (a decoded answer of ``api_key``) with each broker address replaced by the
    gateway's listener of that node.

    A Metadata answer lists every broker of the cluster: a node it leaves out has left, and
    its listener connects no client to the address it had (:mod:`gateway.nodes`).

    :raises KeyError: for a node without a listener; such an answer must never reach a client.
    """
    gateway = await services.nodes.gateway_addresses(
        broker_endpoints(api_key, payload), complete=api_key == METADATA
    )
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


def with_leader_endpoints(api_key: int, services: Services, handler: Handler) -> Handler:
    """``handler``, with the leader endpoints (KIP-951) of every answer it forwards swapped for
    the gateway's listeners: after the handler's own step on the answer (merging local
    errors), so whatever leaves carries gateway addresses only. An answer without leader
    endpoints leaves as it was, unread beyond its layout."""

    async def handle(ctx: RequestContext, cluster: ClusterView, frame: bytes) -> Outcome:
        outcome = await handler(ctx, cluster, frame)
        version = ctx.api_version
        if (
            not isinstance(outcome, Forward)
            or not outcome.expect_response
            or not carries_node_endpoints(api_key, version)
        ):
            return outcome
        inner = outcome.on_response

        async def on_response(response: bytes) -> bytes:
            if inner is not None:
                response = await inner(response)
            # Undecodable or a node without a listener raises: the connection is closed
            # rather than a broker address reaching the client.
            if not has_node_endpoints(api_key, version, response):
                return response
            payload = decode_address_bearing(api_key, version, response)
            rewritten = await with_gateway_addresses(api_key, services, payload)
            return encode_response(ctx.correlation_id, api_key, version, rewritten)

        return dataclasses.replace(outcome, on_response=on_response)

    return handle
