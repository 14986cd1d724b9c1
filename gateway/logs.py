"""The gateway's log lines on stderr: plain text for people, or one JSON object per line for
a log pipeline (``kpg run --log-format json``).

A JSON line has ``time`` (UTC, ISO-8601 with milliseconds and a ``Z``, as the audit events
write it), ``level``, ``logger``, ``message`` (arguments applied) and ``exception`` (the
formatted traceback, or null). A message spanning lines stays one JSON line: its newlines
are escaped.

A text line's message has every character that is not printable escaped (a newline written
as a backslash and ``n``, the others as Python writes them: ``\\x1b``, ``\\x9b``, ``\\u2028``):
messages quote what clients sent (names, config values, the reasons a request was refused),
and a newline in one would otherwise start a line that looks like the gateway's own (log
forging), a terminal escape (ESC, or its one-character form CSI, U+009B) would drive the
terminal of whoever reads the log, a line or paragraph separator (U+2028, U+2029, NEL) ends
the line for tools that split lines as Python does, and a bidirectional override (U+202E)
shows the rest of the line reversed. A JSON line writes the same characters as ``\\u``
escapes (``json`` leaves all but the C0 controls as they are). A traceback after the
message keeps its lines.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from typing import Final, TextIO

from spark_audit.event import format_time

LOG_FORMATS: Final = ("text", "json")
TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _escape_unprintable(text: str, escape: Callable[[str], str]) -> str:
    """``text`` with each character :meth:`str.isprintable` refuses (the space is printable)
    replaced by ``escape`` of it."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else escape(c) for c in text)


def _python_escape(character: str) -> str:
    """A backslash escape as Python writes it: ``\\n``, ``\\x1b``, ``\\u2028``."""
    return character.encode("unicode_escape").decode("ascii")


def _json_escape(character: str) -> str:
    """A JSON ``\\u`` escape (two, a surrogate pair, past the Basic Multilingual Plane)."""
    data = character.encode("utf-16-be", "surrogatepass")
    return "".join(f"\\u{data[i]:02x}{data[i + 1]:02x}" for i in range(0, len(data), 2))


class TextFormatter(logging.Formatter):
    """:data:`TEXT_FORMAT` lines, one per record: characters in the message that are not
    printable are escaped, so a client's text can neither forge a line nor drive a terminal."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        escaped = logging.makeLogRecord(record.__dict__)
        escaped.message = _escape_unprintable(record.message, _python_escape)
        return super().formatMessage(escaped)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, keys in a fixed order (``worker`` after ``level`` in a
    worker of ``kpg run --workers``)."""

    def __init__(self, worker: int | None = None) -> None:
        super().__init__()
        self._worker = worker

    def format(self, record: logging.LogRecord) -> str:
        exception = None
        if record.exc_info:
            exception = self.formatException(record.exc_info)
        elif record.exc_text:
            exception = record.exc_text
        if record.stack_info:
            stack = self.formatStack(record.stack_info)
            exception = stack if exception is None else f"{exception}\n{stack}"
        line: dict[str, object] = {
            "time": format_time(int(record.created * 1000)),
            "level": record.levelname,
        }
        if self._worker is not None:
            line["worker"] = self._worker
        line.update(logger=record.name, message=record.getMessage(), exception=exception)
        # Outside its strings a JSON line is printable ASCII: only text in them is escaped.
        return _escape_unprintable(json.dumps(line, ensure_ascii=False, default=str), _json_escape)


def configure(
    level: str, log_format: str = "text", stream: TextIO | None = None, worker: int | None = None
) -> None:
    """Send log records at ``level`` and above to ``stream`` (stderr) in ``log_format``, each
    naming ``worker`` when the process is one of ``kpg run --workers``; as
    :func:`logging.basicConfig`, nothing changes when the root logger has a handler already
    (a test runner's).

    :raises ValueError: for a format not in :data:`LOG_FORMATS`.
    """
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {LOG_FORMATS}, got {log_format!r}")
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    if log_format == "json":
        handler.setFormatter(JsonFormatter(worker))
    else:
        named = TEXT_FORMAT.replace("%(name)s", f"worker-{worker} %(name)s")
        handler.setFormatter(TextFormatter(TEXT_FORMAT if worker is None else named))
    logging.basicConfig(level=level, handlers=[handler])
