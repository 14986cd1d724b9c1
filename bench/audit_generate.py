"""Synthetic audit events in a spool directory, for the audit job's benchmark and tests.

    python bench/audit_generate.py --spool /tmp/spool --events 1000000 [--workers 2]

Writes completed segments (``<spool>/worker-<i>/events-<time>Z-<seq>.jsonl``) the way the
gateway's spool sink names them, events of the current schema (version 3): one chain per
worker and run (``chain_id``, ``seq``, ``prev_hash`` = SHA-256 of the line before), a
lifecycle ``start`` first, request ids shared by the events of one request, config changes
on alter-config decisions, topic specs on creations. The mix, per 1,000 rows: about 600
allowed decisions, 250 Produce summaries (each 1 to 40 requests), 60 denied (a third of
them Produce, naming ``<topic>-<partition>``), 60 would-deny, 20 validate_only, a few
lifecycle events; some clients unauthenticated, some ``kpg-dry-run``. Times spread evenly
over ``--days`` from ``--start``. Run it again on the same spool to add events: each run is
a new chain per worker (a gateway restart) with segment numbers after the ones there.

Deterministic for a given ``--seed``, except event and request ids (random UUIDs) unless
``--seed`` is given, in which case those are derived from it too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

SEGMENT_RE = re.compile(r"events-\d{8}T\d{9}Z-(\d{8})\.jsonl")
POLICY_VERSION = "sha256:5a1e0d3c9b7f2a64"

_RULES = ("min-replication-factor", "topic-naming", "max-partitions", "retention-bounds")
_DRY_RULES = ("topic-naming-v2", "no-compression-none")
_APIS = (
    ("CreateTopics", 7, "topic", "create"),
    ("IncrementalAlterConfigs", 1, "topic", "alter_config"),
    ("AlterConfigs", 2, "broker", "alter_config"),
    ("DeleteTopics", 6, "topic", "delete"),
    ("CreatePartitions", 3, "topic", "create_partitions"),
)


@dataclass
class _World:
    rng: random.Random
    principals: list[str | None]
    clients: list[str]
    topics: list[str]
    seeded: bool

    def uuid(self) -> uuid.UUID:
        if self.seeded:
            return uuid.UUID(int=self.rng.getrandbits(128), version=4)
        return uuid.uuid4()


def _world(seed: int | None) -> _World:
    rng = random.Random(seed)
    principals: list[str | None] = [f"User:svc-{i:03d}" for i in range(300)]
    principals += [
        f"User:CN=ingest-{i},OU=data-platform,O=Example Corporation,L=Amsterdam,C=NL"
        for i in range(20)
    ]
    principals.append(None)  # unauthenticated clients
    clients = [f"app-{i:03d}" for i in range(120)] + ["kpg-dry-run", "terraform", "cli"]
    topics = [f"orders.{region}.v{i}" for region in ("eu", "us", "ap") for i in range(70)]
    return _World(rng, principals, clients, topics, seed is not None)


@dataclass
class _Chain:
    """One worker's chain: where its lines go and the link state."""

    directory: Path
    seq_next: int
    chain_id: str
    instance: str
    events_per_segment: int
    seq: int = 0
    prev_hash: str | None = None
    pending: list[bytes] = field(default_factory=list)
    segments: int = 0

    def add(self, event: dict[str, Any], when: datetime) -> None:
        event["chain_id"] = self.chain_id
        event["seq"] = self.seq
        event["prev_hash"] = self.prev_hash
        line = json.dumps(event, separators=(",", ":")).encode("utf-8")
        self.prev_hash = hashlib.sha256(line).hexdigest()
        self.seq += 1
        self.pending.append(line)
        if len(self.pending) >= self.events_per_segment:
            self.flush(when)

    def flush(self, when: datetime) -> None:
        if not self.pending:
            return
        stamp = when.strftime("%Y%m%dT%H%M%S") + f"{when.microsecond // 1000:03d}Z"
        name = f"events-{stamp}-{self.seq_next:08d}.jsonl"
        self.seq_next += 1
        hidden = self.directory / f".{name}.open"
        hidden.write_bytes(b"\n".join(self.pending) + b"\n")
        hidden.rename(self.directory / name)  # completed segments appear whole
        self.pending.clear()
        self.segments += 1


def _next_segment_seq(directory: Path) -> int:
    seqs = [int(m.group(1)) for p in directory.iterdir() if (m := SEGMENT_RE.fullmatch(p.name))]
    return max(seqs, default=-1) + 1


def _time_text(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def _base(world: _World, when: datetime, chain: _Chain) -> dict[str, Any]:
    rng = world.rng
    principal = rng.choice(world.principals)
    return {
        "schema_version": 3,
        "event_id": str(world.uuid()),
        "time": _time_text(when),
        "gateway_instance": chain.instance,
        "client_address": f"10.0.{rng.randrange(256)}.{rng.randrange(256)}:{rng.randrange(65536)}",
        "principal": principal,
        "client_id": rng.choice(world.clients),
        "api": "CreateTopics",
        "api_version": 7,
        "resource_type": "topic",
        "resource_name": rng.choice(world.topics),
        "action": "create",
        "policy": None,
        "mode": "enforce",
        "verdict": "allowed",
        "error_code": None,
        "message": None,
        "validate_only": False,
        "records_examined": 0,
        "bytes_examined": 0,
        "interval_start": None,
        "interval_end": None,
        "event_count": 1,
        "request_id": world.uuid().hex,
        "policy_version": POLICY_VERSION,
        "event_kind": "decision",
        "chain_id": None,
        "seq": None,
        "prev_hash": None,
        "config_changes": None,
        "topic_spec": None,
        "request_events": 1,
    }


def _describe(event: dict[str, Any], world: _World) -> None:
    """Set api, resource and the v2 details of a decision at random."""
    api, version, resource_type, action = world.rng.choice(_APIS)
    event.update(api=api, api_version=version, resource_type=resource_type, action=action)
    if resource_type == "broker":
        event["resource_name"] = str(world.rng.randrange(3))
    if action == "create":
        event["topic_spec"] = {
            "partitions": world.rng.choice((1, 3, 6, 12, 48)),
            "replication_factor": world.rng.choice((1, 2, 3)),
            "configs": {"retention.ms": str(world.rng.choice((3_600_000, 604_800_000)))},
        }
    elif action == "alter_config":
        event["config_changes"] = [
            {
                "name": "retention.ms",
                "before": "604800000",
                "after": str(world.rng.choice((3_600_000, 86_400_000, -1))),
                "sensitive": False,
            }
        ]


def _decisions(world: _World, when: datetime, chain: _Chain) -> list[dict[str, Any]]:
    """The events of one request (1 to 3 share its request id when rules are broken)."""
    rng = world.rng
    roll = rng.random()
    event = _base(world, when, chain)
    if roll < 0.25:  # an allowed Produce summary
        count = rng.randint(1, 40)
        event.update(
            api="Produce",
            api_version=9,
            action="produce",
            client_address=None,
            records_examined=count * 50,
            bytes_examined=count * 6_400,
            interval_start=_time_text(when - timedelta(seconds=60)),
            interval_end=event["time"],
            event_count=count,
            event_kind="summary",
            request_id=None,
            request_events=None,
        )
        return [event]
    _describe(event, world)
    if roll < 0.85:
        return [event]
    if roll < 0.87:
        event.update(validate_only=True, client_id=rng.choice(("kpg-dry-run", "terraform")))
        if rng.random() < 0.5:
            return [event]
    dry_run = 0.91 <= roll < 0.97
    produce = roll >= 0.97
    if produce:
        topic = rng.choice(world.topics)
        event.update(
            api="Produce",
            api_version=9,
            action="produce",
            resource_type="topic",
            resource_name=f"{topic}-{rng.randrange(60)}",
            records_examined=50,
            bytes_examined=6_400,
            topic_spec=None,
            config_changes=None,
        )
    rules = rng.sample(_DRY_RULES if dry_run else _RULES, rng.choice((1, 1, 1, 2)))
    events = []
    for rule in rules:
        copy = dict(event, event_id=str(world.uuid()), policy=rule, request_events=len(rules))
        if dry_run:
            copy.update(mode="dry-run", verdict="would_deny", message=f"{rule} would deny")
        else:
            copy.update(
                verdict="denied", error_code=87 if produce else 44, message=f"{rule} denied"
            )
        events.append(copy)
    return events


def _lifecycle(world: _World, when: datetime, chain: _Chain) -> dict[str, Any]:
    event = _base(world, when, chain)
    event.update(
        client_address=None,
        principal=None,
        client_id=None,
        api="Gateway",
        api_version=0,
        resource_type="gateway",
        resource_name=chain.instance,
        action="start",
        event_kind="lifecycle",
        request_id=None,
        request_events=None,
        message=f"gateway {chain.instance} started with policy version {POLICY_VERSION}",
    )
    return event


def _moments(start: datetime, days: float, count: int) -> Iterator[datetime]:
    step = timedelta(days=days) / max(1, count)
    for i in range(count):
        yield start + step * i


def generate(
    spool: Path,
    events: int,
    *,
    workers: int = 2,
    events_per_segment: int = 20_000,
    start: datetime = datetime(2026, 11, 1, tzinfo=UTC),
    days: float = 7.0,
    seed: int | None = None,
) -> int:
    """Write about ``events`` events (a request's events are never split) into ``spool``.

    ``workers`` 0 writes one chain into ``spool`` itself (the layout of a single gateway).

    :returns: the number of events written.
    """
    world = _world(seed)
    chains = []
    for index in range(max(1, workers)):
        directory = spool / f"worker-{index}" if workers else spool
        directory.mkdir(parents=True, exist_ok=True)
        chains.append(
            _Chain(
                directory=directory,
                seq_next=_next_segment_seq(directory),
                chain_id=str(world.uuid()),
                instance=f"kpg-bench-{index}",
                events_per_segment=events_per_segment,
            )
        )
    written = 0
    for chain in chains:
        chain.add(_lifecycle(world, start, chain), start)
        written += 1
    last = start
    for index, when in enumerate(_moments(start, days, max(0, events - written))):
        if written >= events:
            break
        chain = chains[index % len(chains)]
        for event in _decisions(world, when, chain)[: events - written]:
            chain.add(event, when)
            written += 1
        last = when
    for chain in chains:
        chain.flush(last)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=" ".join((__doc__ or "").split("\n\n")[0].split()))
    parser.add_argument("--spool", type=Path, required=True, help="spool directory to write")
    parser.add_argument("--events", type=int, required=True, help="how many events")
    parser.add_argument(
        "--workers", type=int, default=2, help="worker-<i> directories (0: the spool itself)"
    )
    parser.add_argument("--events-per-segment", type=int, default=20_000)
    parser.add_argument("--start", default="2026-11-01T00:00:00", help="first event (UTC)")
    parser.add_argument("--days", type=float, default=7.0, help="days the events span")
    parser.add_argument("--seed", type=int, help="random seed (ids too, when given)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    count = generate(
        args.spool,
        args.events,
        workers=args.workers,
        events_per_segment=args.events_per_segment,
        start=datetime.fromisoformat(args.start).replace(tzinfo=UTC),
        days=args.days,
        seed=args.seed,
    )
    print(f"{count:,} events in {args.spool} in {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
