"""Which ACL bindings and delete filters can apply to a topic (:class:`protocol.acls.AclPattern`):
what the gateway refuses in CreateAcls and DeleteAcls for its own topics. Kafka's codes:
resource types ANY 1, TOPIC 2, GROUP 3; pattern types ANY 1, MATCH 2, LITERAL 3, PREFIXED 4."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from kio.schema.create_acls import v3 as create_v3
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32Timedelta

from gateway.outcomes import Forward
from protocol.acls import CREATE_ACLS, AclPattern
from protocol.codec import decode_response, encode_request, encode_response
from tests.enforcement_support import Harness, answer_of, forwarded, upstream

pytestmark = pytest.mark.unit

OWN = "_kpg_audit"
ANY, TOPIC, GROUP = 1, 2, 3
P_ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
CLUSTER_AUTHORIZATION_FAILED = 31


@pytest.mark.parametrize(
    ("pattern", "covers"),
    [
        (AclPattern(TOPIC, OWN, LITERAL, False), True),
        (AclPattern(TOPIC, "*", LITERAL, False), True),
        (AclPattern(TOPIC, "_kpg", PREFIXED, False), True),
        (AclPattern(TOPIC, "", PREFIXED, False), True),
        (AclPattern(TOPIC, OWN, PREFIXED, False), True),  # a prefix is its own prefix
        (AclPattern(TOPIC, "orders", LITERAL, False), False),
        (AclPattern(TOPIC, "_kpg_audit_x", PREFIXED, False), False),
        (AclPattern(TOPIC, "_kpg", LITERAL, False), False),
        (AclPattern(GROUP, OWN, LITERAL, False), False),
        # a creation of ANY type or of a MATCH pattern is invalid: the broker refuses it
        (AclPattern(ANY, OWN, LITERAL, False), False),
        (AclPattern(TOPIC, OWN, MATCH, False), False),
    ],
)
def test_a_binding_covers_the_topics_its_pattern_names(pattern: AclPattern, covers: bool) -> None:
    assert pattern.covers_topic(OWN) is covers


@pytest.mark.parametrize(
    ("pattern", "covers"),
    [
        (AclPattern(ANY, None, P_ANY, True), True),  # every binding
        (AclPattern(TOPIC, None, LITERAL, True), True),
        (AclPattern(TOPIC, OWN, LITERAL, True), True),
        (AclPattern(TOPIC, "*", LITERAL, True), True),
        (AclPattern(ANY, "_kpg", PREFIXED, True), True),
        (AclPattern(TOPIC, OWN, PREFIXED, True), True),
        (AclPattern(TOPIC, "_kpg", P_ANY, True), True),  # the prefixed binding "_kpg"
        (AclPattern(TOPIC, "*", P_ANY, True), True),
        (AclPattern(TOPIC, "orders", MATCH, True), True),  # takes the "*" binding with it
        (AclPattern(TOPIC, "orders", LITERAL, True), False),
        (AclPattern(TOPIC, "orders", PREFIXED, True), False),
        (AclPattern(TOPIC, "orders", P_ANY, True), False),
        (AclPattern(GROUP, None, P_ANY, True), False),
    ],
)
def test_a_filter_covers_the_topics_of_the_bindings_it_can_delete(
    pattern: AclPattern, covers: bool
) -> None:
    assert pattern.covers_topic(OWN) is covers


# --- the enforcement, through the real engine and services (tests/enforcement_support.py) ---

OWN_TOPICS = ("_kpg_state", OWN)


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[Harness]:
    built = Harness.build(tmp_path, {"rules": []}, upstream=upstream(), own_topics=OWN_TOPICS)
    try:
        yield built
    finally:
        built.close()


def creation(name: str, pattern: int = LITERAL) -> create_v3.request.AclCreation:
    return create_v3.request.AclCreation(
        resource_type=i8(TOPIC),
        resource_name=name,
        resource_pattern_type=i8(pattern),
        principal="User:kpg",
        host="*",
        operation=i8(4),  # WRITE
        permission_type=i8(2),  # DENY
    )


def create_acls(*creations: create_v3.request.AclCreation) -> bytes:
    request = create_v3.request.CreateAclsRequest(creations=creations)
    return encode_request(CREATE_ACLS, 3, 7, "acl-test", request)[4:]


def results(frame: bytes) -> list[tuple[int, str | None]]:
    answer = decode_response(CREATE_ACLS, 3, frame)
    return [(int(r.error_code), r.error_message) for r in answer.results]


def test_a_request_with_a_binding_on_an_own_topic_forwards_the_others_and_merges_in_order(
    guarded: Harness,
) -> None:
    frame = create_acls(creation("orders"), creation("*"), creation("payments"))
    outcome = guarded.send(frame)
    _, body = forwarded(outcome)
    assert [c.resource_name for c in body.creations] == ["orders", "payments"]
    broker = create_v3.response.CreateAclsResponse(
        throttle_time=i32Timedelta.parse(timedelta(0)),
        results=(
            create_v3.response.AclCreationResult(error_code=ErrorCode.none, error_message=None),
            create_v3.response.AclCreationResult(
                error_code=ErrorCode.invalid_request, error_message="broker's"
            ),
        ),
    )
    answer = guarded.broker_answers(outcome, encode_response(7, CREATE_ACLS, 3, broker))
    merged = results(answer)
    assert [code for code, _ in merged] == [0, CLUSTER_AUTHORIZATION_FAILED, 42]
    assert "_kpg_audit" in (merged[1][1] or "") or "_kpg_state" in (merged[1][1] or "")
    assert merged[2][1] == "broker's"
    verdicts = [(e.resource_name, e.verdict, e.policy) for e in guarded.sink.events]
    assert verdicts == [
        ("topic literal 'orders'", "allowed", None),
        ("topic literal '*'", "denied", "own_topics"),
        ("topic literal 'payments'", "allowed", None),
    ]


def test_a_request_of_bindings_on_other_topics_forwards_the_clients_bytes(
    guarded: Harness,
) -> None:
    frame = create_acls(creation("orders"), creation("pay", PREFIXED))
    outcome = guarded.send(frame)
    assert isinstance(outcome, Forward) and outcome.frame == frame


def test_a_binding_on_each_of_the_own_topics_is_refused(guarded: Harness) -> None:
    """Every own topic is guarded, not only the first of them (state and audit both)."""
    for topic in OWN_TOPICS:
        answer = answer_of(guarded.send(create_acls(creation(topic))))
        assert [code for code, _ in results(answer)] == [CLUSTER_AUTHORIZATION_FAILED], topic
