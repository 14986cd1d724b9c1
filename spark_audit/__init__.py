"""Audit events of the Kafka policy gateway, and the Spark job that turns them into reports.

Modules, each importing only those listed before it (an import-linter contract keeps the
graph acyclic):

- :mod:`spark_audit.event` is the schema (see ``SCHEMA.md``). It is the only module the
  gateway imports, so it must stay free of pyspark at import time.
- :mod:`spark_audit.options` holds the stream's command-line options and logging set-up,
  shared by ``kpg audit stream`` and spark-submit; no pyspark.
- :mod:`spark_audit.session` builds the Spark session and looks paths up on any file system.
- :mod:`spark_audit.transforms` holds pure ``DataFrame -> DataFrame`` functions.
- :mod:`spark_audit.job` is the Structured Streaming job: spool (or Kafka) to a Parquet table
  partitioned by ``date``. Each event lands exactly once at any crash point: the file source's
  and file sink's logs make each batch read once and committed all or nothing, and the
  stream's state drops copies of an ``event_id``.
- :mod:`spark_audit.report` builds ``summary.json``, CSV files and ``index.html``.
- :mod:`spark_audit.cli` mounts ``kpg audit report`` and ``kpg audit stream``.

Times are UTC throughout: event times are written with a ``Z``, and the Spark session runs
with ``spark.sql.session.timeZone=UTC`` (``session.build_spark_session`` sets it).
Nothing here imports ``gateway``, ``protocol`` or ``policies``.
"""
