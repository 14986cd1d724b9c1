"""Node listeners on ports that are not theirs: node N listens on ``node_port_base + N``, and a
broker id is whatever the cluster's operators chose. When that sum is the gateway's bootstrap
port, a worker of ``kpg run --workers N`` (every listener opened with SO_REUSEPORT, so the
workers can share it) bound node N's listener beside the bootstrap one without an error: the
kernel then hands each new connection to the bootstrap port to either, so clients meant for
the bootstrap servers reach node N's broker instead, and clients meant for node N reach the
bootstrap servers (and retry on NOT_LEADER_OR_FOLLOWER). A single process got EADDRINUSE and
refused the answer; a worker must refuse it too, and never share the bootstrap port.

A node id below 0 names no broker (Kafka's node ids are 0 or more; -1 stands for "none"),
yet the gateway opened ``node_port_base - 1`` for node -1 and advertised it.

Addresses outside the fields the gateway rewrote: a coordinator error (node -1) went out
with whatever host and port the broker left in it, and a DescribeCluster answer saying it
lists another endpoint type than brokers went out untouched. Now an error's address is
blanked as Kafka writes it, and such a DescribeCluster answer closes the connection.

A broker's own configs (DescribeConfigs of a BROKER resource) hold its listeners, its
advertised listeners and the controllers' addresses: they reached the client as they were,
and are now shown without their value, as Kafka shows a sensitive config.

Scripted upstream: the test broker (Tansu) is one node and announces only its own id, so two
scripted brokers (tests/scripted.py) stand for a cluster whose second node has the id that
collides: node 1, the bootstrap broker, and node N on a broker of its own, whose connections
show where the gateway sent a client.
"""

from __future__ import annotations

import importlib
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.metadata.v12.response import MetadataResponseBroker
from kio.schema.types import BrokerId
from kio.static.primitive import i8, i32

from protocol.addresses import METADATA
from protocol.codec import decode_response
from protocol.framing import RequestHeader
from tests.scripted import (
    ZERO,
    ScriptedBroker,
    ScriptedCluster,
    cluster_metadata_response,
    metadata_response,
)
from tests.support import GatewayThread, RawClient, gateway_config

pytestmark = pytest.mark.adversarial

PROBES = 16
"""Connections to the bootstrap port: with two listeners on it, the kernel picks either at
random for each, so all 16 reaching the bootstrap listener by chance is 1 in 65,536."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TwoNodes:
    """Metadata naming node 1 (the bootstrap broker) and ``other`` (a broker of its own)."""

    def __init__(self, other: int) -> None:
        self.other = other
        self.bootstrap: ScriptedBroker | None = None
        self.elsewhere: ScriptedBroker | None = None

    async def respond(self, me: ScriptedBroker, header: RequestHeader, request: Any) -> Any:
        assert header.api_key == METADATA, f"unscripted API key {header.api_key}"
        assert self.bootstrap is not None and self.bootstrap.address is not None
        assert self.elsewhere is not None and self.elsewhere.address is not None
        answer = metadata_response(self.bootstrap, [], brokers=(1,))
        other = MetadataResponseBroker(
            node_id=BrokerId(self.other),
            host=self.elsewhere.address.host,
            port=i32(self.elsewhere.address.port),
        )
        return answer.__class__(
            throttle_time=answer.throttle_time,
            brokers=(*answer.brokers, other),
            cluster_id=answer.cluster_id,
            controller_id=answer.controller_id,
            topics=(),
        )


@pytest.fixture
def two_nodes(scripted_cluster: ScriptedCluster) -> Iterator[Any]:
    """``start(other_node_id, listen_port, node_port_base)``: the scripted pair and a gateway
    in front of the first, listening as a worker does."""
    started: list[GatewayThread] = []

    def start(other: int, listen: int, base: int) -> tuple[TwoNodes, GatewayThread]:
        script = TwoNodes(other)
        script.bootstrap = scripted_cluster.add(script.respond, "node-1")
        script.elsewhere = scripted_cluster.add(script.respond, f"node{other}")
        assert script.bootstrap.address is not None
        config = gateway_config(
            script.bootstrap.address, listen=f"127.0.0.1:{listen}", node_port_base=base
        )
        gw = GatewayThread(config, reuse_port=True).start()
        started.append(gw)
        return script, gw

    try:
        yield start
    finally:
        for gw in started:
            gw.stop()


def _metadata(client: RawClient) -> Any:
    return client.request(
        METADATA,
        12,
        MetadataRequest(
            topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False
        ),
    )


def _advertised(address: str) -> list[tuple[int, int]]:
    """(node id, port) of each broker a Metadata answer through ``address`` names; [] when
    the gateway closes the connection instead."""
    client = RawClient(address)
    try:
        answer = _metadata(client)
    except ConnectionError:
        return []
    finally:
        client.close()
    return [(int(b.node_id), int(b.port)) for b in answer.brokers]


def test_a_node_whose_port_is_the_bootstrap_port_never_shares_it(two_nodes: Any) -> None:
    listen = _free_port()
    colliding = 5
    script, gw = two_nodes(colliding, listen, listen - colliding)
    advertised = _advertised(gw.bootstrap)
    assert (colliding, listen) not in advertised, (
        f"node {colliding} advertised on the bootstrap port {listen}"
    )
    assert script.elsewhere is not None
    for _ in range(PROBES):
        _advertised(gw.bootstrap)
    assert script.elsewhere.connections == 0, (
        f"{script.elsewhere.connections} of {PROBES} connections to the bootstrap port "
        f"reached node {colliding}'s broker"
    )


def test_a_negative_node_id_gets_no_listener(two_nodes: Any) -> None:
    port = _free_port()
    script, gw = two_nodes(-1, _free_port(), port + 1)
    advertised = _advertised(gw.bootstrap)
    assert all(node >= 0 for node, _ in advertised), f"advertised {advertised}"
    with pytest.raises(ConnectionRefusedError):
        RawClient(f"127.0.0.1:{port}").close()


# --- addresses in answers the gateway did not rewrite -----------------------------------------

FIND_COORDINATOR = 10
DESCRIBE_CLUSTER = 60


def _module(api: str, version: int, kind: str) -> Any:
    return importlib.import_module(f"kio.schema.{api}.v{version}.{kind}")


class StrayAddresses:
    """A broker that leaves its address where the gateway did not look: in a coordinator
    error (node -1, which Kafka writes as no host and port -1), and in a DescribeCluster
    answer that says it lists endpoints of another type than the brokers the client asked
    for (Kafka echoes the type asked)."""

    async def respond(self, me: ScriptedBroker, header: RequestHeader, request: Any) -> Any:
        assert me.address is not None
        host, port = me.address.host, i32(me.address.port)
        version = header.api_version
        if header.api_key == FIND_COORDINATOR:
            schema = _module("find_coordinator", version, "response")
            error = ErrorCode.coordinator_not_available
            if version >= 4:
                return schema.FindCoordinatorResponse(
                    throttle_time=ZERO,
                    coordinators=tuple(
                        schema.Coordinator(
                            key=key,
                            node_id=BrokerId(-1),
                            host=host,
                            port=port,
                            error_code=error,
                            error_message=None,
                        )
                        for key in request.coordinator_keys
                    ),
                )
            return schema.FindCoordinatorResponse(
                throttle_time=ZERO,
                error_code=error,
                error_message=None,
                node_id=BrokerId(-1),
                host=host,
                port=port,
            )
        assert header.api_key == DESCRIBE_CLUSTER, f"unscripted API key {header.api_key}"
        schema = _module("describe_cluster", version, "response")
        return schema.DescribeClusterResponse(
            throttle_time=ZERO,
            error_code=ErrorCode.none,
            endpoint_type=i8(2),
            cluster_id="scripted",
            controller_id=BrokerId(3000),
            brokers=(schema.DescribeClusterBroker(broker_id=BrokerId(3000), host=host, port=port),),
        )


def _find_coordinator(version: int) -> Any:
    schema = _module("find_coordinator", version, "request")
    if version >= 4:
        return schema.FindCoordinatorRequest(key_type=i8(0), coordinator_keys=("g1", "g2"))
    return schema.FindCoordinatorRequest(key="g1", key_type=i8(0))


@pytest.mark.parametrize(
    ("api_key", "version", "request_"),
    [
        pytest.param(FIND_COORDINATOR, 3, _find_coordinator(3), id="find-coordinator-v3-error"),
        pytest.param(FIND_COORDINATOR, 4, _find_coordinator(4), id="find-coordinator-v4-errors"),
        pytest.param(
            DESCRIBE_CLUSTER,
            1,
            _module("describe_cluster", 1, "request").DescribeClusterRequest(
                include_cluster_authorized_operations=False, endpoint_type=i8(1)
            ),
            id="describe-cluster-other-endpoint-type",
        ),
    ],
)
def test_no_broker_address_reaches_the_client_outside_the_rewritten_fields(
    scripted_cluster: ScriptedCluster, api_key: int, version: int, request_: Any
) -> None:
    """Scripted upstream: Kafka answers neither so (Tansu has no DescribeCluster v1); the
    broker's port must not be in whatever the client gets."""
    broker = scripted_cluster.add(StrayAddresses().respond, "stray")
    assert broker.address is not None
    gw = GatewayThread(gateway_config(broker.address)).start()
    try:
        client = RawClient(gw.bootstrap)
        try:
            client.send(api_key, version, request_)
            frame = client.recv_frame()
        except ConnectionError:
            return  # refused: nothing reached the client
        finally:
            client.close()
    finally:
        gw.stop()
    answer = decode_response(api_key, version, frame)
    entries = getattr(answer, "coordinators", None) or getattr(answer, "brokers", None) or (answer,)
    leaked = [e for e in entries if int(e.port) == broker.address.port]
    assert not leaked, f"the broker's address reached the client: {leaked}"


# --- a node that left the cluster ---------------------------------------------------------------


class Departing:
    """Node 1 (the bootstrap broker) answers Metadata listing the nodes in ``present``: node 2,
    on a broker of its own, leaves the cluster when the test takes it out. Node 2's broker
    stays up: it stands for whatever now answers at the address node 2 had (a reused IP or
    DNS name), which no answer names any more."""

    def __init__(self) -> None:
        self.present = {1, 2}
        self.brokers: dict[int, ScriptedBroker] = {}

    async def respond(self, me: ScriptedBroker, header: RequestHeader, request: Any) -> Any:
        assert header.api_key == METADATA, f"unscripted API key {header.api_key}"
        present = {n: b for n, b in self.brokers.items() if n in self.present}
        return cluster_metadata_response(me, [], present)


def _reaches(address: str) -> bool:
    """Whether a Metadata request on a new connection to ``address`` gets an answer."""
    try:
        client = RawClient(address)
    except ConnectionRefusedError:
        return False
    try:
        _metadata(client)
    except ConnectionError:
        return False
    finally:
        client.close()
    return True


def test_a_node_that_left_the_cluster_leads_nowhere(scripted_cluster: ScriptedCluster) -> None:
    """Scripted upstream (several brokers). Once a Metadata answer (every broker of the
    cluster) leaves node 2 out, a client on node 2's listener (its port was in the cached
    metadata of any client) is not connected to node 2's old address; when node 2 is listed
    again, its listener serves again."""
    script = Departing()
    for n in (1, 2):
        script.brokers[n] = scripted_cluster.add(script.respond, f"node-{n}")
    gw = GatewayThread(gateway_config(script.brokers[1].address)).start()  # type: ignore[arg-type]
    try:
        ports = dict(_advertised(gw.bootstrap))
        node_2 = f"127.0.0.1:{ports[2]}"
        script.present.discard(2)
        assert dict(_advertised(gw.bootstrap)).keys() == {1}
        assert not _reaches(node_2)
        assert script.brokers[2].connections == 0, "node 2's old address was connected to"
        script.present.add(2)
        assert dict(_advertised(gw.bootstrap)) == ports
        assert _reaches(node_2)
        assert script.brokers[2].connections == 1
    finally:
        gw.stop()


# --- broker addresses in broker configs -------------------------------------------------------

DESCRIBE_CONFIGS = 32
STATIC_BROKER_CONFIG = 4


class ListenerConfigs:
    """A broker describing its own BROKER resource as Kafka does: among its configs its
    listeners, advertised listeners, the controllers' addresses and a metrics reporter's
    bootstrap servers, each with a synonym of the same value."""

    def __init__(self) -> None:
        self.address = ""

    def configs(self) -> list[tuple[str, str]]:
        return [
            ("listeners", f"PLAINTEXT://{self.address}"),
            ("advertised.listeners", f"PLAINTEXT://{self.address}"),
            ("controller.quorum.voters", f"1@{self.address}"),
            ("controller.quorum.bootstrap.servers", self.address),
            ("confluent.metrics.reporter.bootstrap.servers", self.address),
            ("num.partitions", "3"),
        ]

    async def respond(self, me: ScriptedBroker, header: RequestHeader, request: Any) -> Any:
        assert header.api_key == DESCRIBE_CONFIGS, f"unscripted API key {header.api_key}"
        schema = _module("describe_configs", header.api_version, "response")
        entries = tuple(
            schema.DescribeConfigsResourceResult(
                name=name,
                value=value,
                read_only=True,
                config_source=i8(STATIC_BROKER_CONFIG),
                is_sensitive=False,
                synonyms=(
                    schema.DescribeConfigsSynonym(
                        name=name, value=value, source=i8(STATIC_BROKER_CONFIG)
                    ),
                ),
                config_type=i8(2),
                documentation=None,
            )
            for name, value in self.configs()
        )
        return schema.DescribeConfigsResponse(
            throttle_time=ZERO,
            results=tuple(
                schema.DescribeConfigsResult(
                    error_code=ErrorCode.none,
                    error_message=None,
                    resource_type=r.resource_type,
                    resource_name=r.resource_name,
                    configs=entries,
                )
                for r in request.resources
            ),
        )


def test_broker_configs_reach_the_client_without_broker_addresses(
    scripted_cluster: ScriptedCluster,
) -> None:
    """Scripted upstream: the test broker reports no broker configs. ``kafka-configs
    --describe --broker 1`` (DescribeConfigs of the BROKER resource) listed the broker's
    listeners and the controllers' addresses as they are; they are shown as Kafka shows a
    sensitive config, without a value; other configs stay as the broker reports them."""
    script = ListenerConfigs()
    broker = scripted_cluster.add(script.respond, "configs")
    assert broker.address is not None
    script.address = f"{broker.address.host}:{broker.address.port}"
    gw = GatewayThread(gateway_config(broker.address)).start()
    schema = _module("describe_configs", 4, "request")
    request = schema.DescribeConfigsRequest(
        resources=(
            schema.DescribeConfigsResource(
                resource_type=i8(4), resource_name="1", configuration_keys=None
            ),
        ),
        include_synonyms=True,
        include_documentation=False,
    )
    client = RawClient(gw.bootstrap)
    try:
        client.send(DESCRIBE_CONFIGS, 4, request)
        frame = client.recv_frame()
    finally:
        client.close()
        gw.stop()
    assert str(broker.address.port).encode() not in frame, "a broker address reached the client"
    (result,) = decode_response(DESCRIBE_CONFIGS, 4, frame).results
    shown = {
        c.name: (c.value, c.is_sensitive, [s.value for s in c.synonyms]) for c in result.configs
    }
    hidden = (None, True, [None])
    assert shown == {
        "listeners": hidden,
        "advertised.listeners": hidden,
        "controller.quorum.voters": hidden,
        "controller.quorum.bootstrap.servers": hidden,
        "confluent.metrics.reporter.bootstrap.servers": hidden,
        "num.partitions": ("3", False, ["3"]),
    }
