"""kcat through `kpg run` with TLS on both legs: SSL and SASL_SSL to the gateway, the gateway
to the test broker behind :mod:`tests.security_front` over TLS, its own clients (state topic,
audit topic) with ``upstream.sasl`` from the environment; the process's whole output, at
DEBUG, holds no secret."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.embedded import free_port
from tests.e2e.test_gateway_process import KPG
from tests.security.conftest import ALICE_PASSWORD, KPG_PASSWORD, SECRETS, Upstream
from tests.support import TEST_BROKER_DEFAULTS, unique_name

pytestmark = pytest.mark.e2e


def kcat(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kcat", *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )


class Kpg:
    """`kpg run --config` with everything it writes collected."""

    def __init__(self, config: dict[str, Any], tmp_path: Path, env: dict[str, str]) -> None:
        path = tmp_path / "gateway.yaml"
        path.write_text(yaml.safe_dump(config))
        self.output: list[str] = []
        self.bootstrap = ""
        self.process = subprocess.Popen(
            [KPG, "run", "--config", str(path), "--log-level", "DEBUG"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **env},
        )
        self._started = threading.Event()
        # Drained all along: at DEBUG the gateway writes more than a pipe holds.
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        self._started.wait(30)
        assert self.bootstrap, "".join(self.output)

    def _drain(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)
            if not self.bootstrap and "bootstrap.servers=" in line:
                self.bootstrap = line.split("bootstrap.servers=")[1].split()[0]
                self._started.set()
        self._started.set()

    def stop(self) -> str:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(60)
        self._reader.join(30)
        return "".join(self.output)


@pytest.fixture(params=["SSL", "SASL_SSL"])
def kpg_secured(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Secured]:
    """`kpg run` with TLS on its listener. SSL: in front of the TLS broker that requires the
    gateway's client certificate. SASL_SSL: in front of the TLS and SASL broker, its own
    clients authenticating as kpg with SCRAM-SHA-512, the password from the environment."""
    protocol: str = request.param
    name = "tls_upstream" if protocol == "SSL" else "sasl_ssl_upstream"
    upstream: Upstream = request.getfixturevalue(name)
    pki = upstream.pki
    upstream_section: dict[str, Any] = {
        "bootstrap_servers": [upstream.bootstrap],
        "ignores_validate_only": True,
        "topic_config_source_unreliable": True,
        "broker_defaults": TEST_BROKER_DEFAULTS,
        "tls": {"ca_file": str(pki / "ca.pem")},
    }
    if protocol == "SSL":
        upstream_section["tls"].update(
            cert_file=str(pki / "kpg.pem"), key_file=str(pki / "kpg.key")
        )
    else:
        upstream_section["sasl"] = {
            "mechanism": "SCRAM-SHA-512",
            "username": "kpg",
            "password_env": "KPG_UPSTREAM_PASSWORD",
        }
    config = {
        "listen": f"127.0.0.1:{free_port()}",
        "node_port_base": 0,
        "upstream": upstream_section,
        "tls": {
            "cert_file": str(pki / "server.pem"),
            "key_file": str(pki / "server.key"),
            "ca_file": str(pki / "ca.pem"),
            "client_auth": "required" if protocol == "SSL" else "none",
            "principal_mapping_rules": "RULE:^CN=([^,]*),.*$/$1/,DEFAULT",
        },
        "state": {"store": "kafka", "topic": unique_name("_kpg_state")},
        "audit": {"topic": unique_name("_kpg_audit")},
        "policies": {"rules": [{"name": "max-partitions", "type": "partitions", "max": 2}]},
    }
    kpg = Kpg(config, tmp_path, {"KPG_UPSTREAM_PASSWORD": KPG_PASSWORD})
    try:
        yield Secured(kpg=kpg, upstream=upstream, protocol=protocol)
    finally:
        kpg.stop()


@dataclass
class Secured:
    kpg: Kpg
    upstream: Upstream
    protocol: str

    def security(self) -> list[str]:
        """kcat's -X options: alice's certificate (SSL) or password (SASL_SSL)."""
        pki = self.upstream.pki
        args = ["-X", f"security.protocol={self.protocol}"]
        args += ["-X", f"ssl.ca.location={pki / 'ca.pem'}"]
        if self.protocol == "SSL":
            args += ["-X", f"ssl.certificate.location={pki / 'alice.pem'}"]
            args += ["-X", f"ssl.key.location={pki / 'alice.key'}"]
        else:
            args += ["-X", "sasl.mechanisms=SCRAM-SHA-256", "-X", "sasl.username=alice"]
            args += ["-X", f"sasl.password={ALICE_PASSWORD}"]
        return args

    def client_config(self) -> dict[str, str]:
        """The same for confluent-kafka."""
        options = self.security()[1::2]
        return (
            {"bootstrap.servers": self.kpg.bootstrap}
            | dict(o.split("=", 1) for o in options)
            | ({"sasl.mechanism": "SCRAM-SHA-256"} if self.protocol == "SASL_SSL" else {})
        )


def test_kcat_through_a_secured_gateway_process(kpg_secured: Secured) -> None:
    """kcat produces and consumes; producing to a topic it would auto-create with the
    brokers' 3 partitions is refused by the 2-partition rule (Topic authorization failed);
    the front saw the gateway's certificate (SSL) or alice's and kpg's exchanges (SASL_SSL);
    the whole output of the process, at DEBUG, names no secret."""
    secured, kpg = kpg_secured, kpg_secured.kpg
    front = secured.upstream.front
    security = secured.security()
    topic = unique_name("kcat")
    config = secured.client_config()
    config.pop("sasl.mechanisms", None)
    admin = AdminClient(config)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    lines = [f"line-{i}-{uuid.uuid4().hex[:6]}" for i in range(5)]
    produced = kcat("-b", kpg.bootstrap, *security, "-P", "-t", topic, stdin="\n".join(lines))
    assert produced.returncode == 0, produced.stderr
    consumed = kcat("-b", kpg.bootstrap, *security, "-C", "-t", topic, "-o", "beginning", "-e")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.split() == lines
    denied = kcat("-b", kpg.bootstrap, *security, "-P", "-t", unique_name("auto"), stdin="x")
    assert denied.returncode != 0
    assert "Topic authorization failed" in denied.stderr
    output = kpg.stop()
    if secured.protocol == "SASL_SSL":
        assert ("SCRAM-SHA-256", "alice") in front.authenticated
        assert ("SCRAM-SHA-512", "kpg") in front.authenticated
        assert "SaslAuthenticate request (withheld: credentials)" in output
        assert "upstream security: SASL_SSL" in output
    else:
        assert set(front.client_subjects) == {"kpg-gateway"}
        assert "upstream security: SSL" in output
    for secret in SECRETS:
        assert secret not in output
