"""Listeners for TLS clients that are admitted before their handshake.

``asyncio.start_server(ssl=...)`` hands a connection to the gateway only once its TLS
handshake is done, so the connection limits could count it only from then on: a client that
opened connections and never finished a handshake held a socket each, uncounted, for the
loop's 60 s handshake timeout. Starting TLS on an accepted plain stream instead
(``StreamWriter.start_tls``) races the stream, which may read the ClientHello into its own
buffer first (uvloop starts reading right after the accept).

So a TLS listener accepts in Python: the accepted socket is counted, and only then wrapped,
by :meth:`asyncio.AbstractEventLoop.connect_accepted_socket` with the server's context; nothing
reads a byte of it before the TLS layer does. Plain listeners stay ``asyncio.start_server``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable
from typing import Any, Final, Protocol

log = logging.getLogger(__name__)

ACCEPT_RETRY_S: Final = 1.0
"""How long a listener waits after accept() failed (out of file descriptors, say) before it
tries again; asyncio's own servers wait as long."""


class Listener(Protocol):
    """What the gateway uses of a listener: an :class:`asyncio.Server` or a
    :class:`TlsListener`."""

    @property
    def sockets(self) -> tuple[Any, ...]: ...

    def close(self) -> None: ...


class TlsListener:
    """Listening sockets accepted from Python: ``accepted(sock)`` is called with each new
    connection before a byte is read from it. Has what the gateway uses of
    :class:`asyncio.Server`: ``sockets`` and ``close()``."""

    def __init__(self, sockets: list[socket.socket], accepted: Callable[[socket.socket], None]):
        self.sockets = tuple(sockets)
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(_accept_forever(sock, accepted), name=f"accept-{sock.fileno()}")
            for sock in sockets
        ]

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for sock in self.sockets:
            sock.close()


async def tls_listener(
    host: str | None, port: int, *, reuse_port: bool, accepted: Callable[[socket.socket], None]
) -> TlsListener:
    """Bind ``host:port`` (every address the host resolves to, as ``asyncio.start_server``
    binds) and accept on each.

    :raises OSError: when an address cannot be bound.
    """
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    sockets: list[socket.socket] = []
    try:
        for family, _, _, _, address in dict.fromkeys(infos):
            sock = socket.create_server(
                address[:2], family=family, backlog=100, reuse_port=reuse_port
            )
            sock.setblocking(False)
            sockets.append(sock)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return TlsListener(sockets, accepted)


class ListenerGroup:
    """Plain listeners on sockets bound elsewhere (a worker's, by its supervisor), one
    :class:`asyncio.Server` each, as one :class:`Listener`."""

    def __init__(self, servers: list[asyncio.Server]) -> None:
        self._servers = servers
        self.sockets = tuple(sock for server in servers for sock in server.sockets)

    def close(self) -> None:
        for server in self._servers:
            server.close()


async def listener_group(
    sockets: list[socket.socket],
    connected: Callable[[asyncio.StreamReader, asyncio.StreamWriter], None],
    limit: int,
) -> ListenerGroup:
    """Serve ``connected`` on listening ``sockets``, as ``asyncio.start_server`` serves."""
    servers = []
    try:
        for sock in sockets:
            servers.append(await asyncio.start_server(connected, sock=sock, limit=limit))
    except OSError:
        for server in servers:
            server.close()
        for sock in sockets:
            sock.close()
        raise
    return ListenerGroup(servers)


async def _accept_forever(sock: socket.socket, accepted: Callable[[socket.socket], None]) -> None:
    loop = asyncio.get_running_loop()
    while True:
        try:
            connection, _ = await loop.sock_accept(sock)
        except OSError as exc:  # EMFILE, ENOBUFS, ...: the listener itself stays
            log.warning(
                "listener %s: accept failed (%s); trying again in %.0f s",
                _name(sock),
                exc,
                ACCEPT_RETRY_S,
            )
            await asyncio.sleep(ACCEPT_RETRY_S)
            continue
        connection.setblocking(False)
        accepted(connection)


async def start_tls_stream(
    sock: socket.socket, context: ssl.SSLContext, *, timeout_s: float, limit: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The server side of a TLS handshake on an accepted socket, within ``timeout_s``; a
    stream pair once it is done. The socket belongs to the transport from the call on: it is
    closed on failure too.

    :raises OSError: the handshake failed (``ssl.SSLError``) or took too long
        (``ConnectionAbortedError``), or the client went away.
    """
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit, loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    transport, _ = await loop.connect_accepted_socket(
        lambda: protocol, sock, ssl=context, ssl_handshake_timeout=timeout_s
    )
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


def _name(sock: socket.socket) -> str:
    with contextlib.suppress(OSError):
        host, port = sock.getsockname()[:2]
        return f"{host}:{port}"
    return "(closed)"
