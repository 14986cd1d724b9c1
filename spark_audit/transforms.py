"""Pure DataFrame transforms: raw audit events in, audit table rows and reports out.

Nothing here reads or writes storage; :mod:`spark_audit.job` and :mod:`spark_audit.report`
do. "Lines" are a ``value`` string column, one JSON event per row, exactly as the gateway
wrote it (a spool line without its newline, or a Kafka record's value). "Raw" means the
columns of :data:`spark_audit.event.SPARK_SCHEMA_DDL` (times as text) plus ``line_hash``;
"events" means the audit table: the same columns with ``time``, ``interval_start`` and
``interval_end`` as timestamps, plus the ``date`` partition column.

Counting rule for every report: a row's weight is its ``event_count`` (1 for a single
decision, the number of Produce requests for a summary), so "decisions" means gateway
decisions, not audit rows. Dates and hours are UTC; the session time zone must be UTC.
"""

from __future__ import annotations

from typing import Final, Literal

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_audit.event import MODES, SPARK_SCHEMA_DDL, VERDICTS, spark_schema

TIME_FORMAT: Final = "yyyy-MM-dd'T'HH:mm:ss.SSSXXX"
"""How the schema's times parse in Spark (``XXX`` takes the ``Z``)."""

_TIME_COLUMNS: Final = ("time", "interval_start", "interval_end")
# Trimmed and lower-cased: the schema's keywords, and event_id (a UUID's text is case-free).
_LOWERCASE_COLUMNS: Final = ("mode", "verdict", "action", "resource_type", "event_id")

DenialDimension = Literal["policy", "principal", "client_id", "topic"]


LINE_HASH: Final = "line_hash"
"""Lower-case hex SHA-256 of the event's line exactly as written (UTF-8, no newline): what
the next event of the same chain names as its ``prev_hash`` (see SCHEMA.md)."""


def table_schema() -> T.StructType:
    """The audit table's schema: the event schema, times typed, ``line_hash``, ``date``."""
    fields = [
        T.StructField(field.name, T.TimestampType(), field.nullable)
        if field.name in _TIME_COLUMNS
        else field
        for field in spark_schema().fields
    ]
    return T.StructType(
        [
            *fields,
            T.StructField(LINE_HASH, T.StringType(), True),
            T.StructField("date", T.DateType(), False),
        ]
    )


def parse_lines(lines: DataFrame) -> DataFrame:
    """Raw events from JSON lines (column ``value``), each with the SHA-256 of its line.

    A line that is not a JSON object of the schema's shape gives a row of nulls, which
    :func:`normalize_events` drops and :func:`malformed_events` keeps.
    """
    parsed = F.from_json(F.col("value"), SPARK_SCHEMA_DDL, {"mode": "PERMISSIVE"})
    return lines.select(parsed.alias("event"), F.sha2(F.col("value"), 256).alias(LINE_HASH)).select(
        "event.*", LINE_HASH
    )


def _typed_columns() -> list[Column]:
    columns = []
    for field in spark_schema().fields:
        column = F.col(field.name)
        if field.name in _TIME_COLUMNS:
            column = F.try_to_timestamp(column, F.lit(TIME_FORMAT))
        elif field.name in _LOWERCASE_COLUMNS:
            column = F.lower(F.trim(column))
        columns.append(column.alias(field.name))
    columns.append(F.col(LINE_HASH))
    return columns


def _is_well_formed() -> Column:
    # Applies to typed columns: every non-nullable field present, times parsed,
    # keywords from the schema's sets, and a summary interval both-or-neither.
    required = [F.col(f.name).isNotNull() for f in spark_schema().fields if not f.nullable]
    condition = required[0]
    for check in required[1:]:
        condition = condition & check
    return (
        condition
        & F.col("mode").isin(*MODES)
        & F.col("verdict").isin(*VERDICTS)
        & (F.col("event_count") >= 1)
        & (F.col("interval_start").isNull() == F.col("interval_end").isNull())
    )


def normalize_events(raw: DataFrame) -> DataFrame:
    """Type raw events (times to timestamps, keywords trimmed and lower-cased) and keep
    only well-formed ones; :func:`malformed_events` returns the rest."""
    return raw.select(*_typed_columns()).where(_is_well_formed())


def malformed_events(raw: DataFrame) -> DataFrame:
    """The raw rows :func:`normalize_events` drops (torn JSON, missing fields, bad times)."""
    typed = raw.select(*_typed_columns())
    return typed.where(~F.coalesce(_is_well_formed(), F.lit(False)))


def dedupe_events(events: DataFrame) -> DataFrame:
    """One row per ``event_id`` (copies of an event are identical; any one is kept).

    For a batch DataFrame; the stream dedupes with state instead (:func:`dedupe_stream`).
    """
    return events.dropDuplicates(["event_id"])


INGESTED_AT: Final = "ingested_at"


def dedupe_stream(events: DataFrame, window: str) -> DataFrame:
    """One row per ``event_id`` across the micro-batches of a stream, for copies that
    arrive within ``window`` (a Spark interval, e.g. ``"7 days"``) of each other.

    The watermark is on the time each micro-batch started (``current_timestamp()`` is the
    batch's own time in a stream, and the same when Spark reruns the batch), not on the
    event's ``time``: every row is on time, so a late segment (a gateway that was down for a
    day) is never dropped as late data, and the state (one ``event_id`` per row seen within
    the window) stays bounded. A copy arriving later than ``window`` after the first is
    written again; the report counts and warns about such duplicates.
    """
    return (
        events.withColumn(INGESTED_AT, F.current_timestamp())
        .withWatermark(INGESTED_AT, window)
        .dropDuplicatesWithinWatermark(["event_id"])
        .drop(INGESTED_AT)
    )


def with_date(events: DataFrame) -> DataFrame:
    """Add the ``date`` partition column: the UTC date of ``time``.

    :raises ValueError: if the session time zone is not UTC (dates would shift).
    """
    zone = events.sparkSession.conf.get("spark.sql.session.timeZone")
    if zone not in ("UTC", "Etc/UTC", "Z", "+00:00"):
        raise ValueError(
            f"spark.sql.session.timeZone is {zone!r}; the audit job needs UTC "
            "(build the session with spark_audit.session.build_spark_session)"
        )
    return events.withColumn("date", F.to_date("time"))


def prepare_events(raw: DataFrame) -> DataFrame:
    """Raw events to audit table rows (batch): normalize, dedupe, add ``date``."""
    return with_date(dedupe_events(normalize_events(raw))).select(*table_schema().names)


# --------------------------------------------------------------------------------------------
# Reports. Each takes audit table rows and returns a small, ordered DataFrame.


def _weight(condition: Column | None = None) -> Column:
    if condition is None:
        return F.sum("event_count")
    return F.sum(F.when(condition, F.col("event_count")).otherwise(F.lit(0)))


def totals(events: DataFrame) -> DataFrame:
    """One row: audit rows, decisions, decisions per verdict, Produce summaries, distinct
    principals, first and last event time."""
    verdict = F.col("verdict")
    return events.agg(
        F.count(F.lit(1)).alias("audit_events"),
        F.coalesce(_weight(), F.lit(0)).cast("long").alias("decisions"),
        F.coalesce(_weight(verdict == "allowed"), F.lit(0)).cast("long").alias("allowed"),
        F.coalesce(_weight(verdict == "denied"), F.lit(0)).cast("long").alias("denied"),
        F.coalesce(_weight(verdict == "would_deny"), F.lit(0)).cast("long").alias("would_deny"),
        F.count(F.col("interval_start")).alias("produce_summaries"),
        F.countDistinct("principal").alias("principals"),
        F.min("time").alias("first_time"),
        F.max("time").alias("last_time"),
    )


def decisions_per_hour(events: DataFrame) -> DataFrame:
    """Decisions per UTC hour and verdict (long format), oldest hour first."""
    return (
        events.groupBy(F.date_trunc("hour", "time").alias("hour"), "verdict")
        .agg(_weight().cast("long").alias("decisions"))
        .orderBy("hour", "verdict")
    )


def denials_by(events: DataFrame, dimension: DenialDimension) -> DataFrame:
    """Denied decisions per ``dimension``, most first; ``topic`` covers topic resources only.

    :raises ValueError: on an unknown dimension.
    """
    denied = events.where(F.col("verdict") == "denied")
    if dimension == "topic":
        denied = denied.where(F.col("resource_type") == "topic")
        key = F.col("resource_name").alias("topic")
    elif dimension in ("policy", "principal", "client_id"):
        key = F.col(dimension)
    else:
        raise ValueError(f"unknown denial dimension {dimension!r}")
    return (
        denied.groupBy(key)
        .agg(_weight().cast("long").alias("denials"))
        .orderBy(F.desc("denials"), F.asc_nulls_first(dimension))
    )


def top_offenders(events: DataFrame, limit: int = 10) -> DataFrame:
    """The (principal, client_id) pairs with the most denied plus would-deny decisions."""
    verdict = F.col("verdict")
    refused = events.where(verdict.isin("denied", "would_deny"))
    return (
        refused.groupBy("principal", "client_id")
        .agg(
            _weight(verdict == "denied").cast("long").alias("denials"),
            _weight(verdict == "would_deny").cast("long").alias("would_deny"),
            F.countDistinct("policy").alias("policies"),
            F.countDistinct("resource_name").alias("resources"),
            F.max("time").alias("last_time"),
        )
        .withColumn("refusals", F.col("denials") + F.col("would_deny"))
        .orderBy(F.desc("refusals"), F.asc_nulls_first("principal"), F.asc_nulls_first("client_id"))
        .limit(limit)
        .select(
            "principal", "client_id", "denials", "would_deny", "policies", "resources", "last_time"
        )
    )


def would_deny_by_policy(events: DataFrame) -> DataFrame:
    """Dry-run: per policy, the decisions it would have denied, and whom it would have hit."""
    return (
        events.where(F.col("verdict") == "would_deny")
        .groupBy("policy")
        .agg(
            _weight().cast("long").alias("would_deny"),
            F.countDistinct("principal").alias("principals"),
            F.countDistinct("resource_name").alias("resources"),
            F.min("time").alias("first_time"),
            F.max("time").alias("last_time"),
        )
        .orderBy(F.desc("would_deny"), F.asc_nulls_first("policy"))
    )


def validate_only_outcomes(events: DataFrame) -> DataFrame:
    """Requests sent with ``validate_only``: outcome per API, verdict and deciding policy."""
    return (
        events.where(F.col("validate_only"))
        .groupBy("api", "verdict", "policy")
        .agg(_weight().cast("long").alias("requests"))
        .orderBy("api", "verdict", F.asc_nulls_first("policy"))
    )
