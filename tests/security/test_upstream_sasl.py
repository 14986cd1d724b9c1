"""SASL through the gateway and for the gateway's own clients, over TLS on both legs.

The broker side is the test broker behind :mod:`tests.security_front`, which runs the SASL
exchange itself with fixed credentials (Tansu has no SASL mechanisms to switch on) and then
relays. Clients authenticate through the gateway to that front; the gateway's state store and
audit sink authenticate with ``upstream.sasl``. No secret may reach a log line."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from gateway.config import ConfigError
from gateway.server import Gateway
from tests.plugins.kafka_test_policies import RecordingTopicActionPolicy
from tests.security.conftest import (
    ALICE_PASSWORD,
    KPG_PASSWORD,
    OAUTH_CLIENT_SECRET,
    SECRETS,
    Upstream,
)
from tests.security.test_upstream_tls import (
    POLICIES,
    listener_tls,
    produce_consume_deny,
    read_topic,
)
from tests.support import (
    GatewayThread,
    RawClient,
    gateway_config,
    make_pki,
    tls_context,
    unique_name,
    wait_for,
)

pytestmark = pytest.mark.inproc

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def sasl_ssl_client(bootstrap: str, pki: Path, mechanism: str, password: str) -> dict[str, str]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pki / "ca.pem"),
        "sasl.mechanism": mechanism,
        "sasl.username": "alice",
        "sasl.password": password,
    }


def secured_gateway(secured: Upstream, **extra: Any) -> GatewayThread:
    """A gateway with TLS on its listener (no client certificate asked) and to the brokers."""
    upstream_section = {"tls": {"ca_file": str(secured.pki / "ca.pem")}}
    upstream_section.update(extra.pop("upstream", {}))
    config = gateway_config(
        secured.front.address,
        upstream=upstream_section,
        tls=listener_tls(secured.pki, client_auth="none"),
        policies=POLICIES,
        **extra,
    )
    return GatewayThread(config)


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_client_sasl_passes_through_over_tls(
    sasl_ssl_upstream: Upstream, mechanism: str, audit_logs: pytest.LogCaptureFixture
) -> None:
    """SASL_SSL from confluent-kafka: the broker (front) authenticates alice through the
    gateway; she produces, consumes, and a policy refuses her 20-partition topic; the
    gateway names her User:alice."""
    RecordingTopicActionPolicy.seen.clear()
    front = sasl_ssl_upstream.front
    gw = secured_gateway(sasl_ssl_upstream).start()
    try:
        config = sasl_ssl_client(gw.bootstrap, sasl_ssl_upstream.pki, mechanism, ALICE_PASSWORD)
        topic = produce_consume_deny(config)
        (seen,) = [m for m in RecordingTopicActionPolicy.seen if m.topic == topic]
        assert seen.principal == "User:alice"
        assert (mechanism, "alice") in front.authenticated
    finally:
        gw.stop()
    assert_no_secret(audit_logs.text)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_wrong_client_password_is_refused(
    sasl_ssl_upstream: Upstream, mechanism: str, audit_logs: pytest.LogCaptureFixture
) -> None:
    """confluent-kafka with a wrong password gets an authentication error, and its request
    gets nowhere."""
    gw = secured_gateway(sasl_ssl_upstream).start()
    errors: list[KafkaError] = []
    try:
        config = sasl_ssl_client(gw.bootstrap, sasl_ssl_upstream.pki, mechanism, "wrong-pw")
        admin = AdminClient({**config, "error_cb": errors.append})
        topic = unique_name("nope")
        futures = admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=10)
        assert wait_for(lambda: (admin.poll(0.1), errors)[1] != [], timeout=30)
        assert errors[0].code() == KafkaError._AUTHENTICATION, errors
        with pytest.raises(KafkaException):
            futures[topic].result(30)
        assert ("wrong-pw" in str(errors[0])) is False
    finally:
        gw.stop()
    assert_no_secret(audit_logs.text)


def test_refusal_is_sasl_authentication_failed(sasl_ssl_upstream: Upstream) -> None:
    """On the wire: the SaslAuthenticate answer the client gets through the gateway carries
    SASL_AUTHENTICATION_FAILED (58), and the connection is then closed."""
    pki = sasl_ssl_upstream.pki
    gw = secured_gateway(sasl_ssl_upstream).start()
    try:
        raw = RawClient(gw.bootstrap, tls=tls_context(pki, "alice"))
        handshake = raw.request(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        assert handshake.error_code == 0
        answer = raw.request(
            36, 2, SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00not-her-password")
        )
        assert answer.error_code == 58
        assert raw.is_closed()
    finally:
        gw.stop()


def own_credentials(mechanism: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """``upstream.sasl`` for the user kpg: the password from a file for PLAIN and
    SCRAM-SHA-512, from the environment for SCRAM-SHA-256."""
    if mechanism == "SCRAM-SHA-256":
        monkeypatch.setenv("KPG_TEST_PASSWORD", KPG_PASSWORD)
        return {"mechanism": mechanism, "username": "kpg", "password_env": "KPG_TEST_PASSWORD"}
    secret = tmp_path / "kpg-password"
    secret.write_text(KPG_PASSWORD + "\n")
    return {"mechanism": mechanism, "username": "kpg", "password_file": str(secret)}


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_state_store_and_audit_sink_authenticate(
    sasl_ssl_upstream: Upstream,
    mechanism: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    audit_logs: pytest.LogCaptureFixture,
) -> None:
    """state.store kafka and audit.topic through TLS and SASL as kpg: they load, a state
    write lands, a denial is audited; the front saw kpg authenticate with the mechanism."""
    front = sasl_ssl_upstream.front
    before = len(front.authenticated)
    audit_topic = unique_name("_kpg_audit")
    gw = secured_gateway(
        sasl_ssl_upstream,
        upstream={"sasl": own_credentials(mechanism, tmp_path, monkeypatch)},
        state={"store": "kafka", "topic": unique_name("_kpg_state")},
        audit={"topic": audit_topic},
    ).start()
    big = unique_name("big")
    try:
        gw.run(gw.gateway.state.put("test", "who", mechanism))
        assert gw.gateway.state.get("test", "who") == mechanism
        assert_no_secret(repr(gw.config), str(gw.config.upstream.sasl))
        client = sasl_ssl_client(gw.bootstrap, sasl_ssl_upstream.pki, mechanism, ALICE_PASSWORD)
        admin = AdminClient(client)
        with pytest.raises(KafkaException):
            admin.create_topics([NewTopic(big, 20, 1)])[big].result(30)
    finally:
        gw.stop()
    assert (mechanism, "kpg") in front.authenticated[before:]
    direct = {
        "bootstrap.servers": sasl_ssl_upstream.bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(sasl_ssl_upstream.pki / "ca.pem"),
        "sasl.mechanism": "PLAIN",
        "sasl.username": "kpg",
        "sasl.password": KPG_PASSWORD,
    }
    events = [json.loads(v) for v in read_topic(direct, audit_topic).values()]
    (denial,) = [e for e in events if e["resource_name"] == big]
    assert (denial["verdict"], denial["principal"]) == ("denied", "User:alice")
    assert_no_secret(audit_logs.text, *map(json.dumps, events))


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_wrong_own_credentials_stop_start_up(
    sasl_ssl_upstream: Upstream,
    mechanism: str,
    tmp_path: Path,
    audit_logs: pytest.LogCaptureFixture,
) -> None:
    """A wrong upstream.sasl password: the gateway does not start, and says the state store
    could not authenticate, without the password."""
    secret = tmp_path / "pw"
    secret.write_text("wrong-" + KPG_PASSWORD)
    config = gateway_config(
        sasl_ssl_upstream.front.address,
        upstream={
            "tls": {"ca_file": str(sasl_ssl_upstream.pki / "ca.pem")},
            "sasl": {"mechanism": mechanism, "username": "kpg", "password_file": str(secret)},
            "request_timeout_s": 10,
        },
        state={"store": "kafka", "topic": unique_name("_kpg_state")},
    )
    gw = GatewayThread(config)
    with pytest.raises(ConfigError) as failed:
        gw.start()
    gw.stop()
    assert f"refused the gateway's credentials ({mechanism} as kpg)" in str(failed.value)
    assert "SaslAuthenticationFailed" in str(failed.value)
    assert_no_secret(str(failed.value), audit_logs.text)
    assert ("wrong-" + KPG_PASSWORD) not in audit_logs.text + str(failed.value)


def test_oauthbearer_own_clients_and_client_principal(
    sasl_ssl_upstream: Upstream, tmp_path: Path, audit_logs: pytest.LogCaptureFixture
) -> None:
    """OAUTHBEARER: the gateway's state store gets a token from the token endpoint (client
    credentials) and authenticates with it; a confluent-kafka client gets its own token
    (OIDC) and authenticates through the gateway, which names it by the token's sub."""
    tokens = sasl_ssl_upstream.tokens
    assert tokens is not None
    RecordingTopicActionPolicy.seen.clear()
    secret = tmp_path / "client-secret"
    secret.write_text(OAUTH_CLIENT_SECRET)
    front = sasl_ssl_upstream.front
    before = len(front.authenticated)
    gw = secured_gateway(
        sasl_ssl_upstream,
        upstream={
            "sasl": {
                "mechanism": "OAUTHBEARER",
                "token_endpoint_url": tokens.url,
                "client_id": "kpg-oauth",
                "client_secret_file": str(secret),
                "scope": "kafka",
            }
        },
        state={"store": "kafka", "topic": unique_name("_kpg_state")},
    ).start()
    try:
        gw.run(gw.gateway.state.put("test", "oauth", "yes"))
        assert ("OAUTHBEARER", "kpg-oauth") in front.authenticated[before:]
        assert {"grant_type": "client_credentials", "scope": "kafka"} in tokens.requests
        config = {
            "bootstrap.servers": gw.bootstrap,
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(sasl_ssl_upstream.pki / "ca.pem"),
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.token.endpoint.url": tokens.url,
            "sasl.oauthbearer.client.id": "kpg-oauth",
            "sasl.oauthbearer.client.secret": OAUTH_CLIENT_SECRET,
        }
        topic = produce_consume_deny(config)
        (seen,) = [m for m in RecordingTopicActionPolicy.seen if m.topic == topic]
        assert seen.principal == "User:kpg-oauth"
    finally:
        gw.stop()
    assert_no_secret(audit_logs.text)


@pytest.mark.unit
def test_secrets_come_from_files_or_environment(tmp_path: Path) -> None:
    """upstream.sasl takes no inline password; a missing variable or file names the key."""
    base = {"bootstrap_servers": ["127.0.0.1:9"]}
    sasl = {"mechanism": "PLAIN", "username": "kpg", "password": "inline"}
    with pytest.raises(ConfigError, match=r"upstream\.sasl\.password: unknown key"):
        gateway_config([], upstream={**base, "sasl": sasl})
    sasl = {"mechanism": "PLAIN", "username": "kpg", "password_env": "KPG_NOT_SET_ANYWHERE"}
    os.environ.pop("KPG_NOT_SET_ANYWHERE", None)
    with pytest.raises(ConfigError, match=r"password_env: KPG_NOT_SET_ANYWHERE is not set"):
        gateway_config([], upstream={**base, "sasl": sasl})
    sasl = {"mechanism": "PLAIN", "username": "kpg"}
    with pytest.raises(ConfigError, match=r"password_file or password_env is required"):
        gateway_config([], upstream={**base, "sasl": sasl})
    sasl = {"mechanism": "GSSAPI", "username": "kpg"}
    with pytest.raises(ConfigError, match=r"upstream\.sasl\.mechanism: expected one of"):
        gateway_config([], upstream={**base, "sasl": sasl})
    secret = tmp_path / "pw"
    secret.write_text(KPG_PASSWORD + "\n")
    sasl = {"mechanism": "SCRAM-SHA-512", "username": "kpg", "password_file": str(secret)}
    config = gateway_config([], upstream={**base, "sasl": sasl})
    assert config.upstream.sasl is not None and config.upstream.sasl.password is not None
    assert config.upstream.sasl.password.reveal() == KPG_PASSWORD
    assert_no_secret(repr(config), str(config), f"{config.upstream.sasl.password}")
    kwargs = Gateway(config).upstream_security.aiokafka_kwargs()
    assert kwargs["security_protocol"] == "SASL_PLAINTEXT"
    assert kwargs["sasl_plain_password"] == KPG_PASSWORD


def test_sasl_handshake_v0_offered_and_refused(sasl_ssl_upstream: Upstream) -> None:
    """librdkafka 2.0 (Debian's kcat) starts no SASL exchange unless SaslHandshake v0 is
    listed, then sends v1: the gateway lists 0-1. A v0 handshake itself, after which the
    client would send unframed tokens, is answered UNSUPPORTED_VERSION by the gateway."""
    pki = sasl_ssl_upstream.pki
    gw = secured_gateway(sasl_ssl_upstream).start()
    try:
        raw = RawClient(gw.bootstrap, tls=tls_context(pki, "alice"))
        versions = raw.request(
            18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1")
        )
        (handshake,) = [k for k in versions.api_keys if k.api_key == 17]
        assert (handshake.min_version, handshake.max_version) == (0, 1)
        answer = raw.request(17, 0, SaslHandshakeRequest(mechanism="PLAIN"))
        assert answer.error_code == 35  # UNSUPPORTED_VERSION
        assert tuple(answer.mechanisms) == ()
    finally:
        gw.stop()


def test_untrusted_broker_certificate_stops_start_up(
    sasl_ssl_upstream: Upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """upstream.tls trusting another CA: the gateway's own clients cannot verify the broker,
    and start-up stops saying so."""
    other = make_pki(tmp_path, {})
    monkeypatch.setenv("KPG_TEST_PASSWORD", KPG_PASSWORD)
    config = gateway_config(
        sasl_ssl_upstream.front.address,
        upstream={
            "tls": {"ca_file": str(other / "ca.pem")},
            "sasl": {"mechanism": "PLAIN", "username": "kpg", "password_env": "KPG_TEST_PASSWORD"},
        },
        state={"store": "kafka", "topic": unique_name("_kpg_state")},
    )
    gw = GatewayThread(config)
    with pytest.raises(ConfigError, match=r"upstream\.tls: TLS with .* CERTIFICATE_VERIFY_FAILED"):
        gw.start()
    gw.stop()


def test_wrong_oauth_client_secret_stops_start_up(
    sasl_ssl_upstream: Upstream, audit_logs: pytest.LogCaptureFixture
) -> None:
    """A client secret the token endpoint refuses: the gateway does not start, and says the
    token endpoint answered 401, without the secret."""
    tokens = sasl_ssl_upstream.tokens
    assert tokens is not None
    os.environ["KPG_TEST_WRONG_SECRET"] = "wrong-" + OAUTH_CLIENT_SECRET
    try:
        config = gateway_config(
            sasl_ssl_upstream.front.address,
            upstream={
                "tls": {"ca_file": str(sasl_ssl_upstream.pki / "ca.pem")},
                "sasl": {
                    "mechanism": "OAUTHBEARER",
                    "token_endpoint_url": tokens.url,
                    "client_id": "kpg-oauth",
                    "client_secret_env": "KPG_TEST_WRONG_SECRET",
                },
            },
            audit={"topic": unique_name("_kpg_audit")},
        )
    finally:
        del os.environ["KPG_TEST_WRONG_SECRET"]
    gw = GatewayThread(config)
    with pytest.raises(ConfigError, match=r"upstream\.sasl: token endpoint .*: HTTP 401"):
        gw.start()
    gw.stop()
    assert OAUTH_CLIENT_SECRET not in audit_logs.text


@pytest.mark.unit
def test_upstream_tls_keys(tmp_path: Path) -> None:
    """cert_file and key_file go together; a missing file names its key."""
    pem = tmp_path / "x.pem"
    pem.write_text("-")
    base = {"bootstrap_servers": ["127.0.0.1:9"]}
    with pytest.raises(ConfigError, match=r"upstream\.tls: cert_file and key_file go together"):
        gateway_config([], upstream={**base, "tls": {"cert_file": str(pem)}})
    with pytest.raises(ConfigError, match=r"upstream\.tls\.ca_file: no such file: /nowhere"):
        gateway_config([], upstream={**base, "tls": {"ca_file": "/nowhere"}})
    with pytest.raises(ConfigError, match=r"upstream\.tls\.verify: unknown key"):
        gateway_config([], upstream={**base, "tls": {"verify": False}})
    with pytest.raises(ConfigError, match=r"tls\.principal_mapping_rules: invalid rule"):
        gateway_config(
            [],
            upstream=base,
            tls={"cert_file": str(pem), "key_file": str(pem), "principal_mapping_rules": "x"},
        )
    assert gateway_config([], upstream={**base, "tls": True}).upstream.tls is not None
    assert gateway_config([], upstream={**base, "tls": False}).upstream.tls is None
