"""The Spark tests share the session-scoped ``spark`` fixture of tests/conftest.py."""

import os

import pytest

# py4j's Python callback server (foreachBatch) waits on its sockets with select(), which
# cannot take a file descriptor of 1,024 or more: past that, a streaming query hangs for
# good. Leave room for Spark's own.
_MAX_OPEN_FDS = 768


@pytest.fixture(autouse=True)
def few_open_file_descriptors() -> None:
    """Fail fast, naming the cause, where a test process that leaks descriptors (an event
    loop left open, say) would make the Spark tests hang."""
    if not os.path.isdir("/proc/self/fd"):
        return
    count = len(os.listdir("/proc/self/fd"))
    assert count < _MAX_OPEN_FDS, (
        f"{count} file descriptors open in the test process: something earlier leaked them, "
        "and py4j's select() hangs past 1,024"
    )
