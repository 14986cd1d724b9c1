"""Choosing the worker of each new connection under ``kpg run --workers N``.

Each worker's listeners share their ports with the others' (SO_REUSEPORT). Left to itself the
kernel picks a worker for each new connection by a hash of both ends' addresses and ports, so
one client address reached every worker, and the limits counted per address in each worker
(``max.connections.per.ip``, ``max.connection.creation.rate.per.ip``, the audit pacing of a
client not yet authenticated) let it have N times as much.

So the supervisor opens every client listener itself, N sockets per address bound, in worker
order (a socket's index in its reuseport group is the order it started listening in), and
hands worker i its socket i over a Unix socket (SCM_RIGHTS). It keeps its own copies, so no
socket leaves a group while the gateway runs and every group keeps the same order: index i is
worker i on the bootstrap listener and on every node listener, and a worker started again
takes back the sockets it had (the connections queued for it meanwhile wait for it). A
classic BPF program attached to each group (SO_ATTACH_REUSEPORT_CBPF, no privilege needed)
picks the socket. While a per-address connection limit is set (:func:`steers_by_address`) it
hashes the client's source address alone (IPv4, IPv4-mapped ones on a dual-stack socket
alike, or the four words of an IPv6 address folded): every connection from one address goes
to one worker, whose counts are then the gateway's. Otherwise it hashes the address and the
source port, spreading one address's connections as the kernel would (clients behind one NAT
or proxy share an address, and must still use every core). Either way a worker that is not
ready (dead, being started again, given up) is mapped to a ready one, and the addresses of the
others stay where they are.

Contracts, stated once:

- Steering by address holds while the set of ready workers does not change; when it changes,
  the addresses of the worker that left go to another, and an address's connections opened
  before stay on the worker that accepted them (until they close, it may hold up to twice
  its limit over the two). The same holds when a reload sets a per-address limit.
- Where the kernel refuses the program (not Linux, or a kernel before 4.5), the sockets are
  shared as before, the kernel's hash of both ends spreads connections, and the supervisor
  logs once that per-address limits count per worker.
- Limits that are not per address (``max.connections``, ``max.connection.creation.rate``,
  the audit pacing of an authenticated principal) stay counted per worker.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import logging
import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from .config import KAFKA_UNLIMITED, LimitsConfig

log = logging.getLogger(__name__)

SO_ATTACH_REUSEPORT_CBPF: Final = 51
"""``<asm-generic/socket.h>``; Python's socket module does not name it."""
BACKLOG: Final = 100
"""asyncio's default for ``start_server``, which the workers used to bind with."""
MAX_MESSAGE: Final = 65536
MAX_FDS: Final = 64

# Classic BPF (linux/filter.h, linux/bpf_common.h).
_SKF_NET_OFF: Final = -0x100000
"""Loads relative to the network header: a reuseport program for TCP sees the packet with its
data pointer past the TCP header (a SYN has nothing there)."""
_LD_B_ABS: Final = 0x30
_LD_W_ABS: Final = 0x20
_LD_H_ABS: Final = 0x28
_LD_H_IND: Final = 0x48
_LDX_B_MSH: Final = 0xB1
_ALU_RSH_K: Final = 0x74
_ALU_MUL_K: Final = 0x24
_ALU_MOD_K: Final = 0x94
_ALU_XOR_X: Final = 0xAC
_JMP_JA: Final = 0x05
_JMP_JEQ_K: Final = 0x15
_MISC_TAX: Final = 0x07
_MISC_TXA: Final = 0x87
_RET_K: Final = 0x06
_RET_A: Final = 0x16
_BPF_MAXINSNS: Final = 4096
_GOLDEN: Final = 0x9E3779B1
"""Fibonacci hashing: consecutive addresses (a client's 10.0.0.1, 10.0.0.2, ...) fall on
different workers."""


def _insn(code: int, k: int = 0, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)


def steering_program(workers: int, ready: Sequence[int], *, by_address: bool) -> bytes:
    """A classic BPF program for a reuseport group of ``workers`` sockets (worker i's at index
    i): a hash of the client's source address (``by_address``), else of its address and
    port, picks a worker, and a worker not in ``ready`` (when any is) is replaced by a ready
    one. Returns the ``struct sock_filter`` array.

    :raises ValueError: when the program would be longer than the kernel takes.
    """
    ready = sorted(set(ready)) or list(range(workers))
    net = _SKF_NET_OFF
    ipv4 = []
    if not by_address:  # the source port, past the header's length: X
        ipv4 += [_insn(_LDX_B_MSH, net), _insn(_LD_H_IND, net), _insn(_MISC_TAX)]
    ipv4 += [_insn(_LD_W_ABS, net + 12)]  # the source address
    if not by_address:
        ipv4 += [_insn(_ALU_XOR_X)]
    ipv6 = [_insn(_LD_W_ABS, net + 8), _insn(_MISC_TAX)]  # its four words folded
    for offset in (12, 16, 20):
        ipv6 += [_insn(_LD_W_ABS, net + offset), _insn(_ALU_XOR_X), _insn(_MISC_TAX)]
    if not by_address:  # the source port, after the fixed header
        ipv6 += [_insn(_LD_H_ABS, net + 40), _insn(_ALU_XOR_X), _insn(_MISC_TAX)]
    ipv6.append(_insn(_MISC_TXA))
    program = [
        _insn(_LD_B_ABS, net),  # version and header length
        _insn(_ALU_RSH_K, 4),
        _insn(_JMP_JEQ_K, 4, jt=0, jf=len(ipv4) + 1),
        *ipv4,
        _insn(_JMP_JA, len(ipv6)),
        *ipv6,
        _insn(_ALU_MUL_K, _GOLDEN),
        _insn(_ALU_RSH_K, 16),
        _insn(_ALU_MOD_K, workers),
    ]
    for bucket in range(workers):
        target = bucket if bucket in ready else ready[bucket % len(ready)]
        program += [_insn(_JMP_JEQ_K, bucket, jt=0, jf=1), _insn(_RET_K, target)]
    program.append(_insn(_RET_A))
    if len(program) > _BPF_MAXINSNS:
        raise ValueError(f"{workers} workers need a program longer than the kernel takes")
    return b"".join(program)


def attach_steering(sock: socket.socket, program: bytes) -> None:
    """Attach ``program`` to the reuseport group of ``sock`` (replacing the group's).

    :raises OSError: when the kernel refuses it.
    """
    buffer = ctypes.create_string_buffer(program, len(program))
    # struct sock_fprog { unsigned short len; struct sock_filter *filter; }, native alignment
    fprog = struct.pack("HP", len(program) // 8, ctypes.addressof(buffer))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, fprog)


# --- the supervisor's side -----------------------------------------------------------------


@dataclass(slots=True)
class _Group:
    """The sockets bound for one address of a listener, worker i's at index i."""

    sockets: list[socket.socket]


@dataclass(slots=True)
class SharedListeners:
    """The supervisor's copies of every client listener's sockets (see the module docstring)."""

    workers: int
    _listeners: dict[tuple[str | None, int], tuple[str, list[_Group]]] = field(default_factory=dict)
    """(host, port) -> the listener's name and its groups (one per address bound)."""
    by_address: bool = False
    """Steer by the client's address (else by its address and port: spread, as the kernel
    would); see :func:`steers_by_address`."""
    _ready: tuple[int, ...] = ()
    _closed: bool = False
    steering: bool = True
    """False once the kernel refused a program: the sockets are shared unsteered."""
    nodes: dict[int, tuple[str, int]] = field(default_factory=dict)
    """Node id -> the broker address it forwards to, for every node listener opened: a worker
    started (again) opens them all, so that every worker accepts on every node port."""

    def sockets(
        self, listener: str, host: str | None, port: int, index: int
    ) -> list[socket.socket]:
        """Worker ``index``'s sockets of ``listener`` on ``host:port`` (one per address the
        host resolves to), bound for every worker on the first call.

        :raises OSError: when the address cannot be bound, or is another listener's (the
            kernel would share the port between them).
        """
        if self._closed:
            raise OSError(errno.ESHUTDOWN, "the gateway is stopping")
        found = self._listeners.get((host, port))
        if found is None:
            found = self._listeners[(host, port)] = (listener, self._bind(host, port))
        if found[0] != listener:
            raise OSError(errno.EADDRINUSE, f"the {found[0]} listener's address")
        return [group.sockets[index] for group in found[1]]

    def _bind(self, host: str | None, port: int) -> list[_Group]:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        groups: list[_Group] = []
        try:
            for family, kind, proto, _, address in dict.fromkeys(infos):
                group = _Group(sockets=[])
                groups.append(group)
                for _ in range(self.workers):  # listen() in worker order: index i, worker i
                    sock = socket.socket(family, kind, proto)
                    group.sockets.append(sock)
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                    if family == socket.AF_INET6:
                        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                    sock.bind(address)
                    sock.listen(BACKLOG)
                    sock.setblocking(False)
                self._steer(group)
        except OSError:
            for group in groups:
                for sock in group.sockets:
                    sock.close()
            raise
        return groups

    def set_ready(self, ready: Sequence[int]) -> None:
        """The workers ready to accept now: the others' addresses go to them."""
        ready = tuple(sorted(ready))
        if ready != self._ready:
            self._ready = ready
            self._steer_all()

    def steer_by_address(self, by_address: bool) -> None:
        """Steer each client address to one worker, or spread its connections."""
        if by_address != self.by_address:
            self.by_address = by_address
            self._steer_all()

    def _steer_all(self) -> None:
        for _, groups in self._listeners.values():
            for group in groups:
                self._steer(group)

    def _steer(self, group: _Group) -> None:
        if not self.steering:
            return
        try:
            program = steering_program(self.workers, self._ready, by_address=self.by_address)
            attach_steering(group.sockets[0], program)
        except (OSError, ValueError) as exc:
            self.steering = False
            log.warning(
                "supervisor: cannot steer connections to workers (%s): the kernel spreads one "
                "address's connections over the workers, and the per-address limits "
                "(max.connections.per.ip, max.connection.creation.rate.per.ip, the audit "
                "pacing of unauthenticated clients) are counted per worker",
                exc,
            )

    def drain(self, index: int) -> None:
        """Close the connections queued for worker ``index`` (given up: nobody will take
        them; its addresses are steered to the others by then)."""
        for _, groups in self._listeners.values():
            for group in groups:
                with contextlib.suppress(OSError):
                    while True:
                        connection, _ = group.sockets[index].accept()
                        connection.close()

    def close(self) -> None:
        """Drop the supervisor's copies (a worker's stay open until it closes them); no
        listener is opened after."""
        self._closed = True
        for _, groups in self._listeners.values():
            for group in groups:
                for sock in group.sockets:
                    sock.close()
        self._listeners.clear()

    def answer(self, channel: socket.socket, index: int, request: bytes) -> str | None:
        """Answer one request of worker ``index`` on ``channel``; returns the node listener
        the request opened for the first time, as a ``node`` command line for the workers."""
        opened = None
        try:
            asked = json.loads(request)
            name, host, port = str(asked["listener"]), asked["host"], int(asked["port"])
            first = (host, port) not in self._listeners
            sockets = self.sockets(name, host, port, index)
        except OSError as exc:
            reply = {"errno": exc.errno or 0, "error": exc.strerror or str(exc)}
            channel.send(json.dumps(reply).encode())
            return None
        except (ValueError, KeyError, TypeError) as exc:
            channel.send(json.dumps({"errno": 0, "error": f"bad request: {exc}"}).encode())
            return None
        node, upstream = asked.get("node"), asked.get("upstream")
        if isinstance(node, int) and isinstance(upstream, list) and len(upstream) == 2:
            self.nodes[node] = (str(upstream[0]), int(upstream[1]))
            if first:
                opened = node_command(node, *self.nodes[node])
        socket.send_fds(channel, [b"{}"], [s.fileno() for s in sockets])
        return opened

    def node_commands(self) -> list[str]:
        return [node_command(node, *upstream) for node, upstream in self.nodes.items()]


def steers_by_address(limits: LimitsConfig) -> bool:
    """Whether connections are steered by client address: when a per-address connection
    limit is set. Unset (the default, for clients behind one NAT or proxy, which share an
    address), one address's connections are spread over the workers, so that such clients
    still use every core."""
    return any(
        0 < limit < KAFKA_UNLIMITED
        for limit in (limits.max_connections_per_ip, limits.max_connection_creation_rate_per_ip)
    )


def node_command(node: int, host: str, port: int) -> str:
    """The command line telling a worker to open node ``node``'s listener, forwarding to the
    broker at ``host:port`` (see :func:`gateway.supervisor.worker_commands`)."""
    return f"node {json.dumps({'node': node, 'host': host, 'port': port})}\n"


# --- a worker's side -----------------------------------------------------------------------


def request_sockets(
    channel: socket.socket,
    listener: str,
    host: str | None,
    port: int,
    node: int | None = None,
    upstream: tuple[str, int] | None = None,
) -> list[socket.socket]:
    """Ask the supervisor for this worker's sockets of ``listener`` (``bootstrap``,
    ``node-<id>``) on ``host:port`` (blocking: run it off the event loop, one request at a
    time).

    :raises OSError: as the bind in the supervisor failed, or the supervisor is gone.
    """
    request = {
        "listener": listener,
        "host": host,
        "port": port,
        "node": node,
        "upstream": upstream and list(upstream),
    }
    channel.send(json.dumps(request).encode())
    message, fds, _, _ = socket.recv_fds(channel, MAX_MESSAGE, MAX_FDS)
    sockets = [socket.socket(fileno=fd) for fd in fds]
    for sock in sockets:
        # Close-on-exec: nothing the worker runs may hold its listeners (recv_fds drops
        # its flags argument, so MSG_CMSG_CLOEXEC cannot be asked for).
        sock.set_inheritable(False)
    if not message:
        raise ConnectionResetError("the supervisor closed the listener channel")
    reply = json.loads(message)
    if "error" in reply:
        for sock in sockets:
            sock.close()
        raise OSError(int(reply["errno"]), str(reply["error"]))
    for sock in sockets:
        sock.setblocking(False)
    return sockets
