"""The gateway's log formats (kpg run --log-format): records in, lines out, no I/O."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys

import pytest

from gateway.cli import build_parser
from gateway.logs import TEXT_FORMAT, JsonFormatter, TextFormatter

pytestmark = pytest.mark.unit


def record(message: str, *args: object, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    made = logging.LogRecord("gateway.audit", logging.ERROR, __file__, 1, message, args, exc_info)
    made.created = 1_795_251_600.123
    return made


def test_a_json_line_holds_time_level_logger_message_and_exception() -> None:
    try:
        raise OSError(28, "No space left on device")
    except OSError as exc:
        line = JsonFormatter().format(record("lost %d events\nin %s", 3, "spool", exc=exc))

    data = json.loads(line)
    assert "\n" not in line
    assert list(data) == ["time", "level", "logger", "message", "exception"]
    assert data["time"] == "2026-11-21T09:00:00.123Z"
    assert (data["level"], data["logger"]) == ("ERROR", "gateway.audit")
    assert data["message"] == "lost 3 events\nin spool"
    assert data["exception"].startswith("Traceback") and "No space left" in data["exception"]


def test_without_an_exception_it_is_null() -> None:
    assert json.loads(JsonFormatter().format(record("plain")))["exception"] is None


def test_kpg_run_takes_text_or_json() -> None:
    assert build_parser().parse_args(["run"]).log_format == "text"
    assert build_parser().parse_args(["run", "--log-format", "json"]).log_format == "json"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--log-format", "xml"])


def configured_lines(log_format: str, logging_calls: str) -> list[str]:
    """The lines configure() writes for ``logging_calls`` (on ``log``, gateway.x), run in a
    fresh interpreter: configure() sets the root logger, which a test runner owns."""
    code = (
        "import io, logging, sys; from gateway.logs import configure; s = io.StringIO(); "
        f"configure('INFO', {log_format!r}, s); log = logging.getLogger('gateway.x'); "
        f"{logging_calls}; sys.stdout.write(s.getvalue())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def test_configure_sends_json_lines_to_the_stream() -> None:
    (line,) = configured_lines("json", "log.info('hi %s', 'there'); log.debug('hidden')")
    assert json.loads(line)["message"] == "hi there"


def test_an_unknown_format_is_refused() -> None:
    from gateway.logs import configure

    with pytest.raises(ValueError, match="log format"):
        configure("INFO", "xml", io.StringIO())


def test_a_text_line_cannot_be_forged_by_a_client_s_text() -> None:
    """A client's text with a newline (a config value, a name quoted in a refusal) stays on
    its record's line, escaped; control characters are shown, not written; a traceback
    keeps its lines."""
    forged = "2026-11-21 09:00:00,000 INFO gateway.server: all clear"
    formatter = TextFormatter(TEXT_FORMAT)

    line = formatter.format(record("refused %s", f"value 'x\n{forged}'\r\x1b[2J\t"))

    assert line.count("\n") == 0
    assert line.endswith(f"refused value 'x\\n{forged}'\\r\\x1b[2J\\t")
    try:
        raise ValueError("boom")
    except ValueError as exc:
        with_traceback = formatter.format(record("failed\nhere", exc=exc))
    first, *rest = with_traceback.splitlines()
    assert first.endswith("failed\\nhere") and rest[0].startswith("Traceback")


def test_configure_writes_text_lines_through_the_escaping_formatter() -> None:
    (line,) = configured_lines("text", "log.info('a\\nb')")
    assert line.endswith("gateway.x: a\\nb")
