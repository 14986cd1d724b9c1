"""Routes around a record.validation.policy between gateway instances that share one state
store (``state.store: kafka``).

Gateway B learns of a policy written through gateway A when its tail of the state topic next
fetches it: Tansu holds every fetch for its full wait, ``state.refresh_interval_s`` (5 s for
B here). A writes a topic's policy before it creates the topic, so B catches up with the store
before a Produce and knows it. B used to do so only before the first Produce to a topic it had
not met, remembering the name: a topic produced to through B, then deleted and created again
with a policy through A, was met already, and the client's next records went through B
unvalidated for as long as B's view lagged. (The same held for a Produce naming a topic before
it existed, on a broker that answers it UNKNOWN_TOPIC_OR_PARTITION; Tansu creates the topic
instead, so that case cannot be shown here.)

Each case produces raw through B and asks the broker itself what its topic holds.
"""

from __future__ import annotations

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kio.schema.errors import ErrorCode

from gateway.config import HostPort
from gateway.record_validation import STATE_NAMESPACE
from tests.batches import one_record_batch, produce_v9
from tests.support import (
    GatewayThread,
    RawClient,
    existing_topics,
    records_at,
    unique_name,
    wait_for,
)

pytestmark = pytest.mark.adversarial

PRODUCE = 0
POLICY = "trace-id"
"""A record without a ``trace-id`` header is refused: :func:`one_record_batch` has none."""


def produce_error(client: RawClient, topic: str) -> ErrorCode:
    """Produce one record without a trace-id header to partition 0 of ``topic``; the error."""
    answer = client.request(PRODUCE, 9, produce_v9({topic: {0: one_record_batch()}}))
    ((partition,),) = (t.partition_responses for t in answer.responses)
    return ErrorCode(partition.error_code)


def test_a_topic_deleted_and_created_again_with_a_policy_is_met_anew(
    broker: HostPort, two_gateways: tuple[GatewayThread, GatewayThread]
) -> None:
    a, b = two_gateways
    topic = unique_name("recreated")
    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    client = RawClient(b.bootstrap, timeout=30)
    try:
        assert produce_error(client, topic) == ErrorCode.none
        admin.delete_topics([topic])[topic].result(15)
        assert wait_for(lambda: topic not in existing_topics(str(broker)), 15)
        created = NewTopic(topic, 1, 1, config={"record.validation.policy": POLICY})
        admin.create_topics([created])[topic].result(15)

        assert produce_error(client, topic) == ErrorCode.invalid_record
    finally:
        client.close()
    assert records_at(broker, topic) == 0


def test_a_policy_set_again_through_another_instance_after_its_delete_is_stored(
    two_gateways: tuple[GatewayThread, GatewayThread],
) -> None:
    """B judged a change of record.validation.policy against the value it had last read: a
    SET of the value B still held, deleted meanwhile through A, was a change of nothing to
    B, answered OK and never stored, and the topic stayed unvalidated. B now catches up with
    the store before it judges a topic's config change."""
    a, b = two_gateways
    topic = unique_name("reset")
    admin_a = AdminClient({"bootstrap.servers": a.bootstrap})
    created = NewTopic(topic, 1, 1, config={"record.validation.policy": POLICY})
    admin_a.create_topics([created])[topic].result(15)
    assert wait_for(lambda: b.gateway.state.get(STATE_NAMESPACE, topic) == POLICY, 30)

    def alter(admin: AdminClient, op: AlterConfigOpType) -> None:
        entry = ConfigEntry("record.validation.policy", POLICY, incremental_operation=op)
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
        admin.incremental_alter_configs([resource])[resource].result(15)

    alter(admin_a, AlterConfigOpType.DELETE)
    assert a.gateway.state.get(STATE_NAMESPACE, topic) is None
    alter(AdminClient({"bootstrap.servers": b.bootstrap}), AlterConfigOpType.SET)

    assert wait_for(lambda: a.gateway.state.get(STATE_NAMESPACE, topic) == POLICY, 15)
