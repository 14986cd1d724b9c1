"""Verifying the audit chains: pure functions over (chain_id, seq, prev_hash, line hash).

Each gateway process writes its events as one chain (see ``SCHEMA.md``, "The chain"):
``seq`` 0, 1, 2, ... and ``prev_hash`` = SHA-256 of the previous line as written. Given the
links of any number of chains, :func:`verify_links` says for each chain whether it is
intact, and where it is not:

- ``gap``: seqs missing (lines removed, or never written by a failing sink);
- ``break``: ``prev_hash`` does not match the line before (a line was edited; the edited
  line is the one *before* the reported seq, or the reported one's ``prev_hash`` itself);
- ``duplicate``: the same line twice (a copy; harmless for counting once deduplicated on
  ``event_id``, but the table should not hold it);
- ``fork``: two different lines claim one seq (one of them was forged or edited).

No I/O in :func:`verify_links`: the Spark report builds :class:`Link` values from its table
(``line_hash`` is computed at ingest) and calls it; :func:`read_spool_links` and
:func:`verify_command` (``kpg audit verify --input DIR``) do the same for a spool directory.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from spark_audit.event import SPOOL_SEGMENT_GLOB, AuditEvent, line_hash

ProblemKind = Literal["gap", "break", "duplicate", "fork", "unreadable"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Link:
    """One event's place in its chain, and where it was read (``where``: ``file:line``)."""

    chain_id: str
    seq: int
    prev_hash: str | None
    line_hash: str
    gateway_instance: str = ""
    event_kind: str | None = None
    action: str = ""
    where: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainProblem:
    chain_id: str
    seq: int
    kind: ProblemKind
    detail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainStatus:
    """One chain as found: its extent, and what is wrong with it (nothing when intact)."""

    chain_id: str
    gateway_instance: str
    events: int
    first_seq: int
    last_seq: int
    ended_with_stop: bool
    """The last link is the gateway's ``stop`` lifecycle event: nothing was cut off its end.
    False for a gateway still running or one that did not stop cleanly."""
    problems: tuple[ChainProblem, ...]

    @property
    def intact(self) -> bool:
        return not self.problems


def verify_links(links: Iterable[Link]) -> tuple[ChainStatus, ...]:
    """Check every chain in ``links`` (any order, any number of chains), by chain id."""
    chains: dict[str, list[Link]] = defaultdict(list)
    for link in links:
        chains[link.chain_id].append(link)
    return tuple(_verify_chain(chain_id, chains[chain_id]) for chain_id in sorted(chains))


def _verify_chain(chain_id: str, links: list[Link]) -> ChainStatus:
    links.sort(key=lambda link: link.seq)
    problems: list[ChainProblem] = []

    def problem(seq: int, kind: ProblemKind, detail: str) -> None:
        problems.append(ChainProblem(chain_id=chain_id, seq=seq, kind=kind, detail=detail))

    first = links[0]
    if first.seq != 0:
        problem(0, "gap", f"seq 0..{first.seq - 1} missing: the chain's start is gone")
    elif first.prev_hash is not None:
        problem(0, "break", f"the first event has a prev_hash ({_at(first)})")
    previous: Link | None = None
    for link in links:
        if previous is None:
            previous = link
            continue
        if link.seq == previous.seq:
            if link.line_hash == previous.line_hash:
                problem(link.seq, "duplicate", f"the same line twice ({_at(previous, link)})")
            else:
                problem(link.seq, "fork", f"two different lines at one seq ({_at(previous, link)})")
            continue
        if link.seq > previous.seq + 1:
            missing = (
                f"{previous.seq + 1}"
                if link.seq == previous.seq + 2
                else (f"{previous.seq + 1}..{link.seq - 1}")
            )
            problem(previous.seq + 1, "gap", f"seq {missing} missing (before {_at(link)})")
        elif link.prev_hash != previous.line_hash:
            problem(
                link.seq,
                "break",
                f"prev_hash does not match the line before: seq {previous.seq} or its "
                f"prev_hash was altered ({_at(previous, link)})",
            )
        previous = link
    last = links[-1]
    return ChainStatus(
        chain_id=chain_id,
        gateway_instance=first.gateway_instance,
        events=len(links),
        first_seq=first.seq,
        last_seq=last.seq,
        ended_with_stop=last.event_kind == "lifecycle" and last.action == "stop",
        problems=tuple(problems),
    )


def _at(*links: Link) -> str:
    return ", ".join(link.where or f"seq {link.seq}" for link in links)


# --------------------------------------------------------------------------------------------
# Spool directories.


@dataclass(frozen=True, slots=True, kw_only=True)
class SpoolLinks:
    """What a spool directory holds: chained events, unchained (v1) ones, unreadable lines."""

    links: tuple[Link, ...]
    unchained: int
    unreadable: tuple[str, ...]
    """``file:line: why`` of lines that are not an audit event of any schema version
    (:meth:`AuditEvent.from_json`), or an event of version 2 or later without a chain,
    which no gateway writes: left out of the chains, it was an event inserted unseen."""


def spool_segments(directory: Path) -> list[Path]:
    """Completed segments in ``directory`` and its direct subdirectories (one per worker)."""
    found = sorted(directory.glob(SPOOL_SEGMENT_GLOB))
    for sub in sorted(p for p in directory.iterdir() if p.is_dir()):
        found.extend(sorted(sub.glob(SPOOL_SEGMENT_GLOB)))
    return found


def read_spool_links(directory: Path) -> SpoolLinks:
    """The links of every completed segment under ``directory`` (see :func:`spool_segments`).

    :raises FileNotFoundError: if ``directory`` does not exist.
    """
    if not directory.is_dir():
        raise FileNotFoundError(f"no spool directory at {directory}")
    links: list[Link] = []
    unchained = 0
    unreadable: list[str] = []
    for path in spool_segments(directory):
        for number, line in _lines(path):
            where = f"{path.relative_to(directory)}:{number}"
            link = _link(line, where)
            if isinstance(link, _Unreadable):
                unreadable.append(f"{where}: {link.why}")
            elif link == "unchained":
                unchained += 1
            else:
                links.append(link)
    return SpoolLinks(links=tuple(links), unchained=unchained, unreadable=tuple(unreadable))


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    data = path.read_bytes()
    for number, line in enumerate(data.split(b"\n"), start=1):
        if line:
            yield number, line


@dataclass(frozen=True, slots=True)
class _Unreadable:
    why: str


def _link(line: bytes, where: str) -> Link | Literal["unchained"] | _Unreadable:
    try:
        data = json.loads(line)
    except ValueError:
        return _Unreadable("not JSON")
    if not isinstance(data, dict):
        return _Unreadable("not a JSON object")
    try:
        event = AuditEvent.from_mapping(data)
    except (ValueError, TypeError) as exc:
        # what the report cannot read it leaves out: say so here
        return _Unreadable(f"not an audit event: {str(exc)[:200]}")
    chain_id, seq, prev_hash = event.chain_id, event.seq, event.prev_hash
    if chain_id is None:
        if event.schema_version == 1:
            return "unchained"
        return _Unreadable(
            f"a schema version {event.schema_version} event without a chain: the gateway "
            "chains every event of version 2 or later"
        )
    if seq is None:
        return _Unreadable("chain_id without seq")
    return Link(
        chain_id=chain_id,
        seq=seq,
        prev_hash=prev_hash,
        line_hash=line_hash(line),
        gateway_instance=str(data.get("gateway_instance", "")),
        event_kind=data.get("event_kind"),
        action=str(data.get("action", "")),
        where=where,
    )


# --------------------------------------------------------------------------------------------
# kpg audit verify


def add_verify_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Add ``verify`` to the ``kpg audit`` subcommands."""
    verify = commands.add_parser(
        "verify",
        help="verify the tamper-evident chains of a spool directory",
        description="Check the chains the gateway writes (seq without gaps, each prev_hash "
        "the SHA-256 of the line before) in a spool directory and its worker "
        "subdirectories. Exit status 0: every chain intact; 1: a gap, break, duplicate, "
        "fork or unreadable line (each listed); 2: no such directory.",
    )
    verify.add_argument("--input", required=True, type=Path, help="a spool directory")
    verify.set_defaults(func=verify_command)
    return verify


def verify_command(args: argparse.Namespace) -> int:
    """``kpg audit verify --input DIR``: one line per chain, then one per problem."""
    try:
        found = read_spool_links(args.input)
    except FileNotFoundError as exc:
        print(f"kpg audit verify: {exc}", file=sys.stderr)
        return 2
    statuses = verify_links(found.links)
    print_statuses(statuses, found)
    broken = any(not status.intact for status in statuses) or bool(found.unreadable)
    return 1 if broken else 0


def print_statuses(statuses: Sequence[ChainStatus], found: SpoolLinks) -> None:
    for status in statuses:
        state = "intact" if status.intact else f"BROKEN ({len(status.problems)} problems)"
        end = "stopped" if status.ended_with_stop else "no stop event"
        print(
            f"chain {status.chain_id} ({status.gateway_instance}): {status.events:,} events, "
            f"seq {status.first_seq}..{status.last_seq}, {end}: {state}"
        )
        for problem in status.problems:
            print(f"  {problem.kind} at seq {problem.seq}: {problem.detail}")
    for where in found.unreadable:
        print(f"unreadable line at {where}")
    if found.unchained:
        print(f"{found.unchained:,} events without a chain (schema version 1)")
    if not statuses and not found.unchained:
        print("no events")


def main(argv: list[str] | None = None) -> int:
    """``python -m spark_audit.chain --input DIR``, the same as ``kpg audit verify``."""
    parser = argparse.ArgumentParser(prog="kpg-audit-verify")
    commands = parser.add_subparsers(dest="command", required=True)
    add_verify_command(commands)
    args = parser.parse_args(["verify", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
