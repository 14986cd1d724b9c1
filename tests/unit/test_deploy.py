"""docker-compose.yml cannot run here (no Docker engine); it is checked against the gateway's
own configuration loader and ports instead."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from gateway.config import load

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict:  # type: ignore[type-arg]
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_gateway_config_is_consistent(compose: dict) -> None:  # type: ignore[type-arg]
    services = compose["services"]
    kafka, gateway, client = services["kafka"], services["gateway"], services["client"]
    assert kafka["image"].startswith("apache/kafka:")
    assert "ports" not in kafka, "the broker must not be reachable except through the gateway"

    mount = next(v for v in gateway["volumes"] if v.endswith(":/etc/kpg/gateway.yaml:ro"))
    config = load(ROOT / mount.split(":")[0].removeprefix("./"))
    assert "/etc/kpg/gateway.yaml" in gateway["command"]

    # The upstream is the Kafka service on its advertised PLAINTEXT listener.
    env = kafka["environment"]
    advertised = re.search(r"PLAINTEXT://([^:,]+):(\d+)", env["KAFKA_ADVERTISED_LISTENERS"])
    assert advertised is not None
    (upstream,) = config.upstream.bootstrap_servers
    assert (upstream.host, upstream.port) == (advertised.group(1), int(advertised.group(2)))
    assert upstream.host == "kafka"

    # Published ports: bootstrap, node listener of each node id, metrics.
    published = {int(p.split(":")[1].split("/")[0]) for p in gateway["ports"]}
    node_port = config.node_port_base + int(env["KAFKA_NODE_ID"])
    assert config.metrics is not None
    assert {config.listen.port, node_port, config.metrics.port} <= published

    # The client knows only the gateway.
    script = " ".join(client["command"])
    assert f"B=gateway:{config.listen.port}" in script
    assert "kafka:9092" not in script


def test_compose_gateway_writes_where_its_user_may() -> None:
    """The image runs as an unprivileged user: the state store and the audit spool must sit
    in the directory the Dockerfile gives that user."""
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    writable = re.search(r"chown kpg (\S+)", dockerfile)
    assert writable is not None
    config = load(ROOT / "deploy" / "gateway.compose.yaml")
    assert config.state.path.startswith(writable.group(1) + "/")
    assert config.audit.spool_dir is not None
    assert config.audit.spool_dir.startswith(writable.group(1) + "/")


def test_dockerfile_copies_what_exists() -> None:
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    copied = re.findall(r"^COPY (?!--from=)(.+) \S+$", dockerfile, flags=re.M)
    for sources in copied:
        for source in sources.split():
            assert (ROOT / source).exists(), source
    # setup.py builds the C record scanners; the image's build stage needs it.
    assert any("setup.py" in sources.split() for sources in copied)
    for pkg in ("gateway", "protocol", "policies", "spark_audit"):
        assert f"COPY {pkg} " in dockerfile
    assert 'ENTRYPOINT ["kpg"]' in dockerfile
