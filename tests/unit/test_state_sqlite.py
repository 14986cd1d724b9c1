"""The SQLite state store on real files in a temporary directory.

Two stores on one file stand for two gateway processes on one host: each has its own SQLite
connection, which is all SQLite knows of a process.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from gateway.state import SqliteStore, StateStoreError

pytestmark = pytest.mark.unit

NS = "topic-config"


def run(coro: Awaitable[Any]) -> Any:
    async def main() -> Any:
        return await coro

    return asyncio.run(main())


async def started(path: Path, **kwargs: Any) -> SqliteStore:
    store = SqliteStore(path, **kwargs)
    await store.start()
    return store


async def eventually(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def rows(path: Path) -> dict[tuple[str, str], str]:
    """What another reader of the file finds there, bypassing the store."""
    with closing(sqlite3.connect(path)) as conn:
        found = conn.execute("SELECT namespace, key, value FROM gateway_state").fetchall()
    return {(ns, k): v for ns, k, v in found}


def test_put_get_delete(tmp_path: Path) -> None:
    async def main() -> None:
        store = await started(tmp_path / "state.db")
        try:
            assert store.get(NS, "orders") is None
            await store.put(NS, "orders", "strict")
            await store.put("client-config", "orders", "other namespace")
            assert store.get(NS, "orders") == "strict"
            await store.put(NS, "orders", "lenient")
            assert store.get(NS, "orders") == "lenient"
            await store.put(NS, "orders", None)
            assert store.get(NS, "orders") is None
            assert store.get("client-config", "orders") == "other namespace"
            await store.put(NS, "never-set", None)
            assert store.get(NS, "never-set") is None
        finally:
            await store.close()

    run(main())


def test_write_is_visible_and_committed_when_put_returns(tmp_path: Path) -> None:
    path = tmp_path / "state.db"

    async def main() -> None:
        store = await started(path, refresh_interval_s=3600)
        try:
            await store.put(NS, "orders", "strict")
            assert store.get(NS, "orders") == "strict"
            assert rows(path) == {(NS, "orders"): "strict"}
            await store.put(NS, "orders", None)
            assert store.get(NS, "orders") is None
            assert rows(path) == {}
        finally:
            await store.close()

    run(main())


def test_items_is_a_read_only_snapshot(tmp_path: Path) -> None:
    async def main() -> None:
        store = await started(tmp_path / "state.db")
        try:
            assert dict(store.items(NS)) == {}
            await store.put(NS, "a", "1")
            await store.put(NS, "b", "2")
            await store.put("other", "c", "3")
            before = store.items(NS)
            assert dict(before) == {"a": "1", "b": "2"}
            await store.put(NS, "a", None)
            await store.put(NS, "d", "4")
            assert dict(before) == {"a": "1", "b": "2"}
            assert dict(store.items(NS)) == {"b": "2", "d": "4"}
            with pytest.raises(TypeError):
                store.items(NS)["x"] = "y"  # type: ignore[index]
        finally:
            await store.close()

    run(main())


def test_delete_prefix_deletes_only_matching_keys_of_the_namespace(tmp_path: Path) -> None:
    path = tmp_path / "state.db"

    async def main() -> None:
        store = await started(path)
        try:
            for key in ("t1/retention", "t1/policy", "t10/policy", "t2/policy"):
                await store.put(NS, key, "v")
            await store.put("other", "t1/policy", "kept")
            await store.delete_prefix(NS, "t1/")
            assert dict(store.items(NS)) == {"t10/policy": "v", "t2/policy": "v"}
            assert store.get("other", "t1/policy") == "kept"
            assert set(rows(path)) == {
                (NS, "t10/policy"),
                (NS, "t2/policy"),
                ("other", "t1/policy"),
            }
            await store.delete_prefix(NS, "nothing-matches")
            assert len(store.items(NS)) == 2
        finally:
            await store.close()

    run(main())


def test_state_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "state.db"

    async def main() -> None:
        first = await started(path)
        await first.put(NS, "orders", "strict")
        await first.put(NS, "payments", "lenient")
        await first.put(NS, "payments", None)
        await first.put("client-config", "user=alice", "producer_byte_rate=1024")
        await first.close()

        second = await started(path)
        try:
            assert dict(second.items(NS)) == {"orders": "strict"}
            assert second.get("client-config", "user=alice") == "producer_byte_rate=1024"
        finally:
            await second.close()

    run(main())


def test_two_stores_on_one_file_see_each_others_writes_on_the_next_read(tmp_path: Path) -> None:
    """The workers of `kpg run --workers N` share one file: a change one of them makes
    decides the very next request another one reads it for, with no refresh in between (the
    periodic one is an hour away here)."""
    path = tmp_path / "state.db"

    async def main() -> None:
        a = await started(path, refresh_interval_s=3600)
        b = await started(path, refresh_interval_s=3600)
        try:
            assert b.get(NS, "orders") is None
            await a.put(NS, "orders", "strict")
            assert b.get(NS, "orders") == "strict"

            await b.put(NS, "orders", None)
            await b.put(NS, "payments", "lenient")
            assert dict(a.items(NS)) == {"payments": "lenient"}

            await a.delete_prefix(NS, "pay")
            assert dict(b.items(NS)) == {}
        finally:
            await a.close()
            await b.close()

    run(main())


def test_a_writer_holding_the_file_does_not_stall_readers(tmp_path: Path) -> None:
    """WAL mode: another process in the middle of a write transaction (even an exclusive
    one) does not keep a store from starting or refreshing; it reads the last commit."""
    path = tmp_path / "state.db"

    async def main() -> None:
        a = await started(path, busy_timeout_s=0.1)
        await a.put(NS, "orders", "strict")
        other = sqlite3.connect(path, isolation_level=None)
        b = SqliteStore(path, busy_timeout_s=0.1)
        try:
            other.execute("BEGIN EXCLUSIVE")
            other.execute("UPDATE gateway_state SET value = 'uncommitted'")
            await b.start()
            assert b.get(NS, "orders") == "strict"
            await a.refresh()
            assert a.get(NS, "orders") == "strict"
        finally:
            other.close()
            await a.close()
            await b.close()

    run(main())


def test_periodic_refresh_shares_writes_without_being_asked(tmp_path: Path) -> None:
    path = tmp_path / "state.db"

    async def main() -> None:
        a = await started(path, refresh_interval_s=0.05)
        b = await started(path, refresh_interval_s=0.05)
        try:
            await a.put(NS, "orders", "strict")
            assert await eventually(lambda: b.get(NS, "orders") == "strict")
            await a.put(NS, "orders", None)
            assert await eventually(lambda: b.get(NS, "orders") is None)
        finally:
            await a.close()
            await b.close()

    run(main())


def test_concurrent_writers_on_one_file_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "state.db"

    async def main() -> None:
        a = await started(path)
        b = await started(path)
        try:
            await asyncio.gather(
                *(a.put(NS, f"a{i}", str(i)) for i in range(40)),
                *(b.put(NS, f"b{i}", str(i)) for i in range(40)),
            )
            await a.refresh()
            await b.refresh()
            expected = {f"{s}{i}": str(i) for s in "ab" for i in range(40)}
            assert dict(a.items(NS)) == expected
            assert dict(b.items(NS)) == expected
        finally:
            await a.close()
            await b.close()

    run(main())


def test_a_cancelled_put_is_still_committed_and_visible(tmp_path: Path) -> None:
    path = tmp_path / "state.db"

    async def main() -> None:
        store = await started(path)
        try:
            put = asyncio.create_task(store.put(NS, "orders", "strict"))
            await asyncio.sleep(0)  # the write has started
            put.cancel()
            with pytest.raises(asyncio.CancelledError):
                await put
            assert await eventually(lambda: store.get(NS, "orders") == "strict")
            assert rows(path) == {(NS, "orders"): "strict"}
        finally:
            await store.close()

    run(main())


def test_start_creates_the_directory(tmp_path: Path) -> None:
    path = tmp_path / "var" / "state.db"

    async def main() -> None:
        first = await started(path)
        await first.put(NS, "orders", "strict")
        await first.close()
        second = await started(path)
        assert second.get(NS, "orders") == "strict"
        await second.close()

    run(main())


def test_start_fails_with_a_message_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    path = tmp_path / "a-file" / "state.db"
    with pytest.raises(StateStoreError, match="a-file/state.db: cannot open"):
        run(SqliteStore(path).start())


def test_start_fails_on_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"this is not SQLite" * 100)
    with pytest.raises(StateStoreError, match="state.db"):
        run(SqliteStore(path).start())


def test_a_write_that_fails_raises(tmp_path: Path) -> None:
    path = tmp_path / "state.db"

    async def main() -> None:
        store = await started(path, busy_timeout_s=0.1)
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
            with pytest.raises(StateStoreError, match="cannot write topic-config/orders"):
                await store.put(NS, "orders", "strict")
            assert store.get(NS, "orders") is None
        finally:
            other.close()
            await store.close()

    run(main())


def test_put_all_writes_every_change_or_none(tmp_path: Path) -> None:
    path = tmp_path / "state.db"

    async def main() -> None:
        store = await started(path)
        try:
            await store.put(NS, "gone", "soon")
            await store.put_all(NS, {"a": "1", "b": "2", "gone": None})
            assert dict(store.items(NS)) == {"a": "1", "b": "2"}
            assert rows(path) == {(NS, "a"): "1", (NS, "b"): "2"}
            # SQLite itself refuses the last change: the earlier ones of the write are undone.
            with closing(sqlite3.connect(path)) as conn:
                conn.execute(
                    "CREATE TRIGGER refuse BEFORE INSERT ON gateway_state WHEN NEW.key = 'bad' "
                    "BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END"
                )
                conn.commit()
            with pytest.raises(StateStoreError, match=r"cannot write topic-config/\{a, c, bad\}"):
                await store.put_all(NS, {"a": "changed", "c": "3", "bad": "4"})
            assert dict(store.items(NS)) == {"a": "1", "b": "2"}
            assert rows(path) == {(NS, "a"): "1", (NS, "b"): "2"}
        finally:
            await store.close()

    run(main())


def test_put_before_start_raises(tmp_path: Path) -> None:
    with pytest.raises(StateStoreError, match="not open"):
        run(SqliteStore(tmp_path / "state.db").put(NS, "orders", "strict"))


@pytest.mark.parametrize("namespace", ["", "bad\0namespace"])
def test_namespaces_must_be_non_empty_without_nul(tmp_path: Path, namespace: str) -> None:
    async def main() -> None:
        store = await started(tmp_path / "state.db")
        try:
            with pytest.raises(ValueError, match="namespace"):
                await store.put(namespace, "k", "v")
        finally:
            await store.close()

    run(main())


def test_an_own_write_does_not_hide_a_later_one_from_another_process(tmp_path: Path) -> None:
    """The snapshot is replaced only by whole reads of the file: a write read back after
    another process's later commit to the same key leaves that commit in place."""
    path = tmp_path / "state.db"

    async def main() -> None:
        a = await started(path, refresh_interval_s=3600)
        other = sqlite3.connect(path, isolation_level=None)
        try:
            await a.put(NS, "orders", "strict")
            other.execute(
                "UPDATE gateway_state SET value = 'lenient' WHERE namespace = ? AND key = ?",
                (NS, "orders"),
            )
            await a.put(NS, "payments", "strict")
            assert dict(a.items(NS)) == {"orders": "lenient", "payments": "strict"}
        finally:
            other.close()
            await a.close()

    run(main())


def test_a_conditional_write_is_made_only_over_what_was_judged(tmp_path: Path) -> None:
    """``put_all_if``: the keys under the prefix must be exactly as expected when the write
    commits. Another process's write in between (the second store on the file) makes it fail
    and write nothing; a key added under the prefix counts as a change too."""
    path = tmp_path / "state.db"

    async def main() -> None:
        a = await started(path, refresh_interval_s=3600)
        b = await started(path, refresh_interval_s=3600)
        try:
            await a.put_all(NS, {"alice/app/acks": "1", "bob/app/acks": "1"})
            judged = {"alice/app/acks": "1"}
            assert await a.put_all_if(
                NS, {"alice/app/linger.ms": "5"}, prefix="alice/app/", expected=judged
            )
            assert dict(b.items(NS))["alice/app/linger.ms"] == "5"

            judged = dict(a.items(NS))
            judged = {k: v for k, v in judged.items() if k.startswith("alice/")}
            await b.put(NS, "alice/app/retries", "3")  # written meanwhile, elsewhere
            assert not await a.put_all_if(
                NS, {"alice/app/acks": "-1"}, prefix="alice/app/", expected=judged
            )
            assert rows(path)[(NS, "alice/app/acks")] == "1"

            await b.put(NS, "bob/app/acks", "0")  # outside the prefix: no matter
            judged = {k: v for k, v in a.items(NS).items() if k.startswith("alice/")}
            assert await a.put_all_if(
                NS, {"alice/app/acks": "-1"}, prefix="alice/app/", expected=judged
            )
            assert b.get(NS, "alice/app/acks") == "-1"
        finally:
            await a.close()
            await b.close()

    run(main())


def test_a_state_file_removed_under_a_running_store_is_followed(tmp_path: Path) -> None:
    """The state file removed while the gateway runs (a clean-up of its directory): the
    store's connections still wrote the removed file, so a change a client was told was
    stored was lost at the next start, and a worker started meanwhile (on a new file at the
    path) judged by other settings than the running ones. The store now opens the file at
    its path, as a worker started then would, before its next write and at its next
    refresh."""
    path = tmp_path / "state.db"

    async def main() -> None:
        store = await started(path)
        newcomer = None
        try:
            await store.put(NS, "orders", "strict")
            for leftover in tmp_path.iterdir():  # the file, its WAL and shared memory
                leftover.unlink()
            newcomer = await started(path)  # a worker started now: a new, empty file
            await store.put(NS, "payments", "lenient")
            assert rows(path) == {(NS, "payments"): "lenient"}
            assert store.get(NS, "orders") is None  # as every other reader of the path
            await newcomer.refresh()
            assert newcomer.get(NS, "payments") == "lenient"
        finally:
            await store.close()
            if newcomer is not None:
                await newcomer.close()

    run(main())


def _insert(path: Path, *rows: tuple[object, object, object]) -> None:
    """Rows another program (or another version of the gateway) wrote into the file."""
    with closing(sqlite3.connect(path)) as conn:
        conn.executemany(
            "INSERT INTO gateway_state (namespace, key, value, updated_at) VALUES (?, ?, ?, 0)",
            rows,
        )
        conn.commit()


@pytest.mark.parametrize(
    "row",
    [
        pytest.param((NS, b"orders", "strict"), id="blob-key"),
        pytest.param((NS, "orders", b"strict"), id="blob-value"),
        pytest.param((NS.encode(), "orders", "strict"), id="blob-namespace"),
    ],
)
def test_a_row_that_is_not_text_stops_start(tmp_path: Path, row: tuple[object, ...]) -> None:
    """Served as it was, a BLOB key b'orders' was not the topic orders: the topic's
    record.validation.policy was absent and its records went unvalidated."""
    path = tmp_path / "state.db"
    run(_made(path))
    _insert(path, row)
    with pytest.raises(StateStoreError, match="not text"):
        run(started(path))


async def _made(path: Path) -> None:
    store = await started(path)
    await store.put(NS, "before", "1")
    await store.close()


def test_a_row_that_is_not_text_arriving_later_fails_closed(tmp_path: Path) -> None:
    """Every Produce settles while the file holds it (and is refused), writes are refused,
    and all is well again once the row is gone."""
    path = tmp_path / "state.db"

    async def main() -> None:
        store = await started(path)
        try:
            await store.settle()
            assert not store.settles
            _insert(path, (NS, b"orders", "strict"))
            assert store.settles
            with pytest.raises(StateStoreError, match="not text"):
                await store.settle()
            with pytest.raises(StateStoreError, match="not text"):
                await store.put(NS, "other", "2")
            with closing(sqlite3.connect(path)) as conn:
                conn.execute("DELETE FROM gateway_state WHERE typeof(key) = 'blob'")
                conn.commit()
            await store.settle()
            assert not store.settles
            await store.put(NS, "orders", "strict")
            assert store.get(NS, "orders") == "strict"
        finally:
            await store.close()

    run(main())


def test_a_file_of_a_newer_format_stops_start(tmp_path: Path) -> None:
    """A gateway that changes the file's format says so in PRAGMA user_version; this one
    refuses the file rather than misread it (and a file it makes says format 1)."""
    path = tmp_path / "state.db"
    run(_made(path))
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
        conn.execute("PRAGMA user_version=2")
        conn.commit()
    with pytest.raises(StateStoreError, match="format is 2"):
        run(started(path))
    assert rows(path) == {(NS, "before"): "1"}


def test_a_file_of_an_earlier_version_held_by_a_writer_still_opens(tmp_path: Path) -> None:
    """Format 0 (no stamp: an earlier version's file) reads as format 1; stamping it waits
    for no other process's write."""
    path = tmp_path / "state.db"
    run(_made(path))
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA user_version=0")
        conn.commit()
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN EXCLUSIVE")
        store = run(started(path, busy_timeout_s=0.1))
        assert store.get(NS, "before") == "1"
        run(store.close())
    finally:
        other.close()
