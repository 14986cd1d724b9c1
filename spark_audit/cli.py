"""``kpg audit`` subcommands: ``report`` (batch), ``stream`` (the Structured Streaming job),
``replay`` (candidate policies against recorded requests) and ``verify`` (the spool's chains).

Mount with :func:`add_audit_commands`; like ``kpg run``, each leaf parser sets ``func`` to a
function ``(argparse.Namespace) -> int`` that returns the exit status. pyspark is imported
only when a command runs, so ``kpg --help`` stays fast.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

from spark_audit.chain import add_verify_command
from spark_audit.options import (
    add_replay_arguments,
    add_stream_arguments,
    configure_logging,
    stream_settings,
    utc_time,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

_MASTER_HELP = (
    "Spark master, such as spark://HOST:7077 (default: local[*]); this process is the driver "
    "and writes the output"
)


def add_audit_commands(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Add ``audit report``, ``stream``, ``replay`` and ``verify`` to ``subparsers`` (from
    ``add_subparsers``).

    :returns: the ``audit`` parser.
    """
    audit = subparsers.add_parser("audit", help="audit reports and the audit stream job")
    commands = audit.add_subparsers(dest="audit_command", required=True)

    report = commands.add_parser(
        "report",
        help="build summary.json, CSV files and index.html from audit events",
        description="Build the audit reports (summary.json, one CSV per report, index.html "
        "with charts) from a spool directory or the Parquet audit table, in one Spark batch.",
    )
    report.add_argument(
        "--input", required=True, help="a spool directory or a Parquet audit table directory"
    )
    report.add_argument(
        "--out",
        "--output",
        dest="out",
        required=True,
        help="directory to write the report into (--output, as replay spells it, too)",
    )
    report.add_argument(
        "--top", type=int, default=10, help="rows in the top offenders report (default: 10)"
    )
    report.add_argument(
        "--since",
        type=utc_time,
        help="only events at or after this UTC time (e.g. 2026-11-21T09:00:00)",
    )
    report.add_argument("--until", type=utc_time, help="only events before this UTC time")
    report.add_argument(
        "--principal", help="only this principal's events (ANONYMOUS: unauthenticated clients)"
    )
    report.add_argument(
        "--topic", help="only events about this topic (Produce partitions count as it)"
    )
    report.add_argument("--master", help=_MASTER_HELP)
    report.set_defaults(func=report_command)

    stream = commands.add_parser(
        "stream",
        help="append audit events from the spool (or Kafka) to the Parquet table",
        description="Spark Structured Streaming: read audit events from the gateway's spool "
        "(or its audit topic) and append each event once to the Parquet audit table, "
        "partitioned by date; a checkpoint makes a restart lose and repeat nothing.",
    )
    add_stream_arguments(stream)
    stream.add_argument("--master", help=_MASTER_HELP)
    stream.set_defaults(func=stream_command)

    replay = commands.add_parser(
        "replay",
        help="re-judge recorded requests with candidate policies; list what would change",
        description="Re-judge the recorded requests (topic creations, config changes, and "
        "changes of client quotas and SCRAM credentials, from their schema v2 details) with "
        "the policies of a candidate gateway configuration, on "
        "Spark, and list the requests it would deny that were allowed, and the reverse, per "
        "rule, principal and topic. Produce, deletes and partition increases are counted as "
        "not replayable (their records or topic state are not recorded).",
    )
    add_replay_arguments(replay)
    replay.add_argument("--master", help=_MASTER_HELP)
    replay.set_defaults(func=replay_command)
    add_verify_command(commands)
    return audit


def _session(
    app_name: str, master: str | None, *, web_ui: bool = False, java_options: str | None = None
) -> SparkSession:
    """Logging set up, and the session every ``kpg audit`` command runs on: a local JVM of
    2 GB with ``java_options`` (default :data:`~spark_audit.session.LOCAL_DRIVER_JAVA_OPTIONS`)
    when this call starts it (``master`` unset: local[*], or spark-submit's)."""
    from spark_audit.session import LOCAL_DRIVER_JAVA_OPTIONS, build_spark_session

    configure_logging()
    return build_spark_session(
        app_name,
        master=master,
        driver_memory="2g",
        driver_java_options=java_options or LOCAL_DRIVER_JAVA_OPTIONS,
        web_ui=web_ui,
    )


def report_command(args: argparse.Namespace) -> int:
    """``kpg audit report --input DIR --out DIR``."""
    from spark_audit.report import Filters, build_report
    from spark_audit.session import REPORT_DRIVER_JAVA_OPTIONS

    spark = _session("kpg-audit-report", args.master, java_options=REPORT_DRIVER_JAVA_OPTIONS)
    filters = Filters(
        since=args.since, until=args.until, principal=args.principal, topic=args.topic
    )
    try:
        summary = build_report(spark, args.input, args.out, top_n=args.top, filters=filters)
    except FileNotFoundError as exc:
        logger.error("%s", exc)
        return 2
    totals = summary["totals"]
    for warning in summary["warnings"]:
        print(f"kpg audit report: warning: {warning}", file=sys.stderr)
    print(
        f"{totals['requests']:,} requests ({totals['requests_denied']:,} denied, "
        f"{totals['requests_would_deny']:,} allowed with a dry-run objection); "
        f"report in {args.out}/index.html"
    )
    return 0


def stream_command(args: argparse.Namespace) -> int:
    """``kpg audit stream --spool DIR --table DIR --checkpoint DIR [--available-now]``."""
    from spark_audit.job import KafkaConnectorMissingError, run_stream

    # A run to completion needs no web UI; a long-running stream keeps Spark's.
    spark = _session("kpg-audit-stream", args.master, web_ui=not args.available_now)
    try:
        run_stream(spark, **stream_settings(args))
    except (KafkaConnectorMissingError, ValueError) as exc:
        logger.error("%s", exc)
        return 2
    return 0


def replay_command(args: argparse.Namespace) -> int:
    """``kpg audit replay --config FILE --input DIR [--since T] [--until T] [--output DIR]``."""
    from spark_audit.replay import CandidateError, ExecutorsCannotJudgeError, build_replay

    spark = _session("kpg-audit-replay", args.master)
    try:
        summary = build_replay(
            spark, args.input, args.config, args.output, since=args.since, until=args.until
        )
    except (CandidateError, ExecutorsCannotJudgeError, OSError) as exc:
        logger.error("%s", exc)
        return 2
    for warning in summary["warnings"]:
        print(f"kpg audit replay: warning: {warning}", file=sys.stderr)
    skipped = summary["requests"] - summary["replayed_requests"]
    print(
        f"{summary['replayed_requests']:,} of {summary['requests']:,} requests replayed "
        f"({skipped:,} not replayable); {summary['newly_denied']:,} newly denied, "
        f"{summary['newly_allowed']:,} newly allowed; details in {args.output}"
    )
    return 0
