"""HTML of the plugin's pages (static, every value escaped; fixed scripts only, see ``style``): the shared
layout and helpers, the tables index, errors and the report pages. The table page is ``page_table``, the
actions' pages ``page_actions``, the Data Docs index ``docsindex``. Data comes from ``views``."""
from __future__ import annotations

from datetime import datetime, timezone
from html import escape
from typing import Any, Collection
from urllib.parse import quote

from ..ops.inspection import Quality
from ..quality.reports import URL_PREFIX, report_link, table_page_url, version_page_url
from .actions import ROLLBACK_DAG
from .style import HEAD
from .views import RunPage, TableStatus, VersionReport

DATA_DOCS_URL = f"{URL_PREFIX}/data-docs"


def layout(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>{escape(title)}</title>{HEAD}</head><body>"
            f"<nav><a href=\"{URL_PREFIX}/tables\">All tables</a><a href=\"{DATA_DOCS_URL}\">Data Docs by interval</a>"
            f"</nav>{body}</body></html>")


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


def airflow_run(dag_id: str, run_id: str | None, known: Collection[str] | None = None) -> str:
    """A link to the run's page in Airflow's UI; plain text for a run this Airflow does not know (``known``
    given and without it: made by ``airflow dags test`` or another Airflow - its page would be a 404)."""
    if not run_id:
        return "-"
    if known is not None and run_id not in known:
        return (f"<span title=\"this Airflow has no run {escape(run_id)} of {escape(dag_id)}: it was made by `airflow "
                f"dags test` or by another Airflow\">{escape(run_id)}</span> <span class=\"muted\">(not a run of this "
                "Airflow)</span>")
    return a(f"/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}", run_id, top=True)


# ---------------------------------------------------------------------------------------------- index
def index_page(tables: list[TableStatus], hidden: int) -> str:
    rows = "".join(f"<tr class=\"{'warn' if s.attention or s.error else ''}\">"
                   f"<td>{a(table_page_url(s.table.pipeline, s.table.sink), s.table.sink)}</td>"
                   f"<td>{a('/dags/' + quote(s.table.pipeline, safe=''), s.table.pipeline, top=True)}</td>"
                   f"<td>{_status(s)}</td><td>{_last_commit(s)}</td><td class=\"n\">{s.stale}</td>"
                   f"<td><code>{escape(s.table.describe())}</code></td>"
                   f"<td>{'declared by the DAG' if s.table.config else 'EO_TABLES'}</td></tr>" for s in tables)
    note = f"<p class=\"muted\">{hidden} more table(s) belong to DAGs you may not read.</p>" if hidden else ""
    empty = "<p>No tables: no DAG in the DAGs folder uses an exactly-once task group, and EO_TABLES is empty.</p>"
    body = ("<h1>Exactly-once tables</h1><table><tr><th>table</th><th>pipeline (DAG)</th><th>status</th>"
            "<th>last commit</th><th>stale intervals</th><th>location</th>"
            f"<th>found in</th></tr>{rows}</table><p class=\"muted\">Status is read from the log alone; late "
            "files and what recover would do are on each table's page.</p>" if tables else empty)
    return layout("Exactly-once tables", body + note)


def _status(s: TableStatus) -> str:
    if s.error:
        return f"<span class=\"bad\">{escape(s.error)}</span>"
    if not s.attention:
        return f"<span class=\"ok\">ok</span> <span class=\"muted\">({s.intervals} interval(s))</span>"
    why = [f"{n} {what}" for n, what in ((s.stale, "stale"), (s.uncommitted, "not committed")) if n]
    which = a(table_page_url(s.table.pipeline, s.table.sink) + "?state=attention",
              f"{s.attention} of {s.intervals} interval(s)")
    return f"<span class=\"bad\">needs attention</span>: {which} ({escape(', '.join(why))})"


def _last_commit(s: TableStatus) -> str:
    e = s.last_commit
    if e is None:
        return "-"
    return (f"{when(e.ended_at)} {a(version_page_url(s.table.pipeline, s.table.sink, e.version), e.version)}")


def error_html(status_code: int, message: str) -> str:
    """An error of an HTML route as a page: what went wrong (escaped) and the way back to the tables."""
    title = f"{status_code} - exactly-once"
    return layout(title, f"<h1>Error {status_code}</h1><p class=\"bad\">{escape(message)}</p>"
                  f"<p>{a(URL_PREFIX + '/tables', 'Back to the Exactly-once tables')}</p>")


def no_group_html(dag_id: str) -> str:
    """The report tabs of a DAG without an exactly-once group (Airflow shows a plugin's DAG and run tabs on
    every DAG: it cannot show them only on some)."""
    return layout(f"{dag_id} - exactly-once", f"<h1>{escape(dag_id)}</h1><p><b>{escape(dag_id)} has no exactly-once "
                  "group</b>: it writes no table through the protocol, so there is nothing to report here. "
                  "(Airflow shows this tab on every DAG.) The tables of the other DAGs are on "
                  f"{a(URL_PREFIX + '/tables', 'the Exactly-once tables page')}.</p>"
                  + ("<p>Its runs act on those tables: each table's page lists the epoch a run made, with what was "
                     "asked, by whom and a link to the run (\"rollback to e2 by alice\").</p>"
                     if dag_id == ROLLBACK_DAG else ""))


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
def version_html(report: VersionReport, known: Collection[str] | None = None) -> str:
    t = report.table
    title = f"{t.sink} {report.interval.start:%Y-%m-%d %H:%M} {report.epoch.label}"
    back = a(table_page_url(t.pipeline, t.sink), f"all intervals of {t.sink}")
    return layout(title, f"<h1>{escape(title)}</h1><p>{back}</p>" + report_section(report, known))


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


def report_section(r: VersionReport, known: Collection[str] | None = None) -> str:
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
            f"Run {airflow_run(e.run_dag or t.pipeline, e.run_id, known)}.</p>"
            "<table><tr><th>measured</th><th>value</th><th>limit</th><th></th></tr>" + rows + "</table>"
            + (f"<p>Failed checks:</p><ul>{failures}</ul>" if failures else "")
            + (f"<p>Data Docs of the suites:</p><ul>{pages}</ul>" if pages else
               "<p class=\"muted\">No Data Docs pages (not validated).</p>"))

