"""Configuration: defaults, overrides, and errors that name the key and the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, HostPort, load

pytestmark = pytest.mark.unit


def test_example_config_loads() -> None:
    config = load(Path("deploy/gateway.example.yaml"))
    assert config.listen == HostPort(host="127.0.0.1", port=9092)
    assert config.upstream.bootstrap_servers == ()  # embedded broker
    assert config.limits.max_frame_bytes == 104_857_600


def test_flags_override_the_file(tmp_path: Path) -> None:
    path = tmp_path / "g.yaml"
    path.write_text("listen: 0.0.0.0:9092\nadvertised_host: gw.example\n")
    config = load(
        path, {"upstream.bootstrap_servers": "k1:9092,k2:9093", "advertised_host": "other"}
    )
    assert config.upstream.bootstrap_servers == (
        HostPort(host="k1", port=9092),
        HostPort(host="k2", port=9093),
    )
    assert config.advertised_host == "other"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("listen: nope\n", "listen"),
        ("lisen: 1.2.3.4:1\n", "lisen"),
        ("listen: 0.0.0.0:9092\n", "advertised_host"),
        ("upstream:\n  bootstrap_servers: [kafka]\n", "upstream.bootstrap_servers"),
        ("upstream:\n  timeout: 3\n", "upstream.timeout"),
        ("limits:\n  max_frame_bytes: -5\n", "limits.max_frame_bytes"),
        ("limits:\n  max_in_flight_requests: many\n", "limits.max_in_flight_requests"),
        ("node_port_base: 70000\n", "node_port_base"),
        ("metrics: localhost\n", "metrics"),
    ],
)
def test_errors_name_key_and_file(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load(path)
    assert f"{path}: {key}:" in str(raised.value)


def test_unreadable_and_invalid_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("listen: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load(bad)
