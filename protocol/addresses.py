"""Broker addresses inside responses: find them and replace them.

Metadata, FindCoordinator (one coordinator before v4, a list from v4) and DescribeCluster
hand out ``(node_id, host, port)``, and so do the leader endpoints (KIP-951
``node_endpoints``) of Produce v10+, Fetch v16+, ShareFetch and ShareAcknowledge answers
(:mod:`protocol.node_endpoints`). The gateway swaps each for its own listener of that node,
so no client ever learns a broker address.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, TypeAlias, TypeVar, get_args

from kio.schema.describe_cluster import v0 as describe_cluster_v0
from kio.schema.describe_cluster import v1 as describe_cluster_v1
from kio.schema.describe_cluster import v2 as describe_cluster_v2
from kio.schema.fetch import v16 as fetch_v16
from kio.schema.fetch import v17 as fetch_v17
from kio.schema.fetch import v18 as fetch_v18
from kio.schema.find_coordinator import v0 as find_coordinator_v0
from kio.schema.find_coordinator import v1 as find_coordinator_v1
from kio.schema.find_coordinator import v2 as find_coordinator_v2
from kio.schema.find_coordinator import v3 as find_coordinator_v3
from kio.schema.find_coordinator import v4 as find_coordinator_v4
from kio.schema.find_coordinator import v5 as find_coordinator_v5
from kio.schema.find_coordinator import v6 as find_coordinator_v6
from kio.schema.metadata import v0 as metadata_v0
from kio.schema.metadata import v1 as metadata_v1
from kio.schema.metadata import v2 as metadata_v2
from kio.schema.metadata import v3 as metadata_v3
from kio.schema.metadata import v4 as metadata_v4
from kio.schema.metadata import v5 as metadata_v5
from kio.schema.metadata import v6 as metadata_v6
from kio.schema.metadata import v7 as metadata_v7
from kio.schema.metadata import v8 as metadata_v8
from kio.schema.metadata import v9 as metadata_v9
from kio.schema.metadata import v10 as metadata_v10
from kio.schema.metadata import v11 as metadata_v11
from kio.schema.metadata import v12 as metadata_v12
from kio.schema.metadata import v13 as metadata_v13
from kio.schema.produce import v10 as produce_v10
from kio.schema.produce import v11 as produce_v11
from kio.schema.produce import v12 as produce_v12
from kio.schema.produce import v13 as produce_v13
from kio.schema.share_acknowledge import v1 as share_acknowledge_v1
from kio.schema.share_acknowledge import v2 as share_acknowledge_v2
from kio.schema.share_fetch import v1 as share_fetch_v1
from kio.schema.share_fetch import v2 as share_fetch_v2
from kio.static.primitive import i32
from kio.static.protocol import Entity

from .codec import decode_response_as, replaced
from .node_endpoints import NODE_ENDPOINTS_SINCE

METADATA: Final = 3
FIND_COORDINATOR: Final = 10
DESCRIBE_CLUSTER: Final = 60

ADDRESS_BEARING_APIS: Final = frozenset(
    {METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER, *NODE_ENDPOINTS_SINCE}
)
"""Responses of these APIs carry broker addresses that the gateway must rewrite (Produce and
Fetch only from the versions in :data:`protocol.node_endpoints.NODE_ENDPOINTS_SINCE`)."""

MetadataResponse: TypeAlias = (
    metadata_v0.MetadataResponse
    | metadata_v1.MetadataResponse
    | metadata_v2.MetadataResponse
    | metadata_v3.MetadataResponse
    | metadata_v4.MetadataResponse
    | metadata_v5.MetadataResponse
    | metadata_v6.MetadataResponse
    | metadata_v7.MetadataResponse
    | metadata_v8.MetadataResponse
    | metadata_v9.MetadataResponse
    | metadata_v10.MetadataResponse
    | metadata_v11.MetadataResponse
    | metadata_v12.MetadataResponse
    | metadata_v13.MetadataResponse
)
"""kio's Metadata response entity, any version."""
FindCoordinatorResponse: TypeAlias = (
    find_coordinator_v0.FindCoordinatorResponse
    | find_coordinator_v1.FindCoordinatorResponse
    | find_coordinator_v2.FindCoordinatorResponse
    | find_coordinator_v3.FindCoordinatorResponse
    | find_coordinator_v4.FindCoordinatorResponse
    | find_coordinator_v5.FindCoordinatorResponse
    | find_coordinator_v6.FindCoordinatorResponse
)
"""kio's FindCoordinator response entity, any version."""
DescribeClusterResponse: TypeAlias = (
    describe_cluster_v0.DescribeClusterResponse
    | describe_cluster_v1.DescribeClusterResponse
    | describe_cluster_v2.DescribeClusterResponse
)
"""kio's DescribeCluster response entity, any version."""
LeaderEndpointsResponse: TypeAlias = (
    produce_v10.ProduceResponse
    | produce_v11.ProduceResponse
    | produce_v12.ProduceResponse
    | produce_v13.ProduceResponse
    | fetch_v16.FetchResponse
    | fetch_v17.FetchResponse
    | fetch_v18.FetchResponse
    | share_fetch_v1.ShareFetchResponse
    | share_fetch_v2.ShareFetchResponse
    | share_acknowledge_v1.ShareAcknowledgeResponse
    | share_acknowledge_v2.ShareAcknowledgeResponse
)
"""An answer with a ``node_endpoints`` list (KIP-951, KIP-932), any API and version."""
AddressBearingResponse: TypeAlias = (
    MetadataResponse | FindCoordinatorResponse | DescribeClusterResponse | LeaderEndpointsResponse
)
"""The answer of one of :data:`ADDRESS_BEARING_APIS`."""
R = TypeVar("R", bound=AddressBearingResponse)
N = TypeVar("N", bound=Entity)

_METADATA: Final[tuple[type[MetadataResponse], ...]] = get_args(MetadataResponse)
_DESCRIBE_CLUSTER: Final[tuple[type[DescribeClusterResponse], ...]] = get_args(
    DescribeClusterResponse
)
_ENDPOINT_TYPED: Final = (
    describe_cluster_v1.DescribeClusterResponse,
    describe_cluster_v2.DescribeClusterResponse,
)
"""DescribeCluster from v1 (KIP-919) says which endpoints it lists."""
_ONE_COORDINATOR: Final = (
    find_coordinator_v0.FindCoordinatorResponse,
    find_coordinator_v1.FindCoordinatorResponse,
    find_coordinator_v2.FindCoordinatorResponse,
    find_coordinator_v3.FindCoordinatorResponse,
)
_COORDINATORS: Final = (
    find_coordinator_v4.FindCoordinatorResponse,
    find_coordinator_v5.FindCoordinatorResponse,
    find_coordinator_v6.FindCoordinatorResponse,
)
"""FindCoordinator from v4 answers a list of coordinators."""
_LEADER_ENDPOINTS: Final[tuple[type[LeaderEndpointsResponse], ...]] = get_args(
    LeaderEndpointsResponse
)


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerEndpoint:
    node_id: int
    host: str
    port: int


def broker_endpoints(api_key: int, payload: AddressBearingResponse) -> tuple[BrokerEndpoint, ...]:
    """Every broker address in the response ``payload`` (coordinator errors excluded).

    :raises ValueError: when ``payload`` is no answer of ``api_key``, or ``api_key`` is not
        one of :data:`ADDRESS_BEARING_APIS`, or for a DescribeCluster answer of endpoints
        other than brokers.
    """
    if api_key == METADATA and isinstance(payload, _METADATA):
        return tuple(
            BrokerEndpoint(node_id=b.node_id, host=b.host, port=b.port) for b in payload.brokers
        )
    if api_key == DESCRIBE_CLUSTER and isinstance(payload, _DESCRIBE_CLUSTER):
        _check_endpoint_type(payload)
        return tuple(
            BrokerEndpoint(node_id=b.broker_id, host=b.host, port=b.port) for b in payload.brokers
        )
    if api_key == FIND_COORDINATOR and isinstance(payload, _COORDINATORS):
        return tuple(
            BrokerEndpoint(node_id=c.node_id, host=c.host, port=c.port)
            for c in payload.coordinators
            if c.node_id >= 0
        )
    if api_key == FIND_COORDINATOR and isinstance(payload, _ONE_COORDINATOR):
        if payload.node_id >= 0:
            return (BrokerEndpoint(node_id=payload.node_id, host=payload.host, port=payload.port),)
        return ()
    if isinstance(payload, _LEADER_ENDPOINTS) and payload.__api_key__ == api_key:
        return tuple(
            BrokerEndpoint(node_id=e.node_id, host=e.host, port=e.port)
            for e in payload.node_endpoints
        )
    raise _no_addresses(api_key, payload)


def replace_endpoints(api_key: int, payload: R, gateway: Mapping[int, tuple[str, int]]) -> R:
    """``payload`` with each node's address replaced by ``gateway[node_id]``; a coordinator
    error's address (node -1) blanked.

    :raises KeyError: when a node in the payload has no gateway address; the caller must
        never let such a response reach a client.
    :raises ValueError: as :func:`broker_endpoints`.
    """

    def swap(entity: N, node_id: int) -> N:
        host, port = gateway[node_id]
        return replaced(entity, host=host, port=i32(port))

    if api_key == METADATA and isinstance(payload, _METADATA):
        return replaced(payload, brokers=tuple(swap(b, b.node_id) for b in payload.brokers))
    if api_key == DESCRIBE_CLUSTER and isinstance(payload, _DESCRIBE_CLUSTER):
        _check_endpoint_type(payload)
        return replaced(payload, brokers=tuple(swap(b, b.broker_id) for b in payload.brokers))
    if api_key == FIND_COORDINATOR and isinstance(payload, _COORDINATORS):
        coordinators = tuple(
            swap(c, c.node_id) if c.node_id >= 0 else _no_node(c) for c in payload.coordinators
        )
        return replaced(payload, coordinators=coordinators)
    if api_key == FIND_COORDINATOR and isinstance(payload, _ONE_COORDINATOR):
        return swap(payload, payload.node_id) if payload.node_id >= 0 else _no_node(payload)
    if isinstance(payload, _LEADER_ENDPOINTS) and payload.__api_key__ == api_key:
        return replaced(
            payload, node_endpoints=tuple(swap(e, e.node_id) for e in payload.node_endpoints)
        )
    raise _no_addresses(api_key, payload)


def _no_node(entity: N) -> N:
    """A coordinator entry without a node (an error) as Kafka writes one (``Node.noNode()``):
    no host, port -1, whatever address the broker left in it."""
    return replaced(entity, host="", port=i32(-1))


def _check_endpoint_type(payload: DescribeClusterResponse) -> None:
    """The gateway forwards DescribeCluster for broker endpoints only
    (:mod:`gateway.handlers.describe_cluster`); an answer listing another type's (the
    controllers') would hand out addresses it has no listener for.

    :raises ValueError: for such an answer.
    """
    if isinstance(payload, _ENDPOINT_TYPED) and payload.endpoint_type != 1 and payload.brokers:
        raise ValueError(
            f"DescribeCluster answer lists endpoint type {payload.endpoint_type}, not brokers"
        )


def _no_addresses(api_key: int, payload: AddressBearingResponse) -> ValueError:
    if api_key in ADDRESS_BEARING_APIS:
        return ValueError(f"{type(payload).__name__} is no answer of API key {api_key}")
    return ValueError(f"API key {api_key} carries no broker addresses")


_ADDRESS_BEARING: Final[tuple[type[AddressBearingResponse], ...]] = get_args(AddressBearingResponse)


def decode_address_bearing(api_key: int, api_version: int, frame: bytes) -> AddressBearingResponse:
    """The answer of one of :data:`ADDRESS_BEARING_APIS`, decoded and typed.

    :raises Undecodable: for a malformed answer.
    """
    return decode_response_as(_ADDRESS_BEARING, api_key, api_version, frame)
