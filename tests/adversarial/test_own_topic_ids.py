"""The ids of the gateway's own topics, as the shortcuts by id use them: Produce v13 with no
validated topic, Fetch v13+ and ShareFetch forward a request unread unless its bytes hold one
of those ids. The gateway learns the ids from a Metadata answer on a client's link and keeps
them a minute; an answer that lacks an own topic (not there at that moment, or hidden from
that client by the broker's ACLs) must not be kept, or the topic's id, once it is there or
named by another client, passes unread for that minute.

Against the tapped real broker; the own topic is the audit topic, deleted and created again
straight at the broker to make it missing when the gateway asks (Tansu has no ACLs to hide
it from one client). Tansu takes Produce only to v11: what the gateway forwards of a v13
request is seen at the tap, whatever Tansu then answers.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.adversarial.test_produce_by_topic_id import GOOD, PRODUCE, produce, topic_ids
from tests.support import BrokerTap, GatewayThread, RawClient, gateway_config, outcome, wait_for

pytestmark = pytest.mark.adversarial


@pytest.fixture
def unvalidated(tap: BrokerTap) -> Iterator[tuple[GatewayThread, str]]:
    """A gateway with an audit topic and no validated topic (the unread shortcut is on)."""
    own = f"kpg-audit-{uuid.uuid4().hex[:8]}"
    gw = GatewayThread(gateway_config(tap.address, audit={"topic": own})).start()
    assert wait_for(lambda: topic_ids(tap, [own])[own] is not None)
    try:
        yield gw, own
    finally:
        gw.stop()


def send_v13(gw: GatewayThread, topic_id: uuid.UUID) -> None:
    """A v13 Produce of one good batch to ``topic_id``; the answer (if any) is not read."""
    client = RawClient(gw.bootstrap)
    try:
        client.send(PRODUCE, 13, produce(13, [(topic_id, 0, GOOD)]))
        with contextlib.suppress(ConnectionError, OSError):
            client.recv_frame()
    finally:
        client.close()


def reached_broker(tap: BrokerTap, topic_id: uuid.UUID) -> bool:
    return any(
        getattr(t, "topic_id", None) == topic_id
        for r in tap.forwarded(PRODUCE)
        for t in r.topic_data
    )


def test_an_own_topic_missing_when_the_ids_were_learnt_is_still_refused_by_id(
    tap: BrokerTap, unvalidated: tuple[GatewayThread, str]
) -> None:
    gw, own = unvalidated
    direct = AdminClient({"bootstrap.servers": str(tap.broker)})
    assert outcome(direct.delete_topics([own])[own]) is None
    assert wait_for(lambda: topic_ids(tap, [own])[own] is None)
    # a v13 request the gateway reads (its ids not known yet): it learns the own ids now
    send_v13(gw, uuid.uuid4())
    assert outcome(direct.create_topics([NewTopic(own, 1, 1)])[own]) is None
    assert wait_for(lambda: topic_ids(tap, [own])[own] is not None)
    own_id = topic_ids(tap, [own])[own]
    assert own_id is not None
    tap.requests.clear()
    send_v13(gw, own_id)
    assert not reached_broker(tap, own_id)
