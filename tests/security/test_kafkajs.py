"""KafkaJS over SASL_SSL through the gateway: its own SASL implementation (SaslHandshake v1,
SaslAuthenticate v1; PLAIN and SCRAM written by KafkaJS, not librdkafka) authenticates alice
at the broker (the front of :mod:`tests.security_front`), and the gateway judges her requests
as User:alice."""

from __future__ import annotations

import pytest

from tests.kafkajs import kafkajs, needs_kafkajs
from tests.plugins.kafka_test_policies import RecordingTopicActionPolicy
from tests.security.conftest import ALICE_PASSWORD, Upstream
from tests.security.test_upstream_sasl import secured_gateway
from tests.support import unique_name

pytestmark = [pytest.mark.inproc, needs_kafkajs]


@pytest.mark.parametrize("mechanism", ["plain", "scram-sha-256", "scram-sha-512"])
def test_kafkajs_sasl_principal_is_judged(sasl_ssl_upstream: Upstream, mechanism: str) -> None:
    """An allowed create and produce, a refused 20-partition create (POLICY_VIOLATION, not
    retried), each judged as alice; a wrong password gets nowhere."""
    RecordingTopicActionPolicy.seen.clear()
    front = sasl_ssl_upstream.front
    gw = secured_gateway(sasl_ssl_upstream).start()
    fine, big, never = unique_name("js-sasl"), unique_name("js-big"), unique_name("js-never")
    ca = str(sasl_ssl_upstream.pki / "ca.pem")
    sasl = {"mechanism": mechanism, "username": "alice", "password": ALICE_PASSWORD}
    try:
        run = kafkajs(
            gw.bootstrap,
            {"op": "createTopics", "topics": [{"topic": fine, "numPartitions": 2}]},
            {"op": "produce", "topic": fine, "messages": [{"value": "v"}]},
            {"op": "createTopics", "topics": [{"topic": big, "numPartitions": 20}]},
            caFile=ca,
            sasl=sasl,
        )
        wrong = kafkajs(
            gw.bootstrap,
            {"op": "createTopics", "topics": [{"topic": never, "numPartitions": 1}]},
            caFile=ca,
            sasl=sasl | {"password": "wrong-pw"},
        )
    finally:
        gw.stop()
    created, produced, refused = run["results"]
    assert created["ok"] and produced["ok"], run["results"]
    [error] = refused["error"]["errors"]
    assert (error["type"], error["retriable"]) == ("POLICY_VIOLATION", False)
    assert [(m.topic, m.principal) for m in RecordingTopicActionPolicy.seen] == [
        (fine, "User:alice"),
        (big, "User:alice"),
    ]
    assert (mechanism.upper(), "alice") in front.authenticated
    [failed] = wrong["results"]
    assert failed["error"]["name"] == "KafkaJSSASLAuthenticationError", failed
