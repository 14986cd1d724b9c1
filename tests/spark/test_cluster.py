"""The audit job on a real standalone Spark cluster (``spark_cluster``), run as
spark_audit/README.md tells users to: the stream with ``spark-submit --py-files
spark_audit.zip spark_audit/job.py``, the report and the replay with ``kpg audit ...
--master spark://...``. The cluster's Python workers run a Python with nothing but the
standard library and Spark's own pyspark (what a node set up for Spark alone has), unless a
test gives them the gateway's third-party dependencies. Each result is checked against the
same run in-process (the ``spark`` fixture)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import re2  # type: ignore[import-untyped]
import yaml
from pyspark.sql import SparkSession

from spark_audit import job
from spark_audit.replay import build_replay
from spark_audit.report import build_report
from spark_audit.transforms import INGESTED_AT, table_schema
from tests.spark.conftest import SparkCluster
from tests.spark.support import report_events, write_segment
from tests.spark.test_replay import ACTIVE_RULES, DAY_MS, recorded

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
KPG = str(Path(sys.executable).with_name("kpg"))
_TIMEOUT_S = 300


@dataclass(frozen=True, slots=True, kw_only=True)
class Streamed:
    spool: Path
    cluster_table: Path
    local_table: Path
    submitted: subprocess.CompletedProcess[str]


def readme_zip(directory: Path) -> Path:
    """``zip -qr spark_audit.zip spark_audit``, run in a checkout, as the README has it."""
    archive = directory / "spark_audit.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for path in sorted((ROOT / "spark_audit").rglob("*")):
            if "__pycache__" not in path.parts:
                zipped.write(path, path.relative_to(ROOT))
    return archive


def submit_env(cluster: SparkCluster, python: Path) -> dict[str, str]:
    """spark-submit's environment: ``python`` for the driver and the executors, no
    PYTHONPATH of the tests (the zip is all the job has of this project)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYSPARK_", "SPARK_")) and key != "PYTHONPATH"
    }
    return env | {
        "SPARK_HOME": str(cluster.spark_home),
        "SPARK_CONF_DIR": str(cluster.conf_dir),
        "PYSPARK_PYTHON": str(python),
    }


def kpg_env(cluster: SparkCluster, executor_python: Path) -> dict[str, str]:
    """A ``kpg`` process of this checkout (the driver) whose executors run
    ``executor_python``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("SPARK_")}
    return env | {
        "PYTHONPATH": str(ROOT),
        "SPARK_CONF_DIR": str(cluster.conf_dir),
        "PYSPARK_PYTHON": str(executor_python),
    }


def run(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, env=env, cwd=cwd, capture_output=True, text=True, timeout=_TIMEOUT_S
    )


def table_rows(spark: SparkSession, table: Path) -> list[dict[str, Any]]:
    """The table's rows but for the time each was ingested, in event id order."""
    frame = spark.read.schema(table_schema()).parquet(str(table)).drop(INGESTED_AT)
    return [row.asDict(recursive=True) for row in frame.orderBy("event_id").collect()]


@pytest.fixture(scope="module")
def streamed(
    spark: SparkSession, spark_cluster: SparkCluster, tmp_path_factory: pytest.TempPathFactory
) -> Streamed:
    """The report's day of events (one duplicated across two segments) and the replay's
    recorded requests, streamed once by spark-submit on the cluster and once in-process."""
    base = tmp_path_factory.mktemp("cluster-stream")
    spool = base / "spool"
    spool.mkdir()
    events = report_events()
    write_segment(spool, events[:6])
    write_segment(spool, events[5:])
    write_segment(spool, recorded())
    submit_dir = base / "submit"
    submit_dir.mkdir()
    archive = readme_zip(submit_dir)
    shutil.copytree(ROOT / "spark_audit", submit_dir / "spark_audit")
    cluster_table = base / "cluster-table"
    submitted = run(
        [*spark_cluster.submit_command(), "--py-files", str(archive), "spark_audit/job.py"]
        + ["--spool", str(spool), "--table", str(cluster_table)]
        + ["--checkpoint", str(base / "cluster-checkpoint"), "--available-now"],
        submit_env(spark_cluster, spark_cluster.bare_python),
        submit_dir,
    )
    local_table = base / "local-table"
    job.run_stream(
        spark,
        spool_dir=str(spool),
        table_dir=str(local_table),
        checkpoint_dir=str(base / "local-checkpoint"),
        available_now=True,
    )
    return Streamed(
        spool=spool, cluster_table=cluster_table, local_table=local_table, submitted=submitted
    )


def test_the_readme_spark_submit_streams_the_spool_as_in_process(
    spark: SparkSession, streamed: Streamed
) -> None:
    assert streamed.submitted.returncode == 0, streamed.submitted.stdout[-5000:]
    rows = table_rows(spark, streamed.cluster_table)
    events = len(report_events()) + len(recorded())
    assert len(rows) == events  # the copy dropped
    assert rows == table_rows(spark, streamed.local_table)
    # The progress line per micro-batch reaches the submitter (spark-submit joins the
    # driver's stderr to its stdout).
    progress = f"audit batch 0: {events + 1} lines read, 0 malformed, 1 duplicate, {events} rows"
    assert progress in streamed.submitted.stdout


def _comparable(summary: dict[str, Any]) -> Any:
    """A summary but for its times and paths, each list of rows in one order: rows that tie
    on a listing's order (the same time) come in the order the tasks finished, and the
    events' files are in the table's order, neither of which two runs share."""
    kept = {k: v for k, v in summary.items() if k not in ("generated_at", "input", "candidate")}
    return _sorted_lists(json.loads(json.dumps(kept)))


def _sorted_lists(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _sorted_lists(item) for key, item in value.items()}
    if isinstance(value, list):
        return sorted((_sorted_lists(item) for item in value), key=json.dumps)
    return value


def _csv_rows(path: Path) -> tuple[list[list[str]], list[list[str]]]:
    """The header (none in the file of an empty section) and the rows in one order."""
    with path.open(newline="", encoding="utf-8") as file:
        lines = list(csv.reader(file))
    return lines[:1], sorted(lines[1:])


def test_kpg_audit_report_on_the_cluster_gives_the_in_process_figures(
    spark: SparkSession, spark_cluster: SparkCluster, streamed: Streamed, tmp_path: Path
) -> None:
    """The report's executors need nothing of this project: the driver (``kpg``) does the
    Python work and writes the files on its own disk. Its CSV files said ``True``/``False``
    on a cluster (Python's words, where local mode's Spark writer says ``true``/``false``)."""
    out = tmp_path / "cluster-report"
    reported = run(
        [KPG, "audit", "report", "--master", spark_cluster.master_url]
        + ["--input", str(streamed.cluster_table), "--out", str(out)],
        kpg_env(spark_cluster, spark_cluster.bare_python),
        tmp_path,
    )

    assert reported.returncode == 0, reported.stderr[-5000:]
    local = build_report(spark, str(streamed.local_table), tmp_path / "local-report")
    on_cluster = json.loads((out / "summary.json").read_text())
    assert _comparable(on_cluster) == _comparable(local)
    local_files = sorted((tmp_path / "local-report").glob("*.csv"))
    assert [f.name for f in local_files] == sorted(f.name for f in out.glob("*.csv"))
    for local_file in local_files:
        assert _csv_rows(out / local_file.name) == _csv_rows(local_file), local_file.name


@pytest.fixture(scope="module")
def dependencies_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cluster Python given the gateway's third-party dependencies the replay's policies
    import (google-re2, PyYAML), as `pip install` would, but not this project."""
    env = tmp_path_factory.mktemp("deps-python") / "env"
    base_python = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base_python, "-m", "venv", "--without-pip", str(env)], check=True)
    (site,) = env.glob("lib/python*/site-packages")
    for module in (re2, yaml):
        (site / module.__name__).symlink_to(Path(module.__file__).parent)
    for extension in Path(yaml.__file__).parent.parent.glob("_yaml"):
        (site / extension.name).symlink_to(extension)
    return env / "bin" / "python"


def test_kpg_audit_replay_on_the_cluster_ships_the_policies_and_agrees_in_process(
    spark: SparkSession,
    spark_cluster: SparkCluster,
    streamed: Streamed,
    dependencies_python: Path,
    tmp_path: Path,
) -> None:
    """The replay's UDF runs the policies on the executors: their Python has the gateway's
    dependencies (the README says so), and the driver ships ``spark_audit`` and
    ``policies`` (it failed with ModuleNotFoundError: spark_audit on every task)."""
    candidate = tmp_path / "candidate.yaml"
    candidate.write_text(ACTIVE_RULES.format(rf=2, retention=7 * DAY_MS))
    out = tmp_path / "cluster-replay"
    replayed = run(
        [KPG, "audit", "replay", "--master", spark_cluster.master_url, "--config", str(candidate)]
        + ["--input", str(streamed.cluster_table), "--output", str(out)],
        kpg_env(spark_cluster, dependencies_python),
        tmp_path,
    )

    assert replayed.returncode == 0, replayed.stderr[-5000:]
    on_cluster = json.loads((out / "summary.json").read_text())
    local = build_replay(spark, str(streamed.local_table), str(candidate), tmp_path / "local")
    assert _comparable(on_cluster) == _comparable(local)
    assert on_cluster["newly_denied"] == 2 and on_cluster["newly_allowed"] == 1


def test_kpg_audit_replay_names_what_the_executors_lack_and_exits_2(
    spark_cluster: SparkCluster, streamed: Streamed, tmp_path: Path
) -> None:
    """Executors whose Python has none of the policies' dependencies: the replay stops
    before its first job, naming the module (it failed every task four times, then ended in
    a Py4J traceback, status 1)."""
    candidate = tmp_path / "candidate.yaml"
    candidate.write_text(ACTIVE_RULES.format(rf=2, retention=7 * DAY_MS))
    replayed = run(
        [KPG, "audit", "replay", "--master", spark_cluster.master_url, "--config", str(candidate)]
        + ["--input", str(streamed.cluster_table), "--output", str(tmp_path / "replay")],
        kpg_env(spark_cluster, spark_cluster.bare_python),
        tmp_path,
    )

    assert replayed.returncode == 2, replayed.stderr[-5000:]
    assert "the Spark executors cannot run the candidate's policies" in replayed.stderr
    # The first of the policies' imports the bare Python lacks (spark_audit.replay's own).
    assert "ModuleNotFoundError: No module named 'yaml'" in replayed.stderr
    assert "Traceback" not in replayed.stderr
    assert not (tmp_path / "replay" / "summary.json").exists()
