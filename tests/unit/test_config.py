"""Configuration: defaults, overrides, and errors that name the key and the file."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from gateway import config
from gateway.config import ConfigError, HostPort, LimitsConfig, load
from policies.records import JSON_SCHEMA_DIR

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
        ("audit:\n  on_failure: halt\n", "audit.on_failure"),
    ],
)
def test_errors_name_key_and_file(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load(path)
    assert f"{path}: {key}:" in str(raised.value)


def test_audit_on_failure_continues_unless_told_to_deny(tmp_path: Path) -> None:
    path = tmp_path / "g.yaml"
    path.write_text("audit: {spool_dir: var/audit}\n")
    assert load(path).audit.on_failure == "continue"
    path.write_text("audit: {spool_dir: var/audit, on_failure: deny}\n")
    assert load(path).audit.on_failure == "deny"


def test_unreadable_and_invalid_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("listen: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load(bad)


LIMITS = {
    # name: (limits section, what it parses to)
    "Kafka's defaults, and a safe memory cap": (
        "",
        {
            "connections_max_idle_ms": 600_000,
            "max_connections_per_ip": 2_147_483_647,
            "max_connection_creation_rate": 2_147_483_647,
            "max_connection_creation_rate_per_ip": 2_147_483_647,
            "queued_max_request_bytes": 256 * 1024 * 1024,
        },
    ),
    "connection creation rates": (
        "max.connection.creation.rate: 200\nmax.connection.creation.rate.per.ip: 20\n",
        {"max_connection_creation_rate": 200, "max_connection_creation_rate_per_ip": 20},
    ),
    "set": (
        "connections.max.idle.ms: 500\nmax.connections: 10\nmax.connections.per.ip: 2\n"
        "queued.max.request.bytes: 67108864\n",
        {
            "connections_max_idle_ms": 500,
            "max_connections": 10,
            "max_connections_per_ip": 2,
            "queued_max_request_bytes": 64 * 1024 * 1024,
        },
    ),
    "Kafka's -1: never idle, no memory cap": (
        "connections.max.idle.ms: -1\nqueued.max.request.bytes: -1\n",
        {"connections_max_idle_ms": -1, "queued_max_request_bytes": -1},
    ),
    "record validation budget: a million records, the frame size inflated, message.max.bytes": (
        "",
        {
            "record_validation_max_records": 1_000_000,
            "record_validation_max_inflated_bytes": 104_857_600,
            "record_validation_max_record_bytes": 1_048_588,
        },
    ),
    "record validation budget set": (
        "record.validation.max.records: 5000\nrecord.validation.max.inflated.bytes: 1048576\n"
        "record.validation.max.record.bytes: 65536\n",
        {
            "record_validation_max_records": 5000,
            "record_validation_max_inflated_bytes": 1048576,
            "record_validation_max_record_bytes": 65536,
        },
    ),
    "judged requests: 8 MiB decoded at most, unless set (-1: no cap)": (
        "",
        {"judged_request_max_bytes": 8 * 1024 * 1024},
    ),
    "judged requests set": (
        "judged.request.max.bytes: -1\n",
        {"judged_request_max_bytes": -1},
    ),
    "produce partitions: 20,000 read at most, unless set (-1: no cap)": (
        "",
        {"produce_max_partitions": 20_000},
    ),
    "produce partitions set": (
        "produce.max.partitions: -1\n",
        {"produce_max_partitions": -1},
    ),
    "judged items: 1,000 a request, unless set (-1: no cap)": (
        "",
        {"judged_request_max_items": 1_000},
    ),
    "client config entities: 10,000 unless set": (
        "",
        {"client_configs_max_entities": 10_000},
    ),
    "audit events: 500 a second per client, unless set (-1: no cap)": (
        "",
        {"client_audit_events_per_sec": 500},
    ),
    "audit events per client set": (
        "client.audit.events.per.sec: -1\n",
        {"client_audit_events_per_sec": -1},
    ),
    "judged items set": (
        "judged.request.max.items: 5000\n",
        {"judged_request_max_items": 5_000},
    ),
    "schema registry look-ups: 32 a request, 100 a second, unless set": (
        "",
        {"schema_registry_lookups_per_request": 32, "schema_registry_lookups_per_sec": 100},
    ),
    "schema registry look-ups set": (
        "schema.registry.lookups.per.request: 500\nschema.registry.lookups.per.sec: 20\n",
        {"schema_registry_lookups_per_request": 500, "schema_registry_lookups_per_sec": 20},
    ),
    "the inflated bytes follow a smaller frame size when unset": (
        "max_frame_bytes: 8388608\n",
        {"record_validation_max_inflated_bytes": 8388608},
    ),
}


@pytest.mark.parametrize(
    ("line", "error"),
    [
        (
            "connections.max.idle.ms: 0",
            "connections.max.idle.ms: must be -1 (no limit) or at least 1",
        ),
        (
            "client.audit.events.per.sec: 0",
            "client.audit.events.per.sec: must be -1 (no limit) or at least 1",
        ),
        ("connections.max.idle.ms: 1.5", "connections.max.idle.ms: expected a whole number"),
        (
            "schema.registry.lookups.per.request: -1",
            "schema.registry.lookups.per.request: must be at least 1",
        ),
        (
            "schema.registry.lookups.per.sec: 0",
            "schema.registry.lookups.per.sec: must be at least 1",
        ),
        ("max.connections: 0", "max.connections: must be at least 1"),
        (
            "max.connection.creation.rate.per.ip: 0",
            "max.connection.creation.rate.per.ip: must be at least 1",
        ),
        ("max.connections: -1", "max.connections: must be at least 1"),
        ("max.connections.per.ip: many", "max.connections.per.ip: expected a number"),
        (
            "queued.max.request.bytes: -5",
            "queued.max.request.bytes: must be -1 (no limit) or at least 64",
        ),
        (
            "queued.max.request.bytes: 10",
            "queued.max.request.bytes: must be -1 (no limit) or at least 64",
        ),
        ("queued.max.request.bytes: true", "queued.max.request.bytes: expected a number"),
        ("record.validation.max.records: 0", "record.validation.max.records: must be at least 1"),
        (
            "record.validation.max.records: -1",
            "record.validation.max.records: must be at least 1",
        ),
        (
            "record.validation.max.inflated.bytes: 0",
            "record.validation.max.inflated.bytes: must be at least 1",
        ),
        (
            "record.validation.max.inflated.bytes: 1.5",
            "record.validation.max.inflated.bytes: expected a whole number",
        ),
        (
            "record.validation.max.record.bytes: 6",
            "record.validation.max.record.bytes: must be at least 7",
        ),
        (
            "judged.request.max.bytes: 10",
            "judged.request.max.bytes: must be -1 (no limit) or at least 64",
        ),
        (
            "produce.max.partitions: 0",
            "produce.max.partitions: must be -1 (no limit) or at least 1",
        ),
        (
            "judged.request.max.items: 0",
            "judged.request.max.items: must be -1 (no limit) or at least 1",
        ),
    ],
)
def test_bad_limits_name_key_file_and_why(tmp_path: Path, line: str, error: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(f"limits:\n  {line}\n")
    with pytest.raises(ConfigError) as raised:
        load(path)
    assert f"{path}: limits.{error}" in str(raised.value)


@pytest.mark.parametrize("name", list(LIMITS))
def test_limits_section(tmp_path: Path, name: str) -> None:
    section, expected = LIMITS[name]
    path = tmp_path / "g.yaml"
    path.write_text("limits:\n" + "".join(f"  {line}\n" for line in section.splitlines()))
    limits = load(path).limits
    assert {key: getattr(limits, key) for key in expected} == expected


def test_max_connections_defaults_to_what_the_open_file_limit_allows() -> None:
    """Each client connection holds two sockets (its own and its upstream link), and 64 files
    are kept for the rest: with 1024 open files, 480 connections."""

    def soft_limit_1024() -> None:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))

    probe = "from gateway.config import load; print(load(None).limits.max_connections)"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=soft_limit_1024,
    ).stdout
    assert int(out) == 480
    assert LimitsConfig().max_connections == load(None).limits.max_connections


def test_policy_version_changes_with_the_rules_and_not_with_addresses() -> None:
    base = {"policies": {"rules": [{"name": "p", "type": "partitions", "max": 5}]}}
    first = config.from_mapping(base, "t").policy_version
    assert first.startswith("sha256:") and len(first) == len("sha256:") + 16
    moved = config.from_mapping({**base, "listen": "127.0.0.1:19092"}, "t").policy_version
    assert moved == first
    tightened = {"policies": {"rules": [{"name": "p", "type": "partitions", "max": 4}]}}
    assert config.from_mapping(tightened, "t").policy_version != first
    limited = {**base, "limits": {"record.validation.max.records": 10}}
    assert config.from_mapping(limited, "t").policy_version != first


def test_the_embedded_broker_is_fronted_as_the_tansu_it_is(tmp_path: Path) -> None:
    """Off by default (Kafka honours replica assignments); the embedded broker sets it, since
    Tansu creates its default counts for a CreateTopics with assignments."""
    path = tmp_path / "g.yaml"
    path.write_text("upstream: {ignores_replica_assignments: true}\n")
    assert load(path).upstream.ignores_replica_assignments is True
    plain = load(Path("deploy/gateway.example.yaml"))
    assert plain.upstream.ignores_replica_assignments is False
    embedded = config.with_embedded_upstream(plain, HostPort(host="127.0.0.1", port=1))
    assert embedded.upstream.ignores_replica_assignments is True
    path.write_text("upstream: {ignores_replica_assignments: maybe}\n")
    with pytest.raises(ConfigError, match="upstream.ignores_replica_assignments"):
        load(path)


def test_policy_version_changes_with_the_json_schemas_the_rules_read(tmp_path: Path) -> None:
    """An edited schema file decides Produce requests anew (after a reload or a restart):
    the audit's policy_version stayed the same, so events of the two verdicts could not be
    told apart."""
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "orders.json").write_text('{"type": "object", "required": ["id"]}')
    raw = {"policies": {JSON_SCHEMA_DIR: str(schemas)}}
    first = config.from_mapping(raw, "t").policy_version
    assert config.from_mapping(raw, "t").policy_version == first, "same files, same version"
    (schemas / "orders.json").write_text('{"type": "object"}')
    assert config.from_mapping(raw, "t").policy_version != first


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        # misspelt: the built-in rules ran in the plug-in's place
        ("record.validation.policy.clas.name", "acme.StrictPolicy", "unknown key"),
        # misspelt: enforced where dry-run was meant, or the reverse in another spelling
        ("record.validation.policy.mod", "dry-run", "unknown key"),
        # a newer version's setting (or Confluent's), half applied: ignored
        ("record.validation.schema.registry.ssl.crl.location", "/etc/kpg/crl.pem", "unknown key"),
        # a limits: key under policies: the budget stayed its default (1,000,000 records)
        ("record.validation.max.records", 1000, "a setting of limits:, not policies:"),
        # Confluent's spelling takes the secret inline: ignored, the registry asked without it
        ("record.validation.schema.registry.basic.auth.user.info", "kpg:pw", "_file or"),
    ],
)
def test_record_validation_keys_it_does_not_read_stop_start_up(
    key: str, value: object, problem: str
) -> None:
    """Every key of policies: reaches the plug-ins' configure(), so one under the gateway's
    own record validation prefixes that it does not read was passed on without a word."""
    from gateway.server import check_policies

    with pytest.raises(ConfigError, match=f"policies.{key}: .*{problem}"):
        check_policies(config.from_mapping({"policies": {key: value}}, "gw.yaml"))
