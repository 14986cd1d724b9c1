"""Routes through what a producer puts inside its records (the keys, values and headers the
rules read), each through the real gateway in front of the tapped real broker: a value the
topic's rule should reject that passed (the validator read it one way, a consumer reads it
another: a key given twice, a number above a maximum read as the double within it), and a
value whose judging held the gateway (a pattern Python's re backtracked on, a list of
objects compared pair by pair, on the event loop). The record is refused with
INVALID_RECORD and never reaches the broker."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.adversarial.test_record_bombs import PRODUCE, gateway_with, produce
from tests.batches import batch_with, record
from tests.inproc.test_record_validation import create_validated_topic
from tests.support import BrokerTap, RawClient

pytestmark = pytest.mark.adversarial

BACKTRACKS = "^(\\w+\\s?)*$"
"""Words with a space between, an ordinary-looking pattern: Python's re took 0.26 s to find
that 22 letters and a "!" do not match it, four times as long with each two letters more."""
SCHEMAS = {
    "names": {"type": "object", "properties": {"name": {"type": "string", "pattern": BACKTRACKS}}},
    "tagged": {"properties": {"id": {"type": "string"}, "tags": {"uniqueItems": True}}},
    "orders": {
        "type": "object",
        "required": ["id", "amount"],
        "properties": {
            "id": {"type": "string"},
            "amount": {"type": "number", "minimum": 0, "maximum": 1000},
        },
    },
}


@pytest.fixture
def schema_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "schemas"
    directory.mkdir()
    for name, schema in SCHEMAS.items():
        (directory / f"{name}.json").write_text(json.dumps(schema), encoding="utf-8")
    return directory


@pytest.fixture
def python_re_on_records(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Python's re.search, made to fail (and noted) when asked to match a record's string:
    on main the jsonschema package asked it, for hours, on the event loop. Counted, not
    timed."""
    called: list[str] = []
    search = re.search

    def trap(pattern: str, string: str, flags: int = 0) -> re.Match[str] | None:
        if isinstance(string, str) and string.startswith("aaaaaaaaaa"):
            called.append(string)
            raise AssertionError("Python's re matched a record's string")
        return search(pattern, string, flags)

    monkeypatch.setattr(re, "search", trap)
    yield called


@pytest.fixture
def pairs_compared(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How often the jsonschema package compares two items: its uniqueItems compared every
    pair of objects (27 s for 4,000, on the event loop). Counted, not timed."""
    import jsonschema._utils

    compared = [0]
    equal = jsonschema._utils.equal

    def counting(one: object, two: object) -> bool:
        compared[0] += 1
        return equal(one, two)

    monkeypatch.setattr(jsonschema._utils, "equal", counting)
    yield compared


CASES = {
    "a name Python's re backtracks on for hours": (
        "json-schema:names",
        {"name": "a" * 60 + "!"},
        "does not match '^(\\\\w+\\\\s?)*$' at $.name",
    ),
    "a thousand objects in a uniqueItems list, and an id of the wrong type": (
        "json-schema:tagged",
        {"id": 5, "tags": [{"a": i} for i in range(1_000)]},
        "5 is not of type 'string' at $.id",
    ),
    "an amount given twice, the last one valid": (
        "json-schema:orders",
        b'{"id": "o-1", "amount": -5, "amount": 10}',
        "gives the key 'amount' twice in one object",
    ),
    "an amount above the maximum in more digits than a double holds": (
        "json-schema:orders",
        b'{"id": "o-1", "amount": 1000.0000000000000000001}',
        "the number 1000.0000000000000000001, which the schema would judge as the double 1000.0",
    ),
    "an amount above the maximum written longer than any double prints": (
        "json-schema:orders",
        b'{"id": "o-1", "amount": 1000.' + b"0" * 70 + b"1}",
        "which the schema would judge as the double 1000.0",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_record_the_rule_rejects_never_reaches_the_broker(
    tap: BrokerTap,
    tmp_path: Path,
    schema_dir: Path,
    python_re_on_records: list[str],
    pairs_compared: list[int],
    case: str,
) -> None:
    policy, value, problem = CASES[case]
    body = value if isinstance(value, bytes) else json.dumps(value).encode()
    policies = {"record.validation.json.schema.dir": str(schema_dir)}
    with gateway_with(tap, tmp_path / "spool", **policies) as gw:
        topic = create_validated_topic(gw.bootstrap, policy=policy)
        tap.requests.clear()
        client = RawClient(gw.bootstrap, timeout=30)
        answer = client.request(
            PRODUCE,
            9,
            produce(topic, batch_with("none", (record(0, None, body),), idempotent=False)),
        )

    (partition,) = answer.responses[0].partition_responses
    assert partition.error_code == 87  # INVALID_RECORD
    assert problem in (partition.error_message or "")
    assert PRODUCE not in tap.api_keys()
    assert python_re_on_records == []
    assert pairs_compared[0] < 100  # 499,500 pairs of the thousand objects before
