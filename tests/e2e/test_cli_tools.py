"""`kpg dry-run` against a running gateway process and `kpg policy check` with no cluster."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import AdminClient

from gateway.config import HostPort
from gateway.embedded import free_port
from tests.e2e.test_gateway_process import KPG, start_kpg
from tests.support import GatewayThread, gateway_config, make_pki, tls_listener

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def write_config(tmp_path: Path, broker: HostPort) -> Path:
    config = yaml.safe_load((ROOT / "deploy" / "gateway.example.yaml").read_text())
    config.update(listen=f"127.0.0.1:{free_port()}", node_port_base=0, metrics=None)
    config["upstream"] = {"bootstrap_servers": [str(broker)], "ignores_validate_only": True}
    config["audit"] = {"spool_dir": str(tmp_path / "audit")}
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_dry_run_prints_verdicts_and_creates_nothing(tmp_path: Path, broker: HostPort) -> None:
    config = write_config(tmp_path, broker)
    process, bootstrap = start_kpg("--config", str(config))
    try:
        result = subprocess.run(
            [
                KPG,
                "dry-run",
                "--bootstrap-server",
                bootstrap,
                "--topic",
                "team.ok.v1:3:1:retention.ms=3600000",
                "--topic",
                "team.big.v1:500:1",
                str(ROOT / "deploy" / "topics.example.yaml"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 1, result.stderr
        lines = {line.split()[0]: line for line in result.stdout.splitlines()[1:]}
        assert "allowed" in lines["team.ok.v1"]
        assert "DENIED" in lines["team.big.v1"]
        assert "500 partitions is above the maximum of 50" in lines["team.big.v1"]
        assert "allowed" in lines["payments.orders.v1"]
        assert "DENIED" in result.stdout.split("scratch", 1)[1]
        admin = AdminClient({"bootstrap.servers": bootstrap})
        assert not {"team.ok.v1", "payments.orders.v1"} & set(admin.list_topics(timeout=10).topics)

        only_good = kpg("dry-run", "--bootstrap-server", bootstrap, "--topic", "team.fine.v1:2:1")
        assert only_good.returncode == 0 and "allowed" in only_good.stdout
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)


def kpg(*args: str) -> subprocess.CompletedProcess[str]:
    """``kpg args``, its output captured as text."""
    return subprocess.run([KPG, *args], capture_output=True, text=True, timeout=60)


def table(stdout: str) -> list[tuple[str, str, str]]:
    """(topic, verdict, message) of each row a tool printed (header left out)."""
    rows = []
    for line in stdout.splitlines()[1:]:
        topic, _partitions, _rf, verdict, *message = line.split(maxsplit=4)
        rows.append((topic, verdict, message[0] if message else ""))
    return rows


def test_dry_run_and_policy_check_list_every_violation_alike(
    tmp_path: Path, broker: HostPort
) -> None:
    """The same manifest through a running gateway and offline: the same rows, every violated
    rule with its mode, a topic breaking an enforced rule and a dry-run one showing both."""
    config = write_config(tmp_path, broker)
    manifest = tmp_path / "topics.yaml"
    manifest.write_text(
        "topics:\n"
        "  - {name: Big_Name, partitions: 200, replication_factor: 1}\n"
        "  - {name: Odd_Name, partitions: 3, replication_factor: 1}\n"
        "  - {name: team.ok.v1, partitions: 3, replication_factor: 1}\n"
    )
    naming = "does not match the pattern '[a-z][a-z0-9-]*\\\\.[a-z0-9-]+\\\\.v[0-9]+'"
    expected = [
        (
            "Big_Name",
            "DENIED",
            "topic Big_Name: 200 partitions is above the maximum of 50 (rule partition-count)",
        ),
        ("Big_Name", "would-deny", f"topic name 'Big_Name' {naming} (rule topic-naming)"),
        ("Odd_Name", "would-deny", f"topic name 'Odd_Name' {naming} (rule topic-naming)"),
        ("team.ok.v1", "allowed", ""),
    ]
    offline = kpg("policy", "check", "--config", str(config), str(manifest))
    assert offline.returncode == 1, offline.stderr
    assert table(offline.stdout) == expected
    process, bootstrap = start_kpg("--config", str(config))
    try:
        online = kpg("dry-run", "--bootstrap-server", bootstrap, str(manifest))
        assert online.returncode == 1, online.stderr
        assert table(online.stdout) == expected
        assert online.stdout == offline.stdout

        only_dry_run = kpg("dry-run", "--bootstrap-server", bootstrap, "--topic", "Odd_Name:3:1")
        assert only_dry_run.returncode == 0, only_dry_run.stdout
        assert table(only_dry_run.stdout) == [expected[2]]
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)


def test_policy_check_offline(tmp_path: Path) -> None:
    manifest = ROOT / "deploy" / "topics.example.yaml"
    config = ROOT / "deploy" / "gateway.example.yaml"
    result = kpg("policy", "check", "--config", str(config), str(manifest))
    assert result.returncode == 1
    assert "scratch" in result.stdout and "DENIED" in result.stdout
    good = tmp_path / "good.yaml"
    good.write_text(
        "topics:\n  - {name: a.b.v1, partitions: 3, replication_factor: 1}\n"
        "  - {name: Bad_Name, partitions: 3, replication_factor: 1}\n"
    )
    result = kpg("policy", "check", "--config", str(config), str(good))
    assert result.returncode == 0, result.stdout
    assert "would-deny" in result.stdout and "topic-naming" in result.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("topics:\n  - {name: x, partitions: zero, replication_factor: 1}\n")
    result = kpg("policy", "check", "--config", str(config), str(bad))
    assert result.returncode == 2 and "topics[0].partitions" in result.stderr


def test_dry_run_against_something_that_is_not_a_gateway() -> None:
    """A server that answers with bytes that are no CreateTopics answer: exit 2, no traceback."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer_garbage() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"\x00\x00\x00\x06garbag")

    thread = threading.Thread(target=answer_garbage, daemon=True)
    thread.start()
    try:
        result = kpg("dry-run", "--bootstrap-server", f"127.0.0.1:{port}", "--topic", "a.b.v1:1:1")
    finally:
        server.close()
    assert result.returncode == 2
    assert "did not answer as a Kafka gateway" in result.stderr
    assert "Traceback" not in result.stderr


def test_version_is_the_installed_package_version() -> None:
    from importlib.metadata import version

    result = subprocess.run([KPG, "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"kpg {version('kafka-policy-gateway')}\n"


def test_dry_run_reaches_a_gateway_that_requires_client_certificates(
    tmp_path: Path, broker: HostPort
) -> None:
    """--command-config with Kafka's SSL properties: TLS to the gateway's listener, which
    requires a client certificate; without it the tool says what to give."""
    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki", {"client": "/CN=ci"})
    policies = {"rules": [{"name": "partition-count", "type": "partitions", "max": 5}]}
    gateway = GatewayThread(
        gateway_config(broker, tls=tls_listener(pki), policies=policies)
    ).start()
    keystore = tmp_path / "keystore.pem"
    keystore.write_text((pki / "client.key").read_text() + (pki / "client.pem").read_text())
    properties = tmp_path / "ssl.properties"
    properties.write_text(
        "security.protocol=SSL\n"
        f"ssl.truststore.location={pki / 'ca.pem'}\n"
        f"ssl.keystore.location={keystore}\n"
        "ssl.endpoint.identification.algorithm=https\n"
    )
    dry_run = [KPG, "dry-run", "--bootstrap-server", gateway.bootstrap]
    try:
        result = subprocess.run(
            [*dry_run, "--command-config", str(properties), "--topic", "t.big:9:1"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 1, result.stderr
        assert table(result.stdout) == [
            (
                "t.big",
                "DENIED",
                "topic t.big: 9 partitions is above the maximum of 5 (rule partition-count)",
            )
        ]
        plain = subprocess.run(
            [*dry_run, "--topic", "t.big:9:1"], capture_output=True, text=True, timeout=60
        )
        assert plain.returncode == 2 and plain.stdout == ""
        assert "if the gateway requires TLS or SASL, give --command-config" in plain.stderr
        assert "Traceback" not in plain.stderr
    finally:
        gateway.stop()


def test_dry_run_of_more_topics_than_the_gateway_judges_in_one_request(
    tmp_path: Path, broker: HostPort
) -> None:
    """1,200 topics, past ``limits."judged.request.max.items"`` (1,000): sent in two requests,
    each topic gets its own verdict, none the limit's refusal."""
    config = write_config(tmp_path, broker)
    manifest = tmp_path / "topics.yaml"
    names = [f"team.bulk{index}.v1" for index in range(1_200)]
    topics = [{"name": n, "partitions": 2, "replication_factor": 1} for n in names]
    manifest.write_text(yaml.safe_dump({"topics": topics}))
    process, bootstrap = start_kpg("--config", str(config))
    try:
        result = kpg("dry-run", "--bootstrap-server", bootstrap, str(manifest))
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        assert [(t, v) for t, v, _ in table(result.stdout)] == [(n, "allowed") for n in names]
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
