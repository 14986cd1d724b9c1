"""How the gateway reaches a secured cluster: one place that turns ``upstream.tls`` and
``upstream.sasl`` into what each kind of connection needs.

- Client connections' links (:class:`gateway.upstream.UpstreamLink`, bootstrap and per-node
  alike) take :meth:`UpstreamSecurity.connect_kwargs`: TLS with the broker's host as SNI and,
  unless switched off, as the name its certificate must carry. They never authenticate with
  the gateway's credentials: a client's SASL exchange passes through to the broker.
- The gateway's own clients (the state store, the audit topic sink: aiokafka) take
  :meth:`UpstreamSecurity.aiokafka_kwargs`: the same TLS, and ``upstream.sasl``.

Secrets (passwords, client secrets, tokens) are handed to aiokafka and to the token endpoint
only; no message here or in an exception names them.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any, Final

from aiokafka.abc import AbstractTokenProvider

from .config import ConfigError, GatewayConfig, HostPort, UpstreamSaslConfig, UpstreamTlsConfig

log = logging.getLogger(__name__)

_REFRESH_MARGIN: Final = 0.8
"""A token is fetched again once this share of its lifetime has passed (Kafka's
sasl.login.refresh.window.factor)."""
_DEFAULT_TOKEN_LIFETIME_S: Final = 300.0
"""For a token endpoint that does not say expires_in."""


def client_ssl_context(tls: UpstreamTlsConfig, source: str) -> ssl.SSLContext:
    """A client-side TLS context for the brokers.

    :raises ConfigError: when a certificate, key or CA bundle does not load.
    """
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=None)
    try:
        if tls.ca_file is not None:
            context.load_verify_locations(tls.ca_file)
        if tls.cert_file is not None and tls.key_file is not None:
            context.load_cert_chain(tls.cert_file, tls.key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{source}: upstream.tls: cannot load certificates: {exc}") from None
    context.check_hostname = tls.check_hostname
    context.verify_mode = ssl.CERT_REQUIRED  # a broker's certificate is always verified
    return context


class ClientCredentialsTokenProvider(AbstractTokenProvider):  # type: ignore[misc]
    """OAUTHBEARER tokens from an OAuth 2 token endpoint, client credentials grant (RFC 6749
    section 4.4), as Kafka's OAuthBearerLoginCallbackHandler gets them: the client id and
    secret in HTTP basic authentication, ``scope`` when configured. A token is reused until
    80% of its lifetime has passed."""

    def __init__(self, sasl: UpstreamSaslConfig, timeout_s: float) -> None:
        if not (sasl.token_endpoint_url and sasl.client_id and sasl.client_secret):
            raise ValueError("OAUTHBEARER needs token_endpoint_url, client_id and a secret")
        self._url = sasl.token_endpoint_url
        self._client_id = sasl.client_id
        self._secret = sasl.client_secret
        self._scope = sasl.scope
        self._timeout_s = timeout_s
        self._token: str | None = None
        self._previous: str | None = None
        self._refresh_at = 0.0
        self._lock = asyncio.Lock()

    async def token(self) -> str:
        """:raises TokenEndpointError: when no token can be had."""
        async with self._lock:
            if self._token is None or time.monotonic() >= self._refresh_at:
                token, lifetime_s = await asyncio.to_thread(self._fetch)
                withhold_secrets(token)
                # The token before the one replaced may show no more (a sign-in with it is
                # long done): every token ever fetched was kept, and looked for in every
                # aiokafka log line, one more each refresh for as long as the gateway ran.
                stale = self._previous
                if stale is not None and stale not in (token, self._token):
                    release_secret(stale)
                self._previous, self._token = self._token, token
                self._refresh_at = time.monotonic() + lifetime_s * _REFRESH_MARGIN
            return self._token

    def _fetch(self) -> tuple[str, float]:
        form = {"grant_type": "client_credentials"}
        if self._scope is not None:
            form["scope"] = self._scope
        user = urllib.parse.quote(self._client_id, safe="")
        password = urllib.parse.quote(self._secret.reveal(), safe="")
        basic = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        request = urllib.request.Request(
            self._url,
            data=urllib.parse.urlencode(form).encode(),
            headers={
                "Authorization": f"Basic {basic}",
                "Content-Type": "application/x-www-form-urlencoded",
                "Accept": "application/json",
            },
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as answer:  # noqa: S310
                body = json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            raise TokenEndpointError(f"token endpoint {self._url}: HTTP {exc.code}") from None
        except (OSError, ValueError) as exc:
            raise TokenEndpointError(
                f"token endpoint {self._url}: {type(exc).__name__}: {exc}"
            ) from None
        token = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise TokenEndpointError(f"token endpoint {self._url}: no access_token in its answer")
        expires_in = body.get("expires_in")
        lifetime = (
            float(expires_in)
            if isinstance(expires_in, int | float) and expires_in > 0
            else _DEFAULT_TOKEN_LIFETIME_S
        )
        log.info("token endpoint %s: got a token valid for %g s", self._url, lifetime)
        return token, lifetime


class TokenEndpointError(Exception):
    """The token endpoint gave no token (its message names the endpoint, never a secret)."""


class UpstreamAuthenticationError(Exception):
    """The brokers refused the gateway's own credentials (``upstream.sasl``), or their TLS
    handshake failed; the message says which, never a secret."""


class _WithholdSecrets(logging.Filter):
    """On aiokafka's loggers: its connections log every request at DEBUG, SaslAuthenticate
    with the PLAIN password or the OAUTHBEARER token in it. Such lines are withheld, and any
    known secret left in a line is blanked."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            return True
        if "SaslAuthenticateRequest" in message:
            record.msg, record.args = "SaslAuthenticate request (withheld: credentials)", ()
            return True
        blanked = message
        for secret in self.secrets:
            for form in (secret, repr(secret.encode())[2:-1]):
                blanked = blanked.replace(form, "[secret]")
        if blanked != message:
            record.msg, record.args = blanked, ()
        return True


_WITHHOLD: Final = _WithholdSecrets()
_AIOKAFKA_LOGGERS: Final = (
    "aiokafka",
    "aiokafka.conn",
    "aiokafka.client",
    "aiokafka.producer.sender",
    "aiokafka.producer.producer",
    "aiokafka.consumer.fetcher",
    "aiokafka.consumer.group_coordinator",
    "aiokafka.admin.client",
)


def withhold_secrets(*secrets: str) -> None:
    """Keep ``secrets`` and SaslAuthenticate requests out of aiokafka's log lines."""
    _WITHHOLD.secrets.update(s for s in secrets if s)
    for name in _AIOKAFKA_LOGGERS:
        logger = logging.getLogger(name)
        if _WITHHOLD not in logger.filters:
            logger.addFilter(_WITHHOLD)


def release_secret(secret: str) -> None:
    """Stop looking for ``secret`` (a token replaced twice) in aiokafka's log lines."""
    _WITHHOLD.secrets.discard(secret)


class UpstreamSecurity:
    """``upstream.tls`` and ``upstream.sasl``, loaded once at start-up.

    :raises ConfigError: (constructor) when the TLS files do not load.
    """

    def __init__(self, config: GatewayConfig) -> None:
        upstream = config.upstream
        self.tls = upstream.tls
        self.sasl = upstream.sasl
        self.ssl_context = (
            client_ssl_context(upstream.tls, config.source) if upstream.tls is not None else None
        )
        self._token_provider = (
            ClientCredentialsTokenProvider(upstream.sasl, upstream.request_timeout_s)
            if upstream.sasl is not None and upstream.sasl.mechanism == "OAUTHBEARER"
            else None
        )
        if upstream.sasl is not None:
            withhold_secrets(
                *(
                    secret.reveal()
                    for secret in (upstream.sasl.password, upstream.sasl.client_secret)
                    if secret is not None
                )
            )

    @property
    def security_protocol(self) -> str:
        """Kafka's name for it: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."""
        tls = self.ssl_context is not None
        if self.sasl is None:
            return "SSL" if tls else "PLAINTEXT"
        return "SASL_SSL" if tls else "SASL_PLAINTEXT"

    def connect_kwargs(self, host: str) -> dict[str, Any]:
        """Keyword arguments of ``asyncio.open_connection`` to the broker at ``host``."""
        if self.ssl_context is None:
            return {}
        return {"ssl": self.ssl_context, "server_hostname": host}

    def aiokafka_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of aiokafka's clients (producer, consumer, admin)."""
        kwargs: dict[str, Any] = {"security_protocol": self.security_protocol}
        if self.ssl_context is not None:
            kwargs["ssl_context"] = self.ssl_context
        sasl = self.sasl
        if sasl is None:
            return kwargs
        kwargs["sasl_mechanism"] = sasl.mechanism
        if self._token_provider is not None:
            kwargs["sasl_oauth_token_provider"] = self._token_provider
        elif sasl.password is not None:
            kwargs["sasl_plain_username"] = sasl.username
            kwargs["sasl_plain_password"] = sasl.password.reveal()
        return kwargs

    async def check(self, servers: Sequence[HostPort], timeout_s: float) -> None:
        """Open one connection as the gateway's own clients do, to the first of ``servers``
        that answers, and see it through TLS and SASL. aiokafka's clients report a refused
        authentication only as "Unable to bootstrap"; this says why. A broker that cannot be
        reached at all is left for the clients to report.

        :raises UpstreamAuthenticationError: when the TLS handshake or the SASL exchange fails.
        """
        from aiokafka.conn import create_conn
        from aiokafka.errors import KafkaError

        for server in servers:
            try:
                connection = await create_conn(
                    server.host,
                    server.port,
                    client_id="kpg-check",
                    request_timeout_ms=int(timeout_s * 1000),
                    **self.aiokafka_kwargs(),
                )
            except ssl.SSLError as exc:
                raise UpstreamAuthenticationError(
                    f"upstream.tls: TLS with {server} failed: {exc.reason or exc}"
                ) from None
            except TokenEndpointError as exc:
                raise UpstreamAuthenticationError(f"upstream.sasl: {exc}") from None
            except (OSError, TimeoutError):
                continue  # not reachable: try the next
            except KafkaError as exc:
                raise UpstreamAuthenticationError(self._refused(server, exc)) from None
            connection.close()
            return

    def _refused(self, server: HostPort, exc: Exception) -> str:
        sasl = self.sasl
        who = f" ({sasl.mechanism} as {sasl.username or sasl.client_id})" if sasl else ""
        return (
            f"upstream.sasl: broker {server} refused the gateway's credentials{who}: "
            f"{type(exc).__name__}: {exc}"
        )

    def describe(self) -> str:
        """For the start-up log line: what is used, without a secret."""
        parts = [self.security_protocol]
        if self.tls is not None:
            parts.append(f"CA {self.tls.ca_file or 'system trust store'}")
            if self.tls.cert_file is not None:
                parts.append(f"client certificate {self.tls.cert_file}")
            if not self.tls.check_hostname:
                parts.append("host names NOT checked")
        if self.sasl is not None:
            who = self.sasl.username or self.sasl.client_id
            parts.append(f"{self.sasl.mechanism} as {who}")
        return ", ".join(parts)
