"""Two CreateTopics of one topic at once, each with a ``record.validation.policy``: the gateway
stores a topic's policy before the broker creates it, and puts back the value it read before
(``previous``) when the broker does not create it. A create that lost to another put back
what it read before the winner stored its policy: nothing, for a new topic. The winner's topic
then had no policy, and its records reached the broker unvalidated. The loser now puts back
its previous value only while no one has written the topic's policy since it did; both cases
here (the same value as the winner's, another) leave the winner's policy.

The loser's request is kept in the tap (recorded, not forwarded) from the moment the gateway
sends it to the broker, so the winner, through a second gateway on the same state file (the
workers of ``kpg run`` share one), reaches the broker first: an order any two clients, or one
client on two connections, may get by chance, made certain here.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from kio.schema.delete_topics.v4.request import DeleteTopicsRequest
from kio.schema.types import TopicName
from kio.static.primitive import i32Timedelta

from gateway.record_validation import VALIDATION_POLICY_KEY
from protocol.codec import decode_response
from tests.adversarial.conftest import gateways_on_one_state
from tests.adversarial.test_produce_by_topic_id import NO_HEADER, codes, produce, topic_ids
from tests.support import (
    BrokerTap,
    GatewayThread,
    RawClient,
    create_topic_request,
    wait_for,
)

pytestmark = pytest.mark.adversarial

CREATE_TOPICS = 19
DELETE_TOPICS = 20
TOPIC_ALREADY_EXISTS = 36
INVALID_RECORD = 87
TIMEOUT = i32Timedelta.parse(timedelta(seconds=10))


def topic_exists(tap: BrokerTap, topic: str) -> bool:
    """Whether the broker itself (asked straight) has ``topic``."""
    return topic_ids(tap, [topic])[topic] is not None


@pytest.fixture(params=["sqlite", "kafka"])
def gateways(
    request: pytest.FixtureRequest, tap: BrokerTap, tmp_path: Path
) -> Iterator[tuple[GatewayThread, GatewayThread]]:
    """On a SQLite file (as the workers of one ``kpg run`` share it) or a state topic (as
    gateways on several hosts do)."""
    state: dict[str, str] = {"path": str(tmp_path / "state.db")}
    if request.param == "kafka":
        state = {"store": "kafka", "topic": f"_kpg_state_{uuid.uuid4().hex[:8]}"}
    with gateways_on_one_state(tap, state) as both:
        yield both


@pytest.mark.parametrize("loser_policy", ["trace-id", "key-required"])
def test_a_create_that_loses_a_race_leaves_the_winners_policy(
    tap: BrokerTap, gateways: tuple[GatewayThread, GatewayThread], loser_policy: str
) -> None:
    through_tap, straight = gateways
    topic = f"race-{uuid.uuid4().hex[:8]}"
    tap.hold_requests(CREATE_TOPICS)
    loser = RawClient(through_tap.bootstrap, timeout=20)
    winner = RawClient(straight.bootstrap, timeout=20)
    try:
        loser.send(
            CREATE_TOPICS,
            7,
            create_topic_request(topic, configs=((VALIDATION_POLICY_KEY, loser_policy),)),
        )
        assert wait_for(
            lambda: any(t.name == topic for r in tap.forwarded(CREATE_TOPICS) for t in r.topics)
        )
        won = winner.request(
            CREATE_TOPICS,
            7,
            create_topic_request(topic, configs=((VALIDATION_POLICY_KEY, "trace-id"),)),
        )
        assert [int(t.error_code) for t in won.topics] == [0]
        tap.release_requests()
        lost = decode_response(CREATE_TOPICS, 7, loser.recv_frame())
    finally:
        loser.close()
        winner.close()
    assert [int(t.error_code) for t in lost.topics] == [TOPIC_ALREADY_EXISTS]
    # the winner's topic keeps its policy: a record without the trace-id header is refused
    assert codes(straight, 9, produce(9, [(topic, 0, NO_HEADER)])) == [(0, INVALID_RECORD)]


def test_a_delete_answered_late_does_not_forget_the_policy_of_the_topic_created_since(
    tap: BrokerTap, sqlite_gateways: tuple[GatewayThread, GatewayThread]
) -> None:
    """A DeleteTopics of a validated topic forgets its policy once the broker's answer is
    back. When the topic is created again, with a policy, between the broker's deletion and
    that answer reaching the gateway, the late forgetting took the new topic's policy: its
    records reached the broker unvalidated. Here the delete's answer is held in the tap while
    the topic is created again through the other gateway."""
    through_tap, straight = sqlite_gateways
    topic = f"again-{uuid.uuid4().hex[:8]}"
    creator = RawClient(straight.bootstrap, timeout=20)
    deleter = RawClient(through_tap.bootstrap, timeout=20)
    try:
        first = creator.request(
            CREATE_TOPICS,
            7,
            create_topic_request(topic, configs=((VALIDATION_POLICY_KEY, "trace-id"),)),
        )
        assert [int(t.error_code) for t in first.topics] == [0]
        tap.hold_requests(DELETE_TOPICS)
        deleter.send(
            DELETE_TOPICS, 4, DeleteTopicsRequest(topic_names=(TopicName(topic),), timeout=TIMEOUT)
        )
        assert wait_for(lambda: any(topic in r.topic_names for r in tap.forwarded(DELETE_TOPICS)))
        tap.hold_answers()
        tap.release_requests()
        assert wait_for(lambda: not topic_exists(tap, topic))
        again = creator.request(
            CREATE_TOPICS,
            7,
            create_topic_request(topic, configs=((VALIDATION_POLICY_KEY, "trace-id"),)),
        )
        assert [int(t.error_code) for t in again.topics] == [0]
        tap.release_answers()
        deleted = decode_response(DELETE_TOPICS, 4, deleter.recv_frame())
    finally:
        tap.release_answers()
        creator.close()
        deleter.close()
    assert [int(r.error_code) for r in deleted.responses] == [0]
    assert codes(straight, 9, produce(9, [(topic, 0, NO_HEADER)])) == [(0, INVALID_RECORD)]
