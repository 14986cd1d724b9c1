"""The streaming job: audit events from the spool (or a Kafka topic) into a Parquet table.

Exactly-once, across restarts, without a watermark: each micro-batch is written by
:func:`append_unseen`, which anti-joins the batch against the ``event_id`` values already
in the table (only the table's partitions for the batch's dates are read) and appends the
rest. The table itself is the record of what was written, so:

- a batch Spark replays after a crash (written, but not yet committed in the checkpoint)
  appends only what its first run did not;
- an event seen twice (the same ``event_id`` in two segments, or in one) lands once;
- the checkpoint keeps the file source from re-reading finished segments, so a restart
  does not rescan the spool, and the anti-join makes it harmless if it does.

``dropDuplicates`` with a watermark was rejected: an event arriving later than the
watermark would be dropped (loss), and a copy arriving after the state expires would be
written again (duplicate). One job per table: two writers would race past each other's
anti-join.

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

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from spark_audit.event import SPARK_SCHEMA_DDL, SPOOL_SEGMENT_GLOB, spark_schema
from spark_audit.options import add_stream_arguments, configure_logging, stream_settings
from spark_audit.session import build_spark_session, path_exists
from spark_audit.transforms import (
    malformed_events,
    prepare_events,
    table_schema,
    unseen_events,
)

logger = logging.getLogger("spark_audit.job")  # also when run as __main__

Source = Literal["spool", "kafka"]
QUERY_NAME: Final = "kpg-audit"


class KafkaConnectorMissingError(RuntimeError):
    """``source='kafka'`` was asked for, but Spark's Kafka connector is not on the classpath."""


def read_spool_stream(
    spark: SparkSession, spool_dir: str, *, max_files_per_trigger: int | None = None
) -> DataFrame:
    """Raw events from the completed segments of a spool directory (explicit schema).

    Only ``events-*.jsonl`` files are read; open segments are hidden dot-files.
    """
    reader = (
        spark.readStream.schema(spark_schema())
        .option("pathGlobFilter", SPOOL_SEGMENT_GLOB)
        .option("mode", "PERMISSIVE")
    )
    if max_files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
    return reader.json(spool_dir)


def read_kafka_stream(
    spark: SparkSession,
    bootstrap_servers: str,
    topic: str,
    *,
    starting_offsets: str = "earliest",
) -> DataFrame:
    """Raw events from a Kafka topic whose record values are the JSON events.

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
    parsed = F.from_json(F.col("value").cast("string"), SPARK_SCHEMA_DDL)
    return records.select(parsed.alias("event")).select("event.*")


def append_unseen(batch: DataFrame, batch_id: int, table_dir: str) -> None:
    """``foreachBatch`` body: append the batch's well-formed events the table lacks."""
    spark = batch.sparkSession
    raw = batch.persist()
    try:
        rows = raw.count()
        if rows == 0:
            return
        malformed = malformed_events(raw).count()
        if malformed:
            logger.warning("audit batch %d: dropped %d malformed events", batch_id, malformed)
        events = prepare_events(raw).persist()
        try:
            dates = [row["date"] for row in events.select("date").distinct().collect()]
            if not dates:
                return
            if path_exists(spark, table_dir):
                table = (
                    spark.read.schema(table_schema())
                    .parquet(table_dir)
                    .where(F.col("date").isin(dates))
                )
                new = unseen_events(events, table)
            else:
                new = events.select(*table_schema().names)
            new.write.mode("append").partitionBy("date").parquet(table_dir)
            logger.info(
                "audit batch %d: %d rows read, %d malformed, dates %s appended",
                batch_id,
                rows,
                malformed,
                ", ".join(sorted(str(d) for d in dates)),
            )
        finally:
            events.unpersist()
    finally:
        raw.unpersist()


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
) -> StreamingQuery:
    """Start the audit stream and return the running query (non-blocking).

    ``available_now`` processes what is there and stops; otherwise a micro-batch runs every
    ``processing_time``.

    :raises ValueError: if the source's settings are missing.
    :raises KafkaConnectorMissingError: see :func:`read_kafka_stream`.
    """
    if source == "spool":
        if not spool_dir:
            raise ValueError("source 'spool' needs spool_dir")
        raw = read_spool_stream(spark, spool_dir, max_files_per_trigger=max_files_per_trigger)
    elif source == "kafka":
        if not bootstrap_servers or not topic:
            raise ValueError("source 'kafka' needs bootstrap_servers and topic")
        raw = read_kafka_stream(spark, bootstrap_servers, topic)
    else:
        raise ValueError(f"unknown source {source!r}; use 'spool' or 'kafka'")

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        append_unseen(batch, batch_id, table_dir)

    writer = (
        raw.writeStream.queryName(QUERY_NAME)
        .option("checkpointLocation", checkpoint_dir)
        .foreachBatch(write_batch)
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=processing_time)
    return writer.start()


def run_stream(spark: SparkSession, **settings: Any) -> None:
    """Start the stream (see :func:`start_stream`) and block until it ends.

    :raises pyspark.errors.StreamingQueryException: if the query fails.
    """
    query = start_stream(spark, **settings)
    logger.info("audit stream %s started (id %s)", QUERY_NAME, query.id)
    try:
        query.awaitTermination()
    finally:
        if query.isActive:
            query.stop()
    logger.info("audit stream %s finished", QUERY_NAME)


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add_stream_arguments(parser)
    parser.add_argument("--master", help="Spark master; leave unset under spark-submit")
    args = parser.parse_args(argv)
    configure_logging()
    had_session = SparkSession.getActiveSession() is not None
    spark = build_spark_session(master=args.master)
    try:
        run_stream(spark, **stream_settings(args))
    finally:
        if not had_session:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
