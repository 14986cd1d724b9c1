"""Audit reports from the Parquet table (or straight from a spool): JSON, CSV and HTML.

:func:`build_report` writes into ``out_dir``:

- ``summary.json``: every report's rows plus the totals, machine-readable;
- ``<report>.csv``: one file per report, the same rows;
- ``index.html``: the same numbers as tables, with inline SVG charts (no scripts, nothing
  fetched from the network).

All three come from the same collected rows, so they cannot disagree. Each stage logs a
line (``report stage i/n``) so a long run shows where it is.
"""

from __future__ import annotations

import csv
import datetime as dt
import html
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pyspark.sql import DataFrame, SparkSession

from spark_audit.event import SCHEMA_VERSION
from spark_audit.session import glob_paths, path_exists, spool_glob
from spark_audit.transforms import (
    decisions_per_hour,
    denials_by,
    parse_lines,
    prepare_events,
    table_schema,
    top_offenders,
    totals,
    validate_only_outcomes,
    would_deny_by_policy,
)

logger = logging.getLogger(__name__)

REPORT_FORMAT_VERSION: Final = 1
"""Version of ``summary.json``'s layout (not of the events)."""

_MAX_CHART_HOURS: Final = 24 * 92

VERDICT_COLOURS: Final = {"allowed": "#2e7d32", "denied": "#c62828", "would_deny": "#ef6c00"}

Row = dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Section:
    name: str
    title: str
    build: Callable[[DataFrame], DataFrame]
    description: str


def _sections(top_n: int) -> tuple[_Section, ...]:
    return (
        _Section(
            name="decisions_per_hour",
            title="Decisions per hour",
            build=decisions_per_hour,
            description="Gateway decisions per UTC hour, by verdict.",
        ),
        _Section(
            name="denials_by_policy",
            title="Denials by policy",
            build=lambda df: denials_by(df, "policy"),
            description="Denied decisions per policy.",
        ),
        _Section(
            name="denials_by_principal",
            title="Denials by principal",
            build=lambda df: denials_by(df, "principal"),
            description="Denied decisions per authenticated principal.",
        ),
        _Section(
            name="denials_by_client_id",
            title="Denials by client id",
            build=lambda df: denials_by(df, "client_id"),
            description="Denied decisions per Kafka client.id.",
        ),
        _Section(
            name="denials_by_topic",
            title="Denials by topic",
            build=lambda df: denials_by(df, "topic"),
            description="Denied decisions per topic.",
        ),
        _Section(
            name="top_offenders",
            title=f"Top {top_n} offenders",
            build=lambda df: top_offenders(df, top_n),
            description="Principal and client pairs with the most denied or would-deny decisions.",
        ),
        _Section(
            name="would_deny_by_policy",
            title="Dry run: would deny, per policy",
            build=would_deny_by_policy,
            description="What each policy in dry-run mode would have denied.",
        ),
        _Section(
            name="validate_only_outcomes",
            title="validate_only requests",
            build=validate_only_outcomes,
            description="Outcome of requests sent with validate_only (for example "
            "CreateTopics dry runs), per API, verdict and deciding policy.",
        ),
    )


def load_events(spark: SparkSession, input_path: str) -> DataFrame:
    """Audit table rows from ``input_path``: a spool directory (it has completed
    ``events-*.jsonl`` segments) or a Parquet table written by the stream.

    :raises FileNotFoundError: if ``input_path`` does not exist.
    """
    base = input_path.rstrip("/")
    if not path_exists(spark, base):
        raise FileNotFoundError(f"audit report input {input_path} does not exist")
    segments = spool_glob(base)
    if glob_paths(spark, segments):
        logger.info("report input %s is a spool directory", input_path)
        return prepare_events(parse_lines(spark.read.text(segments)))
    logger.info("report input %s is a Parquet table", input_path)
    # The table's root: Spark reads the files its _spark_metadata log lists, so files of a
    # batch the stream did not commit are never read.
    return spark.read.schema(table_schema()).parquet(base)


def build_report(
    spark: SparkSession, input_path: str, out_dir: str | Path, *, top_n: int = 10
) -> dict[str, Any]:
    """Compute every report from ``input_path`` and write them to ``out_dir``.

    :returns: the content of ``summary.json``.
    :raises FileNotFoundError: if ``input_path`` does not exist.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sections = _sections(top_n)
    stages = len(sections) + 3
    started = time.monotonic()

    def stage(number: int, what: str) -> None:
        logger.info(
            "report stage %d/%d: %s (%.1fs elapsed)",
            number,
            stages,
            what,
            time.monotonic() - started,
        )

    stage(1, f"loading events from {input_path}")
    events = load_events(spark, input_path).cache()
    try:
        stage(2, "totals")
        total_rows = _collect(totals(events))
        summary_totals = total_rows[0]
        reports: dict[str, list[Row]] = {}
        for number, section in enumerate(sections, start=3):
            stage(number, section.title.lower())
            reports[section.name] = _collect(section.build(events))
    finally:
        events.unpersist()

    stage(stages, f"writing summary.json, CSV files and index.html to {out}")
    summary: dict[str, Any] = {
        "report_format_version": REPORT_FORMAT_VERSION,
        "event_schema_version": SCHEMA_VERSION,
        "generated_at": dt.datetime.now(tz=dt.UTC).isoformat(timespec="seconds"),
        "input": input_path,
        "totals": summary_totals,
        "reports": reports,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    for section in sections:
        _write_csv(out / f"{section.name}.csv", reports[section.name])
    (out / "index.html").write_text(_render_html(summary, sections), encoding="utf-8")
    logger.info("report done in %.1fs: %s", time.monotonic() - started, out / "index.html")
    return summary


def _collect(df: DataFrame) -> list[Row]:
    columns = df.columns
    return [{name: _plain(row[name]) for name in columns} for row in df.collect()]


def _plain(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        # Spark hands out naive datetimes in the session time zone, which is UTC.
        return (
            value.replace(tzinfo=dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        )
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def _write_csv(path: Path, rows: Sequence[Row]) -> None:
    with path.open("w", newline="", encoding="utf-8") as file:
        if not rows:
            return
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


# --------------------------------------------------------------------------------------------
# HTML and SVG.

_SVG_OPEN: Final = '<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{}" height="{}">'

_CSS: Final = """
body { font-family: system-ui, sans-serif; margin: 2rem; color: #222; max-width: 70rem; }
h1 { margin-bottom: 0.2rem; } .meta { color: #666; margin-top: 0; }
.cards { display: flex; flex-wrap: wrap; gap: 1rem; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 0.6rem 1rem; min-width: 8rem; }
.card .value { font-size: 1.6rem; font-weight: 600; } .card .label { color: #666; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; font-size: 0.9rem; }
th, td { border: 1px solid #ddd; padding: 0.25rem 0.6rem; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
svg text { font-family: system-ui, sans-serif; font-size: 11px; fill: #333; }
.empty { color: #666; font-style: italic; }
"""


def _cell(value: Any) -> str:
    if value is None:
        return "<td>(none)</td>"
    if isinstance(value, bool):
        return f"<td>{str(value).lower()}</td>"
    if isinstance(value, int | float):
        return f'<td class="num">{value}</td>'
    return f"<td>{html.escape(str(value))}</td>"


def _table(rows: Sequence[Row]) -> str:
    if not rows:
        return '<p class="empty">No events.</p>'
    head = "".join(f"<th>{html.escape(name)}</th>" for name in rows[0])
    body = "".join("<tr>" + "".join(_cell(v) for v in row.values()) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _label(value: Any) -> str:
    return "(none)" if value is None else str(value)


def bar_chart_svg(bars: Sequence[tuple[str, int]], *, colour: str = "#c62828") -> str:
    """A horizontal bar chart, one labelled bar per (label, value)."""
    if not bars:
        return ""
    label_width, chart_width, bar_height, gap = 220, 420, 18, 6
    peak = max(value for _, value in bars) or 1
    height = len(bars) * (bar_height + gap) + gap
    parts = [_SVG_OPEN.format(label_width + chart_width + 80, height)]
    for index, (label, value) in enumerate(bars):
        y = gap + index * (bar_height + gap)
        width = max(1, round(chart_width * value / peak))
        text = html.escape(label if len(label) <= 34 else label[:33] + "…")
        parts.append(
            f'<text x="{label_width - 6}" y="{y + bar_height - 5}" text-anchor="end">{text}</text>'
            f'<rect x="{label_width}" y="{y}" width="{width}" height="{bar_height}"'
            f' fill="{colour}"><title>{html.escape(label)}: {value}</title></rect>'
            f'<text x="{label_width + width + 4}" y="{y + bar_height - 5}">{value}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def line_chart_svg(
    x_labels: Sequence[str], series: Mapping[str, Sequence[int]], colours: Mapping[str, str]
) -> str:
    """A line chart of several series over the same x positions, with a legend."""
    if not x_labels:
        return ""
    width, height, left, right, top, bottom = 760, 260, 50, 20, 20, 50
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = max((max(values) for values in series.values() if values), default=0) or 1
    step = plot_w / max(1, len(x_labels) - 1)

    def x(i: int) -> float:
        return left + (i * step if len(x_labels) > 1 else plot_w / 2)

    def y(v: int) -> float:
        return top + plot_h - plot_h * v / peak

    parts = [_SVG_OPEN.format(width, height)]
    for fraction in (0, 0.5, 1):
        value = round(peak * fraction)
        parts.append(
            f'<line x1="{left}" x2="{width - right}" y1="{y(value):.1f}" y2="{y(value):.1f}"'
            f' stroke="#ddd"/><text x="{left - 6}" y="{y(value) + 4:.1f}"'
            f' text-anchor="end">{value}</text>'
        )
    ticks = sorted({0, len(x_labels) - 1, (len(x_labels) - 1) // 2})
    for i in ticks:
        parts.append(
            f'<text x="{x(i):.1f}" y="{height - bottom + 16}" text-anchor="middle">'
            f"{html.escape(x_labels[i])}</text>"
        )
    for index, (name, values) in enumerate(series.items()):
        colour = colours.get(name, "#555")
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{points}"/>'
        )
        for i, v in enumerate(values):
            parts.append(
                f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="2.5" fill="{colour}">'
                f"<title>{html.escape(name)} {html.escape(x_labels[i])}: {v}</title></circle>"
            )
        legend_x = left + index * 130
        parts.append(
            f'<rect x="{legend_x}" y="{height - 18}" width="12" height="12" fill="{colour}"/>'
            f'<text x="{legend_x + 16}" y="{height - 8}">{html.escape(name)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _hourly_chart(rows: Sequence[Row]) -> str:
    hours = _hour_axis(sorted({row["hour"] for row in rows}))
    verdicts = [v for v in VERDICT_COLOURS if any(row["verdict"] == v for row in rows)]
    counts = {(row["hour"], row["verdict"]): row["decisions"] for row in rows}
    series = {v: [counts.get((hour, v), 0) for hour in hours] for v in verdicts}
    labels = [hour[:13].replace("T", " ") + "h" for hour in hours]
    return line_chart_svg(labels, series, VERDICT_COLOURS)


def _hour_axis(hours: Sequence[str]) -> list[str]:
    """Every hour from the first to the last, so quiet hours show as zero, unless that
    would be more than ``_MAX_CHART_HOURS`` points (then only hours with decisions)."""
    if not hours:
        return []
    first = dt.datetime.fromisoformat(hours[0])
    last = dt.datetime.fromisoformat(hours[-1])
    span = int((last - first) / dt.timedelta(hours=1)) + 1
    if span > _MAX_CHART_HOURS:
        return list(hours)
    return [_plain((first + dt.timedelta(hours=i)).replace(tzinfo=None)) for i in range(span)]


def _section_chart(name: str, rows: Sequence[Row]) -> str:
    if name == "decisions_per_hour":
        return _hourly_chart(rows)
    if name.startswith("denials_by_"):
        key = next(iter(rows[0])) if rows else ""
        return bar_chart_svg([(_label(row[key]), row["denials"]) for row in rows[:20]])
    if name == "top_offenders":
        return bar_chart_svg(
            [
                (
                    f"{_label(row['principal'])} / {_label(row['client_id'])}",
                    row["denials"] + row["would_deny"],
                )
                for row in rows
            ]
        )
    if name == "would_deny_by_policy":
        return bar_chart_svg(
            [(_label(row["policy"]), row["would_deny"]) for row in rows[:20]],
            colour=VERDICT_COLOURS["would_deny"],
        )
    return ""


def _render_html(summary: Mapping[str, Any], sections: Sequence[_Section]) -> str:
    totals_row = summary["totals"]
    cards = "".join(
        f'<div class="card"><div class="value">{html.escape(str(totals_row[key]))}</div>'
        f'<div class="label">{label}</div></div>'
        for key, label in (
            ("decisions", "decisions"),
            ("allowed", "allowed"),
            ("denied", "denied"),
            ("would_deny", "would deny (dry run)"),
            ("principals", "principals"),
            ("audit_events", "audit events"),
        )
    )
    period = (
        f"{totals_row['first_time']} to {totals_row['last_time']}"
        if totals_row["first_time"]
        else "no events"
    )
    body = [
        "<h1>Kafka policy gateway: audit report</h1>",
        f'<p class="meta">Events from {html.escape(period)}. Input '
        f"{html.escape(str(summary['input']))}; generated {summary['generated_at']}.</p>",
        f'<div class="cards">{cards}</div>',
    ]
    for section in sections:
        rows = summary["reports"][section.name]
        body.append(f'<h2 id="{section.name}">{html.escape(section.title)}</h2>')
        body.append(f"<p>{html.escape(section.description)}</p>")
        body.append(_section_chart(section.name, rows))
        body.append(_table(rows))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>Audit report</title>"
        f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n"
    )
