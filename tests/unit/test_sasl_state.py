"""The SASL exchange as the gateway follows it (:class:`gateway.principal.SaslState`), and the
``sasl.client_auth`` setting: what a connection may send before it has authenticated, and
when it counts as authenticated (only once the broker has accepted the whole exchange)."""

from __future__ import annotations

import asyncio
import base64
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.static.primitive import i64Timedelta

from gateway.config import ConfigError
from gateway.engine import RequestContext, Session
from gateway.handlers import sasl_authenticate, sasl_handshake
from gateway.outcomes import Close, Forward, Outcome
from gateway.principal import SaslState, UnnamedSaslPrincipal, scram_token_authentication
from protocol.codec import encode_request, encode_response
from protocol.framing import parse_request_header
from tests.support import gateway_config

pytestmark = pytest.mark.unit

API_VERSIONS, METADATA, DESCRIBE_CONFIGS, HANDSHAKE, AUTHENTICATE = 18, 3, 32, 17, 36
UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE = 33, 34


def _jwt(claims: dict[str, str]) -> str:
    parts = ({"alg": "none"}, claims)
    encoded = (base64.urlsafe_b64encode(json.dumps(p).encode()).decode().rstrip("=") for p in parts)
    return ".".join(encoded) + ".sig"


def authenticated(state: SaslState, user: str = "alice", password: str = "pw") -> str | None:
    """A PLAIN exchange the broker accepts; the principal it gives."""
    assert state.handshake_sent("PLAIN") is None
    state.handshake_answered(0)
    state.client_message(f"\x00{user}\x00{password}".encode())
    return state.broker_answered(True)


def admitted(state: SaslState) -> set[int]:
    keys = (API_VERSIONS, METADATA, DESCRIBE_CONFIGS, HANDSHAKE, AUTHENTICATE)
    return {key for key in keys if state.refusal(key) is None}


def test_required_admits_only_the_exchange_before_it_completes() -> None:
    """Kafka's SaslServerAuthenticator order: ApiVersions or SaslHandshake first; then
    SaslAuthenticate only; nothing while a SASL answer is awaited; everything once complete."""
    state = SaslState(required=True)
    assert admitted(state) == {API_VERSIONS, HANDSHAKE}
    assert state.handshake_sent("SCRAM-SHA-256") is None
    assert admitted(state) == set()  # the handshake's answer is awaited
    state.handshake_answered(0)
    assert admitted(state) == {AUTHENTICATE}
    state.client_message(b"n,,n=alice,r=abc")
    assert admitted(state) == set()
    assert state.broker_answered(True) is None  # SCRAM: one more round
    assert admitted(state) == {AUTHENTICATE}
    state.client_message(b"c=biws,r=abcdef,p=xyz")
    assert state.broker_answered(True) == "User:alice"
    assert admitted(state) == {API_VERSIONS, METADATA, DESCRIBE_CONFIGS, HANDSHAKE, AUTHENTICATE}


def test_none_admits_everything() -> None:
    state = SaslState()
    assert admitted(state) == {API_VERSIONS, METADATA, DESCRIBE_CONFIGS, HANDSHAKE, AUTHENTICATE}
    assert authenticated(state) == "User:alice"


@pytest.mark.parametrize("required", [True, False])
def test_refused_credentials_fail_the_connection(required: bool) -> None:
    state = SaslState(required=required)
    assert state.handshake_sent("PLAIN") is None
    state.handshake_answered(0)
    state.client_message(b"\x00alice\x00wrong")
    assert state.broker_answered(False) is None
    assert state.failed and state.principal is None
    assert admitted(state) == (set() if required else admitted(SaslState()))


def test_a_refused_handshake_fails_the_connection() -> None:
    state = SaslState(required=True)
    assert state.handshake_sent("PLAIN") is None
    state.handshake_answered(UNSUPPORTED_SASL_MECHANISM)
    assert state.failed
    assert admitted(state) == set()


def test_the_mechanism_counts_only_once_the_broker_accepts_it() -> None:
    """PLAIN accepted, then a handshake for OAUTHBEARER the broker refuses: a message read
    as an OAUTHBEARER token naming admin must not make anyone admin, whatever the broker
    answers next (it checks the PLAIN credentials)."""
    state = SaslState()
    assert state.handshake_sent("PLAIN") is None
    state.handshake_answered(0)
    assert state.handshake_sent("OAUTHBEARER") is None
    state.handshake_answered(ILLEGAL_SASL_STATE)
    state.client_message(f"n,,\x01auth=Bearer {_jwt({'sub': 'admin'})}\x01\x01".encode())
    assert state.broker_answered(True) is None
    assert state.failed and state.principal is None


@pytest.mark.parametrize("claims", [{"scope": "admin"}, {"sub": ""}])
def test_a_reauthentication_naming_no_one_fails(claims: dict[str, str]) -> None:
    """A re-authentication whose message names no user the gateway can read (an OAUTHBEARER
    token without its principal claim, the broker reading another) left the exchange
    unfinished and the connection User:alice for whomever the broker accepted; it fails, as
    one naming someone else does. A first exchange naming no one stays unauthenticated."""
    state = SaslState()
    for expected in ("User:alice", None):
        assert state.handshake_sent("OAUTHBEARER") is None
        state.handshake_answered(0)
        who = {"sub": "alice"} if expected else claims
        state.client_message(f"n,,\x01auth=Bearer {_jwt(who)}\x01\x01".encode())
        assert state.broker_answered(True) == expected
    assert state.failed and state.principal is None
    first = SaslState()
    assert first.handshake_sent("OAUTHBEARER") is None
    first.handshake_answered(0)
    first.client_message(f"n,,\x01auth=Bearer {_jwt(claims)}\x01\x01".encode())
    assert first.broker_answered(True) is None
    assert not first.failed and first.principal is None


def test_authenticate_outside_an_exchange_names_nobody() -> None:
    """A SaslAuthenticate with no accepted handshake (only possible without ``required``)
    is read as no one's."""
    state = SaslState()
    state.client_message(b"\x00admin\x00pw")
    assert state.broker_answered(True) is None
    assert state.principal is None


def test_reauthentication_must_name_the_same_principal() -> None:
    """KIP-368: a re-authentication as the same user keeps the connection; as another user
    it fails (Kafka refuses a change of principal), leaving no principal."""
    state = SaslState(required=True)
    assert authenticated(state) == "User:alice"
    assert authenticated(state) == "User:alice"
    assert not state.failed
    assert authenticated(state, user="admin") is None
    assert state.failed and state.principal is None
    assert admitted(state) == set()


@pytest.mark.parametrize(
    ("required", "mechanism"),
    [(True, "SCRAM-SHA-512"), (False, "SCRAM-SHA-512"), (False, "GSSAPI")],
)
def test_reauthentication_with_another_mechanism_is_refused(required: bool, mechanism: str) -> None:
    """Kafka refuses a change of mechanism on re-authentication; so does the gateway, with or
    without ``required``. Without it, a re-authentication of User:alice with GSSAPI (which
    the gateway cannot follow, so it names no one) was carried and the connection stayed
    User:alice for whomever a broker allowing it authenticated: misattributed events."""
    state = SaslState(required=required)
    assert authenticated(state) == "User:alice"
    assert state.refuse_unfollowable(mechanism) is None
    reason = state.handshake_sent(mechanism)
    assert reason is not None and "change of mechanism" in reason
    assert state.principal == "User:alice"  # the connection closes; nothing more is judged


@pytest.mark.parametrize(("required", "refused"), [(True, True), (False, False)])
def test_a_mechanism_the_gateway_cannot_follow(required: bool, refused: bool) -> None:
    """GSSAPI: the gateway cannot tell when the exchange completes, so it cannot require it;
    without ``required`` it is carried and names no one."""
    state = SaslState(required=required)
    followable = state.refuse_unfollowable("GSSAPI")
    assert (followable is not None) is refused
    assert state.failed is refused
    if refused:
        assert followable == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
        assert state.failure is not None and "'GSSAPI'" in state.failure
    else:
        assert state.handshake_sent("GSSAPI") is None
    # A mechanism it can follow is never refused here.
    assert SaslState(required=True).refuse_unfollowable("SCRAM-SHA-512") is None


# --- sasl.client_auth ---------------------------------------------------------------------


def _upstream_sasl(tmp_path: Path) -> dict[str, object]:
    secret = tmp_path / "pw"
    secret.write_text("kpg-pw\n")
    return {
        "bootstrap_servers": ["127.0.0.1:9"],
        "sasl": {"mechanism": "PLAIN", "username": "kpg", "password_file": str(secret)},
    }


def test_client_auth_defaults(tmp_path: Path) -> None:
    """Unset: none, unless the gateway itself authenticates to the brokers (upstream.sasl):
    their listener then requires SASL of every connection, so the gateway requires it too."""
    base = {"bootstrap_servers": ["127.0.0.1:9"]}
    assert gateway_config([], upstream=base).sasl.client_auth == "none"
    assert gateway_config([], upstream=_upstream_sasl(tmp_path)).sasl.client_auth == "required"
    explicit = gateway_config([], upstream=base, sasl={"client_auth": "required"})
    assert explicit.sasl.client_auth == "required"


def test_client_auth_none_beside_upstream_sasl_stops_start_up(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"sasl\.client_auth: none, but upstream\.sasl is set"):
        gateway_config([], upstream=_upstream_sasl(tmp_path), sasl={"client_auth": "none"})


def test_client_auth_values() -> None:
    base = {"bootstrap_servers": ["127.0.0.1:9"]}
    with pytest.raises(ConfigError, match=r"sasl\.client_auth: expected required or none"):
        gateway_config([], upstream=base, sasl={"client_auth": "requested"})


def token_exchange(state: SaslState, first: bytes = b"n,,n=tok1,r=abc,tokenauth=true") -> None:
    """A SCRAM handshake the broker accepts, then a first message with a delegation token."""
    assert state.handshake_sent("SCRAM-SHA-256") is None
    state.handshake_answered(0)
    state.client_message(first)


@pytest.mark.parametrize(
    ("first", "token"),
    [
        (b"n,,n=tok1,r=abc,tokenauth=true", True),
        (b"n,,n=tok1,r=abc,tokenauth=TRUE", True),
        (b"n,a=tok1,n=tok1,r=abc,x=1,tokenauth=True", True),
        (b"n,,n=tok1,r=abc,tokenauth=false,tokenauth=true", True),
        (b"n,,n=tok1,r=abc,tokenauth=false", False),
        (b"n,,n=tokenauth=3Dtrue,r=abc", False),
        (b"n,,n=alice,r=abc", False),
    ],
)
def test_scram_delegation_token_authentication_is_recognised(first: bytes, token: bool) -> None:
    """Kafka's ``tokenauth`` extension, read as Java's Boolean.parseBoolean reads it."""
    assert scram_token_authentication(first) is token


def test_a_delegation_token_names_no_principal() -> None:
    """``n=`` is the token's id; Kafka authenticates its owner. Without ``required`` the
    exchange is carried and names no one (as GSSAPI)."""
    state = SaslState()
    token_exchange(state)
    assert state.broker_answered(True) is None
    state.client_message(b"c=biws,r=abcdef,p=xyz")
    assert state.broker_answered(True) is None
    assert state.principal is None and not state.failed


def test_a_delegation_token_is_refused_where_a_principal_is_needed() -> None:
    """With ``required`` the gateway must name whom the broker authenticated; on a
    re-authentication, that it is the same principal as before."""
    required = SaslState(required=True)
    with pytest.raises(UnnamedSaslPrincipal):
        token_exchange(required)
    assert required.failed and required.principal is None
    assert required.claimed_user == "tok1"
    again = SaslState()
    assert again.handshake_sent("SCRAM-SHA-256") is None  # the token's mechanism
    again.handshake_answered(0)
    again.client_message(b"n,,n=alice,r=abc")
    assert again.broker_answered(True) is None
    assert again.broker_answered(True) == "User:alice"
    with pytest.raises(UnnamedSaslPrincipal):
        token_exchange(again)
    assert again.failed and again.principal is None


# --- the SaslHandshake and SaslAuthenticate handlers on a connection's session -------------


def _handle(module: Any, session: Session, payload: Any) -> Outcome:
    """What the handler of ``module`` decides about ``payload`` on ``session`` (the two SASL
    handlers read no services and no cluster)."""
    api_key, version = int(payload.__api_key__), int(payload.__version__)
    frame = encode_request(api_key, version, 1, "sasl-test", payload)[4:]
    ctx = RequestContext(
        header=parse_request_header(frame), client_address="127.0.0.1:1", session=session
    )
    return asyncio.run(module.handler(None)(ctx, None, frame))


def _broker_answers(outcome: Outcome, error_code: ErrorCode) -> None:
    assert isinstance(outcome, Forward) and outcome.on_response is not None
    answer = SaslAuthenticateResponse(
        error_code=error_code,
        error_message=None,
        auth_bytes=b"",
        session_lifetime=i64Timedelta.parse(timedelta(0)),
    )
    asyncio.run(outcome.on_response(encode_response(1, AUTHENTICATE, 2, answer)))


@pytest.mark.parametrize("broker_accepts", [True, False])
def test_a_failed_reauthentication_leaves_the_connection_no_principal(
    broker_accepts: bool,
) -> None:
    """Re-authenticating as someone else (accepted by the broker, refused by the gateway) or
    with credentials the broker refuses: the connection is no longer the principal it was,
    for whatever it sends before it closes."""
    session = Session(sasl=SaslState())
    session.principal = authenticated(session.sasl)
    assert session.principal == "User:alice"
    assert session.sasl.handshake_sent("PLAIN") is None
    session.sasl.handshake_answered(0)
    outcome = _handle(
        sasl_authenticate, session, SaslAuthenticateRequest(auth_bytes=b"\x00admin\x00pw")
    )
    _broker_answers(
        outcome, ErrorCode.none if broker_accepts else ErrorCode.sasl_authentication_failed
    )
    assert session.sasl.failed
    assert session.principal is None


@pytest.mark.parametrize("required", [True, False])
def test_a_reauthentication_handshake_with_another_mechanism_is_not_forwarded(
    required: bool,
) -> None:
    """The connection closes unforwarded, with ``required`` or not: carried, the gateway would
    keep the principal of the first mechanism for whomever the second one names."""
    session = Session(sasl=SaslState(required=required))
    session.principal = authenticated(session.sasl)
    outcome = _handle(sasl_handshake, session, SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
    assert isinstance(outcome, Close) and "change of mechanism" in outcome.reason
