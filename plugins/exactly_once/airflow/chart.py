"""Quality over time: a table's rows, duplicates dropped, malformed lines and the gate's verdict per
interval, as inline SVG rendered on the server (no script, nothing loaded: the pages' CSP stays strict).

Three panels share the interval axis (oldest left), each on its own scale, and a verdict strip below them
(passed, failed, no verdict). Each interval is one link - a column over the panels and the strip, with a
tooltip of its figures - to its version's report (measured values next to the limits, Data Docs pages).
An interval shows its live version, else its newest attempt (a failed gate has no live version).
"""
from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Any, Sequence

from ..ids import Interval
from ..ops.inspection import EpochView

WIDTH, PANEL, GAP, LEFT, STRIP = 960, 64, 18, 64, 10
SERIES = (("rows", "rows", "s1"), ("dups", "duplicates dropped", "s2"), ("malformed", "malformed lines", "s3"))


@dataclass(frozen=True)
class Point:
    """One interval's figures (None: not measured) and where its report is."""

    label: str
    rows: int | None
    dups: int | None
    malformed: int | None
    passed: bool | None
    href: str
    version: str


def _count(e: EpochView, key: str) -> int | None:
    value: Any = e.quality.measured.get(key, e.quality.counts.get(key))
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def point(interval: Interval, e: EpochView, href: str) -> Point:
    """The chart's figures of ``e`` (the interval's live version, or its newest attempt)."""
    return Point(interval.label, e.rows, _count(e, "records_deduplicated"), _count(e, "records_rejected"),
                 e.quality.passed, href, e.label)


def _fmt(v: int | None) -> str:
    return "-" if v is None else f"{v:,}"


def svg(points: Sequence[Point]) -> str:
    """The chart of ``points`` (oldest first); "" when there is nothing to draw."""
    if not points:
        return ""
    n = len(points)
    plot = WIDTH - LEFT - 8
    step = plot / max(n, 1)
    height = len(SERIES) * (PANEL + GAP) + STRIP + 30
    x = [LEFT + step * (i + 0.5) for i in range(n)]
    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" '
             f'aria-label="quality over {n} interval(s)">']
    for k, (attr, title, cls) in enumerate(SERIES):
        top = k * (PANEL + GAP) + 12
        values = [getattr(p, attr) for p in points]
        known = [v for v in values if v is not None]
        peak = max(known) if known else 0
        scale = (PANEL - 4) / peak if peak else 0
        top_label = f'<text x="{LEFT - 6}" y="{top + 12}" text-anchor="end">{peak:,}</text>' if peak else ""
        parts.append(f'<text x="{LEFT}" y="{top - 3}">{escape(title)}</text>{top_label}<text x="{LEFT - 6}" '
                     f'y="{top + PANEL}" text-anchor="end">0</text>'
                     f'<line class="axis" x1="{LEFT}" y1="{top + PANEL}" x2="{WIDTH - 8}" y2="{top + PANEL}"/>')
        path, run = [], []
        for xi, v in zip(x, values):
            if v is None:
                if run:
                    path.append(run)
                run = []
                continue
            run.append(f"{xi:.1f},{top + PANEL - v * scale:.1f}")
        if run:
            path.append(run)
        for r in path:
            if len(r) == 1:
                cx, cy = r[0].split(",")
                parts.append(f'<circle class="{cls}" cx="{cx}" cy="{cy}" r="2"/>')
            else:
                parts.append(f'<polyline class="{cls}" points="{" ".join(r)}"/>')
    strip = len(SERIES) * (PANEL + GAP) + 4
    parts.append(f'<text x="0" y="{strip + STRIP - 1}">verdict</text>')
    for xi, p in zip(x, points):
        cls = "none" if p.passed is None else ("pass" if p.passed else "fail")
        verdict = "no verdict" if p.passed is None else ("passed" if p.passed else "FAILED")
        tip = (f"{p.label} {p.version}: {_fmt(p.rows)} rows, {_fmt(p.dups)} duplicates dropped, "
               f"{_fmt(p.malformed)} malformed lines; {verdict}")
        w = max(step - (1 if step > 3 else 0), 0.5)
        parts.append(f'<a href="{escape(p.href)}"><title>{escape(tip)}</title>'
                     f'<rect x="{xi - step / 2:.1f}" y="0" width="{step:.1f}" height="{strip - 2}" fill="transparent"/>'
                     f'<rect class="{cls}" x="{xi - w / 2:.1f}" y="{strip}" width="{w:.1f}" height="{STRIP}"/></a>')
    parts.append(f'<text x="{LEFT}" y="{height - 4}">{escape(points[0].label)}</text>'
                 f'<text x="{WIDTH - 8}" y="{height - 4}" text-anchor="end">{escape(points[-1].label)}</text></svg>')
    return "".join(parts)


def legend() -> str:
    return ('<div class="legend muted"><span><i style="background:var(--link)"></i>rows</span>'
            '<span><i style="background:var(--warn)"></i>duplicates dropped</span>'
            '<span><i style="background:var(--bad)"></i>malformed lines</span>'
            '<span>verdict: <b class="ok">passed</b> / <b class="bad">failed</b> / none</span> '
            '- each interval links to its report</div>')
