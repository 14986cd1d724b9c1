"""Run the mutants of bench/mutation/mutants.py against the tests that cover them.

    python bench/mutation/mutate.py [ID ...] [--tests TEST ...]

Each mutant is applied, alone, to a copy of the repository (in a temporary directory: the
working tree is never touched), its group's tests run with ``-x``, and one JSON line is
printed: ``killed`` (a test failed), ``survived`` (every test passed), or the pytest exit
code. With ``--tests``, those tests run instead of the group's: to check that a new test
kills a mutant (it must pass on the unmutated copy too, which is run first).

A mutant of a C extension (a ``.c`` file: protocol/_recscan.c, policies/_digits.c) is built
into the copy (setup.py's extensions, ``build_ext --inplace``, its build directories in the
scratch directory) before its tests run, and the copy's unmutated module is put back after.
A mutant that does not compile is ``invalid: build failed``, not killed (setup.py makes the
extensions optional, so a failed build is told by the module it did not write). Its tests
run under a 180 s timeout rather than 900 s: a scan that loops forever shows sooner.
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


def _pytest(copy: Path, tests: list[str], timeout: int = 900) -> tuple[int | str, str]:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
            cwd=copy,
            env={**os.environ, "PYTHONPATH": str(copy)},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return "timeout", ""
    lines = done.stdout.strip().splitlines()
    return done.returncode, lines[-1] if lines else ""


def _extension(source: Path) -> Path | None:
    """The built module of the C source in the copy (protocol/_recscan.c:
    protocol/_recscan.cpython-*.so), or None when there is none."""
    built = sorted(source.parent.glob(f"{source.stem}.*.so"))
    return built[0] if built else None


# setup.py's extensions built in place, without reading pyproject.toml (the venv's setuptools
# may be older than the one pip builds the package with): setup() is stood in for, to take
# setup.py's ext_modules, then build_ext runs on them alone.
_BUILD = """
import runpy, sys, setuptools
taken = {}
setuptools.setup = lambda **kwargs: taken.update(kwargs)
runpy.run_path("setup.py")
dist = setuptools.Distribution({"ext_modules": taken["ext_modules"]})
command = dist.get_command_obj("build_ext")
command.inplace, command.build_temp, command.build_lib = True, sys.argv[1], sys.argv[2]
dist.run_command("build_ext")
"""


def _build(copy: Path, source: Path, scratch: Path) -> tuple[bool, str]:
    """Build the mutated C source into the copy: (whether it built, the compiler's first
    error). The old module is removed first, so that it is not mistaken for the new one."""
    old = _extension(source)
    if old is not None:
        old.unlink()
    # Built afresh each time: setuptools builds into build_lib, then copies the module into
    # the copy, and would copy the last mutant's when this one fails to compile.
    build = scratch / "build"
    shutil.rmtree(build, ignore_errors=True)
    done = subprocess.run(
        [sys.executable, "-c", _BUILD, str(build / "temp"), str(build / "lib")],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=600,
    )
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    built = done.returncode == 0 and _extension(source) is not None
    return built, (errors[0] if errors else done.stderr.strip()[-300:])


def _keep(source: Path, scratch: Path) -> tuple[Path, Path]:
    """The built module of the C source and a copy of it in scratch."""
    module = _extension(source)
    assert module is not None, f"{source} is not built in the repository"
    kept = scratch / module.name
    shutil.copy2(module, kept)
    return module, kept


def _put_back(source: Path, kept: tuple[Path, Path]) -> None:
    """The unmutated module back in the copy, in place of the mutant's."""
    built = _extension(source)
    if built is not None:
        built.unlink()
    shutil.copy2(kept[1], kept[0])


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
            # A C mutant: the copy's unmutated module, kept to be put back after.
            kept = _keep(target, Path(scratch)) if target.suffix == ".c" else None
            target.write_text(source.replace(text, replacement))
            started = time.monotonic()
            try:
                if kept is not None:
                    built, why = _build(copy, target, Path(scratch))
                    if not built:
                        seconds = round(time.monotonic() - started)
                        invalid = {"id": mid, "result": "invalid: build failed", "s": seconds}
                        print(json.dumps({**invalid, "tail": why}), flush=True)
                        continue
                # A C mutant that makes a scan loop forever shows as a timeout, sooner.
                timeout = 900 if kept is None else 180
                code, tail = _pytest(copy, args.tests or groups[group], timeout)
            finally:
                target.write_text(source)
                if kept is not None:
                    _put_back(target, kept)
            result = {0: "survived", 1: "killed"}.get(code, f"pytest exit {code}")
            seconds = round(time.monotonic() - started)
            print(json.dumps({"id": mid, "result": result, "s": seconds, "tail": tail}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
