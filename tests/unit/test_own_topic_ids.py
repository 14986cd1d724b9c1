"""OwnTopicIds: a Metadata answer naming every own topic is kept for every client; one that
lacks some is kept for the principal that asked alone, so another client's request is judged
on ids learnt on a link that could see the topics, and the first one's requests do not ask
the cluster again each time."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping

import pytest

from gateway.handlers._partitioned import OwnTopicIds

pytestmark = pytest.mark.unit

STATE, AUDIT = uuid.uuid4(), uuid.uuid4()


class Cluster:
    """Only what OwnTopicIds asks: every topic's id and name, as one client's link sees it."""

    def __init__(self, by_id: Mapping[uuid.UUID, str]) -> None:
        self.by_id = by_id
        self.asked = 0

    async def describe_all_topics(self) -> tuple[Mapping[str, object], Mapping[uuid.UUID, str]]:
        self.asked += 1
        return {}, self.by_id


def test_an_answer_lacking_an_own_topic_is_kept_for_its_principal_only() -> None:
    ids = OwnTopicIds(frozenset({"_state", "_audit"}))
    hidden = Cluster({STATE: "_state", uuid.uuid4(): "orders"})
    learn = ids.learn(hidden, "User:carol")  # type: ignore[arg-type]
    assert asyncio.run(learn) == frozenset({STATE})
    assert ids.fresh("User:carol") == frozenset({STATE})
    assert ids.fresh("User:dave") is None
    assert ids.fresh(None) is None
    everything = Cluster({STATE: "_state", AUDIT: "_audit"})
    asyncio.run(ids.learn(everything, "User:dave"))  # type: ignore[arg-type]
    for who in ("User:carol", "User:dave", None):
        assert ids.fresh(who) == frozenset({STATE, AUDIT})
