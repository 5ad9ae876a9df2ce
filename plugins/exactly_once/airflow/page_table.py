"""HTML of one table's page: paused DAGs, the actions, what needs attention, quality over time, and
every interval with its epochs and the Airflow runs acting on it (their state, who asked and why).
Every value is escaped; data comes from ``views`` (``table_page`` + ``with_airflow``)."""
from __future__ import annotations

from html import escape
from typing import Collection, Iterable, Mapping
from urllib.parse import quote, urlencode

from ..errors import ExactlyOnceError
from ..ids import Interval
from ..ops.inspection import EpochView
from ..quality.reports import run_report_url, table_page_url, version_page_url
from . import chart
from .pages import DATA_DOCS_URL, a, airflow_run, layout, num, quality_cell, when
from .runs import RunState
from .tables import TableRef
from .views import ATTENTION, STATES, IntervalRow, TablePage

STATE_LABELS = {"success": "succeeded", "failed": "failed", "refused": "refused", "queued": "queued",
                "running": "running"}


def action_url(t: TableRef, action: str, **query: str) -> str:
    return (f"{table_page_url(t.pipeline, t.sink)}/actions/{quote(action, safe='')}"
            + (f"?{urlencode(query)}" if query else ""))


def table_html(page: TablePage, can_act: bool = False, unpause_token: str = "") -> str:
    """The page; ``unpause_token``: the form token of the Unpause button (the DAG is paused, the user may)."""
    t = page.table
    head = (f"<h1>{escape(t.sink)} <span class=\"muted\">of</span> "
            f"{a('/dags/' + quote(t.pipeline, safe=''), t.pipeline, top=True)}</h1>"
            f"<div class=\"muted\">location <code>{escape(t.describe())}</code> - {page.total} interval(s) in "
            f"the log, {len(page.rows)} shown</div>")
    if page.error:
        return layout(t.sink, head + f"<p class=\"bad\">{escape(page.error)}</p>")
    body = (head + _paused(page, can_act, unpause_token) + _filters(page) + _actions(page, can_act)
            + _table_runs(page) + _attention(page) + _quality(page) + _intervals(page, can_act))
    return layout(f"{t.sink} - exactly-once", body)


def _paused(page: TablePage, can_act: bool, token: str) -> str:
    out = []
    for dag in page.paused:
        form = ""
        if can_act and token:
            form = (f"<form method=\"post\" action=\"{escape(action_url(page.table, 'unpause'))}\">"
                    f"<input type=\"hidden\" name=\"token\" value=\"{escape(token)}\">"
                    "<input type=\"hidden\" name=\"confirm\" value=\"yes\">"
                    f"<button type=\"submit\" id=\"unpause\">Unpause {escape(dag)}</button></form>")
        elif not can_act:
            form = " <span class=\"muted\">Someone allowed to edit the DAG can unpause it.</span>"
        out.append(f"<div class=\"banner\" id=\"paused\"><b>DAG {escape(dag)} is paused</b>: its runs - the actions "
                   f"of this page that run in it among them - wait until it is unpaused.{form}</div>")
    return "".join(out)


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


def run_line(r: RunState) -> str:
    """One Airflow run acting on the table: its state, what and who asked (and why), its note, its link."""
    by = f" by <b>{escape(r.by)}</b>" if r.by else ""
    why = f" because &ldquo;{escape(r.reason)}&rdquo;" if r.reason else ""
    said = r.note[len("refused: "):] if r.state == "refused" and r.note.startswith("refused: ") else r.note
    note = f" - {escape(said)}" if said else ""
    when_ = f"{r.queued_at:%Y-%m-%d %H:%M}Z" if r.queued_at else ""
    return (f"<li class=\"run\" data-run=\"{escape(r.run_id)}\" data-state=\"{escape(r.state)}\">"
            f"<span class=\"chip {escape(r.state)}\">{escape(STATE_LABELS.get(r.state, r.state))}</span> "
            f"{escape(r.what)}{by}{why}{note} <span class=\"muted\">{when_}</span> "
            f"{airflow_run(r.dag_id, r.run_id)}</li>")


def _table_runs(page: TablePage) -> str:
    """Runs on the whole table (recover; a rollback of an interval the log does not know)."""
    runs = page.runs_of(None)[:10]
    if not runs:
        return ""
    return f"<h2>Runs on the whole table</h2><ul>{''.join(run_line(r) for r in runs)}</ul>"


def _attention(page: TablePage) -> str:
    items = []
    if page.stale:
        items.append("<li class=\"bad\">Stale (their state was computed from a version that is no longer "
                     f"live): {escape(', '.join(_label(t) for t in page.stale))}. Re-run them in this order.</li>")
    for row in page.rows:
        v = row.view
        if v.live is None and v.epochs and v.epochs[-1].state.value == "ABORTED":
            e = v.epochs[-1]
            items.append(f"<li><b>{escape(_iv(row))}</b>: no version is live - {e.label} ABORTED "
                         f"({escape(e.reason or 'no reason recorded')}): fix the cause, then reprocess the interval"
                         "</li>")
        if v.recover:
            items.append(f"<li><b>{escape(_iv(row))}</b>: <code>eo recover</code> would: "
                         f"{escape('; '.join(v.recover))}</li>")
        late = row.late or {}
        if late.get("new") or late.get("changed") or late.get("missing"):
            items.append(f"<li class=\"warn\"><b>{escape(_iv(row))}</b>: {_late(row)} - {_late_advice(late)}</li>")
    if not items:
        return "<p class=\"ok\">Nothing to do: no stale interval, no late file, nothing for recover.</p>"
    return f"<h2>Needs attention</h2><ul>{''.join(items)}</ul>"


def _late_advice(late: Mapping[str, list[str]]) -> str:
    """What to do about late files: missing ones need allow shrinking (a plain reprocess refuses them)."""
    if late.get("missing"):
        taken = " (it also takes in the new and changed ones)" if late.get("new") or late.get("changed") else ""
        return ("input files the live version read are gone: a plain reprocess is refused; reprocess with allow "
                f"shrinking to drop their data{taken}, or put them back")
    return "reprocess the interval to take them in"


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
    files = ", ".join(row.late.get("new", [])[:5] + row.late.get("changed", [])[:5] + row.late.get("missing", [])[:5])
    return escape("; ".join(parts) + (f" ({files})" if files else ""))


def _quality(page: TablePage) -> str:
    t = page.table
    if not page.chart:
        return ""
    docs = a(f"{DATA_DOCS_URL}?table={quote(t.pipeline, safe='')}/{quote(t.sink, safe='')}",
             "its Data Docs by interval")
    return (f"<h2>Quality over time</h2><p class=\"muted\">{len(page.chart)} interval(s), oldest left; every "
            f"validation is also in {docs}.</p>{chart.svg(page.chart)}{chart.legend()}")


def _intervals(page: TablePage, can_act: bool = False) -> str:
    t = page.table
    head = ("<h2>Intervals</h2><table><tr><th>interval (UTC)</th><th>state</th><th>live version</th><th>rows</th>"
            "<th>files</th><th>quality of the live version</th><th>epochs (attempts)</th><th>Airflow runs</th>"
            "<th>late files</th><th>recover would</th></tr>")
    rows = []
    for row in page.rows:
        v = row.view
        live = v.live
        state = v.state + (" (stale)" if row.stale else "")
        runs = page.runs_of(v.interval)
        rows.append(
            f"<tr class=\"{'warn' if row.needs_attention else ''}\" data-interval=\"{escape(v.interval.token)}\">"
            f"<td>{escape(_iv(row))}</td><td class=\"{escape(v.state)}\">{escape(state)}</td>"
            f"<td>{a(version_page_url(t.pipeline, t.sink, live.version), live.label) if live else '-'}</td>"
            f"<td class=\"n\">{num(live.rows if live else None)}</td>"
            f"<td class=\"n\">{num(live.files if live else None)}</td>"
            f"<td>{quality_cell(live.quality) if live else '-'}</td>"
            f"<td>{_epochs(t, v.epochs, v.live if can_act else None, can_act, row.refusals, page.airflow_runs)}</td>"
            f"<td>{'<ul>' + ''.join(run_line(r) for r in runs) + '</ul>' if runs else '-'}</td>"
            f"<td>{_late(row)}</td>"
            f"<td>{escape('; '.join(v.recover)) or 'nothing'}</td></tr>")
    return head + "".join(rows) + "</table>"


def _epochs(t: TableRef, epochs: Iterable[EpochView], live: EpochView | None = None, can_act: bool = False,
            refusals: Mapping[int, str] | None = None, known: Collection[str] | None = None) -> str:
    items = []
    epochs = list(epochs)
    for e in epochs:
        reason = f" - {escape(e.reason)}" if e.reason else ""
        run_dag = e.run_dag or t.pipeline
        here = known is None or (e.run_id or "") in known
        report = a(run_report_url(t.pipeline, e.run_id), "run report") \
            if e.run_id and run_dag == t.pipeline and here else ""
        back = ""
        refused = (refusals or {}).get(e.epoch)
        if can_act and live is not None and e.state.value == "COMMITTED" and e.epoch != live.epoch:
            back = (f" <span class=\"muted\" title=\"{escape(refused)}\">cannot roll back to {e.label}: "
                    f"{escape(_first_clause(refused))}</span>" if refused else
                    " " + a(action_url(t, "rollback", interval=e.version.rsplit(".", 1)[0], to=e.label),
                            f"roll back to {e.label}"))
        items.append(f"<li>{a(version_page_url(t.pipeline, t.sink, e.version), e.label)} "
                     f"<span class=\"{e.state.value}\">{e.state.value}</span>{reason}{provenance(e)} "
                     f"<span class=\"muted\">{when(e.started_at)}, run</span> {airflow_run(run_dag, e.run_id, known)}"
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
    """What was asked of this epoch, by whom and why (a rollback, a reprocess from the table page)."""
    if not e.action:
        return ""
    by = f" by <b>{escape(e.by)}</b>" if e.by else ""
    why = f" because &ldquo;{escape(e.asked_reason)}&rdquo;" if e.asked_reason else ""
    return f" - <span class=\"asked\">{escape(e.action)}{by}{why}</span>"
