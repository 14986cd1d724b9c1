"""The SCRAM credentials the gateway's own clients sign in with (``upstream.sasl``), and quotas
on that user, are refused to every client, whatever the rules: Kafka asks only ALTER on the
cluster (a broker without an authorizer, nothing), and a client that changed or deleted the
credentials would stop the gateway's audit writes and its state store at their next sign-in;
a quota would throttle them. Through the real engine and services
(tests/enforcement_support.py); the adversarial suite's cases of these APIs
(tests/adversarial/test_cluster_settings.py) run the rules against the real broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.alter_client_quotas.v1 import request as quotas
from kio.schema.alter_user_scram_credentials.v0 import request as scram
from kio.static.primitive import f64, i8, i32

from gateway.config import Secret, UpstreamSaslConfig
from protocol.codec import decode_response, encode_request
from tests.enforcement_support import Harness, answer_of, forwarded, upstream

pytestmark = pytest.mark.unit

ALTER_USER_SCRAM_CREDENTIALS = 51
POLICY_VIOLATION = 44
GATEWAY_USER = "kpg-gateway"


@pytest.fixture
def mechanism() -> str:
    return "SCRAM-SHA-256"


@pytest.fixture
def harness(tmp_path: Path, mechanism: str) -> Iterator[Harness]:
    sasl = UpstreamSaslConfig(
        mechanism=mechanism, username=GATEWAY_USER, password=Secret("pw", "test")
    )
    built = Harness.build(tmp_path, {"rules": []}, upstream=upstream(sasl=sasl))
    try:
        yield built
    finally:
        built.close()


def change(*, upsert: tuple[str, ...] = (), delete: tuple[str, ...] = ()) -> bytes:
    request = scram.AlterUserScramCredentialsRequest(
        deletions=tuple(
            scram.ScramCredentialDeletion(name=user, mechanism=i8(1)) for user in delete
        ),
        upsertions=tuple(
            scram.ScramCredentialUpsertion(
                name=user,
                mechanism=i8(1),
                iterations=i32(4096),
                salt=b"salt",
                salted_password=b"\x01" * 32,
            )
            for user in upsert
        ),
    )
    return encode_request(ALTER_USER_SCRAM_CREDENTIALS, 0, 9, "t", request)[4:]


@pytest.mark.parametrize("how", ["upsert", "delete"])
def test_the_gateways_own_scram_credentials_are_changed_by_no_client(
    harness: Harness, how: str
) -> None:
    frame = change(**{how: (GATEWAY_USER,)})  # type: ignore[arg-type]
    outcome = harness.send(frame, principal="User:admin")
    answer = decode_response(ALTER_USER_SCRAM_CREDENTIALS, 0, answer_of(outcome))
    [result] = answer.results
    assert (result.user, int(result.error_code)) == (GATEWAY_USER, POLICY_VIOLATION)
    assert "upstream.sasl" in (result.error_message or "")
    [event] = harness.sink.events
    assert (event.verdict, event.policy, event.resource_name) == (
        "denied",
        "own_principal",
        GATEWAY_USER,
    )


def test_another_users_credentials_go_on(harness: Harness) -> None:
    outcome = harness.send(change(upsert=("alice",), delete=(GATEWAY_USER,)))
    _, body = forwarded(outcome)
    assert [u.name for u in body.upsertions] == ["alice"]
    assert not body.deletions


@pytest.mark.parametrize("mechanism", ["PLAIN"])
def test_a_gateway_signing_in_with_plain_has_no_scram_credentials_to_keep(
    harness: Harness,
) -> None:
    """PLAIN's password is kept in the brokers' own configuration: the user's SCRAM
    credentials are not the gateway's, and the rules alone judge them."""
    _, body = forwarded(harness.send(change(upsert=(GATEWAY_USER,))))
    assert [u.name for u in body.upsertions] == [GATEWAY_USER]


ALTER_CLIENT_QUOTAS = 49


def throttle(*users: str | None) -> bytes:
    """A producer_byte_rate of 1 byte/s on each user (None: the default user)."""
    request = quotas.AlterClientQuotasRequest(
        entries=tuple(
            quotas.EntryData(
                entity=(
                    quotas.EntityData(entity_type="user", entity_name=user),
                    quotas.EntityData(entity_type="client-id", entity_name=None),
                ),
                ops=(quotas.OpData(key="producer_byte_rate", value=f64(1.0), remove=False),),
            )
            for user in users
        ),
        validate_only=False,
    )
    return encode_request(ALTER_CLIENT_QUOTAS, 1, 9, "t", request)[4:]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
def test_no_client_throttles_the_gateways_own_user(harness: Harness) -> None:
    """A quota naming the gateway's user is refused; the others in the request go on."""
    outcome = harness.send(throttle("alice", GATEWAY_USER, None), principal="User:admin")
    _, body = forwarded(outcome)
    assert [e.entity[0].entity_name for e in body.entries] == ["alice", None]
    [event] = [e for e in harness.sink.events if e.verdict == "denied"]
    assert event.policy == "own_principal"
    assert event.resource_name == f"user={GATEWAY_USER}, client-id=<default>"
