"""TLS on both legs: clients reach the gateway over TLS, the gateway reaches the brokers over
TLS with its own client certificate (mTLS), on every connection it opens: client links,
per-node links, the state store and the audit sink. The broker side is the test broker behind
:mod:`tests.security_front` (Tansu cannot listen on TLS; see there)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.config import ConfigError
from tests.plugins.kafka_test_policies import RecordingTopicActionPolicy
from tests.security.conftest import Upstream
from tests.support import GatewayThread, gateway_config, ssl_client, unique_name

pytestmark = pytest.mark.inproc

POLICIES = {
    "rules": [{"name": "max-partitions", "type": "partitions", "max": 8}],
    "topic.action.policy.class.name": (
        "tests.plugins.kafka_test_policies.RecordingTopicActionPolicy"
    ),
}


def upstream_tls(pki: Path, **extra: Any) -> dict[str, Any]:
    return {
        "ca_file": str(pki / "ca.pem"),
        "cert_file": str(pki / "kpg.pem"),
        "key_file": str(pki / "kpg.key"),
        **extra,
    }


def listener_tls(pki: Path, client_auth: str = "required", **extra: Any) -> dict[str, Any]:
    return {
        "cert_file": str(pki / "server.pem"),
        "key_file": str(pki / "server.key"),
        "ca_file": str(pki / "ca.pem"),
        "client_auth": client_auth,
        **extra,
    }


def produce_consume_deny(config: dict[str, str]) -> str:
    """Create a topic, produce to it, read it back, and have a CreateTopics of 20 partitions
    refused by the policy; returns the topic."""
    topic = unique_name("sec")
    admin = AdminClient(config)
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    producer = Producer({**config, "linger.ms": 5})
    values = [f"v{i}".encode() for i in range(20)]
    for i, value in enumerate(values):
        producer.produce(topic, key=str(i).encode(), value=value)
    assert producer.flush(30) == 0
    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4().hex[:8]}"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < len(values) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
    finally:
        consumer.close()
    assert sorted(got) == sorted(values)
    big = unique_name("big")
    with pytest.raises(KafkaException) as refused:
        admin.create_topics([NewTopic(big, 20, 1)])[big].result(30)
    error: KafkaError = refused.value.args[0]
    assert error.code() == KafkaError.POLICY_VIOLATION
    assert "above the maximum of 8" in error.str()
    return topic


def test_ssl_both_legs_with_principal_mapping(tls_upstream: Upstream) -> None:
    """confluent-kafka with a client certificate: produce, consume, a policy denial; the
    principal is the certificate's CN by ssl.principal.mapping.rules; every connection the
    gateway made to the broker was TLS with the gateway's own certificate, per-node links
    included (the broker front requires one)."""
    pki = tls_upstream.pki
    # The front is a real TLS listener: a gateway without upstream.tls gets nowhere.
    plain = GatewayThread(gateway_config(tls_upstream.front.address)).start()
    try:
        with pytest.raises(KafkaException):
            AdminClient({"bootstrap.servers": plain.bootstrap}).list_topics(timeout=5)
    finally:
        plain.stop()
    RecordingTopicActionPolicy.seen.clear()
    before = tls_upstream.front.connections
    config = gateway_config(
        tls_upstream.front.address,
        upstream={"tls": upstream_tls(pki)},
        tls=listener_tls(pki, principal_mapping_rules="RULE:^CN=([^,]*),OU=eng,.*$/$1/L"),
        policies=POLICIES,
    )
    gw = GatewayThread(config).start()
    try:
        topic = produce_consume_deny(ssl_client(gw.bootstrap, pki, "alice"))
        (seen,) = [m for m in RecordingTopicActionPolicy.seen if m.topic == topic]
        assert seen.principal == "User:alice"
        # mallory's certificate is signed by the CA but no rule maps it: refused.
        outsider = AdminClient(ssl_client(gw.bootstrap, pki, "mallory"))
        with pytest.raises(KafkaException):
            outsider.list_topics(timeout=5)
        assert gw.metric("kpg_rejected_frames_total", reason="principal_mapping") >= 1
        # The producer and consumer went through a node listener, so over a per-node link.
        assert gw.metric("kpg_connections_total", listener="node-111") >= 1
    finally:
        gw.stop()
    subjects = tls_upstream.front.client_subjects[before:]
    assert len(subjects) >= 2  # the bootstrap link and at least one node link
    assert set(subjects) == {"kpg-gateway"}


def test_hostname_is_checked(tls_upstream: Upstream, caplog: pytest.LogCaptureFixture) -> None:
    """The broker's certificate names 127.0.0.1 and localhost; dialled as 127.0.0.2 it does
    not match, so the link fails unless check_hostname is switched off."""
    pki = tls_upstream.pki
    address = f"127.0.0.2:{tls_upstream.front.port}"
    for check, reachable in ((True, False), (False, True)):
        config = gateway_config(
            [],
            upstream={
                "bootstrap_servers": [address],
                "tls": upstream_tls(pki, check_hostname=check),
            },
        )
        gw = GatewayThread(config).start()
        try:
            admin = AdminClient({"bootstrap.servers": gw.bootstrap})
            if reachable:
                assert admin.list_topics(timeout=15).brokers
            else:
                with pytest.raises(KafkaException):
                    admin.list_topics(timeout=5)
                assert "IP address mismatch" in caplog.text
        finally:
            gw.stop()


def test_state_store_and_audit_topic_over_tls(tls_upstream: Upstream, tmp_path: Path) -> None:
    """state.store kafka and audit.topic on the TLS upstream: the gateway starts (both load),
    a change of a topic's record.validation.policy is kept in the state topic and the
    denial is in the audit topic, read back over TLS."""
    pki = tls_upstream.pki
    state_topic, audit_topic = unique_name("_kpg_state"), unique_name("_kpg_audit")
    config = gateway_config(
        tls_upstream.front.address,
        upstream={"tls": upstream_tls(pki)},
        state={"store": "kafka", "topic": state_topic},
        audit={"topic": audit_topic, "instance": "kpg-tls"},
        policies=POLICIES,
    )
    gw = GatewayThread(config).start()
    try:
        gw.run(gw.gateway.state.put("test", "key", "value"))
        assert gw.gateway.state.get("test", "key") == "value"
        admin = AdminClient({"bootstrap.servers": gw.bootstrap})
        big = unique_name("big")
        with pytest.raises(KafkaException):
            admin.create_topics([NewTopic(big, 20, 1)])[big].result(30)
    finally:
        gw.stop()
    direct = {
        "bootstrap.servers": tls_upstream.bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki / "ca.pem"),
        "ssl.certificate.location": str(pki / "kpg.pem"),
        "ssl.key.location": str(pki / "kpg.key"),
    }
    assert {"test\x00key": "value"}.items() <= read_topic(direct, state_topic).items()
    audited = read_topic(direct, audit_topic)
    assert any(big in value and "max-partitions" in value for value in audited.values())


def read_topic(config: dict[str, str], topic: str) -> dict[str, str]:
    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4().hex[:8]}"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: dict[str, str] = {}
    quiet_since = time.monotonic()
    try:
        while time.monotonic() - quiet_since < 5:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                found[(message.key() or b"").decode()] = (message.value() or b"").decode()
                quiet_since = time.monotonic()
    finally:
        consumer.close()
    return found


@pytest.mark.unit
def test_bad_upstream_tls_files_stop_start_up(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    config = gateway_config(
        [], upstream={"bootstrap_servers": ["127.0.0.1:9"], "tls": {"ca_file": str(bad)}}
    )
    from gateway.server import Gateway

    with pytest.raises(ConfigError, match="upstream.tls: cannot load certificates"):
        Gateway(config)


def test_readyz_asks_the_brokers_over_tls_as_every_other_connection(
    tls_upstream: Upstream,
) -> None:
    """The readiness probe is a connection to the brokers too: over upstream.tls it is ready
    (a plaintext probe of the TLS front would never be)."""
    pki = tls_upstream.pki
    config = gateway_config(
        tls_upstream.front.address,
        upstream={"tls": upstream_tls(pki)},
        metrics="127.0.0.1:0",
    )
    gw = GatewayThread(config).start()
    try:
        readiness = gw.gateway.readiness()
        assert readiness.ready, readiness.reason
    finally:
        gw.stop()
