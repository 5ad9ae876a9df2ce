"""HTML of the plugin's pages (static, every value escaped; one fixed script, :data:`TOP_LINKS`). Data
comes from ``views``."""
from __future__ import annotations

import base64
import hashlib
from datetime import datetime, timezone
from html import escape
from typing import Any, Iterable, Mapping
from urllib.parse import quote, urlencode

from ..errors import ExactlyOnceError
from ..ids import Interval
from ..ops.inspection import EpochView, Quality
from ..quality.reports import URL_PREFIX, report_link, run_report_url, table_page_url, version_page_url
from .actions import ACTIONS, ROLLBACK_DAG, Request
from .tables import TableRef
from .views import ATTENTION, STATES, IntervalRow, RunPage, TablePage, TableStatus, VersionReport

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


# Airflow's UI embeds plugin pages in an iframe sandboxed without allow-top-navigation, so a link to an
# Airflow page (target=_top) would do nothing there. Same origin, the page routes Airflow's single-page app
# instead: it pushes the link's path onto the top window's history and lets the app's router see it (a
# popstate, as the Back button gives). Outside a frame, or for another origin, the link works as usual.
TOP_LINKS = """document.addEventListener("click", function (e) {
  var a = e.target.closest ? e.target.closest("a[target=_top]") : null;
  if (!a || window.top === window) return;
  try {
    var url = new URL(a.href, location.href), top = window.top;
    if (url.origin !== top.location.origin) return;
    e.preventDefault();
    var idx = ((top.history.state || {}).idx || 0) + 1;
    top.history.pushState({usr: null, key: Math.random().toString(36).slice(2, 10), idx: idx}, "",
                          url.pathname + url.search + url.hash);
    top.dispatchEvent(new PopStateEvent("popstate", {state: top.history.state}));
  } catch (err) { /* the browser's default */ }
});"""
TOP_LINKS_HASH = "'sha256-" + base64.b64encode(hashlib.sha256(TOP_LINKS.encode()).digest()).decode() + "'"


def layout(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>{escape(title)}</title>"
            f"<style>{CSS}</style><script>{TOP_LINKS}</script></head><body><nav><a href=\"{URL_PREFIX}/tables\">All tables</a>"
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


# ---------------------------------------------------------------------------------------------- table
def action_url(t: TableRef, action: str, **query: str) -> str:
    return (f"{table_page_url(t.pipeline, t.sink)}/actions/{quote(action, safe='')}"
            + (f"?{urlencode(query)}" if query else ""))


def _actions(page: TablePage, can_act: bool) -> str:
    """The table-wide actions (each opens its confirmation page), or why there are none."""
    if not can_act:
        return ("<p class=\"muted\">Actions (roll back, reprocess, re-run stale, recover) need permission to edit "
                "this DAG.</p>")
    t = page.table
    links = [a(action_url(t, "recover"), "Recover now")]
    if page.stale:
        links.insert(0, a(action_url(t, "rerun-stale"), f"Re-run the {len(page.stale)} stale interval(s) in order"))
    return f"<p>Actions: {' | '.join(links)} <span class=\"muted\">(each asks for confirmation)</span></p>"


def table_html(page: TablePage, can_act: bool = False) -> str:
    t = page.table
    head = (f"<h1>{escape(t.sink)} <span class=\"muted\">of</span> "
            f"{a('/dags/' + quote(t.pipeline, safe=''), t.pipeline, top=True)}</h1>"
            f"<div class=\"muted\">location <code>{escape(t.describe())}</code> - {page.total} interval(s) in "
            f"the log, {len(page.rows)} shown</div>{_filters(page)}")
    if page.error:
        return layout(t.sink, head + f"<p class=\"bad\">{escape(page.error)}</p>")
    body = head + _actions(page, can_act) + _attention(page) + _intervals(page, can_act)
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
                     f"live): {escape(', '.join(_label(t) for t in page.stale))}. Re-run them in this order.</li>")
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


def _label(token: str) -> str:
    """A stale interval's token as dates (``2026-01-04``), the token itself if it is not one."""
    try:
        return Interval.from_token(token).label
    except ExactlyOnceError:
        return token


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


def _intervals(page: TablePage, can_act: bool = False) -> str:
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
            f"<td>{_epochs(t, v.epochs, v.live if can_act else None, can_act, row.refusals)}</td>"
            f"<td>{_late(row)}</td>"
            f"<td>{escape('; '.join(v.recover)) or 'nothing'}</td></tr>")
    return head + "".join(rows) + "</table>"


def _epochs(t: TableRef, epochs: Iterable[EpochView], live: EpochView | None = None, can_act: bool = False,
            refusals: Mapping[int, str] | None = None) -> str:
    items = []
    epochs = list(epochs)
    for e in epochs:
        reason = f" - {escape(e.reason)}" if e.reason else ""
        run_dag = e.run_dag or t.pipeline
        report = a(run_report_url(t.pipeline, e.run_id), "run report") if e.run_id and run_dag == t.pipeline else ""
        back = ""
        refused = (refusals or {}).get(e.epoch)
        if can_act and live is not None and e.state.value == "COMMITTED" and e.epoch != live.epoch:
            back = (f" <span class=\"muted\" title=\"{escape(refused)}\">cannot roll back to {e.label}: "
                    f"{escape(_first_clause(refused))}</span>" if refused else
                    " " + a(action_url(t, "rollback", interval=e.version.rsplit(".", 1)[0], to=e.label),
                            f"roll back to {e.label}"))
        items.append(f"<li>{a(version_page_url(t.pipeline, t.sink, e.version), e.label)} "
                     f"<span class=\"{e.state.value}\">{e.state.value}</span>{reason}{provenance(e)} "
                     f"<span class=\"muted\">{when(e.started_at)}, run</span> {airflow_run(run_dag, e.run_id)}"
                     f" {report}{back}</li>")
    if can_act and epochs:
        token = epochs[0].version.rsplit(".", 1)[0]
        items.append(f"<li>{a(action_url(t, 'reprocess', interval=token), 'reprocess this interval')}</li>")
    return f"<ul>{''.join(items)}</ul>"


def _first_clause(text: str, limit: int = 120) -> str:
    """The start of a refusal for a table cell (the whole text is the element's title)."""
    first = text.split(": ", 1)[-1] if text.startswith("rollback to ") else text
    return first if len(first) <= limit else first[:limit].rsplit(" ", 1)[0] + " ..."


def provenance(e: EpochView) -> str:
    """What was asked of this epoch and by whom (a rollback, a reprocess from the table page)."""
    if not e.action:
        return ""
    by = f" by <b>{escape(e.by)}</b>" if e.by else ""
    return f" - <span class=\"asked\">{escape(e.action)}{by}</span>"


# ---------------------------------------------------------------------------------------------- actions
def confirm_html(req: Request, token: str) -> str:
    """What the action will do, and the form that does it (a POST with the token and a confirmation)."""
    t = req.table
    fields = {"token": token, "interval": req.interval.token if req.interval else "", "to": req.to_version,
              "allow_shrinking": "1" if req.allow_shrinking else ""}   # what the token is bound to
    hidden = "".join(f"<input type=\"hidden\" name=\"{k}\" value=\"{escape(v)}\">" for k, v in fields.items())
    shrink = ""
    if req.action == "reprocess":
        other = {"interval": req.interval.token, **({} if req.allow_shrinking else {"allow_shrinking": "1"})}
        label = ("read at least the files the live version read" if req.allow_shrinking else
                 "allow the reprocess to read fewer input files than the live version did (files were deleted "
                 "on purpose)")
        shrink = f"<p>{a(action_url(t, 'reprocess', **other), 'Instead: ' + label)}</p>"
    body = (f"<h1>{escape(ACTIONS[req.action])}: {escape(t.sink)} of {escape(t.pipeline)}</h1>"
            f"<p>{escape(req.describe())}.</p><p>This triggers a run of <b>{escape(req.dag_to_trigger)}</b> "
            "as you; it goes through the protocol like any run and is listed on the table page with your name.</p>"
            f"<form method=\"post\" action=\"{escape(action_url(t, req.action))}\">{hidden}{shrink}"
            "<p><label><input type=\"checkbox\" name=\"confirm\" value=\"yes\" required> I confirm</label></p>"
            "<button type=\"submit\" id=\"confirm\">Trigger the run</button> "
            f"{a(table_page_url(t.pipeline, t.sink), 'Cancel')}</form>")
    return layout(f"{ACTIONS[req.action]} - {t.sink}", body)


def action_done_html(req: Request, user: str, run_ids: list[str]) -> str:
    t = req.table
    runs = "".join(f"<li>{airflow_run(req.dag_to_trigger, r)}</li>" for r in run_ids)
    body = (f"<h1>Triggered: {escape(ACTIONS[req.action])}</h1><p>{escape(req.describe())}.</p>"
            f"<p>Asked by <b>{escape(user)}</b>; run(s) of {escape(req.dag_to_trigger)}:</p><ul>{runs}</ul>"
            f"<p>{a(table_page_url(t.pipeline, t.sink), 'Back to ' + t.sink)} (the new version appears there once the "
            "run commits)</p>")
    return layout(f"Triggered - {t.sink}", body)


def action_failed_html(req: Request, error: str) -> str:
    t = req.table
    body = (f"<h1>Not triggered: {escape(ACTIONS[req.action])}</h1><p class=\"bad\">{escape(error)}</p>"
            f"<p>{a(table_page_url(t.pipeline, t.sink), 'Back to ' + t.sink)}</p>")
    return layout(f"Not triggered - {t.sink}", body)


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

