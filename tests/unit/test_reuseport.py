"""Steering each client address to one worker (gateway.reuseport), against this kernel: the
supervisor's sockets of two listeners on loopback, connections from loopback addresses of
their own, and which worker's socket each one queues on. No gateway: what the processes of
``kpg run --workers 2`` then hold is shown in tests/e2e/test_workers.py."""

from __future__ import annotations

import errno
import json
import select
import socket
import threading
from collections.abc import Iterator

import pytest

from gateway.config import from_mapping
from gateway.reuseport import MAX_MESSAGE, SharedListeners, request_sockets, steers_by_address

pytestmark = pytest.mark.unit

WORKERS = 3
SOURCES = [f"127.0.0.{n}" for n in range(2, 26)]


@pytest.fixture
def shared() -> Iterator[SharedListeners]:
    listeners = SharedListeners(workers=WORKERS, by_address=True)
    try:
        yield listeners
    finally:
        listeners.close()


def bound(shared: SharedListeners, name: str) -> tuple[int, list[socket.socket]]:
    """A listener on a free loopback port: (port, worker i's socket at i)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    workers = [shared.sockets(name, "127.0.0.1", port, i)[0] for i in range(WORKERS)]
    return port, workers


def worker_of(source: str, port: int, workers: list[socket.socket]) -> int:
    """The worker whose socket a connection from ``source`` queues on (accepted and closed)."""
    with socket.create_connection(("127.0.0.1", port), source_address=(source, 0)):
        ready, _, _ = select.select(workers, [], [], 10)
        assert len(ready) == 1
        connection, _ = ready[0].accept()
        connection.close()
        return workers.index(ready[0])


def test_an_address_goes_to_one_worker_on_every_listener(shared: SharedListeners) -> None:
    bootstrap, bootstrap_workers = bound(shared, "bootstrap")
    node, node_workers = bound(shared, "node-1")
    assert shared.steering
    chosen = {}
    for source in SOURCES:
        seen = {worker_of(source, bootstrap, bootstrap_workers) for _ in range(3)}
        seen |= {worker_of(source, node, node_workers) for _ in range(3)}
        assert len(seen) == 1, f"{source} reached workers {seen}"
        chosen[source] = seen.pop()
    assert set(chosen.values()) == set(range(WORKERS)), chosen


def test_the_addresses_of_a_worker_not_ready_go_to_the_others_and_no_one_else_moves(
    shared: SharedListeners,
) -> None:
    port, workers = bound(shared, "bootstrap")
    before = {source: worker_of(source, port, workers) for source in SOURCES}
    shared.set_ready([0, 2])  # worker 1 died
    after = {source: worker_of(source, port, workers) for source in SOURCES}
    assert 1 not in after.values()
    assert all(after[s] == before[s] for s in SOURCES if before[s] != 1)
    shared.set_ready([0, 1, 2])  # started again
    assert {source: worker_of(source, port, workers) for source in SOURCES} == before


def test_a_second_listener_on_one_address_is_refused(shared: SharedListeners) -> None:
    port, _ = bound(shared, "bootstrap")
    with pytest.raises(OSError, match="bootstrap listener"):
        shared.sockets("node-7", "127.0.0.1", port, 0)


def test_a_given_up_worker_s_queued_connections_are_closed(shared: SharedListeners) -> None:
    port, workers = bound(shared, "bootstrap")
    source = next(s for s in SOURCES if worker_of(s, port, workers) == 1)
    client = socket.create_connection(("127.0.0.1", port), source_address=(source, 0))
    try:
        assert select.select(workers, [], [], 10)[0] == [workers[1]]  # queued for worker 1
        shared.set_ready([0, 2])
        shared.drain(1)
        assert select.select(workers, [], [], 0)[0] == []
        client.settimeout(10)
        assert client.recv(1) == b""  # closed, not left hanging
    finally:
        client.close()


def test_with_no_per_address_limit_one_address_is_spread_over_the_ready_workers(
    shared: SharedListeners,
) -> None:
    """Clients behind one NAT or proxy share an address: they still use every core."""
    shared.steer_by_address(False)
    port, workers = bound(shared, "bootstrap")
    assert {worker_of("127.0.0.2", port, workers) for _ in range(60)} == {0, 1, 2}
    shared.set_ready([0, 2])
    assert {worker_of("127.0.0.2", port, workers) for _ in range(60)} == {0, 2}


@pytest.mark.parametrize(
    ("limits", "by_address"),
    [
        ({}, False),
        ({"max.connections.per.ip": 10}, True),
        ({"max.connection.creation.rate.per.ip": 50}, True),
        ({"max.connections.per.ip": 2_147_483_647}, False),
    ],
)
def test_steering_by_address_follows_the_per_address_connection_limits(
    limits: dict[str, int], by_address: bool
) -> None:
    config = from_mapping({"upstream": {"bootstrap_servers": ["b:9092"]}, "limits": limits}, "t")
    assert steers_by_address(config.limits) is by_address


def ask(
    shared: SharedListeners, index: int, listener: str, port: int, node: int | None = None
) -> tuple[list[socket.socket] | OSError, str | None]:
    """A worker's request over a real channel, answered as the supervisor answers it: (its
    sockets or the error it raised, the ``node`` command line the answer gave the others)."""
    mine, supervisors = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    opened: list[str | None] = []

    def answer() -> None:
        opened.append(shared.answer(supervisors, index, supervisors.recv(MAX_MESSAGE)))

    thread = threading.Thread(target=answer)
    thread.start()
    upstream = None if node is None else ("broker", 9092)
    try:
        got: list[socket.socket] | OSError = request_sockets(
            mine, listener, "127.0.0.1", port, node, upstream
        )
    except OSError as exc:
        got = exc
    thread.join()
    mine.close()
    supervisors.close()
    return got, opened[0]


def test_a_worker_receives_its_own_listening_sockets_held_by_nothing_it_starts(
    shared: SharedListeners,
) -> None:
    port, workers = bound(shared, "bootstrap")
    got, opened = ask(shared, 1, "bootstrap", port)
    assert isinstance(got, list) and opened is None
    (sock,) = got
    assert sock.getsockname() == workers[1].getsockname()
    assert not sock.get_inheritable()
    # The same socket as the supervisor's copy at index 1: a connection steered there is
    # accepted on it.
    source = next(s for s in SOURCES if worker_of(s, port, workers) == 1)
    with socket.create_connection(("127.0.0.1", port), source_address=(source, 0)):
        assert select.select([sock], [], [], 10)[0] == [sock]
        sock.accept()[0].close()
    sock.close()


def test_a_node_listener_opened_first_is_announced_to_every_worker_once(
    shared: SharedListeners,
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    got, opened = ask(shared, 0, "node-7", port, node=7)
    assert isinstance(got, list)
    assert opened is not None and json.loads(opened.split(" ", 1)[1]) == {
        "node": 7,
        "host": "broker",
        "port": 9092,
    }
    assert shared.node_commands() == [opened]
    again, opened_again = ask(shared, 1, "node-7", port, node=7)
    assert isinstance(again, list) and opened_again is None
    for sock in [*got, *again]:
        sock.close()


def test_a_port_that_cannot_be_bound_is_the_worker_s_oserror(shared: SharedListeners) -> None:
    with socket.socket() as taken:  # bound without SO_REUSEPORT: no one may share it
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        got, _ = ask(shared, 0, "node-3", int(taken.getsockname()[1]), node=3)
    assert isinstance(got, OSError) and got.errno == errno.EADDRINUSE
    assert shared.node_commands() == []
