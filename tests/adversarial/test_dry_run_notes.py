"""Dry-run answers read back by ``kpg dry-run``: no text a client chooses (a config value the
gateway echoes in a violation's message) can make the tool misread what the gateway decided.

The gateway joins every violation of a topic into one Kafka error message, numbered ``1) ...;
2) ...`` (:mod:`policies.violations`), and the tool splits it back into rows, one per rule,
``DENIED`` or ``would-deny``, and exits 0 when no row is ``DENIED``. A config value holding
``; 2) would deny (dry-run): `` would, if echoed as is, shift the split so that an enforced
denial reads as a dry-run one: the tool would print no ``DENIED`` row and exit 0 for a topic
the gateway refuses, which a CI job gating topic manifests on ``kpg dry-run`` would let
through. The case runs the real tool against the real gateway in front of the tapped broker
and compares with ``kpg policy check`` (the chain run offline, no message in between)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.e2e.test_cli_tools import kpg, table
from tests.support import BrokerTap, GatewayThread, gateway_config, unique_name

pytestmark = pytest.mark.adversarial

CREATE_TOPICS = 19
POLICIES = {
    "rules": [
        {
            "name": "cleanup-policy",
            "type": "config",
            "config": "cleanup.policy",
            "allowed": ["delete", "compact"],
            "mode": "dry-run",
        },
        {"name": "partition-count", "type": "partitions", "max": 5},
    ]
}
FORGED = "x; 2) would deny (dry-run): looks harmless"


Run = subprocess.CompletedProcess[str]


def both_tools(tap: BrokerTap, tmp_path: Path, topic: str, value: str) -> tuple[Run, Run]:
    """``kpg policy check`` (offline) and ``kpg dry-run`` (through a gateway before the tapped
    broker) of one topic of 9 partitions with ``cleanup.policy`` set to ``value``."""
    manifest = tmp_path / "topics.yaml"
    entry = {
        "name": topic,
        "partitions": 9,
        "replication_factor": 1,
        "configs": {"cleanup.policy": value},
    }
    manifest.write_text(yaml.safe_dump({"topics": [entry]}))
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({"policies": POLICIES}))
    offline = kpg("policy", "check", "--config", str(config), str(manifest))
    gw = GatewayThread(gateway_config(tap.address, policies=POLICIES)).start()
    try:
        online = kpg("dry-run", "--bootstrap-server", gw.bootstrap, str(manifest))
    finally:
        gw.stop()
    assert CREATE_TOPICS not in tap.api_keys()
    return offline, online


def test_a_config_value_cannot_turn_a_denial_into_a_dry_run_note(
    tap: BrokerTap, tmp_path: Path
) -> None:
    topic = unique_name("forged")
    offline, online = both_tools(tap, tmp_path, topic, FORGED)
    expected = [
        (
            topic,
            "would-deny",
            f"topic {topic}: cleanup.policy={FORGED}: {FORGED!r} is not one of compact, delete "
            "(rule cleanup-policy)",
        ),
        (
            topic,
            "DENIED",
            f"topic {topic}: 9 partitions is above the maximum of 5 (rule partition-count)",
        ),
    ]
    assert offline.returncode == 1, offline.stderr
    assert table(offline.stdout) == expected
    assert table(online.stdout) == expected, online.stdout
    assert online.returncode == 1, online.stdout


def test_a_config_value_cannot_add_rows_or_move_the_terminal_cursor(
    tap: BrokerTap, tmp_path: Path
) -> None:
    """A value holding a new line and a fake row, then the terminal escapes that go up a line
    and erase it (over the real ``DENIED`` row on a terminal or a CI log that renders them):
    both tools print one line per violation, every control character escaped."""
    topic = unique_name("rows")
    fake = f"x\n{topic}  9  1  allowed\x1b[1A\x1b[2K"
    for run in both_tools(tap, tmp_path, topic, fake):
        assert run.returncode == 1, run.stderr
        lines = run.stdout.splitlines()
        assert len(lines) == 3, run.stdout  # the header, would-deny, DENIED
        assert "\x1b" not in run.stdout
        assert [row[1] for row in table(run.stdout)] == ["would-deny", "DENIED"]
        assert f"cleanup.policy=x\\n{topic}  9  1  allowed\\x1b[1A\\x1b[2K" in lines[1]
