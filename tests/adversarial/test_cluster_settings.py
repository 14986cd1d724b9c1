"""Routes around the ``broker.configs`` rule through the cluster-wide settings Kafka keeps beside
the broker configs, guarded on the CLUSTER as they are: client quotas (AlterClientQuotas) and
SCRAM credentials (AlterUserScramCredentials).

Behind a broker that does not authorize them (the test broker, Tansu, has no authorizer, and
takes AlterUserScramCredentials), any client could set the SCRAM password of
``User:platform-admin``, a principal the rules allow, then sign in as it; or throttle every
other client through a quota on the default user. Each case is sent raw through the gateway in
front of the tapped real broker: a refused change gets POLICY_VIOLATION naming the rule and
never reaches the broker; the allowed principal's goes on. Clients are named by TLS
certificates. Tansu has no AlterClientQuotas: it drops the connection that sends one, so the
allowed quota change is shown by the tap alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.alter_client_quotas.v1 import request as quotas
from kio.schema.alter_user_scram_credentials.v0 import request as scram
from kio.static.primitive import f64, i8, i32

from tests.support import (
    BrokerTap,
    GatewayThread,
    RawClient,
    gateway_config,
    make_pki,
    noted,
    policy_message,
    tls_context,
    tls_listener,
)

pytestmark = pytest.mark.adversarial

ALTER_CLIENT_QUOTAS, ALTER_USER_SCRAM_CREDENTIALS = 49, 51
POLICY_VIOLATION = 44
ADMIN = "User:CN=platform-admin"
BROKER_CONFIGS = {
    "rules": [{"name": "broker-configs", "type": "broker.configs", "allowed.principals": [ADMIN]}]
}
SCRAM_SHA_256 = 1


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pki(
        tmp_path_factory.mktemp("pki"),
        {"platform-admin": "/CN=platform-admin", "bob": "/CN=bob"},
    )


@pytest.fixture
def gw(tap: BrokerTap, pki: Path) -> Iterator[GatewayThread]:
    running = GatewayThread(
        gateway_config(tap.address, policies=BROKER_CONFIGS, tls=tls_listener(pki))
    ).start()
    tap.requests.clear()
    try:
        yield running
    finally:
        running.stop()


def _client(gw: GatewayThread, pki: Path, who: str) -> RawClient:
    return RawClient(gw.bootstrap, timeout=5, tls=tls_context(pki, who))


def _set_password(user: str) -> Any:
    upsertion = scram.ScramCredentialUpsertion(
        name=user,
        mechanism=i8(SCRAM_SHA_256),
        iterations=i32(4096),
        salt=b"chosen-by-the-attacker",
        salted_password=b"\x01" * 32,
    )
    return scram.AlterUserScramCredentialsRequest(deletions=(), upsertions=(upsertion,))


def _throttle_everyone() -> Any:
    entry = quotas.EntryData(
        entity=(quotas.EntityData(entity_type="user", entity_name=None),),
        ops=(quotas.OpData(key="producer_byte_rate", value=f64(1.0), remove=False),),
    )
    return quotas.AlterClientQuotasRequest(entries=(entry,), validate_only=False)


def _denial(code: int, message: str | None) -> tuple[int, str | None]:
    if code == POLICY_VIOLATION:
        assert message == noted(policy_message(message) or "")
        return code, policy_message(message)
    return code, message


def test_no_one_but_the_allowed_principal_sets_a_users_scram_credentials(
    gw: GatewayThread, tap: BrokerTap, pki: Path
) -> None:
    answer = _client(gw, pki, "bob").request(
        ALTER_USER_SCRAM_CREDENTIALS, 0, _set_password("CN=platform-admin")
    )
    assert [(r.user, *_denial(int(r.error_code), r.error_message)) for r in answer.results] == [
        (
            "CN=platform-admin",
            POLICY_VIOLATION,
            "the SCRAM credentials of user CN=platform-admin: User:CN=bob may not change its "
            "configs (rule broker-configs)",
        )
    ]
    assert ALTER_USER_SCRAM_CREDENTIALS not in tap.api_keys()

    answer = _client(gw, pki, "platform-admin").request(
        ALTER_USER_SCRAM_CREDENTIALS, 0, _set_password("CN=bob")
    )
    assert [(r.user, int(r.error_code)) for r in answer.results] == [("CN=bob", 0)]
    sent = tap.forwarded(ALTER_USER_SCRAM_CREDENTIALS)
    assert [u.name for r in sent for u in r.upsertions] == ["CN=bob"]


def test_no_one_but_the_allowed_principal_changes_client_quotas(
    gw: GatewayThread, tap: BrokerTap, pki: Path
) -> None:
    answer = _client(gw, pki, "bob").request(ALTER_CLIENT_QUOTAS, 1, _throttle_everyone())
    assert [_denial(int(e.error_code), e.error_message) for e in answer.entries] == [
        (
            POLICY_VIOLATION,
            "the client quotas of user=<default>: User:CN=bob may not change its configs "
            "(rule broker-configs)",
        )
    ]
    assert [(e.entity_type, e.entity_name) for e in answer.entries[0].entity] == [("user", None)]
    assert ALTER_CLIENT_QUOTAS not in tap.api_keys()

    admin = _client(gw, pki, "platform-admin")
    admin.send(ALTER_CLIENT_QUOTAS, 1, _throttle_everyone())
    with contextlib.suppress(ConnectionError, OSError):
        admin.recv_frame()  # the test broker has no AlterClientQuotas: it drops the connection
    sent = tap.forwarded(ALTER_CLIENT_QUOTAS)
    assert [(e.entity_type, e.entity_name) for r in sent for q in r.entries for e in q.entity] == [
        ("user", None)
    ]
