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
        assert "DENIED" in lines["scratch"]
        admin = AdminClient({"bootstrap.servers": bootstrap})
        assert not {"team.ok.v1", "payments.orders.v1"} & set(admin.list_topics(timeout=10).topics)

        only_good = subprocess.run(
            [KPG, "dry-run", "--bootstrap-server", bootstrap, "--topic", "team.fine.v1:2:1"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert only_good.returncode == 0 and "allowed" in only_good.stdout
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)


def test_policy_check_offline(tmp_path: Path) -> None:
    manifest = ROOT / "deploy" / "topics.example.yaml"
    config = ROOT / "deploy" / "gateway.example.yaml"
    result = subprocess.run(
        [KPG, "policy", "check", "--config", str(config), str(manifest)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "scratch" in result.stdout and "DENIED" in result.stdout
    good = tmp_path / "good.yaml"
    good.write_text(
        "topics:\n  - {name: a.b.v1, partitions: 3, replication_factor: 1}\n"
        "  - {name: Bad_Name, partitions: 3, replication_factor: 1}\n"
    )
    result = subprocess.run(
        [KPG, "policy", "check", "--config", str(config), str(good)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout
    assert "would-deny" in result.stdout and "topic-naming" in result.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("topics:\n  - {name: x, partitions: zero, replication_factor: 1}\n")
    result = subprocess.run(
        [KPG, "policy", "check", "--config", str(config), str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
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
        result = subprocess.run(
            [KPG, "dry-run", "--bootstrap-server", f"127.0.0.1:{port}", "--topic", "a.b.v1:1:1"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        server.close()
    assert result.returncode == 2
    assert "did not answer as a Kafka gateway" in result.stderr
    assert "Traceback" not in result.stderr
