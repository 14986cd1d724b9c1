"""Two gateways sharing one state store (``state.store: kafka``), as two instances in front of
one cluster: a topic created through one with a record.validation.policy is validated through
the other from its first record.

The race: the creating gateway writes the policy to the state topic, then creates the topic;
the other learns of the write with its next fetch of the state topic. Tansu holds every fetch
for its full wait (``state.refresh_interval_s``, 5 s for gateway B here), so B's view lags by
up to that long, and a record produced through B right after the creation found no policy and
was written unvalidated. B now catches up with the store before every Produce (see
:mod:`gateway.handlers.produce`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.config import HostPort
from tests.support import GatewayThread, gateway_config, unique_name

pytestmark = pytest.mark.inproc


@pytest.fixture
def two_gateways(broker: HostPort) -> Iterator[tuple[GatewayThread, GatewayThread]]:
    state_topic = f"kpg-state-{uuid.uuid4().hex[:10]}"

    def shared(refresh_interval_s: float) -> GatewayThread:
        state = {"store": "kafka", "topic": state_topic, "refresh_interval_s": refresh_interval_s}
        return GatewayThread(gateway_config(broker, state=state)).start()

    a = shared(0.2)
    try:
        b = shared(5.0)
        try:
            yield a, b
        finally:
            b.stop()
    finally:
        a.stop()


def records_at(broker: HostPort, topic: str) -> int:
    """How many records partition 0 of ``topic`` holds, asked of the broker itself."""
    consumer = Consumer({"bootstrap.servers": str(broker), "group.id": uuid.uuid4().hex})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(high - low)
    finally:
        consumer.close()


def test_a_topic_created_through_one_gateway_is_validated_through_the_other_at_once(
    broker: HostPort, two_gateways: tuple[GatewayThread, GatewayThread]
) -> None:
    a, b = two_gateways
    topic = unique_name("shared")
    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    created = NewTopic(topic, 1, 1, config={"record.validation.policy": "trace-id"})
    admin.create_topics([created])[topic].result(15)

    producer = Producer({"bootstrap.servers": b.bootstrap, "retries": 0})
    errors: list[KafkaError | None] = []
    producer.produce(topic, b"no trace-id header", on_delivery=lambda e, _m: errors.append(e))
    assert producer.flush(30) == 0

    (error,) = errors
    assert error is not None and error.code() == KafkaError.INVALID_RECORD, error
    assert records_at(broker, topic) == 0
