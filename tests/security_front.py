"""A secured front for the test broker: TLS, SASL, or both, then a plain relay to Tansu.

Why a front: Tansu 0.6 cannot be a secured Kafka listener. ``tansu broker --help`` lists
``--cert`` and ``--key``, but its argument parser refuses the two together, and with
``--cert`` alone the listener still speaks plaintext (a TLS ClientHello gets "early eof"); its
``--authentication`` switch has no SASL mechanisms to configure. So the tests put this front
before it, as a secured broker listener would be.

Why asyncio and not stunnel: the SASL half has to read Kafka frames anyway (SaslHandshake,
SaslAuthenticate), and TLS is one argument of ``asyncio.start_server`` on top of it; one
small front in the tests' own language, with no system package to install, and it records
what the tests assert (who presented which certificate, who authenticated with what).

The front is a listener of a broker that advertises the front's port (``EmbeddedBroker(
advertised_port=...)``), so every connection a client makes, per-node ones included, passes
it. With SASL, a connection may send ApiVersions (relayed to the broker), SaslHandshake v1 and
SaslAuthenticate before it authenticates and nothing else (Kafka closes such a connection);
after a successful exchange it is a byte relay. A failed exchange is answered with
SASL_AUTHENTICATION_FAILED (58) and the connection closed, as Kafka does.

Mechanisms, server side, with fixed credentials: PLAIN (RFC 4616), SCRAM-SHA-256 and
SCRAM-SHA-512 (RFC 5802 / RFC 7677, 4096 iterations as Kafka's minimum; with Kafka's
``tokenauth`` extension, delegation tokens: the token's id and HMAC stand for user and
password, and the token's owner is authenticated), OAUTHBEARER (RFC 7628; a token is accepted
when :class:`TokenEndpoint` issued it and it has not expired).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import http.server
import importlib
import json
import os
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import uvloop
from kio.schema.errors import ErrorCode
from kio.static.primitive import i64Timedelta

from gateway.config import HostPort
from protocol.codec import decode_request, encode_response, filled
from protocol.framing import SIZE, parse_request_header
from tests.support import close_loop

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
API_VERSIONS = 18
SASL_AUTHENTICATION_FAILED = 58
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34

_SCRAM_HASHES = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
_SCRAM_ITERATIONS = 4096


class AuthenticationFailed(Exception):
    pass


class _Scram:
    """The server side of one SCRAM exchange (RFC 5802 section 3)."""

    def __init__(
        self,
        mechanism: str,
        users: dict[str, str],
        delegation_tokens: dict[str, tuple[str, str]] | None = None,
    ) -> None:
        self._hash = _SCRAM_HASHES[mechanism]
        self._users = users
        self._tokens = delegation_tokens or {}
        self._salt = os.urandom(16)
        self._first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._salted = b""
        self.user: str | None = None

    def _hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self._hash).digest()

    def first(self, message: str) -> str:
        gs2, _, bare = message.partition(",,") if message.startswith("n,,") else ("", "", "")
        attributes = dict(part.split("=", 1) for part in bare.split(",") if "=" in part)
        user = attributes.get("n", "").replace("=2C", ",").replace("=3D", "=")
        # Kafka's ScramSaslServer: with the tokenauth extension, n= is a delegation token's
        # id, its HMAC the password, and the principal authenticated is the token's owner.
        if attributes.get("tokenauth", "").lower() == "true":
            password, owner = self._tokens.get(user, (None, None))
        else:
            password, owner = self._users.get(user), user
        if not gs2 == "n" or password is None or "r" not in attributes:
            raise AuthenticationFailed(
                "Authentication failed during authentication due to "
                "invalid credentials with SASL mechanism SCRAM"
            )
        self.user = owner
        self._first_bare = bare
        self._nonce = attributes["r"] + base64.b64encode(os.urandom(18)).decode()
        salt = base64.b64encode(self._salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={_SCRAM_ITERATIONS}"
        self._salted = hashlib.pbkdf2_hmac(
            self._hash().name, password.encode(), self._salt, _SCRAM_ITERATIONS
        )
        return self._server_first

    def final(self, message: str) -> str:
        without_proof, _, proof_text = message.rpartition(",p=")
        attributes = dict(part.split("=", 1) for part in without_proof.split(",") if "=" in part)
        # Kafka's ScramSaslServer checks that the client's nonce *ends with* the server's:
        # librdkafka up to 2.0 (Debian's kcat) sends its own nonce twice in front of it.
        if not attributes.get("r", "").endswith(self._nonce) or attributes.get("c") != "biws":
            raise AuthenticationFailed("Authentication failed: invalid nonce or channel binding")
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        client_key = self._hmac(self._salted, b"Client Key")
        stored_key = self._hash(client_key).digest()
        signature = self._hmac(stored_key, auth_message)
        proof = base64.b64decode(proof_text)
        recovered = bytes(a ^ b for a, b in zip(proof, signature, strict=False))
        if len(proof) != len(signature) or self._hash(recovered).digest() != stored_key:
            raise AuthenticationFailed(
                "Authentication failed during authentication due to "
                "invalid credentials with SASL mechanism SCRAM"
            )
        server_key = self._hmac(self._salted, b"Server Key")
        return "v=" + base64.b64encode(self._hmac(server_key, auth_message)).decode()


@dataclass
class SaslCredentials:
    """What the front accepts: users and passwords (PLAIN, SCRAM), and tokens from
    ``tokens`` (OAUTHBEARER)."""

    users: dict[str, str]
    tokens: TokenEndpoint | None = None
    mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
    delegation_tokens: dict[str, tuple[str, str]] = field(default_factory=dict)
    """SCRAM with the ``tokenauth`` extension: token id -> (its HMAC, the owner's user name)."""
    close_on_failure: bool = True
    """False: after a failed exchange the front keeps the connection open and waits for a new
    handshake, as a broker laxer than Kafka might; the gateway must not rely on the close."""


@dataclass
class SecuredFront:
    """The front: ``tls`` (a server context; None for plaintext) and ``sasl`` (None: no
    authentication), relaying to ``broker``. Runs on its own event loop in a thread."""

    broker: HostPort
    port: int
    tls: ssl.SSLContext | None = None
    sasl: SaslCredentials | None = None
    connections: int = 0
    client_subjects: list[str | None] = field(default_factory=list)
    """The subject CN of each connection's client certificate (None without one)."""
    authenticated: list[tuple[str, str]] = field(default_factory=list)
    """(mechanism, user) of each successful exchange."""
    refused: list[tuple[str, str]] = field(default_factory=list)
    """(mechanism, reason) of each failed one."""
    _server: asyncio.Server | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None

    @property
    def address(self) -> HostPort:
        return HostPort(host="127.0.0.1", port=self.port)

    def start(self) -> SecuredFront:
        self._loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(
                # 127.0.0.2 too: an address the broker certificate does not name
                self._serve,
                ["127.0.0.1", "127.0.0.2"],
                self.port,
                ssl=self.tls,
            ),
            self._loop,
        ).result(10)
        return self

    def stop(self) -> None:
        if self._loop is not None:
            if self._server is not None:
                self._loop.call_soon_threadsafe(self._server.close)
            close_loop(self._loop, self._thread)

    async def _serve(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        self.connections += 1
        cert = cwriter.get_extra_info("peercert")
        subject = dict(rdn[0] for rdn in cert["subject"]) if cert else {}
        self.client_subjects.append(subject.get("commonName"))
        breader, bwriter = await asyncio.open_connection(self.broker.host, self.broker.port)
        try:
            if self.sasl is not None and not await self._authenticate(
                creader, cwriter, breader, bwriter
            ):
                return
            await asyncio.gather(_pipe(creader, bwriter), _pipe(breader, cwriter))
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            bwriter.close()
            cwriter.close()

    async def _authenticate(
        self,
        creader: asyncio.StreamReader,
        cwriter: asyncio.StreamWriter,
        breader: asyncio.StreamReader,
        bwriter: asyncio.StreamWriter,
    ) -> bool:
        """Run the exchange; True once the client has authenticated."""
        assert self.sasl is not None
        exchange: _Exchange | None = None
        while True:
            frame = await _read_frame(creader)
            header = parse_request_header(frame)
            if header.api_key == API_VERSIONS:
                bwriter.write(SIZE.pack(len(frame)) + frame)
                cwriter.write(await _read_sized(breader))
                continue
            if header.api_key == SASL_HANDSHAKE and header.api_version == 1:
                mechanism = str(decode_request(header, frame).mechanism)
                known = mechanism in self.sasl.mechanisms
                exchange = _Exchange(mechanism, self.sasl) if known else None
                _answer(
                    cwriter,
                    header,
                    {
                        "error_code": 0 if known else UNSUPPORTED_SASL_MECHANISM,
                        "mechanisms": self.sasl.mechanisms,
                    },
                )
                if not known:
                    return False
                continue
            if header.api_key != SASL_AUTHENTICATE or exchange is None:
                return False  # Kafka closes a connection that skips authentication
            auth_bytes = bytes(decode_request(header, frame).auth_bytes)
            try:
                reply = exchange.step(auth_bytes)
            except AuthenticationFailed as exc:
                self.refused.append((exchange.mechanism, str(exc)))
                _answer(
                    cwriter,
                    header,
                    {
                        "error_code": SASL_AUTHENTICATION_FAILED,
                        "error_message": str(exc),
                        "auth_bytes": b"",
                    },
                )
                await cwriter.drain()
                if self.sasl.close_on_failure:
                    return False
                exchange = None
                continue
            _answer(cwriter, header, {"error_code": 0, "auth_bytes": reply.encode()})
            if exchange.done:
                assert exchange.user is not None
                self.authenticated.append((exchange.mechanism, exchange.user))
                return True


class _Exchange:
    def __init__(self, mechanism: str, credentials: SaslCredentials) -> None:
        self.mechanism = mechanism
        self._credentials = credentials
        self._scram = (
            _Scram(mechanism, credentials.users, credentials.delegation_tokens)
            if mechanism in _SCRAM_HASHES
            else None
        )
        self._steps = 0
        self.done = False
        self.user: str | None = None

    def step(self, message: bytes) -> str:
        """The server's answer to the client's ``message``.

        :raises AuthenticationFailed:
        """
        self._steps += 1
        text = message.decode("utf-8", "replace")
        if self._scram is not None:
            if self._steps == 1:
                return self._scram.first(text)
            reply = self._scram.final(text)
            self.user, self.done = self._scram.user, True
            return reply
        if self.mechanism == "PLAIN":
            parts = text.split("\x00")
            if len(parts) != 3 or self._credentials.users.get(parts[1]) != parts[2]:
                raise AuthenticationFailed("Authentication failed: Invalid username or password")
            self.user, self.done = parts[1], True
            return ""
        return self._oauthbearer(text)

    def _oauthbearer(self, text: str) -> str:
        """As Kafka's OAuthBearerClientInitialResponse reads the client's first message: the
        key=value pairs between the gs2 header and the final ``\x01`` go into a map
        (``Utils.parseMap``), so of a key given twice the last counts; ``auth`` is
        ``Bearer <token>``."""
        tokens = self._credentials.tokens
        pairs = dict(p.split("=", 1) for p in text.split("\x01")[1:] if "=" in p)
        scheme, _, token = pairs.get("auth", "").partition(" ")
        token = token.strip(" ") if scheme.lower() == "bearer" else ""
        subject = tokens.subject_of(token) if tokens is not None else None
        if subject is None:
            raise AuthenticationFailed("Authentication failed: invalid_token")
        self.user, self.done = subject, True
        return ""


def _answer(writer: asyncio.StreamWriter, header: Any, fields: dict[str, Any]) -> None:
    name = "sasl_handshake" if header.api_key == SASL_HANDSHAKE else "sasl_authenticate"
    module = importlib.import_module(f"kio.schema.{name}.v{header.api_version}.response")
    cls = (
        module.SaslHandshakeResponse
        if header.api_key == SASL_HANDSHAKE
        else (module.SaslAuthenticateResponse)
    )
    fields = {**fields, "error_code": ErrorCode(fields["error_code"])}
    if header.api_key == SASL_AUTHENTICATE:
        fields["session_lifetime"] = i64Timedelta.parse(timedelta(0))
    payload = filled(cls, fields)
    frame = encode_response(header.correlation_id, header.api_key, header.api_version, payload)
    writer.write(SIZE.pack(len(frame)) + frame)


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    return await reader.readexactly(SIZE.unpack(await reader.readexactly(4))[0])


async def _read_sized(reader: asyncio.StreamReader) -> bytes:
    prefix = await reader.readexactly(4)
    return prefix + await reader.readexactly(SIZE.unpack(prefix)[0])


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()


def server_context(pki: Path, *, client_certificates: bool) -> ssl.SSLContext:
    """The front's TLS: ``make_pki``'s server certificate (127.0.0.1 and localhost), client
    certificates from its CA required when ``client_certificates``."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(pki / "server.pem"), str(pki / "server.key"))
    if client_certificates:
        context.load_verify_locations(str(pki / "ca.pem"))
        context.verify_mode = ssl.CERT_REQUIRED
    return context


# --- OAuth 2 token endpoint ----------------------------------------------------------------


class TokenEndpoint:
    """A token endpoint for the client credentials grant (RFC 6749 4.4), on a loopback port:
    the client authenticates with HTTP basic authentication (or client_id/client_secret form
    fields, as librdkafka sends them); the token is a JWT-shaped string (unsigned: the front
    checks it by having issued it) whose ``sub`` is the client id."""

    def __init__(self, clients: dict[str, str], lifetime_s: int = 3600) -> None:
        self.clients = clients
        self.lifetime_s = lifetime_s
        self.issued: dict[str, tuple[str, float]] = {}
        self.requests: list[dict[str, str]] = []
        """The form fields of each request, secrets left out."""
        endpoint = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length", "0"))
                form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
                client_id, secret = _basic(self.headers.get("Authorization", ""))
                client_id = client_id or form.get("client_id", "")
                secret = secret or form.get("client_secret", "")
                endpoint.requests.append({k: v for k, v in form.items() if "secret" not in k})
                token = endpoint._issue(client_id, secret, form)
                body = json.dumps(
                    {"access_token": token, "token_type": "bearer", "expires_in": lifetime_s}
                    if token
                    else {"error": "invalid_client"}
                ).encode()
                self.send_response(200 if token else 401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return None

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/oauth2/token"

    def start(self) -> TokenEndpoint:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _issue(self, client_id: str, secret: str, form: dict[str, str]) -> str | None:
        if form.get("grant_type") != "client_credentials" or self.clients.get(client_id) != secret:
            return None
        now = int(time.time())
        claims = {
            "sub": client_id,
            "iat": now,
            "exp": now + self.lifetime_s,
            "scope": form.get("scope", ""),
        }
        token = (
            ".".join(
                base64.urlsafe_b64encode(json.dumps(part).encode()).decode().rstrip("=")
                for part in ({"alg": "none", "typ": "JWT"}, claims)
            )
            + "."
            + base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        )
        self.issued[token] = (client_id, now + self.lifetime_s)
        return token

    def subject_of(self, token: str) -> str | None:
        issued = self.issued.get(token)
        if issued is None or issued[1] < time.time():
            return None
        return issued[0]


def _basic(header: str) -> tuple[str, str]:
    if not header.lower().startswith("basic "):
        return "", ""
    user, _, password = base64.b64decode(header[6:]).decode().partition(":")
    return urllib.parse.unquote(user), urllib.parse.unquote(password)
