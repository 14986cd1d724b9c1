"""Broker addresses inside responses: find them and replace them.

Metadata, FindCoordinator (one coordinator before v4, a list from v4) and DescribeCluster
hand out ``(node_id, host, port)``. The gateway swaps each for its own listener of that node,
so no client ever learns a broker address.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from kio.static.primitive import i32

from .codec import Payload

METADATA: Final = 3
FIND_COORDINATOR: Final = 10
DESCRIBE_CLUSTER: Final = 60

ADDRESS_BEARING_APIS: Final = frozenset({METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER})
"""Responses of these APIs carry broker addresses that the gateway must rewrite."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerEndpoint:
    node_id: int
    host: str
    port: int


def broker_endpoints(api_key: int, payload: Payload) -> tuple[BrokerEndpoint, ...]:
    """Every broker address in the response ``payload`` (coordinator errors excluded)."""
    if api_key == METADATA:
        return tuple(
            BrokerEndpoint(node_id=b.node_id, host=b.host, port=b.port) for b in payload.brokers
        )
    if api_key == DESCRIBE_CLUSTER:
        if getattr(payload, "endpoint_type", 1) != 1:
            return ()
        return tuple(
            BrokerEndpoint(node_id=b.broker_id, host=b.host, port=b.port) for b in payload.brokers
        )
    if api_key == FIND_COORDINATOR:
        if hasattr(payload, "coordinators"):
            return tuple(
                BrokerEndpoint(node_id=c.node_id, host=c.host, port=c.port)
                for c in payload.coordinators
                if c.node_id >= 0
            )
        if payload.node_id >= 0:
            return (BrokerEndpoint(node_id=payload.node_id, host=payload.host, port=payload.port),)
        return ()
    raise ValueError(f"API key {api_key} carries no broker addresses")


def replace_endpoints(
    api_key: int, payload: Payload, gateway: Mapping[int, tuple[str, int]]
) -> Payload:
    """``payload`` with each node's address replaced by ``gateway[node_id]``.

    :raises KeyError: when a node in the payload has no gateway address; the caller must
        never let such a response reach a client.
    """

    def swap(entity: Payload, node_id: int) -> Payload:
        host, port = gateway[node_id]
        return dataclasses.replace(entity, host=host, port=i32(port))

    if api_key == METADATA:
        brokers = tuple(swap(b, b.node_id) for b in payload.brokers)
        return dataclasses.replace(payload, brokers=brokers)
    if api_key == DESCRIBE_CLUSTER:
        if getattr(payload, "endpoint_type", 1) != 1:
            return payload
        brokers = tuple(swap(b, b.broker_id) for b in payload.brokers)
        return dataclasses.replace(payload, brokers=brokers)
    if api_key == FIND_COORDINATOR:
        if hasattr(payload, "coordinators"):
            coordinators = tuple(
                swap(c, c.node_id) if c.node_id >= 0 else c for c in payload.coordinators
            )
            return dataclasses.replace(payload, coordinators=coordinators)
        return swap(payload, payload.node_id) if payload.node_id >= 0 else payload
    raise ValueError(f"API key {api_key} carries no broker addresses")
