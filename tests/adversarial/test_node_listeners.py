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

Scripted upstream: the test broker (Tansu) is one node and announces only its own id, so two
scripted brokers (tests/scripted.py) stand for a cluster whose second node has the id that
collides: node 1, the bootstrap broker, and node N on a broker of its own, whose connections
show where the gateway sent a client.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.metadata.v12.response import MetadataResponseBroker
from kio.schema.types import BrokerId
from kio.static.primitive import i32

from protocol.framing import RequestHeader
from tests.scripted import ScriptedBroker, ScriptedCluster, metadata_response
from tests.support import GatewayThread, RawClient, gateway_config

pytestmark = pytest.mark.adversarial

METADATA = 3
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
