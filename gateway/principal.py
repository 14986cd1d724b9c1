"""Who a client is, in Kafka's form (``User:<name>``), from its TLS certificate or its SASL
exchange. Pure functions; the connection keeps the state.

- TLS: the certificate subject as Kafka's default principal builder names it, the X.500
  distinguished name in RFC 2253 form (most specific first): ``User:CN=alice,OU=eng,O=Acme``.
- SASL PLAIN: the authentication identity of the client's message; SCRAM-SHA-256/512: the
  ``n=`` user of the client-first message. The gateway trusts the name only once the broker
  has answered the whole exchange with success.
- Other mechanisms (GSSAPI, OAUTHBEARER): the gateway cannot read a name it can trust, so
  the principal stays None (unauthenticated) and the connection is still carried.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# OpenSSL's long names -> the RFC 2253 keywords Java's X500Principal prints.
_RFC2253_KEYWORDS = {
    "commonName": "CN",
    "organizationalUnitName": "OU",
    "organizationName": "O",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "countryName": "C",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
_SPECIAL = set(',+"\\<>;=')


def _escape(value: str) -> str:
    escaped = "".join("\\" + ch if ch in _SPECIAL else ch for ch in value)
    if escaped.startswith((" ", "#")):
        escaped = "\\" + escaped
    if escaped.endswith(" "):
        escaped = escaped[:-1] + "\\ "
    return escaped


def ssl_principal(peercert: dict[str, Any] | None) -> str | None:
    """``User:<subject DN>`` of a verified client certificate, or None without one."""
    if not peercert or not peercert.get("subject"):
        return None
    rdns: Iterable[tuple[tuple[str, str], ...]] = peercert["subject"]
    parts = []
    for rdn in reversed(tuple(rdns)):
        parts.append(
            "+".join(f"{_RFC2253_KEYWORDS.get(key, key)}={_escape(value)}" for key, value in rdn)
        )
    return "User:" + ",".join(parts)


SCRAM_MECHANISMS = frozenset({"SCRAM-SHA-256", "SCRAM-SHA-512"})
SASL_ROUNDS = {"PLAIN": 1, "SCRAM-SHA-256": 2, "SCRAM-SHA-512": 2}
"""How many successful SaslAuthenticate answers complete the exchange."""


def sasl_username(mechanism: str, first_message: bytes) -> str | None:
    """The user name a client claims in its first SASL message; None when unreadable."""
    try:
        text = first_message.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if mechanism == "PLAIN":
        parts = text.split("\x00")
        return parts[1] or None if len(parts) == 3 else None
    if mechanism in SCRAM_MECHANISMS:
        # gs2-header "n,," (or "y,," / "n,a=authzid,"), then "n=<user>,r=<nonce>"
        fields = text.split(",")
        for field in fields[2:]:
            if field.startswith("n="):
                return field[2:].replace("=2C", ",").replace("=3D", "=") or None
        return None
    return None


class SaslState:
    """One connection's SASL exchange, as far as the gateway follows it."""

    def __init__(self) -> None:
        self.mechanism: str | None = None
        self._user: str | None = None
        self._messages = 0
        self._successes = 0

    def start(self, mechanism: str) -> None:
        self.mechanism = mechanism
        self._user = None
        self._messages = 0
        self._successes = 0

    def client_message(self, auth_bytes: bytes) -> None:
        if self.mechanism is not None and self._messages == 0:
            self._user = sasl_username(self.mechanism, auth_bytes)
        self._messages += 1

    def broker_answered(self, success: bool) -> str | None:
        """The principal once the exchange is complete and successful, else None."""
        if not success:
            self._user = None
            return None
        self._successes += 1
        needed = SASL_ROUNDS.get(self.mechanism or "")
        if needed is not None and self._user is not None and self._successes == needed:
            return f"User:{self._user}"
        return None
