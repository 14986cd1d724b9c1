"""Every violation of a decision in one Kafka error message, and read back by the tools."""

from __future__ import annotations

import re

import pytest

from policies.api import CreateTopicRequestMetadata
from policies.chain import PolicyChain, PolicyPlugin
from policies.rules import Mode, PartitionsRule, TopicNameRule
from policies.violations import (
    Violation,
    client_message,
    parse_message,
    split_request_id,
    with_request_id,
)
from tests.unit.test_policies_chain import RecordingCreateTopicPolicy

pytestmark = pytest.mark.unit

DENIED = Violation(outcome="denied", message="topic x: 6 partitions is above the maximum of 2")
WOULD = Violation(outcome="would_deny", message="topic name 'x' does not match the pattern 'a'")


@pytest.mark.parametrize(
    ("violations", "message"),
    [
        ((), None),
        ((DENIED,), "topic x: 6 partitions is above the maximum of 2"),
        ((WOULD,), "would deny (dry-run): topic name 'x' does not match the pattern 'a'"),
        (
            (DENIED, WOULD),
            "2 policy violations: 1) topic x: 6 partitions is above the maximum of 2; "
            "2) would deny (dry-run): topic name 'x' does not match the pattern 'a'",
        ),
    ],
)
def test_the_message_and_back(violations: tuple[Violation, ...], message: str | None) -> None:
    assert client_message(violations) == message
    assert parse_message(message) == violations


def test_items_whose_text_has_separators_of_their_own_come_back_whole() -> None:
    tricky = (
        Violation(outcome="denied", message="no; 3) not a third item; 1) nor a first"),
        Violation(outcome="would_deny", message="2 policy violations: 1) quoted"),
        Violation(outcome="denied", message=""),
    )
    assert parse_message(client_message(tricky)) == tricky


def test_a_separator_in_an_item_cannot_shift_the_items() -> None:
    """An enforced denial after a dry-run one whose text (a config value a rule echoes)
    holds ``; 2) would deny (dry-run): ``: both come back as they were, the denial a
    denial, and one item alone stays one item."""
    forged = "cleanup.policy=x; 2) would deny (dry-run): y is not one of delete"
    pair = (Violation(outcome="would_deny", message=forged), DENIED)
    assert parse_message(client_message(pair)) == pair
    alone = (Violation(outcome="denied", message="2 policy violations: 1) a; 2) b"),)
    assert parse_message(client_message(alone)) == alone


def test_a_refusal_that_reads_as_dry_run_notes_only_is_shown_as_a_denial() -> None:
    """kpg dry-run: POLICY_VIOLATION with a message that parses to would-deny items alone
    (a gateway that did not escape a client's text) is one DENIED row, the message whole."""
    from gateway.tools import POLICY_VIOLATION_CODE, answer_rows
    from protocol import create_topics as ct
    from protocol.results import ItemError

    spec = ct.TopicSpec(
        name="t", num_partitions=9, replication_factor=1, assignments=(), configs=()
    )
    message = "2 policy violations: 1) would deny (dry-run): a; 2) would deny (dry-run): b"
    refused = ItemError(error_code=POLICY_VIOLATION_CODE, error_message=message)
    assert [(r.verdict, r.message) for r in answer_rows(spec, refused)] == [("DENIED", message)]
    noted = ItemError(error_code=0, error_message=message)
    assert [r.verdict for r in answer_rows(spec, noted)] == ["would-deny", "would-deny"]


def test_a_message_that_does_not_follow_the_numbering_is_one_violation() -> None:
    text = "3 policy violations: 1) a; 2) b"
    assert parse_message(text) == (Violation(outcome="denied", message=text),)


def test_the_chain_puts_every_violation_in_the_message_in_order() -> None:
    """A topic breaking an enforced rule, a plug-in and a dry-run rule: all three, in order."""
    policy = RecordingCreateTopicPolicy()
    policy.deny = "plug-in says no"
    rules = [
        TopicNameRule(name="naming", mode=Mode.DRY_RUN, pattern=re.compile("[a-z.]+")),
        PartitionsRule(name="max-partitions", max=2),
    ]
    request = CreateTopicRequestMetadata(
        topic="Bad", num_partitions=6, replication_factor=1, replicas_assignments=None, configs={}
    )
    plugin = PolicyPlugin(policy=policy, name="acme.C")
    with PolicyChain(rules=rules, create_topic_policy=plugin) as chain:
        decision = chain.check_create_topic(request, principal=None)
    assert [(v.verdict, v.message) for v in parse_message(decision.message)] == [
        ("would-deny", "topic name 'Bad' does not match the pattern '[a-z.]+' (rule naming)"),
        ("denied", "topic Bad: 6 partitions is above the maximum of 2 (rule max-partitions)"),
        ("denied", "plug-in says no"),
    ]
    assert parse_message(decision.message) == decision.violations


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("topic x: no (audit request id 5f1e-a2)", ("topic x: no", "5f1e-a2")),
        ("(audit request id 5f1e-a2)", (None, "5f1e-a2")),
        ("audit request id 5f1e-a2", (None, "5f1e-a2")),
        ("topic x: no", ("topic x: no", None)),
        ("a (audit request id two words)", ("a (audit request id two words)", None)),
        (None, (None, None)),
    ],
)
def test_the_audit_request_id_comes_off_the_end(
    message: str | None, expected: tuple[str | None, str | None]
) -> None:
    assert split_request_id(message) == expected


def test_a_tagged_message_still_gives_every_violation() -> None:
    tagged = with_request_id(client_message((DENIED, WOULD)), "5f1e")
    message, request_id = split_request_id(tagged)
    assert request_id == "5f1e"
    assert parse_message(message) == (DENIED, WOULD)
