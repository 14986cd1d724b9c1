"""The Spark session and the file-system look-ups that the stream job and the reports share."""

from __future__ import annotations

import atexit
import hashlib
import io
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from pyspark.sql import SparkSession

from spark_audit.event import SPOOL_SEGMENT_GLOB

LOCAL_DRIVER_JAVA_OPTIONS: Final = "-XX:+UseSerialGC"
"""For the JVM ``kpg audit`` starts in local mode, where every task runs in it: the serial
collector takes less CPU than G1's concurrent threads, which on a machine of few cores
compete with the tasks (a report of a million events: about 15% less CPU time; the stream
no slower). spark-submit's own settings decide on a cluster."""

REPORT_DRIVER_JAVA_OPTIONS: Final = f"{LOCAL_DRIVER_JAVA_OPTIONS} -XX:TieredStopAtLevel=1"
"""For ``kpg audit report``'s local JVM: compiled by the JIT's first tier only. A report is a
few dozen short Spark jobs, each run once, and the optimizing tier's compiler threads took
the cores from the tasks before their code paid back: a report of a million events took
60.0-63.9 s of JVM CPU against 81.7-88.4 s (the same table, runs alternated). The stream
job runs the same code over every row and is the reverse (89.0-92.3 s against 70.9-73.9 s),
so it keeps :data:`LOCAL_DRIVER_JAVA_OPTIONS`."""


def build_spark_session(
    app_name: str = "kpg-audit",
    master: str | None = None,
    *,
    driver_memory: str | None = None,
    driver_java_options: str | None = None,
    web_ui: bool = True,
) -> SparkSession:
    """The session the audit job and reports need (UTC session time zone).

    ``master`` is only set when given: under spark-submit the submitter chooses it, and a
    plain ``python`` run defaults to ``local[*]``. ``driver_memory`` applies when this call
    starts Spark's JVM (``kpg audit ...``; local mode runs every task in it), not under
    spark-submit, whose ``--driver-memory`` decides; ``driver_java_options`` likewise (the
    CLI passes :data:`LOCAL_DRIVER_JAVA_OPTIONS`). ``web_ui=False`` skips starting Spark's
    web UI (a second off a short run).
    """
    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        # The jobs log their own progress; Spark's bars would run into those lines.
        .config("spark.ui.showConsoleProgress", "false")
    )
    if master is not None:
        builder = builder.master(master)
    if _runs_here(master):
        # Python workers in this interpreter, with its packages (the policies' own, such as
        # google-re2, and any plug-in a replay loads), not whatever python3 is on the PATH.
        # PySpark reads the variable when it starts the context; one already set stays.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if driver_memory is not None:
        builder = builder.config("spark.driver.memory", driver_memory)
    if driver_java_options is not None:
        builder = builder.config("spark.driver.extraJavaOptions", driver_java_options)
    if not web_ui:
        builder = builder.config("spark.ui.enabled", "false")
    return builder.getOrCreate()


def _runs_here(master: str | None) -> bool:
    """Whether the session's tasks run on this machine: local mode, given or by default (not
    under spark-submit, which starts the driver with ``PYSPARK_GATEWAY_PORT`` set and
    chooses the master and the workers' Python itself)."""
    if master is None:
        return "PYSPARK_GATEWAY_PORT" not in os.environ
    return master.startswith("local")


def runs_on_a_cluster(spark: SparkSession) -> bool:
    """Whether the session's tasks run in executors of a cluster (a master that is not
    ``local``), whose Python has none of this process's modules unless they are shipped."""
    return not (spark.sparkContext.master or "local").startswith("local")


def ship_packages(spark: SparkSession, packages: Sequence[str]) -> None:
    """On a cluster, add the Python sources of the imported ``packages`` (by name) to the
    executors' ``sys.path`` (one zip, ``SparkContext.addPyFile``), so that a UDF's code
    imports there as it does in the driver. Their compiled modules and third-party imports
    are not shipped: those must be installed on the executors. A no-op in local mode, where
    the tasks' Python workers import from the driver's own paths.
    """
    if not runs_on_a_cluster(spark):
        return
    content = io.BytesIO()
    with zipfile.ZipFile(content, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in packages:
            root = Path(next(iter(sys.modules[package].__path__)))
            for source in sorted(root.rglob("*.py")):
                name = source.relative_to(root.parent)
                # A fixed time: the same sources make the same zip, named by its digest.
                info = zipfile.ZipInfo(str(name), date_time=(1980, 1, 1, 0, 0, 0))
                archive.writestr(info, source.read_bytes(), zipfile.ZIP_DEFLATED)
    # In a directory of this process's own (others cannot put their code in its place),
    # removed when the process exits; the executors fetch the file when their first task of
    # this session starts. The name has the content's digest: Spark serves a file by its name
    # for the whole session, and ignores another one of that name.
    directory = Path(tempfile.mkdtemp(prefix="kpg-py-files-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    data = content.getvalue()
    path = directory / f"kpg-{hashlib.sha256(data).hexdigest()[:16]}.zip"
    path.write_bytes(data)
    spark.sparkContext.addPyFile(str(path))


def path_exists(spark: SparkSession, path: str) -> bool:
    """Whether ``path`` exists, on whatever file system its URI names (local, HDFS, S3...)."""
    jvm: Any = spark.sparkContext._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    fs = hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return bool(fs.exists(hadoop_path))


def glob_paths(spark: SparkSession, pattern: str) -> list[str]:
    """Paths matching a Hadoop glob ``pattern``, on any file system."""
    jvm: Any = spark.sparkContext._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(pattern)
    fs = hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    statuses = fs.globStatus(hadoop_path) or []
    return [str(status.getPath().toString()) for status in statuses]


def spool_glob(spool_dir: str) -> str:
    """The completed segments of a spool: ``events-*.jsonl`` in the directory itself and in
    its direct subdirectories (``worker-<i>/`` with ``kpg run --workers N``).

    Open segments are hidden dot-files, which no pattern here matches.
    """
    base = spool_dir.rstrip("/")
    return f"{base}/{{{SPOOL_SEGMENT_GLOB},*/{SPOOL_SEGMENT_GLOB}}}"
