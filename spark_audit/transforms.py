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


def typed_events(raw: DataFrame) -> DataFrame:
    """Raw events typed (times to timestamps, keywords trimmed and lower-cased), well-formed
    or not (:func:`is_well_formed`)."""
    return raw.select(*_typed_columns())


def is_well_formed() -> Column:
    """Of :func:`typed_events`: whether the row is an event of the schema (never null)."""
    return F.coalesce(_is_well_formed(), F.lit(False))


def normalize_events(raw: DataFrame) -> DataFrame:
    """Type raw events (times to timestamps, keywords trimmed and lower-cased) and keep
    only well-formed ones; :func:`malformed_events` returns the rest."""
    return typed_events(raw).where(_is_well_formed())


def malformed_events(raw: DataFrame) -> DataFrame:
    """The raw rows :func:`normalize_events` drops (torn JSON, missing fields, bad times,
    a verdict or mode of no schema version)."""
    return typed_events(raw).where(~is_well_formed())


def unchained_events(events: DataFrame) -> DataFrame:
    """Events of schema version 2 or later outside any chain: no gateway writes one (every
    event of those versions is a link of its process's chain), so the chains cannot show
    whether it was inserted. Version 1 events have no chain."""
    return events.where(F.col("chain_id").isNull() & (F.col("schema_version") >= 2))


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
    principals, first and last event time. Lifecycle events (a gateway's start, stop,
    reload) are audit rows but no decision."""
    decided = event_kind() != "lifecycle"
    verdict = F.col("verdict")
    return events.agg(
        F.count(F.lit(1)).alias("audit_events"),
        F.coalesce(_weight(decided), F.lit(0)).cast("long").alias("decisions"),
        F.coalesce(_weight(decided & (verdict == "allowed")), F.lit(0))
        .cast("long")
        .alias("allowed"),
        F.coalesce(_weight(decided & (verdict == "denied")), F.lit(0)).cast("long").alias("denied"),
        F.coalesce(_weight(decided & (verdict == "would_deny")), F.lit(0))
        .cast("long")
        .alias("would_deny"),
        F.count(F.col("interval_start")).alias("produce_summaries"),
        F.countDistinct("principal").alias("principals"),
        F.min("time").alias("first_time"),
        F.max("time").alias("last_time"),
    )


# --------------------------------------------------------------------------------------------
# Requests (schema v2, "Requests and their outcome" in SCHEMA.md): the unit the reports count.

ANONYMOUS: Final = "ANONYMOUS"
"""How reports name an unauthenticated client (``principal`` null)."""


_PRODUCE_PARTITION: Final = r"^(.*)-[0-9]+$"


def event_kind() -> Column:
    """``event_kind``, or for a v1 event what its null means (summary or decision)."""
    return F.coalesce(
        F.col("event_kind"),
        F.when(F.col("interval_start").isNotNull(), F.lit("summary")).otherwise(F.lit("decision")),
    )


def with_topic(events: DataFrame) -> DataFrame:
    """Add ``topic``: the topic a topic-resource event is about, a Produce decision's
    ``<topic>-<partition>`` stripped to the topic; null for other resources."""
    name = F.col("resource_name")
    produce_decision = (F.col("api") == "Produce") & F.col("interval_start").isNull()
    partition = name.rlike(_PRODUCE_PARTITION)
    topic = F.when(produce_decision & partition, F.regexp_extract(name, _PRODUCE_PARTITION, 1))
    return events.withColumn(
        "topic",
        F.when(F.col("resource_type") == "topic", topic.otherwise(name)),
    )


def is_dry_run() -> Column:
    """A dry run: a validate_only request (``kpg dry-run`` sends its with validate_only).

    Never told by client id: a client may call itself ``kpg-dry-run`` (kpg dry-run's client
    id) and change the cluster for real, and counting its refusals as dry runs would keep
    them out of the offenders."""
    return F.coalesce(F.col("validate_only"), F.lit(False))


def principal_name() -> Column:
    """``principal``, with ``ANONYMOUS`` for unauthenticated clients."""
    return F.coalesce(F.col("principal"), F.lit(ANONYMOUS))


def filter_events(
    events: DataFrame,
    *,
    since: str | None = None,
    until: str | None = None,
    principal: str | None = None,
    topic: str | None = None,
) -> DataFrame:
    """Events in ``[since, until)`` (UTC timestamps as text), of ``principal`` (``ANONYMOUS``
    for unauthenticated clients) and about ``topic``; ``events`` must have ``topic``
    (:func:`with_topic`). Unset filters keep everything.

    With a ``date`` column (the table's partitions, :func:`with_date`), the time range is also
    put as a range of dates, which the time range implies: Spark then reads only the date
    partitions it covers, not every file of the table to drop most of its rows."""
    dated = "date" in events.columns
    if since is not None:
        start = F.to_timestamp(F.lit(since))
        events = events.where(F.col("time") >= start)
        if dated:
            events = events.where(F.col("date") >= F.to_date(start))
    if until is not None:
        end = F.to_timestamp(F.lit(until))
        events = events.where(F.col("time") < end)
        if dated:
            events = events.where(F.col("date") <= F.to_date(end))
    if principal is not None:
        events = events.where(principal_name() == principal)
    if topic is not None:
        events = events.where(F.col("topic") == topic)
    return events


def _rules(verdict: str) -> Column:
    return F.array_sort(F.collect_set(F.when(F.col("verdict") == verdict, F.col("policy"))))


_REQUEST_SETS: Final = ("denied_rules", "would_deny_rules", "topics", "resources")


def requests_of(events: DataFrame) -> DataFrame:
    """One row per request: decisions grouped by ``request_id`` (a v1 decision, or a summary,
    is a request of its own, a summary weighing ``event_count``); lifecycle events left out.

    Columns: ``request_key``, ``request_id``, ``time`` (first event), ``principal``
    (``ANONYMOUS`` for null), ``client_id``, ``api``, ``validate_only``, ``dry_run`` (a
    validate_only request, see :func:`is_dry_run`), ``outcome`` (``denied`` when any
    event is denied, else ``allowed``), ``would_deny`` (allowed with a dry-run objection),
    ``requests`` (weight), ``denied_rules``, ``would_deny_rules``, ``topics`` and
    ``resources`` (of the items a rule denied or objected to) and ``events`` (rows).
    ``events`` must have ``topic``, and each event id once (:func:`duplicate_event_ids`
    finds copies; the report drops them first).

    A request of one event (``request_events`` 1, written since schema version 3; a summary;
    a v1 decision) is its row as it is: most requests are, and only the others are grouped
    by request id, which for a million events was most of the work.
    """
    decisions = events.where(event_kind() != "lifecycle")
    key = F.coalesce(F.col("request_id"), F.col("event_id")).alias("request_key")
    alone = F.col("request_id").isNull() | F.coalesce(F.col("request_events") == 1, F.lit(False))
    none: Column = F.array().cast("array<string>")

    def one(condition: Column, value: str) -> Column:
        return F.when(condition & F.col(value).isNotNull(), F.array(value)).otherwise(none)

    refusing = F.col("verdict") != "allowed"
    singles = decisions.where(alone).select(
        key,
        "request_id",
        principal_name().alias("principal"),
        "client_id",
        "api",
        "time",
        F.col("validate_only").cast("int").alias("validate_only"),
        (F.col("verdict") == "denied").cast("int").alias("any_denied"),
        (F.col("verdict") == "would_deny").cast("int").alias("any_would_deny"),
        F.col("event_count").alias("requests"),
        F.lit(1).cast("long").alias("events"),
        one(F.col("verdict") == "denied", "policy").alias("denied_rules"),
        one(F.col("verdict") == "would_deny", "policy").alias("would_deny_rules"),
        one(refusing, "topic").alias("topics"),
        one(refusing, "resource_name").alias("resources"),
    )
    decisions = decisions.where(~alone)
    # A request's events share its principal, client id and API (one client request), so
    # they are grouping keys: every aggregate left is fixed-width, and Spark can group by
    # hashing instead of sorting a million rows. The rule and name sets are collected from
    # refused events only (the few) and joined on; Spark broadcasts that side when small.
    grouped = decisions.groupBy(
        key, "request_id", principal_name().alias("principal"), "client_id", "api"
    ).agg(
        F.min("time").alias("time"),
        F.max(F.col("validate_only").cast("int")).alias("validate_only"),
        F.max((F.col("verdict") == "denied").cast("int")).alias("any_denied"),
        F.max((F.col("verdict") == "would_deny").cast("int")).alias("any_would_deny"),
        F.max("event_count").alias("requests"),
        F.count(F.lit(1)).alias("events"),
    )
    refused = (
        decisions.where(F.col("verdict") != "allowed")
        .groupBy(key)
        .agg(
            _rules("denied").alias("denied_rules"),
            _rules("would_deny").alias("would_deny_rules"),
            F.array_sort(F.collect_set("topic")).alias("topics"),
            F.array_sort(F.collect_set("resource_name")).alias("resources"),
        )
    )
    grouped = grouped.join(refused, "request_key", "left").select(
        *grouped.columns,
        *(F.coalesce(F.col(name), none).alias(name) for name in _REQUEST_SETS),
    )
    denied = F.col("any_denied") == 1
    return singles.unionByName(grouped).select(
        "request_key",
        "request_id",
        "time",
        "principal",
        "client_id",
        "api",
        (F.col("validate_only") == 1).alias("validate_only"),
        (F.col("validate_only") == 1).alias("dry_run"),
        F.when(denied, F.lit("denied")).otherwise(F.lit("allowed")).alias("outcome"),
        (~denied & (F.col("any_would_deny") == 1)).alias("would_deny"),
        F.col("requests").cast("long").alias("requests"),
        "denied_rules",
        "would_deny_rules",
        "topics",
        "resources",
        "events",
    )


def duplicate_event_ids(events: DataFrame) -> DataFrame:
    """One row: ``event_ids``, how many event ids occur on more than one row, and
    ``extra_rows``, the rows beyond the first of each (lifecycle events included).

    Exact, and cheap when there are none (the stream drops copies, so the usual case): rows
    are grouped by a 64-bit hash of the event id, a grouping of numbers; only ids whose hash
    occurs twice (copies, or the rare hash collision) are grouped again by the id itself.
    """
    hashed = events.select("event_id", F.xxhash64("event_id").alias("id_hash"))
    repeated_hashes = hashed.groupBy("id_hash").count().where(F.col("count") > 1).select("id_hash")
    per_id = (
        hashed.join(F.broadcast(repeated_hashes), "id_hash", "left_semi")
        .groupBy("event_id")
        .agg(F.count(F.lit(1)).alias("copies"))
        .where(F.col("copies") > 1)
    )
    return per_id.agg(
        F.count(F.lit(1)).alias("event_ids"),
        F.coalesce(F.sum(F.col("copies") - 1), F.lit(0)).alias("extra_rows"),
    )


def _count(condition: Column | None = None) -> Column:
    weight = F.col("requests")
    if condition is not None:
        weight = F.when(condition, weight).otherwise(F.lit(0))
    return F.coalesce(F.sum(weight), F.lit(0)).cast("long")


def request_totals(requests: DataFrame) -> DataFrame:
    """One row: requests, denied, allowed, dry-run objections, dry runs, principals."""
    return requests.agg(
        _count().alias("requests"),
        _count(F.col("outcome") == "denied").alias("requests_denied"),
        _count(F.col("outcome") == "allowed").alias("requests_allowed"),
        _count(F.col("would_deny")).alias("requests_would_deny"),
        _count(F.col("dry_run")).alias("dry_run_requests"),
        F.countDistinct("principal").alias("request_principals"),
    )


def _status() -> Column:
    return (
        F.when(F.col("outcome") == "denied", F.lit("denied"))
        .when(F.col("would_deny"), F.lit("would_deny"))
        .otherwise(F.lit("allowed"))
    )


def requests_per_hour(requests: DataFrame) -> DataFrame:
    """Requests per UTC hour: denied, allowed with a dry-run objection, allowed otherwise."""
    return (
        requests.groupBy(F.date_trunc("hour", "time").alias("hour"))
        .agg(
            _count(_status() == "denied").alias("denied"),
            _count(_status() == "would_deny").alias("would_deny"),
            _count(_status() == "allowed").alias("allowed"),
        )
        .orderBy("hour")
    )


RequestDimension = Literal["policy", "principal", "client_id", "topic"]


def denied_requests_by(requests: DataFrame, dimension: RequestDimension) -> DataFrame:
    """Denied requests per rule broken, principal, client id or topic, most first.

    A request breaking two rules (or about two topics) counts once for each.

    :raises ValueError: on an unknown dimension.
    """
    denied = requests.where(F.col("outcome") == "denied")
    if dimension == "policy":
        denied = denied.select(F.explode("denied_rules").alias("policy"), "requests")
    elif dimension == "topic":
        denied = denied.select(F.explode("topics").alias("topic"), "requests")
    elif dimension not in ("principal", "client_id"):
        raise ValueError(f"unknown dimension {dimension!r}")
    return (
        denied.groupBy(dimension)
        .agg(_count().alias("denied_requests"))
        .orderBy(F.desc("denied_requests"), F.asc_nulls_first(dimension))
    )


def _listed(name: str) -> Column:
    """The names in array column ``name``, joined by ``, ``. A resource name is the client's
    (a group or transactional id, a user name): one holding ``, ``, starting with a double
    quote, or empty is written as a JSON string (in double quotes, ``"`` and ``\\``
    escaped), so a group named ``orders, payments`` reads as one name, not two."""

    def item(x: Column) -> Column:
        ambiguous = x.contains(", ") | x.startswith('"') | (x == "")
        # JSON's escapes for the two characters a quoted name cannot hold as they are.
        escaped = F.regexp_replace(F.regexp_replace(x, r"\\", r"\\\\"), '"', '\\\\"')
        return F.when(ambiguous, F.concat(F.lit('"'), escaped, F.lit('"'))).otherwise(x)

    return F.array_join(F.transform(name, item), ", ")


def denied_requests(requests: DataFrame) -> DataFrame:
    """Every denied request with the rules it broke (and dry-run rules that objected)."""
    return (
        requests.where(F.col("outcome") == "denied")
        .select(
            "time",
            "request_id",
            "principal",
            "client_id",
            "api",
            F.array_join("denied_rules", ", ").alias("rules_broken"),
            F.array_join("would_deny_rules", ", ").alias("dry_run_rules"),
            F.array_join("topics", ", ").alias("topics"),
            _listed("resources").alias("resources"),
            "validate_only",
            "events",
        )
        .orderBy(F.desc("time"), "request_id")
    )


def request_offenders(requests: DataFrame, limit: int = 10) -> DataFrame:
    """The (principal, client_id) pairs with the most denied requests plus dry-run
    objections; dry runs (validate_only requests) are not offences and stay out."""
    refused = requests.where(
        ~F.col("dry_run") & ((F.col("outcome") == "denied") | F.col("would_deny"))
    )
    return (
        refused.groupBy("principal", "client_id")
        .agg(
            _count(F.col("outcome") == "denied").alias("denied_requests"),
            _count(F.col("would_deny")).alias("would_deny_requests"),
            F.size(F.array_distinct(F.flatten(F.collect_list("denied_rules")))).alias("rules"),
            F.max("time").alias("last_time"),
        )
        .withColumn("refusals", F.col("denied_requests") + F.col("would_deny_requests"))
        .orderBy(F.desc("refusals"), F.asc("principal"), F.asc_nulls_first("client_id"))
        .limit(limit)
        .drop("refusals")
    )


def dry_run_requests(requests: DataFrame) -> DataFrame:
    """Dry runs (validate_only requests, ``kpg dry-run``'s among them): per API, client id and
    outcome, apart from the offenders."""
    return (
        requests.where(F.col("dry_run"))
        .groupBy("api", "client_id", "validate_only", _status().alias("outcome"))
        .agg(_count().alias("requests"))
        .orderBy("api", F.asc_nulls_first("client_id"), "validate_only", "outcome")
    )


def would_deny_requests_by_policy(requests: DataFrame) -> DataFrame:
    """Requests each dry-run rule objected to (that no enforced rule denied), and whom."""
    objected = requests.where(F.col("would_deny")).select(
        F.explode("would_deny_rules").alias("policy"), "requests", "principal", "time"
    )
    return (
        objected.groupBy("policy")
        .agg(
            _count().alias("would_deny_requests"),
            F.countDistinct("principal").alias("principals"),
            F.min("time").alias("first_time"),
            F.max("time").alias("last_time"),
        )
        .orderBy(F.desc("would_deny_requests"), "policy")
    )


def principals(requests: DataFrame) -> DataFrame:
    """Per principal (``ANONYMOUS`` included): requests, denied, dry-run objections."""
    return (
        requests.groupBy("principal")
        .agg(
            _count().alias("requests"),
            _count(F.col("outcome") == "denied").alias("denied_requests"),
            _count(F.col("would_deny")).alias("would_deny_requests"),
            F.max("time").alias("last_time"),
        )
        .orderBy(F.desc("denied_requests"), F.desc("requests"), "principal")
    )


def config_changes(events: DataFrame) -> DataFrame:
    """One row per config key of a config-changing decision, with its before and after
    values (null for a sensitive key), newest first."""
    changes = events.where(F.col("config_changes").isNotNull())
    return (
        changes.select(
            "time",
            "request_id",
            principal_name().alias("principal"),
            "client_id",
            "api",
            "resource_type",
            "resource_name",
            "verdict",
            "policy",
            F.explode("config_changes").alias("change"),
        )
        .select(
            "time",
            "request_id",
            "principal",
            "client_id",
            "api",
            "resource_type",
            "resource_name",
            F.col("change.name").alias("config"),
            F.col("change.before").alias("before"),
            F.col("change.after").alias("after"),
            F.col("change.sensitive").alias("sensitive"),
            "verdict",
            "policy",
        )
        .orderBy(F.desc("time"), "request_id", "resource_name", "config", "policy")
    )


def refused_authentications(events: DataFrame) -> DataFrame:
    """Refused authentications (SCHEMA.md, "Refused authentications") per user name claimed,
    client host (the address without its port: a client reconnects from new ports) and
    policy (``sasl.client_auth``: the gateway's refusal; ``broker``: the credentials or the
    mechanism), most first: who is trying which user, from where."""
    refused = events.where((F.col("action") == "authenticate") & (F.col("verdict") == "denied"))
    host = F.regexp_extract(F.coalesce(F.col("client_address"), F.lit("")), r"^(.*):[0-9]+$", 1)
    return (
        refused.groupBy(F.col("resource_name").alias("user"), host.alias("client_host"), "policy")
        .agg(
            F.count(F.lit(1)).alias("refusals"),
            F.countDistinct("client_id").alias("client_ids"),
            F.min("time").alias("first_time"),
            F.max("time").alias("last_time"),
        )
        .orderBy(F.desc("refusals"), "user", "client_host", "policy")
    )


def lifecycle_events(events: DataFrame) -> DataFrame:
    """Gateway starts, stops and reloads, with the policy version, newest first."""
    return (
        events.where(event_kind() == "lifecycle")
        .select("time", "gateway_instance", "action", "verdict", "policy_version", "message")
        .orderBy(F.desc("time"), "gateway_instance")
    )
