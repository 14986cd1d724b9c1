"""The gateway's own files on the host, and who else may write them.

What the gateway trusts on disk (the SQLite state store, which decides record validation
policies and client configs; the audit spool, whose events are the record) must be writable
by no other local user, as PostgreSQL refuses a data directory and sshd's ``StrictModes`` a
key file that others can write: such a file, or its directory, stops start-up with a message
naming the path. "Others" are any user but the gateway's own (its effective uid) and root, and
the group: a directory or file that is group- or world-writable, or owned by another user, is
refused. The directories above are not judged: a Kubernetes ``emptyDir`` is world-writable
(0777) and private to its pod, and ``/tmp`` is sticky; the gateway creates its own directory
in such a place (mode 0750), where only the state store's and the spool's own directories
must be its own.

What the gateway creates it creates narrowly (the mode given here, narrowed further by the
umask, never widened): directories 0750, spool segments 0640, the state file 0600. Files it
replaces (the pid file, a reload's outcome) are written to a fresh file of a random name
(``O_EXCL``) and renamed over the path, which replaces a planted symlink instead of writing
through it.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Final

DIRECTORY_MODE: Final = 0o750
"""Directories the gateway creates (the spool's, the state file's): the group may read."""


class UnsafePathError(Exception):
    """A file or directory the gateway would trust that another local user can write."""


def _writable_by_others(mode: int) -> str | None:
    who = [name for bit, name in ((stat.S_IWGRP, "group"), (stat.S_IWOTH, "others")) if mode & bit]
    return " and ".join(who) if who else None


def check_private(path: Path, what: str) -> None:
    """``path`` (followed, if a symlink), as the module says.

    :raises UnsafePathError: naming the path, why, and what to do about it.
    :raises OSError: when ``path`` cannot be examined.
    """
    resolved = path.resolve()
    info = os.stat(resolved)
    own = os.geteuid()
    if info.st_uid not in (own, 0):
        raise UnsafePathError(
            f"{what} {path} is owned by uid {info.st_uid}, not by the gateway's user "
            f"(uid {own}) or root, who alone may write what the gateway trusts"
        )
    writers = _writable_by_others(info.st_mode)
    if writers is not None:
        raise UnsafePathError(
            f"{what} {path} is writable by {writers} (mode {stat.S_IMODE(info.st_mode):04o}): "
            f"another local user could change what the gateway trusts; chmod go-w {resolved}"
        )


def make_private_dirs(path: Path, what: str) -> None:
    """Create ``path`` and the directories missing above it (mode 0750), then
    :func:`check_private` it.

    :raises UnsafePathError: as :func:`check_private`.
    :raises OSError: when it cannot be created.
    """
    missing: list[Path] = []
    for directory in (path, *path.parents):
        if directory.exists():
            break
        missing.append(directory)
    for directory in reversed(missing):
        # Another process may create it meanwhile: check_private judges it then.
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=DIRECTORY_MODE)
    check_private(path, what)


def write_replacing(path: Path, data: bytes, mode: int) -> None:
    """Put ``data`` at ``path`` with ``mode``: a new file of a random name beside it, renamed
    over ``path``. A symlink at ``path`` is replaced, never written through.

    :raises OSError: when it cannot be written or renamed (in a sticky directory, over a file
        another user owns); the new file is removed then.
    """
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
