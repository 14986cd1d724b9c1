"""The pure transforms, on the session's local Spark."""

from __future__ import annotations

import csv
import json
import uuid
from collections.abc import Callable, Iterator
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from spark_audit.chain import Link, verify_links
from spark_audit.event import line_hash
from spark_audit.report import _write_frame_csv, chain_soundness, verify_chains
from spark_audit.spreadsheet import safe_columns
from spark_audit.transforms import (
    dedupe_events,
    duplicate_event_ids,
    malformed_events,
    normalize_events,
    totals,
    with_date,
)
from tests.spark.support import event, raw_events, report_events, table_rows
from tests.unit.test_spreadsheet import CASES

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def report_table(spark: SparkSession) -> Iterator[DataFrame]:
    """Table rows of ``report_events()``, cached for the report tests."""
    table = table_rows(spark, report_events()).cache()
    try:
        yield table
    finally:
        table.unpersist()


def test_normalize_types_times_and_keywords_and_drops_malformed_lines(spark: SparkSession) -> None:
    good = event(time="2026-11-21T09:00:00.123Z")
    shouty = json.loads(event(time="2026-11-21T10:00:00.000Z").to_json_line())
    shouty.update(verdict=" DENIED ", mode="Enforce", event_id=shouty["event_id"].upper())
    bad_time = json.loads(event().to_json_line()) | {"time": "2026-11-21 09:00:00"}
    no_id = json.loads(event().to_json_line()) | {"event_id": None}
    bad_verdict = json.loads(event().to_json_line()) | {"verdict": "maybe"}
    lines = [
        good.to_json_line(),
        json.dumps(shouty),
        good.to_json_line()[:60],  # torn
        json.dumps(bad_time),
        json.dumps(no_id),
        json.dumps(bad_verdict),
    ]
    raw = raw_events(spark, lines)

    normalized = normalize_events(raw).select("event_id", "time", "verdict", "mode")

    assertDataFrameEqual(
        normalized,
        [
            Row(
                event_id=good.event_id,
                time=datetime(2026, 11, 21, 9, 0, 0, 123000),
                verdict="denied",
                mode="enforce",
            ),
            Row(
                event_id=shouty["event_id"].lower(),
                time=datetime(2026, 11, 21, 10),
                verdict="denied",
                mode="enforce",
            ),
        ],
    )
    assert malformed_events(raw).count() == 4


def test_dedupe_keeps_one_row_per_event_id_and_dates_are_utc(spark: SparkSession) -> None:
    late = event(time="2026-11-21T23:59:59.999Z")
    early = event(time="2026-11-22T00:00:00.000Z")
    events = normalize_events(
        raw_events(spark, [late.to_json_line(), early.to_json_line(), late.to_json_line()])
    )

    dated = with_date(dedupe_events(events)).select("event_id", "date")

    assertDataFrameEqual(
        dated,
        [
            Row(event_id=late.event_id, date=date(2026, 11, 21)),
            Row(event_id=early.event_id, date=date(2026, 11, 22)),
        ],
    )


def test_with_date_refuses_a_session_that_is_not_utc(spark: SparkSession) -> None:
    events = normalize_events(raw_events(spark, [event().to_json_line()]))
    spark.conf.set("spark.sql.session.timeZone", "Europe/Paris")
    try:
        with pytest.raises(ValueError, match="UTC"):
            with_date(events)
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")


def test_totals(report_table: DataFrame) -> None:
    result = totals(report_table)

    assertDataFrameEqual(
        result,
        [
            Row(
                audit_events=11,
                decisions=15,
                allowed=7,
                denied=5,
                would_deny=3,
                produce_summaries=1,
                principals=3,
                first_time=datetime(2026, 11, 21, 9, 1),
                last_time=datetime(2026, 11, 22, 0, 0),
            )
        ],
    )


def test_totals_count_no_lifecycle_event_as_a_decision(spark: SparkSession) -> None:
    """A gateway's start and a refused reload are audit rows, not an allowed and a denied
    decision."""
    decision = event(verdict="allowed")
    lifecycle = [
        event(
            api="Gateway",
            api_version=0,
            resource_type="gateway",
            resource_name="kpg-1",
            action=action,
            verdict=verdict,
            policy=None,
            error_code=None,
            event_kind="lifecycle",
        )
        for action, verdict in (("start", "allowed"), ("reload_refused", "denied"))
    ]
    row = totals(table_rows(spark, [decision, *lifecycle])).first()
    assert row is not None
    assert (row.audit_events, row.decisions, row.allowed, row.denied) == (3, 1, 1, 0)


def test_parse_lines_hashes_each_line_as_written(spark: SparkSession) -> None:
    lines = [event().to_json_line() for _ in range(2)] + ["{torn"]
    raw = raw_events(spark, lines).collect()

    assert [row.line_hash for row in raw] == [line_hash(line) for line in lines]
    assert raw[2].event_id is None and raw[2].line_hash == line_hash("{torn")


def test_duplicate_event_ids_counts_ids_and_extra_rows_exactly(spark: SparkSession) -> None:
    """Found through a 64-bit hash of the id, then checked on the id itself: three copies of
    one event and two of another are two ids and three extra rows; distinct ids are none."""
    once, twice, thrice = event(), event(), event()
    rows = normalize_events(
        raw_events(spark, [e.to_json_line() for e in (once, twice, twice, thrice, thrice, thrice)])
    )

    (counted,) = duplicate_event_ids(rows).collect()
    (clean,) = duplicate_event_ids(rows.dropDuplicates(["event_id"])).collect()

    assert (counted["event_ids"], counted["extra_rows"]) == (2, 3)
    assert (clean["event_ids"], clean["extra_rows"]) == (0, 0)


def _chain_lines(count: int) -> list[str]:
    """``count`` JSON lines of one chain, each ``prev_hash`` the hash of the line before."""
    chain = str(uuid.uuid4())
    lines: list[str] = []
    for seq in range(count):
        previous = line_hash(lines[-1]) if lines else None
        lines.append(event(chain_id=chain, seq=seq, prev_hash=previous).to_json_line())
    return lines


def _with_prev_hash(line: str, prev_hash: str) -> str:
    return json.dumps(json.loads(line) | {"prev_hash": prev_hash})


@pytest.mark.parametrize(
    ("tamper", "status"),
    [
        (lambda right: right, "intact"),
        # conv() would read these as the right hash: compared whole, as lower-case hex.
        (lambda right: right.upper(), "BROKEN"),
        (lambda right: right + "zz", "BROKEN"),
        (lambda right: right[:32] + "0" * 32, "BROKEN"),
    ],
    ids=["right", "upper-case", "suffixed", "second-half-zero"],
)
def test_chains_are_checked_on_the_whole_hash(
    spark: SparkSession, tamper: Callable[[str], str], status: str
) -> None:
    lines = _chain_lines(6)
    lines[3] = _with_prev_hash(lines[3], tamper(json.loads(lines[3])["prev_hash"]))
    # The line after the edited one names the edited line's hash: only the edit is wrong.
    lines[4] = _with_prev_hash(lines[4], line_hash(lines[3]))
    lines[5] = _with_prev_hash(lines[5], line_hash(lines[4]))

    (chain,) = verify_chains(normalize_events(raw_events(spark, lines)))

    assert (chain["status"], chain["events"], chain["last_seq"]) == (status, 6, 5)
    assert chain["breaks"] == (0 if status == "intact" else 1)


def test_chains_with_a_gap_a_repeat_or_a_first_link_are_not_intact(spark: SparkSession) -> None:
    gap = _chain_lines(5)
    del gap[2]
    repeat = _chain_lines(5)
    repeat.insert(3, repeat[2])
    first = _chain_lines(3)
    first[0] = _with_prev_hash(first[0], "0" * 64)
    first[1] = _with_prev_hash(first[1], line_hash(first[0]))
    first[2] = _with_prev_hash(first[2], line_hash(first[1]))

    chains = verify_chains(normalize_events(raw_events(spark, gap + repeat + first)))

    assert sorted((c["events"], c["status"], c["gaps"], c["duplicates"]) for c in chains) == [
        (3, "BROKEN", 0, 0),
        (4, "BROKEN", 1, 0),
        (6, "BROKEN", 0, 1),
    ]


def _relinked(lines: list[str], start: int) -> list[str]:
    """``lines`` with every ``prev_hash`` from ``start`` on made to name the line before."""
    out = list(lines)
    for i in range(max(start, 1), len(out)):
        out[i] = _with_prev_hash(out[i], line_hash(out[i - 1]))
    return out


def _set_seq(line: str, seq: int) -> str:
    return json.dumps(json.loads(line) | {"seq": seq})


def _without_prev(line: str) -> str:
    return json.dumps(json.loads(line) | {"prev_hash": None})


def _forked(lines: list[str]) -> list[str]:
    chain = json.loads(lines[2])["chain_id"]
    other = event(chain_id=chain, seq=2, prev_hash=line_hash(lines[1])).to_json_line()
    return [*lines, other]


def _negative_first(lines: list[str]) -> list[str]:
    before = _set_seq(event(chain_id=json.loads(lines[0])["chain_id"], seq=0).to_json_line(), -1)
    return _relinked([before, *lines], 1)


_TAMPERINGS: dict[str, Callable[[list[str]], list[str]]] = {
    "untouched": lambda lines: lines,
    "one event": lambda lines: lines[:1],
    "last removed": lambda lines: lines[:-1],
    "first removed": lambda lines: lines[1:],
    "first two removed": lambda lines: lines[2:],
    "middle removed": lambda lines: lines[:3] + lines[4:],
    "middle removed, relinked": lambda lines: _relinked(
        lines[:3] + [_set_seq(x, i + 3) for i, x in enumerate(lines[4:])], 3
    ),
    "last copied": lambda lines: [*lines, lines[-1]],
    "first copied": lambda lines: [lines[0], *lines],
    "forked": _forked,
    "edited, not relinked": lambda lines: (
        lines[:2] + [json.dumps(json.loads(lines[2]) | {"message": "x"})] + lines[3:]
    ),
    "edited, relinked after": lambda lines: _relinked(
        lines[:2] + [json.dumps(json.loads(lines[2]) | {"message": "x"})] + lines[3:], 3
    ),
    "prev_hash dropped": lambda lines: lines[:4] + [_without_prev(lines[4])] + lines[5:],
    "first with prev_hash": lambda lines: _relinked(
        [_with_prev_hash(lines[0], "0" * 64), *lines[1:]], 1
    ),
    "seq skipped": lambda lines: lines[:3] + [_set_seq(lines[3], 4)],
    "seq repeated, relinked": lambda lines: _relinked(
        [*lines[:3], _set_seq(lines[3], 2), *lines[4:]], 3
    ),
    "negative seq before": _negative_first,
    "upper-case hash": lambda lines: (
        lines[:3] + [_with_prev_hash(lines[3], line_hash(lines[2]).upper())] + lines[4:]
    ),
}


def _reference(lines: list[str]) -> dict[str, Any]:
    links = []
    for line in lines:
        fields = json.loads(line)
        links.append(
            Link(
                chain_id=fields["chain_id"],
                seq=fields["seq"],
                prev_hash=fields.get("prev_hash"),
                line_hash=line_hash(line),
            )
        )
    (status,) = verify_links(links)
    return {
        "intact": status.intact,
        "events": status.events,
        "first_seq": status.first_seq,
        "last_seq": status.last_seq,
    }


@pytest.mark.parametrize("tampering", list(_TAMPERINGS), ids=list(_TAMPERINGS))
def test_the_spark_chain_check_agrees_with_the_reference(
    spark: SparkSession, tampering: str
) -> None:
    """The report's check in Spark and :func:`verify_links` (read one line at a time in
    Python, the rules' reference) give a chain, however edited, the same verdict."""
    lines = _TAMPERINGS[tampering](_chain_lines(8))

    (chain,) = verify_chains(normalize_events(raw_events(spark, lines)))
    (sound,) = chain_soundness(normalize_events(raw_events(spark, lines))).collect()

    expected = _reference(lines)
    assert sound["intact"] == expected["intact"]
    assert chain["status"] == ("intact" if expected["intact"] else "BROKEN")
    assert (chain["events"], chain["first_seq"], chain["last_seq"]) == (
        expected["events"],
        expected["first_seq"],
        expected["last_seq"],
    )


def test_one_chain_is_checked_in_parallel_not_by_one_task(spark: SparkSession) -> None:
    """A gateway writes one chain per process start, so a chain can be a month of one busy
    gateway: its rows are spread by (chain, seq), never gathered on one task by chain."""
    events = normalize_events(raw_events(spark, _chain_lines(4)))

    plan = chain_soundness(events)._jdf.queryExecution().executedPlan().toString()

    exchanges = [line for line in plan.splitlines() if "Exchange hashpartitioning" in line]
    assert any("chain_id#" in line and "seq#" in line and "hash#" in line for line in exchanges)
    assert "Window" not in plan, plan


def test_a_csv_file_written_on_every_core_has_one_header_and_the_frames_order(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A report's CSV file is Spark's part files (one per partition, each with the header)
    joined in partition order: one header line, rows in the frame's order, quotes doubled;
    a frame with no rows gives the header alone."""
    frame = (
        spark.range(0, 1000, numPartitions=4)
        .selectExpr("id", "concat('a \"b\", ', id) AS text")
        # as a sorted listing is split: ranges in order, each sorted
        .repartitionByRange(4, F.desc("id"))
        .sortWithinPartitions(F.desc("id"))
    )
    assert frame.rdd.getNumPartitions() > 1
    _write_frame_csv(tmp_path / "rows.csv", frame)
    _write_frame_csv(tmp_path / "none.csv", frame.where("id < 0"))

    with (tmp_path / "rows.csv").open(newline="", encoding="utf-8") as file:
        rows = list(csv.reader(file))
    assert rows[0] == ["id", "text"]
    assert rows[1:] == [[str(i), f'a "b", {i}'] for i in range(999, -1, -1)]
    assert (tmp_path / "none.csv").read_text(encoding="utf-8") == "id,text\n"
    assert not list(tmp_path.glob(".*"))  # no part files left behind


def test_spark_makes_text_cells_safe_as_the_python_check_does(spark: SparkSession) -> None:
    """:func:`safe_columns` (the CSV files Spark writes) and :func:`safe_cell` (those written
    row by row, off local mode) must write every cell alike."""
    texts = [(value, written) for value, written in CASES if not isinstance(value, int)]
    frame = spark.createDataFrame([(value,) for value, _ in texts], "cell string")
    assert [row.cell for row in safe_columns(frame).collect()] == [w for _, w in texts]
