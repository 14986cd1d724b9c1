"""The streaming job: audit events from the spool (or a Kafka topic) into a Parquet table.

Exactly once, at any crash point, by Spark's own commit protocols and nothing of ours:

- The source: Spark's file source records in the checkpoint (``sources/0``) which segment
  files each micro-batch takes, before the batch runs; a batch rerun after a crash takes the
  same files, and a finished file is never taken again. (The Kafka source does the same with
  offsets.)
- Dedupe: :func:`spark_audit.transforms.dedupe_stream` keeps each ``event_id`` in the
  stream's state store (RocksDB, versioned per batch in the checkpoint), so a copy of an event
  in a later batch, or in the same one, is dropped; a rerun batch starts from the state the
  previous batch committed.
- The sink: Spark's file sink (``format("parquet")``). A batch's files are listed in the
  table's ``_spark_metadata/<batch id>`` log file, which Spark writes atomically after every
  task of the batch has written its files; a batch already in that log is skipped when Spark
  reruns it. Spark reads the table through that log (``spark.read.parquet(TABLE)`` on the
  table's root directory): files of a batch killed before its log entry was written are
  never read, so a reader sees each batch all or nothing. Do not read ``date=...``
  directories on their own, or the Parquet files with another tool, without the log's list.

Each micro-batch writes one Parquet file per date it holds (rows are repartitioned by
``date`` before the sink). The job logs a line per batch: its id, lines read, malformed lines,
rows written, seconds. One job per table and checkpoint.

Run on a cluster with ``spark-submit --py-files spark_audit.zip spark_audit/job.py ...``
(the zip holds the ``spark_audit`` package); the master comes from spark-submit. Reading
Kafka needs the connector: ``--packages org.apache.spark:spark-sql-kafka-0-10_<scala>:<spark>``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from spark_audit.options import add_stream_arguments, configure_logging, stream_settings
from spark_audit.session import build_spark_session, glob_paths, path_exists, spool_glob
from spark_audit.transforms import (
    dedupe_stream,
    is_well_formed,
    parse_lines,
    table_schema,
    typed_events,
    with_date,
)

logger = logging.getLogger("spark_audit.job")  # also when run as __main__

Source = Literal["spool", "kafka"]
QUERY_NAME: Final = "kpg-audit"
SINK_LOG: Final = "_spark_metadata"
"""The file sink's log of committed batches, in the table's root directory."""

DEFAULT_DEDUPE_WINDOW: Final = "7 days"
_PROGRESS_POLL_S: Final = 1
_ROCKSDB: Final = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


class KafkaConnectorMissingError(RuntimeError):
    """``source='kafka'`` was asked for, but Spark's Kafka connector is not on the classpath."""


def read_spool_stream(
    spark: SparkSession, spool_dir: str, *, max_files_per_trigger: int | None = None
) -> DataFrame:
    """The lines (column ``value``) of the completed segments of a spool directory, read as
    text so that each line's hash is of the bytes the gateway wrote."""
    if _is_local(spool_dir):
        # The glob names every segment; past 32 paths Spark lists them with a job of one task
        # per file, which on the local disk costs more than the listing (a second or more per
        # run, for a handful of new events).
        spark.conf.set("spark.sql.sources.parallelPartitionDiscovery.threshold", "1000000")
    reader = spark.readStream
    if max_files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
    return reader.text(spool_glob(spool_dir))


def _is_local(path: str) -> bool:
    scheme = urlsplit(path).scheme
    return scheme in ("", "file")


def read_kafka_stream(
    spark: SparkSession,
    bootstrap_servers: str,
    topic: str,
    *,
    starting_offsets: str = "earliest",
) -> DataFrame:
    """Lines (column ``value``) from a Kafka topic whose record values are the JSON events.

    :raises KafkaConnectorMissingError: if Spark's Kafka connector is not on the classpath.
    """
    try:
        records = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap_servers)
            .option("subscribe", topic)
            .option("startingOffsets", starting_offsets)
            .load()
        )
    except AnalysisException as exc:
        text = str(exc)
        if "KAFKA_DATA_SOURCE_NOT_ENABLED" in text or "Failed to find data source" in text:
            scala = "2.13" if int(spark.version.split(".")[0]) >= 4 else "2.12"
            raise KafkaConnectorMissingError(
                "reading audit events from Kafka needs Spark's Kafka connector; start the job "
                f"with --packages org.apache.spark:spark-sql-kafka-0-10_{scala}:{spark.version}"
                " (spark-submit), or set spark.jars.packages to it"
            ) from exc
        raise
    return records.select(F.col("value").cast("string").alias("value"))


def table_rows_stream(lines: DataFrame, *, dedupe_window: str = DEFAULT_DEDUPE_WINDOW) -> DataFrame:
    """Streaming lines to audit table rows, one row per event id, one partition per date.

    Observed metrics for the progress log: ``lines`` (``read``, ``malformed``) and
    ``written`` (``rows``).
    """
    # Malformed: every line left out as no event of the schema, not only the lines without
    # an event id (a verdict no version has was counted a duplicate, and dropped unsaid).
    observed = typed_events(parse_lines(lines)).observe(
        "lines",
        F.count(F.lit(1)).alias("read"),
        F.count_if(~is_well_formed()).alias("malformed"),
    )
    rows = with_date(dedupe_stream(observed.where(is_well_formed()), dedupe_window))
    return (
        rows.select(*table_schema().names)
        .observe("written", F.count(F.lit(1)).alias("rows"))
        .repartition("date")
    )


def check_table(spark: SparkSession, table_dir: str) -> None:
    """Refuse a table an earlier version of the job wrote (no ``_spark_metadata`` log).

    The file sink would start a log of its own there, and readers would then see only what it
    lists: every earlier row would vanish from them.

    :raises ValueError: if ``table_dir`` has date partitions but no sink log.
    """
    base = table_dir.rstrip("/")
    if path_exists(spark, f"{base}/{SINK_LOG}") or not glob_paths(spark, f"{base}/date=*"):
        return
    raise ValueError(
        f"{table_dir} was written by an earlier version of the audit job (it has no "
        f"{SINK_LOG} log); stream into a new table directory with a new checkpoint "
        "directory: the spool is read again from its first segment"
    )


def _configure_stream(spark: SparkSession, state_partitions: int | None) -> None:
    # State in RocksDB (on disk, bounded memory) unless spark-submit chose a provider; a
    # checkpoint keeps the provider and partition count it started with, whatever is set here.
    # Each batch uploads RocksDB's new files to the checkpoint (no changelog): a run that
    # starts restores them as they are, instead of replaying every change since a snapshot
    # (22 s for a million events, when the runs are short ones of --available-now).
    if not spark.sparkContext.getConf().contains("spark.sql.streaming.stateStore.providerClass"):
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", _ROCKSDB)
    partitions = state_partitions or max(1, spark.sparkContext.defaultParallelism)
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    # No empty batches just to move the watermark: state expiry waits for the next data.
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    if not spark.sparkContext.getConf().contains("spark.sql.parquet.outputTimestampType"):
        # ``time`` as Parquet's INT64 microseconds, not Spark's default INT96: a file's row
        # groups then carry ``time`` statistics, so a report's --since/--until skips those
        # outside its range instead of decoding every row. Files written before as INT96 stay
        # readable; both are read as the same timestamp.
        spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")


def start_stream(
    spark: SparkSession,
    *,
    table_dir: str,
    checkpoint_dir: str,
    source: Source = "spool",
    spool_dir: str | None = None,
    bootstrap_servers: str | None = None,
    topic: str | None = None,
    available_now: bool = False,
    processing_time: str = "30 seconds",
    max_files_per_trigger: int | None = None,
    dedupe_window: str = DEFAULT_DEDUPE_WINDOW,
    state_partitions: int | None = None,
) -> StreamingQuery:
    """Start the audit stream and return the running query (non-blocking).

    ``available_now`` processes what is there and stops; otherwise a micro-batch runs every
    ``processing_time``. ``state_partitions`` (default: the session's default parallelism)
    only applies to a new checkpoint.

    :raises ValueError: if the source's settings are missing, the spool directory does not
        exist, or see :func:`check_table`.
    :raises KafkaConnectorMissingError: see :func:`read_kafka_stream`.
    """
    if source == "spool":
        if not spool_dir:
            raise ValueError("source spool needs --spool: the gateway's audit.spool_dir")
        if not path_exists(spark, spool_dir):
            raise ValueError(
                f"spool directory {spool_dir} does not exist: give --spool the gateway's "
                "audit.spool_dir"
            )
        lines = read_spool_stream(spark, spool_dir, max_files_per_trigger=max_files_per_trigger)
    elif source == "kafka":
        if not bootstrap_servers or not topic:
            raise ValueError(
                "source kafka needs --bootstrap-servers and --topic (the gateway's audit.topic)"
            )
        lines = read_kafka_stream(spark, bootstrap_servers, topic)
    else:
        raise ValueError(f"unknown source {source!r}; use 'spool' or 'kafka'")
    check_table(spark, table_dir)
    _configure_stream(spark, state_partitions)

    writer = (
        table_rows_stream(lines, dedupe_window=dedupe_window)
        .writeStream.queryName(QUERY_NAME)
        .format("parquet")
        .option("path", table_dir)
        .option("checkpointLocation", checkpoint_dir)
        .partitionBy("date")
        .outputMode("append")
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=processing_time)
    return writer.start()


def describe_progress(progress: Any) -> str:
    """One log line for a micro-batch's progress (a ``StreamingQueryProgress``)."""
    metrics = progress["observedMetrics"] or {}
    lines = metrics.get("lines")
    written = metrics.get("written")
    read = progress["numInputRows"]
    malformed = (lines["malformed"] if lines is not None else 0) or 0
    rows = (written["rows"] if written is not None else 0) or 0
    seconds = (progress["durationMs"].get("triggerExecution") or 0) / 1000
    duplicates = max(0, read - malformed - rows)
    return (
        f"audit batch {progress['batchId']}: {read:,} lines read, {malformed:,} malformed, "
        f"{duplicates:,} duplicate, {rows:,} rows written in {seconds:.1f}s"
    )


class _ProgressLog:
    """Logs each micro-batch once, from the query's recent progress."""

    def __init__(self) -> None:
        self._logged = -1

    def __call__(self, query: StreamingQuery) -> None:
        for progress in query.recentProgress:
            if progress["batchId"] > self._logged:
                self._logged = progress["batchId"]
                if progress["numInputRows"] or progress["observedMetrics"]:
                    logger.info("%s", describe_progress(progress))


def run_stream(spark: SparkSession, **settings: Any) -> None:
    """Start the stream (see :func:`start_stream`), log each batch, block until it ends.

    :raises pyspark.errors.StreamingQueryException: if the query fails.
    """
    query = start_stream(spark, **settings)
    logger.info("audit stream %s started (id %s)", QUERY_NAME, query.id)
    log_progress = _ProgressLog()
    try:
        while not query.awaitTermination(_PROGRESS_POLL_S):
            log_progress(query)
    finally:
        log_progress(query)
        if query.isActive:
            query.stop()
    logger.info("audit stream %s finished", QUERY_NAME)


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit entry point: the exit status of ``kpg audit stream`` (2 for settings it
    refuses, such as a ``--spool`` directory that does not exist)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add_stream_arguments(parser)
    parser.add_argument("--master", help="Spark master; leave unset under spark-submit")
    args = parser.parse_args(argv)
    configure_logging()
    had_session = SparkSession.getActiveSession() is not None
    spark = build_spark_session(master=args.master)
    try:
        run_stream(spark, **stream_settings(args))
    except (KafkaConnectorMissingError, ValueError) as exc:
        # As ``kpg audit stream``: a refused setting is status 2 and one line, not a traceback.
        logger.error("%s", exc)
        return 2
    finally:
        if not had_session:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
