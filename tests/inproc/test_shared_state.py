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

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.config import HostPort
from tests.support import GatewayThread, records_at, unique_name

pytestmark = pytest.mark.inproc


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
