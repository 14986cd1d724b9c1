"""The spool sink and the emitter: real files in a temporary directory, no Spark.

The emitter tests use small in-memory sinks where a disk cannot be made to stall or fail on
demand; the spool tests use the real file system (and real crashed processes).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import stat
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gateway.audit import (
    AuditEmitter,
    EventLine,
    ProduceSummarizer,
    SinkWriteError,
    SpoolSink,
)
from spark_audit.event import AuditEvent
from tests.support import audit_event

pytestmark = pytest.mark.unit


def make_event(number: int = 0, **overrides: Any) -> AuditEvent:
    """``audit_event`` of topic ``topic-<number, 4 digits>``: all as long as ``LINE_BYTES``."""
    return audit_event(**({"resource_name": f"topic-{number:04d}"} | overrides))


def lines(events: Sequence[AuditEvent]) -> list[EventLine]:
    """``events`` as a sink gets them, unchained (for writing a sink directly)."""
    return [EventLine.of(event) for event in events]


def unchained(events: Sequence[AuditEvent]) -> list[AuditEvent]:
    """``events`` without the chain fields the emitter set, to compare with what was emitted."""
    return [dataclasses.replace(e, chain_id=None, seq=None, prev_hash=None) for e in events]


class FakeClock:
    def __init__(self, now: float = 1_795_251_600.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def completed(spool: Path) -> list[Path]:
    return sorted(spool.glob("events-*.jsonl"))


def open_segments(spool: Path) -> list[Path]:
    return sorted(spool.glob(".events-*.jsonl.open"))


def read_spool(spool: Path) -> list[AuditEvent]:
    return [
        AuditEvent.from_json(line)
        for path in completed(spool)
        for line in path.read_text(encoding="utf-8").splitlines()
    ]


LINE_BYTES = len(make_event().to_json_line().encode())


# --- SpoolSink: rotation and naming -----------------------------------------------------------


@pytest.mark.parametrize("batch_size", [1, 4, 10])
def test_segments_rotate_by_size_and_keep_every_event_in_order(
    tmp_path: Path, batch_size: int
) -> None:
    sink = SpoolSink(tmp_path, segment_max_bytes=3 * LINE_BYTES, segment_max_age_s=3600)
    events = [make_event(n) for n in range(10)]
    sink.open()

    for start in range(0, len(events), batch_size):
        sink.write(lines(events[start : start + batch_size]))
    before_close = completed(tmp_path)
    sink.close()

    assert len(before_close) == 3
    assert [p.stat().st_size for p in completed(tmp_path)] == [3 * LINE_BYTES] * 3 + [LINE_BYTES]
    assert read_spool(tmp_path) == events
    assert open_segments(tmp_path) == []


def test_a_line_larger_than_a_segment_gets_a_segment_of_its_own(tmp_path: Path) -> None:
    sink = SpoolSink(tmp_path, segment_max_bytes=10)
    sink.open()
    sink.write(lines([make_event(1), make_event(2)]))
    sink.close()

    assert [len(p.read_text().splitlines()) for p in completed(tmp_path)] == [1, 1]


def test_segments_rotate_by_age_even_without_new_events(tmp_path: Path) -> None:
    clock = FakeClock()
    sink = SpoolSink(tmp_path, segment_max_age_s=60, clock=clock)
    events = [make_event(n) for n in range(3)]
    sink.open()
    sink.write(lines(events[:2]))

    clock.now += 59.9
    sink.maintain()
    assert completed(tmp_path) == []

    clock.now += 0.1
    sink.maintain()
    assert [len(p.read_text().splitlines()) for p in completed(tmp_path)] == [2]
    assert open_segments(tmp_path) == []

    sink.write(lines(events[2:]))
    sink.close()
    assert read_spool(tmp_path) == events
    assert len(completed(tmp_path)) == 2


def test_open_segment_is_hidden_until_it_is_renamed_complete(tmp_path: Path) -> None:
    clock = FakeClock(1_795_251_600.5)
    sink = SpoolSink(tmp_path, clock=clock)
    event = make_event(1)
    sink.open()
    sink.write(lines([event]))

    (hidden,) = open_segments(tmp_path)
    visible = [p.name for p in tmp_path.iterdir() if not p.name.startswith((".", "_"))]
    assert visible == []
    assert hidden.read_text() == event.to_json_line()

    sink.close()
    assert [p.name for p in completed(tmp_path)] == ["events-20261121T090000500Z-00000000.jsonl"]
    assert not hidden.exists()


def test_sequence_numbers_continue_after_a_restart(tmp_path: Path) -> None:
    for number in range(3):
        sink = SpoolSink(tmp_path)
        sink.open()
        sink.write(lines([make_event(number)]))
        sink.close()

    assert [p.name[-14:-6] for p in completed(tmp_path)] == ["00000000", "00000001", "00000002"]


def test_a_second_writer_on_the_same_spool_is_refused(tmp_path: Path) -> None:
    first = SpoolSink(tmp_path)
    first.open()
    with pytest.raises(RuntimeError, match="in use"):
        SpoolSink(tmp_path).open()
    first.close()

    second = SpoolSink(tmp_path)
    second.open()
    second.close()


# --- SpoolSink: crashes -----------------------------------------------------------------------


def test_recovery_keeps_complete_lines_and_drops_a_torn_last_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kept = [make_event(1), make_event(2)]
    torn = make_event(3).to_json_line()[:40]
    leftover = tmp_path / ".events-20261121T090000000Z-00000007.jsonl.open"
    leftover.write_text("".join(e.to_json_line() for e in kept) + torn, encoding="utf-8")

    sink = SpoolSink(tmp_path)
    with caplog.at_level(logging.WARNING, logger="gateway.audit"):
        sink.open()

    assert [p.name for p in completed(tmp_path)] == ["events-20261121T090000000Z-00000007.jsonl"]
    assert read_spool(tmp_path) == kept
    assert open_segments(tmp_path) == []
    assert "kept 2 events" in caplog.text and "40 bytes of a torn last line" in caplog.text

    sink.write(lines([make_event(4)]))
    sink.close()
    assert completed(tmp_path)[-1].name.endswith("-00000008.jsonl")


def test_recovery_drops_garbage_lines_and_removes_a_segment_with_nothing_complete(
    tmp_path: Path,
) -> None:
    good = make_event(1)
    with_garbage = tmp_path / ".events-20261121T090000000Z-00000001.jsonl.open"
    with_garbage.write_bytes(b"\0\0\0\0\n" + good.to_json_line().encode() + b"\0\0")
    only_torn = tmp_path / ".events-20261121T090100000Z-00000002.jsonl.open"
    only_torn.write_text(make_event(2).to_json_line()[:-5], encoding="utf-8")

    sink = SpoolSink(tmp_path)
    sink.open()
    sink.close()

    assert read_spool(tmp_path) == [good]
    assert [p.name for p in completed(tmp_path)] == ["events-20261121T090000000Z-00000001.jsonl"]
    assert open_segments(tmp_path) == []


def _run_python(code: str, *args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


CRASHING_WRITER = """
    import os, sys
    from gateway.audit import EventLine, SpoolSink
    from spark_audit.event import AuditEvent
    sink = SpoolSink(sys.argv[1], segment_max_bytes=int(sys.argv[2]), fsync="segment")
    sink.open()
    template = sys.stdin.read()
    for n in range(7):
        sink.write([EventLine.of(AuditEvent.from_json(template.replace("NUMBER", str(n))))])
    os._exit(3)  # no close(): the process dies with a segment open
"""


def test_a_crashed_writer_loses_no_completed_segment_and_no_written_event(tmp_path: Path) -> None:
    template = make_event(0).to_json_line().replace("topic-0000", "topic-NUMBER")
    crashed = _run_python(CRASHING_WRITER, str(tmp_path), str(3 * LINE_BYTES), stdin=template)
    assert crashed.returncode == 3, crashed.stderr
    assert len(completed(tmp_path)) == 2 and len(open_segments(tmp_path)) == 1

    with open_segments(tmp_path)[0].open("a", encoding="utf-8") as torn:
        torn.write('{"schema_version":1,"event_id":"half-writ')
    sink = SpoolSink(tmp_path)
    sink.open()
    sink.close()

    assert [e.resource_name for e in read_spool(tmp_path)] == [f"topic-{n}" for n in range(7)]
    assert open_segments(tmp_path) == []


DISK_FILLING_WRITER = """
    import json, resource, signal, sys
    from gateway.audit import EventLine, SinkWriteError, SpoolSink
    from spark_audit.event import AuditEvent
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a full file gives EFBIG, not a signal
    limit = int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    sink = SpoolSink(sys.argv[1], segment_max_bytes=10 * limit)
    sink.open()
    event = EventLine.of(AuditEvent.from_json(sys.stdin.read()))
    sink.write([event] * 2)
    try:
        sink.write([event] * 3)
    except SinkWriteError as exc:
        print(json.dumps({"written": exc.written}))
    sink.close()
"""


def test_a_write_the_disk_refuses_is_reported_and_leaves_no_torn_line(tmp_path: Path) -> None:
    event = make_event(1)
    limit = int(3.5 * LINE_BYTES)  # the second batch fits only half way
    result = _run_python(DISK_FILLING_WRITER, str(tmp_path), str(limit), stdin=event.to_json_line())

    assert result.stdout.strip() == '{"written": 0}', result.stderr
    assert read_spool(tmp_path) == [event, event]


def test_a_segment_that_cannot_be_completed_keeps_its_events_and_is_completed_later(
    tmp_path: Path,
) -> None:
    """A segment whose rename to its final name fails (here a directory holds that name; a
    spool directory made read-only, or out of inodes, fails the same way) stays the open
    segment, and its events and the batch's next ones are kept in it until a later
    completion succeeds. The sink used to close it before the rename: the segment stayed
    hidden (.open) until a restart's recovery, where Spark never reads it, and the rest of
    the batch was lost."""
    sink = SpoolSink(tmp_path, segment_max_bytes=2 * LINE_BYTES, segment_max_age_s=3600)
    events = [make_event(n) for n in range(6)]
    sink.open()
    sink.write(lines(events[:1]))
    (segment,) = open_segments(tmp_path)
    blocker = tmp_path / segment.name.removeprefix(".").removesuffix(".open")
    blocker.mkdir()
    blocker.joinpath("keep").touch()  # not an empty directory: a rename onto it fails

    sink.write(lines(events[1:4]))  # the segment fills: its completion fails
    assert open_segments(tmp_path) == [segment]
    assert completed(tmp_path) == [blocker]

    blocker.joinpath("keep").unlink()
    blocker.rmdir()
    sink.write(lines(events[4:]))  # the next completion succeeds
    sink.close()
    assert read_spool(tmp_path) == events
    assert open_segments(tmp_path) == []


def test_events_are_not_written_into_a_segment_removed_from_the_spool(tmp_path: Path) -> None:
    """The open segment removed from under the sink (a clean-up, the spool directory removed
    and made again): its descriptor still took writes, so the next events were reported
    written and were nowhere until the segment was completed (a minute later by default). The
    next events now go to a new segment, and with the directory gone they fail, counted."""
    spool = tmp_path / "audit"
    sink = SpoolSink(spool, segment_max_age_s=3600)
    events = [make_event(n) for n in range(4)]
    sink.open()
    sink.write(lines(events[:1]))
    (segment,) = open_segments(spool)
    segment.unlink()

    sink.write(lines(events[1:2]))
    assert [AuditEvent.from_json(p.read_text()) for p in open_segments(spool)] == events[1:2]

    for path in spool.iterdir():
        path.unlink()
    spool.rmdir()
    with pytest.raises(SinkWriteError) as refused:
        sink.write(lines(events[2:]))
    assert refused.value.written == 0
    sink.close()


# --- SpoolSink: fsync -------------------------------------------------------------------------


class FsyncRecorder:
    """Counts fsync calls on regular files and on directories, then does the real fsync."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.files = 0
        self.directories = 0

    def __call__(self, fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            self.directories += 1
        else:
            self.files += 1
        self.real(fd)


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> FsyncRecorder:
    recorder = FsyncRecorder(os.fsync)
    monkeypatch.setattr(os, "fsync", recorder)
    return recorder


def test_fsync_always_syncs_after_every_write(tmp_path: Path, fsyncs: FsyncRecorder) -> None:
    sink = SpoolSink(tmp_path, fsync="always")
    sink.open()
    for number in range(3):
        sink.write(lines([make_event(number)]))
    assert (fsyncs.files, fsyncs.directories) == (3, 0)

    sink.close()
    assert (fsyncs.files, fsyncs.directories) == (3, 1)


def test_fsync_segment_syncs_only_when_a_segment_completes(
    tmp_path: Path, fsyncs: FsyncRecorder
) -> None:
    sink = SpoolSink(tmp_path, fsync="segment", segment_max_bytes=2 * LINE_BYTES)
    sink.open()
    for number in range(3):
        sink.write(lines([make_event(number)]))
    assert (fsyncs.files, fsyncs.directories) == (1, 1)  # the first segment filled up

    sink.close()
    assert (fsyncs.files, fsyncs.directories) == (2, 2)


def test_fsync_interval_syncs_at_most_once_per_interval(
    tmp_path: Path, fsyncs: FsyncRecorder
) -> None:
    clock = FakeClock()
    sink = SpoolSink(tmp_path, fsync="interval", fsync_interval_s=1.0, clock=clock)
    sink.open()
    sink.write(lines([make_event(1)]))
    clock.now += 0.5
    sink.write(lines([make_event(2)]))
    assert fsyncs.files == 0

    clock.now += 0.5
    sink.write(lines([make_event(3)]))
    assert fsyncs.files == 1

    clock.now += 0.2
    sink.write(lines([make_event(4)]))
    sink.maintain()
    assert fsyncs.files == 1
    clock.now += 0.8
    sink.maintain()  # no new event, but the last one is still unsynced
    assert fsyncs.files == 2

    sink.close()
    assert (fsyncs.files, fsyncs.directories) == (2, 1)


def test_a_clock_set_back_does_not_hold_the_open_segment_back(
    tmp_path: Path, fsyncs: FsyncRecorder
) -> None:
    """Ages and intervals were the wall clock's differences: an NTP step back of an hour left
    the open segment unfsynced (fsync interval) and hidden from Spark (segment age) for the
    hour and the age after it. A clock that went back now counts as the time being up."""
    clock = FakeClock()
    sink = SpoolSink(
        tmp_path, segment_max_age_s=60, fsync="interval", fsync_interval_s=1.0, clock=clock
    )
    sink.open()
    sink.write(lines([make_event(1)]))
    assert (completed(tmp_path), fsyncs.files) == ([], 0)

    clock.now -= 3600
    sink.maintain()
    assert [len(p.read_text().splitlines()) for p in completed(tmp_path)] == [1]
    assert fsyncs.files == 1
    sink.close()


@pytest.mark.parametrize(
    "settings",
    [
        {"segment_max_bytes": 0},
        {"segment_max_age_s": 0},
        {"fsync": "sometimes"},
        {"fsync_interval_s": -1},
    ],
)
def test_bad_spool_settings_are_refused(tmp_path: Path, settings: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        SpoolSink(tmp_path, **settings)


# --- AuditEmitter -----------------------------------------------------------------------------


class RecordingSink:
    """A sink that keeps events in memory; optionally stalls until released."""

    def __init__(self, *, stall: bool = False) -> None:
        self.events: list[AuditEvent] = []
        self.opened = self.closed = False
        self.entered = threading.Event()
        self.release = threading.Event()
        if not stall:
            self.release.set()

    def open(self) -> None:
        self.opened = True

    def write(self, lines: Sequence[EventLine]) -> None:
        self.entered.set()
        assert self.release.wait(10), "the test never released the sink"
        self.events.extend(line.event for line in lines)

    def maintain(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class FailingSink:
    """A disk that refuses: raises ``error`` on every write."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def open(self) -> None:
        pass

    def write(self, lines: Sequence[EventLine]) -> None:
        raise self.error

    def maintain(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_emit_waits_when_the_queue_is_full_and_nothing_is_dropped() -> None:
    sink = RecordingSink(stall=True)
    registry = CollectorRegistry()
    emitter = AuditEmitter([sink], queue_max_events=2, batch_max_events=1, registry=registry)
    events = [make_event(n) for n in range(4)]

    async def scenario() -> None:
        await emitter.start()
        await emitter.emit(events[0])
        assert await asyncio.to_thread(sink.entered.wait, 10)  # the writer is stuck on it
        await emitter.emit(events[1])
        await emitter.emit(events[2])

        blocked = asyncio.create_task(emitter.emit(events[3]))
        await asyncio.sleep(0.3)
        assert not blocked.done()
        assert emitter.queue_depth == 2
        assert registry.get_sample_value("kpg_audit_queue_depth") == 2

        sink.release.set()
        await asyncio.wait_for(blocked, 10)
        await emitter.close()

    asyncio.run(scenario())

    assert unchained(sink.events) == events
    assert sink.opened and sink.closed
    assert emitter.failed_events == 0
    assert registry.get_sample_value("kpg_audit_events_total", {"verdict": "denied"}) == 4


@pytest.mark.parametrize(
    ("error", "lost"),
    [
        (OSError(28, "No space left on device"), 3),
        (SinkWriteError(1, OSError(28, "No space left on device")), 2),
    ],
)
def test_a_failing_sink_is_counted_and_logged_loudly_and_other_sinks_still_get_events(
    caplog: pytest.LogCaptureFixture, error: Exception, lost: int
) -> None:
    healthy = RecordingSink()
    registry = CollectorRegistry()
    emitter = AuditEmitter(
        [FailingSink(error), healthy], batch_max_events=10, queue_max_events=10, registry=registry
    )
    events = [make_event(n) for n in range(3)]

    async def scenario() -> None:
        await emitter.start()
        for event in events:
            await emitter.emit(event)
        await emitter.close()

    with caplog.at_level(logging.ERROR, logger="gateway.audit"):
        # emit() only queues, so all three go to the writer in one batch
        asyncio.run(scenario())

    assert unchained(healthy.events) == events
    assert emitter.failed_events == lost
    assert registry.get_sample_value("kpg_audit_events_failed_total") == lost
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "AUDIT EVENTS LOST" in errors[0].getMessage()
    assert events[3 - lost].event_id in errors[0].getMessage()


@pytest.mark.parametrize(
    ("sinks", "written"),
    [
        (lambda: [RecordingSink()], True),
        (lambda: [FailingSink(SinkWriteError(2, OSError(28, "No space"))), RecordingSink()], False),
        (lambda: [RecordingSink(), FailingSink(OSError(27, "File too large"))], False),
    ],
)
def test_emit_all_written_says_whether_every_sink_took_every_event(
    sinks: Callable[[], list[Any]], written: bool
) -> None:
    """What ``audit.on_failure: deny`` decides on: one sink losing one event of the three is
    a decision not audited."""
    emitter = AuditEmitter(sinks(), batch_max_events=10)
    events = [make_event(n) for n in range(3)]

    async def scenario() -> bool:
        await emitter.start()
        try:
            return await emitter.emit_all_written(events)
        finally:
            await emitter.close()

    assert asyncio.run(scenario()) is written


def test_emit_refuses_before_start_and_after_close() -> None:
    emitter = AuditEmitter([RecordingSink()])

    async def scenario() -> None:
        with pytest.raises(RuntimeError, match="not running"):
            await emitter.emit(make_event())
        await emitter.start()
        await emitter.close()
        with pytest.raises(RuntimeError, match="not running"):
            await emitter.emit(make_event())

    asyncio.run(scenario())


def test_produce_summaries_are_written_per_interval_and_on_close() -> None:
    sink = RecordingSink()
    summarizer = ProduceSummarizer(
        gateway_instance="kpg-1", mode="enforce", interval_ms=100, start_ms=0
    )
    emitter = AuditEmitter([sink], summarizer=summarizer, tick_s=0.05)

    def produce(records: int) -> None:
        emitter.record_allowed_produce(
            topic="orders",
            principal="User:alice",
            client_id="app",
            api_version=9,
            records_examined=records,
            bytes_examined=records * 10,
        )

    async def scenario() -> None:
        await emitter.start()
        produce(3)
        produce(4)
        for _ in range(100):
            if sink.events:
                break
            await asyncio.sleep(0.05)
        assert [(e.event_count, e.records_examined) for e in sink.events] == [(2, 7)]
        produce(5)
        await emitter.close()

    asyncio.run(scenario())

    assert [(e.event_count, e.records_examined) for e in sink.events] == [(2, 7), (1, 5)]
    assert all(e.is_summary and e.resource_name == "orders" for e in sink.events)


def test_close_writes_everything_to_the_spool(tmp_path: Path) -> None:
    events = [make_event(n) for n in range(50)]
    emitter = AuditEmitter([SpoolSink(tmp_path, fsync="segment")], batch_max_events=7)

    async def scenario() -> None:
        await emitter.start()
        for event in events:
            await emitter.emit(event)
        await emitter.close()

    asyncio.run(scenario())

    assert unchained(read_spool(tmp_path)) == events
    assert open_segments(tmp_path) == []


def test_lifecycle_events_keep_their_place_even_when_the_queue_is_full() -> None:
    sink = RecordingSink(stall=True)
    emitter = AuditEmitter([sink], queue_max_events=1, batch_max_events=1, gateway_instance="kpg-1")
    decisions = [make_event(n) for n in range(2)]

    async def scenario() -> None:
        await emitter.start()
        emitter.lifecycle("start", policy_version="sha256:0000000000000001", message="started")
        assert await asyncio.to_thread(sink.entered.wait, 10)  # the writer is stuck on it
        await emitter.emit(decisions[0])  # fills the queue
        emitter.lifecycle(  # cannot queue now: it waits in a task, and keeps its turn
            "reload",
            policy_version="sha256:0000000000000002",
            message="sha256:0000000000000001 -> sha256:0000000000000002",
        )
        late = asyncio.create_task(emitter.emit(decisions[1]))
        await asyncio.sleep(0.1)
        sink.release.set()
        await asyncio.wait_for(late, 10)
        emitter.lifecycle("stop", policy_version="sha256:0000000000000002", message="stopped")
        await emitter.close()
        with pytest.raises(RuntimeError, match="not running"):
            emitter.lifecycle("stop", policy_version="v", message="after close")

    asyncio.run(scenario())

    assert [(e.kind, e.action) for e in sink.events] == [
        ("lifecycle", "start"),
        ("decision", "create"),
        ("lifecycle", "reload"),
        ("decision", "create"),
        ("lifecycle", "stop"),
    ]
    start, reload = sink.events[0], sink.events[2]
    assert (start.api, start.api_version, start.resource_type, start.resource_name) == (
        "Gateway",
        0,
        "gateway",
        "kpg-1",
    )
    assert (start.verdict, start.mode, start.request_id) == ("allowed", "enforce", None)
    assert reload.policy_version == "sha256:0000000000000002"
    assert reload.message == "sha256:0000000000000001 -> sha256:0000000000000002"


def test_an_unknown_lifecycle_action_is_refused() -> None:
    emitter = AuditEmitter([RecordingSink()])
    with pytest.raises(ValueError, match="lifecycle action"):
        emitter.lifecycle("restart", policy_version="v", message="m")


def test_a_spool_directory_in_use_is_refused_to_a_second_gateway(tmp_path: Path) -> None:
    """Two gateways given one spool directory by mistake: the second is refused at open
    (its own process, as a second gateway is), so no segment has two writers and each
    directory holds one writer's chains."""
    first = SpoolSink(tmp_path)
    first.open()
    try:
        second = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from pathlib import Path; from gateway.audit import SpoolSink; "
                "SpoolSink(Path(sys.argv[1])).open()",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": os.getcwd()},
        )
    finally:
        first.close()
    assert second.returncode != 0
    assert f"audit spool {tmp_path} is in use by another writer" in second.stderr
