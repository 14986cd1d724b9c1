"""``sasl.client_auth: required``: before a SASL exchange the broker accepts, a connection is
served nothing but ApiVersions, SaslHandshake and SaslAuthenticate, as on Kafka's SASL
listeners (SaslServerAuthenticator closes a connection that sends anything else).

The route it closes: with SASL passing through, a client that never authenticates could use
every API the gateway answers itself (dynamic client configs, dry runs) as ANONYMOUS, though
the broker behind would have refused it. The broker side is the test broker behind
:mod:`tests.security_front` (TLS and SASL run by the front: Tansu has no SASL).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from gateway import client_configs as cc
from gateway.client_configs import ClientConfigCodes
from protocol import client_configs as wire
from protocol import list_config_resources as lcr
from protocol.alter_configs import SET
from protocol.codec import encode_request
from protocol.framing import PRE_AUTH_MAX_FRAME_BYTES
from tests.adversarial.test_record_bombs import produce
from tests.batches import batch_with, record
from tests.plugins.kafka_test_policies import RecordingTopicActionPolicy
from tests.security.conftest import ALICE_PASSWORD, Upstream
from tests.security.test_upstream_sasl import sasl_ssl_client, secured_gateway
from tests.security.test_upstream_tls import produce_consume_deny
from tests.support import (
    GatewayThread,
    RawClient,
    create_topic_request,
    spool_events,
    tls_context,
    unique_name,
)

pytestmark = pytest.mark.inproc

USER_CLIENT = ClientConfigCodes().user_client_type
SASL_AUTHENTICATION_FAILED = 58
UNSUPPORTED_SASL_MECHANISM = 33


@pytest.fixture
def required(sasl_ssl_upstream: Upstream) -> Iterator[GatewayThread]:
    """The gateway in front of the SASL_SSL broker, its listener requiring SASL; alice's
    default client config is acks=all, stored by alice herself through the gateway."""
    gw = secured_gateway(sasl_ssl_upstream, sasl={"client_auth": "required"}).start()
    try:
        store_alice_acks_all(gw, sasl_ssl_upstream)
        yield gw
    finally:
        gw.stop()


def connect(gw: GatewayThread, upstream: Upstream) -> RawClient:
    return RawClient(gw.bootstrap, tls=tls_context(upstream.pki, "alice"))


def authenticate(raw: RawClient, password: str) -> int:
    """SaslHandshake and SaslAuthenticate (PLAIN, as alice); the broker's error code."""
    assert raw.request(17, 1, SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
    auth = f"\x00alice\x00{password}".encode()
    return int(raw.request(36, 2, SaslAuthenticateRequest(auth_bytes=auth)).error_code)


def store_alice_acks_all(gw: GatewayThread, upstream: Upstream) -> None:
    """alice, authenticated, stores her own default client config acks=all through ``gw``."""
    alice = connect(gw, upstream)
    try:
        assert authenticate(alice, ALICE_PASSWORD) == 0
        alice.send_bytes(alter_frame("all"))
        (stored,) = wire.read_incremental_alter_response(alice.recv_frame())
        assert stored.error_code == 0, stored.error_message
    finally:
        alice.close()


ONE_RECORD = batch_with("none", (record(0, b"k", b"v", ()),), idempotent=False)
"""A batch of one record, not idempotent."""


def alter_frame(acks: str) -> bytes:
    return wire.incremental_alter_request(
        [(USER_CLIENT, "alice:", [("acks", SET, acks)])],
        validate_only=False,
        correlation_id=9,
        client_id="raw-test",
    )


def describe_frame() -> bytes:
    return wire.describe_request([(USER_CLIENT, "alice:")], correlation_id=7, client_id="raw")


def list_frame() -> bytes:
    return lcr.list_request([USER_CLIENT], correlation_id=5, client_id="raw-test")


DRY_RUN_TOPIC = unique_name("anon-dry-run")


def dry_run_frame() -> bytes:
    """CreateTopics validate_only: the test broker ignores validate_only, so the gateway
    answers the dry run itself (``upstream.ignores_validate_only``)."""
    request = create_topic_request(DRY_RUN_TOPIC, validate_only=True)
    return encode_request(19, 7, 11, "raw-test", request)


GATEWAY_ANSWERED: dict[str, Callable[[], bytes]] = {
    "describe-client-configs": describe_frame,
    "list-client-config-resources": list_frame,
    "dry-run": dry_run_frame,
    "alter-client-configs": lambda: alter_frame("0"),
}


def answer_or_close(raw: RawClient) -> bytes | None:
    """The next answer frame, or None when the gateway closes the connection instead."""
    try:
        return raw.recv_frame()
    except ConnectionError:
        return None


def alice_configs(gw: GatewayThread) -> dict[str, str]:
    return dict(gw.gateway.state.items(cc.STATE_NAMESPACE))


@pytest.mark.parametrize("request_kind", list(GATEWAY_ANSWERED))
def test_unauthenticated_request_closes_the_connection(
    required: GatewayThread, sasl_ssl_upstream: Upstream, request_kind: str
) -> None:
    """A connection that has not authenticated gets its ApiVersions answered, then sends a
    request the gateway would answer itself: the connection closes with no answer, nothing is
    stored, no policy ran, and the refusal is counted."""
    RecordingTopicActionPolicy.seen.clear()
    before = required.metric("kpg_rejected_frames_total", reason="unauthenticated")
    raw = connect(required, sasl_ssl_upstream)
    versions = raw.request(
        18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1")
    )
    assert versions.error_code == 0
    raw.send_bytes(GATEWAY_ANSWERED[request_kind]())
    assert answer_or_close(raw) is None
    raw.close()
    assert alice_configs(required) == {"alice/<default>/acks": "all"}
    assert [m for m in RecordingTopicActionPolicy.seen if m.topic == DRY_RUN_TOPIC] == []
    after = required.metric("kpg_rejected_frames_total", reason="unauthenticated")
    assert after == before + 1


def test_authenticated_raw_client_is_served(
    required: GatewayThread, sasl_ssl_upstream: Upstream
) -> None:
    """After a successful exchange the same requests are answered, as User:alice."""
    raw = connect(required, sasl_ssl_upstream)
    assert authenticate(raw, ALICE_PASSWORD) == 0
    raw.send_bytes(describe_frame())
    (described,) = wire.read_describe_response(raw.recv_frame())
    assert described.error_code == 0, described.error_message
    assert {c.name: c.value for c in described.configs} == {"acks": "all"}
    raw.send_bytes(alter_frame("1"))
    (altered,) = wire.read_incremental_alter_response(raw.recv_frame())
    assert altered.error_code == 0, altered.error_message
    raw.close()
    assert alice_configs(required) == {"alice/<default>/acks": "1"}


def test_authenticated_client_library_works(
    required: GatewayThread, sasl_ssl_upstream: Upstream
) -> None:
    """confluent-kafka with SASL_SSL (SCRAM-SHA-512) through the requiring gateway: it
    creates, produces, consumes, and the policy still names it User:alice."""
    RecordingTopicActionPolicy.seen.clear()
    config = sasl_ssl_client(
        required.bootstrap, sasl_ssl_upstream.pki, "SCRAM-SHA-512", ALICE_PASSWORD
    )
    topic = produce_consume_deny(config)
    (seen,) = [m for m in RecordingTopicActionPolicy.seen if m.topic == topic]
    assert seen.principal == "User:alice"


def test_failed_authentication_closes_even_where_the_broker_does_not(
    required: GatewayThread, sasl_ssl_upstream: Upstream
) -> None:
    """A broker laxer than Kafka keeps the connection open after a refused SaslAuthenticate:
    the gateway relays the refusal and closes the connection itself, so the client can use
    nothing as ANONYMOUS afterwards."""
    sasl = sasl_ssl_upstream.front.sasl
    assert sasl is not None
    sasl.close_on_failure = False
    try:
        raw = connect(required, sasl_ssl_upstream)
        assert authenticate(raw, "not-her-password") == SASL_AUTHENTICATION_FAILED
        raw.send_bytes(describe_frame())
        assert answer_or_close(raw) is None
        raw.close()
    finally:
        sasl.close_on_failure = True
    assert required.metric("kpg_rejected_frames_total", reason="sasl_failed") >= 1


def test_request_pipelined_behind_a_failed_authentication_is_not_served(
    required: GatewayThread, sasl_ssl_upstream: Upstream
) -> None:
    """A DescribeConfigs sent right behind a SaslAuthenticate, before its answer: the
    refusal comes back, and the DescribeConfigs gets no answer (the gateway does not serve a
    request while the exchange's outcome is unknown)."""
    raw = connect(required, sasl_ssl_upstream)
    assert raw.request(17, 1, SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
    auth = SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00not-her-password")
    raw.send_bytes(encode_request(36, 2, 21, "raw-test", auth) + describe_frame())
    refusal = answer_or_close(raw)
    assert refusal is not None and int.from_bytes(refusal[:4], "big") == 21
    assert answer_or_close(raw) is None
    raw.close()


def test_a_mechanism_the_gateway_cannot_follow_is_answered_as_kafka_does(
    required: GatewayThread, sasl_ssl_upstream: Upstream
) -> None:
    """GSSAPI under ``required``: the client gets UNSUPPORTED_SASL_MECHANISM with the
    mechanisms the gateway can follow (a client library then says what to configure), and
    the connection closes after that answer, as Kafka closes it; nothing is served."""
    before = required.metric("kpg_rejected_frames_total", reason="sasl_failed")
    raw = connect(required, sasl_ssl_upstream)
    answer = raw.request(17, 1, SaslHandshakeRequest(mechanism="GSSAPI"))
    assert answer.error_code == UNSUPPORTED_SASL_MECHANISM
    assert set(answer.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"}
    raw.send_bytes(describe_frame())
    assert answer_or_close(raw) is None
    raw.close()
    after = required.metric("kpg_rejected_frames_total", reason="sasl_failed")
    assert after == before + 1


def test_sasl_behind_a_gateway_not_requiring_it_is_warned(
    sasl_ssl_upstream: Upstream, caplog: pytest.LogCaptureFixture
) -> None:
    """Without upstream.sasl the default is none; the first handshake a broker accepts shows
    that clients authenticate with SASL, and the gateway says the setting is missing, once."""
    caplog.set_level("WARNING")
    gw = secured_gateway(sasl_ssl_upstream).start()
    try:
        assert gw.config.sasl.client_auth == "none"
        for _ in range(2):
            raw = connect(gw, sasl_ssl_upstream)
            assert authenticate(raw, ALICE_PASSWORD) == 0
            raw.close()
    finally:
        gw.stop()
    assert caplog.text.count("set sasl.client_auth: required") == 1


def _address(raw: RawClient) -> str:
    host, port = raw.sock.getsockname()[:2]
    return f"{host}:{port}"


def test_refused_authentications_are_audited_with_the_client_and_the_user_it_claimed(
    sasl_ssl_upstream: Upstream, tmp_path: Path
) -> None:
    """Behind the gateway the broker sees every client at the gateway's address: the
    gateway's audit is the only record of who tried to authenticate as whom. Each refusal
    is one denied ``authenticate`` event of resource type ``user``, with the client's
    address and the user name it claimed: the gateway's own refusals (a request before SASL,
    a mechanism it cannot follow) under policy ``sasl.client_auth``, the broker's refusal of
    credentials under policy ``broker``; an accepted exchange leaves no such event."""
    gw = secured_gateway(
        sasl_ssl_upstream,
        sasl={"client_auth": "required"},
        audit={"spool_dir": str(tmp_path), "fsync": "always"},
    ).start()
    try:
        wrong = connect(gw, sasl_ssl_upstream)
        assert authenticate(wrong, "not-her-password") == SASL_AUTHENTICATION_FAILED
        wrong_address = _address(wrong)
        assert answer_or_close(wrong) is None
        wrong.close()

        early = connect(gw, sasl_ssl_upstream)
        early.send_bytes(describe_frame())
        early_address = _address(early)
        assert answer_or_close(early) is None
        early.close()

        gssapi = connect(gw, sasl_ssl_upstream)
        answer = gssapi.request(17, 1, SaslHandshakeRequest(mechanism="GSSAPI"))
        assert answer.error_code == UNSUPPORTED_SASL_MECHANISM
        gssapi_address = _address(gssapi)
        assert answer_or_close(gssapi) is None
        gssapi.close()

        right = connect(gw, sasl_ssl_upstream)
        assert authenticate(right, ALICE_PASSWORD) == 0
        right.close()

        events = spool_events(tmp_path, lambda e: e.action == "authenticate", count=3)
    finally:
        gw.stop()

    found = {
        (e.client_address, e.api, e.resource_type, e.resource_name, e.policy, e.verdict)
        + (e.error_code, e.principal, e.event_kind)
        for e in events
    }
    assert found == {
        (wrong_address, "SaslAuthenticate", "user", "alice", "broker", "denied")
        + (SASL_AUTHENTICATION_FAILED, None, "decision"),
        (early_address, "DescribeConfigs", "user", "", "sasl.client_auth", "denied")
        + (None, None, "decision"),
        (gssapi_address, "SaslHandshake", "user", "", "sasl.client_auth", "denied")
        + (UNSUPPORTED_SASL_MECHANISM, None, "decision"),
    }
    assert all(e.request_id and e.policy_version == gw.config.policy_version for e in events)
    by_api = {e.api: e.message or "" for e in events}
    assert "credentials" in by_api["SaslAuthenticate"]
    assert "before SASL authentication" in by_api["DescribeConfigs"]
    assert "GSSAPI" in by_api["SaslHandshake"]
    refused = {"api": "SaslAuthenticate", "policy": "broker", "outcome": "denied"}
    assert gw.metric("kpg_policy_decisions_total", **refused) == 1


def _big_frame(size: int) -> bytes:
    """A DescribeConfigs frame of ``size`` bytes after its size field: a valid header, then
    padding no decoder accepts."""
    header = struct.pack(">hhih", 32, 4, 5, 3) + b"raw"
    return struct.pack(">i", size) + header + b"\x00" * (size - len(header))


def test_an_unauthenticated_client_cannot_send_a_frame_over_kafkas_pre_auth_limit(
    required: GatewayThread, sasl_ssl_upstream: Upstream
) -> None:
    """Kafka's SASL listeners read at most sasl.server.max.receive.size (512 KiB) from a
    connection that has not authenticated; the gateway's own cap (100 MiB) applied before,
    so clients nobody had authenticated could hold its request memory. Over 512 KiB before
    the exchange: the size alone closes the connection; the same frame once authenticated is
    read (and refused for what it holds, not its size)."""
    size = PRE_AUTH_MAX_FRAME_BYTES + 1
    oversized = required.metric("kpg_rejected_frames_total", reason="oversized")
    early = connect(required, sasl_ssl_upstream)
    early.sock.sendall(_big_frame(size)[:4])
    assert early.is_closed()
    early.close()
    assert required.metric("kpg_rejected_frames_total", reason="oversized") == oversized + 1

    undecodable = required.metric("kpg_rejected_frames_total", reason="undecodable")
    alice = connect(required, sasl_ssl_upstream)
    assert authenticate(alice, ALICE_PASSWORD) == 0
    alice.send_bytes(_big_frame(size))
    assert answer_or_close(alice) is None
    alice.close()
    assert required.metric("kpg_rejected_frames_total", reason="oversized") == oversized + 1
    assert required.metric("kpg_rejected_frames_total", reason="undecodable") == undecodable + 1


def test_a_request_sent_behind_the_sasl_exchange_is_judged_as_the_user_it_authenticates(
    sasl_ssl_upstream: Upstream,
) -> None:
    """With sasl.client_auth none (SASL passing through to brokers that require it), a
    client may send its requests behind its SaslHandshake and SaslAuthenticate without
    waiting for their answers; the broker serves them once the exchange is done, as the user
    it authenticated. The gateway judged them as the connection was when it read them, with
    no principal: alice's Produce with acks=1 went to the broker as sent, past her acks
    config of all. They are judged once the exchange's answers are back now."""
    gw = secured_gateway(sasl_ssl_upstream, client_configs={"enforce": {"acks": True}}).start()
    try:
        store_alice_acks_all(gw, sasl_ssl_upstream)
        pipelined = connect(gw, sasl_ssl_upstream)
        auth = f"\x00alice\x00{ALICE_PASSWORD}".encode()
        pipelined.send_bytes(
            encode_request(17, 1, 1, "app", SaslHandshakeRequest(mechanism="PLAIN"))
            + encode_request(36, 2, 2, "app", SaslAuthenticateRequest(auth_bytes=auth))
            + encode_request(0, 9, 3, "app", produce(unique_name("behind"), ONE_RECORD, acks=1))
        )
        for _ in range(3):
            pipelined.recv_frame()
        pipelined.close()
        assert gw.metric("kpg_client_config_enforced_total", config="acks") == 1
    finally:
        gw.stop()
