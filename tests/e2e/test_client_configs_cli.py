"""Dynamic client configs (seed 003) end to end: ``kpg configs`` run as a user runs it (a
subprocess) against real gateways in front of the real broker, and applications fetching
their own configs over a CLIENT resource on a TLS connection with a client certificate and
on a plain one.

Two gateways share one state store (SQLite, the default): a plain one for the CLI (it speaks
plain TCP) and the anonymous application, a TLS one that requires client certificates.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.config import HostPort
from protocol import client_configs as wire
from protocol.framing import SIZE
from tests.e2e.test_gateway_process import KPG
from tests.support import (
    GatewayThread,
    RawClient,
    gateway_config,
    make_pki,
    noted,
    tls_listener,
    wait_for,
)

pytestmark = pytest.mark.e2e

CLIENT, USER_CLIENT = 120, 121
DYNAMIC, DEFAULT = 120, 121
CERT_SUBJECT = "/C=US/O=Acme/OU=eng/CN=alice"
CERT_USER = "CN=alice,OU=eng,O=Acme,C=US"
"""The user of principal ``User:CN=alice,OU=eng,O=Acme,C=US``: the whole DN."""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A client certificate (``client``) for ``CERT_SUBJECT``."""
    return make_pki(tmp_path_factory.mktemp("pki"), {"client": CERT_SUBJECT})


@pytest.fixture
def gateways(
    broker: HostPort, pki: Path, tmp_path: Path
) -> Iterator[tuple[GatewayThread, GatewayThread]]:
    state = {"path": str(tmp_path / "state.db"), "refresh_interval_s": 0.2}
    plain = GatewayThread(gateway_config(broker, state=state)).start()
    try:
        secure = GatewayThread(gateway_config(broker, state=state, tls=tls_listener(pki))).start()
        try:
            yield plain, secure
        finally:
            secure.stop()
    finally:
        plain.stop()


def kpg(bootstrap: str, *args: str) -> tuple[int, str, str]:
    result = subprocess.run(
        [KPG, "configs", "--bootstrap-server", bootstrap, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result.returncode, result.stdout, result.stderr


def fetch_plain(bootstrap: str, client_id: str) -> wire.DescribedResource:
    """An application's own configs: DescribeConfigs of CLIENT ``client_id``."""
    client = RawClient(bootstrap)
    try:
        client.send_bytes(
            wire.describe_request([(CLIENT, client_id)], correlation_id=1, client_id=client_id)
        )
        (resource,) = wire.read_describe_response(client.recv_frame())
    finally:
        client.close()
    return resource


def fetch_tls(bootstrap: str, pki: Path, client_id: str) -> wire.DescribedResource:
    """The same, on a TLS connection that presents the client certificate."""
    context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    context.load_cert_chain(str(pki / "client.pem"), str(pki / "client.key"))
    host, _, port = bootstrap.rpartition(":")
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as sock,
    ):
        sock.sendall(
            wire.describe_request([(CLIENT, client_id)], correlation_id=1, client_id=client_id)
        )
        data = b""
        while len(data) < 4 or len(data) < 4 + SIZE.unpack(data[:4])[0]:
            chunk = sock.recv(65536)
            assert chunk, "the gateway closed the connection"
            data += chunk
    (resource,) = wire.read_describe_response(data[4:])
    return resource


def values(resource: wire.DescribedResource) -> dict[str, Any]:
    """name -> (value, source, synonyms as (source, value))."""
    assert resource.error_code == 0, resource.error_message
    return {
        c.name: (c.value, c.source, [(s.source, s.value) for s in c.synonyms])
        for c in resource.configs
    }


def test_round_trip_through_the_cli_and_applications(
    gateways: tuple[GatewayThread, GatewayThread], pki: Path
) -> None:
    plain, secure = gateways
    at = plain.bootstrap
    alice = ["--entity-type", "users", "--entity-name", "alice"]
    override = [*alice, "--entity-type", "clients", "--entity-name", "clientid-override"]

    # The seed's example, quota key left out (the CLI refuses it before sending anything).
    assert kpg(at, "--alter", *alice, "--add-config", "acks=-1,producer_byte_rate=50000")[0] == 2
    assert kpg(at, "--alter", *alice, "--add-config", "acks=-1,session.timeout.ms=11000") == (
        0,
        "Completed updating config for user alice.\n",
        "",
    )
    assert kpg(at, "--alter", *override, "--add-config", "acks=0,heartbeat.interval.ms=2000") == (
        0,
        "Completed updating config for user alice.\n",
        "",
    )
    assert kpg(at, "--describe", *override) == (
        0,
        "Dynamic configs for user alice:clientid-override are:\n"
        "  acks=0 sensitive=false synonyms={DYNAMIC_CLIENT_CONFIG:acks=0, "
        "DYNAMIC_DEFAULT_CLIENT_CONFIG:acks=-1}\n"
        "  heartbeat.interval.ms=2000 sensitive=false "
        "synonyms={DYNAMIC_CLIENT_CONFIG:heartbeat.interval.ms=2000}\n",
        "",
    )
    assert kpg(at, "--describe", "--all", *override) == (
        0,
        "All configs for user alice:clientid-override are:\n"
        "  acks=0 sensitive=false synonyms={DYNAMIC_CLIENT_CONFIG:acks=0, "
        "DYNAMIC_DEFAULT_CLIENT_CONFIG:acks=-1}\n"
        "  heartbeat.interval.ms=2000 sensitive=false "
        "synonyms={DYNAMIC_CLIENT_CONFIG:heartbeat.interval.ms=2000}\n"
        "  session.timeout.ms=11000 sensitive=false "
        "synonyms={DYNAMIC_DEFAULT_CLIENT_CONFIG:session.timeout.ms=11000}\n",
        "",
    )

    # Applications: the certificate's user and ANONYMOUS, each with a default and an app-1
    # entry, so each application can only be seeing its own user's configs.
    for user, default, own in (
        (CERT_USER, "acks=all,session.timeout.ms=12000", "linger.ms=5"),
        ("ANONYMOUS", "acks=1", "session.timeout.ms=30000"),
    ):
        entity = ["--entity-type", "users", "--entity-name", user]
        assert kpg(at, "--alter", *entity, "--add-config", default)[0] == 0
        app = [*entity, "--entity-type", "clients", "--entity-name", "app-1"]
        assert kpg(at, "--alter", *app, "--add-config", own)[0] == 0

    assert values(fetch_plain(plain.bootstrap, "app-1")) == {
        "acks": ("1", DEFAULT, [(DEFAULT, "1")]),
        "session.timeout.ms": ("30000", DYNAMIC, [(DYNAMIC, "30000")]),
    }
    expected_tls = {
        "acks": ("all", DEFAULT, [(DEFAULT, "all")]),
        "linger.ms": ("5", DYNAMIC, [(DYNAMIC, "5")]),
        "session.timeout.ms": ("12000", DEFAULT, [(DEFAULT, "12000")]),
    }
    # The TLS gateway reads the shared store within its refresh interval.
    assert wait_for(lambda: values(fetch_tls(secure.bootstrap, pki, "app-1")) == expected_tls)


def test_cli_reports_the_gateways_refusal(gateway: GatewayThread) -> None:
    alice = ["--entity-type", "users", "--entity-name", "alice"]
    code, stdout, stderr = kpg(gateway.bootstrap, "--alter", *alice, "--add-config", "acks=2")
    prefix = "kpg configs: INVALID_REQUEST (42): "
    assert (code, stdout, stderr[: len(prefix)], stderr[-1:]) == (1, "", prefix, "\n")
    assert stderr[len(prefix) : -1] == noted(
        "Invalid value 2 for configuration acks: String must be one of: all, -1, 0, 1"
    )
    code, _, stderr = kpg(gateway.bootstrap, "--alter", *alice, "--add-config", "retries=1")
    assert code == 1
    assert stderr.startswith(
        "kpg configs: INVALID_REQUEST (42): Unknown dynamic client config: retries"
    )
    assert kpg(gateway.bootstrap, "--describe", *alice) == (
        0,
        "Dynamic configs for user alice are:\n",
        "",
    )


def test_describe_without_a_name_answers_every_entity(gateway: GatewayThread) -> None:
    """As kafka-configs.sh describes every entity of a type left unnamed: here each one as a
    named --describe prints it, in user then client-id order."""
    at = gateway.bootstrap
    for entity, config in (
        (["--user", "bob"], "linger.ms=5"),
        (["--user", "alice"], "acks=1"),
        (["--user", "alice", "--client", "app-1"], "acks=0"),
        (["--user", "bob", "--client", "app-2"], "batch.size=10"),
        (["--user", "ANONYMOUS", "--client", "app-3"], "max.poll.records=7"),
    ):
        assert kpg(at, "--alter", *entity, "--add-config", config)[0] == 0
    default = "DYNAMIC_DEFAULT_CLIENT_CONFIG"
    assert kpg(at, "--describe", "--entity-type", "users") == (
        0,
        "Dynamic configs for user alice are:\n"
        f"  acks=1 sensitive=false synonyms={{{default}:acks=1}}\n"
        f"Dynamic configs for user bob are:\n"
        f"  linger.ms=5 sensitive=false synonyms={{{default}:linger.ms=5}}\n",
        "",
    )
    code, every_client, _ = kpg(
        at, "--describe", "--entity-type", "users", "--entity-type", "clients"
    )
    assert code == 0
    assert [line for line in every_client.splitlines() if not line.startswith(" ")] == [
        "Dynamic configs for user ANONYMOUS:app-3 are:",
        "Dynamic configs for user alice:app-1 are:",
        "Dynamic configs for user bob:app-2 are:",
    ]
    assert kpg(at, "--describe", "--user", "alice", "--entity-type", "clients") == (
        0,
        "Dynamic configs for user alice:app-1 are:\n"
        "  acks=0 sensitive=false synonyms={DYNAMIC_CLIENT_CONFIG:acks=0, "
        f"{default}:acks=1}}\n",
        "",
    )
    # clients alone: the connection's own user's client-ids (this one is ANONYMOUS).
    assert kpg(at, "--describe", "--entity-type", "clients") == (
        0,
        "Dynamic configs for client app-3 are:\n"
        "  max.poll.records=7 sensitive=false "
        "synonyms={DYNAMIC_CLIENT_CONFIG:max.poll.records=7}\n",
        "",
    )
    # An alter still needs the names.
    code, _, stderr = kpg(at, "--alter", "--entity-type", "users", "--add-config", "acks=1")
    assert code == 2 and "needs --entity-name" in stderr


def write_properties(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def tls_properties(tmp_path: Path, pki: Path) -> Path:
    """Kafka client properties for the TLS gateway: its CA, and the client's key and
    certificate in one PEM file, as Kafka's PEM keystore holds them."""
    keystore = tmp_path / "client-keystore.pem"
    keystore.write_text((pki / "client.key").read_text() + (pki / "client.pem").read_text())
    return write_properties(
        tmp_path / "client-ssl.properties",
        "# as for kafka-configs.sh\n"
        "security.protocol=SSL\n"
        f"ssl.truststore.location={pki / 'ca.pem'}\n"
        "ssl.truststore.type=PEM\n"
        f"ssl.keystore.location={keystore}\n"
        "ssl.keystore.type=PEM\n",
    )


def test_command_config_reaches_a_gateway_that_requires_client_certificates(
    gateways: tuple[GatewayThread, GatewayThread], pki: Path, tmp_path: Path
) -> None:
    _, secure = gateways
    at = secure.bootstrap
    properties = tls_properties(tmp_path, pki)
    me = ["--entity-type", "users", "--entity-name", CERT_USER]
    with_tls = ["--command-config", str(properties)]
    assert kpg(at, *with_tls, "--alter", *me, "--add-config", "acks=all") == (
        0,
        f"Completed updating config for user {CERT_USER}.\n",
        "",
    )
    assert kpg(at, *with_tls, "--describe", "--entity-type", "users") == (
        0,
        f"Dynamic configs for user {CERT_USER} are:\n"
        "  acks=all sensitive=false synonyms={DYNAMIC_DEFAULT_CLIENT_CONFIG:acks=all}\n",
        "",
    )

    code, stdout, stderr = kpg(at, "--describe", *me)
    assert (code, stdout) == (2, "")
    assert "if the gateway requires TLS or SASL, give --command-config" in stderr
    assert "Traceback" not in stderr

    # TLS without the client certificate: the gateway refuses the handshake.
    no_certificate = write_properties(
        tmp_path / "no-cert.properties",
        f"security.protocol=SSL\nssl.truststore.location={pki / 'ca.pem'}\n",
    )
    code, _, stderr = kpg(at, "--command-config", str(no_certificate), "--describe", *me)
    assert code == 2 and "no usable answer" in stderr and "Traceback" not in stderr

    # Without the CA the gateway's certificate is not trusted.
    untrusted = write_properties(tmp_path / "untrusted.properties", "security.protocol=SSL\n")
    code, _, stderr = kpg(at, "--command-config", str(untrusted), "--describe", *me)
    assert code == 2 and "CERTIFICATE_VERIFY_FAILED" in stderr


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ("security.protocol=SSL\nssl.truststore.type=JKS\n", "ssl.truststore.type=JKS is not"),
        ("security.protocol=SSL\nssl.keystore.type=PKCS12\n", "ssl.keystore.type=PKCS12 is not"),
        ("security.protocol=SSL\nssl.protocol=TLSv1.3\n", "ssl.protocol is not supported"),
        ("security.protocol=SSL\nssl.truststore.location=/nonexistent.pem\n", "no such file"),
        ("security.protocol=KERBEROS\n", "security.protocol=KERBEROS: expected one of"),
        ("sasl.mechanism=PLAIN\n", "sasl.mechanism is set but security.protocol=PLAINTEXT"),
    ],
)
def test_a_command_config_the_tools_cannot_use_is_refused_naming_the_property(
    gateway: GatewayThread, tmp_path: Path, properties: str, message: str
) -> None:
    path = write_properties(tmp_path / "bad.properties", properties)
    code, _, stderr = kpg(
        gateway.bootstrap, "--command-config", str(path), "--describe", "--user", "a"
    )
    assert code == 2
    assert message in stderr and str(path) in stderr
