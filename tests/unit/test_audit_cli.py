"""``kpg audit``'s command line (no Spark: parsing only)."""

from __future__ import annotations

import argparse

import pytest

from spark_audit.cli import add_audit_commands

pytestmark = pytest.mark.unit


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kpg")
    add_audit_commands(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["audit", *argv])


@pytest.mark.parametrize("flag", ["--out", "--output"])
def test_report_and_replay_take_either_spelling_of_the_output_directory(flag: str) -> None:
    report = _parse("report", "--input", "table", flag, "rep")
    replay = _parse("replay", "--config", "new.yaml", "--input", "table", flag, "rp")

    assert report.out == "rep"
    assert replay.output == "rp"
