"""``--command-config FILE``: how the kpg client tools reach a gateway that requires TLS or
SASL, configured with Kafka's client property names, as kafka-configs.sh takes them.

The file is a Java properties file. Supported properties (anything else is refused, named):

- ``security.protocol``: PLAINTEXT (the default), SSL, SASL_PLAINTEXT, SASL_SSL;
- ``ssl.truststore.type``: PEM (the default here); ``ssl.truststore.location``: a file of
  CA certificates, or ``ssl.truststore.certificates``: the certificates themselves. With
  neither, the system's CAs;
- ``ssl.keystore.type``: PEM; ``ssl.keystore.location``: one PEM file holding the client's
  private key and its certificate chain (Kafka's PEM keystore); ``ssl.key.password``: the
  key's password when it is encrypted;
- ``ssl.endpoint.identification.algorithm``: ``https`` (the default: the server's
  certificate must name the host the tool connects to) or empty (no host name check; the
  chain is still verified);
- ``sasl.mechanism``: PLAIN (the default), SCRAM-SHA-256, SCRAM-SHA-512;
- ``sasl.jaas.config``: ``org.apache.kafka.common.security.plain.PlainLoginModule`` for
  PLAIN, ``org.apache.kafka.common.security.scram.ScramLoginModule`` for SCRAM, ``required``,
  and ``username="..." password="...";``.

Not supported, refused with a message saying so: JKS and PKCS12 stores (Python's ssl module
reads PEM only; convert them with ``keytool -importkeystore -deststoretype PKCS12`` and
``openssl pkcs12 -nodes``), inline PEM keystores (``ssl.keystore.key``,
``ssl.keystore.certificate.chain``), GSSAPI and OAUTHBEARER.

Properties are read once, before anything is sent; secrets are never printed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from protocol import sasl as wire
from protocol.framing import DEFAULT_MAX_FRAME_BYTES, SIZE, check_frame_size

PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
LOGIN_MODULES: Final = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
SUPPORTED: Final = frozenset(
    {
        "security.protocol",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.certificates",
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
        "sasl.mechanism",
        "sasl.jaas.config",
    }
)
_NOT_SUPPORTED: Final = {
    "ssl.truststore.password": "only PEM trust stores are read, and they have no password",
    "ssl.keystore.password": "only PEM key stores are read; give the key's password as "
    "ssl.key.password",
    "ssl.keystore.key": "inline PEM key stores are not supported; use ssl.keystore.location",
    "ssl.keystore.certificate.chain": "inline PEM key stores are not supported; use "
    "ssl.keystore.location",
    "sasl.login.callback.handler.class": "only PLAIN and SCRAM logins are supported",
    "sasl.oauthbearer.token.endpoint.url": "OAUTHBEARER is not supported",
    "sasl.kerberos.service.name": "GSSAPI is not supported",
}
_STORE_TYPE_HINT: Final = (
    "only PEM is supported (Python's ssl module reads no JKS or PKCS12 stores): convert it "
    "with `keytool -importkeystore -deststoretype PKCS12` and `openssl pkcs12 -nodes`"
)
_JAAS: Final = re.compile(r"\s*(?P<module>[\w.$]+)\s+(?P<flag>\w+)(?P<options>.*?);?\s*$", re.S)
_JAAS_OPTION: Final = re.compile(r'\s*([\w.]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))', re.S)


class CommandConfigError(ValueError):
    """A --command-config file the tools cannot use; the message names the property."""


class AuthenticationFailed(OSError):
    """The gateway (or the broker behind it) refused the SASL exchange."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SaslCredentials:
    mechanism: str
    username: str
    password: str = field(repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientSecurity:
    """How to open a connection: TLS (a context) and SASL (credentials), each optional."""

    security_protocol: str = "PLAINTEXT"
    tls: ssl.SSLContext | None = None
    sasl: SaslCredentials | None = None


PLAINTEXT: Final = ClientSecurity()


# --- the properties file ----------------------------------------------------------------------


def read_properties(text: str) -> dict[str, str]:
    """A Java properties file's keys and values: ``#``/``!`` comments, ``key=value``,
    ``key: value`` or ``key value``, backslash line continuations and escapes (``\\t``,
    ``\\n``, ``\\uXXXX``, ``\\=``...)."""
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split_property(line)
        props[_unescape(key)] = _unescape(value)
    return props


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        part = raw.lstrip()
        if not pending and (not part or part[0] in "#!"):
            continue
        trailing = len(part) - len(part.rstrip("\\"))
        if trailing % 2 == 1:
            pending += part[:-1]
            continue
        lines.append(pending + part)
        pending = ""
    if pending:
        lines.append(pending)
    return lines


def _split_property(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=: \t\f":
            break
        i += 1
    key, rest = line[:i], line[i:]
    rest = rest.lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    out = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2 : i + 6]):
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def load_command_config(path: Path | None) -> ClientSecurity:
    """The security settings of a --command-config file (None: plaintext).

    :raises CommandConfigError: naming the file and the property.
    """
    if path is None:
        return PLAINTEXT
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandConfigError(f"--command-config {path}: cannot read: {exc}") from None
    try:
        return client_security(read_properties(text))
    except CommandConfigError as exc:
        raise CommandConfigError(f"--command-config {path}: {exc}") from None


def client_security(props: Mapping[str, str]) -> ClientSecurity:
    """:raises CommandConfigError: naming the property."""
    for key in props:
        if key in _NOT_SUPPORTED:
            raise CommandConfigError(f"{key} is not supported: {_NOT_SUPPORTED[key]}")
        if key not in SUPPORTED:
            raise CommandConfigError(
                f"{key} is not supported (kpg's tools take {', '.join(sorted(SUPPORTED))})"
            )
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in PROTOCOLS:
        raise CommandConfigError(
            f"security.protocol={props['security.protocol']}: expected one of "
            f"{', '.join(PROTOCOLS)}"
        )
    uses_tls = protocol in ("SSL", "SASL_SSL")
    uses_sasl = protocol.startswith("SASL_")
    tls_keys = sorted(k for k in props if k.startswith("ssl."))
    if tls_keys and not uses_tls:
        raise CommandConfigError(f"{tls_keys[0]} is set but security.protocol={protocol}")
    sasl_keys = sorted(k for k in props if k.startswith("sasl."))
    if sasl_keys and not uses_sasl:
        raise CommandConfigError(f"{sasl_keys[0]} is set but security.protocol={protocol}")
    return ClientSecurity(
        security_protocol=protocol,
        tls=tls_context(props) if uses_tls else None,
        sasl=sasl_credentials(props) if uses_sasl else None,
    )


def _store_type(props: Mapping[str, str], key: str) -> None:
    kind = props.get(key, "PEM").strip().upper()
    if kind != "PEM":
        raise CommandConfigError(f"{key}={props[key]} is not supported: {_STORE_TYPE_HINT}")


def tls_context(props: Mapping[str, str]) -> ssl.SSLContext:
    """:raises CommandConfigError:"""
    _store_type(props, "ssl.truststore.type")
    _store_type(props, "ssl.keystore.type")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    location = props.get("ssl.truststore.location")
    inline = props.get("ssl.truststore.certificates")
    if location and inline:
        raise CommandConfigError(
            "ssl.truststore.location and ssl.truststore.certificates: give one of them"
        )
    if not location and not inline:
        context.load_default_certs()  # as Java falls back to its own CAs
    _load(
        "ssl.truststore.location",
        location,
        lambda: context.load_verify_locations(cafile=location),
    )
    _load(
        "ssl.truststore.certificates",
        inline,
        lambda: context.load_verify_locations(cadata=inline),
    )
    keystore = props.get("ssl.keystore.location")
    key_password = props.get("ssl.key.password")
    if key_password is not None and not keystore:
        raise CommandConfigError("ssl.key.password is set without ssl.keystore.location")
    _load(
        "ssl.keystore.location",
        keystore,
        lambda: context.load_cert_chain(keystore or "", password=key_password or None),
    )
    algorithm = props.get("ssl.endpoint.identification.algorithm", "https").strip()
    if algorithm.lower() not in ("https", ""):
        raise CommandConfigError(
            f"ssl.endpoint.identification.algorithm={algorithm}: expected https, or empty "
            "for no host name check"
        )
    context.check_hostname = algorithm != ""
    return context


def _load(key: str, value: str | None, load: Callable[[], None]) -> None:
    if not value:
        return
    try:
        load()
    except FileNotFoundError:
        raise CommandConfigError(f"{key}={value}: no such file") from None
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise CommandConfigError(
            f"{key}={value}: not a PEM file this tool can use ({exc}); {_STORE_TYPE_HINT}"
            if key != "ssl.keystore.location"
            else f"{key}={value}: cannot load the key and certificate chain ({exc}); it "
            "must be one PEM file with the private key and the certificates, and "
            "ssl.key.password must be the key's password if it is encrypted"
        ) from None


def sasl_credentials(props: Mapping[str, str]) -> SaslCredentials:
    """:raises CommandConfigError:"""
    mechanism = props.get("sasl.mechanism", "PLAIN").strip().upper()
    if mechanism not in MECHANISMS:
        raise CommandConfigError(
            f"sasl.mechanism={props['sasl.mechanism']} is not supported: expected one of "
            f"{', '.join(MECHANISMS)}"
        )
    jaas = props.get("sasl.jaas.config")
    if not jaas:
        raise CommandConfigError(f"sasl.mechanism={mechanism} needs sasl.jaas.config")
    username, password = parse_jaas(jaas, mechanism)
    return SaslCredentials(mechanism=mechanism, username=username, password=password)


def parse_jaas(value: str, mechanism: str) -> tuple[str, str]:
    """(username, password) of a ``sasl.jaas.config`` for ``mechanism``.

    :raises CommandConfigError: (never quoting the password).
    """
    match = _JAAS.match(value)
    if match is None:
        raise CommandConfigError(
            'sasl.jaas.config: expected \'<LoginModule> required username="..." password="...";\''
        )
    module, flag = match.group("module"), match.group("flag")
    if module != LOGIN_MODULES[mechanism]:
        raise CommandConfigError(
            f"sasl.jaas.config: {module} does not go with sasl.mechanism={mechanism}; "
            f"expected {LOGIN_MODULES[mechanism]}"
        )
    if flag != "required":
        raise CommandConfigError(f"sasl.jaas.config: control flag {flag!r}: expected required")
    options: dict[str, str] = {}
    rest = match.group("options")
    position = 0
    for option in _JAAS_OPTION.finditer(rest):
        if rest[position : option.start()].strip():
            break
        quoted = option.group(2)
        options[option.group(1)] = (
            re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else option.group(3)
        )
        position = option.end()
    if rest[position:].strip(" \t\r\n;"):
        raise CommandConfigError(
            "sasl.jaas.config: cannot read the options; expected "
            'username="..." password="..." separated by spaces'
        )
    missing = [k for k in ("username", "password") if k not in options]
    if missing:
        raise CommandConfigError(f"sasl.jaas.config: {module} needs {' and '.join(missing)}")
    return options["username"], options["password"]


# --- SCRAM (RFC 5802), the client's side --------------------------------------------------------


@dataclass(slots=True)
class ScramClient:
    """One SCRAM exchange: :meth:`first`, :meth:`final` (given the server's first message),
    :meth:`verify` (given the server's final message)."""

    mechanism: str
    username: str
    password: str = field(repr=False)
    nonce: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    _first_bare: str = ""
    _server_signature: bytes = field(default=b"", repr=False)

    @property
    def _hash(self) -> str:
        return "sha256" if self.mechanism == "SCRAM-SHA-256" else "sha512"

    def first(self) -> bytes:
        name = self.username.replace("=", "=3D").replace(",", "=2C")
        self._first_bare = f"n={name},r={self.nonce}"
        return f"n,,{self._first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        """:raises AuthenticationFailed: for a server message that does not fit."""
        text = server_first.decode("utf-8", "replace")
        fields = dict(item.split("=", 1) for item in text.split(",") if "=" in item)
        nonce, salt, iterations = fields.get("r", ""), fields.get("s"), fields.get("i", "")
        if not nonce.startswith(self.nonce) or salt is None or not iterations.isdigit():
            raise AuthenticationFailed(f"{self.mechanism}: unexpected server message")
        salted = hashlib.pbkdf2_hmac(
            self._hash, self.password.encode(), base64.b64decode(salt), int(iterations)
        )
        client_key = hmac.digest(salted, b"Client Key", self._hash)
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        signature = hmac.digest(stored_key, auth_message, self._hash)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.digest(salted, b"Server Key", self._hash)
        self._server_signature = hmac.digest(server_key, auth_message, self._hash)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        """:raises AuthenticationFailed: unless the server proved it knows the password."""
        text = server_final.decode("utf-8", "replace")
        if text.startswith("e="):
            raise AuthenticationFailed(f"{self.mechanism}: the server refused: {text[2:]}")
        expected = "v=" + base64.b64encode(self._server_signature).decode()
        if not hmac.compare_digest(text.encode(), expected.encode()):
            raise AuthenticationFailed(f"{self.mechanism}: the server's signature does not match")


def plain_message(credentials: SaslCredentials) -> bytes:
    """SASL PLAIN (RFC 4616): no authorization id, the user, the password."""
    return b"\0" + credentials.username.encode() + b"\0" + credentials.password.encode()


# --- connections ---------------------------------------------------------------------------------


def read_exactly(sock: socket.socket, n: int, peer: str) -> bytes:
    """``n`` bytes from a blocking socket.

    :raises ConnectionError: naming ``peer`` when it closes first.
    """
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"{peer} closed the connection before answering")
        data += chunk
    return bytes(data)


class Connection:
    """One connection to a gateway, TLS and SASL done: send frames, read frames."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._correlation_id = 0

    def next_correlation_id(self) -> int:
        self._correlation_id += 1
        return self._correlation_id

    def request(self, frame: bytes) -> bytes:
        """Send one request frame (size prefix included); the answer frame (without).

        :raises OSError: when the connection closes early.
        :raises FrameRejected: for an answer size past Kafka's default cap.
        """
        self._sock.sendall(frame)
        size: int = SIZE.unpack(read_exactly(self._sock, 4, "the gateway"))[0]
        check_frame_size(size, DEFAULT_MAX_FRAME_BYTES)
        return read_exactly(self._sock, size, "the gateway")

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(
    host: str, port: int, timeout: float, security: ClientSecurity, client_id: str
) -> Connection:
    """A connection to ``host:port``, with TLS and SASL as ``security`` says.

    :raises OSError: when the gateway cannot be reached, TLS fails
        (``ssl.SSLError``, a subclass) or SASL is refused (:class:`AuthenticationFailed`).
    :raises Undecodable: for a SASL answer that does not decode.
    """
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        if security.tls is not None:
            sock = security.tls.wrap_socket(sock, server_hostname=host)
        connection = Connection(sock)
        if security.sasl is not None:
            authenticate(connection, security.sasl, client_id)
    except BaseException:
        sock.close()
        raise
    return connection


def authenticate(connection: Connection, credentials: SaslCredentials, client_id: str) -> None:
    """SaslHandshake, then SaslAuthenticate round trips for the mechanism.

    :raises AuthenticationFailed:
    """
    answer = connection.request(
        wire.handshake_request(
            credentials.mechanism,
            correlation_id=connection.next_correlation_id(),
            client_id=client_id,
        )
    )
    code, enabled = wire.read_handshake_response(answer)
    if code != 0:
        raise AuthenticationFailed(
            f"the server does not enable SASL mechanism {credentials.mechanism} "
            f"(it enables: {', '.join(enabled) or 'none'})"
        )
    if credentials.mechanism == "PLAIN":
        _round(connection, plain_message(credentials), client_id)
        return
    scram = ScramClient(
        mechanism=credentials.mechanism,
        username=credentials.username,
        password=credentials.password,
    )
    server_first = _round(connection, scram.first(), client_id)
    server_final = _round(connection, scram.final(server_first), client_id)
    scram.verify(server_final)


def _round(connection: Connection, auth_bytes: bytes, client_id: str) -> bytes:
    answer = connection.request(
        wire.authenticate_request(
            auth_bytes, correlation_id=connection.next_correlation_id(), client_id=client_id
        )
    )
    code, message, server_bytes = wire.read_authenticate_response(answer)
    if code != 0:
        raise AuthenticationFailed(f"SASL authentication failed: {message or f'error {code}'}")
    return server_bytes


# --- the tools' option -------------------------------------------------------------------------

COMMAND_CONFIG_HELP: Final = (
    "a Java properties file of Kafka client security settings, as kafka-configs.sh takes "
    "them: security.protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), "
    "ssl.truststore.location (or ssl.truststore.certificates), ssl.keystore.location, "
    "ssl.key.password (PEM files), "
    "ssl.endpoint.identification.algorithm, sasl.mechanism (PLAIN, SCRAM-SHA-256, "
    "SCRAM-SHA-512) and sasl.jaas.config"
)


def unreachable_hint(security: ClientSecurity, exc: BaseException) -> str:
    """What to add to a failure on a plaintext connection: the gateway may require more.
    A refused connection reached no listener at all: no setting would have helped."""
    if isinstance(exc, ConnectionRefusedError):
        return " (nothing listens there: is the gateway running, and is that its address?)"
    if security.security_protocol == "PLAINTEXT":
        return " (if the gateway requires TLS or SASL, give --command-config)"
    return ""
