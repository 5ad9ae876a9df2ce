"""HTML of an action's pages: the confirm step (what will happen, or why it is refused), the page after
the trigger, and the page when no run could be made. Every value is escaped."""
from __future__ import annotations

from html import escape

from ..quality.reports import table_page_url
from .actions import ACTIONS, REASON_CHARS, Request
from .confirm import Plan
from .page_table import action_url
from .pages import a, airflow_run, layout


def _plan(req: Request, p: Plan) -> str:
    """What will happen, as a list of facts."""
    rows: list[tuple[str, str]] = []
    if req.interval is not None:
        rows.append(("interval", escape(req.interval.label)))
        rows.append(("live version now", escape(p.live) or "none"))
    if p.target:
        rows.append(("will be live", escape(p.target)))
    if req.action in ("rollback", "reprocess"):
        if p.stale:
            cond = "" if p.stale_certain else " if the recomputed state differs from the live one"
            rows.append(("later intervals that go stale", escape(", ".join(p.stale)) + escape(cond)
                         + " - re-run them afterwards (the table page offers it)"))
        else:
            rows.append(("later intervals that go stale", "none"))
    if req.action == "rerun-stale":
        rows.append(("intervals re-run, in order", escape(", ".join(p.stale))))
    if req.action == "reprocess":
        rows.append(("input files it drops", escape(", ".join(p.dropped)) if p.dropped else "none"))
        rows.append(("new or changed files it reads", escape(", ".join(p.taken_in)) if p.taken_in else "none"))
    if req.action != "unpause":
        rows.append(("attempts in flight", escape("; ".join(p.in_flight)) if p.in_flight else "none"))
    return "<dl class=\"plan\">" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows) + "</dl>"


def confirm_html(req: Request, token: str, plan: Plan) -> str:
    """What the action will do and the form that does it (a POST with the token, a confirmation and a
    reason) - or, when the confirm step's checks refuse it, why (and no form)."""
    t = req.table
    title = f"{ACTIONS[req.action]}: {t.sink} of {t.pipeline}"
    back = a(table_page_url(t.pipeline, t.sink), f"Back to {t.sink}")
    if plan.refusal:
        other = ""
        if plan.alternative:
            other = f"<p>{a(action_url(t, req.action, **plan.alternative), 'Reprocess with allow shrinking instead')}</p>"
        body = (f"<h1>Refused - {escape(title)}</h1><p>{escape(req.describe())}.</p>{_plan(req, plan)}"
                f"<p class=\"banner bad\" id=\"refusal\">Refused: {escape(plan.refusal)}</p>{other}<p>{back}</p>")
        return layout(f"Refused - {t.sink}", body)
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
    where = ("its new version and the run that made it appear on the table page, with your name and reason"
             if req.action in ("rollback", "reprocess", "rerun-stale") else
             "the run, its state and your name and reason appear on the table page under Runs on the whole table")
    body = (f"<h1>{escape(title)}</h1><p>{escape(req.describe())}.</p>{_plan(req, plan)}"
            f"<p>This triggers a run of <b>{escape(req.dag_to_trigger)}</b> as you; it goes through the protocol "
            f"like any run; {where}.</p>"
            f"<form method=\"post\" action=\"{escape(action_url(t, req.action))}\">{hidden}{shrink}"
            f"<p><label>Reason (kept in the version's provenance and shown by <code>eo history</code>)<br>"
            f"<textarea name=\"reason\" rows=\"2\" maxlength=\"{REASON_CHARS}\" "
            "placeholder=\"e.g. late files from the partner feed\"></textarea></label></p>"
            "<p><label><input type=\"checkbox\" name=\"confirm\" value=\"yes\" required> I confirm</label></p>"
            f"<button type=\"submit\" id=\"confirm\">Trigger the run</button> {back}</form>")
    return layout(f"{ACTIONS[req.action]} - {t.sink}", body)


def action_done_html(req: Request, user: str, run_ids: list[str]) -> str:
    t = req.table
    if req.action == "unpause":
        body = (f"<h1>Unpaused {escape(t.pipeline)}</h1><p>Its queued runs start now.</p>"
                f"<p>{a(table_page_url(t.pipeline, t.sink), 'Back to ' + t.sink)}</p>")
        return layout(f"Unpaused - {t.sink}", body)
    runs = "".join(f"<li>{airflow_run(req.dag_to_trigger, r)}</li>" for r in run_ids)
    body = (f"<h1>Triggered: {escape(ACTIONS[req.action])}</h1><p>{escape(req.describe())}.</p>"
            f"<p>Asked by <b>{escape(user)}</b>; run(s) of {escape(req.dag_to_trigger)}:</p><ul>{runs}</ul>"
            f"<p>{a(table_page_url(t.pipeline, t.sink), 'Back to ' + t.sink)}: the run's state (queued, running, "
            "succeeded, failed or refused, with the reason) is there while it runs, and the new version once it "
            "commits.</p>")
    return layout(f"Triggered - {t.sink}", body)


def action_failed_html(req: Request, error: str) -> str:
    """No run could be made: ``error`` says why and what to do (never a raw exception)."""
    t = req.table
    body = (f"<h1>Not triggered: {escape(ACTIONS[req.action])}</h1><p class=\"bad\">{escape(error)}</p>"
            f"<p>{a(table_page_url(t.pipeline, t.sink), 'Back to ' + t.sink)}</p>")
    return layout(f"Not triggered - {t.sink}", body)
