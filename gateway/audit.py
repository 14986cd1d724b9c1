"""Audit emission: every decision the gateway makes leaves as an :class:`AuditEvent`.

Contracts, stated once:

- Nothing is dropped silently. :meth:`AuditEmitter.emit` waits while the queue is full, so a
  slow disk pushes back on the request path instead of losing events. An event a sink fails
  to take is counted (``failed_events``, ``kpg_audit_events_failed_total``) and logged at
  ERROR level, once per event per failing sink; :meth:`AuditEmitter.emit_all_written` tells
  its caller whether every sink took every event (``audit.on_failure: deny`` refuses the
  request when not).
- Order: events reach every sink in the order ``emit`` was called.
- Allowed Produce traffic is not one event per request: the gateway calls
  :meth:`AuditEmitter.record_allowed_produce`, and a :class:`ProduceSummarizer` turns it into
  one summary event per (topic, principal, client_id) per interval. Denied or would-deny
  Produce requests are ordinary events.
- Sinks are blocking and are only ever called from the emitter's writer, one call at a time,
  in a worker thread, so the event loop never waits on the disk.
- The chain (tamper evidence, see ``spark_audit/SCHEMA.md``): each emitter is one chain, a
  fresh ``chain_id`` per process start. The writer numbers the events in the order it writes
  them (``seq`` 0, 1, ...), sets ``prev_hash`` to the SHA-256 of the previous line, and
  serializes each event once: every sink gets the same bytes (:class:`EventLine`), so the
  spool and the audit topic verify alike. An event a sink fails to take is a gap in that
  sink's copy of the chain, which is what a verifier should see.
- Durability of the spool (:class:`SpoolSink`): a completed segment is fsynced and atomically
  renamed into place, so a reader never sees a half-written one and a crash never loses one.
  What a crash can lose: events still in the emitter's queue, and, on a machine crash, the
  part of the open segment not yet fsynced (see ``fsync``). A process crash loses nothing
  already handed to the sink: each batch is written to the OS before ``write`` returns.

- The topic sink (:class:`KafkaTopicSink`) produces each event as one record (key: the
  event id, value: the same JSON line as the spool) to an audit topic on the upstream
  cluster, created if missing, with acks=all; ``write`` returns once the broker has acked.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Coroutine, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge

from policies.rules import shown_value
from protocol.topic_names import topic_name_problem
from spark_audit.event import (
    LIFECYCLE_ACTIONS,
    LIFECYCLE_API,
    LIFECYCLE_RESOURCE_TYPE,
    SPOOL_SEGMENT_GLOB,
    AuditEvent,
    ConfigChange,
    Mode,
    TopicSpec,
    format_time,
    line_hash,
    new_event_id,
)

from .files import make_private_dirs

logger = logging.getLogger(__name__)
T = TypeVar("T")

FsyncMode = Literal["always", "segment", "interval"]
FSYNC_MODES: Final[tuple[FsyncMode, ...]] = ("always", "segment", "interval")

_OPEN_PREFIX: Final = "."
_OPEN_SUFFIX: Final = ".open"
_LOCK_NAME: Final = ".lock"
SEGMENT_MODE: Final = 0o640
"""Segments and the lock file: events name principals, clients and config values, so the
group may read them (a reader such as the Spark job), other users may not."""
_SEGMENT_RE: Final = re.compile(r"\.?events-\d{8}T\d{9}Z-(\d{8})\.jsonl(\.open)?")


class SinkWriteError(Exception):
    """A sink took only the first ``written`` events of a batch; the rest are lost to it."""

    def __init__(self, written: int, cause: BaseException) -> None:
        super().__init__(f"sink wrote {written} events, then failed: {cause}")
        self.written = written


@dataclasses.dataclass(frozen=True, slots=True)
class EventLine:
    """An event as the sinks get it: a link of the emitter's chain, serialized once."""

    event: AuditEvent
    data: bytes
    """The JSON line, UTF-8, newline-terminated: what every sink writes, byte for byte."""

    @classmethod
    def of(cls, event: AuditEvent) -> EventLine:
        """``event`` serialized as it is (unchained): for writing a sink directly."""
        return cls(event, event.to_json_line().encode("utf-8"))


class AuditSink(Protocol):
    """Where audit events end up. All methods block; see the module contract."""

    def open(self) -> None:
        """Prepare for writing (create, lock, recover). Called once before ``write``."""

    def write(self, lines: Sequence[EventLine]) -> None:
        """Persist ``lines`` in order, each exactly as its ``data`` bytes.

        :raises SinkWriteError: if only a prefix of ``lines`` was persisted.
        :raises Exception: anything else means none of ``lines`` was persisted.
        """

    def maintain(self) -> None:
        """Periodic housekeeping (time-based rotation and fsync); called about once a second."""

    def close(self) -> None:
        """Persist and release everything. Called once; no ``write`` follows."""


# --------------------------------------------------------------------------------------------
# The spool: JSON lines in segment files.


@dataclasses.dataclass(slots=True, kw_only=True)
class _Segment:
    fd: int
    open_path: Path
    final_path: Path
    opened_at: float
    size: int = 0
    unsynced: bool = False


def _is_stop(event: AuditEvent) -> bool:
    """The gateway's own stop event: the last of its chain (verify reads "stopped" so)."""
    return event.event_kind == "lifecycle" and event.action == "stop"


def _past(now: float, since: float, span: float) -> bool:
    """Whether ``span`` has passed since ``since`` by the wall clock (the audit's own times,
    and its tests', are wall-clock times). A clock set back (``now`` before ``since``: an NTP
    step) counts as past: the window of a segment's age, of the fsync interval, of the
    maintenance tick and of a Produce summary otherwise stayed open for as long as the step,
    an hour back leaving a segment unfsynced and hidden from Spark for an hour and more. A
    step forward can only end a window early."""
    return now < since or now - since >= span


class SpoolSink:
    """Audit events as JSON lines in segment files, for the Spark file source.

    Layout of ``directory``:

    - ``events-<UTC yyyymmddThhmmssmmm>Z-<seq>.jsonl``: completed segments, immutable.
      ``seq`` is eight digits and grows by one per segment, across restarts.
    - ``.events-<...>-<seq>.jsonl.open``: the segment being written (at most one). The dot
      hides it from Spark; completing it is an fsync and a rename to its final name.
    - ``.lock``: held (``flock``) while a sink has the directory open; one writer per spool.

    The directory is created with mode 0750 and segments with 0640; a directory another
    local user can write (:mod:`gateway.files`) is refused, since they could add or change
    events.

    A segment is completed when the next line would take it past ``segment_max_bytes``, when
    it is ``segment_max_age_s`` old, and on :meth:`close`. ``fsync`` says when the open segment
    is fsynced: after every ``write`` (``always``), only when completed (``segment``), or at
    most ``fsync_interval_s`` apart (``interval``). A completed segment is always fsynced,
    and so is the directory after the rename.

    On :meth:`open`, a segment left open by a crash is completed: its complete JSON lines are
    kept and a torn last line is dropped.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        segment_max_bytes: int = 64 * 1024 * 1024,
        segment_max_age_s: float = 60.0,
        fsync: FsyncMode = "interval",
        fsync_interval_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """:raises ValueError: on a non-positive size, age or interval, or an unknown fsync."""
        if segment_max_bytes <= 0:
            raise ValueError(f"segment_max_bytes must be > 0, got {segment_max_bytes}")
        if segment_max_age_s <= 0:
            raise ValueError(f"segment_max_age_s must be > 0, got {segment_max_age_s}")
        if fsync not in FSYNC_MODES:
            raise ValueError(f"fsync must be one of {FSYNC_MODES}, got {fsync!r}")
        if fsync_interval_s <= 0:
            raise ValueError(f"fsync_interval_s must be > 0, got {fsync_interval_s}")
        self.directory = Path(directory)
        self.segment_max_bytes = segment_max_bytes
        self.segment_max_age_s = segment_max_age_s
        self.fsync = fsync
        self.fsync_interval_s = fsync_interval_s
        self._clock = clock
        self._lock_fd: int | None = None
        self._segment: _Segment | None = None
        self._next_seq = 0
        self._last_fsync = clock()

    def __repr__(self) -> str:
        return f"SpoolSink({str(self.directory)!r})"

    # -- AuditSink ---------------------------------------------------------------------------

    def open(self) -> None:
        """Create and lock the directory, and complete any segment a crash left open.

        :raises RuntimeError: if another sink holds the directory.
        :raises UnsafePathError: if another local user can write it (gateway.files).
        """
        make_private_dirs(self.directory, "audit spool directory")
        lock_fd = os.open(
            self.directory / _LOCK_NAME,
            os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
            SEGMENT_MODE,
        )
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock_fd)
            raise RuntimeError(
                f"audit spool {self.directory} is in use by another writer"
            ) from None
        self._lock_fd = lock_fd
        seqs = [-1]
        for path in self.directory.iterdir():
            match = _SEGMENT_RE.fullmatch(path.name)
            if match:
                seqs.append(int(match.group(1)))
        self._next_seq = max(seqs) + 1
        leftovers = self.directory.glob(f"{_OPEN_PREFIX}{SPOOL_SEGMENT_GLOB}{_OPEN_SUFFIX}")
        for path in sorted(leftovers):
            self._recover(path)

    def write(self, lines: Sequence[EventLine]) -> None:
        """Append ``lines``, completing segments as they fill; see the class docstring.

        :raises SinkWriteError: if the disk refused part of the batch; the partial line is
            removed, so the segment stays a sequence of complete lines.
        """
        if self._lock_fd is None:
            raise RuntimeError("SpoolSink.write before open() or after close()")
        self._drop_if_removed()
        rotating = self._complete_if_old()
        written = 0
        chunk = bytearray()
        chunk_events = 0
        try:
            for event_line in lines:
                line = event_line.data
                on_disk = self._segment.size if self._segment is not None else 0
                pending = on_disk + len(chunk)
                if rotating and pending > 0 and pending + len(line) > self.segment_max_bytes:
                    self._append(bytes(chunk))
                    written += chunk_events
                    chunk.clear()
                    chunk_events = 0
                    rotating = self._rotate()
                chunk += line
                chunk_events += 1
            self._append(bytes(chunk))
            written += chunk_events
            if self.fsync == "always":
                self._fsync_segment()
            elif self.fsync == "interval":
                self._fsync_if_due()
        except OSError as exc:
            raise SinkWriteError(written, exc) from exc

    def maintain(self) -> None:
        """Complete the open segment if it is old enough; fsync it if the interval is up."""
        self._complete_if_old()
        if self.fsync == "interval":
            self._fsync_if_due()

    def close(self) -> None:
        """Complete the open segment and release the directory. Safe to call twice. A segment
        that cannot be completed is left open, for the next :meth:`open` to recover."""
        try:
            self._complete()
        finally:
            segment, self._segment = self._segment, None
            if segment is not None:
                os.close(segment.fd)
            if self._lock_fd is not None:
                os.close(self._lock_fd)  # closing the descriptor releases the flock
                self._lock_fd = None

    # -- segments ----------------------------------------------------------------------------

    def _open_segment(self) -> _Segment:
        now = self._clock()
        stamp = datetime.fromtimestamp(now, tz=UTC)
        name = (
            f"events-{stamp:%Y%m%dT%H%M%S}{stamp.microsecond // 1000:03d}Z"
            f"-{self._next_seq:08d}.jsonl"
        )
        self._next_seq += 1
        open_path = self.directory / f"{_OPEN_PREFIX}{name}{_OPEN_SUFFIX}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
        fd = os.open(open_path, flags, SEGMENT_MODE)
        self._segment = _Segment(
            fd=fd, open_path=open_path, final_path=self.directory / name, opened_at=now
        )
        self._last_fsync = now
        return self._segment

    def _append(self, data: bytes) -> None:
        if not data:
            return
        segment = self._segment or self._open_segment()
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(segment.fd, view) :]
        except OSError:
            try:
                os.ftruncate(segment.fd, segment.size)
            except OSError:
                logger.exception("could not cut a partial line from %s", segment.open_path)
            raise
        segment.size += len(data)
        segment.unsynced = True

    def _fsync_segment(self) -> None:
        segment = self._segment
        if segment is not None and segment.unsynced:
            os.fsync(segment.fd)
            segment.unsynced = False
        self._last_fsync = self._clock()

    def _fsync_if_due(self) -> None:
        if _past(self._clock(), self._last_fsync, self.fsync_interval_s):
            self._fsync_segment()

    def _drop_if_removed(self) -> None:
        """Give up the open segment when it is no longer in the spool (removed, or the
        directory with it): written on, its events would be reported written and be nowhere.
        The next line opens a new segment, or fails loudly when the directory is gone.

        :raises OSError: when the segment cannot be examined.
        """
        segment = self._segment
        if segment is None or os.fstat(segment.fd).st_nlink > 0:
            return
        logger.error(
            "audit spool %s: the open segment %s was removed from the spool; its events "
            "written so far are lost, the next ones go to a new segment",
            self.directory,
            segment.open_path.name,
        )
        self._segment = None
        os.close(segment.fd)

    def _complete_if_old(self) -> bool:
        """Complete the open segment if it is ``segment_max_age_s`` old; False when that
        failed (see :meth:`_rotate`)."""
        segment = self._segment
        if segment is not None and _past(self._clock(), segment.opened_at, self.segment_max_age_s):
            return self._rotate()
        return True

    def _rotate(self) -> bool:
        """Complete the open segment (it is full or old); False when that failed. A segment
        that cannot be completed (its rename fails: a read-only directory, no inodes) stays
        the open one, written on past its size, and is tried again at the next rotation: its
        events are on disk and the next ones can follow them, while closed and left hidden
        Spark would never read it (only a restart's recovery completed it), and the events
        after it would be lost."""
        try:
            self._complete()
        except OSError as exc:
            if self._segment is None:  # completed; the directory's fsync failed
                logger.error("audit spool %s: %s", self.directory, exc)
                return True
            logger.error(
                "audit spool %s: cannot complete segment %s, written on until it can: %s",
                self.directory,
                self._segment.open_path.name,
                exc,
            )
            return False
        return True

    def _complete(self) -> None:
        """:raises OSError: with the segment still open when it was not renamed."""
        segment = self._segment
        if segment is None:
            return
        self._fsync_segment()
        os.rename(segment.open_path, segment.final_path)
        self._segment = None
        os.close(segment.fd)
        self._fsync_directory()

    def _fsync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _recover(self, open_path: Path) -> None:
        data = open_path.read_bytes()
        complete, _, torn = data.rpartition(b"\n")
        kept: list[bytes] = []
        dropped = 0
        for line in complete.split(b"\n") if complete else ():
            if _is_json_object(line):
                kept.append(line + b"\n")
            else:
                dropped += 1
        final_path = self.directory / open_path.name[len(_OPEN_PREFIX) : -len(_OPEN_SUFFIX)]
        if not kept:
            open_path.unlink()
            outcome = "removed it, nothing was complete"
        else:
            payload = b"".join(kept)
            if payload != data:
                with open_path.open("r+b") as file:
                    file.truncate(0)
                    file.write(payload)
            fd = os.open(open_path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            # A fresh mtime: Spark's file source skips files older than its maxFileAge.
            os.utime(open_path)
            os.rename(open_path, final_path)
            outcome = f"completed it as {final_path.name}"
        self._fsync_directory()
        logger.warning(
            "audit spool: recovered segment %s left open by a crash: kept %d events, "
            "dropped %d bad lines and %d bytes of a torn last line; %s",
            open_path.name,
            len(kept),
            dropped,
            len(torn),
            outcome,
        )


def _is_json_object(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def recorded_client_id(client_id: str | None) -> str | None:
    """``client_id`` as an event records it: its first 200 characters and its length when
    longer (:func:`policies.rules.shown_value`). A request header's client id may be 32,767
    characters, and one request is up to ``judged.request.max.items`` events (or, for Produce,
    a summary per topic it names), each with the client id: whole, a 40 KB request wrote
    16 MB of audit, past what ``client.audit.events.per.sec`` assumes an event costs."""
    return None if client_id is None else shown_value(client_id)


EVENT_MAX_BYTES: Final = 512 * 1024
"""The most one event's line takes. An event's texts are the clients' (resource names,
config names and values, messages quoting them), whole, and a request may be megabytes: a
line past the audit topic's record size (aiokafka's ``max_request_size`` and Kafka's
``message.max.bytes``, about 1 MB) was refused by the topic sink with the rest of its batch,
so a client could take its own decision, and its neighbours', out of the topic's table and
leave a gap in the topic's chain."""
SHORTENED_CHARS: Final = 1000
"""What an over-long event keeps of each long text (see :func:`bounded_event`)."""


def bounded_event(event: AuditEvent) -> AuditEvent:
    """``event``, when its line takes at most :data:`EVENT_MAX_BYTES`. Otherwise each text of
    it longer than :data:`SHORTENED_CHARS` is shortened to its start, its length and its
    SHA-256 (``<start>... (N characters, sha256 <hex>)``: a value can still be checked
    against the one recorded elsewhere); if the line is still too long, only the first of its
    config changes and topic configs that fit are kept, and its message says how many."""
    if _line_bytes(event) <= EVENT_MAX_BYTES:
        return event
    event = _shortened_texts(event)
    changes = event.config_changes or ()
    configs = list((event.topic_spec.configs if event.topic_spec else {}).items())
    kept_changes, kept_configs = len(changes), len(configs)
    cut = event
    while _line_bytes(cut) > EVENT_MAX_BYTES and (kept_changes or kept_configs):
        kept_changes, kept_configs = kept_changes // 2, kept_configs // 2
        note = (
            f"[audit: event over {EVENT_MAX_BYTES} bytes: {kept_changes} of {len(changes)} "
            f"config changes and {kept_configs} of {len(configs)} topic configs recorded]"
        )
        cut = dataclasses.replace(
            event,
            config_changes=None if event.config_changes is None else changes[:kept_changes],
            topic_spec=None
            if event.topic_spec is None
            else dataclasses.replace(event.topic_spec, configs=dict(configs[:kept_configs])),
            message=note if event.message is None else f"{event.message} {note}",
        )
    return cut


def _line_bytes(event: AuditEvent) -> int:
    return len(event.to_json_line())  # ASCII: non-ASCII characters are written as \u escapes


def _shortened(text: str) -> str:
    if len(text) <= SHORTENED_CHARS:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{text[:SHORTENED_CHARS]}... ({len(text)} characters, sha256 {digest})"


def _shortened_or_none(text: str | None) -> str | None:
    return None if text is None else _shortened(text)


def _shortened_texts(event: AuditEvent) -> AuditEvent:
    changes = event.config_changes
    spec = event.topic_spec
    return dataclasses.replace(
        event,
        principal=_shortened_or_none(event.principal),
        client_id=_shortened_or_none(event.client_id),
        resource_name=_shortened(event.resource_name),
        message=_shortened_or_none(event.message),
        config_changes=None
        if changes is None
        else tuple(
            ConfigChange(
                name=_shortened(c.name),
                before=_shortened_or_none(c.before),
                after=_shortened_or_none(c.after),
                sensitive=c.sensitive,
            )
            for c in changes
        ),
        topic_spec=None
        if spec is None
        else TopicSpec(
            partitions=spec.partitions,
            replication_factor=spec.replication_factor,
            configs={_shortened(k): _shortened(v) for k, v in spec.configs.items()},
        ),
    )


# --------------------------------------------------------------------------------------------
# Summaries of allowed Produce traffic.


_SummaryKey = tuple[str, str | None, str | None, str | None]
"""(topic, principal, client_id, policy_version)"""

FOLDED: Final = "*"
"""The topic of the summary that folds the keys over the bound (no topic has this name)."""


@dataclasses.dataclass(slots=True, kw_only=True)
class _ProduceTally:
    requests: int = 0
    records_examined: int = 0
    bytes_examined: int = 0
    api_version: int = 0


class ProduceSummarizer:
    """Accumulates allowed Produce traffic; one summary event per key per interval.

    The key is (topic, principal, client_id, policy_version): a reload within an interval
    splits its summaries by the version that let the traffic through. A summary covers
    ``[interval_start, interval_end]``, where the interval starts at the previous
    :meth:`flush` (or at ``start_ms``); its ``event_count`` is the number of Produce
    requests, its ``api_version`` the highest version seen. ``client_address`` is null: one
    key can span many connections. Pure: no clock, no I/O; the caller passes times.

    Names are counted as the client wrote them, before any broker says whether the topic
    exists, so a client could make up a new name for every share. An interval keeps at most
    ``max_keys`` keys; the shares of further keys, and of names no topic can have, are folded
    into one summary per principal and policy version, topic :data:`FOLDED` with a null
    client id and a message saying so: every share is still counted, in bounded memory and
    events. The principal is kept: one client's made-up names fill the keys for everyone, and
    folded under a null principal every other principal's writes of the interval after them
    were nobody's. At most ``max_keys`` principals are folded so; the shares of further ones
    fold under a null principal.
    """

    def __init__(
        self,
        *,
        gateway_instance: str,
        mode: Mode,
        interval_ms: int,
        start_ms: int,
        max_keys: int = 10_000,
    ) -> None:
        """:raises ValueError: if ``interval_ms`` or ``max_keys`` is not positive."""
        if interval_ms <= 0:
            raise ValueError(f"interval_ms must be > 0, got {interval_ms}")
        if max_keys <= 0:
            raise ValueError(f"max_keys must be > 0, got {max_keys}")
        self.gateway_instance = gateway_instance
        self.mode: Mode = mode
        self.interval_ms = interval_ms
        self.max_keys = max_keys
        self._interval_start_ms = start_ms
        self._tallies: dict[_SummaryKey, _ProduceTally] = {}
        self._keys = 0
        """Keys of the interval other than the folded ones."""
        self._folded = 0
        """Folded keys of the interval (one per principal and policy version)."""

    def add(
        self,
        *,
        topic: str,
        principal: str | None,
        client_id: str | None,
        api_version: int,
        records_examined: int,
        bytes_examined: int,
        policy_version: str | None = None,
    ) -> None:
        """Count one allowed Produce request's share for ``topic`` (``client_id`` as
        :func:`recorded_client_id` records it)."""
        key = (topic, principal, recorded_client_id(client_id), policy_version)
        tally = self._tallies.get(key)
        if tally is None:
            if self._keys >= self.max_keys or topic_name_problem(topic) is not None:
                key = self._folded_key(principal, policy_version)
                tally = self._tallies.setdefault(key, _ProduceTally())
            else:
                self._keys += 1
                tally = self._tallies[key] = _ProduceTally()
        tally.requests += 1
        tally.records_examined += records_examined
        tally.bytes_examined += bytes_examined
        tally.api_version = max(tally.api_version, api_version)

    def _folded_key(self, principal: str | None, policy_version: str | None) -> _SummaryKey:
        """The folded key of ``principal``'s shares; under a null principal once
        ``max_keys`` principals are folded."""
        key = (FOLDED, principal, None, policy_version)
        if key in self._tallies:
            return key
        if self._folded >= self.max_keys:
            key = (FOLDED, None, None, policy_version)
            if key in self._tallies:
                return key
        self._folded += 1
        return key

    def due(self, now_ms: int) -> bool:
        """True once the current interval is ``interval_ms`` long, or the clock has gone back
        past its start (the interval then ends there, and the next starts at ``now_ms``)."""
        return _past(now_ms, self._interval_start_ms, self.interval_ms)

    def flush(self, now_ms: int) -> tuple[AuditEvent, ...]:
        """End the interval at ``now_ms``: its summaries, sorted by key; a new interval starts."""
        start = format_time(self._interval_start_ms)
        end = format_time(max(now_ms, self._interval_start_ms))
        events = tuple(
            AuditEvent(
                time=end,
                gateway_instance=self.gateway_instance,
                client_address=None,
                principal=principal,
                client_id=client_id,
                api="Produce",
                api_version=tally.api_version,
                resource_type="topic",
                resource_name=topic,
                action="produce",
                mode=self.mode,
                verdict="allowed",
                records_examined=tally.records_examined,
                bytes_examined=tally.bytes_examined,
                interval_start=start,
                interval_end=end,
                event_count=tally.requests,
                event_kind="summary",
                policy_version=policy_version,
                message=self._folded_message if topic == FOLDED else None,
            )
            for (topic, principal, client_id, policy_version), tally in sorted(
                self._tallies.items(), key=lambda item: _sort_key(item[0])
            )
        )
        self._tallies.clear()
        self._keys = 0
        self._folded = 0
        self._interval_start_ms = now_ms  # earlier than the interval's end if the clock went back
        return events

    @property
    def _folded_message(self) -> str:
        return (
            f"Produce traffic of (topic, principal, client id) keys beyond the first "
            f"{self.max_keys:,} of this interval (audit.produce_summary_max_keys), and to names "
            "no topic can have, counted here together by principal: event_count is the "
            "requests' shares"
        )


def _sort_key(key: _SummaryKey) -> tuple[str, str, str, str]:
    topic, principal, client_id, policy_version = key
    return topic, principal or "", client_id or "", policy_version or ""


# --------------------------------------------------------------------------------------------
# The emitter: the gateway's front.


class AuditEmitter:
    """Queues events from the request path and writes them to the sinks in a writer task.

    ``queue_max_events`` bounds the queue (the backpressure point); the writer takes up to
    ``batch_max_events`` at a time. Every ``tick_s`` the writer runs sink maintenance and
    flushes due Produce summaries. With a ``registry``, it registers
    ``kpg_audit_queue_depth``, ``kpg_audit_events_total{verdict}`` (events emitted, summaries
    included) and ``kpg_audit_events_failed_total`` on it.
    """

    def __init__(
        self,
        sinks: Sequence[AuditSink],
        *,
        summarizer: ProduceSummarizer | None = None,
        gateway_instance: str | None = None,
        queue_max_events: int = 10_000,
        batch_max_events: int = 1_000,
        tick_s: float = 1.0,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """:raises ValueError: on no sinks, or a non-positive size or tick."""
        if not sinks:
            raise ValueError("AuditEmitter needs at least one sink")
        if queue_max_events <= 0 or batch_max_events <= 0 or tick_s <= 0:
            raise ValueError("queue_max_events, batch_max_events and tick_s must be > 0")
        self._sinks = tuple(sinks)
        self._summarizer = summarizer
        if gateway_instance is None:
            gateway_instance = summarizer.gateway_instance if summarizer is not None else ""
        self.gateway_instance = gateway_instance
        self._late_emits: set[asyncio.Task[None]] = set()
        self.chain_id = new_event_id()
        """This emitter's chain: one per process start (see the module contract)."""
        self._next_seq = 0
        self._prev_hash: str | None = None
        self._queue: asyncio.Queue[AuditEvent | None] = asyncio.Queue(queue_max_events)
        self._batch_max_events = batch_max_events
        self._tick_s = tick_s
        self._clock = clock
        self._writer: asyncio.Task[None] | None = None
        self._closing = False
        self._waiting_emits = 0
        self._written_waiters: dict[str, asyncio.Future[bool]] = {}
        self._failed_events = 0
        self._events_total: Counter | None = None
        self._failed_total: Counter | None = None
        self._depth: Gauge | None = None
        if registry is not None:
            self._depth = Gauge(
                "kpg_audit_queue_depth",
                "Audit events waiting to be written.",
                registry=registry,
                multiprocess_mode="livesum",
            )
            # Read at each scrape in one process; under kpg run --workers the supervisor
            # reads the workers' files instead, which _note_depth keeps current.
            self._depth.set_function(self._queue.qsize)
            self._events_total = Counter(
                "kpg_audit_events",
                "Audit events emitted, by verdict (a Produce summary counts once).",
                ["verdict"],
                registry=registry,
            )
            self._failed_total = Counter(
                "kpg_audit_events_failed",
                "Audit events a sink failed to write (once per event per failing sink).",
                registry=registry,
            )

    @property
    def sinks(self) -> tuple[AuditSink, ...]:
        return self._sinks

    @property
    def running(self) -> bool:
        """Started, not closing, and its writer alive: :meth:`emit` would take an event."""
        return self._writer is not None and not self._closing and not self._writer.done()

    @property
    def queue_depth(self) -> int:
        """Events emitted and not yet taken by the writer."""
        return self._queue.qsize()

    @property
    def failed_events(self) -> int:
        """Events a sink failed to write, once per event per failing sink."""
        return self._failed_events

    async def start(self) -> None:
        """Open the sinks (in a worker thread) and start the writer task.

        :raises Exception: whatever a sink's ``open`` raises; start-up should stop.
        """
        if self._writer is not None:
            raise RuntimeError("AuditEmitter.start called twice")
        for sink in self._sinks:
            await asyncio.to_thread(sink.open)
        self._writer = asyncio.create_task(self._run(), name="kpg-audit-writer")
        self._writer.add_done_callback(self._writer_done)

    async def emit_written(self, event: AuditEvent) -> bool:
        """Queue ``event`` and return once the sinks have taken it (written to the OS for the
        spool), so a decision the client is told about survives the gateway being killed.

        :returns: whether every sink took it (a failure was counted and logged).
        :raises RuntimeError: as :meth:`emit`.
        """
        return await self.emit_all_written((event,))

    async def emit_all_written(self, events: Sequence[AuditEvent]) -> bool:
        """Queue ``events`` in order and return once the sinks have taken the last of them.

        :returns: whether every sink took every one of them.
        :raises RuntimeError: as :meth:`emit`.
        """
        loop = asyncio.get_running_loop()
        waiters = [loop.create_future() for _ in events]
        for event, waiter in zip(events, waiters, strict=True):
            self._written_waiters[event.event_id] = waiter
        try:
            for event in events:
                await self.emit(event)
            return all([await waiter for waiter in waiters])
        finally:
            for event in events:
                self._written_waiters.pop(event.event_id, None)

    async def emit(self, event: AuditEvent) -> None:
        """Queue ``event``; waits while the queue is full.

        :raises RuntimeError: if the emitter is not started, is closing, or its writer died.
        """
        if self._writer is None or self._closing or self._writer.done():
            raise RuntimeError("audit emitter is not running; refusing to lose an event")
        self._waiting_emits += 1
        try:
            await self._queue.put(event)
        finally:
            self._waiting_emits -= 1
        self._note_depth()
        self._count_emitted((event,))

    def lifecycle(self, action: str, *, policy_version: str, message: str) -> None:
        """Queue a lifecycle event of this gateway (``start``, ``stop``, ``reload``,
        ``reload_refused``) without waiting: it keeps its place among the events emitted so
        far, even when the queue is full (it then waits in a task of its own, which
        :meth:`close` waits for).

        :raises ValueError: for an unknown action.
        :raises RuntimeError: as :meth:`emit`.
        """
        if action not in LIFECYCLE_ACTIONS:
            raise ValueError(f"lifecycle action must be one of {LIFECYCLE_ACTIONS}, got {action!r}")
        if self._writer is None or self._closing or self._writer.done():
            raise RuntimeError("audit emitter is not running; refusing to lose an event")
        refused = action == "reload_refused"
        event = AuditEvent(
            gateway_instance=self.gateway_instance,
            client_address=None,
            principal=None,
            client_id=None,
            api=LIFECYCLE_API,
            api_version=0,
            resource_type=LIFECYCLE_RESOURCE_TYPE,
            resource_name=self.gateway_instance,
            action=action,
            mode="enforce",
            verdict="denied" if refused else "allowed",
            message=message,
            event_kind="lifecycle",
            policy_version=policy_version,
        )
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self._waiting_emits += 1
            task = asyncio.get_running_loop().create_task(
                self._put_late(event), name=f"kpg-audit-lifecycle-{action}"
            )
            self._late_emits.add(task)
            task.add_done_callback(self._late_emits.discard)
            return
        self._note_depth()
        self._count_emitted((event,))

    async def _put_late(self, event: AuditEvent) -> None:
        try:
            await self._queue.put(event)
        finally:
            self._waiting_emits -= 1
        self._note_depth()
        self._count_emitted((event,))

    def record_allowed_produce(
        self,
        *,
        topic: str,
        principal: str | None,
        client_id: str | None,
        api_version: int,
        records_examined: int,
        bytes_examined: int,
        policy_version: str | None = None,
    ) -> None:
        """Add an allowed Produce request's share for ``topic`` to the next summary.

        :raises RuntimeError: if the emitter has no summarizer, or is not running.
        """
        if self._summarizer is None:
            raise RuntimeError("AuditEmitter was built without a ProduceSummarizer")
        if self._writer is None or self._closing or self._writer.done():
            raise RuntimeError("audit emitter is not running; refusing to lose an event")
        self._summarizer.add(
            topic=topic,
            principal=principal,
            client_id=client_id,
            api_version=api_version,
            records_examined=records_examined,
            bytes_examined=bytes_examined,
            policy_version=policy_version,
        )

    async def close(self) -> None:
        """Refuse new events, write everything queued plus pending summaries, close sinks."""
        if self._writer is None:
            return
        self._closing = True
        with contextlib.suppress(asyncio.QueueFull):  # a full queue wakes the writer anyway
            self._queue.put_nowait(None)
        await self._writer

    # -- writer ------------------------------------------------------------------------------

    def _writer_done(self, task: asyncio.Task[None]) -> None:
        for waiter in self._written_waiters.values():
            if not waiter.done():
                waiter.set_exception(RuntimeError("the audit writer stopped before writing"))
        if task.cancelled():
            logger.error(
                "AUDIT EVENTS LOST: the audit writer was cancelled with %d events queued; "
                "call AuditEmitter.close() instead",
                self._queue.qsize(),
            )
        elif task.exception() is not None:
            logger.critical(
                "AUDIT EVENTS LOST: the audit writer died with %d events queued",
                self._queue.qsize(),
                exc_info=task.exception(),
            )

    async def _run(self) -> None:
        last_tick = self._clock()
        while True:
            batch = await self._next_batch()
            now = self._clock()
            stop = next((i for i, e in enumerate(batch) if _is_stop(e)), None)
            if self._summarizer is not None and stop is not None:
                # the last interval's summaries go before the stop, which ends the chain
                batch[stop:stop] = self._flush_summaries(now)
            elif self._summarizer is not None and self._summarizer.due(int(now * 1000)):
                batch.extend(self._flush_summaries(now))
            if batch:
                await self._write(batch)
            if _past(now, last_tick, self._tick_s):
                last_tick = now
                await asyncio.to_thread(self._maintain_sinks)
            if self._closing and self._queue.empty() and self._waiting_emits == 0:
                break
        if self._summarizer is not None:
            final = self._flush_summaries(self._clock())
            if final:
                await self._write(final)
        await asyncio.to_thread(self._close_sinks)

    async def _next_batch(self) -> list[AuditEvent]:
        try:
            first = await asyncio.wait_for(self._queue.get(), timeout=self._tick_s)
        except TimeoutError:
            return []
        items = [first]
        while len(items) < self._batch_max_events and not self._queue.empty():
            items.append(self._queue.get_nowait())
        self._note_depth()
        return [item for item in items if item is not None]

    def _flush_summaries(self, now: float) -> list[AuditEvent]:
        assert self._summarizer is not None
        summaries = list(self._summarizer.flush(int(now * 1000)))
        self._count_emitted(summaries)
        return summaries

    def _note_depth(self) -> None:
        """Store the queue's depth (for prometheus_client's multiprocess files)."""
        if self._depth is not None:
            self._depth.set(self._queue.qsize())

    def _count_emitted(self, events: Sequence[AuditEvent]) -> None:
        if self._events_total is not None:
            for event in events:
                self._events_total.labels(verdict=event.verdict).inc()

    async def _write(self, batch: Sequence[AuditEvent]) -> None:
        lost, first_lost = await asyncio.to_thread(self._write_to_sinks, batch)
        if lost:
            self._failed_events += lost
            if self._failed_total is not None:
                self._failed_total.inc(lost)
        # A failed write was counted and logged above; whoever waits for the event hears
        # whether every sink took it, and decides (audit.on_failure).
        for index, event in enumerate(batch):
            waiter = self._written_waiters.get(event.event_id)
            if waiter is not None and not waiter.done():
                waiter.set_result(index < first_lost)

    def _chain(self, batch: Sequence[AuditEvent]) -> list[EventLine]:
        """The next links of the chain; only the writer calls this, one batch at a time."""
        lines = []
        for event in batch:
            linked = event.chained(self.chain_id, self._next_seq, self._prev_hash)
            data = linked.to_json_line().encode("utf-8")
            if len(data) > EVENT_MAX_BYTES:
                linked = bounded_event(linked)
                data = linked.to_json_line().encode("utf-8")
            lines.append(EventLine(linked, data))
            self._next_seq += 1
            self._prev_hash = line_hash(data)
        return lines

    def _write_to_sinks(self, batch: Sequence[AuditEvent]) -> tuple[int, int]:
        """Write ``batch`` to every sink: the events lost (once per event per failing sink),
        and the index of the first event some sink lost (``len(batch)`` when none)."""
        lines = self._chain(batch)
        lost_total = 0
        first_lost = len(batch)
        for sink in self._sinks:
            try:
                sink.write(lines)
            except Exception as exc:  # whatever a sink raises, its loss is counted and logged
                lost = len(batch) - exc.written if isinstance(exc, SinkWriteError) else len(batch)
                lost_total += lost
                first_lost = min(first_lost, len(batch) - lost)
                logger.error(
                    "AUDIT EVENTS LOST: %d of %d events could not be written to %r "
                    "(first lost event_id=%s): %s",
                    lost,
                    len(batch),
                    sink,
                    batch[len(batch) - lost].event_id,
                    exc,
                    exc_info=exc,
                )
        return lost_total, first_lost

    def _maintain_sinks(self) -> None:
        for sink in self._sinks:
            try:
                sink.maintain()
            except Exception:
                logger.exception("audit sink %r failed its maintenance (rotation/fsync)", sink)

    def _close_sinks(self) -> None:
        for sink in self._sinks:
            try:
                sink.close()
            except Exception:
                logger.exception("audit sink %r failed to close; its open data may be lost", sink)


class KafkaTopicSink:
    """Audit events as records of a topic on the upstream cluster (for production, where the
    Spark job reads the topic with Spark's Kafka connector).

    The emitter calls sinks from a worker thread; this sink hands the work to aiokafka on the
    gateway's event loop (given with :meth:`bind_loop` before the emitter starts) and waits.
    """

    def __init__(
        self,
        bootstrap_servers: Sequence[str],
        topic: str,
        *,
        replication_factor: int = -1,
        partitions: int = 1,
        timeout_s: float = 30.0,
        client_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.bootstrap_servers = list(bootstrap_servers)
        self._client_kwargs = dict(client_kwargs or {})  # TLS and SASL: upstream_security
        self.topic = topic
        self.replication_factor = replication_factor
        self.partitions = partitions
        self.timeout_s = timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._producer: Any = None

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._loop is None:
            coro.close()
            raise RuntimeError("KafkaTopicSink.bind_loop was not called")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(self.timeout_s)

    def open(self) -> None:
        self._run(self._open())

    async def _open(self) -> None:
        from aiokafka import AIOKafkaProducer
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic
        from aiokafka.errors import TopicAlreadyExistsError, for_code

        admin = AIOKafkaAdminClient(
            bootstrap_servers=self.bootstrap_servers, client_id="kpg-audit", **self._client_kwargs
        )
        try:
            await admin.start()
            response = await admin.create_topics(
                [
                    NewTopic(
                        self.topic,
                        self.partitions,
                        self.replication_factor,
                        replica_assignments={} if self.replication_factor == -1 else None,
                    )
                ]
            )
        finally:
            await admin.close()
        for topic_error in response.to_object()["topic_errors"]:
            code = topic_error["error_code"]
            if code not in (0, TopicAlreadyExistsError.errno):
                raise RuntimeError(
                    f"audit topic {self.topic}: cannot create it: "
                    f"{for_code(code).__name__}: {topic_error.get('error_message')}"
                )
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap_servers,
            client_id="kpg-audit",
            acks="all",
            **self._client_kwargs,
        )
        await self._producer.start()

    def write(self, lines: Sequence[EventLine]) -> None:
        written = self._run(self._send(lines))
        if written < len(lines):
            raise SinkWriteError(
                written,
                RuntimeError(
                    f"audit topic {self.topic}: {len(lines) - written} events not acknowledged"
                ),
            )

    async def _send(self, lines: Sequence[EventLine]) -> int:
        futures = [
            await self._producer.send(self.topic, key=line.event.event_id.encode(), value=line.data)
            for line in lines
        ]
        results = await asyncio.gather(*futures, return_exceptions=True)
        written = 0
        for result in results:  # the acknowledged prefix, in order
            if isinstance(result, BaseException):
                logger.error("audit topic %s: write failed: %r", self.topic, result)
                break
            written += 1
        return written

    def maintain(self) -> None:
        return None

    def close(self) -> None:
        if self._producer is not None:
            self._run(self._producer.stop())
            self._producer = None
