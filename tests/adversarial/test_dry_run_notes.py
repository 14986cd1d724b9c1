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

from tests.e2e.test_cli_tools import table
from tests.e2e.test_gateway_process import KPG
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


def test_a_config_value_cannot_turn_a_denial_into_a_dry_run_note(
    tap: BrokerTap, tmp_path: Path
) -> None:
    topic = unique_name("forged")
    manifest = tmp_path / "topics.yaml"
    entry = {
        "name": topic,
        "partitions": 9,
        "replication_factor": 1,
        "configs": {"cleanup.policy": FORGED},
    }
    manifest.write_text(yaml.safe_dump({"topics": [entry]}))
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({"policies": POLICIES}))
    offline = subprocess.run(
        [KPG, "policy", "check", "--config", str(config), str(manifest)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert offline.returncode == 1, offline.stderr
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
    assert table(offline.stdout) == expected
    gw = GatewayThread(gateway_config(tap.address, policies=POLICIES)).start()
    try:
        online = subprocess.run(
            [KPG, "dry-run", "--bootstrap-server", gw.bootstrap, str(manifest)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        gw.stop()
    assert table(online.stdout) == expected, online.stdout
    assert online.returncode == 1, online.stdout
    assert CREATE_TOPICS not in tap.api_keys()
