"""The claims a CreateTopics keeps on the record.validation.policy it stores before the broker
creates the topic (:meth:`gateway.services.Services.claim_validation_policies`): the create puts
a topic's previous value back only while no one has written the topic's value since, so that
of two creates of one topic at once the one the broker refuses does not undo the other's. The
real services on a real SQLite store; the broker plays no part."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.enforcement_support import Harness, upstream

pytestmark = pytest.mark.unit

TOPIC = "orders"


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    built = Harness.build(tmp_path, {"rules": []}, upstream=upstream())
    try:
        yield built
    finally:
        built.close()


def run(harness: Harness, coro: Any) -> Any:
    return harness.loop.run_until_complete(coro)


@pytest.mark.parametrize("winner_policy", ["trace-id", "key-required"])
def test_a_refused_create_leaves_a_value_stored_after_its_own(
    harness: Harness, winner_policy: str
) -> None:
    """The loser stored first and read no value before; the winner stored after it (the
    same value or another): the loser's put-back is not made."""
    services = harness.services
    run(harness, services.claim_validation_policies({TOPIC: "trace-id"}, "loser"))
    run(harness, services.claim_validation_policies({TOPIC: winner_policy}, "winner"))
    put_back = services.release_validation_policy(TOPIC, "loser", restore=True, previous=None)
    assert run(harness, put_back) is False
    assert run(harness, services.release_validation_policy(TOPIC, "winner", restore=False))
    assert services.validated_topics() == {TOPIC: winner_policy}


def test_a_refused_create_that_wrote_last_puts_back_the_value_before_it(harness: Harness) -> None:
    """The winner stored first; the loser read that value, then wrote over it: its put-back
    gives the winner's value back, and the winner's release finds its claim gone."""
    services = harness.services
    run(harness, services.claim_validation_policies({TOPIC: "trace-id"}, "winner"))
    previous = services.validation_policy_of(TOPIC)
    run(harness, services.claim_validation_policies({TOPIC: "max-bytes:100000000"}, "loser"))
    assert run(harness, services.release_validation_policy(TOPIC, "winner", restore=False)) is False
    put_back = services.release_validation_policy(TOPIC, "loser", restore=True, previous=previous)
    assert run(harness, put_back)
    assert services.validated_topics() == {TOPIC: "trace-id"}


def test_a_change_of_the_policy_meanwhile_drops_the_claim(harness: Harness) -> None:
    """IncrementalAlterConfigs of the topic created by another, while the refused create
    awaits its answer: the change stands."""
    services = harness.services
    run(harness, services.claim_validation_policies({TOPIC: "trace-id"}, "loser"))
    run(harness, services.store_validation_policies({TOPIC: "key-required"}))
    put_back = services.release_validation_policy(TOPIC, "loser", restore=True, previous=None)
    assert run(harness, put_back) is False
    assert services.validated_topics() == {TOPIC: "key-required"}


def test_a_delete_forgets_the_policy_unless_a_create_stored_one_since(harness: Harness) -> None:
    """A DeleteTopics claims the topic's policy before it is forwarded and forgets it once the
    broker has deleted the topic, unless the topic was created again meanwhile with a policy
    (the same one here): the new topic keeps it."""
    services = harness.services
    run(harness, services.store_validation_policies({TOPIC: "trace-id"}))
    run(harness, services.claim_validation_policy_keys([TOPIC], "delete"))
    run(harness, services.claim_validation_policies({TOPIC: "trace-id"}, "create"))
    forget = services.release_validation_policy(TOPIC, "delete", restore=True)
    assert run(harness, forget) is False
    assert run(harness, services.release_validation_policy(TOPIC, "create", restore=False))
    assert services.validated_topics() == {TOPIC: "trace-id"}
    run(harness, services.claim_validation_policy_keys([TOPIC], "delete again"))
    assert run(harness, services.release_validation_policy(TOPIC, "delete again", restore=True))
    assert services.validated_topics() == {}


def test_a_claim_left_behind_is_not_a_validated_topic(harness: Harness) -> None:
    """A gateway killed between a create's claim and its release leaves the claim: Produce asks
    whether any topic is validated (else it forwards unread), and a claim alone is none."""
    services = harness.services
    assert not services.any_validated_topic()
    run(harness, services.claim_validation_policy_keys({TOPIC}, "killed"))
    assert services.validated_topics()  # the claim is there
    assert not services.any_validated_topic()
    run(harness, services.store_validation_policies({TOPIC: "trace-id"}))
    assert services.any_validated_topic()
