"""A connection the gateway closes instead of serving a request is a decision, audited like
any other: a request for an API it does not carry, in a version it does not advertise, or
that it must read and cannot. One denied event each (policy ``protocol``, resource type
``cluster``, action ``request``), with the client's address and client id, so an audit
shows a client probing the gateway's parser, not only the log. A frame refused before its
header is read (its size, a header that does not parse) is one too, its API as far as the
frame's first bytes tell it."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.config import HostPort
from tests.support import GatewayThread, RawClient, gateway_config, spool_events

pytestmark = pytest.mark.inproc

CREATE_TOPICS = 19
ENVELOPE = 58
DESCRIBE_CONFIGS = 32
API_VERSIONS = 18


@pytest.fixture
def audited(broker: HostPort, tmp_path: Path) -> Iterator[tuple[GatewayThread, Path]]:
    config = gateway_config(broker, audit={"spool_dir": str(tmp_path), "fsync": "always"})
    gw = GatewayThread(config).start()
    try:
        yield gw, tmp_path
    finally:
        gw.stop()


def _frame(api_key: int, version: int, body: bytes, client_id: bytes = b"prober") -> bytes:
    """A request with a v1 header (the body as given, however malformed)."""
    header = struct.pack(">hhih", api_key, version, 7, len(client_id)) + client_id
    return struct.pack(">i", len(header) + len(body)) + header + body


REFUSALS = {
    # an API the gateway never carries (an inter-broker one)
    "refused-api": (_frame(ENVELOPE, 0, b"\x00\x00\x00\x00\x00"), "Envelope", "not carried"),
    # CreateTopics the gateway must judge, its body cut short
    "undecodable": (
        _frame(CREATE_TOPICS, 4, b"\x00\x00\x00\x01\x00"),
        "CreateTopics",
        "CreateTopics v4",
    ),
    # a DescribeConfigs version the gateway does not advertise (it reads v1 to v4)
    "unsupported-version": (_frame(DESCRIBE_CONFIGS, 0, b""), "DescribeConfigs", "v0"),
}


@pytest.mark.parametrize("refusal", list(REFUSALS))
def test_a_request_refused_by_closing_the_connection_is_audited(
    audited: tuple[GatewayThread, Path], refusal: str
) -> None:
    gw, spool = audited
    frame, api, said = REFUSALS[refusal]
    client = RawClient(gw.bootstrap, timeout=5)
    host, port = client.sock.getsockname()[:2]
    client.send_bytes(frame)
    with pytest.raises((ConnectionError, OSError)):
        client.recv_frame()
    client.close()

    (event,) = spool_events(spool, lambda e: e.action == "request")

    assert (event.client_address, event.client_id, event.api) == (f"{host}:{port}", "prober", api)
    assert (event.resource_type, event.action, event.policy, event.verdict) == (
        "cluster",
        "request",
        "protocol",
        "denied",
    )
    assert event.error_code is None and event.request_id
    assert said in (event.message or "")
    assert (
        gw.metric("kpg_policy_decisions_total", api=api, policy="protocol", outcome="denied") == 1
    )


FRAME_REFUSALS = {
    # a size over max_frame_bytes (100 MiB): refused unread, before any of its bytes
    "oversized": (struct.pack(">i", 200 << 20), ("Unread", -1), "limits", "exceeds the limit"),
    "negative-size": (struct.pack(">i", -5), ("Unread", -1), "protocol", "negative"),
    # an API key Kafka does not define
    "unknown-api-key": (_frame(9999, 3, b""), ("Unknown(9999)", 3), "protocol", "9999"),
    # ApiVersions v0 whose client id claims 50 bytes and has 2
    "bad-header": (
        struct.pack(">i", 12) + struct.pack(">hhih", API_VERSIONS, 0, 9, 50) + b"ab",
        ("ApiVersions", 0),
        "protocol",
        "does not parse",
    ),
}


@pytest.mark.parametrize("refusal", list(FRAME_REFUSALS))
def test_a_frame_refused_before_its_header_is_read_is_audited(
    audited: tuple[GatewayThread, Path], refusal: str
) -> None:
    """After one request served (so the connection has a client id), a frame refused on its
    size or its header: one denied event, with the connection's client id."""
    gw, spool = audited
    frame, (api, api_version), policy, said = FRAME_REFUSALS[refusal]
    client = RawClient(gw.bootstrap, timeout=5)
    host, port = client.sock.getsockname()[:2]
    client.send_bytes(_frame(API_VERSIONS, 0, b""))
    client.recv_frame()
    client.send_bytes(frame)
    assert client.is_closed()
    client.close()

    (event,) = spool_events(spool, lambda e: e.action == "request")

    assert (event.client_address, event.client_id) == (f"{host}:{port}", "prober")
    assert (event.api, event.api_version, event.policy, event.verdict) == (
        api,
        api_version,
        policy,
        "denied",
    )
    assert (event.resource_type, event.resource_name) == ("cluster", "")
    assert said in (event.message or ""), event.message
    # the audit names the key; the metrics count every unknown key under one label
    label = "Unknown" if api.startswith("Unknown(") else api
    assert gw.metric("kpg_policy_decisions_total", api=label, policy=policy, outcome="denied") == 1
