"""Who a client is, in Kafka's form (``User:<name>``), from its TLS certificate or its SASL
exchange. Pure functions; the connection keeps the state.

- TLS: the certificate subject as Kafka's default principal builder names it, the X.500
  distinguished name in RFC 2253 form as Java's ``X500Principal.getName()`` prints it (most
  specific first, read from the certificate's DER: :mod:`protocol.x500`), mapped by
  ``ssl.principal.mapping.rules`` (:class:`SslPrincipalMapper`; the default keeps the whole
  name: ``User:CN=alice,OU=eng,O=Acme``). A name no rule maps is refused, as Kafka refuses it.
- SASL PLAIN: the authentication identity of the client's message; SCRAM-SHA-256/512: the
  ``n=`` user of the client-first message. The gateway trusts the name only once the broker
  has answered the whole exchange with success.
- SASL OAUTHBEARER: the token's principal claim (``sub`` unless configured otherwise, as
  Kafka's ``sasl.oauthbearer.sub.claim.name``), read from the JWT the client sent; the
  gateway does not check its signature, the broker does, and the name counts only once the
  broker has accepted the token.
- Other mechanisms (GSSAPI): the gateway cannot read a name it can trust, so the principal
  stays None (unauthenticated) and the connection is still carried; with
  ``sasl.client_auth: required`` such a handshake is refused.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import warnings
from dataclasses import dataclass
from typing import Any, Final

from protocol.errors import SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM
from protocol.sasl import SASL_AUTHENTICATE, SASL_HANDSHAKE
from protocol.versions import API_VERSIONS_KEY
from protocol.x500 import UnreadableName, certificate_subject, rfc2253


def distinguished_name(certificate: bytes | None) -> str | None:
    """The subject of a verified client certificate (its DER, as
    ``SSLObject.getpeercert(binary_form=True)`` gives it) as Kafka's broker names it: Java's
    ``X500Principal.getName()``, RFC 2253 (see :mod:`protocol.x500`); None without one.

    :raises UnreadableName: for a subject the gateway cannot name exactly as Java does.
    """
    if certificate is None:
        return None
    return rfc2253(certificate_subject(certificate))


def ssl_principal(
    certificate: bytes | None, mapper: SslPrincipalMapper | None = None
) -> str | None:
    """``User:<name>`` of a verified client certificate (its DER), its subject mapped by
    ``mapper`` (None: Kafka's DEFAULT rule, the whole subject); None without a certificate.

    :raises NoMatchingRule: when no rule maps the subject (Kafka fails the authentication).
    :raises UnreadableName: for a subject the gateway cannot name exactly as Java does.
    """
    name = distinguished_name(certificate)
    if name is None:
        return None
    return "User:" + (mapper.name(name) if mapper is not None else name)


class NoMatchingRule(Exception):
    """No ``ssl.principal.mapping.rules`` rule maps a certificate's subject."""


class RuleFailed(NoMatchingRule):
    """The rule that matched a subject throws in Java (its replacement names no group it
    has, say): Kafka fails the authentication, as for a subject no rule maps."""


# Kafka's SslPrincipalMapper grammar, as its regular expressions have it: DEFAULT, or
# RULE:pattern/replacement/ with an optional L or U, "\\x" escaping a slash; rules apart by a
# comma or a new line. Anything else is kept whole, to be refused as not a rule.
_RULE: Final = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER: Final = re.compile(r"\s*(" + _RULE + r")\s*([,\n]\s*|$)")
_RULE_PARSER: Final = re.compile(_RULE)
_BACK_REFERENCE: Final = re.compile(r"\$([0-9]+)")
# What Java's regular expressions take as line terminators (``.`` matches none of them, ``$``
# and ``\Z`` match before a last one), where Python's ``.`` stops only at \n and its ``\Z``
# at the end: a subject holding one may match a pattern in one and not in the other.
_LINE_TERMINATORS: Final = frozenset("\n\r\x85\u2028\u2029")


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None
    """None: DEFAULT."""
    replacement: str = ""
    case: str = ""
    """``L``, ``U`` or empty."""

    def apply(self, name: str) -> str | None:
        """:raises UnreadableName: for a name holding a line terminator (see
        ``_LINE_TERMINATORS``), or not in ASCII where the pattern has a word boundary, which
        this rule's pattern may read unlike Java's."""
        if self.pattern is None:
            return name
        if not _LINE_TERMINATORS.isdisjoint(name):
            raise UnreadableName(
                "a subject with a line terminator, which Java's regular expressions read "
                "unlike Python's"
            )
        if ("\\b" in self.pattern.pattern or "\\B" in self.pattern.pattern) and not name.isascii():
            # Java 17's \b takes any Unicode letter or digit for a word's (its \w does not)
            raise UnreadableName(
                "a subject not in ASCII, which a \\b of Java's regular expressions reads "
                "unlike Python's"
            )
        if self.pattern.fullmatch(name) is None:
            return None
        groups = self.pattern.groups
        text = _kafka_escaped(self.replacement, groups)
        result = self.pattern.sub(lambda m: _java_replacement(text, m, groups), name)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result

    def __str__(self) -> str:
        """As Kafka prints a rule (its unit tests compare these)."""
        if self.pattern is None:
            return "DEFAULT"
        text = f"RULE:{self.pattern.pattern}/{self.replacement}"
        return text + (f"/{self.case}" if self.case else "")


def _kafka_escaped(replacement: str, groups: int) -> str:
    """The replacement as Kafka's ``escapeLiteralBackReferences`` prepares it (after Apache
    NiFi): with groups, a ``$n`` past the last group is shortened digit by digit (``$12``
    with 3 groups is group 1 and a ``2``) and, still past it, escaped to literal text; with
    none, left as it is. Kafka inserts each escape at the reference's place in the text it
    started from, so a second one lands a character early: mirrored, as Java reads it so.

    :raises RuleFailed: where ``Integer.parseInt`` throws (a reference past 2**31 - 1).
    """
    if groups == 0:
        return replacement
    value = replacement
    for reference in _BACK_REFERENCE.finditer(replacement):
        digits = reference.group(1)
        if digits.startswith("0"):
            continue
        index = int(digits)
        if index > 2**31 - 1:
            raise RuleFailed(f"group reference ${digits} is no Java int")
        while index > groups and index >= 10:
            index //= 10
        if index > groups:
            at = reference.start(1) - 1
            value = value[:at] + "\\" + value[at:]
    return value


def _java_replacement(text: str, match: re.Match[str], groups: int) -> str:
    """``Matcher.appendReplacement``'s reading of ``text`` (Kafka's escaped replacement):
    ``\\x`` is x, ``$n`` group n (as many digits as still name a group). Where Java throws
    (a ``$`` with no group number, a group past the last, ``${name}``, which no pattern both
    Java and Python compile can name, a trailing backslash), Kafka fails the authentication.

    :raises RuleFailed:
    """
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        i += 1
        if char == "\\":
            if i == len(text):
                raise RuleFailed("a backslash ends the replacement")
            out.append(text[i])
            i += 1
        elif char == "$":
            if i == len(text) or not "0" <= text[i] <= "9":
                raise RuleFailed("a $ without a group number in the replacement")
            number = int(text[i])
            i += 1
            while i < len(text) and "0" <= text[i] <= "9" and number * 10 + int(text[i]) <= groups:
                number, i = number * 10 + int(text[i]), i + 1
            if number > groups:
                raise RuleFailed(f"the replacement names group {number} of {groups}")
            out.append(match.group(number) or "")
        else:
            out.append(char)
    return "".join(out)


class SslPrincipalMapper:
    """Kafka's ``ssl.principal.mapping.rules``: the first rule whose pattern matches the
    whole distinguished name gives the name (its replacement, lower- or upper-cased with
    ``/L`` or ``/U``); ``DEFAULT`` gives the name unchanged.

    :raises ValueError: (constructor) for text that is not a list of rules, naming the rule.
    """

    def __init__(self, rules: str | None = "DEFAULT") -> None:
        parsed = (_parse_rule(text) for text in split_rules(rules))
        self.rules = tuple(rule for rule in parsed if rule is not None)

    def name(self, distinguished: str) -> str:
        """:raises NoMatchingRule:
        :raises UnreadableName: for a subject a rule tried on it may read unlike Java's
            (see :meth:`_Rule.apply`)."""
        for rule in self.rules:
            mapped = rule.apply(distinguished)
            if mapped is not None:
                return mapped
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule maps {distinguished!r}")

    def __str__(self) -> str:
        return "[" + ", ".join(map(str, self.rules)) + "]"


def split_rules(rules: str | None) -> list[str]:
    """The rules of a rules text, each as written (Kafka's splitRules)."""
    text = "DEFAULT" if rules is None else rules
    return [m.group(1) for m in _RULE_SPLITTER.finditer(text.strip())]


def _java_like(source: str) -> re.Pattern[str]:
    """``source`` compiled to match as Java's ``Pattern.compile(source)`` does, or refused.

    ASCII: Java's ``\\w``, ``\\d``, ``\\s`` and ``(?i)`` know ASCII only (without its
    ``(?U)`` or ``(?u)`` flags, which Python refuses beside this one); Python's took K (the
    Kelvin sign) for k and ı for a word character, mapping a name Kafka's rule leaves alone.
    Refused, as what Python reads otherwise: a class nested in a class or an intersection
    (``[a-z[0-9]]``, ``[a-z&&[^x]]``: Java's union and intersection, Python's literal
    brackets, which it warns of), ``(?x)`` (Java's ignores spaces inside a class), ``\\v``
    (Java's is a class of vertical spaces, Python's one character) and an escape of two
    digits (``\\101``: Python's octal A, Java's group 1 and ``01``; ``\\0101``: Java's octal
    A, Python's backspace and ``1``).

    :raises re.error, ValueError, FutureWarning:
    """
    if "\\v" in source:
        raise ValueError("\\v is a class of vertical spaces in Java, one character in Python")
    if _class_in_class(source):
        raise ValueError("a class inside a class (or &&): Java's union or intersection")
    if re.search(r"(?<!\\)(?:\\\\)*\\[0-9][0-9]", source):
        raise ValueError("an escape of two digits: Java's back reference or octal, not Python's")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        re.purge()  # a pattern cached before would compile again without its warning
        pattern = re.compile(source, re.ASCII)
    if pattern.flags & re.VERBOSE or re.search(r"\(\?[a-zA-Z]*x[a-zA-Z-]*:", source):
        raise ValueError("(?x) reads spaces inside a class unlike Java's")
    return pattern


def _class_in_class(source: str) -> bool:
    """Whether an unescaped ``[`` or ``&&`` stands inside a character class of ``source``
    (a ``]`` first in a class is a member, in Java as in Python)."""
    inside = False
    i = 0
    while i < len(source):
        char = source[i]
        if char == "\\":
            i += 2
            continue
        if not inside and char == "[":
            inside = True
            i += 2 if source.startswith("^", i + 1) else 1
            if source.startswith("]", i):
                i += 1
            continue
        if inside and (char == "[" or source.startswith("&&", i)):
            return True
        if inside and char == "]":
            inside = False
        i += 1
    return False


def _parse_rule(text: str) -> _Rule | None:
    """One rule; None for an empty one (ignored, as Kafka does).

    :raises ValueError:
    """
    match = _RULE_PARSER.match(text)
    if match is None or match.end() != len(text):
        raise ValueError(f"invalid rule: {text!r}")
    if match.group(1) is not None:
        return _Rule(None)
    if match.group(2) is None:
        return None
    try:
        pattern = _java_like(match.group(2))
    except (re.error, ValueError, FutureWarning) as exc:
        raise ValueError(f"invalid rule: {text!r}: {exc}") from None
    return _Rule(pattern, match.group(4), match.group(6))


SCRAM_MECHANISMS = frozenset({"SCRAM-SHA-256", "SCRAM-SHA-512"})
SASL_ROUNDS = {"PLAIN": 1, "SCRAM-SHA-256": 2, "SCRAM-SHA-512": 2, "OAUTHBEARER": 1}
"""How many successful SaslAuthenticate answers complete the exchange."""


class AmbiguousSaslMessage(ValueError):
    """A client's first SASL message that names its user twice: brokers need not agree on
    which one counts (Kafka's OAUTHBEARER reads pairs into a map, the last of a repeated key
    winning), so the gateway cannot know whom the broker will have authenticated. So is one
    asking for an authorization id other than its user (PLAIN's ``authzid``, the ``a=`` of
    SCRAM's and OAUTHBEARER's GS2 header): Kafka refuses it, and a broker that honours it
    acts as that id, whom the gateway would not name."""


def _other_authorization_id(authzid: str, user: str | None, mechanism: str) -> None:
    """:raises AmbiguousSaslMessage: when ``authzid`` is set and is not ``user``."""
    if authzid and authzid != user:
        raise AmbiguousSaslMessage(
            f"{mechanism}: the first message asks for an authorization id other than its user"
        )


def _gs2_authorization_id(text: str) -> str:
    """The ``a=`` of a GS2 header (``n,a=<id>,``), SASL-name decoded; empty without one."""
    fields = text.split(",", 2)
    if len(fields) < 2 or not fields[1].startswith("a="):
        return ""
    return fields[1][2:].replace("=2C", ",").replace("=3D", "=")


def oauthbearer_claim(first_message: str, claim: str = "sub") -> str | None:
    """``claim`` of the JWT in an OAUTHBEARER client-first message (RFC 7628: gs2 header,
    then ``\\x01``-separated key=value pairs, ``auth=Bearer <token>``); None when there is no
    readable token or the claim is not a non-empty string. The signature is not checked.

    :raises AmbiguousSaslMessage: for a key given twice (two ``auth`` pairs: Kafka checks the
        last, a first-match reader would name the user of the first, a token nobody signed).
    """
    keys = [pair.partition("=")[0] for pair in first_message.split("\x01")[1:] if pair]
    if len(keys) != len(set(keys)):
        raise AmbiguousSaslMessage("OAUTHBEARER: a key is given twice in the first message")
    for pair in first_message.split("\x01")[1:]:
        key, _, value = pair.partition("=")
        if key == "auth" and value[:7].lower() == "bearer ":
            return _jwt_claim(value[7:].strip(), claim)
    return None


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose member names are unique: of ``{"sub": "a", "sub": "b"}`` one
    parser takes the first, another the last, jose4j (Kafka's) refuses it."""
    members = dict(pairs)
    if len(members) != len(pairs):
        raise AmbiguousSaslMessage("OAUTHBEARER: the token names a claim twice")
    return members


def _jwt_claim(token: str, claim: str) -> str | None:
    """:raises AmbiguousSaslMessage: for a payload that names a member twice."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload), object_pairs_hook=_unique_members)
    except AmbiguousSaslMessage:
        raise
    except (binascii.Error, ValueError):
        return None
    found = claims.get(claim) if isinstance(claims, dict) else None
    return found if isinstance(found, str) and found else None


class UnnamedSaslPrincipal(ValueError):
    """A first SASL message whose principal the broker does not take from it: SCRAM with
    Kafka's ``tokenauth`` extension (delegation tokens, KIP-48), where ``n=`` is the token's id
    and the broker authenticates the token's owner, whom the message does not name."""


def scram_token_authentication(first_message: bytes) -> bool:
    """Whether a SCRAM client-first message asks for delegation token authentication: an
    extension ``tokenauth`` after the nonce whose value Java's ``Boolean.parseBoolean`` reads
    as true (any case). Kafka reads the extensions into a map, the last of a repeated key
    winning; any true one counts here, so that no spelling makes the gateway take a token's
    id for a user name."""
    text = first_message.decode("utf-8", "replace")
    return any(
        name == "tokenauth" and value.lower() == "true"
        for name, _, value in (f.partition("=") for f in text.split(","))
    )


def sasl_username(mechanism: str, first_message: bytes, claim: str = "sub") -> str | None:
    """The user name a client claims in its first SASL message; None when unreadable.
    ``claim``: OAUTHBEARER's principal claim.

    :raises AmbiguousSaslMessage: when the message names a user twice.
    """
    try:
        text = first_message.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if mechanism == "PLAIN":
        parts = text.split("\x00")
        if len(parts) != 3:
            return None
        _other_authorization_id(parts[0], parts[1], mechanism)
        return parts[1] or None
    if mechanism in SCRAM_MECHANISMS:
        # gs2-header "n,," (or "y,," / "n,a=authzid,"), then "n=<user>,r=<nonce>"
        users = [f[2:] for f in text.split(",")[2:] if f.startswith("n=")]
        if len(users) > 1:
            raise AmbiguousSaslMessage(f"{mechanism}: the first message names a user twice")
        user = users[0].replace("=2C", ",").replace("=3D", "=") or None if users else None
        if not scram_token_authentication(first_message):  # n= is the token's id, not a user
            _other_authorization_id(_gs2_authorization_id(text), user, mechanism)
        return user
    if mechanism == "OAUTHBEARER":
        user = oauthbearer_claim(text, claim)
        _other_authorization_id(_gs2_authorization_id(text.split("\x01", 1)[0]), user, mechanism)
        return user
    return None


class SaslState:
    """One connection's SASL exchange, as far as the gateway follows it.

    Phases, as Kafka's SaslServerAuthenticator has them: ``idle`` (no exchange yet),
    ``handshake`` (a SaslHandshake forwarded, its answer not back), ``authenticating`` (the
    broker accepted the mechanism; SaslAuthenticate rounds), ``complete`` (the broker answered
    the whole exchange with success) and ``failed`` (the broker refused the mechanism or the
    credentials, or a re-authentication named someone else: the connection closes, as Kafka
    closes it). A mechanism counts only once the broker has accepted its handshake, so the
    gateway reads the client's messages as the broker does.

    With ``required`` (``sasl.client_auth: required``), :meth:`refusal` admits nothing but
    ApiVersions and SaslHandshake before an exchange, nothing but SaslAuthenticate during
    one, and nothing while a SASL answer is awaited.
    """

    def __init__(self, oauthbearer_claim: str = "sub", *, required: bool = False) -> None:
        self.oauthbearer_claim = oauthbearer_claim
        self.required = required
        self.mechanism: str | None = None
        """The mechanism the broker accepted (the last exchange's)."""
        self.phase = "idle"
        self.principal: str | None = None
        """``User:<name>`` of the last completed exchange."""
        self.failure: str | None = None
        """Why the exchange failed (phase ``failed``)."""
        self.failure_api = SASL_AUTHENTICATE
        """The API whose answer failed the exchange (SaslHandshake or SaslAuthenticate)."""
        self.failure_code: int | None = None
        """The error code the client was answered with when the exchange failed."""
        self.failed_by_broker = False
        """The broker refused (a mechanism or the credentials); else the gateway did."""
        self._requested: str | None = None
        self._previous: str | None = None
        """On a re-authentication (KIP-368): the principal it must name again."""
        self._answer_due = False
        self._user: str | None = None
        self._messages = 0
        self._successes = 0

    @property
    def failed(self) -> bool:
        return self.phase == "failed"

    @property
    def authenticated(self) -> bool:
        """The broker has answered the whole exchange with success (and no re-authentication
        is under way)."""
        return self.phase == "complete"

    @property
    def answer_due(self) -> bool:
        """A SASL request has been forwarded and its answer is not back: whom the connection
        is, once it is, is not known yet."""
        return self._answer_due

    @property
    def claimed_user(self) -> str | None:
        """The user name the client's first SASL message of this exchange claims (not yet,
        or not, authenticated); None before one, or when it names none."""
        return self._user

    def refusal(self, api_key: int) -> str | None:
        """Why a request of ``api_key`` may not be served now (``required`` only); None: it
        may."""
        if not self.required:
            return None
        if self.phase == "failed":
            return f"the SASL exchange failed ({self.failure})"
        if self._answer_due:
            return "sent before the answer to its SASL request"
        if self.phase == "authenticating":
            return None if api_key == SASL_AUTHENTICATE else "sent during the SASL exchange"
        if self.phase == "complete" or api_key in (API_VERSIONS_KEY, SASL_HANDSHAKE):
            return None
        return "sent before SASL authentication (sasl.client_auth: required)"

    def refuse_unfollowable(self, mechanism: str) -> tuple[str, ...] | None:
        """With ``required``, a handshake for a mechanism the gateway cannot follow (GSSAPI:
        it cannot tell when the exchange ends nor whom it names) fails the exchange, as a
        broker that does not enable it would; returns the mechanisms the gateway can follow,
        for the UNSUPPORTED_SASL_MECHANISM answer. None: not refused here."""
        if not self.required or mechanism in SASL_ROUNDS:
            return None
        self._fail(
            f"SASL mechanism {mechanism!r}: the gateway cannot tell when its exchange "
            "completes or whom it names, so it cannot require it",
            api=SASL_HANDSHAKE,
            code=UNSUPPORTED_SASL_MECHANISM,
        )
        return tuple(SASL_ROUNDS)

    def handshake_sent(self, mechanism: str) -> str | None:
        """A SaslHandshake for ``mechanism`` is about to be forwarded (after
        :meth:`refuse_unfollowable`); a reason to refuse it instead, else None: a
        re-authentication with another mechanism, whatever ``sasl.client_auth`` says (Kafka
        refuses it too). Carried, a mechanism the gateway cannot follow (GSSAPI) names no one,
        and the connection kept the principal of the first exchange for whomever the broker
        authenticated next: every event after it named the wrong principal."""
        if self.phase == "complete" and mechanism != self.mechanism:
            return (
                f"re-authentication with {mechanism} after {self.mechanism}: Kafka refuses a "
                "change of mechanism"
            )
        self._requested = mechanism
        self._answer_due = True
        self._previous = self.principal if self.phase == "complete" else None
        self.phase = "handshake"
        return None

    def handshake_answered(self, error_code: int) -> None:
        """The broker's answer to the handshake: the mechanism counts once it is accepted."""
        self._answer_due = False
        if self.phase != "handshake" or self._requested is None:
            return
        if error_code != 0:
            self._fail(
                f"the broker refused mechanism {self._requested} (error {error_code})",
                api=SASL_HANDSHAKE,
                code=error_code,
                by_broker=True,
            )
            return
        self.start(self._requested)

    def start(self, mechanism: str) -> None:
        """The exchange for ``mechanism`` begins (the broker accepted its handshake)."""
        self.mechanism = mechanism
        self.phase = "authenticating"
        self._user = None
        self._messages = 0
        self._successes = 0

    def client_message(self, auth_bytes: bytes) -> None:
        """A SaslAuthenticate is about to be forwarded; outside an exchange it names nobody.

        :raises AmbiguousSaslMessage: (the first message; the connection must close).
        :raises UnnamedSaslPrincipal: (the same) for a delegation token where a principal is
            needed (see :meth:`_token_authentication`).
        """
        if self.phase != "authenticating":
            return
        self._answer_due = True
        if self.mechanism is not None and self._messages == 0:
            self._user = sasl_username(self.mechanism, auth_bytes, self.oauthbearer_claim)
            if self.mechanism in SCRAM_MECHANISMS and scram_token_authentication(auth_bytes):
                self._token_authentication()
        self._messages += 1

    def _token_authentication(self) -> None:
        """A SCRAM exchange with a delegation token: the broker authenticates the token's
        owner, and ``n=`` names only the token (Kafka's ScramSaslServer). The gateway cannot
        learn the owner (Kafka refuses delegation token requests on a connection a token
        authenticated), so the exchange names no principal here, as GSSAPI does; where one is
        needed (``required``, or a re-authentication that must name the principal before it)
        it is refused.

        :raises UnnamedSaslPrincipal:
        """
        token = self._user
        self._user = None
        if self.required:
            reason = (
                f"delegation token authentication (token {token!r}): the broker authenticates "
                "the token's owner, whom the gateway cannot name"
            )
        elif self._previous is not None:
            reason = (
                f"re-authentication with a delegation token after {self._previous}: the "
                "gateway cannot tell whether the token's owner is the same principal"
            )
        else:
            return
        self._user = token  # the name the client claimed, for the audit of the refusal
        self._fail(reason, code=SASL_AUTHENTICATION_FAILED)
        raise UnnamedSaslPrincipal(reason)

    def broker_answered(self, success: bool, error_code: int | None = None) -> str | None:
        """The principal once the exchange is complete and successful, else None. A refusal
        fails the exchange; so does a re-authentication that names someone else (Kafka
        refuses a change of principal)."""
        self._answer_due = False
        if self.phase != "authenticating":
            return None
        if not success:
            self._fail(
                f"the broker refused the {self.mechanism} credentials",
                code=error_code,
                by_broker=True,
            )
            return None
        self._successes += 1
        needed = SASL_ROUNDS.get(self.mechanism or "")
        if needed is None or self._successes != needed:
            return None
        if self._user is None:
            if self._previous is not None:
                # the connection would stay the principal it was for whomever this names
                self._fail(
                    f"re-authentication after {self._previous} names no user the gateway "
                    f"can read in its {self.mechanism} message",
                    code=SASL_AUTHENTICATION_FAILED,
                )
            return None
        principal = f"User:{self._user}"
        if self._previous is not None and self._previous != principal:
            self._fail(
                f"re-authentication as {principal} after {self._previous}",
                code=SASL_AUTHENTICATION_FAILED,
            )
            return None
        self.phase, self.principal = "complete", principal
        return principal

    def _fail(
        self,
        reason: str,
        *,
        api: int = SASL_AUTHENTICATE,
        code: int | None = None,
        by_broker: bool = False,
    ) -> None:
        # The claimed user stays known (for the audit); a failed exchange names no principal.
        self.phase, self.failure, self.principal = "failed", reason, None
        self.failure_api, self.failure_code, self.failed_by_broker = api, code, by_broker
