"""Run the mutants of bench/mutation/mutants.py against the tests that cover them.

    python bench/mutation/mutate.py [ID ...] [--tests TEST ...]

Each mutant is applied, alone, to a copy of the repository (in a temporary directory: the
working tree is never touched), its group's tests run with ``-x``, and one JSON line is
printed: ``killed`` (a test failed), ``survived`` (every test passed), or the pytest exit
code. With ``--tests``, those tests run instead of the group's: to check that a new test
kills a mutant (it must pass on the unmutated copy too, which is run first).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _mutants() -> tuple[dict[str, list[str]], list[tuple[str, str, str, str, str]]]:
    spec = importlib.util.spec_from_file_location("mutants", Path(__file__).with_name("mutants.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.GROUPS, module.MUTANTS


def _pytest(copy: Path, tests: list[str]) -> tuple[int | str, str]:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
            cwd=copy,
            env={**os.environ, "PYTHONPATH": str(copy)},
            capture_output=True,
            text=True,
            timeout=900,
        )
    except subprocess.TimeoutExpired:
        return "timeout", ""
    lines = done.stdout.strip().splitlines()
    return done.returncode, lines[-1] if lines else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ids", nargs="*", help="mutant ids (default: all)")
    parser.add_argument("--tests", nargs="+", help="run these tests instead of the group's")
    args = parser.parse_args()
    groups, mutants = _mutants()
    unknown = sorted(set(args.ids) - {m[0] for m in mutants})
    if unknown:
        parser.error(f"no such mutant: {', '.join(unknown)}")  # a typo ran nothing, exit 0
    chosen = [m for m in mutants if not args.ids or m[0] in args.ids]
    with tempfile.TemporaryDirectory(prefix="kpg-mutants-") as scratch:
        copy = Path(scratch) / "repo"
        shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__"))
        if args.tests:
            code, tail = _pytest(copy, args.tests)
            print(json.dumps({"id": "unmutated", "code": code, "tail": tail}), flush=True)
        for mid, path, text, replacement, group in chosen:
            target = copy / path
            source = target.read_text()
            if source.count(text) != 1:
                print(json.dumps({"id": mid, "result": "stale: text not found once"}), flush=True)
                continue
            target.write_text(source.replace(text, replacement))
            started = time.monotonic()
            try:
                code, tail = _pytest(copy, args.tests or groups[group])
            finally:
                target.write_text(source)
            result = {0: "survived", 1: "killed"}.get(code, f"pytest exit {code}")
            seconds = round(time.monotonic() - started)
            print(json.dumps({"id": mid, "result": result, "s": seconds, "tail": tail}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
