"""Secured upstreams for the security tests: the test broker behind :mod:`tests.security_front`
(TLS with client certificates required; TLS with SASL), a token endpoint, and a PKI made with
openssl at test time."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gateway.embedded import EmbeddedBroker, free_port
from tests.security_front import SaslCredentials, SecuredFront, TokenEndpoint, server_context
from tests.support import make_pki

ALICE_PASSWORD = "alice-pw-7Hq2vX9k"
KPG_PASSWORD = "kpg-pw-Zr4mW8tN"
OAUTH_CLIENT_SECRET = "oauth-secret-Lp3sQ6yB"
DELEGATION_TOKEN_HMAC = "token-hmac-Qx8rT2wV"
DELEGATION_TOKENS = {
    "nHq3b2XoQ1qPZ8YVvLr2wA": (DELEGATION_TOKEN_HMAC, "mallory"),
    "admin": (DELEGATION_TOKEN_HMAC, "mallory"),
}
"""Delegation tokens the front takes (SCRAM ``tokenauth``), both mallory's: one with an id
as Kafka makes them (a random UUID in base64), one whose id is a user name."""
SECRETS = (ALICE_PASSWORD, KPG_PASSWORD, OAUTH_CLIENT_SECRET, DELEGATION_TOKEN_HMAC)
"""Every secret the tests use: none may appear in a log line."""


@dataclass
class Upstream:
    front: SecuredFront
    pki: Path
    tokens: TokenEndpoint | None = None

    @property
    def bootstrap(self) -> str:
        return str(self.front.address)


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, a server certificate for 127.0.0.1 and localhost, and client certificates for
    alice (a client of the gateway), kpg (the gateway towards the brokers) and mallory
    (outside the rules of the mapping tests)."""
    return make_pki(
        tmp_path_factory.mktemp("pki"),
        {
            "alice": "/C=US/O=Acme/OU=eng/CN=alice",
            "kpg": "/O=Acme/OU=gateways/CN=kpg-gateway",
            "mallory": "/O=Elsewhere/CN=mallory",
        },
    )


def _secured(front: SecuredFront) -> Iterator[SecuredFront]:
    with EmbeddedBroker(advertised_port=front.port) as embedded:
        front.broker = embedded.address
        front.start()
        try:
            yield front
        finally:
            front.stop()


@pytest.fixture(scope="session")
def tls_upstream(pki: Path) -> Iterator[Upstream]:
    """The test broker behind TLS that requires a client certificate from the test CA (mTLS):
    only a gateway that presents its own certificate on every connection gets through."""
    front = SecuredFront(
        broker=None,  # type: ignore[arg-type]
        port=free_port(),
        tls=server_context(pki, client_certificates=True),
    )
    for running in _secured(front):
        yield Upstream(front=running, pki=pki)


@pytest.fixture(scope="session")
def sasl_ssl_upstream(pki: Path) -> Iterator[Upstream]:
    """The test broker behind TLS and SASL (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER), with the
    users alice and kpg, mallory's delegation tokens and the OAuth client kpg-oauth."""
    tokens = TokenEndpoint({"kpg-oauth": OAUTH_CLIENT_SECRET}).start()
    front = SecuredFront(
        broker=None,  # type: ignore[arg-type]
        port=free_port(),
        tls=server_context(pki, client_certificates=False),
        sasl=SaslCredentials(
            users={"alice": ALICE_PASSWORD, "kpg": KPG_PASSWORD},
            tokens=tokens,
            delegation_tokens=DELEGATION_TOKENS,
        ),
    )
    try:
        for running in _secured(front):
            yield Upstream(front=running, pki=pki, tokens=tokens)
    finally:
        tokens.stop()


@pytest.fixture
def audit_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Every log record at DEBUG and above, to be searched for secrets."""
    caplog.set_level("DEBUG")
    return caplog
