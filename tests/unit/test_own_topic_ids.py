"""TopicNamesById, as the shortcuts by id use it (Fetch v13+, ShareFetch, ShareAcknowledge):
a request goes on unread only when every id it names was learnt to name a topic that is not
the gateway's own. An id names one topic forever, so that holds with no expiry; an id not
learnt (an own topic made again, or one a client's view lacked) is never trusted, and the map
holds one answer's topics, never every topic ever learnt."""

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


def test_each_answer_replaces_what_was_known() -> None:
    names = TopicNamesById(OWN)
    gone = uuid.uuid4()
    resolve(names, Cluster({gone: "old", ORDERS: "orders"}), gone)
    assert names.all_others([gone.bytes], b"")
    resolve(names, Cluster({ORDERS: "orders", STATE: "_state"}), STATE)
    assert not names.all_others([gone.bytes], b"")
    assert names.all_others([ORDERS.bytes], b"")


def test_an_id_not_known_while_the_link_may_not_ask_is_none() -> None:
    names = TopicNamesById(OWN)
    cluster = Cluster({ORDERS: "orders"})
    assert resolve(names, cluster, ORDERS) == {ORDERS: "orders"}
    unknown = uuid.uuid4()
    # the same link asked under a second ago: not asked again, and not trusted
    assert resolve(names, cluster, unknown) == {unknown: None}
    assert cluster.asked == 1
