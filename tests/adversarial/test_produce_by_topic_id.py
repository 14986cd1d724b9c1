"""Produce v13 names topics by id (KIP-516): no route around a rule that stops the same Produce
by name (v9). Each case sends the v9 request and the v13 request naming the same topic by its
id, through the real gateway in front of the real broker with the tap between them, and
checks both get the same refusal and that neither reached the broker.

The test broker (Tansu) takes Produce only to v11, so the gateway does not advertise v13 in
front of it; a client that sends v13 anyway is judged all the same. Every case here refuses
every partition, so nothing is forwarded and Tansu's lack of v13 plays no part; a v13 request
that is partly forwarded is shown with a scripted upstream (tests/inproc/
test_leader_endpoints.py). Topics are created straight at the broker (the own topic by the
gateway at start), their ids read from the broker's Metadata.
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32, i32Timedelta

from gateway.record_validation import STATE_NAMESPACE
from tests.batches import batch_with, record
from tests.support import BrokerTap, GatewayThread, RawClient, gateway_config, outcome, wait_for

pytestmark = pytest.mark.adversarial

TIMEOUT = i32Timedelta.parse(timedelta(seconds=5))
INVALID_RECORD = 87
TOPIC_AUTHORIZATION_FAILED = 29
UNKNOWN_TOPIC_ID = 100
INVALID_TOPIC_EXCEPTION = 17
PRODUCE = 0

GOOD = batch_with("none", (record(0, b"k", b"v", ((b"trace-id", b"t"),)),), idempotent=False)
NO_HEADER = batch_with("lz4", (record(0, b"k", b"v", ()),), idempotent=False)
"""Fails the ``trace-id`` rule of the validated topic."""


@dataclass(frozen=True)
class Topics:
    validated: str
    own: str


@pytest.fixture
def setup(tap: BrokerTap) -> Iterator[tuple[GatewayThread, Topics, BrokerTap]]:
    suffix = uuid.uuid4().hex[:8]
    topics = Topics(validated=f"v13-{suffix}", own=f"kpg-audit-{suffix}")
    direct = AdminClient({"bootstrap.servers": str(tap.address)})
    for future in direct.create_topics([NewTopic(topics.validated, 1, 1)]).values():
        assert outcome(future) is None
    gw = GatewayThread(gateway_config(tap.address, audit={"topic": topics.own})).start()
    gw.run(gw.gateway.state.put(STATE_NAMESPACE, topics.validated, "trace-id"))
    assert wait_for(lambda: all(topic_ids(tap, [topics.validated, topics.own]).values()))
    tap.requests.clear()
    try:
        yield gw, topics, tap
    finally:
        gw.stop()


def topic_ids(tap: BrokerTap, names: list[str]) -> dict[str, uuid.UUID | None]:
    """The ids the broker gives ``names`` (asked straight, not through the gateway)."""
    client = RawClient(str(tap.broker))
    try:
        answer = client.request(
            3,
            12,
            MetadataRequest(
                topics=tuple(MetadataRequestTopic(topic_id=None, name=TopicName(n)) for n in names),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
        )
    finally:
        client.close()
    return {
        str(t.name): (t.topic_id if t.error_code == 0 and t.topic_id else None)
        for t in answer.topics
    }


def produce(version: int, partitions: list[tuple[Any, int, bytes]]) -> Any:
    """(topic name, or id from v13; partition; records) each, acks=all."""
    m = importlib.import_module(f"kio.schema.produce.v{version}.request")
    return m.ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=TIMEOUT,
        topic_data=tuple(
            m.TopicProduceData(
                **({"topic_id": topic} if version >= 13 else {"name": TopicName(topic)}),
                partition_data=(m.PartitionProduceData(index=i32(index), records=records),),
            )
            for topic, index, records in partitions
        ),
    )


def codes(gw: GatewayThread, version: int, request: Any) -> list[tuple[int, int]]:
    """(partition, error code) of every partition answered, in answer order."""
    client = RawClient(gw.bootstrap)
    try:
        answer = client.request(PRODUCE, version, request)
    finally:
        client.close()
    return [
        (int(p.index), int(p.error_code)) for t in answer.responses for p in t.partition_responses
    ]


def produced(tap: BrokerTap, own: str) -> list[Any]:
    """The Produce requests that reached the broker, less the gateway's own audit events."""
    return [
        r
        for r in tap.forwarded(PRODUCE)
        if [getattr(t, "name", None) for t in r.topic_data] != [own]
    ]


def test_records_a_validated_topic_refuses_by_name_are_refused_by_id(
    setup: tuple[GatewayThread, Topics, BrokerTap],
) -> None:
    gw, topics, tap = setup
    topic_id = topic_ids(tap, [topics.validated])[topics.validated]
    assert codes(gw, 9, produce(9, [(topics.validated, 0, NO_HEADER)])) == [(0, INVALID_RECORD)]
    assert codes(gw, 13, produce(13, [(topic_id, 0, NO_HEADER)])) == [(0, INVALID_RECORD)]
    assert produced(tap, topics.own) == []
    # counted (and audited) under the topic's name, as by name
    assert rejected_batches(gw) == {topics.validated: 2.0}


def rejected_batches(gw: GatewayThread) -> dict[str, float]:
    """``kpg_batches_rejected_total`` by topic label."""
    found: dict[str, float] = {}
    for metric in gw.gateway.metrics.registry.collect():
        for sample in metric.samples:
            if sample.name == "kpg_batches_rejected_total":
                topic = sample.labels["topic"]
                found[topic] = found.get(topic, 0.0) + sample.value
    return found


def test_a_topic_id_repeated_cannot_smuggle_a_bad_batch_beside_a_good_one(
    setup: tuple[GatewayThread, Topics, BrokerTap],
) -> None:
    """The same partition twice in one request, a good batch then a bad one: as by name,
    the partition is refused, and nothing of it is written."""
    gw, topics, tap = setup
    topic_id = topic_ids(tap, [topics.validated])[topics.validated]
    by_name = [(topics.validated, 0, GOOD), (topics.validated, 0, NO_HEADER)]
    by_id = [(topic_id, 0, GOOD), (topic_id, 0, NO_HEADER)]
    assert codes(gw, 9, produce(9, by_name)) == [(0, INVALID_RECORD)]
    assert codes(gw, 13, produce(13, by_id)) == [(0, INVALID_RECORD)]
    assert produced(tap, topics.own) == []


def test_the_gateways_own_topic_is_not_written_by_id(
    setup: tuple[GatewayThread, Topics, BrokerTap],
) -> None:
    gw, topics, tap = setup
    own_id = topic_ids(tap, [topics.own])[topics.own]
    assert codes(gw, 9, produce(9, [(topics.own, 0, GOOD)])) == [(0, TOPIC_AUTHORIZATION_FAILED)]
    assert codes(gw, 13, produce(13, [(own_id, 0, GOOD)])) == [(0, TOPIC_AUTHORIZATION_FAILED)]
    # and again, now that the gateway has learnt its own topics' ids (the unread shortcut)
    assert codes(gw, 13, produce(13, [(own_id, 0, GOOD)])) == [(0, TOPIC_AUTHORIZATION_FAILED)]
    assert produced(tap, topics.own) == []


def test_an_id_no_topic_has_is_not_forwarded(
    setup: tuple[GatewayThread, Topics, BrokerTap],
) -> None:
    """As an illegal name by name (INVALID_TOPIC_EXCEPTION), an id the cluster does not know
    never reaches the broker: UNKNOWN_TOPIC_ID, as Kafka answers it. The null id too."""
    gw, topics, tap = setup
    assert codes(gw, 9, produce(9, [("bad/name", 0, GOOD)])) == [(0, INVALID_TOPIC_EXCEPTION)]
    for unknown in (uuid.uuid4(), uuid.UUID(int=0)):
        assert codes(gw, 13, produce(13, [(unknown, 0, GOOD)])) == [(0, UNKNOWN_TOPIC_ID)]
    assert produced(tap, topics.own) == []


def test_a_topic_created_after_the_ids_were_learnt_is_judged_by_its_name(
    setup: tuple[GatewayThread, Topics, BrokerTap],
) -> None:
    """The gateway keeps the ids it learnt; an id it has not seen makes it ask again, so a new
    validated topic is validated from its first Produce by id that reaches the broker. (The
    gateway asks at most ten times a second; meanwhile the id gets UNKNOWN_TOPIC_ID, not
    forwarded, which a client retries as the test does.)"""
    gw, topics, tap = setup
    first_id = topic_ids(tap, [topics.validated])[topics.validated]
    assert codes(gw, 13, produce(13, [(first_id, 0, NO_HEADER)])) == [(0, INVALID_RECORD)]
    later = f"{topics.validated}-later"
    direct = AdminClient({"bootstrap.servers": str(tap.broker)})
    for future in direct.create_topics([NewTopic(later, 1, 1)]).values():
        assert outcome(future) is None
    gw.run(gw.gateway.state.put(STATE_NAMESPACE, later, "trace-id"))
    assert wait_for(lambda: topic_ids(tap, [later])[later] is not None)
    later_id = topic_ids(tap, [later])[later]
    tap.requests.clear()
    answers = []

    def answered() -> bool:
        answers.append(codes(gw, 13, produce(13, [(later_id, 0, NO_HEADER)])))
        return answers[-1] != [(0, UNKNOWN_TOPIC_ID)]

    assert wait_for(answered)
    assert answers[-1] == [(0, INVALID_RECORD)]
    assert produced(tap, topics.own) == []
