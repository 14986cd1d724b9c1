"""Times ``kpg audit stream`` and ``kpg audit report`` on synthetic events (issue 14).

    python bench/audit_bench.py [--events 1000000] [--incremental 1000] [--work /tmp/audit-bench]

Steps, each the real CLI in a subprocess, timed from start to exit (JVM start included):

1. ``bench/audit_generate.py`` writes ``--events`` events into a fresh spool (not timed);
2. ``kpg audit stream --available-now`` into a new table and checkpoint;
3. ``kpg audit report`` on that table;
4. ``--incremental`` more events are generated, and the stream runs again (the incremental
   run: same table and checkpoint).

Writes ``bench/results/audit-<UTC time>.json`` with the timings, the machine's load average
before and after (the machine is shared), the commit and the settings. ``--kpg`` runs another
program as ``kpg`` (e.g. an older checkout's, to time a baseline on the same events), with
``--pythonpath`` for it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.audit_generate import generate  # noqa: E402
from bench.harness import write_result  # noqa: E402


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _commit(root: Path) -> str:
    result = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout.strip() or "unknown"


def _timed(name: str, command: list[str], env: dict[str, str], log_dir: Path) -> float:
    print(f"{name}: {' '.join(command)}", flush=True)
    started = time.monotonic()
    with (log_dir / f"{name}.log").open("wb") as log:
        result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, check=False)
    seconds = time.monotonic() - started
    if result.returncode != 0:
        tail = (log_dir / f"{name}.log").read_text(errors="replace")[-3000:]
        raise SystemExit(f"{name} failed ({result.returncode}):\n{tail}")
    print(f"{name}: {seconds:.1f}s (load {_load()})", flush=True)
    return seconds


def run(args: argparse.Namespace) -> dict[str, Any]:
    work: Path = args.work
    if work.exists():
        shutil.rmtree(work)
    spool, table, checkpoint, report, logs = (
        work / name for name in ("spool", "table", "checkpoint", "report", "logs")
    )
    logs.mkdir(parents=True)
    env = dict(os.environ)
    if args.pythonpath:
        env["PYTHONPATH"] = args.pythonpath
    kpg = args.kpg.split()
    master = ["--master", args.master] if args.master else []
    stream = [
        *kpg,
        "audit",
        "stream",
        "--spool",
        str(spool),
        "--table",
        str(table),
        "--checkpoint",
        str(checkpoint),
        "--available-now",
        *master,
    ]
    if args.max_files_per_trigger:
        stream += ["--max-files-per-trigger", str(args.max_files_per_trigger)]

    load_before = _load()
    started = time.monotonic()
    generate(spool, args.events, workers=args.workers, seed=1)
    generated_s = time.monotonic() - started
    segments = len(list(spool.rglob("events-*.jsonl")))
    print(f"generated {args.events:,} events in {segments} segments in {generated_s:.1f}s")

    timings = {"stream_s": _timed("stream", stream, env, logs)}
    report_cmd = [*kpg, "audit", "report", "--input", str(table), "--out", str(report), *master]
    timings["report_s"] = _timed("report", report_cmd, env, logs)
    generate(spool, args.incremental, workers=args.workers, seed=2, days=0.01)
    timings["incremental_stream_s"] = _timed("incremental", stream, env, logs)
    files = len([p for p in table.rglob("*.parquet") if "_spark_metadata" not in p.parts])
    return {
        "benchmark": "audit",
        "label": args.label,
        "time": datetime.now(tz=UTC).isoformat(timespec="seconds"),
        "commit": _commit(Path(args.pythonpath) if args.pythonpath else HERE.parent),
        "kpg": args.kpg,
        "pythonpath": args.pythonpath,
        "events": args.events,
        "incremental_events": args.incremental,
        "workers": args.workers,
        "segments": segments,
        "master": args.master or "local[*]",
        "max_files_per_trigger": args.max_files_per_trigger,
        "cpus": os.cpu_count(),
        "load_before": load_before,
        "load_after": _load(),
        "table_files": files,
        **{key: round(value, 1) for key, value in timings.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=" ".join((__doc__ or "").split("\n\n")[0].split()))
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--incremental", type=int, default=1_000)
    parser.add_argument("--workers", type=int, default=2, help="0: one flat spool directory")
    parser.add_argument("--work", type=Path, default=Path("/tmp/audit-bench"))
    parser.add_argument("--kpg", default=str(Path(sys.executable).with_name("kpg")))
    parser.add_argument("--pythonpath", help="PYTHONPATH for the kpg runs")
    parser.add_argument("--master", help="Spark master for the runs (default: kpg's, local[*])")
    parser.add_argument("--max-files-per-trigger", type=int)
    parser.add_argument("--label", default="current")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    result = run(args)
    path = write_result(args.out, f"audit-{args.label}", result)
    print(json.dumps(result, indent=2))
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
