"""The coverage table: every API key Kafka defines (every key kio ships) is classified, the
table's handlers agree with it, and the README shows it as it is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway import handlers
from gateway.handlers.coverage import COVERAGE
from protocol.versions import API_NAMES, DECODABLE

pytestmark = pytest.mark.unit

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_api_key_kio_knows_is_classified() -> None:
    unclassified = sorted(set(DECODABLE) - set(COVERAGE))
    assert not unclassified, [f"{k} {API_NAMES[k]}" for k in unclassified]
    assert not set(COVERAGE) - set(DECODABLE), "COVERAGE names a key kio does not know"


def test_every_entry_says_why() -> None:
    assert all(c.reason.strip() for c in COVERAGE.values())


def test_the_table_carries_out_the_classification() -> None:
    caps = handlers.version_caps()
    for api_key, coverage in COVERAGE.items():
        name = API_NAMES[api_key]
        if coverage.treatment == "passed":
            assert api_key not in caps, f"{name} is passed through, yet has a handler"
        elif coverage.treatment == "refused":
            assert api_key in caps and caps[api_key] is None, f"{name} is not refused"
        else:
            assert caps.get(api_key) is not None, f"{name} is {coverage.treatment} but unhandled"


def test_readme_shows_the_table() -> None:
    rows = dict(
        (int(key), treatment)
        for key, treatment in re.findall(r"^\| (\d+) \| \w+ \| (\w+) \|", README.read_text(), re.M)
    )
    assert rows == {key: c.treatment for key, c in COVERAGE.items()}
