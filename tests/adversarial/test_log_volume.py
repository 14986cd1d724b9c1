"""Routes to fill the gateway's log: lines a client can have written at will, outside the
audit (whose events ``client.audit.events.per.sec`` paces per client). Each case runs the
real gateway in front of the tapped real broker."""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from collections.abc import Callable

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from gateway.config import HostPort
from protocol.codec import encode_request
from protocol.framing import SIZE
from tests.adversarial.test_node_listeners import Departing, _advertised
from tests.scripted import ScriptedCluster
from tests.support import BrokerTap, GatewayThread, gateway_config, wait_for

pytestmark = pytest.mark.adversarial

API_VERSIONS = 18
RATE = 2
"""client.audit.events.per.sec in these cases: a client may have 10 s of it written at once."""
API_VERSIONS_REQUEST = encode_request(
    API_VERSIONS,
    3,
    1,
    "t",
    ApiVersionsRequest(client_software_name="t", client_software_version="1"),
)


def assert_paced(
    caplog: pytest.LogCaptureFixture,
    address: tuple[str, int],
    send: Callable[[socket.socket], None],
    needle: str,
    level: int,
) -> threading.Thread:
    """One client opens connection after connection to ``address``, each sending with
    ``send`` and closed: the gateway's log lines holding ``needle`` come no faster than its
    client.audit.events.per.sec allows (10 s of RATE at once, then RATE a second). Waiting
    for 30 lines takes about 5 s paced; unpaced, 30 connections log them in a blink, far
    above the bound. Returns the client's thread, to join once the gateway has stopped."""

    def flood() -> None:
        for _ in range(200):
            try:
                with socket.create_connection(address, timeout=30) as sock:
                    send(sock)
            except OSError:
                return  # the gateway has stopped

    def lines() -> int:
        return sum(needle in r.getMessage() for r in caplog.records)

    attacker = threading.Thread(target=flood, daemon=True)
    with caplog.at_level(level, logger="gateway.connection"):
        started = time.monotonic()
        attacker.start()
        assert wait_for(lambda: lines() >= 30, 60)
        elapsed = time.monotonic() - started
        logged = lines()
    assert logged <= RATE * 10 + RATE * elapsed + 2, f"{logged} lines in {elapsed:.1f} s"
    return attacker


def answered_unread(frame: bytes) -> Callable[[socket.socket], None]:
    """Send ``frame`` and wait for the connection to close unanswered, as a client does
    before it reconnects."""

    def send(sock: socket.socket) -> None:
        sock.sendall(frame)
        sock.recv(64)

    return send


def half_a_frame(sock: socket.socket) -> None:
    sock.sendall(SIZE.pack(100) + b"x" * 10)


def half_a_size(sock: socket.socket) -> None:
    sock.sendall(b"\x00\x00")


LEAVING = {
    # name: what each connection sends before it closes
    "half a frame": half_a_frame,
    "half a size prefix": half_a_size,
}


@pytest.mark.parametrize("name", list(LEAVING))
def test_connections_left_half_way_are_logged_at_the_clients_pace(
    tap: BrokerTap, caplog: pytest.LogCaptureFixture, name: str
) -> None:
    """Each connection a client leaves half-way through a frame logs a warning, and is not
    audited: 5,000 such connections wrote 5,000 lines (350 KB), unpaced. The line now counts
    against the client's client.audit.events.per.sec, as an audited refusal does: past its
    burst the client's next connections wait."""
    config = gateway_config(tap.address, limits={"client.audit.events.per.sec": RATE})
    gw = GatewayThread(config).start()
    host, _, port = gw.bootstrap.rpartition(":")
    try:
        attacker = assert_paced(
            caplog,
            (host, int(port)),
            LEAVING[name],
            "closing connection: truncated",
            logging.WARNING,
        )
        assert gw.metric("kpg_audit_paced_total") >= 1
        attacker.join(60)
    finally:
        gw.stop()


def test_connections_while_no_broker_answers_are_logged_at_the_clients_pace(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """While the brokers cannot be reached, each connection's first request makes the
    gateway try them and log a warning, with no audit event: a client reconnecting in a loop
    had a line written (and a broker connect tried) for each, unpaced."""
    with socket.socket() as gone:
        gone.bind(("127.0.0.1", 0))
        nowhere = HostPort(host="127.0.0.1", port=gone.getsockname()[1])
    config = gateway_config(nowhere, limits={"client.audit.events.per.sec": RATE})
    gw = GatewayThread(config).start()
    host, _, port = gw.bootstrap.rpartition(":")
    try:
        attacker = assert_paced(
            caplog,
            (host, int(port)),
            answered_unread(API_VERSIONS_REQUEST),
            "closing client connection",
            logging.WARNING,
        )
    finally:
        gw.stop()
    attacker.join(30)


SYNC_GROUP = 14


def test_connections_whose_broker_drops_them_are_logged_at_the_clients_pace(
    tap: BrokerTap, caplog: pytest.LogCaptureFixture
) -> None:
    """A request the broker cannot read makes it close the gateway's link (Tansu, as Kafka
    does for a body that does not parse), and the gateway logs that its upstream is gone
    before it closes the client's connection, with no audit event: the gateway passes the
    request on as raw bytes (SyncGroup is not judged), so a client sending such a request on
    connection after connection had a line written for each, unpaced (50 connections, 50
    lines, at a rate that allows 20). The line now counts against the client's
    client.audit.events.per.sec."""
    config = gateway_config(tap.address, limits={"client.audit.events.per.sec": RATE})
    gw = GatewayThread(config).start()
    host, _, port = gw.bootstrap.rpartition(":")
    body = struct.pack(">hhih", SYNC_GROUP, 0, 1, 1) + b"t" + b"\xff" * 20
    frame = SIZE.pack(len(body)) + body
    try:
        attacker = assert_paced(
            caplog, (host, int(port)), answered_unread(frame), "upstream gone", logging.INFO
        )
        assert gw.metric("kpg_audit_paced_total") >= 1
    finally:
        gw.stop()
    attacker.join(30)


def test_connections_to_a_node_that_left_are_logged_at_the_clients_pace(
    scripted_cluster: ScriptedCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Scripted upstream (several brokers, a node leaving). A node's listener stays open
    after the node has left the cluster (cached metadata names its port), and each
    connection's first request there logs that its broker has left, with no audit event: a
    client reconnecting to that port in a loop had a line written for each, unpaced. The line
    now counts against the client's client.audit.events.per.sec."""
    script = Departing()
    for n in (1, 2):
        script.brokers[n] = scripted_cluster.add(script.respond, f"node-{n}")
    config = gateway_config(
        script.brokers[1].address,  # type: ignore[arg-type]
        limits={"client.audit.events.per.sec": RATE},
    )
    gw = GatewayThread(config).start()
    node_2 = dict(_advertised(gw.bootstrap))[2]
    script.present.discard(2)
    assert dict(_advertised(gw.bootstrap)).keys() == {1}
    try:
        attacker = assert_paced(
            caplog,
            ("127.0.0.1", node_2),
            answered_unread(API_VERSIONS_REQUEST),
            "has left the cluster",
            logging.INFO,
        )
    finally:
        gw.stop()
    attacker.join(30)
