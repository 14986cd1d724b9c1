"""bench/mutation/mutate.py, as bench/mutation/README.md tells to run it with mutant ids."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_an_unknown_mutant_id_is_refused_not_run_as_nothing() -> None:
    """A mistyped id ran no mutant and exited 0, which reads as every mutant asked for run."""
    run = subprocess.run(
        [sys.executable, "bench/mutation/mutate.py", "no-such-mutant"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 2
    assert "no such mutant: no-such-mutant" in run.stderr
