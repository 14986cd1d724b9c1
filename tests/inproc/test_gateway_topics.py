"""The gateway's own topics (the Kafka state store, the audit topic) are not the clients'."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from gateway.config import HostPort
from tests.support import GatewayThread, gateway_config

pytestmark = pytest.mark.inproc


def test_clients_cannot_write_or_delete_the_gateways_topics(broker: HostPort) -> None:
    state_topic, audit_topic = (
        f"_kpg_state_{uuid.uuid4().hex[:6]}",
        f"_kpg_audit_{uuid.uuid4().hex[:6]}",
    )
    gw = GatewayThread(
        gateway_config(
            broker, state={"store": "kafka", "topic": state_topic}, audit={"topic": audit_topic}
        )
    ).start()
    try:
        producer = Producer({"bootstrap.servers": gw.bootstrap, "linger.ms": 0, "retries": 0})
        errors: list[KafkaError | None] = []
        for topic in (state_topic, audit_topic):
            producer.produce(
                topic, b"forged", partition=0, on_delivery=lambda e, m: errors.append(e)
            )
            producer.flush(15)
        assert [e.code() if e else None for e in errors] == [
            KafkaError.TOPIC_AUTHORIZATION_FAILED
        ] * 2
        admin = AdminClient({"bootstrap.servers": gw.bootstrap})
        for topic, future in admin.delete_topics([state_topic, audit_topic]).items():
            with pytest.raises(KafkaException) as raised:
                future.result(15)
            assert raised.value.args[0].code() == KafkaError.POLICY_VIOLATION, topic
        assert {state_topic, audit_topic} <= set(admin.list_topics(timeout=10).topics)
    finally:
        gw.stop()
