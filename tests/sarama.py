"""Sarama (Go) for the tests: the driver in tests/clients/sarama/, built by ``make go-deps``
from Debian's Sarama 1.22 sources. One driver process serves every run of a test module."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

DRIVER = Path(__file__).resolve().parent / "clients" / "sarama" / "bin" / "sarama-driver"

needs_sarama = pytest.mark.skipif(
    not DRIVER.is_file(), reason="the Sarama driver is built by `make test` (make go-deps)"
)

RUN_TIMEOUT_S = 120.0


class Sarama:
    """The driver process: :meth:`run` sends one run (a Kafka version for Sarama's
    ``Config.Version`` and its steps) and returns each step's result or error and the
    addresses Sarama connected to."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [str(DRIVER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, name="sarama-driver", daemon=True).start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self._lines.put(line)
        self._lines.put("")

    def run(self, bootstrap: str, version: str, *steps: dict[str, Any]) -> dict[str, Any]:
        assert self._process.stdin is not None
        spec = {"bootstrap": bootstrap, "version": version, "steps": list(steps)}
        self._process.stdin.write(json.dumps(spec) + "\n")
        self._process.stdin.flush()
        line = self._lines.get(timeout=RUN_TIMEOUT_S)
        assert line, f"the Sarama driver exited ({self._process.poll()})"
        out: dict[str, Any] = json.loads(line)
        return out

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
