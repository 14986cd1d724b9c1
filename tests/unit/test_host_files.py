"""The gateway's own files on a shared host: what another local user could read, write in
its place, or make it write through (gateway.files). Real files in a temporary directory and
real processes; the tests run as root, so "another user" is a file chowned to nobody's uid."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway import cli
from gateway.audit import EventLine, SpoolSink
from gateway.embedded import EmbeddedBroker, EmbeddedBrokerError
from gateway.files import UnsafePathError
from gateway.state import SqliteStore, StateStoreError
from tests.support import audit_event

pytestmark = pytest.mark.unit

NOBODY = 65534
"""Another local user's uid."""


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def write_one_event(sink: SpoolSink) -> None:
    sink.write([EventLine.of(audit_event())])


# --- the audit spool ---------------------------------------------------------------------


def test_spool_segments_are_not_readable_by_other_users(tmp_path: Path) -> None:
    """Events name principals, client ids and config values: the directory is 0750, the
    segments (open and completed) and the lock 0640, whatever the umask."""
    spool = tmp_path / "var" / "audit"
    old = os.umask(0)
    try:
        sink = SpoolSink(spool)
        sink.open()
        write_one_event(sink)
        open_segments = list(spool.glob(".events-*.open"))
        sink.close()
    finally:
        os.umask(old)
    assert mode(spool) == 0o750 and mode(spool.parent) == 0o750
    assert [mode(spool / ".lock")] == [0o640]
    assert len(open_segments) == 1
    completed = list(spool.glob("events-*.jsonl"))
    assert len(completed) == 1 and mode(completed[0]) == 0o640


@pytest.mark.parametrize(
    ("directory_mode", "says"),
    [
        (0o777, "writable by group and others"),
        (0o770, "writable by group"),
        (0o1777, "writable by group and others \\(mode 1777\\)"),
    ],
)
def test_a_spool_directory_other_users_can_write_is_refused(
    tmp_path: Path, directory_mode: int, says: str
) -> None:
    """They could add segments of forged events, or replace the open one."""
    spool = tmp_path / "audit"
    spool.mkdir()
    spool.chmod(directory_mode)
    with pytest.raises(UnsafePathError, match=f"audit spool directory {spool} is {says}"):
        SpoolSink(spool).open()
    assert list(spool.iterdir()) == []


def test_a_spool_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    spool = tmp_path / "audit"
    spool.mkdir(mode=0o700)
    os.chown(spool, NOBODY, NOBODY)
    with pytest.raises(UnsafePathError, match=f"owned by uid {NOBODY}"):
        SpoolSink(spool).open()


@pytest.mark.parametrize("shared_mode", [0o1777, 0o777])
def test_a_spool_of_its_own_in_a_shared_directory_is_accepted(
    tmp_path: Path, shared_mode: int
) -> None:
    """/tmp (sticky) or a Kubernetes emptyDir (0777, the pod's alone): the gateway makes its
    own directory there."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(shared_mode)
    sink = SpoolSink(shared / "audit")
    sink.open()
    write_one_event(sink)
    sink.close()
    assert len(list((shared / "audit").glob("events-*.jsonl"))) == 1


# --- the state store ---------------------------------------------------------------------


def start_store(path: Path) -> None:
    async def main() -> None:
        store = SqliteStore(path)
        await store.start()
        await store.put("topic-config", "t", "v")
        await store.close()

    asyncio.run(main())


def test_the_state_file_is_created_readable_by_the_gateway_alone(tmp_path: Path) -> None:
    """It holds every client's dynamic configs: 0600, and so its WAL (SQLite gives the files
    it creates the database's mode); its directory 0750."""
    path = tmp_path / "var" / "state.db"
    old = os.umask(0o022)
    try:
        start_store(path)
    finally:
        os.umask(old)
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o750
    wal = path.with_name("state.db-wal")
    assert not wal.exists() or mode(wal) == 0o600


@pytest.mark.parametrize("planted", ["state.db", "state.db-wal"])
def test_a_state_file_other_users_can_write_is_refused(tmp_path: Path, planted: str) -> None:
    """Whoever can write the file (or a WAL SQLite would replay) decides record validation
    policies and client configs."""
    path = tmp_path / "state.db"
    start_store(path)
    (tmp_path / planted).touch()
    (tmp_path / planted).chmod(0o666)
    with pytest.raises(StateStoreError, match=f"state store file {tmp_path / planted} is writ"):
        start_store(path)


def test_a_state_directory_other_users_can_write_is_refused(tmp_path: Path) -> None:
    """They could plant a -wal or -journal file before the gateway makes one."""
    directory = tmp_path / "var"
    directory.mkdir()
    directory.chmod(0o1777)
    with pytest.raises(StateStoreError, match=f"directory {directory} is writable by group"):
        start_store(directory / "state.db")
    assert list(directory.iterdir()) == []


def test_a_state_file_of_another_user_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    start_store(path)
    os.chown(path, NOBODY, NOBODY)
    with pytest.raises(StateStoreError, match=f"state store file {path} is owned by uid"):
        start_store(path)


# --- the pid file and the reload outcome ---------------------------------------------------


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file someone else's symlink points at."""
    path = tmp_path / "victim"
    path.write_text("precious\n")
    return path


def test_a_symlink_at_the_pid_file_is_replaced_not_written_through(
    tmp_path: Path, victim: Path
) -> None:
    pid_file = tmp_path / "kpg.pid"
    pid_file.symlink_to(victim)
    with cli._pid_file(pid_file):
        assert victim.read_text() == "precious\n"
        assert not pid_file.is_symlink()
        assert pid_file.read_text() == f"{os.getpid()}\n"
    assert victim.read_text() == "precious\n"
    assert not pid_file.exists()


def test_a_symlink_where_the_reload_outcome_goes_is_not_written_through(
    tmp_path: Path, victim: Path
) -> None:
    """The outcome used to be written to PATH.reload.tmp first, whatever that was."""
    pid_file = tmp_path / "kpg.pid"
    for name in ("kpg.pid.reload", "kpg.pid.reload.tmp"):
        (tmp_path / name).symlink_to(victim)
    cli.ReloadVerdicts(pid_file)("applied", "policy version a -> b")
    assert victim.read_text() == "precious\n"
    outcome = json.loads((tmp_path / "kpg.pid.reload").read_text())
    assert outcome["result"] == "applied"
    assert mode(tmp_path / "kpg.pid.reload") == 0o640


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """A process that is not the gateway (SIGHUP ends it)."""
    process = subprocess.Popen(["sleep", "300"])
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def test_kpg_reload_does_not_signal_a_process_a_stale_pid_file_names(
    tmp_path: Path,
    bystander: subprocess.Popen[bytes],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A gateway killed with SIGKILL leaves its pid file; the pid goes to another process
    (or someone who can write the directory names one)."""
    monkeypatch.setattr(cli, "VERDICT_WAIT_S", 0.5)  # main waited this long after the kill
    pid_file = tmp_path / "kpg.pid"
    pid_file.write_text(f"{bystander.pid}\n")
    assert cli.main(["reload", "--pid-file", str(pid_file)]) == 2
    assert bystander.poll() is None, "SIGHUP reached a process that is not the gateway"
    said = capsys.readouterr().err
    assert f"names pid {bystander.pid}, which is not a kpg run --pid-file" in said
    assert "not signalled" in said


def test_kpg_reload_of_a_missing_pid_file_says_no_gateway_is_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a user meets after the gateway stopped (it removes its pid file), or when it was
    started without --pid-file: the message says so, not an errno and "no pid in it"."""
    pid_file = tmp_path / "kpg.pid"
    assert cli.main(["reload", "--pid-file", str(pid_file)]) == 2
    said = capsys.readouterr().err
    assert f"no kpg run --pid-file {pid_file} is running" in said
    assert "kpg reload --pid PID" in said
    assert "Errno" not in said


def test_kpg_reload_does_not_signal_a_gateway_of_another_pid_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "VERDICT_WAIT_S", 0.5)
    other = fake_gateway(tmp_path, "other.pid", "")
    try:
        pid_file = tmp_path / "kpg.pid"
        pid_file.write_text(f"{other.pid}\n")
        assert cli.main(["reload", "--pid-file", str(pid_file)]) == 2
        assert "whose pid file is other.pid, not this one" in capsys.readouterr().err
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def fake_gateway(directory: Path, pid_file: str, on_hup: str) -> subprocess.Popen[str]:
    """A process whose command line is ``... run --pid-file <pid_file>`` (relative, in
    ``directory``) that runs ``on_hup`` on each SIGHUP."""
    hup = textwrap.indent(textwrap.dedent(on_hup) or "pass", "    ")
    code = (
        "import json, os, signal, time\n"
        f"def hup(*_):\n{hup}\n"
        "signal.signal(signal.SIGHUP, hup)\n"
        "print('ready', flush=True)\n"
        "time.sleep(300)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code, "run", "--pid-file", pid_file],
        cwd=directory,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    return process


def test_kpg_reload_ignores_an_outcome_another_user_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In a shared directory such as /tmp anyone can create PATH.reload, which the gateway
    then cannot replace: a forged "applied" must not be printed as the gateway's outcome.
    Here the stand-in gateway (root) writes the forged file as another user would own it."""
    monkeypatch.setattr(cli, "VERDICT_WAIT_S", 1.0)
    forge = textwrap.dedent(
        f"""
        path = "kpg.pid.reload"
        with open(path, "w") as f:
            json.dump({{"pid": os.getpid(), "seq": 1, "result": "applied",
                       "message": "policy version forged"}}, f)
        os.chown(path, {NOBODY}, {NOBODY})
        """
    )
    gateway = fake_gateway(tmp_path, "kpg.pid", forge)
    try:
        pid_file = tmp_path / "kpg.pid"
        pid_file.write_text(f"{gateway.pid}\n")
        assert cli.main(["reload", "--pid-file", str(pid_file)]) == 1
        captured = capsys.readouterr()
        assert "forged" not in captured.out + captured.err
        assert (tmp_path / "kpg.pid.reload").stat().st_uid == NOBODY  # it was there to read
    finally:
        gateway.send_signal(signal.SIGKILL)
        gateway.wait()


# --- the embedded broker's binary ------------------------------------------------------------


def test_an_embedded_broker_binary_others_can_write_is_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`kpg run` with no upstream runs it as the gateway's user: another user who could
    write it would run their own program so."""
    ran = tmp_path / "ran"
    binary = tmp_path / "bin" / "tansu"
    binary.parent.mkdir()
    binary.write_text(f"#!/bin/sh\ntouch {ran}\n")
    binary.chmod(0o777)
    monkeypatch.setenv("CALF_TANSU_BIN", str(binary))
    with pytest.raises(EmbeddedBrokerError, match=f"binary {binary} is writable by group and"):
        EmbeddedBroker().start(timeout_s=5)
    assert not ran.exists()
