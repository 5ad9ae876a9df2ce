"""HTML of the plugin's pages (static, no JavaScript; every value escaped). Data comes from ``views``."""
from __future__ import annotations

from datetime import datetime, timezone
from html import escape
from typing import Any, Iterable
from urllib.parse import quote

from ..inspection import EpochView, Quality
from ..reports import URL_PREFIX, report_link, run_report_url, table_page_url, version_page_url
from .tables import TableRef
from .views import ATTENTION, STATES, IntervalRow, RunPage, TablePage, VersionReport

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1em 1.5em;color:#1a1a1a}
h1{font-size:1.35em;margin:.2em 0}h2{font-size:1.1em;margin:1.2em 0 .4em}
table{border-collapse:collapse;margin:.4em 0}th,td{border:1px solid #ccd;padding:3px 6px;vertical-align:top}
th{background:#eef1f6;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}
.COMMITTED{color:#11622b}.ABORTED{color:#a0141e}.OPEN,.PRE_COMMITTED{color:#8a5a00}
.ok{color:#11622b}.bad{color:#a0141e;font-weight:600}.muted{color:#667}.warn{background:#fff4d6}
ul{margin:.2em 0;padding-left:1.2em}form{margin:.6em 0}code{font-size:.95em}
nav a{margin-right:1em}
"""


def layout(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>{escape(title)}</title>"
            f"<style>{CSS}</style></head><body><nav><a href=\"{URL_PREFIX}/tables\">All tables</a>"
            f"<a href=\"{URL_PREFIX}/reports/data_docs/index.html\">Data Docs (all validations)</a></nav>"
            f"{body}</body></html>")


def a(href: str, text: str, *, top: bool = False) -> str:
    target = " target=\"_top\"" if top else ""
    return f"<a href=\"{escape(href)}\"{target}>{escape(text)}</a>"


def when(ts: float | None) -> str:
    if not ts:
        return "-"
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def num(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return escape(str(value))


def airflow_run(dag_id: str, run_id: str | None) -> str:
    if not run_id:
        return "-"
    return a(f"/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}", run_id, top=True)


# ---------------------------------------------------------------------------------------------- index
def index_page(tables: list[TableRef], hidden: int) -> str:
    rows = "".join(f"<tr><td>{a(table_page_url(t.pipeline, t.sink), t.sink)}</td>"
                   f"<td>{a('/dags/' + quote(t.pipeline, safe=''), t.pipeline, top=True)}</td>"
                   f"<td><code>{escape(t.describe())}</code></td>"
                   f"<td>{'declared by the DAG' if t.config else 'EO_TABLES'}</td></tr>" for t in tables)
    note = f"<p class=\"muted\">{hidden} more table(s) belong to DAGs you may not read.</p>" if hidden else ""
    empty = "<p>No tables: no DAG in the DAGs folder uses an exactly-once task group, and EO_TABLES is empty.</p>"
    body = ("<h1>Exactly-once tables</h1><table><tr><th>table</th><th>pipeline (DAG)</th><th>location</th>"
            f"<th>found in</th></tr>{rows}</table>" if tables else empty)
    return layout("Exactly-once tables", body + note)


# ---------------------------------------------------------------------------------------------- table
def table_html(page: TablePage) -> str:
    t = page.table
    head = (f"<h1>{escape(t.sink)} <span class=\"muted\">of</span> "
            f"{a('/dags/' + quote(t.pipeline, safe=''), t.pipeline, top=True)}</h1>"
            f"<div class=\"muted\">location <code>{escape(t.describe())}</code> - {page.total} interval(s) in "
            f"the log, {len(page.rows)} shown</div>{_filters(page)}")
    if page.error:
        return layout(t.sink, head + f"<p class=\"bad\">{escape(page.error)}</p>")
    body = head + _attention(page) + _intervals(page)
    return layout(f"{t.sink} - exactly-once", body)


def _filters(page: TablePage) -> str:
    f = page.filters
    opts = "".join(f"<option value=\"{s}\"{' selected' if f.state == s else ''}>{label}</option>"
                   for s, label in [("", "any state"), *((s, s) for s in STATES),
                                    (ATTENTION, "needs attention")])
    return (f"<form method=\"get\">state <select name=\"state\">{opts}</select> "
            f"from <input type=\"date\" name=\"since\" value=\"{f.since or ''}\"> "
            f"to <input type=\"date\" name=\"until\" value=\"{f.until or ''}\"> "
            f"show <input type=\"number\" name=\"limit\" min=\"1\" max=\"500\" value=\"{f.limit}\"> "
            "<button type=\"submit\">Filter</button></form>")


def _attention(page: TablePage) -> str:
    items = []
    if page.stale:
        items.append("<li class=\"bad\">Stale (their state was computed from a version that is no longer "
                     f"live): {escape(', '.join(page.stale))}. Re-run them in this order.</li>")
    for row in page.rows:
        v = row.view
        if v.recover:
            items.append(f"<li><b>{escape(_iv(row))}</b>: <code>eo recover</code> would: "
                         f"{escape('; '.join(v.recover))}</li>")
        late = row.late or {}
        if late.get("new") or late.get("changed") or late.get("missing"):
            items.append(f"<li class=\"warn\"><b>{escape(_iv(row))}</b>: {_late(row)} - reprocess the interval "
                         "to take them in</li>")
    if not items:
        return "<p class=\"ok\">Nothing to do: no stale interval, no late file, nothing for recover.</p>"
    return f"<h2>Needs attention</h2><ul>{''.join(items)}</ul>"


def _iv(row: IntervalRow) -> str:
    iv = row.view.interval
    return f"{iv.start:%Y-%m-%d %H:%M} - {iv.end:%Y-%m-%d %H:%M}"


def _late(row: IntervalRow) -> str:
    if row.late is None:
        return escape(row.late_error) if row.late_error else "<span class=\"muted\">-</span>"
    parts = [f"{len(row.late[k])} {k}" for k in ("new", "changed", "missing") if row.late.get(k)]
    if not parts:
        return "none"
    files = ", ".join(row.late.get("new", [])[:5] + row.late.get("changed", [])[:5])
    return escape("; ".join(parts) + (f" ({files})" if files else ""))


def _intervals(page: TablePage) -> str:
    t = page.table
    head = ("<h2>Intervals</h2><table><tr><th>interval (UTC)</th><th>state</th><th>live version</th><th>rows</th>"
            "<th>files</th><th>quality of the live version</th><th>epochs (attempts)</th><th>late files</th>"
            "<th>recover would</th></tr>")
    rows = []
    for row in page.rows:
        v = row.view
        live = v.live
        state = v.state + (" (stale)" if row.stale else "")
        rows.append(
            f"<tr class=\"{'warn' if row.needs_attention else ''}\"><td>{escape(_iv(row))}</td>"
            f"<td class=\"{escape(v.state)}\">{escape(state)}</td>"
            f"<td>{a(version_page_url(t.pipeline, t.sink, live.version), live.label) if live else '-'}</td>"
            f"<td class=\"n\">{num(live.rows if live else None)}</td>"
            f"<td class=\"n\">{num(live.files if live else None)}</td>"
            f"<td>{quality_cell(live.quality) if live else '-'}</td>"
            f"<td>{_epochs(t, v.epochs)}</td><td>{_late(row)}</td>"
            f"<td>{escape('; '.join(v.recover)) or 'nothing'}</td></tr>")
    return head + "".join(rows) + "</table>"


def _epochs(t: TableRef, epochs: Iterable[EpochView]) -> str:
    items = []
    for e in epochs:
        reason = f" - {escape(e.reason)}" if e.reason else ""
        items.append(f"<li>{a(version_page_url(t.pipeline, t.sink, e.version), e.label)} "
                     f"<span class=\"{e.state.value}\">{e.state.value}</span>{reason} "
                     f"<span class=\"muted\">{when(e.started_at)}, run</span> {airflow_run(t.pipeline, e.run_id)}"
                     f" {a(run_report_url(t.pipeline, e.run_id), 'run report') if e.run_id else ''}</li>")
    return f"<ul>{''.join(items)}</ul>"


def verdict(q: Quality) -> str:
    if q.passed is None:
        return "<span class=\"muted\">no verdict</span>"
    return "<span class=\"ok\">passed</span>" if q.passed else f"<span class=\"bad\">FAILED: {escape(q.headline)}</span>"


def quality_cell(q: Quality) -> str:
    ratio = ""
    if q.malformed_ratio is not None:
        limit = f" (limit {num(q.max_malformed_ratio)})" if q.max_malformed_ratio is not None else ""
        ratio = f"malformed {num(q.malformed_ratio)}{limit}<br>"
    return ratio + verdict(q) + suite_links(q)


def suite_links(q: Quality) -> str:
    links = [a(report_link(path), name) for name, path in q.reports.items() if report_link(path)]
    return f"<br>reports: {', '.join(links)}" if links else ""


# ---------------------------------------------------------------------------------------------- reports
def version_html(report: VersionReport) -> str:
    t = report.table
    title = f"{t.sink} {report.interval.start:%Y-%m-%d %H:%M} {report.epoch.label}"
    back = a(table_page_url(t.pipeline, t.sink), f"all intervals of {t.sink}")
    return layout(title, f"<h1>{escape(title)}</h1><p>{back}</p>" + report_section(report))


def run_html(page: RunPage) -> str:
    title = f"{page.dag_id} run {page.run_id}"
    parts = [f"<h1>{escape(title)}</h1><p>{airflow_run(page.dag_id, page.run_id)} in Airflow"]
    if page.interval is not None:
        parts.append(f" - data interval {escape(str(page.interval))}")
    parts.append("</p>")
    if page.error:
        parts.append(f"<p class=\"bad\">{escape(page.error)}</p>")
    parts += [report_section(r) for r in page.reports]
    for t in page.untouched:
        parts.append(f"<h2>{escape(t.sink)}</h2><p class=\"muted\">This run began no transaction of this table "
                     f"(it failed before begin, or was not run). "
                     f"{a(table_page_url(t.pipeline, t.sink), 'All intervals of ' + t.sink)}</p>")
    return layout(title, "".join(parts))


def report_section(r: VersionReport) -> str:
    e, t = r.epoch, r.table
    live = " (live)" if r.live is not None and r.live.epoch == e.epoch and e.published else ""
    rows = "".join(
        f"<tr><td>{escape(m.label)}</td><td class=\"n\">{num(m.value)}</td>"
        f"<td>{escape(' and '.join(m.limits)) or '<span class=muted>-</span>'}</td>"
        f"<td>{'-' if m.ok is None else ('<span class=ok>ok</span>' if m.ok else '<span class=bad>VIOLATED</span>')}"
        f"</td></tr>" for m in r.measures)
    failures = "".join(f"<li><code>{escape(f)}</code></li>" for f in e.quality.failures)
    q = e.quality
    pages = "".join(f"<li>{a(report_link(p), name)}</li>" for name, p in q.reports.items() if report_link(p))
    return (f"<h2>{escape(t.sink)} {escape(str(r.interval))} - {a(version_page_url(t.pipeline, t.sink, e.version), e.label)}: "
            f"<span class=\"{e.state.value}\">{e.state.value}{live}</span></h2>"
            f"<p>{escape(e.reason) or 'published and live'}. Began {when(e.started_at)}, ended {when(e.ended_at)}; "
            f"{num(e.rows)} rows in {num(e.files)} files. Verdict: {verdict(q)}. "
            f"Run {airflow_run(t.pipeline, e.run_id)}.</p>"
            "<table><tr><th>measured</th><th>value</th><th>limit</th><th></th></tr>" + rows + "</table>"
            + (f"<p>Failed checks:</p><ul>{failures}</ul>" if failures else "")
            + (f"<p>Data Docs of the suites:</p><ul>{pages}</ul>" if pages else
               "<p class=\"muted\">No Data Docs pages (not validated).</p>"))

