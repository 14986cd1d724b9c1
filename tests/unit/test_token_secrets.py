"""The OAUTHBEARER tokens the gateway's own clients fetch (``upstream.sasl``) are blanked from
aiokafka's log lines, as its passwords are; those it no longer uses are let go. Against a real
token endpoint on a loopback port (tests/security_front.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest

from gateway import upstream_security
from gateway.config import Secret, UpstreamSaslConfig
from gateway.upstream_security import ClientCredentialsTokenProvider
from tests.security_front import TokenEndpoint

pytestmark = pytest.mark.unit


@pytest.fixture
def tokens() -> Iterator[TokenEndpoint]:
    endpoint = TokenEndpoint({"kpg-oauth": "oauth-secret-7Hq"}).start()
    try:
        yield endpoint
    finally:
        endpoint.stop()


def test_tokens_replaced_are_no_longer_kept_for_blanking(
    tokens: TokenEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every token fetched was added to the secrets blanked from aiokafka's log lines and
    never removed: a refresh every 48 minutes (80% of an hour's token) added 30 a day, each
    looked for in every line, for as long as the gateway ran. The token in use and the one
    before it are blanked; older ones are let go. Refreshed at every call here."""
    monkeypatch.setattr(upstream_security, "_REFRESH_MARGIN", 0.0)
    sasl = UpstreamSaslConfig(
        mechanism="OAUTHBEARER",
        token_endpoint_url=tokens.url,
        client_id="kpg-oauth",
        client_secret=Secret("oauth-secret-7Hq", "test"),
    )
    provider = ClientCredentialsTokenProvider(sasl, timeout_s=5)
    withheld = upstream_security._WITHHOLD.secrets  # noqa: SLF001 - what aiokafka's lines are blanked of
    before = set(withheld)

    async def fetch(times: int) -> list[str]:
        return [await provider.token() for _ in range(times)]

    fetched = asyncio.run(fetch(40))

    assert len(set(fetched)) == 40  # a new token each time
    assert withheld - before == set(fetched[-2:])
    record = logging.LogRecord("aiokafka", logging.WARNING, "", 0, "sent %s", (fetched[-1],), None)
    upstream_security._WITHHOLD.filter(record)  # noqa: SLF001
    assert record.getMessage() == "sent [secret]"
