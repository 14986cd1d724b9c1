"""The stream's command-line options and logging, shared by ``kpg audit stream`` and the
spark-submit entry point (``spark_audit/job.py``). No pyspark here: ``kpg --help`` mounts
these options without starting Spark.
"""

from __future__ import annotations

import argparse
import logging
import re
from datetime import datetime
from typing import Any

# What Spark's to_timestamp reads the same way: a date, or a date and time to the second
# (fraction optional), then Z or an offset; without one, UTC (the session's time zone).
_UTC_TIME = re.compile(r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:\d{2})?")


def utc_time(text: str) -> str:
    """``--since`` / ``--until``: ``text`` unchanged when Spark reads it as a time; anything
    else is an argparse error naming the option (Spark would read it as null and filter
    every event out).
    """
    try:
        if _UTC_TIME.fullmatch(text):
            datetime.fromisoformat(text.replace(" ", "T"))  # out-of-range month, day, hour
            return text
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a time: use 2026-11-21 or 2026-11-21T09:00:00 (UTC), "
        "optionally with Z or an offset such as +01:00"
    )


def add_stream_arguments(parser: argparse.ArgumentParser) -> None:
    """The stream's command-line options; shared by ``kpg audit stream`` and spark-submit."""
    parser.add_argument(
        "--source",
        choices=("spool", "kafka"),
        default="spool",
        help="where the events come from (default: spool)",
    )
    parser.add_argument("--spool", help="spool directory the gateway writes (source spool)")
    parser.add_argument("--bootstrap-servers", help="Kafka bootstrap servers (source kafka)")
    parser.add_argument("--topic", help="Kafka audit topic (source kafka)")
    parser.add_argument("--table", required=True, help="Parquet table directory to append to")
    parser.add_argument("--checkpoint", required=True, help="streaming checkpoint directory")
    parser.add_argument(
        "--available-now",
        action="store_true",
        help="process what is there, then stop (default: run until stopped)",
    )
    parser.add_argument(
        "--processing-time",
        default="30 seconds",
        help="micro-batch interval (default: 30 seconds)",
    )
    parser.add_argument("--max-files-per-trigger", type=int, help="cap segments per batch")
    parser.add_argument(
        "--dedupe-window",
        default="7 days",
        help="copies of an event (same event_id) that reach the job within this interval of "
        "each other are written once (default: 7 days); the report warns about any others",
    )
    parser.add_argument(
        "--state-partitions",
        type=int,
        help="partitions of the dedupe state; read only when the checkpoint is new "
        "(default: Spark's default parallelism)",
    )


def stream_settings(args: argparse.Namespace) -> dict[str, Any]:
    """``spark_audit.job.start_stream`` keyword arguments from :func:`add_stream_arguments`
    options."""
    return {
        "source": args.source,
        "spool_dir": args.spool,
        "bootstrap_servers": args.bootstrap_servers,
        "topic": args.topic,
        "table_dir": args.table,
        "checkpoint_dir": args.checkpoint,
        "available_now": args.available_now,
        "processing_time": args.processing_time,
        "max_files_per_trigger": args.max_files_per_trigger,
        "dedupe_window": args.dedupe_window,
        "state_partitions": args.state_partitions,
    }


def configure_logging() -> None:
    """Progress lines from ``spark_audit`` at INFO; other libraries stay at WARNING.

    A no-op for the root logger when the caller configured logging already.
    """
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    logging.getLogger("spark_audit").setLevel(logging.INFO)


def add_replay_arguments(parser: argparse.ArgumentParser) -> None:
    """``kpg audit replay``'s options."""
    parser.add_argument("--config", required=True, help="gateway YAML with candidate policies")
    parser.add_argument("--input", required=True, help="the audit table (or a spool directory)")
    parser.add_argument("--since", type=utc_time, help="only requests at or after this UTC time")
    parser.add_argument("--until", type=utc_time, help="only requests before this UTC time")
    parser.add_argument(
        "--output",
        "--out",
        dest="output",
        default="audit-replay",
        help="directory for summary.json and CSV files (--out, as report spells it, too)",
    )
