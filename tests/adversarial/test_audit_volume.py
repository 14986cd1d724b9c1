"""A client that sends nothing but refused requests has the gateway write an audit event (about
900 bytes) and a log line for each: sent as fast as the gateway answers, they fill the spool's
disk and the audit topic, after which (``audit.on_failure: continue``) the decisions of every
client go unaudited, or (``deny``) every change is refused. ``limits."client.audit.events.per.sec"``
paces such a client: once its budget (10 s of the rate) is spent, its next request, on any
of its connections, is read only when the budget is back at zero. Nothing is dropped: every
decision is still an event of its own.

Each case runs the real gateway in front of the tapped real broker. A second client comes
from 127.0.0.2 (another address on the loopback interface): unauthenticated clients are
counted by address.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from protocol.codec import decode_response
from tests.adversarial.test_request_cost import CREATE_TOPICS, POLICY_VIOLATION, create_topics
from tests.support import BrokerTap, GatewayThread, RawClient, gateway_config, spool_events

pytestmark = pytest.mark.adversarial

API_VERSIONS = 18
RATE = 50
"""``client.audit.events.per.sec`` here: a budget of 500 events (10 s of it)."""
VERSIONS = ApiVersionsRequest(client_software_name="t", client_software_version="1")
FIRST = 900
"""Denied topics in the first request: 400 events past the budget, 8 s of pace."""


@pytest.fixture
def paced(tap: BrokerTap, tmp_path: Path) -> Iterator[GatewayThread]:
    rule = {"name": "naming", "type": "topic.name", "pattern": r"[a-z]+\.v[0-9]+"}
    config = gateway_config(
        tap.address,
        policies={"rules": [rule]},
        audit={"spool_dir": str(tmp_path / "audit")},
        limits={"client.audit.events.per.sec": RATE},
    )
    gw = GatewayThread(config).start()
    try:
        yield gw
    finally:
        gw.stop()


def answered(client: RawClient) -> bool:
    """Whether an answer is waiting on ``client``'s socket now (without waiting)."""
    client.sock.setblocking(False)
    try:
        return bool(client.sock.recv(1, socket.MSG_PEEK))
    except BlockingIOError:
        return False
    finally:
        client.sock.setblocking(True)


def test_a_client_sending_denied_requests_is_paced_and_its_neighbours_are_not(
    paced: GatewayThread, tap: BrokerTap, tmp_path: Path
) -> None:
    """Without the pace the second request is answered at once, as fast as the first: a
    client wrote 900 events (800 KB) in a fraction of a second, and would go on."""
    names = [f"t{index:x}" for index in range(FIRST)]
    client = RawClient(paced.bootstrap, timeout=30)
    answer = client.request(CREATE_TOPICS, 7, create_topics(names))
    assert {t.error_code for t in answer.topics} == {POLICY_VIOLATION}

    # 400 events past its budget: its next request waits about 8 s, on this connection and
    # on a new one from its address alike
    started = time.monotonic()
    client.send(CREATE_TOPICS, 7, create_topics(["again"]))
    other_connection = RawClient(paced.bootstrap, timeout=30)
    other_connection.send(API_VERSIONS, 3, VERSIONS)

    # a client from another address is served meanwhile
    neighbour = RawClient(paced.bootstrap, timeout=30, source="127.0.0.2")
    neighbour_answer = neighbour.request(CREATE_TOPICS, 7, create_topics(["neighbour"]))
    assert [t.error_code for t in neighbour_answer.topics] == [POLICY_VIOLATION]
    assert not answered(client), "the paced client's request was answered before its neighbour's"
    assert not answered(other_connection), "a new connection escaped the pace"

    [again] = decode_response(CREATE_TOPICS, 7, client.recv_frame()).topics
    waited = time.monotonic() - started
    assert again.error_code == POLICY_VIOLATION
    versions = decode_response(API_VERSIONS, 3, other_connection.recv_frame())
    assert versions.error_code == 0
    # (FIRST - budget) / RATE = 8 s of debt; half of it is a bound no slow machine breaks
    assert waited >= (FIRST - 10 * RATE) / RATE / 2, f"answered after {waited:.1f} s"
    assert paced.metric("kpg_audit_paced_total") >= 2

    # paced, not dropped: every decision is an event
    events = spool_events(
        tmp_path / "audit", lambda e: e.api == "CreateTopics", count=FIRST + 2, timeout=10
    )
    assert len(events) == FIRST + 2
    assert not [r for r in tap.requests if r.api_key == CREATE_TOPICS]
