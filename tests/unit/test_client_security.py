"""--command-config: Kafka's client properties for the kpg tools, parsed and applied; the SASL
exchanges the tools make (PLAIN, SCRAM-SHA-256/512).

End to end (the tools, through the gateway, to the test broker behind tests/security_front.py,
since Tansu has no SASL) is tests/security/test_tools_sasl.py. Here the client side alone runs
on a socket pair against a scripted SaslHandshake/SaslAuthenticate server, to check its
messages byte by byte; the SCRAM server side is the secured front's."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse

from gateway import cli
from gateway.client_security import (
    AuthenticationFailed,
    ClientSecurity,
    CommandConfigError,
    Connection,
    SaslCredentials,
    ScramClient,
    authenticate,
    client_security,
    load_command_config,
    parse_jaas,
    read_properties,
)
from protocol import sasl as wire
from protocol.codec import encode_response
from protocol.framing import SIZE, frame_bytes, parse_request_header
from tests import security_front

pytestmark = pytest.mark.unit

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="alice" password="alice-secret";'
)
SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required\n"
    '    username="bob"\n    password="p\\"w d";'
)


def test_properties_are_read_as_java_reads_them() -> None:
    text = (
        "# comment\n"
        "! another\n"
        "security.protocol = SASL_SSL\n"
        "sasl.mechanism:SCRAM-SHA-256\n"
        "ssl.endpoint.identification.algorithm=\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="bob" \\\n'
        '    password="x";\n'
        "path=C:\\\\certs\\\\ca.pem\n"
        "key\\=with\\:seps value \\u00e9\n"
    )
    assert read_properties(text) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "ssl.endpoint.identification.algorithm": "",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        'required username="bob" password="x";',
        "path": "C:\\certs\\ca.pem",
        "key=with:seps": "value \u00e9",
    }


@pytest.mark.parametrize(
    ("jaas", "mechanism", "expected"),
    [
        (PLAIN_JAAS, "PLAIN", ("alice", "alice-secret")),
        (SCRAM_JAAS, "SCRAM-SHA-256", ("bob", 'p"w d')),
        (SCRAM_JAAS, "SCRAM-SHA-512", ("bob", 'p"w d')),
        (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            "username=carol password=c4rol",
            "PLAIN",
            ("carol", "c4rol"),
        ),
    ],
)
def test_jaas_config_gives_the_username_and_password(
    jaas: str, mechanism: str, expected: tuple[str, str]
) -> None:
    assert parse_jaas(jaas, mechanism) == expected


@pytest.mark.parametrize(
    ("jaas", "mechanism", "message"),
    [
        (PLAIN_JAAS, "SCRAM-SHA-256", "PlainLoginModule does not go with sasl.mechanism"),
        (SCRAM_JAAS, "PLAIN", "ScramLoginModule does not go with sasl.mechanism=PLAIN"),
        (PLAIN_JAAS.replace("required", "optional"), "PLAIN", "control flag 'optional'"),
        (PLAIN_JAAS.replace(' password="alice-secret"', ""), "PLAIN", "needs password"),
        (PLAIN_JAAS.replace("username=", "username:"), "PLAIN", "cannot read the options"),
        ('username="alice" password="alice-secret"', "PLAIN", "expected '<LoginModule> required"),
    ],
)
def test_a_jaas_config_that_does_not_fit_is_refused_without_the_password(
    jaas: str, mechanism: str, message: str
) -> None:
    with pytest.raises(CommandConfigError, match=message) as raised:
        parse_jaas(jaas, mechanism)
    assert "alice-secret" not in str(raised.value)


def test_sasl_properties_give_credentials_and_no_tls_for_sasl_plaintext() -> None:
    security = client_security(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": SCRAM_JAAS,
        }
    )
    assert security.tls is None
    assert security.sasl == SaslCredentials(
        mechanism="SCRAM-SHA-512", username="bob", password='p"w d'
    )
    assert 'p"w d' not in repr(security)


def test_plain_is_kafkas_default_mechanism() -> None:
    security = client_security({"security.protocol": "SASL_SSL", "sasl.jaas.config": PLAIN_JAAS})
    assert security.sasl is not None and security.sasl.mechanism == "PLAIN"
    assert isinstance(security.tls, ssl.SSLContext) and security.tls.check_hostname


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "GSSAPI is not supported"),
        (
            {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"},
            "OAUTHBEARER is not supported",
        ),
        ({"security.protocol": "SASL_SSL"}, "needs sasl.jaas.config"),
        ({"security.protocol": "SSL", "sasl.jaas.config": PLAIN_JAAS}, "security.protocol=SSL"),
        ({"security.protocol": "SASL_PLAINTEXT", "ssl.truststore.type": "PEM"}, "ssl.truststore"),
        ({"security.protocol": "SSL", "ssl.truststore.type": "JKS"}, "JKS is not supported"),
        ({"security.protocol": "SSL", "ssl.keystore.type": "PKCS12"}, "PKCS12 is not supported"),
        ({"security.protocol": "SSL", "ssl.truststore.password": "x"}, "ssl.truststore.password"),
        ({"security.protocol": "SSL", "ssl.key.password": "x"}, "without ssl.keystore.location"),
        (
            {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldaps"},
            "expected https, or empty",
        ),
        ({"bootstrap.servers": "x:9092"}, "bootstrap.servers is not supported"),
        ({"sasl.kerberos.service.name": "kafka"}, "GSSAPI is not supported"),
    ],
)
def test_what_the_tools_cannot_use_is_refused_naming_the_property(
    props: dict[str, str], message: str
) -> None:
    with pytest.raises(CommandConfigError, match=message):
        client_security(props)


def test_an_empty_identification_algorithm_turns_the_host_name_check_off() -> None:
    security = client_security(
        {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": ""}
    )
    assert security.tls is not None and not security.tls.check_hostname
    assert security.tls.verify_mode == ssl.CERT_REQUIRED


def test_the_file_is_named_in_every_error(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("security.protocol=SSL\nssl.truststore.location=/nonexistent/ca.pem\n")
    with pytest.raises(CommandConfigError, match=f"{path}: ssl.truststore.location=.*no such"):
        load_command_config(path)
    with pytest.raises(CommandConfigError, match="cannot read"):
        load_command_config(tmp_path / "missing.properties")
    assert load_command_config(None) == ClientSecurity()


# --- SCRAM ---------------------------------------------------------------------------------------


def test_scram_sha_256_matches_rfc_7677s_example() -> None:
    client = ScramClient(
        mechanism="SCRAM-SHA-256", username="user", password="pencil", nonce="rOprNGfwEbeRWgbNEkqO"
    )
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    assert client.final(server_first) == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    client.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    with pytest.raises(AuthenticationFailed, match="signature does not match"):
        client.verify(b"v=AAAA")
    with pytest.raises(AuthenticationFailed, match="refused: invalid-proof"):
        client.verify(b"e=invalid-proof")


def test_scram_names_with_separators_are_escaped() -> None:
    client = ScramClient(mechanism="SCRAM-SHA-512", username="a=b,c", password="x", nonce="n")
    assert client.first() == b"n,,n=a=3Db=2Cc,r=n"


def test_a_server_nonce_that_does_not_extend_the_clients_is_refused() -> None:
    client = ScramClient(mechanism="SCRAM-SHA-256", username="u", password="p", nonce="abc")
    client.first()
    with pytest.raises(AuthenticationFailed, match="unexpected server message"):
        client.final(b"r=xyz,s=AAAA,i=4096")


# --- the exchange, against a scripted server ------------------------------------------------------


def scram_rounds(
    mechanism: str, username: str, password: str
) -> list[Callable[[bytes], tuple[bytes, str | None]]]:
    """The two SaslAuthenticate rounds of a SCRAM server with one user: the secured front's
    server side (:mod:`tests.security_front`), answering bytes with (reply, error)."""
    server = security_front._Scram(mechanism, {username: password})

    def round_of(step: Callable[[str], str]) -> Callable[[bytes], tuple[bytes, str | None]]:
        def answer(message: bytes) -> tuple[bytes, str | None]:
            try:
                return step(message.decode()).encode(), None
            except security_front.AuthenticationFailed as exc:
                return b"", str(exc)

        return answer

    return [round_of(server.first), round_of(server.final)]


def serve_sasl(
    sock: socket.socket, mechanism: str, rounds: list[Callable[[bytes], tuple[bytes, str | None]]]
) -> list[str]:
    """Answer SaslHandshake for ``mechanism`` and one SaslAuthenticate per round; what it saw."""
    seen = []

    def read_frame() -> bytes:
        data = b""
        while len(data) < 4 or len(data) < 4 + SIZE.unpack(data[:4])[0]:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data[4:]

    frame = read_frame()
    header = parse_request_header(frame)
    asked = wire.read_mechanism(header, frame)
    seen.append(f"handshake {asked}")
    assert header.api_version == 1
    code = 0 if asked == mechanism else 33  # UNSUPPORTED_SASL_MECHANISM
    sock.sendall(
        frame_bytes(
            encode_response(
                header.correlation_id,
                wire.SASL_HANDSHAKE,
                header.api_version,
                SaslHandshakeResponse(error_code=ErrorCode(code), mechanisms=(mechanism,)),
            )
        )
    )
    if code:
        return seen
    for answer in rounds:
        frame = read_frame()
        header = parse_request_header(frame)
        auth_bytes = wire.read_auth_bytes(header, frame)
        seen.append(f"authenticate v{header.api_version}")
        reply, error = answer(auth_bytes)
        sock.sendall(
            frame_bytes(
                encode_response(
                    header.correlation_id,
                    wire.SASL_AUTHENTICATE,
                    header.api_version,
                    SaslAuthenticateResponse(
                        error_code=ErrorCode(58 if error else 0),
                        error_message=error,
                        auth_bytes=reply,
                    ),
                )
            )
        )
        if error:
            break
    return seen


def exchange_with(
    credentials: SaslCredentials,
    mechanism: str,
    rounds: list[Callable[..., tuple[bytes, str | None]]],
) -> tuple[list[str], BaseException | None]:
    client_side, server_side = socket.socketpair()
    seen: list[str] = []
    server = threading.Thread(
        target=lambda: seen.extend(serve_sasl(server_side, mechanism, rounds)), daemon=True
    )
    server.start()
    failure = None
    try:
        authenticate(Connection(client_side), credentials, "kpg-test")
    except AuthenticationFailed as exc:
        failure = exc
    finally:
        server.join(10)
        client_side.close()
        server_side.close()
    return seen, failure


def test_plain_sends_the_user_and_password() -> None:
    got: list[bytes] = []

    def check(message: bytes) -> tuple[bytes, str | None]:
        got.append(message)
        return b"", None

    credentials = SaslCredentials(mechanism="PLAIN", username="alice", password="alice-secret")
    seen, failure = exchange_with(credentials, "PLAIN", [check])
    assert failure is None
    assert seen == ["handshake PLAIN", "authenticate v2"]
    assert got == [b"\0alice\0alice-secret"]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_completes_with_the_right_password_only(mechanism: str) -> None:
    right = SaslCredentials(mechanism=mechanism, username="bob", password="bob-secret")
    seen, failure = exchange_with(right, mechanism, scram_rounds(mechanism, "bob", "bob-secret"))
    assert failure is None
    assert seen == [f"handshake {mechanism}", "authenticate v2", "authenticate v2"]

    wrong = SaslCredentials(mechanism=mechanism, username="bob", password="guess")
    _, failure = exchange_with(wrong, mechanism, scram_rounds(mechanism, "bob", "bob-secret"))
    assert isinstance(failure, AuthenticationFailed)
    assert "invalid credentials" in str(failure) and "guess" not in str(failure)


def test_a_mechanism_the_server_does_not_enable_is_named() -> None:
    credentials = SaslCredentials(mechanism="SCRAM-SHA-512", username="bob", password="x")
    _, failure = exchange_with(credentials, "PLAIN", [])
    assert isinstance(failure, AuthenticationFailed)
    assert "does not enable SASL mechanism SCRAM-SHA-512 (it enables: PLAIN)" in str(failure)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    "tool",
    [
        ["dry-run", "--topic", "team.orders.v1:1:1"],
        ["configs", "--describe", "--user", "alice"],
    ],
)
def test_a_gateway_not_running_is_not_blamed_on_missing_security_settings(
    tool: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A refused connection reached no listener: the tools said to give --command-config, as
    if a TLS gateway had been there (what a user meets running them before `make run`)."""
    address = f"127.0.0.1:{_closed_port()}"
    assert cli.main([tool[0], "--bootstrap-server", address, *tool[1:]]) == 2
    said = capsys.readouterr().err
    assert "is the gateway running" in said
    assert "--command-config" not in said
