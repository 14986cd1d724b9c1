"""The gateway's own state: settings a real broker would not accept (the per-topic
``record.validation.policy``, dynamic client configs per user / client-id), kept across
restarts and shared by every gateway instance in front of one cluster.

Contracts, stated once:

- The state is a map per namespace from key to value, all text. Reads (:meth:`get`,
  :meth:`items`) are synchronous and come from an in-memory snapshot, so the request path never
  waits on I/O to read. :meth:`items` hands out a read-only mapping that later writes never
  change (namespaces are copied on write, never mutated once published).
- :meth:`put` and :meth:`delete_prefix` return once the change is durable (SQLite committed;
  Kafka write acknowledged with acks=all) *and* visible to this instance's reads. A write that
  cannot be made so raises :class:`StateStoreError`; nothing is dropped silently. A cancelled
  SQLite write still finishes and is applied; a cancelled Kafka write may or may not land, and
  so may one that raised (``maybe_written``: the batch was handed to the producer).
- Other instances see a write: the SQLite store (one host: worker processes of `kpg run
  --workers`, or gateways sharing the file) on its next read, which first asks the file
  whether anyone has committed since it was last read (``PRAGMA data_version``, about 3 us);
  the Kafka store (any number of hosts) within about ``refresh_interval_s``, as it tails its
  topic.
- Concurrent writers of one key: the last committed (SQLite) or the later offset (Kafka) wins,
  and every instance converges on it.
- What a store cannot read (a row or record of another program or another version of the
  gateway, a file of a newer format) is never taken as absent: it may be a topic's
  record.validation.policy. Start fails; found later, :attr:`settles` holds and
  :meth:`settle` and writes fail until it is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Protocol, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError, TopicAlreadyExistsError, for_code

from .config import HostPort
from .files import UnsafePathError, check_private, make_private_dirs
from .tasks import TaskSet

log = logging.getLogger(__name__)

_EMPTY: Mapping[str, str] = MappingProxyType({})
T = TypeVar("T")

_MAX_BATCH_BYTES: Final = 1024 * 1024
"""The largest write, as one record batch (Kafka's default max.request.size)."""

Change = tuple[str, str, str | None]
"""(namespace, key, value); a None value deletes the key."""


class StateStoreError(Exception):
    """The state store cannot load, or cannot make a write durable and visible.

    ``maybe_written``: the write may still take effect (the Kafka store's batch was handed to
    the producer: not acknowledged in time, or acknowledged and not read back), so the caller
    must not say it was not made. False: nothing of it was written (SQLite rolls back)."""

    def __init__(self, message: str, *, maybe_written: bool = False) -> None:
        super().__init__(message)
        self.maybe_written = maybe_written


class StateStore(Protocol):
    @property
    def settles(self) -> bool:
        """Whether a read may lag writes made elsewhere (another instance), or the store
        holds what it cannot read, so that a reader must :meth:`settle` before it trusts
        the absence of a key it has not read fresh."""

    async def start(self) -> None:
        """Load everything.

        :raises StateStoreError: when the store cannot be opened or read.
        """

    async def close(self) -> None: ...

    def get(self, namespace: str, key: str) -> str | None: ...

    def items(self, namespace: str) -> Mapping[str, str]:
        """A read-only snapshot of one namespace."""

    async def put(self, namespace: str, key: str, value: str | None) -> None:
        """Set ``key`` (None deletes it); returns once durable and visible to :meth:`get`.

        :raises StateStoreError: when the write is not known to be durable and visible.
        """

    async def put_all(self, namespace: str, changes: Mapping[str, str | None]) -> None:
        """Apply several :meth:`put` changes as one: every one of them or, on error, none.

        :raises StateStoreError: as :meth:`put`.
        """

    async def put_all_if(
        self,
        namespace: str,
        changes: Mapping[str, str | None],
        *,
        prefix: str,
        expected: Mapping[str, str],
        admit: Callable[[Mapping[str, str]], bool] | None = None,
    ) -> bool:
        """:meth:`put_all`, made only if the keys of ``namespace`` that start with ``prefix``
        are still exactly ``expected`` (key -> value) as the write is made: what a decision
        was judged against. False, with nothing written, when they are not, or when
        ``admit`` (given the whole namespace as the write is made) says no: a bound on what
        the namespace holds, which writes judged at the same time would each pass.

        :raises StateStoreError: as :meth:`put`.
        """

    async def delete_prefix(self, namespace: str, key_prefix: str) -> None:
        """Delete every key of ``namespace`` that starts with ``key_prefix``, as one write.

        :raises StateStoreError: as :meth:`put`.
        """

    async def settle(self) -> None:
        """Return once every write committed anywhere before the call is visible here.

        :raises StateStoreError: when that cannot be known within the store's timeout.
        """


def _described(namespace: str, changes: Mapping[str, str | None]) -> str:
    """The keys of a write, as error messages name them."""
    return (
        f"{namespace}/{{{', '.join(changes)}}}"
        if len(changes) > 1
        else (f"{namespace}/{next(iter(changes), '')}")
    )


def _check_names(namespace: str, key: str) -> None:
    if not namespace or "\0" in namespace:
        raise ValueError(f"state namespace must be non-empty text without NUL: {namespace!r}")
    if not isinstance(key, str):
        raise ValueError(f"state key must be text: {key!r}")


class _Snapshot:
    """The in-memory view both stores serve reads from; changed only on the event loop."""

    def __init__(self) -> None:
        self._data: dict[str, Mapping[str, str]] = {}

    def get(self, namespace: str, key: str) -> str | None:
        return self._data.get(namespace, _EMPTY).get(key)

    def items(self, namespace: str) -> Mapping[str, str]:
        return self._data.get(namespace, _EMPTY)

    def _apply(self, changes: Iterable[Change]) -> None:
        """Publish ``changes``: each touched namespace is copied once, then replaced whole."""
        touched: dict[str, dict[str, str]] = {}
        for namespace, key, value in changes:
            entries = touched.get(namespace)
            if entries is None:
                entries = touched[namespace] = dict(self._data.get(namespace, _EMPTY))
            if value is None:
                entries.pop(key, None)
            else:
                entries[key] = value
        for namespace, entries in touched.items():
            if entries:
                self._data[namespace] = MappingProxyType(entries)
            else:
                self._data.pop(namespace, None)

    def _replace_all(self, data: Mapping[str, dict[str, str]]) -> None:
        self._data = {ns: MappingProxyType(entries) for ns, entries in data.items() if entries}

    def _keys_with_prefix(self, namespace: str, key_prefix: str) -> list[str]:
        return [k for k in self._data.get(namespace, _EMPTY) if k.startswith(key_prefix)]


# --- SQLite -----------------------------------------------------------------------------

_SCHEMA = """
CREATE TABLE IF NOT EXISTS gateway_state (
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID
"""


_FORMAT: Final = 1
"""``PRAGMA user_version`` of a state file in the format above (0: a file an earlier version
made, the same format). A gateway that changes the format sets a higher number, and this one
refuses such a file rather than misread it."""


class SqliteStore(_Snapshot):
    """The embedded default: one SQLite file (WAL mode, synchronous=FULL).

    Writes run in a worker thread, one at a time. Reads are served from the snapshot, but
    other processes may write the same file (the workers of ``kpg run --workers N`` do), so
    every :meth:`get` and :meth:`items` first asks a second connection, kept on the event
    loop's thread, for ``PRAGMA data_version``: when anyone has committed since the snapshot
    was read, the table is read again there and then (it is small: per-topic settings and
    client configs), so a change made through one worker decides the next request on every
    other. Asking costs about 3 us and never waits for a writer (WAL readers do not). The
    snapshot is only ever replaced by such a whole read, this instance's own writes included,
    so it never goes back in time. A file on a network file system is not supported
    (SQLite's WAL needs shared memory on one host).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        refresh_interval_s: float = 2.0,
        busy_timeout_s: float = 10.0,
    ) -> None:
        super().__init__()
        self.path = Path(path)
        self.refresh_interval_s = refresh_interval_s
        self.busy_timeout_s = busy_timeout_s
        self._conn: sqlite3.Connection | None = None
        self._db_lock = threading.Lock()
        """Held by the worker thread using the connection: a cancelled await does not stop
        the thread, so the asyncio lock alone could let a second thread in."""
        self._lock = asyncio.Lock()
        """One write at a time from this instance (and its read-back after the commit)."""
        self._tasks = TaskSet()
        self._reader: sqlite3.Connection | None = None
        """Used on the event loop's thread only: data_version and whole reads."""
        self._data_version: int | None = None
        self._identity: tuple[int, int] | None = None
        """(device, inode) of the file the connections have open."""
        self._unreadable: str | None = None
        """Why the file's last read found rows this store cannot read (not text: another
        program's or another version's), else None; see :meth:`settle`."""

    async def start(self) -> None:
        """Open (creating it and its directory if needed) the file and load it; start the
        periodic refresh.

        :raises StateStoreError: when the file cannot be opened, set up or read.
        """
        if self._conn is not None:
            return
        try:
            self._conn = await asyncio.to_thread(self._open)
        except UnsafePathError as exc:
            raise StateStoreError(str(exc)) from exc
        except (sqlite3.Error, OSError) as exc:
            raise StateStoreError(f"state store {self.path}: cannot open: {exc}") from exc
        self._identity = _file_identity(self.path)
        self._data_version = None  # a number of the connection it came from; load anew
        try:
            self._reader = self._open_reader()
            await self.refresh()
            self._check_readable()
        except BaseException:
            await self.close()
            raise
        log.info(
            "state store %s: loaded %d entries",
            self.path,
            sum(len(entries) for entries in self._data.values()),
        )
        self._tasks.spawn(self._refresh_periodically(), name=f"state-refresh:{self.path}")

    def _open(self) -> sqlite3.Connection:
        self._check_files()
        conn = sqlite3.connect(
            self.path, timeout=self.busy_timeout_s, isolation_level=None, check_same_thread=False
        )
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise sqlite3.OperationalError(f"cannot use WAL journal mode (got {mode!r})")
            conn.execute("PRAGMA synchronous=FULL")
            found = int(conn.execute("PRAGMA user_version").fetchone()[0])
            if found > _FORMAT:
                raise sqlite3.DatabaseError(
                    f"its format is {found} (PRAGMA user_version), written by a newer "
                    f"version of the gateway; this one reads format {_FORMAT} and older"
                )
            conn.execute(_SCHEMA)
            if found < _FORMAT:
                # A write, once per file, and not needed to read it (0 is the same format):
                # a file another process holds, or a read-only one, is stamped another time.
                with contextlib.suppress(sqlite3.OperationalError):
                    conn.execute(f"PRAGMA user_version={_FORMAT}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _check_files(self) -> None:
        """Create the file (mode 0600: it holds client configs) and its directory when
        missing, and refuse them when another local user can write them, or the WAL,
        shared-memory and journal files beside them (SQLite opens those it finds, and gives
        those it creates the file's mode): whoever can write them decides the policies.

        :raises UnsafePathError: naming the path (gateway.files).
        """
        path = self.path.resolve()  # where SQLite puts the -wal and -shm files too
        make_private_dirs(path.parent, "the state store's directory")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            pass
        else:
            os.close(fd)
        beside = (path.with_name(path.name + end) for end in ("-wal", "-shm", "-journal"))
        for name in (path, *beside):
            if name.exists():
                check_private(name, "state store file")

    def _open_reader(self) -> sqlite3.Connection:
        """The event loop's connection (the file exists and is in WAL mode by now).

        :raises StateStoreError: when it cannot be opened.
        """
        try:
            reader = sqlite3.connect(self.path, timeout=1.0, isolation_level=None)
            reader.execute("PRAGMA query_only=1")
        except sqlite3.Error as exc:
            raise StateStoreError(f"state store {self.path}: cannot open: {exc}") from exc
        return reader

    async def close(self) -> None:
        """Stop refreshing and close the file; a write under way finishes first."""
        await self._tasks.cancel_all()
        await asyncio.to_thread(self._close_connection)
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()

    def get(self, namespace: str, key: str) -> str | None:
        self._read_if_changed()
        return super().get(namespace, key)

    def items(self, namespace: str) -> Mapping[str, str]:
        self._read_if_changed()
        return super().items(namespace)

    def _read_if_changed(self) -> None:
        """Read the table again if anyone has committed since the snapshot was read; on an
        error, log it and serve the last snapshot (as a failed periodic refresh did)."""
        if self._reader is None:
            return
        try:
            self._reload(self._reader)
        except sqlite3.Error as exc:
            log.warning(
                "state store %s: cannot read: %s; serving the last state read", self.path, exc
            )

    def _reload(self, reader: sqlite3.Connection) -> None:
        """:raises sqlite3.Error: when the file cannot be read."""
        loaded = self._load(reader, self._data_version)
        if loaded is not None:
            self._data_version, data, unreadable = loaded
            if unreadable is not None and unreadable != self._unreadable:
                log.error("state store %s: %s", self.path, unreadable)
            self._unreadable = unreadable
            self._replace_all(data)

    def _check_readable(self) -> None:
        """:raises StateStoreError: while the file holds rows this store cannot read: what
        they say is unknown (a topic's record.validation.policy, a client config), so
        nothing is judged on the store, rather than on a view without them."""
        if self._unreadable is not None:
            raise StateStoreError(f"state store {self.path}: {self._unreadable}")

    def _close_connection(self) -> None:
        with self._db_lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the connection in this (worker) thread, alone."""
        with self._db_lock:
            if self._conn is None:
                raise StateStoreError(f"state store {self.path}: not open")
            return fn(self._conn)

    @property
    def settles(self) -> bool:
        """False: every read asks the file for what was committed first; True while the
        file holds rows this store cannot read, so that every Produce settles, and fails."""
        self._read_if_changed()
        return self._unreadable is not None

    async def settle(self) -> None:
        """Nothing to wait for: every read asks the file for what was committed first.

        :raises StateStoreError: while the file holds rows this store cannot read.
        """
        self._read_if_changed()
        self._check_readable()

    async def refresh(self) -> None:
        """Re-read the file if another connection has committed since the last read.

        :raises StateStoreError: when the file cannot be read.
        """
        if self._reader is None:
            raise StateStoreError(f"state store {self.path}: not open")
        await self._follow_the_file()
        assert self._reader is not None
        try:
            self._reload(self._reader)
        except sqlite3.Error as exc:
            raise StateStoreError(f"state store {self.path}: cannot read: {exc}") from exc

    async def _follow_the_file(self) -> None:
        """Open the file at :attr:`path` again when it is no longer the one the connections
        have open (removed, or replaced), as a worker started now would: written on, the
        removed file took changes clients were told were stored, lost at the next start, and
        workers started meanwhile judged by the file at the path.

        :raises StateStoreError: when the file at the path cannot be opened (tried again at
            the next write or refresh).
        """
        if self._reader is None:  # not started, or closed
            return
        if self._identity is not None and _file_identity(self.path) == self._identity:
            return
        log.warning(
            "state store %s: the file was removed or replaced since it was opened: opening "
            "the one at its path",
            self.path,
        )
        try:
            await asyncio.to_thread(self._reopen)
            reader, self._reader = self._reader, self._open_reader()
            reader.close()
            self._data_version = None
        except (UnsafePathError, sqlite3.Error, OSError) as exc:
            raise StateStoreError(
                f"state store {self.path}: the file was removed or replaced, and the one at "
                f"its path cannot be opened: {exc}"
            ) from exc

    def _reopen(self) -> None:
        with self._db_lock:
            conn, self._conn = self._conn, None
            self._identity = None
            if conn is not None:
                conn.close()
            self._conn = self._open()
            self._identity = _file_identity(self.path)

    @staticmethod
    def _load(
        conn: sqlite3.Connection, known_version: int | None
    ) -> tuple[int, dict[str, dict[str, str]], str | None] | None:
        """(data_version, the rows, why some rows cannot be read or None); None when
        nothing was committed since ``known_version``. A row whose namespace, key or value
        is not text (a BLOB or NULL: another program's or another version's) is not one this
        store wrote: a BLOB key b'orders' is not the topic orders, and taken as it is the
        topic had no policy."""
        # data_version is read before the rows: a commit landing in between makes the next
        # refresh read again, never skip a change.
        version = int(conn.execute("PRAGMA data_version").fetchone()[0])
        if version == known_version:
            return None
        data: dict[str, dict[str, str]] = {}
        odd: list[tuple[object, object, object]] = []
        for namespace, key, value in conn.execute(
            "SELECT namespace, key, value FROM gateway_state"
        ):
            if isinstance(namespace, str) and isinstance(key, str) and isinstance(value, str):
                data.setdefault(namespace, {})[key] = value
            else:
                odd.append((namespace, key, value))
        unreadable = None
        if odd:
            namespace, key, value = odd[0]
            unreadable = (
                f"{len(odd)} row(s) of gateway_state are not text, the first "
                f"({_shown(namespace)}, {_shown(key)}): {type(value).__name__} value; written "
                "by another program or another version of the gateway, nothing is judged on "
                "the store until they are deleted or rewritten as text"
            )
        return version, data, unreadable

    async def _refresh_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_interval_s)
            try:
                await self.refresh()
            except StateStoreError as exc:
                log.warning("%s; serving the last state read", exc)

    async def put(self, namespace: str, key: str, value: str | None) -> None:
        await self.put_all(namespace, {key: value})

    async def put_all(self, namespace: str, changes: Mapping[str, str | None]) -> None:
        for key in changes:
            _check_names(namespace, key)
        if not changes:
            return
        now = time.time()
        pending = dict(changes)

        def write(conn: sqlite3.Connection) -> list[Change]:
            return self._upsert(conn, namespace, pending, now)

        await self._write(write, _described(namespace, pending))

    async def put_all_if(
        self,
        namespace: str,
        changes: Mapping[str, str | None],
        *,
        prefix: str,
        expected: Mapping[str, str],
        admit: Callable[[Mapping[str, str]], bool] | None = None,
    ) -> bool:
        """The comparisons and the write are one transaction, so every process writing the
        file (each worker of ``kpg run --workers``) is held to them."""
        for key in changes:
            _check_names(namespace, key)
        now = time.time()
        pending = dict(changes)
        wanted = dict(expected)

        def write(conn: sqlite3.Connection) -> list[Change]:
            rows = conn.execute(
                "SELECT key, value FROM gateway_state WHERE namespace = ? "
                "AND substr(key, 1, ?) = ?",
                (namespace, len(prefix), prefix),
            ).fetchall()
            if dict(rows) != wanted:
                raise _Changed
            if admit is not None:
                held = conn.execute(
                    "SELECT key, value FROM gateway_state WHERE namespace = ?", (namespace,)
                ).fetchall()
                if not admit(dict(held)):
                    raise _Changed
            return self._upsert(conn, namespace, pending, now)

        try:
            await self._write(write, _described(namespace, pending))
        except _Changed:
            return False
        return True

    @staticmethod
    def _upsert(
        conn: sqlite3.Connection, namespace: str, pending: Mapping[str, str | None], now: float
    ) -> list[Change]:
        for key, value in pending.items():
            if value is None:
                conn.execute(
                    "DELETE FROM gateway_state WHERE namespace = ? AND key = ?",
                    (namespace, key),
                )
            else:
                conn.execute(
                    "INSERT INTO gateway_state (namespace, key, value, updated_at) "
                    "VALUES (?, ?, ?, ?) ON CONFLICT (namespace, key) "
                    "DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                    (namespace, key, value, now),
                )
        return [(namespace, key, value) for key, value in pending.items()]

    async def delete_prefix(self, namespace: str, key_prefix: str) -> None:
        _check_names(namespace, key_prefix)

        def write(conn: sqlite3.Connection) -> list[Change]:
            rows = conn.execute(
                "DELETE FROM gateway_state WHERE namespace = ? AND substr(key, 1, ?) = ? "
                "RETURNING key",
                (namespace, len(key_prefix), key_prefix),
            ).fetchall()
            return [(namespace, row[0], None) for row in rows]

        await self._write(write, f"{namespace}/{key_prefix}*")

    async def _write(self, write: Callable[[sqlite3.Connection], list[Change]], what: str) -> None:
        # Shielded: once started, a write is committed and applied even if the caller is
        # cancelled, so the snapshot never misses a change this connection made (data_version
        # does not move for a connection's own commits). The failure is returned, not raised,
        # so that it reaches the caller once; with the caller gone it is logged instead.
        task = self._tasks.spawn(self._locked_write(write, what), name=f"state-write:{what}")
        try:
            error = await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(_log_orphaned_failure)
            raise
        if error is not None:
            raise error

    async def _locked_write(
        self, write: Callable[[sqlite3.Connection], list[Change]], what: str
    ) -> StateStoreError | None:
        async with self._lock:
            try:
                await self._follow_the_file()
                self._read_if_changed()
                self._check_readable()
                changes = await asyncio.to_thread(
                    self._call, lambda conn: self._transaction(conn, write)
                )
            except StateStoreError as exc:
                return exc
            except sqlite3.Error as exc:
                error = StateStoreError(f"state store {self.path}: cannot write {what}: {exc}")
                error.__cause__ = exc
                return error
            # Read back whole, with whatever other processes committed meanwhile: applying
            # only this write could put it over a later one of theirs for good.
            try:
                if self._reader is None:
                    raise sqlite3.OperationalError("the reading connection is closed")
                self._reload(self._reader)
            except sqlite3.Error as exc:
                log.warning("state store %s: cannot read back %s: %s", self.path, what, exc)
                self._apply(changes)
            return None

    @staticmethod
    def _transaction(
        conn: sqlite3.Connection, write: Callable[[sqlite3.Connection], list[Change]]
    ) -> list[Change]:
        conn.execute("BEGIN IMMEDIATE")
        try:
            changes = write(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return changes


def _shown(value: object) -> str:
    """A value of a row as a message shows it: its repr, at most 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def _file_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at ``path``; None when there is none."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _retrieved(future: asyncio.Future[None]) -> None:
    """Mark a shared future's failure seen: the callers it served have it raised to them."""
    if not future.cancelled():
        future.exception()


class _Changed(StateStoreError):
    """A conditional write found its keys changed; the transaction is rolled back."""

    def __init__(self) -> None:
        super().__init__("changed")


def _log_orphaned_failure(task: asyncio.Task[StateStoreError | None]) -> None:
    if not task.cancelled() and task.exception() is None and (error := task.result()):
        log.error("%s (the caller had gone)", error)


# --- a compacted Kafka topic --------------------------------------------------------------


def _record_key(namespace: str, key: str) -> bytes:
    return f"{namespace}\0{key}".encode()


def _decode(raw_key: bytes | None, raw_value: bytes | None) -> Change:
    """:raises ValueError: for a record this store did not write."""
    if raw_key is None:
        raise ValueError("record without a key")
    namespace, sep, key = raw_key.decode().partition("\0")
    if not sep or not namespace:
        raise ValueError(f"record key {raw_key!r} is not namespace\\0key")
    return namespace, key, None if raw_value is None else raw_value.decode()


class KafkaTopicStore(_Snapshot):
    """The state in a compacted topic on the upstream cluster, shared by every instance.

    :meth:`start` creates the topic if it is missing (cleanup.policy=compact, 1 partition,
    ``replication_factor``; -1 is the broker's default), reads partition 0 from the beginning
    up to its end offset, then keeps tailing it. Record key ``namespace\\0key`` (UTF-8),
    value the UTF-8 value, no headers (a later format may mark its records with one); a
    tombstone (null value) deletes the key. A record that is not so (another program's,
    another version's) is never skipped: start fails, and while the store
    runs, :meth:`settle` and writes fail, until a later record of its key (a tombstone)
    replaces it.

    Writes go to partition 0 with acks=all. :meth:`put` returns once the broker has
    acknowledged the record *and* this instance's tail has applied it, so the log order decides
    between concurrent writers on every instance alike. The producer is not idempotent (Tansu
    answers InitProducerId with an error); ordering does not need it, because the producer
    keeps at most one request in flight per partition, and a retried duplicate only writes the
    same value again.

    Delay: a write is seen by every instance once a fetch returns it. Brokers that answer a
    fetch as soon as data arrives (Apache Kafka) make that immediate; Tansu holds every fetch
    for its full wait, which is ``refresh_interval_s`` here, so on Tansu a put and the other
    instances' view each take up to that long.

    The gateway connects to the brokers directly: this is its own state, not client traffic.
    Three clients: the producer, the tail, and one that asks the topic's end offset
    (:meth:`settle`), so that query never waits behind a fetch the broker holds.
    """

    def __init__(
        self,
        bootstrap_servers: Sequence[HostPort],
        topic: str,
        *,
        refresh_interval_s: float = 0.5,
        replication_factor: int = -1,
        request_timeout_s: float = 30.0,
        client_id: str = "kpg-state",
        client_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if not bootstrap_servers:
            raise ValueError("KafkaTopicStore needs at least one bootstrap server")
        self.bootstrap_servers = ",".join(str(server) for server in bootstrap_servers)
        self.topic = topic
        self.refresh_interval_s = refresh_interval_s
        self.replication_factor = replication_factor
        self.request_timeout_s = request_timeout_s
        self.client_id = client_id
        self._client_kwargs = dict(client_kwargs or {})
        """TLS and SASL (:meth:`gateway.upstream_security.UpstreamSecurity.aiokafka_kwargs`)."""
        self._partition = TopicPartition(topic, 0)
        self._producer: Any = None
        self._consumer: Any = None
        self._offsets: Any = None
        """A client of its own for the topic's end offset: on the tail's connection, the
        query would wait behind the fetch the broker holds (up to ``refresh_interval_s``),
        and every Produce asks it (:meth:`settle`)."""
        self._tasks = TaskSet()
        self._position = 0
        """The offset of the next record the tail will apply."""
        self._progress = asyncio.Condition()
        self._tail_error: BaseException | None = None
        self._tail_task: asyncio.Task[None] | None = None
        self._unreadable: dict[bytes | None, tuple[int, str]] = {}
        """Raw record key -> (offset, why) of records that could not be read and that no
        later record of the key has replaced (:meth:`_check_readable`)."""
        self._conditional = asyncio.Lock()
        """One conditional write at a time on this instance (:meth:`put_all_if`)."""
        self._settling: asyncio.Future[None] | None = None
        """The catch-up under way (:meth:`settle`), shared by the callers it serves."""
        self._next_settle: asyncio.Future[None] | None = None
        """The catch-up that begins once the one under way ends, for the callers that came
        after that one had asked the topic's end."""

    def _where(self) -> str:
        return f"state topic {self.topic} on {self.bootstrap_servers}"

    async def start(self) -> None:
        """Create the topic if missing, load it whole, start tailing it.

        :raises StateStoreError: when the cluster cannot be reached, the topic cannot be
            created, or it cannot be read to its end within ``request_timeout_s``.
        """
        if self._consumer is not None:
            return
        try:
            async with asyncio.timeout(self.request_timeout_s):
                await self._create_topic()
                await self._start_clients()
                end = await self._end_offset()
                await self._wait_applied(end)
            self._check_readable()
        except TimeoutError:
            await self.close()
            raise StateStoreError(
                f"{self._where()}: not loaded within {self.request_timeout_s:g} s"
            ) from None
        except KafkaError as exc:
            await self.close()
            raise StateStoreError(f"{self._where()}: cannot load: {exc}") from exc
        except BaseException:
            await self.close()
            raise
        log.info(
            "%s: loaded %d entries up to offset %d",
            self._where(),
            sum(len(entries) for entries in self._data.values()),
            self._position,
        )

    async def _create_topic(self) -> None:
        admin = AIOKafkaAdminClient(
            bootstrap_servers=self.bootstrap_servers,
            client_id=self.client_id,
            request_timeout_ms=int(self.request_timeout_s * 1000),
            **self._client_kwargs,
        )
        try:
            await admin.start()
            # aiokafka's NewTopic takes replica_assignments={} to let a -1 (broker default)
            # replication factor through; an empty assignment is what the request carries anyway.
            new_topic = NewTopic(
                self.topic,
                1,
                self.replication_factor,
                replica_assignments={} if self.replication_factor == -1 else None,
                topic_configs={"cleanup.policy": "compact"},
            )
            response = await admin.create_topics([new_topic])
            for topic_error in response.to_object()["topic_errors"]:
                code = topic_error["error_code"]
                if code == 0:
                    log.info("%s: created (compacted, 1 partition)", self._where())
                elif code == TopicAlreadyExistsError.errno:
                    await self._check_topic(admin)
                else:
                    error = for_code(code)
                    raise StateStoreError(
                        f"{self._where()}: cannot create it: {error.__name__}: "
                        f"{topic_error.get('error_message') or error.description}"
                    )
        finally:
            await admin.close()

    async def _check_topic(self, admin: AIOKafkaAdminClient) -> None:
        """Refuse a state topic made otherwise than :meth:`_create_topic` makes it (by an
        operator ahead of the gateway, with the cluster's defaults): under a delete cleanup
        policy its records expire (Kafka's default retention is 7 days), and a gateway
        started after that loads no record.validation.policy, every topic unvalidated; of
        several partitions the store reads and writes partition 0 alone.

        :raises StateStoreError: naming what is wrong and how to fix it.
        """
        (described,) = await admin.describe_topics([self.topic])
        partitions = len(described.get("partitions") or ())
        if described.get("error_code", 0) == 0 and partitions != 1:
            raise StateStoreError(
                f"{self._where()}: the topic has {partitions} partitions, made otherwise than "
                "the gateway makes it; the store reads and writes partition 0 alone, and "
                "records in any other would never be read: give the gateway a topic of one "
                "partition (state.topic)"
            )
        (answer,) = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, self.topic)]
        )
        (resource,) = answer.to_object()["resources"]
        if resource["error_code"] != 0:
            error = for_code(resource["error_code"])
            raise StateStoreError(
                f"{self._where()}: cannot read the topic's configs (to check it is compacted): "
                f"{error.__name__}: {resource.get('error_message') or error.description}"
            )
        configs = {c["config_names"]: c["config_value"] for c in resource["config_entries"]}
        policy = configs.get("cleanup.policy")
        if policy is None or {p.strip() for p in policy.split(",")} != {"compact"}:
            raise StateStoreError(
                f"{self._where()}: the topic's cleanup.policy is {policy or 'not reported'}, "
                "not compact: made otherwise than the gateway makes it, its records would "
                "expire and the state with them (a topic's record.validation.policy then "
                "gone): set cleanup.policy=compact on it (kafka-configs --alter "
                "--add-config cleanup.policy=compact)"
            )

    async def _start_clients(self) -> None:
        timeout_ms = int(self.request_timeout_s * 1000)
        wait_ms = max(1, int(self.refresh_interval_s * 1000))
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap_servers,
            client_id=self.client_id,
            acks="all",
            enable_idempotence=False,
            request_timeout_ms=timeout_ms,
            linger_ms=0,
            max_batch_size=_MAX_BATCH_BYTES,
            **self._client_kwargs,
        )
        await self._producer.start()
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap_servers,
            client_id=self.client_id,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=wait_ms,
            request_timeout_ms=timeout_ms,
            **self._client_kwargs,
        )
        await self._consumer.start()
        self._offsets = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap_servers,
            client_id=self.client_id,
            group_id=None,
            enable_auto_commit=False,
            request_timeout_ms=timeout_ms,
            **self._client_kwargs,
        )
        await self._offsets.start()
        self._consumer.assign([self._partition])
        await self._consumer.seek_to_beginning(self._partition)
        self._position = 0
        self._data = {}
        self._unreadable = {}
        self._tail_task = self._tasks.spawn(self._tail(), name=f"state-tail:{self.topic}")

    settles = True  # another instance's write arrives with the tail's next fetch

    async def settle(self) -> None:
        """Read the topic's end offset, and wait until the tail has applied every record
        before it.

        Callers at the same time share one catch-up, so a Produce settling each request
        costs the broker at most one end-offset query at a time: a call made while one is
        under way waits for the next, which begins when that one ends (the one under way may
        have read the end before the call, and so miss a write made just before it).

        :raises StateStoreError: when not done within ``request_timeout_s``.
        """
        if self._consumer is None:
            raise StateStoreError(f"{self._where()}: not started")
        if self._settling is None:
            shared = self._settling = self._spawn_catch_up(None)
        else:
            if self._next_settle is None:
                self._next_settle = self._spawn_catch_up(self._settling)
            shared = self._next_settle
        # shielded: one caller's cancellation leaves the others' catch-up running
        await asyncio.shield(shared)

    def _spawn_catch_up(self, after: asyncio.Future[None] | None) -> asyncio.Future[None]:
        task = asyncio.ensure_future(self._catch_up(after))
        task.add_done_callback(_retrieved)  # each caller has it raised in its own await
        return task

    async def _catch_up(self, after: asyncio.Future[None] | None) -> None:
        """Wait for ``after`` (the catch-up under way when this one was asked for) to end,
        then read the end offset and wait until the tail has applied every record before it."""
        me = asyncio.current_task()
        if after is not None:
            await asyncio.wait({after})
            self._settling, self._next_settle = self._next_settle, None
        try:
            if self._consumer is None:
                raise StateStoreError(f"{self._where()}: not started")
            async with asyncio.timeout(self.request_timeout_s):
                await self._wait_applied(await self._end_offset())
            self._check_readable()
        except TimeoutError:
            raise StateStoreError(
                f"{self._where()}: not caught up within {self.request_timeout_s:g} s"
            ) from None
        except KafkaError as exc:
            raise StateStoreError(f"{self._where()}: cannot read its end: {exc}") from exc
        finally:
            if self._settling is me:
                self._settling = None

    async def _end_offset(self) -> int:
        client = self._offsets
        if client is None:
            raise StateStoreError(f"{self._where()}: not started")
        offsets = await client.end_offsets([self._partition])
        return int(offsets[self._partition])

    async def _tail(self) -> None:
        consumer = self._consumer
        wait_ms = max(1, int(self.refresh_interval_s * 1000))
        while True:
            try:
                batches = await consumer.getmany(self._partition, timeout_ms=wait_ms)
                records = batches.get(self._partition, ())
                self._apply(self._decoded(records))
                position = int(await consumer.position(self._partition))
                self._tail_error = None
            except KafkaError as exc:
                # The consumer retries connection problems itself; what reaches here is worth
                # a line in the log. Keep tailing: the snapshot stays as it was meanwhile.
                log.warning("%s: reading failed, retrying: %s", self._where(), exc)
                self._tail_error = exc
                await asyncio.sleep(self.refresh_interval_s)
                continue
            async with self._progress:
                self._position = position
                self._progress.notify_all()

    def _decoded(self, records: Iterable[Any]) -> Iterable[Change]:
        """The changes of ``records``; a record this store cannot read is kept in
        :attr:`_unreadable` (by its raw key) until a later record of that key replaces it,
        never skipped as if it were not there: it may be a topic's record.validation.policy
        or a client config written by another version of the gateway."""
        for record in records:
            if record.value is None and record.key in self._unreadable:
                # a tombstone of the key: what an operator writes to clear it
                del self._unreadable[record.key]
                try:
                    deleted = _decode(record.key, None)
                except (ValueError, UnicodeDecodeError):
                    continue  # a key no value of this store is under
                yield deleted
                continue
            try:
                if record.headers:
                    # none of this format's records has one: a later format may say itself so
                    raise ValueError(
                        f"record headers {[name for name, _ in record.headers][:5]}: a format "
                        "of another version"
                    )
                change = _decode(record.key, record.value)
            except (ValueError, UnicodeDecodeError) as exc:
                if record.key not in self._unreadable:
                    log.error(
                        "%s: cannot read the record at offset %d (%s): written by another "
                        "program or version; the store refuses to decide until a later record "
                        "of its key (a tombstone) replaces it",
                        self._where(),
                        record.offset,
                        exc,
                    )
                self._unreadable[record.key] = (record.offset, str(exc))
                continue
            self._unreadable.pop(record.key, None)
            yield change

    def _check_readable(self) -> None:
        """:raises StateStoreError: while the topic holds a record this store cannot read
        that no later record of its key replaced: what it says is unknown, so nothing is
        judged on the store (fail closed), rather than on a view without it."""
        if not self._unreadable:
            return
        offset, problem = min(self._unreadable.values())
        raise StateStoreError(
            f"{self._where()}: the record at offset {offset} cannot be read ({problem}), "
            f"{len(self._unreadable)} such key(s) in all: written by another program or "
            "another version of the gateway; write a tombstone of its key to the topic (after "
            "checking what it held) or run the version that wrote it"
        )

    async def _wait_applied(self, end_offset: int) -> None:
        """Wait until the tail has applied every record before ``end_offset``."""
        async with self._progress:
            await self._progress.wait_for(lambda: self._position >= end_offset)

    async def close(self) -> None:
        await self._tasks.cancel_all()
        for catch_up in (self._next_settle, self._settling):
            if catch_up is not None:
                catch_up.cancel()  # its callers get CancelledError, as a closing caller would
        producer, self._producer = self._producer, None
        consumer, self._consumer = self._consumer, None
        offsets, self._offsets = self._offsets, None
        for client in (offsets, consumer, producer):
            if client is not None:
                try:
                    await client.stop()
                except KafkaError as exc:
                    log.warning("%s: closing a client: %s", self._where(), exc)
                except asyncio.CancelledError:
                    # aiokafka's producer lets its sender task's cancellation escape from
                    # stop() when the broker is gone; only a cancellation of close() counts.
                    task = asyncio.current_task()
                    if task is not None and task.cancelling():
                        raise
                    log.warning("%s: a client stopped uncleanly", self._where())

    async def put(self, namespace: str, key: str, value: str | None) -> None:
        await self.put_all(namespace, {key: value})

    async def put_all(self, namespace: str, changes: Mapping[str, str | None]) -> None:
        for key in changes:
            _check_names(namespace, key)
        await self._write(
            [(namespace, key, value) for key, value in changes.items()],
            _described(namespace, changes),
        )

    async def put_all_if(
        self,
        namespace: str,
        changes: Mapping[str, str | None],
        *,
        prefix: str,
        expected: Mapping[str, str],
        admit: Callable[[Mapping[str, str]], bool] | None = None,
    ) -> bool:
        """Compared after catching up to the end of the topic, and written with this
        instance's other conditional writes held back. A compacted topic has no compare-and-set,
        so an instance writing the same keys between the comparison and the write is not seen:
        the condition holds on one instance, not between instances."""
        for key in changes:
            _check_names(namespace, key)
        async with self._conditional:
            await self.settle()
            held = self.items(namespace)
            if {k: v for k, v in held.items() if k.startswith(prefix)} != dict(expected):
                return False
            if admit is not None and not admit(held):
                return False
            await self.put_all(namespace, changes)
        return True

    async def delete_prefix(self, namespace: str, key_prefix: str) -> None:
        """Write a tombstone for every matching key this instance knows of after catching up
        to the current end of the topic (a key another instance writes meanwhile survives)."""
        _check_names(namespace, key_prefix)
        what = f"{namespace}/{key_prefix}*"
        if self._consumer is None:
            raise StateStoreError(f"{self._where()}: not started")
        try:
            async with asyncio.timeout(self.request_timeout_s):
                await self._wait_applied(await self._end_offset())
        except (KafkaError, TimeoutError) as exc:
            raise StateStoreError(f"{self._where()}: cannot delete {what}: {exc!r}") from exc
        self._check_readable()
        keys = self._keys_with_prefix(namespace, key_prefix)
        await self._write([(namespace, k, None) for k in keys], what)

    async def _write(self, changes: Sequence[Change], what: str) -> None:
        """Write ``changes`` as one record batch: Kafka appends a batch whole or not at all, so
        every instance reads all of them or none."""
        if not changes:
            return
        producer = self._producer
        if producer is None:
            raise StateStoreError(f"{self._where()}: not started")
        self._check_readable()
        batch = producer.create_batch()
        for namespace, key, value in changes:
            appended = batch.append(
                timestamp=None,
                key=_record_key(namespace, key),
                value=None if value is None else value.encode(),
            )
            if appended is None or batch.size() > _MAX_BATCH_BYTES:
                raise StateStoreError(
                    f"{self._where()}: cannot write {what}: larger than one record batch "
                    f"of {_MAX_BATCH_BYTES} bytes, the most the gateway writes at once"
                )
        try:
            async with asyncio.timeout(self.request_timeout_s):
                sent = await producer.send_batch(batch, self.topic, partition=0)
                metadata = await sent
        except TimeoutError:
            # The batch stays with the producer (and may be at the broker already): it can
            # still be appended after this.
            raise StateStoreError(
                f"{self._where()}: writing {what} not acknowledged within "
                f"{self.request_timeout_s:g} s",
                maybe_written=True,
            ) from None
        except KafkaError as exc:
            raise StateStoreError(
                f"{self._where()}: cannot write {what}: {exc}", maybe_written=True
            ) from exc
        # The batch's base offset: its records follow it one by one.
        last_offset = int(metadata.offset) + len(changes) - 1
        try:
            async with asyncio.timeout(self.request_timeout_s):
                await self._wait_applied(last_offset + 1)
        except TimeoutError:
            detail = ""
            if self._tail_task is None or self._tail_task.done():
                detail = " (the reader has stopped)"
            elif self._tail_error is not None:
                detail = f" (reading fails: {self._tail_error})"
            raise StateStoreError(
                f"{self._where()}: {what} written at offset {last_offset} but not read back "
                f"within {self.request_timeout_s:g} s{detail}",
                maybe_written=True,
            ) from None


# --- a move from SQLite to the Kafka topic ---------------------------------------------------

CARRIED_OVER_NAMESPACE: Final = "gateway.carried.over"
"""Where the state topic records which SQLite files a gateway has carried over into it: key
``<host>:<path of the file>``, value the time it was done."""


async def carry_over_sqlite(store: StateStore, path: Path, *, host: str) -> int:
    """Carry the entries of a SQLite state file into ``store`` (the Kafka topic) once: a
    gateway moved from ``state.store: sqlite`` to ``kafka`` would otherwise start on a topic
    without the file's ``record.validation.policy`` values and client configs, and validate
    nothing. Done once per host and file (recorded in :data:`CARRIED_OVER_NAMESPACE`, so that
    later changes made through the topic are not undone by the file); a key the topic holds
    with the same value is left; an absent key is written only while still absent (another
    gateway carrying its own file over at the same time); a key the topic holds with another
    value stops the start, naming it: which one should stand is the operator's to say. No file
    at ``path``: nothing to do. The file's entries are not changed; remove it once carried
    over.

    :returns: how many entries were written.
    :raises StateStoreError: when the file cannot be read or an entry differs.
    """
    marker = f"{host}:{path.resolve()}"
    if store.get(CARRIED_OVER_NAMESPACE, marker) is not None or not path.exists():
        return 0
    old = SqliteStore(path)
    await old.start()
    try:
        found = {ns: dict(entries) for ns, entries in old._data.items()}
    finally:
        await old.close()
    found.pop(CARRIED_OVER_NAMESPACE, None)
    await store.settle()
    differing = [
        f"{ns} {key!r}"
        for ns, entries in found.items()
        for key, value in entries.items()
        if (held := store.get(ns, key)) is not None and held != value
    ]
    if differing:
        raise StateStoreError(
            f"the SQLite state file {path} (state.path), not yet carried over into the state "
            f"topic, holds {len(differing)} entries the topic holds with another value: "
            f"{', '.join(differing[:5])}{' ...' if len(differing) > 5 else ''}; set them "
            "in one place as they should stand (or remove the file to keep the topic's) and "
            "start again"
        )
    written = 0
    for ns, entries in sorted(found.items()):
        for key, value in sorted(entries.items()):
            written += await _carry_one(store, ns, key, value, path)
    await store.put(CARRIED_OVER_NAMESPACE, marker, dt.datetime.now(tz=dt.UTC).isoformat())
    log.warning(
        "state: carried %d entries of the SQLite state file %s into the state topic (once "
        "for this host and file; the file can be removed)",
        written,
        path,
    )
    return written


async def _carry_one(store: StateStore, namespace: str, key: str, value: str, path: Path) -> int:
    """Write one entry of a carried-over file while the topic lacks it; 1 if written."""
    for _ in range(3):
        held = store.get(namespace, key)
        if held == value:
            return 0
        if held is not None:
            break
        expected = {k: v for k, v in store.items(namespace).items() if k.startswith(key)}
        if await store.put_all_if(namespace, {key: value}, prefix=key, expected=expected):
            return 1
    raise StateStoreError(
        f"the SQLite state file {path}: {namespace} {key!r} was set in the state topic while "
        "it was carried over; start again"
    )
