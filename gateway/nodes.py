"""One gateway listener per broker node, created the first time a node shows up in an answer.

Node N listens on ``node_port_base + N`` (stable across restarts and gateway instances, so
clients' cached metadata stays valid), or on a free port when the base is 0. A node id below 0
names no broker, and a port that is the gateway's own (bootstrap or metrics) is never a
node's: with SO_REUSEPORT (the workers of ``kpg run --workers N``) the bind would succeed and
the kernel would hand connections meant for one listener to the other. Either way the answer
naming that node is refused, as for a port that cannot be bound.

A node that a Metadata answer (which lists every broker of the cluster) leaves out has left:
its listener stays open (clients' cached metadata names its port, and it may come back) but
connects no client to the address it had, which may by now be another host's, until an
answer names the node again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass

from protocol.addresses import BrokerEndpoint

from .config import HostPort
from .listeners import Listener

log = logging.getLogger(__name__)

StartListener = Callable[[int, str, int, HostPort], Awaitable[Listener]]
"""(node_id, bind host, port, the broker it forwards to) -> a listening server whose
connections go to that node."""


class NodeListenerError(Exception):
    """A node's listener could not be opened; the answer naming it must not reach a client."""


@dataclass(slots=True)
class Node:
    node_id: int
    upstream: HostPort | None
    """Where its clients are connected; None once it has left the cluster."""
    advertised: tuple[str, int]
    server: Listener


class NodeListeners:
    def __init__(
        self,
        bind_host: str,
        advertised_host: str,
        port_base: int,
        start: StartListener,
        reserved_ports: Callable[[], Collection[int]] = tuple,
    ) -> None:
        """``reserved_ports``: the ports no node may listen on (the gateway's own)."""
        self._reserved_ports = reserved_ports
        self._bind_host = bind_host
        self._advertised_host = advertised_host
        self._port_base = port_base
        self._start = start
        self._nodes: dict[int, Node] = {}
        self._lock = asyncio.Lock()

    def upstream_of(self, node_id: int) -> HostPort | None:
        """The broker address a new client of node ``node_id`` is connected to; None when
        the node has left the cluster."""
        return self._nodes[node_id].upstream

    def gateway_addresses_snapshot(self) -> list[tuple[str, int]]:
        """The advertised address of every node listener open now."""
        return [node.advertised for node in self._nodes.values()]

    async def gateway_addresses(
        self, endpoints: Iterable[BrokerEndpoint], *, complete: bool = False
    ) -> dict[int, tuple[str, int]]:
        """The gateway address of each endpoint's node, opening listeners as needed; the
        broker address each node forwards to is updated to the latest seen. ``complete``:
        the endpoints are every broker of the cluster (a Metadata answer), so a node without
        one has left (an empty list says nothing: no node leaves by it).

        :raises NodeListenerError: when a listener cannot be opened.
        """
        endpoints = tuple(endpoints)
        if complete and endpoints:
            self._leave_all_but({e.node_id for e in endpoints})
        result = {}
        for endpoint in endpoints:
            upstream = HostPort(host=endpoint.host, port=endpoint.port)
            node = self._nodes.get(endpoint.node_id)
            if node is None:
                node = await self._open(endpoint.node_id, upstream)
            elif node.upstream is None:
                log.info("node %d is back in the cluster, at %s", endpoint.node_id, upstream)
                node.upstream = upstream
            elif node.upstream != upstream:
                log.info("node %d moved from %s to %s", endpoint.node_id, node.upstream, upstream)
                node.upstream = upstream
            result[endpoint.node_id] = node.advertised
        return result

    async def _open(self, node_id: int, upstream: HostPort) -> Node:
        async with self._lock:
            existing = self._nodes.get(node_id)
            if existing is not None:
                return existing
            port = self._port_of_node(node_id)
            try:
                server = await self._start(node_id, self._bind_host, port, upstream)
            except OSError as exc:
                raise NodeListenerError(
                    f"node {node_id}: cannot listen on {self._bind_host}:{port}: {exc.strerror}"
                ) from None
            bound = server.sockets[0].getsockname()[1]
            node = Node(
                node_id=node_id,
                upstream=upstream,
                advertised=(self._advertised_host, int(bound)),
                server=server,
            )
            self._nodes[node_id] = node
            log.info(
                "node %d: listening on %s:%d for broker %s",
                node_id,
                self._bind_host,
                bound,
                upstream,
            )
            return node

    async def open_known(self, node_id: int, upstream: HostPort) -> None:
        """Open node ``node_id``'s listener, forwarding to ``upstream``, if not open yet:
        another worker of the gateway opened it (see :mod:`gateway.supervisor`)."""
        if node_id in self._nodes:
            return
        try:
            await self._open(node_id, upstream)
        except NodeListenerError as exc:
            log.warning("%s", exc)

    def _leave_all_but(self, listed: Collection[int]) -> None:
        for node in self._nodes.values():
            if node.upstream is not None and node.node_id not in listed:
                log.info(
                    "node %d has left the cluster: its listener connects no client to %s",
                    node.node_id,
                    node.upstream,
                )
                node.upstream = None

    def _port_of_node(self, node_id: int) -> int:
        """The port node ``node_id`` listens on (0: a free one).

        :raises NodeListenerError: when it has none.
        """
        if node_id < 0:
            raise NodeListenerError(f"node {node_id}: a node id below 0 names no broker")
        if not self._port_base:
            return 0
        port = self._port_base + node_id
        if port > 65535:
            raise NodeListenerError(
                f"node {node_id}: node_port_base {self._port_base} + node id is not a port"
            )
        if port in self._reserved_ports():
            raise NodeListenerError(
                f"node {node_id}: node_port_base {self._port_base} + node id is {port}, a port "
                "of the gateway's own (bootstrap or metrics): change node_port_base"
            )
        return port

    def close(self) -> None:
        for node in self._nodes.values():
            node.server.close()
