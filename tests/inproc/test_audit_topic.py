"""The audit topic sink: decisions land in a topic on the real broker, in the spool's schema."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.config import HostPort
from spark_audit.event import AuditEvent
from tests.support import GatewayThread, gateway_config

pytestmark = pytest.mark.inproc

PLUGINS = str(Path(__file__).resolve().parents[1] / "plugins")


def test_decisions_land_in_the_audit_topic(broker: HostPort) -> None:
    audit_topic = f"kpg-audit-{uuid.uuid4().hex[:6]}"
    gw = GatewayThread(
        gateway_config(
            broker,
            audit={"topic": audit_topic},
            policies={
                "create.topic.policy.class.name": "kafka_test_policies.KafkaLikeCreateTopicPolicy",
                "create.topic.policy.class.path": PLUGINS,
            },
        )
    ).start()
    denied, allowed = f"few-{uuid.uuid4().hex[:6]}", f"many-{uuid.uuid4().hex[:6]}"
    try:
        admin = AdminClient({"bootstrap.servers": gw.bootstrap})
        futures = admin.create_topics([NewTopic(denied, 2, 1), NewTopic(allowed, 5, 1)])
        futures[allowed].result(15)
        with pytest.raises(KafkaException):
            futures[denied].result(15)
    finally:
        gw.stop()

    consumer = Consumer({"bootstrap.servers": str(broker), "group.id": uuid.uuid4().hex})
    consumer.assign([TopicPartition(audit_topic, 0, 0)])
    events: list[AuditEvent] = []
    deadline = time.monotonic() + 20
    try:
        # start, the two decisions, stop
        while len(events) < 4 and time.monotonic() < deadline:
            msg = consumer.poll(0.3)
            if msg is not None and msg.error() is None:
                event = AuditEvent.from_json(msg.value())
                assert msg.key() == event.event_id.encode()
                events.append(event)
    finally:
        consumer.close()
    assert [(e.kind, e.action) for e in (events[0], events[-1])] == [
        ("lifecycle", "start"),
        ("lifecycle", "stop"),
    ]
    by_topic = {e.resource_name: e for e in events if e.kind == "decision"}
    assert set(by_topic) == {denied, allowed}
    assert by_topic[denied].verdict == "denied" and by_topic[denied].error_code == 44
    assert by_topic[denied].message == "Topics should have at least 5 partitions, received 2"
    assert by_topic[allowed].verdict == "allowed" and by_topic[allowed].api == "CreateTopics"
