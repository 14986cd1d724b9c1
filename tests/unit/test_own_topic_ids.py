"""TopicNamesById, as the shortcuts by id use it (Fetch v13+, ShareFetch, ShareAcknowledge):
a request goes on unread only when every id it names was learnt to name a topic that is not
the gateway's own. An id names one topic forever, so that holds with no expiry; an id not
learnt (an own topic made again, or one a client's view lacked) is never trusted. Answers
add up (views narrowed by ACLs differ), within a bound."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping

import pytest

from gateway.handlers import _partitioned
from gateway.handlers._partitioned import TopicNamesById

pytestmark = pytest.mark.unit

STATE, AUDIT, ORDERS = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
OWN = frozenset({"_state", "_audit"})


@pytest.fixture(autouse=True)
def no_gateway_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's links ask in quick succession: the gateway-wide interval (a tenth of a
    second) is not what these tests are about; the interval of one link is kept."""
    monkeypatch.setattr(_partitioned, "_GATEWAY_ASK_INTERVAL_S", 0.0)


class Cluster:
    """Only what TopicNamesById asks: every topic's id and name, as one client's link sees
    it."""

    def __init__(self, by_id: Mapping[uuid.UUID, str]) -> None:
        self.by_id = by_id
        self.asked = 0

    async def describe_all_topics(self) -> tuple[Mapping[str, object], Mapping[uuid.UUID, str]]:
        self.asked += 1
        return {}, self.by_id


def resolve(
    names: TopicNamesById, cluster: Cluster, *ids: uuid.UUID
) -> dict[uuid.UUID, str | None]:
    return asyncio.run(names.resolve(cluster, ids))  # type: ignore[arg-type]


def test_only_ids_learnt_as_other_topics_pass_unread() -> None:
    names = TopicNamesById(OWN)
    assert not names.all_others([ORDERS.bytes], b"")  # nothing learnt yet
    cluster = Cluster({STATE: "_state", ORDERS: "orders"})
    assert resolve(names, cluster, ORDERS) == {ORDERS: "orders"}
    assert names.all_others([ORDERS.bytes], b"request naming " + ORDERS.bytes)
    assert not names.all_others([STATE.bytes], STATE.bytes)
    # an own id anywhere in the request's bytes is read, whatever the walk found
    assert not names.all_others([ORDERS.bytes], ORDERS.bytes + STATE.bytes)
    # the audit topic's id, hidden from that view, is not known: never passed unread, alone
    # or beside a known one
    assert not names.all_others([AUDIT.bytes], AUDIT.bytes)
    assert not names.all_others([ORDERS.bytes, AUDIT.bytes], ORDERS.bytes + AUDIT.bytes)


def test_an_own_topic_made_again_is_not_taken_for_another_topic() -> None:
    names = TopicNamesById(OWN)
    resolve(names, Cluster({AUDIT: "_audit", ORDERS: "orders"}), ORDERS)
    made_again = uuid.uuid4()
    assert not names.all_others([made_again.bytes], made_again.bytes)
    later = Cluster({made_again: "_audit", ORDERS: "orders"})
    assert resolve(names, later, made_again) == {made_again: "_audit"}
    assert not names.all_others([made_again.bytes], made_again.bytes)


def test_answers_of_views_narrowed_differently_add_up() -> None:
    """Two principals whose ACLs show them different topics: once each has asked, the ids of
    both pass unread, with no more asks. Had each answer replaced the last, each principal's
    fetches made the other's ids unknown again, asking without end (UNKNOWN_TOPIC_ID for
    whoever the ask limits stopped)."""
    names = TopicNamesById(OWN)
    payments = uuid.uuid4()
    alice = Cluster({ORDERS: "orders", STATE: "_state"})
    bob = Cluster({payments: "payments", STATE: "_state"})
    assert resolve(names, alice, ORDERS) == {ORDERS: "orders"}
    assert resolve(names, bob, payments) == {payments: "payments"}
    for _ in range(3):
        assert resolve(names, alice, ORDERS) == {ORDERS: "orders"}
        assert resolve(names, bob, payments) == {payments: "payments"}
    assert (alice.asked, bob.asked) == (1, 1)
    assert names.all_others([ORDERS.bytes, payments.bytes], ORDERS.bytes + payments.bytes)
    assert not names.all_others([STATE.bytes], STATE.bytes)


def test_past_the_bound_the_known_ids_start_again_from_the_last_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_partitioned, "_MAX_KNOWN_IDS", 3)
    names = TopicNamesById(OWN)
    gone = [uuid.uuid4() for _ in range(2)]
    resolve(names, Cluster({gone[0]: "a", gone[1]: "b", ORDERS: "orders"}), ORDERS)
    assert names.all_others([g.bytes for g in gone], b"")
    # four ids together, past 3 (and past twice the answer): the new answer alone
    resolve(names, Cluster({STATE: "_state"}), STATE)
    assert not names.all_others([gone[0].bytes], b"")
    assert not names.all_others([ORDERS.bytes], b"")
    assert not names.all_others([STATE.bytes], STATE.bytes)
    assert names.is_own(str(STATE))


def test_an_id_not_known_while_the_link_may_not_ask_is_none() -> None:
    names = TopicNamesById(OWN)
    cluster = Cluster({ORDERS: "orders"})
    assert resolve(names, cluster, ORDERS) == {ORDERS: "orders"}
    unknown = uuid.uuid4()
    # the same link asked under a second ago: not asked again, and not trusted
    assert resolve(names, cluster, unknown) == {unknown: None}
    assert cluster.asked == 1
