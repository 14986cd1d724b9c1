"""KafkaJS (Node.js) for the tests: the driver and raw-request scripts in tests/clients/, run
with the KafkaJS ``make node-deps`` installs from tests/clients/package-lock.json."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

CLIENTS = Path(__file__).resolve().parent / "clients"
DRIVER = CLIENTS / "kafkajs_driver.js"
RAW = CLIENTS / "kafkajs_raw.js"
NODE = shutil.which("node")

needs_kafkajs = pytest.mark.skipif(
    NODE is None or not (CLIENTS / "node_modules" / "kafkajs").is_dir(),
    reason="KafkaJS is installed by `make test` (make node-deps)",
)


def _node(script: Path, spec: dict[str, Any]) -> str:
    assert NODE is not None
    done = subprocess.run(
        [NODE, str(script), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def kafkajs(bootstrap: str, *steps: dict[str, Any], **options: Any) -> dict[str, Any]:
    """Run ``steps`` in one KafkaJS process (``options``: the driver's ``caFile`` and
    ``sasl``): each step's result or error, the addresses KafkaJS connected to, and what it
    decoded from the judged APIs' answers (``wire``)."""
    out: dict[str, Any] = json.loads(
        _node(DRIVER, {"bootstrap": bootstrap, "steps": list(steps), **options})
    )
    return out


def kafkajs_raw(address: str, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each request written by KafkaJS's encoder of that API and version, sent on a connection
    of its own, and what KafkaJS's decoder read from the answer (or ``closed``)."""
    stdout = _node(RAW, {"address": address, "requests": requests})
    return [json.loads(line) for line in stdout.splitlines()]
