"""The audit chain: the emitter links every event it writes; the verifier finds edits,
removals and copies in the spool files. Real files in a temporary directory, no broker."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import pytest

from gateway.audit import AuditEmitter, ProduceSummarizer, SpoolSink
from gateway.cli import main as kpg_main
from spark_audit.chain import (
    ChainStatus,
    Link,
    read_spool_links,
    verify_command,
    verify_links,
)
from spark_audit.event import AuditEvent, line_hash
from tests.support import audit_event

pytestmark = pytest.mark.unit

VERSION = "sha256:00000000000000aa"


def write_chain(directory: Path, decisions: int, *, also: Path | None = None) -> str:
    """A gateway's life in ``directory``: start, ``decisions`` denials, stop. Small segments,
    so the chain spans files. Returns the chain id."""
    sinks = [SpoolSink(directory, segment_max_bytes=4000, fsync="segment")]
    if also is not None:
        sinks.append(SpoolSink(also, segment_max_bytes=4000, fsync="segment"))
    emitter = AuditEmitter(sinks, gateway_instance="kpg-1", batch_max_events=3)

    async def scenario() -> None:
        await emitter.start()
        emitter.lifecycle("start", policy_version=VERSION, message="started")
        for number in range(decisions):
            await emitter.emit(audit_event(resource_name=f"topic-{number}"))
        emitter.lifecycle("stop", policy_version=VERSION, message="stopped")
        await emitter.close()

    asyncio.run(scenario())
    return emitter.chain_id


def segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("events-*.jsonl"))


def all_lines(directory: Path) -> list[bytes]:
    return [line for path in segments(directory) for line in path.read_bytes().splitlines()]


def rewrite_line(directory: Path, seq: int, change: object) -> None:
    """Apply ``change`` (bytes -> bytes, or None to delete) to the line with ``seq``."""
    for path in segments(directory):
        kept = []
        for line in path.read_bytes().splitlines(keepends=True):
            if json.loads(line)["seq"] == seq:
                new = change(line)  # type: ignore[operator]
                if new is not None:
                    kept.append(new)
            else:
                kept.append(line)
        path.write_bytes(b"".join(kept))


def only_status(directory: Path) -> ChainStatus:
    (status,) = verify_links(read_spool_links(directory).links)
    return status


def test_the_emitter_writes_one_linked_chain_across_segments(tmp_path: Path) -> None:
    chain_id = write_chain(tmp_path, 20)

    lines = all_lines(tmp_path)
    events = [AuditEvent.from_json(line) for line in lines]
    status = only_status(tmp_path)

    assert len(segments(tmp_path)) > 1
    assert [e.seq for e in events] == list(range(22))
    assert {e.chain_id for e in events} == {chain_id}
    assert events[0].prev_hash is None
    for before, after in zip(lines, events[1:], strict=False):
        assert after.prev_hash == line_hash(before)
    assert status.intact and status.ended_with_stop
    assert (status.events, status.first_seq, status.last_seq) == (22, 0, 21)


def test_a_gateway_stopped_after_produce_traffic_ends_its_chain_with_the_stop(
    tmp_path: Path,
) -> None:
    """The last interval's Produce summaries are written before the stop, not after it: a
    gateway stopped cleanly after serving Produce (make run, then Ctrl-C) was reported by
    kpg audit verify and the report's chains as "no stop event", which reads as a gateway
    killed, or a chain whose tail was cut off."""
    summarizer = ProduceSummarizer(
        gateway_instance="kpg-1", mode="enforce", interval_ms=60_000, start_ms=0
    )
    emitter = AuditEmitter(
        [SpoolSink(tmp_path, fsync="segment")], gateway_instance="kpg-1", summarizer=summarizer
    )

    async def scenario() -> None:
        await emitter.start()
        emitter.lifecycle("start", policy_version=VERSION, message="started")
        emitter.record_allowed_produce(
            topic="orders",
            principal=None,
            client_id="app",
            api_version=9,
            records_examined=3,
            bytes_examined=300,
            policy_version=VERSION,
        )
        emitter.lifecycle("stop", policy_version=VERSION, message="stopped")
        await emitter.close()

    asyncio.run(scenario())

    events = [AuditEvent.from_json(line) for line in all_lines(tmp_path)]
    assert [(e.event_kind, e.action) for e in events] == [
        ("lifecycle", "start"),
        ("summary", "produce"),
        ("lifecycle", "stop"),
    ]
    status = only_status(tmp_path)
    assert status.intact and status.ended_with_stop


def test_every_sink_gets_the_same_bytes(tmp_path: Path) -> None:
    write_chain(tmp_path / "a", 10, also=tmp_path / "b")

    assert all_lines(tmp_path / "a") == all_lines(tmp_path / "b")


def test_a_restart_starts_a_new_chain(tmp_path: Path) -> None:
    first = write_chain(tmp_path, 3)
    second = write_chain(tmp_path, 2)

    statuses = verify_links(read_spool_links(tmp_path).links)

    assert first != second
    assert {(s.chain_id, s.events, s.intact) for s in statuses} == {
        (first, 5, True),
        (second, 4, True),
    }


def test_worker_subdirectories_are_read(tmp_path: Path) -> None:
    write_chain(tmp_path / "worker-0", 2)
    write_chain(tmp_path / "worker-1", 3)

    statuses = verify_links(read_spool_links(tmp_path).links)

    assert sorted(s.events for s in statuses) == [4, 5]
    assert all(s.intact for s in statuses)


def test_an_edited_line_breaks_the_link_after_it(tmp_path: Path) -> None:
    write_chain(tmp_path, 8)
    rewrite_line(tmp_path, 4, lambda line: line.replace(b'"denied"', b'"allowed"'))

    status = only_status(tmp_path)

    assert [(p.kind, p.seq) for p in status.problems] == [("break", 5)]
    assert "seq 4" in status.problems[0].detail


def test_a_removed_line_is_a_gap(tmp_path: Path) -> None:
    write_chain(tmp_path, 8)
    rewrite_line(tmp_path, 3, lambda line: None)

    status = only_status(tmp_path)

    assert [(p.kind, p.seq) for p in status.problems] == [("gap", 3)]


def test_a_removed_start_is_a_gap_and_a_cut_off_end_has_no_stop(tmp_path: Path) -> None:
    write_chain(tmp_path, 5)
    rewrite_line(tmp_path, 0, lambda line: None)
    rewrite_line(tmp_path, 6, lambda line: None)

    status = only_status(tmp_path)

    assert [(p.kind, p.seq) for p in status.problems] == [("gap", 0)]
    assert not status.ended_with_stop


def test_copies_and_forgeries_at_one_seq(tmp_path: Path) -> None:
    write_chain(tmp_path, 6)
    rewrite_line(tmp_path, 2, lambda line: line + line)
    rewrite_line(tmp_path, 5, lambda line: line + line.replace(b"topic-4", b"topic-X"))

    status = only_status(tmp_path)

    assert [(p.kind, p.seq) for p in status.problems] == [
        ("duplicate", 2),
        ("fork", 5),
    ]


def test_verify_links_needs_no_files() -> None:
    """The report's way in: links built from table rows."""
    links = [
        Link(chain_id="c", seq=1, prev_hash="h0", line_hash="h1"),
        Link(chain_id="c", seq=0, prev_hash=None, line_hash="h0"),
        Link(chain_id="c", seq=2, prev_hash="hX", line_hash="h2"),
        Link(chain_id="d", seq=0, prev_hash=None, line_hash="g0"),
    ]

    statuses = verify_links(links)

    assert [(s.chain_id, [(p.kind, p.seq) for p in s.problems]) for s in statuses] == [
        ("c", [("break", 2)]),
        ("d", []),
    ]


def test_kpg_audit_verify_exit_status_and_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_chain(tmp_path, 4)
    # as an operator runs it: the kpg command line
    assert kpg_main(["audit", "verify", "--input", str(tmp_path)]) == 0
    assert "6 events, seq 0..5, stopped: intact" in capsys.readouterr().out

    rewrite_line(tmp_path, 2, lambda line: line.replace(b'"denied"', b'"allowed"'))
    assert verify_command(argparse.Namespace(input=tmp_path)) == 1
    out = capsys.readouterr().out
    assert "BROKEN" in out and "break at seq" in out

    assert verify_command(argparse.Namespace(input=tmp_path / "missing")) == 2


def _unchained(line: bytes, **changes: object) -> bytes:
    """``line`` as another event, taken out of its chain (what a forger can write without
    knowing what follows)."""
    data = json.loads(line)
    data.update(chain_id=None, seq=None, prev_hash=None, **changes)
    return json.dumps(data, separators=(",", ":")).encode() + b"\n"


def test_an_event_of_a_chained_version_outside_any_chain_is_unreadable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A v2 or v3 event without chain_id was counted as a v1 event ('events without a chain
    (schema version 1)') and verify said intact (exit 0): an event inserted anywhere in the
    spool, which the report counts, went unseen. A real v1 event stays unchained."""
    write_chain(tmp_path, 2)
    first = segments(tmp_path)[0]
    line = all_lines(tmp_path)[1]
    forged = _unchained(line, event_id="00000000-0000-4000-8000-000000000001")
    old = json.loads(_unchained(line, event_id="00000000-0000-4000-8000-000000000002"))
    old["schema_version"] = 1
    v1 = {k: v for k, v in old.items() if k in AuditEvent.__dataclass_fields__}
    for key in ("request_id", "policy_version", "event_kind", "chain_id", "seq", "prev_hash"):
        v1.pop(key)
    for key in ("config_changes", "topic_spec", "request_events"):
        v1.pop(key, None)
    first.write_bytes(
        first.read_bytes() + forged + json.dumps(v1, separators=(",", ":")).encode() + b"\n"
    )

    found = read_spool_links(tmp_path)
    assert found.unchained == 1, "the v1 event"
    (where,) = found.unreadable
    assert "schema version 3 event without a chain" in where
    assert verify_command(argparse.Namespace(input=tmp_path)) == 1
    assert "unreadable line at" in capsys.readouterr().out


def test_a_chained_line_that_is_no_audit_event_is_unreadable(tmp_path: Path) -> None:
    """Its links intact, a line the report cannot read (a verdict no version has) was left
    out of the report unseen while verify said intact."""
    write_chain(tmp_path, 2)
    last = all_lines(tmp_path)[-1]
    seq = json.loads(last)["seq"]
    rewrite_line(tmp_path, seq, lambda line: line.replace(b'"allowed"', b'"maybe"'))
    found = read_spool_links(tmp_path)
    (where,) = found.unreadable
    assert "not an audit event" in where
