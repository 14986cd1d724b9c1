"""Routes to exhaust the gateway rather than get around a policy (issue 11, item 11): sockets
that sit idle, more sockets than the process can serve, and frames sent half-way to make the
gateway hold their memory. Each case runs the real gateway in front of the tapped real
broker."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import re
import signal
import socket
import ssl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.fetch.v12.request import FetchRequest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.static.primitive import i32

from gateway.config import HostPort
from protocol.codec import encode_request
from protocol.framing import SIZE
from tests.e2e.test_gateway_process import kpg_config, start_kpg
from tests.inproc.test_clients import create_topic
from tests.support import (
    BrokerTap,
    GatewayThread,
    RawClient,
    fetch_request,
    gateway_config,
    make_pki,
    tls_context,
    tls_listener,
    unique_name,
)

pytestmark = pytest.mark.adversarial

MiB = 1024 * 1024
API_VERSIONS, METADATA, FETCH = 18, 3, 1
METADATA_ALL = MetadataRequest(
    topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
)


@contextmanager
def gateway_with(tap: BrokerTap, **limits: Any) -> Iterator[GatewayThread]:
    """The real gateway in front of the tapped broker, with these ``limits:``."""
    gw = GatewayThread(gateway_config(tap.address, limits=limits)).start()
    try:
        yield gw
    finally:
        gw.stop()


def served(client: RawClient) -> bool:
    """The client gets an answer to ApiVersions (forwarded to the broker) and Metadata."""
    versions = client.request(
        API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1")
    )
    metadata = client.request(METADATA, 12, METADATA_ALL)
    return versions.error_code == 0 and bool(metadata.brokers)


def leader_of(gw: GatewayThread) -> str:
    """The gateway's listener for the broker's node (the one a Fetch goes to)."""
    bootstrap = RawClient(gw.bootstrap)
    broker = bootstrap.request(METADATA, 12, METADATA_ALL).brokers[0]
    bootstrap.close()
    return f"{broker.host}:{broker.port}"


class ClientFrom(RawClient):
    """A RawClient whose connection comes from the loopback address ``source``."""

    def __init__(self, address: str, source: str) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection(
            (host, int(port)), timeout=10, source_address=(source, 0)
        )
        self._correlation = itertools.count(1)


# --- connections.max.idle.ms ----------------------------------------------------------------

IDLE_MS = 400


def _silent(client: RawClient) -> None:
    pass


def _answered_then_silent(client: RawClient) -> None:
    assert served(client)


def _half_a_size(client: RawClient) -> None:
    client.send_bytes(b"\x00\x00")


def _half_a_frame(client: RawClient) -> None:
    client.send_bytes(SIZE.pack(1000) + b"\x00\x12\x00\x03" + b"x" * 100)


IDLE = {
    # name: what the client does before it falls silent
    "connected, never sent a byte": _silent,
    "answered, then silent": _answered_then_silent,
    "stopped in the middle of a size prefix": _half_a_size,
    "stopped in the middle of a frame": _half_a_frame,
}


@pytest.mark.parametrize("name", list(IDLE))
def test_idle_connections_are_closed(tap: BrokerTap, name: str) -> None:
    with gateway_with(tap, **{"connections.max.idle.ms": IDLE_MS}) as gw:
        client = RawClient(gw.bootstrap)
        IDLE[name](client)
        started = time.monotonic()
        assert client.is_closed(5), f"{name}: still open {IDLE_MS} ms after falling silent"
        assert time.monotonic() - started >= IDLE_MS / 1000 - 0.1, "closed before it was idle"
        assert gw.metric("kpg_connections_idle_closed_total") == 1
        assert gw.metric("kpg_queued_request_bytes") == 0  # a half frame's memory given back
        assert served(RawClient(gw.bootstrap))  # the listener still serves


def _requests_every_150_ms(client: RawClient, tap: BrokerTap) -> None:
    for _ in range(8):  # 1.2 s in all, three times the idle limit
        assert served(client)
        time.sleep(0.15)


def _fetch_held_longer_than_idle(client: RawClient, tap: BrokerTap) -> None:
    """The broker holds a Fetch for its max wait (1.5 s): a request in flight is not idle."""
    topic = unique_name("idle-fetch")
    create_topic(str(tap.address), topic)  # set-up, straight on the broker
    started = time.monotonic()
    answer = client.request(FETCH, 12, fetch_request(topic, max_wait=timedelta(seconds=1.5)))
    assert time.monotonic() - started > 2 * IDLE_MS / 1000, "the broker did not hold the fetch"
    assert answer.responses[0].partitions[0].error_code == 0


BUSY = {
    # name: what the client keeps doing for longer than connections.max.idle.ms
    "a request every 150 ms": _requests_every_150_ms,
    "one Fetch in flight for 1.5 s": _fetch_held_longer_than_idle,
}


@pytest.mark.parametrize("name", list(BUSY))
def test_busy_connections_stay_open_until_they_fall_silent(tap: BrokerTap, name: str) -> None:
    with gateway_with(tap, **{"connections.max.idle.ms": IDLE_MS}) as gw:
        client = RawClient(leader_of(gw))
        BUSY[name](client, tap)  # a ConnectionError here: closed while busy
        assert gw.metric("kpg_connections_idle_closed_total") == 0
        assert client.is_closed(5), "still open after falling silent"
        assert gw.metric("kpg_connections_idle_closed_total") == 1


# --- the upstream connection opened on the first request -----------------------------------


def test_idle_sockets_hold_no_broker_connection(tap: BrokerTap) -> None:
    with gateway_with(tap) as gw:
        before = tap.connections
        idle = [RawClient(gw.bootstrap) for _ in range(30)]
        time.sleep(0.5)
        assert tap.connections == before, "idle client connections opened broker connections"
        assert served(idle[0])  # ApiVersions still reaches the broker
        assert tap.connections == before + 1
        assert API_VERSIONS in tap.api_keys()
        for client in idle:
            client.close()


# --- max.connections, max.connections.per.ip -----------------------------------------------


LIMITS = {
    # name: (limits, connections let in, the refused one's label, a connection that still gets
    #        in past the refusal: None, or the source address it comes from)
    "max.connections": ({"max.connections": 3}, 3, "max.connections", None),
    "max.connections.per.ip": (
        {"max.connections.per.ip": 2},
        2,
        "max.connections.per.ip",
        "127.0.0.2",
    ),
}


@pytest.mark.parametrize("name", list(LIMITS))
def test_connections_over_the_limit_are_refused(tap: BrokerTap, name: str) -> None:
    limits, allowed, reason, other_source = LIMITS[name]
    with gateway_with(tap, **limits) as gw:
        clients = [RawClient(gw.bootstrap) for _ in range(allowed)]
        assert all(served(c) for c in clients)
        before = tap.connections
        extra = RawClient(gw.bootstrap)
        assert extra.is_closed(2), "the connection over the limit was let in"
        assert gw.metric("kpg_connections_refused_total", reason=reason) == 1
        assert tap.connections == before  # refused before anything reached the broker
        assert all(served(c) for c in clients), "earlier connections stopped working"
        if other_source is not None:
            assert served(ClientFrom(gw.bootstrap, other_source)), "another address refused"
        clients.pop().close()  # its place is free again once the gateway has closed it
        deadline = time.monotonic() + 5
        while True:
            again = RawClient(gw.bootstrap)
            try:
                assert served(again)
                break
            except (ConnectionError, OSError):
                assert time.monotonic() < deadline, "a freed place was not given back"
                time.sleep(0.1)


def test_a_client_opening_connections_in_a_loop_is_held_to_its_rate(tap: BrokerTap) -> None:
    """Connection churn: each new connection costs the gateway an accept and a link to the
    broker (a TLS handshake there, with upstream.tls), and a client that opens them in a
    loop slowed every other client. Past max.connection.creation.rate.per.ip new
    connections in a second, an address's next ones are closed at accept; another address
    is served meanwhile, and the address itself again in the next second."""
    rate = 5
    with gateway_with(tap, **{"max.connection.creation.rate.per.ip": rate}) as gw:
        before = tap.connections
        burst = [RawClient(gw.bootstrap) for _ in range(4 * rate)]  # well within a second
        admitted = sum(not client.is_closed(0.3) for client in burst)
        for client in burst:
            client.close()
        # a fixed one-second window: a loop across the edge of two may get twice the rate
        assert rate <= admitted <= 2 * rate
        assert (
            gw.metric("kpg_connections_refused_total", reason="max.connection.creation.rate.per.ip")
            >= 1
        )
        assert tap.connections == before  # none of them sent a request: no broker link
        assert served(ClientFrom(gw.bootstrap, "127.0.0.2")), "another address refused"
        deadline = time.monotonic() + 5
        while True:
            try:
                assert served(RawClient(gw.bootstrap))
                break
            except (ConnectionError, OSError):
                assert time.monotonic() < deadline, "the address was not let in again"
                time.sleep(0.2)


def test_a_flood_of_refused_connections_does_not_flood_the_log(
    tap: BrokerTap, caplog: pytest.LogCaptureFixture
) -> None:
    with gateway_with(tap, **{"max.connections": 1}) as gw:
        holder = RawClient(gw.bootstrap)
        assert served(holder)
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="gateway.limits"):
            for _ in range(200):
                assert RawClient(gw.bootstrap).is_closed(2)
        elapsed = time.monotonic() - started
        assert gw.metric("kpg_connections_refused_total", reason="max.connections") == 200
        refusals = [r for r in caplog.records if "refused a connection" in r.getMessage()]
        assert 1 <= len(refusals) <= 1 + elapsed // 10, [r.getMessage() for r in refusals]
        assert served(holder)


# --- TLS handshakes ---------------------------------------------------------------------


@contextmanager
def tls_gateway_with(tap: BrokerTap, pki: Path, **limits: Any) -> Iterator[GatewayThread]:
    """The real gateway with a TLS listener (client certificates required) in front of the
    tapped broker, with these ``limits:``."""
    gw = GatewayThread(gateway_config(tap.address, tls=tls_listener(pki), limits=limits)).start()
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pki(tmp_path_factory.mktemp("pki"), {"alice": "/CN=alice"})


def wait_for_metric(gw: GatewayThread, name: str, value: float, **labels: str) -> None:
    """The metric reaches ``value`` (the gateway counts a failed handshake just after the
    client sees its connection closed)."""
    deadline = time.monotonic() + 10
    while gw.metric(name, **labels) != value:
        assert time.monotonic() < deadline, f"{name}{labels}: {gw.metric(name, **labels)}"
        time.sleep(0.05)


def served_over_tls(address: str, pki: Path, source: str | None = None) -> bool:
    client = RawClient(address, tls=tls_context(pki, "alice"), source=source)
    try:
        return served(client)
    finally:
        client.close()


def test_pending_tls_handshakes_count_against_the_connection_limits(
    tap: BrokerTap, pki: Path
) -> None:
    """A client that opens TLS connections and never sends its ClientHello holds a socket
    each: such a connection counts against max.connections.per.ip from its accept, as
    Kafka counts it, not from the end of a handshake that never comes."""
    with tls_gateway_with(tap, pki, **{"max.connections.per.ip": 2}) as gw:
        stalled = [RawClient(gw.bootstrap) for _ in range(2)]  # TCP only: no handshake
        extra = RawClient(gw.bootstrap)
        assert extra.is_closed(2), "a third pending handshake was let in"
        assert gw.metric("kpg_connections_refused_total", reason="max.connections.per.ip") == 1
        assert served_over_tls(gw.bootstrap, pki, source="127.0.0.2")  # others still served
        for sock in stalled:
            sock.close()
        deadline = time.monotonic() + 10
        while True:  # the stalled handshakes' places are given back once they are closed
            try:
                assert served_over_tls(gw.bootstrap, pki)
                break
            except (ConnectionError, OSError):
                assert time.monotonic() < deadline, "a failed handshake kept its place"
                time.sleep(0.1)


def test_a_stalled_tls_handshake_is_closed_as_an_idle_connection(tap: BrokerTap, pki: Path) -> None:
    """A handshake is idle time: one that does not finish within connections.max.idle.ms
    is closed and its place given back; one that fails is closed at once."""
    with tls_gateway_with(
        tap, pki, **{"connections.max.idle.ms": IDLE_MS, "max.connections": 1}
    ) as gw:
        stalled = RawClient(gw.bootstrap)
        assert stalled.is_closed(5), f"a stalled handshake still open {IDLE_MS} ms on"
        wait_for_metric(gw, "kpg_tls_handshakes_failed_total", 1, reason="timeout")
        garbage = RawClient(gw.bootstrap)
        garbage.send_bytes(b"GET / HTTP/1.1\r\n\r\n")  # not a ClientHello
        assert garbage.is_closed(5)
        wait_for_metric(gw, "kpg_tls_handshakes_failed_total", 1, reason="failed")
        assert served_over_tls(gw.bootstrap, pki)  # the one place was given back both times


def test_a_failed_tls_handshake_says_why_in_the_log(
    tap: BrokerTap, pki: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A client without the certificate the listener requires is told nothing by TLS; the
    gateway's log says which client failed and why, so that its operator can fix it."""
    anonymous = ssl.create_default_context(cafile=str(pki / "ca.pem"))  # no certificate
    with (
        caplog.at_level(logging.WARNING, logger="gateway.server"),
        tls_gateway_with(tap, pki) as gw,
    ):
        with contextlib.suppress(OSError):  # TLS 1.3: the refusal may come after
            client = RawClient(gw.bootstrap, tls=anonymous)
            assert client.is_closed(5)
        wait_for_metric(gw, "kpg_tls_handshakes_failed_total", 1, reason="failed")
    failures = [r.getMessage() for r in caplog.records if "TLS handshake failed" in r.getMessage()]
    assert len(failures) == 1, failures
    assert "127.0.0.1" in failures[0] and "certificate" in failures[0].lower(), failures


def test_a_stalled_tls_handshake_does_not_hold_the_shutdown(
    tap: BrokerTap, pki: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A handshake has no request in flight to finish: stopping the gateway cancels it at
    once instead of waiting the shutdown timeout out for it."""
    with caplog.at_level(logging.WARNING, logger="gateway.server"):
        gw = GatewayThread(gateway_config(tap.address, tls=tls_listener(pki))).start()
        try:
            stalled = RawClient(gw.bootstrap)
            # accepted in order: once this one is served, the stalled one has been accepted
            assert served_over_tls(gw.bootstrap, pki)
        finally:
            gw.stop()
    assert stalled.is_closed(5)
    waits = [r.getMessage() for r in caplog.records if "shutdown timeout" in r.getMessage()]
    assert not waits, waits


# --- queued.max.request.bytes ------------------------------------------------------------


DECLARED, SENT, QUEUED_MAX = 60 * MiB, 30 * MiB, 64 * MiB


def send_half_frame(
    address: str, size: int = DECLARED, sent: int = SENT
) -> tuple[socket.socket, int]:
    """Open a connection, declare a frame of ``size`` bytes and send ``sent`` of them, or as
    many as the gateway takes before it stops reading for a second; the socket and how many
    bytes of the body it took."""
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(SIZE.pack(size))
    return sock, push(sock, sent)


def push(sock: socket.socket, count: int) -> int:
    """Send up to ``count`` zero bytes; stop when the peer has taken none for a second."""
    sock.settimeout(1)
    chunk = bytes(MiB)
    pushed = 0
    try:
        while pushed < count:
            pushed += sock.send(memoryview(chunk)[: min(MiB, count - pushed)])
    except TimeoutError:
        pass
    return pushed


def test_half_sent_frames_wait_for_memory_and_an_honest_client_is_served(
    tap: BrokerTap,
) -> None:
    """Three sockets each send half of a 60 MiB frame with queued.max.request.bytes at 64 MiB:
    the first is read, the other two are not (they wait for memory), and the gateway holds
    one frame's 60 MiB at most; a small request still fits and is answered."""
    with gateway_with(tap, **{"queued.max.request.bytes": QUEUED_MAX}) as gw:
        attackers = [send_half_frame(gw.bootstrap) for _ in range(3)]
        taken = [pushed for _, pushed in attackers]
        assert taken[0] == SENT
        assert all(pushed < SENT for pushed in taken[1:]), f"the gateway read on: {taken}"
        assert gw.metric("kpg_queued_request_bytes") == DECLARED <= QUEUED_MAX
        assert gw.metric("kpg_queued_request_waits_total") == 2
        assert served(RawClient(gw.bootstrap))
        # The first gives up: its memory goes to the next, which the gateway reads again.
        attackers[0][0].close()
        sock, pushed = attackers[1]
        assert push(sock, SENT - pushed) == SENT - pushed
        assert gw.metric("kpg_queued_request_bytes") == DECLARED
        for sock, _ in attackers[1:]:
            sock.close()


def test_a_frame_larger_than_the_memory_limit_is_refused(tap: BrokerTap) -> None:
    with gateway_with(tap, **{"queued.max.request.bytes": QUEUED_MAX}) as gw:
        client = RawClient(gw.bootstrap)
        client.send_bytes(SIZE.pack(QUEUED_MAX + 1) + bytes(1000))
        assert client.is_closed(5)
        assert gw.metric("kpg_rejected_frames_total", reason="queued_max_request_bytes") == 1
        assert gw.metric("kpg_queued_request_bytes") == 0
        assert served(RawClient(gw.bootstrap))


def vm_rss(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, flags=re.M)
    assert match is not None
    return int(match.group(1)) * 1024


def test_half_sent_frames_do_not_grow_the_gateway_process(tap: BrokerTap, tmp_path: Path) -> None:
    """The same three half frames against `kpg run`, measured by the process's own resident
    memory: it grows by about the one frame read (30 MiB), never by the three (90 MiB)."""
    config = kpg_config(tmp_path, tap.address, limits={"queued.max.request.bytes": QUEUED_MAX})
    process, bootstrap = start_kpg("--config", str(config))
    try:
        assert served(RawClient(bootstrap))
        before = vm_rss(process.pid)
        attackers = [send_half_frame(bootstrap) for _ in range(3)]
        time.sleep(0.5)
        grown = vm_rss(process.pid) - before
        assert grown < QUEUED_MAX, f"kpg grew by {grown / MiB:.0f} MiB"
        assert served(RawClient(bootstrap))
        for sock, _ in attackers:
            sock.close()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)


# --- a client that does not read its answers ----------------------------------------------

SLOW_FETCHES = 30
FETCH_BYTES = 8 * MiB


def _fill(bootstrap: str, topic: str, total: int = 10 * MiB, record: int = 100_000) -> None:
    """``total`` bytes of records in partition 0 of ``topic``, straight to the broker."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for _ in range(total // record):
        producer.produce(topic, b"x" * record)
    assert producer.flush(30) == 0


def _large_fetch(topic: str) -> FetchRequest:
    """A Fetch of partition 0 from offset 0, answered with up to 8 MiB."""
    request = fetch_request(topic, max_wait=timedelta(milliseconds=100))
    (fetched,) = request.topics
    (partition,) = fetched.partitions
    partition = dataclasses.replace(partition, partition_max_bytes=i32(FETCH_BYTES))
    return dataclasses.replace(
        request,
        max_bytes=i32(FETCH_BYTES),
        topics=(dataclasses.replace(fetched, partitions=(partition,)),),
    )


def _closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    """Read what the kernel holds until the peer's end of stream (or reset), within
    ``timeout``."""
    sock.settimeout(timeout)
    try:
        while sock.recv(1 << 20):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def test_a_client_that_does_not_read_holds_one_answer_and_is_closed(
    broker: HostPort, tmp_path: Path
) -> None:
    """A client sends 30 Fetch requests for 8 MiB each and reads none of the answers. The
    gateway reads the broker's next answer only once the client has taken the one before, so
    its memory grows by about one answer, not by one per request in flight (it grew by
    158 MiB before); and the connection, its answer untaken for connections.max.idle.ms, is
    closed as Kafka closes it. `kpg run` measured by its own resident memory."""
    topic = unique_name("unread")
    create_topic(str(broker), topic)
    _fill(str(broker), topic)
    config = kpg_config(tmp_path, broker, limits={"connections.max.idle.ms": 3000})
    process, bootstrap = start_kpg("--config", str(config))
    try:
        client = RawClient(bootstrap)
        assert served(client)
        node = client.request(METADATA, 12, METADATA_ALL).brokers[0]
        before = vm_rss(process.pid)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the kernel holds little
        sock.connect((node.host, node.port))
        fetch = _large_fetch(topic)
        for correlation_id in range(1, SLOW_FETCHES + 1):
            sock.sendall(encode_request(FETCH, 12, correlation_id, "unread", fetch))
        time.sleep(2)  # the broker answers all 30 within this (answers of about 5 MiB)
        grown = vm_rss(process.pid) - before
        assert grown < 48 * MiB, f"kpg grew by {grown / MiB:.0f} MiB"
        assert _closed_by_peer(sock, timeout=30)
        assert served(RawClient(bootstrap))
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
