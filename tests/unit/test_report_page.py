"""The report page's rendering of client text (pure functions of spark_audit.report; the
whole page through Spark is in tests/spark/test_job.py, ``test_report_page_*``)."""

from __future__ import annotations

import pytest

from spark_audit.report import _cell, bar_chart_svg


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("terraform\u034f", "terraform\\u034f"),  # combining grapheme joiner
        ("terraform\ufe0f", "terraform\\ufe0f"),  # variation selector
        ("terraform\U000e0100", "terraform\\U000e0100"),  # variation selector supplement
        ("alice\u3164", "alice\\u3164"),  # Hangul filler
        ("alice\u115f", "alice\\u115f"),
        ("alice ", "alice\\x20"),  # a browser drops the trailing space
        (" alice", "\\x20alice"),
        ("a  b", "a \\x20b"),  # and folds two into one
        ("a b", "a b"),
        ("alice", "alice"),
    ],
)
def test_the_page_shows_text_a_browser_would_not_as_escapes(text: str, shown: str) -> None:
    """Python calls these characters printable, so the page wrote them as they were, and a
    browser shows nothing of them: a client id ``terraform\\u034f`` read as the operators'
    own ``terraform``, a claimed user ``alice `` (or ``alice\\u3164``) as ``alice``, in the
    tables and the charts' labels. They are written as escapes, as format characters are."""
    assert _cell(text) == f"<td>{shown}</td>"
    chart = bar_chart_svg([(text, 3)])
    assert f"<title>{shown}</title>" in chart
    assert f"<title>{shown}: 3</title>" in chart
