"""Audit reports from the Parquet table (or straight from a spool): JSON, CSV and HTML.

:func:`build_report` writes into ``out_dir``:

- ``summary.json``: every report's rows plus the totals and warnings, machine-readable;
- ``<report>.csv``: one file per report, the same rows;
- ``events-<set>.csv``: the events behind the figures (denied, dry-run objections, dry
  runs, config changes), linked from each section of the page;
- ``index.html``: the same numbers as tables, with inline SVG charts (no scripts, nothing
  fetched from the network).

Counts are of requests (``request_id``; see "Requests and their outcome" in SCHEMA.md): a
request breaking three rules is one denied request, listed with its three rules. Filters
(``since``, ``until``, ``principal``, ``topic``) apply to events before anything is counted.
Duplicate event ids (copies the stream did not drop) are counted once, and reported as a
warning on the page, in ``summary.json`` and in the log. Each stage logs a line
(``report stage i/n``) so a long run shows where it is.
"""

from __future__ import annotations

import csv
import datetime as dt
import html
import io
import json
import logging
import re
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_audit.chain import ChainStatus, Link, verify_links
from spark_audit.event import SCHEMA_VERSION
from spark_audit.session import glob_paths, path_exists, spool_glob
from spark_audit.spreadsheet import safe_cell, safe_columns
from spark_audit.transforms import (
    LINE_HASH,
    RequestDimension,
    config_changes,
    denied_requests,
    denied_requests_by,
    dry_run_requests,
    duplicate_event_ids,
    event_kind,
    filter_events,
    is_dry_run,
    lifecycle_events,
    malformed_events,
    normalize_events,
    parse_lines,
    principal_name,
    principals,
    refused_authentications,
    request_offenders,
    request_totals,
    requests_of,
    requests_per_hour,
    table_schema,
    totals,
    unchained_events,
    with_date,
    with_topic,
    would_deny_requests_by_policy,
)

logger = logging.getLogger(__name__)

REPORT_FORMAT_VERSION: Final = 2
"""Version of ``summary.json``'s layout (not of the events)."""

_MAX_CHART_HOURS: Final = 24 * 92
_CONCURRENT_JOBS: Final = 4
_PAGE_ROWS: Final = 200
"""Rows of a long section shown on the page; its CSV file has them all."""
_PAGE_CHARS: Final = 1000
"""Characters of one value shown on the page (a cell, a chart's title); the CSV files and
summary.json have it whole. Names and values are the clients': 200 claimed user names of
512 KB each made a page of 100 MB."""

VERDICT_COLOURS: Final = {"allowed": "#2e7d32", "denied": "#c62828", "would_deny": "#ef6c00"}

Row = dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Filters:
    """What a report covers: ``[since, until)`` (UTC, ISO-8601), one principal (``ANONYMOUS``
    for unauthenticated clients), one topic. ``None`` means no filter."""

    since: str | None = None
    until: str | None = None
    principal: str | None = None
    topic: str | None = None

    def describe(self) -> str:
        parts = [f"{name} {value}" for name, value in self._items() if value is not None]
        return ", ".join(parts) if parts else "none"

    def _items(self) -> list[tuple[str, str | None]]:
        return [
            ("since", self.since),
            ("until", self.until),
            ("principal", self.principal),
            ("topic", self.topic),
        ]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Section:
    name: str
    title: str
    build: Callable[[DataFrame], DataFrame]
    """The section's rows from its frame: the requests, or the notable events (see
    ``frames``)."""
    description: str
    events: str | None = None
    """Which ``events-<set>.csv`` holds the events behind the section's figures."""
    frames: str = "requests"
    """Which frame the section is drawn from: ``requests`` or ``events`` (the notable
    events, :func:`_notable`)."""
    listing: bool = False
    """A list of requests or events, not a table of figures: its CSV file has every row,
    ``summary.json`` and the page the first ``_PAGE_ROWS``."""


def _by(dimension: RequestDimension) -> Callable[[DataFrame], DataFrame]:
    return lambda requests: denied_requests_by(requests, dimension)


def _sections(top_n: int) -> tuple[_Section, ...]:
    return (
        _Section(
            name="requests_per_hour",
            title="Requests per hour",
            build=lambda requests: requests_per_hour(requests),
            description="Requests per UTC hour: denied, allowed with a dry-run objection "
            "(would deny), and allowed. Each has its own chart and scale.",
            events="denied",
        ),
        _Section(
            name="denied_by_policy",
            title="Denied requests by rule",
            build=_by("policy"),
            description="Denied requests per rule they broke (a request breaking two rules "
            "counts for each).",
            events="denied",
        ),
        _Section(
            name="denied_by_principal",
            title="Denied requests by principal",
            build=_by("principal"),
            description="Denied requests per principal; ANONYMOUS is unauthenticated clients.",
            events="denied",
        ),
        _Section(
            name="denied_by_client_id",
            title="Denied requests by client id",
            build=_by("client_id"),
            description="Denied requests per Kafka client.id.",
            events="denied",
        ),
        _Section(
            name="denied_by_topic",
            title="Denied requests by topic",
            build=_by("topic"),
            description="Denied requests per topic a rule denied in them (Produce partitions "
            "counted as their topic).",
            events="denied",
        ),
        _Section(
            name="denied_requests",
            title="Denied requests",
            build=lambda requests: denied_requests(requests),
            description="Every denied request, newest first, with the rules it broke.",
            events="denied",
            listing=True,
        ),
        _Section(
            name="top_offenders",
            title=f"Top {top_n} offenders",
            build=lambda requests: request_offenders(requests, top_n),
            description="Principal and client pairs with the most denied requests and "
            "dry-run objections; dry runs (validate_only, as kpg dry-run sends) are not counted "
            "here.",
            events="denied",
        ),
        _Section(
            name="would_deny_by_policy",
            title="Dry-run rules: would deny",
            build=lambda requests: would_deny_requests_by_policy(requests),
            description="Requests each rule in dry-run mode objected to that no enforced rule "
            "denied: what enforcing it would refuse.",
            events="would_deny",
        ),
        _Section(
            name="dry_runs",
            title="Dry runs (validate_only)",
            build=lambda requests: dry_run_requests(requests),
            description="Requests that only asked for a verdict (validate_only, as kpg dry-run "
            "sends), per API, client id and outcome; kept apart from offenders. A client id "
            "alone never makes a dry run.",
            events="dry_runs",
        ),
        _Section(
            name="principals",
            title="Principals",
            build=lambda requests: principals(requests),
            description="Requests per principal; ANONYMOUS is unauthenticated clients.",
            events="denied",
        ),
        _Section(
            name="config_changes",
            title="Config changes",
            build=lambda events: config_changes(events),
            frames="events",
            description="Every config key a judged request changed (or tried to), with its "
            "value before and after; sensitive values are never recorded.",
            events="config_changes",
            listing=True,
        ),
        _Section(
            name="refused_authentications",
            title="Refused authentications",
            build=lambda events: refused_authentications(events),
            frames="events",
            description="Connections closed for not authenticating, per user name claimed "
            "(empty: none was sent), client host and rule: sasl.client_auth where the gateway "
            "refused, broker where the broker refused the credentials or the mechanism. The "
            "broker sees every client at the gateway's address; this is who tried whom.",
            events="denied",
            listing=True,
        ),
        _Section(
            name="lifecycle",
            title="Gateway starts, stops and reloads",
            build=lambda events: lifecycle_events(events),
            frames="events",
            description="Lifecycle events of the gateways, with the policy version in force.",
        ),
    )


_EVENT_COLUMNS: Final = (
    "time",
    "request_id",
    "event_id",
    "principal",
    "client_id",
    "client_address",
    "api",
    "topic",
    "resource_type",
    "resource_name",
    "action",
    "policy",
    "mode",
    "verdict",
    "error_code",
    "message",
    "validate_only",
    "event_count",
    "policy_version",
    "gateway_instance",
    "chain_id",
    "seq",
)


def _notable() -> Column:
    """Events any of :func:`_event_sets` or an event section (config changes, lifecycle)
    shows: a small part of the table, since most decisions are plain allows."""
    return (
        (F.col("verdict") != "allowed")
        | is_dry_run()
        | F.col("config_changes").isNotNull()
        | (event_kind() == "lifecycle")
    )


def _event_sets(events: DataFrame) -> dict[str, DataFrame]:
    """The events behind the figures, one CSV file each; ``events`` may be only those
    :func:`_notable` keeps."""
    columns = [
        principal_name().alias("principal") if c == "principal" else c for c in _EVENT_COLUMNS
    ]
    decisions = events.where(event_kind() != "lifecycle")
    sets = {
        "denied": decisions.where(F.col("verdict") == "denied"),
        "would_deny": decisions.where(F.col("verdict") == "would_deny"),
        "dry_runs": decisions.where(is_dry_run()),
        "config_changes": decisions.where(F.col("config_changes").isNotNull()),
    }
    # In the table's order (by ingest, so a request's events are together), not sorted: a sort
    # of every denied or config-changing event cost more than the rest of the page.
    return {name: frame.select(*columns) for name, frame in sets.items()}


def load_events(spark: SparkSession, input_path: str) -> DataFrame:
    """Audit table rows from ``input_path``: a spool directory (it has completed
    ``events-*.jsonl`` segments, in it or in its direct subdirectories) or a Parquet table
    written by the stream. Copies of an event are kept (the report counts them).

    :raises FileNotFoundError: if ``input_path`` does not exist.
    """
    base = input_path.rstrip("/")
    if not path_exists(spark, base):
        raise FileNotFoundError(f"audit report input {input_path} does not exist")
    segments = glob_paths(spark, spool_glob(base))
    if segments:
        logger.info("report input %s is a spool directory", input_path)
        # The segments by name, not the glob: given one path, Spark first looks for a file
        # sink's log under it, and a glob is no file: it logged a stack trace on every report.
        events = with_date(normalize_events(parse_lines(spark.read.text(segments))))
        return events.select(*table_schema().names)
    logger.info("report input %s is a Parquet table", input_path)
    # The table's root: Spark reads the files its _spark_metadata log lists, so files of a
    # batch the stream did not commit are never read.
    return spark.read.schema(table_schema()).parquet(base)


def build_report(
    spark: SparkSession,
    input_path: str,
    out_dir: str | Path,
    *,
    top_n: int = 10,
    filters: Filters | None = None,
) -> dict[str, Any]:
    """Compute every report from ``input_path`` and write them to ``out_dir``.

    :returns: the content of ``summary.json``.
    :raises FileNotFoundError: if ``input_path`` does not exist.
    """
    filters = filters or Filters()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sections = _sections(top_n)
    progress = _Progress(stages=len(sections) + 8)
    _report_settings(spark)
    progress.stage(f"loading events from {input_path} (filters: {filters.describe()})")
    loaded = filter_events(
        with_topic(load_events(spark, input_path)),
        since=filters.since,
        until=filters.until,
        principal=filters.principal,
        topic=filters.topic,
    )
    # Not cached: Parquet is read again per figure, only the columns each one needs.
    events = loaded.select(*[c for c in loaded.columns if c not in _UNUSED_COLUMNS])
    progress.stage("duplicate event ids")
    duplicates = _collect(duplicate_event_ids(events))[0]
    warnings = unread_warnings(spark, input_path, unchained_events(loaded).count())
    if duplicates["event_ids"]:
        warnings.append(
            f"{duplicates['event_ids']:,} event ids occur more than once "
            f"({duplicates['extra_rows']:,} extra rows); each is counted once"
        )
    figures = _Figures(progress, sections, out)
    figures.compute(events, deduplicated=bool(duplicates["event_ids"]))
    warnings.extend(_empty_input_warnings(figures.totals, input_path, filters))
    warnings.extend(_chain_warnings(figures.chains))
    for warning in warnings:
        logger.warning("audit report: %s", warning)

    progress.stage(f"writing summary.json, CSV files and index.html to {out}")
    reports = {s.name: figures.reports[s.name] for s in sections} | {"chains": figures.chains}
    summary: dict[str, Any] = {
        "report_format_version": REPORT_FORMAT_VERSION,
        "event_schema_version": SCHEMA_VERSION,
        "generated_at": dt.datetime.now(tz=dt.UTC).isoformat(timespec="seconds"),
        "input": input_path,
        "filters": {name: value for name, value in filters._items()},
        "warnings": warnings,
        "duplicates": duplicates,
        "totals": figures.totals,
        "listed_rows": figures.listed,
        "reports": reports,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    for name, rows in reports.items():
        if name not in figures.listed:
            _write_csv(out / f"{name}.csv", rows)
    (out / "index.html").write_text(_render_html(summary, sections), encoding="utf-8")
    logger.info("report done in %.1fs: %s", progress.elapsed(), out / "index.html")
    return summary


class _Progress:
    """``report stage i/n`` log lines, from any thread."""

    def __init__(self, stages: int) -> None:
        self._stages = stages
        self._number = 0
        self._started = time.monotonic()
        self._lock = threading.Lock()

    def elapsed(self) -> float:
        return time.monotonic() - self._started

    def stage(self, what: str) -> None:
        with self._lock:
            self._number += 1
            logger.info(
                "report stage %d/%d: %s (%.1fs elapsed)",
                self._number,
                self._stages,
                what,
                self.elapsed(),
            )


class _Figures:
    """Every figure of a report: totals, sections, chains and the events-*.csv files.

    Four groups of Spark jobs that share nothing run side by side (requests and their
    sections, notable events and theirs, chains, event totals): while one job's plan is
    built and compiled on the driver, another's tasks use the cores.
    """

    def __init__(self, progress: _Progress, sections: Sequence[_Section], out: Path) -> None:
        self._progress = progress
        self._sections = sections
        self._out = out
        self.reports: dict[str, list[Row]] = {}
        self.listed: dict[str, int] = {}
        self.totals: Row = {}
        self.chains: list[Row] = []

    def compute(self, events: DataFrame, *, deduplicated: bool) -> None:
        """``deduplicated``: ``events`` has copies of an event id; count each once (the
        chains still see every row: a copy is a "duplicate" in its chain)."""
        every_row = events
        if deduplicated:
            events = kept(events.dropDuplicates(["event_id"]))
        with ThreadPoolExecutor(max_workers=_CONCURRENT_JOBS) as pool:
            chains = pool.submit(self._chains, every_row)
            request_totals_ = pool.submit(self._requests, events)
            notable_done = pool.submit(self._notable, events)
            event_totals = pool.submit(self._event_totals, events)
            self.totals = event_totals.result() | request_totals_.result()
            notable_done.result()
            self.chains = chains.result()

    def _chains(self, events: DataFrame) -> list[Row]:
        self._progress.stage("chains")
        return verify_chains(events)

    def _event_totals(self, events: DataFrame) -> Row:
        self._progress.stage("totals")
        return _collect(totals(events))[0]

    def _requests(self, events: DataFrame) -> Row:
        self._progress.stage("requests")
        requests = kept(requests_of(events).drop("request_key"))
        request_total = _collect(request_totals(requests))[0]
        self._sections_of("requests", requests)
        return request_total

    def _notable(self, events: DataFrame) -> None:
        self._progress.stage("notable events")
        # The events the event sections and the events-*.csv files are drawn from (denied,
        # dry-run objections, dry runs, config changes, lifecycle): read once, kept.
        notable = kept(events.where(_notable()))
        self._sections_of("events", notable)
        self._progress.stage("events behind the figures")
        for name, frame in _event_sets(notable).items():
            _write_frame_csv(self._out / f"events-{name}.csv", frame)

    def _sections_of(self, frames: str, frame: DataFrame) -> None:
        """The sections drawn from ``frames`` (``requests`` or ``events``), from ``frame``."""
        for section in self._sections:
            if section.frames == frames:
                self._progress.stage(section.title.lower())
                rows, total = _section_rows(section, frame, self._out)
                self.reports[section.name] = rows
                if total is not None:
                    self.listed[section.name] = total


_UNUSED_COLUMNS: Final = frozenset(
    {"schema_version", "api_version", "records_examined", "bytes_examined", "topic_spec", "date"}
)


def kept(frame: DataFrame) -> DataFrame:
    """``frame`` computed once, now, and kept by the executors for the figures read from it.

    A local checkpoint, not ``cache()``: the cache builds compressed in-memory columns,
    which for a million requests cost three times the local checkpoint's stored rows
    (10-23 s against 3-6 s on the 2-core bench machine, the same run), and more than
    reading the table again. What a local checkpoint gives up is recomputing a lost block:
    an executor lost during a report fails the report, which is run again.
    """
    return frame.localCheckpoint(eager=True)


def _report_settings(spark: SparkSession) -> None:
    """Settings for a report's many small aggregations, unless spark-submit chose them."""
    conf = spark.sparkContext.getConf()
    if not conf.contains("spark.sql.shuffle.partitions"):
        # Spark's 200 is for clusters; each aggregation here is small.
        partitions = max(2, 2 * spark.sparkContext.defaultParallelism)
        spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    if not conf.contains("spark.sql.adaptive.autoBroadcastJoinThreshold"):
        # The refused requests' rule sets join the requests; broadcast them when they turn
        # out small (Spark's 10 MB is about 60,000 refused requests), else a sort-merge join.
        spark.conf.set("spark.sql.adaptive.autoBroadcastJoinThreshold", "64MB")


def _section_rows(section: _Section, source: DataFrame, out: Path) -> tuple[list[Row], int | None]:
    """The section's rows, from its frame ``source``; for a listing, its first
    ``_PAGE_ROWS`` and how many there are (the CSV file, written here, has every row)."""
    frame = section.build(source)
    if not section.listing:
        return _collect(frame), None
    frame = kept(frame)
    total = frame.count()
    _write_frame_csv(out / f"{section.name}.csv", frame)
    return _collect(frame.limit(_PAGE_ROWS)), total


# --------------------------------------------------------------------------------------------
# Chains.


def verify_chains(events: DataFrame) -> list[Row]:
    """Each chain's status: intact, or its problems (gaps, breaks, duplicates, forks).

    :func:`chain_soundness` finds the chains that are intact; the links of any other chain
    are collected and given to :func:`spark_audit.chain.verify_links`, which says what is
    wrong and where.
    """
    chained = _chained(events)
    rows = chain_soundness(events).orderBy("chain_id").collect()
    broken = [row["chain_id"] for row in rows if not row["intact"]]
    statuses = {row["chain_id"]: _intact_status(row) for row in rows if row["intact"]}
    if broken:
        links = (
            chained.where(F.col("chain_id").isin(broken))
            .select(
                "chain_id",
                "seq",
                "prev_hash",
                LINE_HASH,
                "gateway_instance",
                event_kind().alias("kind"),
                "action",
            )
            .collect()
        )
        for status in verify_links(_link(row) for row in links):
            statuses[status.chain_id] = status
    return [_status_row(statuses[chain_id]) for chain_id in sorted(statuses)]


def _chained(events: DataFrame) -> DataFrame:
    return events.where(F.col("chain_id").isNotNull() & F.col("seq").isNotNull())


def chain_soundness(events: DataFrame) -> DataFrame:
    """One row per chain: ``intact`` by :mod:`spark_audit.chain`'s rules (seq 0 without
    ``prev_hash`` first, seqs without gap or repeat, each ``prev_hash`` the ``line_hash`` of
    the seq before) and, meaningful for an intact chain, ``events``, ``first_seq``,
    ``last_seq``, ``gateway_instance`` and ``last`` (kind and action of its last link).

    Each event is joined, on (chain, seq, hash), to the event that names it as the one before
    (``prev_hash``, at seq - 1): the hashes are compared whole, as join keys. A chain is
    intact when every event but one (its last) is so named, every ``prev_hash`` names an
    event of the chain at the seq before, it starts at seq 0 without ``prev_hash``, and it has
    one row per seq from 0 to its last (a copied or forked event adds a row, or leaves a
    second event unnamed). The join spreads one chain over every task; grouping by chain (a
    window ordered by seq, as before) put each chain on one task, and a gateway writes one
    chain per process start: a month of one busy gateway was sorted by one core.
    """
    chained = _chained(events)
    own = chained.select(
        "chain_id",
        "seq",
        F.col(LINE_HASH).alias("hash"),
        F.lit(True).alias("own"),
        F.col("prev_hash").isNotNull().alias("has_prev"),
        "gateway_instance",
        F.struct(event_kind().alias("kind"), "action").alias("link"),
    )
    named = chained.where(F.col("seq") != 0).select(
        "chain_id",
        (F.col("seq") - 1).alias("seq"),
        F.col("prev_hash").alias("hash"),
        F.lit(True).alias("named"),
    )
    linked = own.join(named, ["chain_id", "seq", "hash"], "full_outer")
    is_own = F.col("own").isNotNull()
    per_chain = linked.groupBy("chain_id").agg(
        F.count(F.lit(1)).alias("events"),
        F.min("seq").alias("lowest_seq"),
        F.min(F.when(is_own, F.col("seq"))).alias("first_seq"),
        F.max(F.when(is_own, F.col("seq"))).alias("last_seq"),
        F.sum((~is_own).cast("int")).alias("names_nothing"),
        F.sum(F.col("named").isNull().cast("int")).alias("unnamed"),
        F.max((is_own & (F.col("seq") == 0) & F.col("has_prev")).cast("int")).alias("first_prev"),
        F.first("gateway_instance", ignorenulls=True).alias("gateway_instance"),
        F.max_by("link", F.when(is_own, F.col("seq"))).alias("last"),
    )
    intact = (
        (F.col("names_nothing") == 0)
        & (F.col("unnamed") == 1)
        & (F.col("lowest_seq") == 0)
        & (F.col("first_prev") == 0)
        & (F.col("events") == F.col("last_seq") + 1)
    )
    return per_chain.select("*", F.coalesce(intact, F.lit(False)).alias("intact"))


def _link(row: Any) -> Link:
    return Link(
        chain_id=row["chain_id"],
        seq=row["seq"],
        prev_hash=row["prev_hash"],
        line_hash=row[LINE_HASH] or "",
        gateway_instance=row["gateway_instance"],
        event_kind=row["kind"],
        action=row["action"],
        where=f"seq {row['seq']}",
    )


def _intact_status(row: Any) -> ChainStatus:
    last = row["last"]
    return ChainStatus(
        chain_id=row["chain_id"],
        gateway_instance=row["gateway_instance"],
        events=row["events"],
        first_seq=row["first_seq"],
        last_seq=row["last_seq"],
        ended_with_stop=last["kind"] == "lifecycle" and last["action"] == "stop",
        problems=(),
    )


def _status_row(status: ChainStatus) -> Row:
    return {
        "chain_id": status.chain_id,
        "gateway_instance": status.gateway_instance,
        "events": status.events,
        "first_seq": status.first_seq,
        "last_seq": status.last_seq,
        "ended_with_stop": status.ended_with_stop,
        "status": "intact" if status.intact else "BROKEN",
        "gaps": sum(p.kind == "gap" for p in status.problems),
        "breaks": sum(p.kind == "break" for p in status.problems),
        "duplicates": sum(p.kind == "duplicate" for p in status.problems),
        "forks": sum(p.kind == "fork" for p in status.problems),
        "problems": "; ".join(f"seq {p.seq}: {p.kind}: {p.detail}" for p in status.problems[:20]),
    }


def _empty_input_warnings(
    summary_totals: dict[str, Any], input_path: str, filters: Filters
) -> list[str]:
    """A directory that is neither a spool nor the table reads as no events: say so."""
    if summary_totals["audit_events"]:
        return []
    return [
        f"no audit events in {input_path} (filters: {filters.describe()}); --input is the "
        "audit table's root directory or a spool directory"
    ]


def unread_warnings(spark: SparkSession, input_path: str, unchained: int = 0) -> list[str]:
    """What a report cannot vouch for: lines of a spool that are no audit event of any
    schema version (left out of every figure), and events of version 2 or later outside any
    chain (counted, but no gateway writes one). The table holds only well-formed events: the
    stream counts the rest as malformed in its log."""
    warnings = []
    segments = glob_paths(spark, spool_glob(input_path.rstrip("/")))
    if segments:
        malformed = malformed_events(parse_lines(spark.read.text(segments))).count()
        if malformed:
            warnings.append(
                f"{malformed:,} lines of the spool are not audit events of any schema version "
                "and are left out (kpg audit verify --input lists them)"
            )
    if unchained:
        warnings.append(
            f"{unchained:,} events of schema version 2 or later are in no chain: no gateway "
            "writes such an event, so the chains cannot show whether they were inserted"
        )
    return warnings


def _chain_warnings(chains: Sequence[Row]) -> list[str]:
    broken = [row for row in chains if row["status"] != "intact"]
    if not broken:
        return []
    names = ", ".join(f"{row['chain_id']} ({row['gateway_instance']})" for row in broken[:5])
    return [f"{len(broken):,} of {len(chains):,} audit chains are not intact: {names}"]


def _collect(df: DataFrame) -> list[Row]:
    columns = df.columns
    return [{name: _plain(row[name]) for name in columns} for row in df.collect()]


def _plain(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        # Spark hands out naive datetimes in the session time zone, which is UTC.
        return (
            value.replace(tzinfo=dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        )
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _write_csv(path: Path, rows: Sequence[Row]) -> None:
    with path.open("w", newline="", encoding="utf-8") as file:
        if not rows:
            return
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({name: safe_cell(value) for name, value in row.items()} for row in rows)


def _write_frame_csv(path: Path, frame: DataFrame) -> None:
    """``frame`` into one CSV file on the driver's disk: written by Spark itself in local mode
    (fast), else streamed to the driver a partition at a time. Text a spreadsheet would take
    for a formula is written as text (:mod:`spark_audit.spreadsheet`)."""
    spark = frame.sparkSession
    frame = safe_columns(frame)
    if (spark.sparkContext.master or "").startswith("local"):
        parts = path.with_name(f".{path.name}.parts")
        (
            # A file per partition, written on every core (one file by one task held the
            # end of a report of 300,000 config changes on one core), joined in order below.
            frame.write.mode("overwrite")
            .option("header", True)
            # RFC 4180 as spreadsheets and Python's csv read it: a quote inside a value is
            # doubled (Spark's default escapes it with a backslash, which shifts a client
            # id holding a quote into the next columns).
            .option("escape", '"')
            # Spark's writer trims white space around values by default: the cells were made
            # safe before that, and " =HYPERLINK(...)" trimmed is a formula again.
            .option("ignoreLeadingWhiteSpace", False)
            .option("ignoreTrailingWhiteSpace", False)
            .option("timestampFormat", "yyyy-MM-dd'T'HH:mm:ss.SSSXXX")
            .option("emptyValue", "")
            .csv(str(parts))
        )
        _join_parts(sorted(parts.glob("part-*.csv")), path, frame.columns)
        shutil.rmtree(parts)
        return
    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(frame.columns)
        for row in frame.toLocalIterator():
            writer.writerow(safe_cell(_csv_value(value)) for value in row)


def _csv_value(value: Any) -> Any:
    """A value as Spark's CSV writer writes it in local mode: ``true``/``false``, not
    Python's ``True``/``False`` (the files were not the same on a cluster)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return _plain(value)


def _join_parts(parts: Sequence[Path], path: Path, columns: Sequence[str]) -> None:
    """Spark's part files (each with the header line, in partition order: the frame's
    order) as one CSV file at ``path`` with one header line. No part: the header alone."""
    with path.open("wb") as joined:
        if not parts:
            with io.TextIOWrapper(joined, encoding="utf-8", newline="") as text:
                csv.writer(text, lineterminator="\n").writerow(columns)
                text.detach()
            return
        for number, part in enumerate(parts):
            with part.open("rb") as file:
                if number:
                    file.readline()  # the header again (our column names: one line)
                shutil.copyfileobj(file, joined)


# --------------------------------------------------------------------------------------------
# HTML and SVG.

_SVG_OPEN: Final = '<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{}" height="{}">'

_CSS: Final = """
body { font-family: system-ui, sans-serif; margin: 2rem; color: #222; max-width: 80rem; }
h1 { margin-bottom: 0.2rem; } .meta { color: #666; margin-top: 0; }
.cards { display: flex; flex-wrap: wrap; gap: 1rem; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 0.6rem 1rem; min-width: 8rem; }
.card .value { font-size: 1.6rem; font-weight: 600; } .card .label { color: #666; }
.warning { border: 2px solid #c62828; background: #fdecea; padding: 0.5rem 1rem; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; font-size: 0.9rem; }
th, td { border: 1px solid #ddd; padding: 0.25rem 0.6rem; text-align: left;
  overflow-wrap: anywhere; max-width: 32rem; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
svg text { font-family: system-ui, sans-serif; font-size: 11px; fill: #333; }
.empty { color: #666; font-style: italic; } .links { font-size: 0.9rem; }
"""


def _number(value: int | float) -> str:
    """Thousands separators: 1,234,567."""
    return f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"


_INVISIBLE: Final = re.compile(
    "[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\ufe00-\ufe0f\uffa0"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
    "|^ | $|(?<= ) "
)
"""What Python calls printable and a page does not show: Unicode's default-ignorable code
points that are not format characters (a combining grapheme joiner, variation selectors,
Hangul fillers), and spaces a browser folds (at either end, or after another)."""


def _visible(text: str) -> str:
    """``text`` with each character that is not printable written as Python escapes it
    (``\\u202e``, ``\\u200b``, ``\\n``): names on the page are the clients' text, and a
    right-to-left override or an invisible character would make one read as another (a
    claimed user ``\\u202eecila`` shows as ``alice``, ``terraform\\u200b`` as ``terraform``).
    So are the characters of :data:`_INVISIBLE` (``terraform\\u034f`` and ``alice `` showed
    as ``terraform`` and ``alice``; a space is written ``\\x20``)."""
    if text.isprintable() and _INVISIBLE.search(text) is None:
        return text
    shown = "".join(c if c.isprintable() else _escaped(c) for c in text)
    return _INVISIBLE.sub(lambda m: _escaped(m.group()), shown)


def _escaped(char: str) -> str:
    if char == " ":
        return "\\x20"
    return char.encode("unicode_escape").decode("ascii")


def _cell(value: Any) -> str:
    if value is None:
        return "<td>(none)</td>"
    if isinstance(value, bool):
        return f"<td>{str(value).lower()}</td>"
    if isinstance(value, int | float):
        return f'<td class="num">{_number(value)}</td>'
    if isinstance(value, list):
        value = ", ".join(_label(item) for item in value)
    return f"<td>{html.escape(_page_text(str(value)))}</td>"


def _page_text(text: str) -> str:
    """``text`` as the page shows it: :func:`_visible`, and its first :data:`_PAGE_CHARS`
    characters and its length when longer."""
    if len(text) > _PAGE_CHARS:
        text = f"{text[:_PAGE_CHARS]}… ({len(text):,} characters; the CSV file has them all)"
    return _visible(text)


def _table(rows: Sequence[Row], *, total: int | None = None, limit: int = _PAGE_ROWS) -> str:
    if not rows:
        return '<p class="empty">No events.</p>'
    head = "".join(f"<th>{html.escape(name)}</th>" for name in rows[0])
    shown = rows[:limit]
    total = len(rows) if total is None else total
    body = "".join("<tr>" + "".join(_cell(v) for v in row.values()) + "</tr>" for row in shown)
    more = (
        f'<p class="empty">First {len(shown):,} of {total:,} rows; the CSV file has them all.</p>'
        if total > len(shown)
        else ""
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}"


def _label(value: Any) -> str:
    return "(none)" if value is None else str(value)


def bar_chart_svg(bars: Sequence[tuple[str, int]], *, colour: str = "#c62828") -> str:
    """A horizontal bar chart, one labelled bar per (label, value). A label too long for
    its room is shortened on the chart; its full text is the label's and bar's title. Labels
    are shown as :func:`_page_text` writes them."""
    if not bars:
        return ""
    label_width, chart_width, bar_height, gap = 300, 420, 18, 6
    peak = max(value for _, value in bars) or 1
    height = len(bars) * (bar_height + gap) + gap
    parts = [_SVG_OPEN.format(label_width + chart_width + 90, height)]
    for index, (name, value) in enumerate(bars):
        label = _page_text(name)
        y = gap + index * (bar_height + gap)
        width = max(1, round(chart_width * value / peak))
        full = html.escape(label)
        text = html.escape(label if len(label) <= 46 else label[:45] + "…")
        parts.append(
            f'<text x="{label_width - 6}" y="{y + bar_height - 5}" text-anchor="end">'
            f"<title>{full}</title>{text}</text>"
            f'<rect x="{label_width}" y="{y}" width="{width}" height="{bar_height}"'
            f' fill="{colour}"><title>{full}: {_number(value)}</title></rect>'
            f'<text x="{label_width + width + 4}" y="{y + bar_height - 5}">{_number(value)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def line_chart_svg(
    x_labels: Sequence[str], values: Sequence[int], *, name: str, colour: str
) -> str:
    """One series over ``x_labels``, on an axis of its own (0 to its own peak)."""
    if not x_labels:
        return ""
    width, height, left, right, top, bottom = 760, 150, 70, 20, 22, 30
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = max(values, default=0) or 1
    step = plot_w / max(1, len(x_labels) - 1)

    def x(i: int) -> float:
        return left + (i * step if len(x_labels) > 1 else plot_w / 2)

    def y(v: int) -> float:
        return top + plot_h - plot_h * v / peak

    parts = [
        _SVG_OPEN.format(width, height),
        f'<text x="{left}" y="14" fill="{colour}">{html.escape(name)} '
        f"(total {_number(sum(values))}, peak {_number(max(values, default=0))} per hour)</text>",
    ]
    for fraction in (0, 0.5, 1):
        value = round(peak * fraction)
        parts.append(
            f'<line x1="{left}" x2="{width - right}" y1="{y(value):.1f}" y2="{y(value):.1f}"'
            f' stroke="#ddd"/><text x="{left - 6}" y="{y(value) + 4:.1f}"'
            f' text-anchor="end">{_number(value)}</text>'
        )
    for i in sorted({0, len(x_labels) - 1, (len(x_labels) - 1) // 2}):
        parts.append(
            f'<text x="{x(i):.1f}" y="{height - bottom + 16}" text-anchor="middle">'
            f"{html.escape(x_labels[i])}</text>"
        )
    points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
    parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{points}"/>')
    for i, v in enumerate(values):
        if v:
            parts.append(
                f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="2" fill="{colour}">'
                f"<title>{html.escape(name)} {html.escape(x_labels[i])}: {_number(v)}</title>"
                "</circle>"
            )
    parts.append("</svg>")
    return "".join(parts)


def _hourly_chart(rows: Sequence[Row]) -> str:
    """One chart per outcome, each with its own scale: denials show at any volume."""
    hours = _hour_axis(sorted(row["hour"] for row in rows))
    by_hour = {row["hour"]: row for row in rows}
    labels = [hour[:13].replace("T", " ") + "h" for hour in hours]
    charts = []
    for key, name in (
        ("denied", "denied"),
        ("would_deny", "allowed, dry-run objection (would deny)"),
        ("allowed", "allowed"),
    ):
        values = [by_hour[hour][key] if hour in by_hour else 0 for hour in hours]
        charts.append(line_chart_svg(labels, values, name=name, colour=VERDICT_COLOURS[key]))
    return "<br>".join(charts)


def _hour_axis(hours: Sequence[str]) -> list[str]:
    """Every hour from the first to the last, so quiet hours show as zero, unless that
    would be more than ``_MAX_CHART_HOURS`` points (then only hours with requests)."""
    if not hours:
        return []
    first = dt.datetime.fromisoformat(hours[0])
    last = dt.datetime.fromisoformat(hours[-1])
    span = int((last - first) / dt.timedelta(hours=1)) + 1
    if span > _MAX_CHART_HOURS:
        return list(hours)
    return [_plain((first + dt.timedelta(hours=i)).replace(tzinfo=None)) for i in range(span)]


def _section_chart(name: str, rows: Sequence[Row]) -> str:
    if name == "requests_per_hour":
        return _hourly_chart(rows)
    if name.startswith("denied_by_"):
        key = next(iter(rows[0])) if rows else ""
        return bar_chart_svg([(_label(row[key]), row["denied_requests"]) for row in rows[:20]])
    if name == "top_offenders":
        return bar_chart_svg(
            [
                (
                    f"{_label(row['principal'])} / {_label(row['client_id'])}",
                    row["denied_requests"] + row["would_deny_requests"],
                )
                for row in rows
            ]
        )
    if name == "would_deny_by_policy":
        return bar_chart_svg(
            [(_label(row["policy"]), row["would_deny_requests"]) for row in rows[:20]],
            colour=VERDICT_COLOURS["would_deny"],
        )
    return ""


def _links(section: _Section) -> str:
    links = [f'<a href="{section.name}.csv">{section.name}.csv</a> (these rows)']
    if section.events:
        links.append(
            f'<a href="events-{section.events}.csv">events-{section.events}.csv</a> '
            "(the events behind them)"
        )
    return f'<p class="links">{" · ".join(links)}</p>'


_CARDS: Final = (
    ("requests", "requests"),
    ("requests_denied", "denied requests"),
    ("requests_allowed", "allowed requests"),
    ("requests_would_deny", "dry-run objections"),
    ("dry_run_requests", "dry runs"),
    ("request_principals", "principals"),
    ("audit_events", "audit events"),
)


def _render_html(summary: Mapping[str, Any], sections: Sequence[_Section]) -> str:
    totals_row = summary["totals"]
    cards = "".join(
        f'<div class="card"><div class="value">{_number(totals_row[key] or 0)}</div>'
        f'<div class="label">{label}</div></div>'
        for key, label in _CARDS
    )
    period = (
        f"{totals_row['first_time']} to {totals_row['last_time']}"
        if totals_row["first_time"]
        else "no events"
    )
    filters = ", ".join(f"{k} {v}" for k, v in summary["filters"].items() if v is not None)
    body = [
        "<h1>Kafka policy gateway: audit report</h1>",
        f'<p class="meta">Events from {html.escape(period)}. Input '
        f"{html.escape(str(summary['input']))}; filters: {html.escape(filters or 'none')}; "
        f"generated {summary['generated_at']}.</p>",
    ]
    body.extend(
        f'<p class="warning">Warning: {html.escape(warning)}</p>' for warning in summary["warnings"]
    )
    body.append(f'<div class="cards">{cards}</div>')
    for section in sections:
        rows = summary["reports"][section.name]
        body.append(f'<h2 id="{section.name}">{html.escape(section.title)}</h2>')
        body.append(f"<p>{html.escape(section.description)}</p>")
        body.append(_links(section))
        body.append(_section_chart(section.name, rows))
        body.append(_table(rows, total=summary["listed_rows"].get(section.name)))
    chains = summary["reports"]["chains"]
    body.append('<h2 id="chains">Audit chains</h2>')
    body.append(
        "<p>Each gateway process links its events (seq, hash of the line before). A gap is "
        "missing events, a break an edited line, a duplicate a line stored twice.</p>"
    )
    body.append('<p class="links"><a href="chains.csv">chains.csv</a></p>')
    body.append(_table(chains))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>Audit report</title>"
        f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n"
    )
