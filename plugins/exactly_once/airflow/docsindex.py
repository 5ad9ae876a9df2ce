"""The Data Docs index by interval (``/eo/data-docs``): every validation of the tables a user may read,
grouped by interval (newest first) and paged, each with its verdict, its version's report and its
suites' Data Docs pages. Great Expectations' own index (``reports/data_docs/index.html``) is one flat
list of validation runs - a few rows per interval per table, thousands for a year; this one reads only
the transaction logs' intervals and, for the page shown, their epochs.
"""
from __future__ import annotations

from dataclasses import dataclass
from html import escape
from urllib.parse import urlencode

from ..errors import ExactlyOnceError
from ..ids import Interval
from ..ops.inspection import EpochView, interval_view, intervals
from ..quality.reports import report_link, table_page_url, version_page_url
from .pages import DATA_DOCS_URL, a, layout, verdict
from .tables import TableRef

PAGE_SIZE = 30  # intervals per page


@dataclass(frozen=True)
class Entry:
    table: TableRef
    epochs: tuple[EpochView, ...]
    live: int | None


@dataclass(frozen=True)
class DocsPage:
    groups: list[tuple[Interval, list[Entry]]]   # the page's intervals, newest first
    page: int
    pages: int
    total: int                                   # intervals (distinct) over the tables
    table: str                                   # "pipeline/sink" filter, or ""
    errors: list[str]


def docs_page(tables: list[TableRef], page: int, table: str = "") -> DocsPage:
    """Page ``page`` (1-based; clamped) of the validations of ``tables`` (only ``pipeline/sink`` when given)."""
    chosen = [t for t in tables if not table or f"{t.pipeline}/{t.sink}" == table]
    by_start: dict[object, Interval] = {}
    of: dict[object, list[TableRef]] = {}
    sinks, errors = {}, []
    for t in chosen:
        try:
            sinks[t.key] = t.handle()
            every = intervals(sinks[t.key])
        except (ExactlyOnceError, OSError) as exc:
            errors.append(f"{t.sink} of {t.pipeline}: cannot read the transaction log: {exc}")
            continue
        for iv in every:
            key = (iv.start, iv.end)
            by_start.setdefault(key, iv)
            of.setdefault(key, []).append(t)
    keys = sorted(by_start, key=lambda k: k, reverse=True)
    pages = max(1, -(-len(keys) // PAGE_SIZE))
    page = min(max(1, page), pages)
    groups = []
    for key in keys[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]:
        iv, entries = by_start[key], []
        for t in of[key]:
            view = interval_view(sinks[t.key], iv, with_recover=False)
            entries.append(Entry(t, view.epochs, view.live.epoch if view.live else None))
        groups.append((iv, entries))
    return DocsPage(groups, page, pages, len(keys), table, errors)


def _url(p: DocsPage, page: int) -> str:
    return f"{DATA_DOCS_URL}?" + urlencode({**({"table": p.table} if p.table else {}), "page": page})


def _pager(p: DocsPage) -> str:
    if p.pages == 1:
        return ""
    links = []
    for n in sorted({1, max(1, p.page - 2), max(1, p.page - 1), p.page, min(p.pages, p.page + 1),
                     min(p.pages, p.page + 2), p.pages}):
        links.append(f"<b>{n}</b>" if n == p.page else a(_url(p, n), str(n)))
    prev = a(_url(p, p.page - 1), "newer") if p.page > 1 else ""
    nxt = a(_url(p, p.page + 1), "older") if p.page < p.pages else ""
    return f"<p class=\"pager\">{prev} {' '.join(links)} {nxt} <span class=\"muted\">page {p.page} of {p.pages}</span></p>"


def _entry(e: Entry, many: bool) -> str:
    t = e.table
    items = []
    for ep in e.epochs:
        live = " <b>live</b>" if e.live == ep.epoch else ""
        suites = [a(report_link(path), name) for name, path in ep.quality.reports.items() if report_link(path)]
        pages = f" - Data Docs: {', '.join(suites)}" if suites else " <span class=\"muted\">- no Data Docs</span>"
        items.append(f"<li>{a(version_page_url(t.pipeline, t.sink, ep.version), ep.label)}{live} "
                     f"<span class=\"{ep.state.value}\">{ep.state.value}</span> {verdict(ep.quality)}{pages}</li>")
    name = f"<b>{a(table_page_url(t.pipeline, t.sink), t.sink)}</b> <span class=\"muted\">of {escape(t.pipeline)}</span>"
    return f"<li>{name}<ul>{''.join(items)}</ul></li>" if many else "".join(items)


def docs_html(p: DocsPage, tables: list[TableRef]) -> str:
    options = "".join(f"<option value=\"{escape(k)}\"{' selected' if k == p.table else ''}>{escape(k)}</option>"
                      for k in sorted({f'{t.pipeline}/{t.sink}' for t in tables}))
    form = (f"<form method=\"get\">table <select name=\"table\"><option value=\"\">every table</option>{options}"
            "</select> <button type=\"submit\">Show</button></form>")
    errors = "".join(f"<p class=\"bad\">{escape(e)}</p>" for e in p.errors)
    many = not p.table
    rows = "".join(f"<tr><td id=\"iv-{escape(iv.token)}\">{escape(iv.label)}</td>"
                   f"<td><ul>{''.join(_entry(e, many) for e in entries)}</ul></td></tr>" for iv, entries in p.groups)
    body = (f"<h1>Data Docs by interval</h1><p class=\"muted\">{p.total} interval(s), newest first, {len(p.groups)} on "
            f"this page. Each validation: its verdict, its version's report (measured values next to the limits) "
            f"and its suites' Data Docs pages. Great Expectations' own list: {a('reports/data_docs/index.html', 'index')}"
            f".</p>{form}{errors}{_pager(p)}"
            + (f"<table><tr><th>interval (UTC)</th><th>validations</th></tr>{rows}</table>" if rows else
               "<p>No validation yet.</p>") + _pager(p))
    return layout("Data Docs by interval", body)
