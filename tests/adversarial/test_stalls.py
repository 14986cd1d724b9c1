"""Routes through time rather than around a policy: a client that sends slowly or stalls, a
broker that does not answer, so that the gateway holds what it shares (request memory,
connections) without bound and stops serving others. Each case runs the real gateway in front
of the tapped real broker; the tap stands for a broker that holds a request (as Kafka holds a
Fetch for its max wait, and reads nothing more on that connection meanwhile)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_partitions.v3.request import (
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from kio.schema.types import TopicName
from kio.static.primitive import i32, i32Timedelta

from protocol.codec import encode_request
from protocol.framing import SIZE
from tests.batches import batch_with, produce_v9, record
from tests.inproc.test_clients import create_topic
from tests.support import (
    BrokerTap,
    GatewayThread,
    RawClient,
    create_topic_request,
    fetch_request,
    gateway_config,
    unique_name,
    wait_for,
)

pytestmark = pytest.mark.adversarial

API_VERSIONS, METADATA, FETCH, PRODUCE, CREATE_PARTITIONS = 18, 3, 1, 0, 37
IDLE_MS = 400
QUEUED_MAX = 1024 * 1024
VERSIONS = ApiVersionsRequest(client_software_name="t", client_software_version="1")


@contextmanager
def gateway_with(tap: BrokerTap, **extra: Any) -> Iterator[GatewayThread]:
    gw = GatewayThread(gateway_config(tap.address, **extra)).start()
    try:
        yield gw
    finally:
        tap.release_requests()
        gw.stop()


def answered(address: str) -> bool:
    """A new client gets its ApiVersions answered (within the socket's 5 s)."""
    client = RawClient(address, timeout=5)
    try:
        answer = client.request(
            API_VERSIONS,
            3,
            ApiVersionsRequest(client_software_name="t", client_software_version="1"),
        )
        return bool(answer.error_code == 0)
    finally:
        client.close()


# --- a frame trickled a byte at a time ------------------------------------------------------


def trickle(sock: socket.socket, count: int, every_s: float, until: Callable[[], bool]) -> int:
    """Send ``count`` bytes one at a time, ``every_s`` apart (each well within the idle
    limit); stop early once ``until()`` or once the gateway has closed the connection. How
    many it took."""
    sent = 0
    try:
        while sent < count and not until():
            sock.send(b"x")
            sent += 1
            time.sleep(every_s)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent


def _nothing_due(tap: BrokerTap, client: RawClient) -> None:
    pass


def _a_fetch_held_by_the_broker(tap: BrokerTap, client: RawClient) -> None:
    """A Fetch the broker holds (as Kafka holds one for its max wait): an answer is due, so
    the connection is never idle while the frame trickles in."""
    topic = unique_name("trickle")
    create_topic(str(tap.address), topic)
    tap.hold_requests(FETCH)
    client.send(FETCH, 12, fetch_request(topic, max_wait=timedelta(0)))
    assert wait_for(lambda: FETCH in tap.api_keys())


TRICKLED = {
    "nothing else due": _nothing_due,
    "a Fetch the broker holds": _a_fetch_held_by_the_broker,
}


@pytest.mark.parametrize("name", list(TRICKLED))
def test_a_frame_trickled_a_byte_at_a_time_is_closed_and_its_memory_given_back(
    tap: BrokerTap, name: str
) -> None:
    """A client declares a frame of most of queued.max.request.bytes and sends it a byte every
    100 ms, each byte well within connections.max.idle.ms (400 ms). Every byte reset the idle
    clock, so the frame's memory stayed taken for as long as the client kept it up (a day at a
    byte a minute with the default 10 minutes) and every other client's request waited for
    it; with an answer due (a Fetch the broker holds) the idle clock did not even run. A
    frame must now arrive whole within connections.max.idle.ms of its size prefix."""
    limits = {"connections.max.idle.ms": IDLE_MS, "queued.max.request.bytes": QUEUED_MAX}
    with gateway_with(tap, limits=limits) as gw:
        client = RawClient(gw.bootstrap)
        TRICKLED[name](tap, client)
        client.send_bytes(SIZE.pack(QUEUED_MAX) + b"\x00\x12\x00\x03")
        assert wait_for(lambda: gw.metric("kpg_queued_request_bytes") == QUEUED_MAX)
        # 4 s, ten times the idle limit, unless the gateway gives the frame's memory back
        sent = trickle(client.sock, 40, 0.1, lambda: not gw.metric("kpg_queued_request_bytes"))
        assert sent < 40, "the gateway held the trickled frame for ten times the idle limit"
        assert gw.metric("kpg_connections_idle_closed_total") == 1
        # closed once the answers due have left, or after shutdown_timeout_s (5 s) without
        assert client.is_closed(10)
        tap.release_requests()
        assert answered(gw.bootstrap)


def test_a_frame_sent_in_time_in_pieces_is_served(tap: BrokerTap) -> None:
    """A frame that arrives in pieces, each within the idle limit, and whole within it, is
    served as before."""
    with gateway_with(tap, limits={"connections.max.idle.ms": IDLE_MS}) as gw:
        client = RawClient(gw.bootstrap)
        frame = encode_request(
            API_VERSIONS,
            3,
            1,
            "pieces",
            ApiVersionsRequest(client_software_name="t", client_software_version="1"),
        )
        for start in range(0, len(frame), 8):
            client.send_bytes(frame[start : start + 8])
            time.sleep(0.01)
        assert client.recv_frame()[:4] == b"\x00\x00\x00\x01"
        assert gw.metric("kpg_connections_idle_closed_total") == 0


# --- a connection at its in-flight limit ---------------------------------------------------


def produce_frame_of(size: int, topic: str) -> bytes:
    """A Produce v9 request (acks=1) to ``topic`` whose frame, size prefix excluded, is
    ``size`` bytes."""
    value_length = size
    for _ in range(8):
        batch = batch_with("none", (record(0, None, b"x" * value_length),), idempotent=False)
        frame = encode_request(PRODUCE, 9, 2, "held", produce_v9({topic: {0: batch}}))
        excess = len(frame) - 4 - size
        if not excess:
            return frame
        value_length -= excess
    raise AssertionError("no value length gives that size")


def produce_behind_a_held_fetch(
    tap: BrokerTap, gw: GatewayThread, topic: str, size: int
) -> RawClient:
    """A client whose Fetch the broker holds, with a Produce of ``size`` bytes sent behind it
    on the same connection; meanwhile another client is answered and no request memory is
    held."""
    client = RawClient(gw.bootstrap)
    tap.hold_requests(FETCH)
    client.send(FETCH, 12, fetch_request(topic, max_wait=timedelta(0)))
    assert wait_for(lambda: FETCH in tap.api_keys())
    client.send_bytes(produce_frame_of(size, topic))
    assert answered(gw.bootstrap), "another client's request waited for memory"
    assert gw.metric("kpg_queued_request_bytes") == 0
    return client


def test_a_connection_at_its_in_flight_limit_holds_no_request_memory(tap: BrokerTap) -> None:
    """With max_in_flight_requests at 1, a client's Fetch is held by the broker and it sends a
    Produce of all of queued.max.request.bytes behind it. The gateway read that next request
    whole, taking its memory, and then waited for the in-flight slot, holding the memory for
    as long as the broker held the Fetch (Kafka: its max wait, up to 24 days, as the client
    asks): every other client's request waited meanwhile, and the connection, an answer due,
    was never idle. A connection at its limit now reads no further request (as
    limits.max_in_flight_requests says), so it takes no memory and others are served."""
    topic = unique_name("in-flight-memory")
    create_topic(str(tap.address), topic)
    limits = {"max_in_flight_requests": 1, "queued.max.request.bytes": QUEUED_MAX}
    with gateway_with(tap, limits=limits) as gw:
        client = produce_behind_a_held_fetch(tap, gw, topic, QUEUED_MAX)
        tap.release_requests()
        assert client.recv_frame()[:4] == b"\x00\x00\x00\x01"  # the Fetch's answer
        assert client.recv_frame()[:4] == b"\x00\x00\x00\x02"  # then the Produce's


# --- the gateway's own request, to judge one, left unanswered --------------------------------

DESCRIBE_CONFIGS, CREATE_TOPICS = 32, 19
TIMEOUT = i32Timedelta.parse(timedelta(seconds=10))


def _create_partitions(topic: str) -> tuple[int, int, Any]:
    topic_entry = CreatePartitionsTopic(name=TopicName(topic), count=i32(4), assignments=None)
    request = CreatePartitionsRequest(topics=(topic_entry,), timeout=TIMEOUT, validate_only=False)
    return CREATE_PARTITIONS, 3, request


def _create_with_the_brokers_default_count(topic: str) -> tuple[int, int, Any]:
    return CREATE_TOPICS, 7, create_topic_request(f"{topic}-new", partitions=-1)


UNANSWERED = {
    # name: (the gateway's own request the broker holds, the client's request it judges)
    "Metadata, to judge a CreatePartitions": (METADATA, _create_partitions),
    "DescribeConfigs, to judge a CreateTopics of -1 partitions": (
        DESCRIBE_CONFIGS,
        _create_with_the_brokers_default_count,
    ),
}


@pytest.mark.parametrize("name", list(UNANSWERED))
def test_an_unanswered_request_of_the_gateways_own_fails_closed_in_time(
    tap: BrokerTap, name: str
) -> None:
    """The broker holds the request the gateway sends to judge a client's (what a policy
    needs to know): after upstream.request_timeout_s the client's connection is closed, its
    request audited as refused (policy cluster_state) and never forwarded unjudged; the
    connection's link is given up, and other clients are served meanwhile."""
    held, build = UNANSWERED[name]
    topic = unique_name("unanswered")
    create_topic(str(tap.address), topic)
    extra = {"upstream": {"request_timeout_s": 1, "broker_defaults": {}}}
    with gateway_with(tap, **extra) as gw:
        client = RawClient(gw.bootstrap)
        assert client.request(API_VERSIONS, 3, VERSIONS).error_code == 0  # the link is open
        tap.hold_requests(held)
        api_key, version, request = build(topic)
        before = len(tap.forwarded(api_key))  # the set-up's CreateTopics
        client.send(api_key, version, request)
        assert answered(gw.bootstrap)  # while the gateway waits
        assert client.is_closed(10)
        assert gw.metric("kpg_rejected_frames_total", reason="upstream_state") == 1
        api = {CREATE_PARTITIONS: "CreatePartitions", CREATE_TOPICS: "CreateTopics"}[api_key]
        refused = {"api": api, "policy": "cluster_state", "outcome": "denied"}
        assert gw.metric("kpg_policy_decisions_total", **refused) == 1
        assert len(tap.forwarded(api_key)) == before, "forwarded unjudged"
        assert wait_for(lambda: gw.metric("kpg_connections_active") == 0)


# --- a broker that stops reading the link ----------------------------------------------------

LARGE = 16 * 1024 * 1024


def test_a_request_the_broker_does_not_take_gives_its_memory_back_in_time(tap: BrokerTap) -> None:
    """Kafka reads nothing more on a connection while it holds a request (a Fetch, for the max
    wait the client asks, up to 24 days); the tap does the same. A client sends such a Fetch
    and then a Produce of all of queued.max.request.bytes: the gateway read the Produce, wrote
    what the sockets took and waited for the broker to take the rest, holding the frame's
    memory for as long as the broker held the Fetch, and every other client's request waited.
    A request the broker does not take within upstream.request_timeout_s now ends the link
    and the client's connection (as a broker gone does), and the memory is given back."""
    topic = unique_name("not-taken")
    create_topic(str(tap.address), topic)
    limits = {"queued.max.request.bytes": LARGE}
    with gateway_with(tap, limits=limits, upstream={"request_timeout_s": 1}) as gw:
        client = produce_behind_a_held_fetch(tap, gw, topic, LARGE)
        assert client.is_closed(10)
