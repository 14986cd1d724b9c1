"""KPG_RECORD_SCANNER picks the record scanners, read once at import: a fresh interpreter
each time."""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

ASK = "import protocol.records as r; print(r.record_scanner())"


def scanner_with(value: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KPG_RECORD_SCANNER"}
    if value is not None:
        env["KPG_RECORD_SCANNER"] = value
    return subprocess.run(
        [sys.executable, "-c", ASK], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("value", "expected"), [(None, "native"), ("native", "native"), ("python", "python")]
)
def test_the_environment_picks_the_scanners(value: str | None, expected: str) -> None:
    run = scanner_with(value)
    assert (run.returncode, run.stdout.strip()) == (0, expected), run.stderr


def test_a_value_it_does_not_know_stops_the_import() -> None:
    run = scanner_with("c")
    assert run.returncode != 0
    assert "KPG_RECORD_SCANNER='c': expected native or python" in run.stderr
