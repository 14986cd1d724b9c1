"""The client tools with SASL, end to end: ``kpg dry-run`` and ``kpg configs`` run as a user
runs them (subprocesses) with ``--command-config``, through the gateway, to the test broker
behind :mod:`tests.security_front`, which performs the SASL exchange itself (Tansu has no SASL
to switch on). The tools' SaslHandshake and SaslAuthenticate pass through the gateway to the
front; the front says who authenticated with which mechanism.

Both client-side protocols: SASL_SSL (the gateway's listener speaks TLS) and SASL_PLAINTEXT
(it does not); the leg from the gateway to the front is TLS either way. Wrong credentials: the
tool exits 2 with one line naming the refusal, no traceback; no password is ever printed."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_cli_tools import table
from tests.e2e.test_gateway_process import KPG
from tests.security.conftest import ALICE_PASSWORD, SECRETS, Upstream
from tests.security.test_upstream_tls import listener_tls
from tests.support import GatewayThread, gateway_config, unique_name

pytestmark = pytest.mark.inproc

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
WRONG_PASSWORD = "not-alice-pw-Qe5rT1"
POLICIES = {"rules": [{"name": "partition-count", "type": "partitions", "max": 5}]}


@pytest.fixture(scope="module", params=["SASL_SSL", "SASL_PLAINTEXT"])
def gateway(request: pytest.FixtureRequest, sasl_ssl_upstream: Upstream) -> Iterator[GatewayThread]:
    """A gateway before the SASL front (TLS towards it), its listener TLS for SASL_SSL and
    plaintext for SASL_PLAINTEXT; ``gateway.protocol`` says which."""
    listener = (
        {"tls": listener_tls(sasl_ssl_upstream.pki, client_auth="none")}
        if request.param == "SASL_SSL"
        else {}
    )
    config = gateway_config(
        sasl_ssl_upstream.front.address,
        upstream={"tls": {"ca_file": str(sasl_ssl_upstream.pki / "ca.pem")}},
        policies=POLICIES,
        **listener,
    )
    running = GatewayThread(config).start()
    running.protocol = request.param  # type: ignore[attr-defined]
    try:
        yield running
    finally:
        running.stop()


def properties(
    tmp_path: Path, gateway: GatewayThread, pki: Path, mechanism: str, password: str
) -> Path:
    """Kafka client properties, as kafka-configs.sh takes them, for alice."""
    protocol: str = gateway.protocol  # type: ignore[attr-defined]
    escaped = password.replace("\\", "\\\\").replace('"', '\\"')
    lines = [
        f"security.protocol={protocol}",
        f"sasl.mechanism={mechanism}",
        f'sasl.jaas.config={MODULES[mechanism]} required username="alice" password="{escaped}";',
    ]
    if protocol == "SASL_SSL":
        lines.append(f"ssl.truststore.location={pki / 'ca.pem'}")
    path = tmp_path / f"{protocol}-{mechanism}.properties"
    path.write_text("\n".join(lines) + "\n")
    return path


def kpg(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KPG, *args], capture_output=True, text=True, timeout=120)


def assert_no_password(result: subprocess.CompletedProcess[str]) -> None:
    for secret in (*SECRETS, WRONG_PASSWORD):
        assert secret not in result.stdout
        assert secret not in result.stderr


def assert_refused(result: subprocess.CompletedProcess[str]) -> None:
    """Exit code 2, nothing on stdout, a message that says the authentication failed."""
    assert (result.returncode, result.stdout) == (2, ""), result
    assert "Traceback" not in result.stderr
    assert "authentication failed" in result.stderr.lower(), result.stderr
    assert_no_password(result)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_dry_run_authenticates_through_the_gateway(
    gateway: GatewayThread, sasl_ssl_upstream: Upstream, tmp_path: Path, mechanism: str
) -> None:
    """Right credentials: the front saw alice authenticate with the mechanism, the gateway
    judged the dry run (one topic allowed, one denied). Wrong ones: refused, said so."""
    front = sasl_ssl_upstream.front
    before = len(front.authenticated)
    good = properties(tmp_path, gateway, sasl_ssl_upstream.pki, mechanism, ALICE_PASSWORD)
    ok, big = unique_name("ok"), unique_name("big")
    dry_run = ["dry-run", "--bootstrap-server", gateway.bootstrap]
    result = kpg(
        *dry_run, "--command-config", str(good), "--topic", f"{ok}:2:1", "--topic", f"{big}:9:1"
    )
    assert result.returncode == 1, result.stderr
    assert table(result.stdout) == [
        (ok, "allowed", ""),
        (
            big,
            "DENIED",
            f"topic {big}: 9 partitions is above the maximum of 5 (rule partition-count)",
        ),
    ]
    assert "Traceback" not in result.stderr
    assert_no_password(result)
    assert (mechanism, "alice") in front.authenticated[before:]

    bad = properties(tmp_path, gateway, sasl_ssl_upstream.pki, mechanism, WRONG_PASSWORD)
    assert_refused(kpg(*dry_run, "--command-config", str(bad), "--topic", f"{ok}:2:1"))


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_configs_authenticates_through_the_gateway(
    gateway: GatewayThread, sasl_ssl_upstream: Upstream, tmp_path: Path, mechanism: str
) -> None:
    """kpg configs as alice (the principal the SASL exchange named): she sets and reads her
    own client configs; with a wrong password both commands are refused."""
    good = properties(tmp_path, gateway, sasl_ssl_upstream.pki, mechanism, ALICE_PASSWORD)
    configs = ["configs", "--bootstrap-server", gateway.bootstrap]
    me = ["--entity-type", "users", "--entity-name", "alice"]
    linger = str(len(mechanism) * 7)
    altered = kpg(
        *configs,
        "--command-config",
        str(good),
        "--alter",
        *me,
        "--add-config",
        f"linger.ms={linger}",
    )
    assert (altered.returncode, altered.stdout, altered.stderr) == (
        0,
        "Completed updating config for user alice.\n",
        "",
    )
    described = kpg(*configs, "--command-config", str(good), "--describe", *me)
    assert described.returncode == 0, described.stderr
    assert f"linger.ms={linger} " in described.stdout
    assert_no_password(described)

    bad = properties(tmp_path, gateway, sasl_ssl_upstream.pki, mechanism, WRONG_PASSWORD)
    assert_refused(kpg(*configs, "--command-config", str(bad), "--describe", *me))
    assert_refused(
        kpg(*configs, "--command-config", str(bad), "--alter", *me, "--add-config", "linger.ms=1")
    )
