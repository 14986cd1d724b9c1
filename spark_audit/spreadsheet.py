"""CSV cells a spreadsheet opens as text, never as a formula.

The reports' CSV files hold what clients chose: client ids, the user names they claimed,
topic and resource names, config values, messages quoting them. A spreadsheet reads a cell
that starts with ``=``, ``+``, ``-`` or ``@`` (or a tab or carriage return before one) as a
formula, so a client id of ``=HYPERLINK("http://...?"&A2)`` would run in the auditor's
spreadsheet (CSV injection). Such a cell is written with a leading apostrophe, which
spreadsheets take as "text" and do not show; a plain number (``-1``, a retention of "never")
is left as it is, since a spreadsheet reads it as the number it is. ``summary.json`` keeps
every value as recorded.
"""

from __future__ import annotations

import re
from typing import Any, Final

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

_FORMULA_STARTS: Final = ("=", "+", "-", "@", "\t", "\r")
_NUMBER: Final = r"^[-+]?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$"
_NUMBER_RE: Final = re.compile(_NUMBER)


def safe_cell(value: Any) -> Any:
    """``value``, with an apostrophe in front when it is text a spreadsheet would read as a
    formula."""
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS) and not _NUMBER_RE.match(value):
        return "'" + value
    return value


def safe_columns(frame: DataFrame) -> DataFrame:
    """``frame`` with :func:`safe_cell` applied to its text columns, in Spark."""
    columns = []
    for field in frame.schema.fields:
        column = F.col(field.name)
        if isinstance(field.dataType, T.StringType):
            # The first character, not a regular expression: every text cell of every CSV
            # file passes here, and few are formulas (the number's expression then runs).
            formula = F.substring(column, 1, 1).isin(*_FORMULA_STARTS) & ~column.rlike(_NUMBER)
            column = F.when(formula, F.concat(F.lit("'"), column)).otherwise(column)
        columns.append(column.alias(field.name))
    return frame.select(*columns)
