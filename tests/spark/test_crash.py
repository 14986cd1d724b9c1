"""``kpg audit stream`` killed with SIGKILL at many points of its runs, and restarted: the
table, read the way every reader reads it (Spark, at the table's root), holds each event
exactly once after every kill and at the end.

The real CLI runs as a subprocess in a process group of its own, so a kill takes its JVM at
the same instant (killing only the Python driver would leave the JVM writing for a moment).
Kills are aimed at the windows that matter by watching the table and checkpoint directories:

- ``data``: the first Parquet file of a run appears in a date partition (tasks are writing a
  batch's files; the batch is not in the table's ``_spark_metadata`` log yet): its files are
  left behind. (A job committing through ``_temporary/`` moves files there at its commit.)
- ``sink-log``: a batch's ``_spark_metadata/<id>`` appears before its checkpoint commit
  ``commits/<id>``: the batch is in the table, and Spark will run it again on restart;
- ``offsets``: a batch is planned (``offsets/<id>``), nothing of it written;
- ``delay``: after a pseudo-random delay, wherever the run is.

New segments (with copies of earlier events under new names, which the dedupe must drop)
are added before every run, so each run has work. The test checks that both commit windows
were hit at least once (files of a killed batch on disk that the table does not list, and a
batch in the sink log with no checkpoint commit); each is tried up to several times.
Takes about 2 minutes on the shared 2-core machine at a load average of 2 to 3, about 7 at
a load of 10 (each run starts a JVM).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from bench.audit_generate import generate
from spark_audit.transforms import table_schema

pytestmark = pytest.mark.e2e

_POLL_S = 0.002
_RUN_DEADLINE_S = 300.0
_EVENTS_PER_ROUND = 600
_MAX_ROUNDS = 12


@dataclass
class _Dirs:
    spool: Path
    table: Path
    checkpoint: Path
    logs: Path

    @classmethod
    def under(cls, root: Path) -> _Dirs:
        dirs = cls(root / "spool", root / "table", root / "checkpoint", root / "logs")
        dirs.spool.mkdir()
        dirs.logs.mkdir()
        return dirs


def _batch_ids(directory: Path) -> set[int]:
    if not directory.is_dir():
        return set()
    return {int(p.name) for p in directory.iterdir() if p.name.isdigit()}


def _data_files(table: Path) -> set[Path]:
    """Parquet files in the table's date partitions (not under ``_temporary``)."""
    return set(table.glob("date=*/*.parquet"))


Condition = Callable[[], bool]


def _condition(kind: str, dirs: _Dirs) -> Condition | None:
    """When to kill a run, from the state of the directories at its start."""
    if kind == "data":
        before = _data_files(dirs.table)
        return lambda: bool(_data_files(dirs.table) - before)
    if kind == "sink-log":
        before = _batch_ids(dirs.table / "_spark_metadata")

        def sink_ahead() -> bool:
            new = _batch_ids(dirs.table / "_spark_metadata") - before
            return bool(new - _batch_ids(dirs.checkpoint / "commits"))

        return sink_ahead
    if kind == "offsets":
        before = _batch_ids(dirs.checkpoint / "offsets")
        return lambda: bool(_batch_ids(dirs.checkpoint / "offsets") - before)
    return None


def _stream_command(dirs: _Dirs) -> list[str]:
    kpg = Path(sys.executable).with_name("kpg")
    program = [str(kpg)] if kpg.exists() else [sys.executable, "-m", "gateway.cli"]
    return [
        *program,
        "audit",
        "stream",
        "--spool",
        str(dirs.spool),
        "--table",
        str(dirs.table),
        "--checkpoint",
        str(dirs.checkpoint),
        "--available-now",
        "--max-files-per-trigger",
        "3",
        "--state-partitions",
        "2",
        "--master",
        "local[2]",
    ]


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the run and everything it started, and wait until all of it is gone."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"process group {process.pid} still alive a minute after SIGKILL")


def _run(dirs: _Dirs, name: str, *, kill_when: Condition | None, delay_s: float | None) -> bool:
    """One run of ``kpg audit stream``; True if it was killed, False if it finished."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    with (dirs.logs / f"{name}.log").open("wb") as log:
        process = subprocess.Popen(
            _stream_command(dirs), stdout=log, stderr=log, env=env, start_new_session=True
        )
        started = time.monotonic()
        try:
            while process.poll() is None:
                elapsed = time.monotonic() - started
                assert elapsed < _RUN_DEADLINE_S, f"run {name} did not finish; see its log"
                if (kill_when is not None and kill_when()) or (
                    delay_s is not None and elapsed >= delay_s
                ):
                    _kill_group(process)
                    return True
                time.sleep(_POLL_S)
        finally:
            if process.poll() is None:
                _kill_group(process)
    log_text = (dirs.logs / f"{name}.log").read_text(errors="replace")
    assert process.returncode == 0, f"run {name} failed:\n{log_text[-3000:]}"
    return False


@dataclass
class _Expected:
    ids: set[str] = field(default_factory=set)
    round: int = 0

    def add_round(self, dirs: _Dirs, rng: random.Random) -> None:
        """New events in new segments, and one earlier segment copied under a new name."""
        self.round += 1
        generate(
            dirs.spool,
            _EVENTS_PER_ROUND,
            workers=2,
            events_per_segment=100,
            seed=rng.randrange(2**31),
            days=0.5 + self.round,
        )
        segments = sorted(dirs.spool.glob("worker-*/events-*.jsonl"))
        copied = rng.choice(segments)
        shutil.copy(copied, dirs.spool / f"events-20991231T000000000Z-{self.round:08d}.jsonl")
        for path in segments:
            self.ids.update(_line_ids(path))


def _line_ids(path: Path) -> set[str]:
    import json

    return {json.loads(line)["event_id"] for line in path.read_text().splitlines()}


@dataclass
class _Table:
    rows: int
    ids: set[str]
    listed: set[str]


def _read_table(spark: SparkSession, table: Path) -> _Table:
    if not table.is_dir():
        return _Table(0, set(), set())
    frame = spark.read.schema(table_schema()).parquet(str(table))
    ids = [row.event_id for row in frame.select("event_id").collect()]
    listed = {Path(f.removeprefix("file:").removeprefix("//")).name for f in frame.inputFiles()}
    return _Table(len(ids), set(ids), listed)


def test_sigkill_at_any_point_of_the_stream_leaves_each_event_exactly_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    dirs = _Dirs.under(tmp_path)
    rng = random.Random(14)
    expected = _Expected()
    # Each kind until hit (sink-log and data are the commit windows), then delays between.
    plan = ["data", "sink-log", "offsets", "delay", "sink-log", "data"]
    hits = {"orphans": 0, "sink_ahead": 0}
    kills = 0
    for number in range(_MAX_ROUNDS):
        kind = plan[number] if number < len(plan) else rng.choice(("data", "sink-log", "delay"))
        if hits["orphans"] and hits["sink_ahead"] and number >= len(plan):
            break
        expected.add_round(dirs, rng)
        killed = _run(
            dirs,
            f"{number:02d}-{kind}",
            kill_when=_condition(kind, dirs),
            delay_s=rng.uniform(4.0, 14.0) if kind == "delay" else None,
        )
        table = _read_table(spark, dirs.table)
        assert table.rows == len(table.ids), f"duplicates after run {number} ({kind})"
        assert table.ids <= expected.ids
        if not killed:
            assert table.ids == expected.ids, f"run {number} finished without every event"
            continue
        kills += 1
        on_disk = {p.name for p in _data_files(dirs.table)}
        if on_disk - table.listed:
            hits["orphans"] += 1
        sink = _batch_ids(dirs.table / "_spark_metadata")
        if max(sink, default=-1) > max(_batch_ids(dirs.checkpoint / "commits"), default=-1):
            hits["sink_ahead"] += 1

    assert not _run(dirs, "final", kill_when=None, delay_s=None)
    table = _read_table(spark, dirs.table)
    assert table.rows == len(expected.ids)
    assert table.ids == expected.ids
    assert kills >= 6
    assert hits["orphans"] >= 1, "no kill left a batch's files uncommitted"
    assert hits["sink_ahead"] >= 1, "no kill fell between the sink's log and the commit"
