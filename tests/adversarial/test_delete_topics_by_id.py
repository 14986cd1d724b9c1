"""DeleteTopics v6 names a topic by name or by id (KIP-516). An entry that gives both names two
topics: the gateway judges one, and a broker that takes the entry deletes whichever it reads
(Tansu the id's). Kafka answers such an entry INVALID_REQUEST ("You may not specify both
topic name and topic id."), so the gateway does too and never forwards it: the protected
topic and the neighbour named beside it both stay, whichever way round they are given.

Topics are created straight at the broker, their ids read from the broker's Metadata; the
tap (the relay between gateway and broker) shows what reached the broker.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.delete_topics.v6 import request as dt
from kio.schema.types import TopicName
from kio.static.primitive import i32Timedelta

from tests.adversarial.test_produce_by_topic_id import topic_ids
from tests.support import BrokerTap, GatewayThread, RawClient, gateway_config, outcome

pytestmark = pytest.mark.adversarial

DELETE_TOPICS = 20
INVALID_REQUEST = 42


@pytest.fixture
def setup(tap: BrokerTap) -> Iterator[tuple[GatewayThread, str, str]]:
    suffix = uuid.uuid4().hex[:8]
    protected, plain = f"keep-{suffix}", f"plain-{suffix}"
    direct = AdminClient({"bootstrap.servers": str(tap.address)})
    for future in direct.create_topics([NewTopic(protected, 1, 1), NewTopic(plain, 1, 1)]).values():
        assert outcome(future) is None
    policies = {"rules": [{"name": "keep", "type": "protected.topics", "topics": ["keep-.*"]}]}
    gw = GatewayThread(gateway_config(tap.address, policies=policies)).start()
    tap.requests.clear()
    try:
        yield gw, protected, plain
    finally:
        gw.stop()


@pytest.mark.parametrize("by_name", ["protected", "plain"])
def test_an_entry_naming_a_topic_and_another_topics_id_is_refused(
    setup: tuple[GatewayThread, str, str], tap: BrokerTap, by_name: str
) -> None:
    gw, protected, plain = setup
    named, by_id = (protected, plain) if by_name == "protected" else (plain, protected)
    topic_id = topic_ids(tap, [by_id])[by_id]
    assert topic_id is not None
    request = dt.DeleteTopicsRequest(
        topics=(dt.DeleteTopicState(name=TopicName(named), topic_id=topic_id),),
        timeout=i32Timedelta.parse(timedelta(seconds=5)),
    )
    client = RawClient(gw.bootstrap)
    try:
        answer = client.request(DELETE_TOPICS, 6, request)
    finally:
        client.close()
    [(code, message, name, answered_id)] = [
        (int(r.error_code), r.error_message, r.name, r.topic_id) for r in answer.responses
    ]
    assert code == INVALID_REQUEST
    assert message == "You may not specify both topic name and topic id."
    assert (name, answered_id) == (named, topic_id)
    assert not tap.forwarded(DELETE_TOPICS)
    assert all(topic_ids(tap, [protected, plain]).values())
