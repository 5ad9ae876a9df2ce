"""``eo history <table-url>``: every version of every interval of a table, from its transaction log.

One line per epoch: the interval, the version (epoch), its state, ``*`` for the live version, when it
was decided, rows and files, and the verdict - or why it is not live (which check failed, fenced by
which epoch, superseded by which version). Works on any table URL the library can open (local path,
``file://``, ``s3://``); S3 credentials come from ``EO_STORAGE_CONN_ID`` or the usual AWS environment.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from .inspection import EpochView, interval_view, intervals
from ..storage import redact
from ..protocol.transaction import TwoPhaseCommitSink
from ..text import one_line


@dataclass(frozen=True)
class HistoryRow:
    """One version (epoch) of one interval."""

    interval_start: str
    interval_end: str
    epoch: int
    version: str
    state: str
    live: bool
    decided_at: str | None
    rows: int | None
    files: int | None
    verdict: str
    reason: str
    table_version: int | None = None  # the table format's own version of this publish (Delta), if any
    asked: str = ""                   # an action's provenance: 'rollback to e2 by admin because "bad input"
                                      # (eo_rollback run r1)'


def history(sink: TwoPhaseCommitSink) -> list[HistoryRow]:
    """Every epoch of every interval of ``sink``'s table, oldest interval and epoch first."""
    out = []
    table_versions = getattr(sink.target, "commit_versions", dict)()  # Delta: txn name -> table version
    for iv in intervals(sink):
        view = interval_view(sink, iv, with_recover=False)
        for e in view.epochs:
            live = view.live is not None and view.live.epoch == e.epoch and e.published
            out.append(HistoryRow(iv.start.isoformat(), iv.end.isoformat(), e.epoch, e.version, e.state.value, live,
                                  _iso(e.ended_at), e.rows, e.files, _verdict(e), e.reason,
                                  table_versions.get(e.version), asked(e)))
    return out


def asked(e: EpochView) -> str:
    """What was asked of this epoch, by whom, through which run ("" for a plain scheduled run)."""
    if not e.action:
        return ""
    by = f" by {e.by}" if e.by else ""
    run = f" ({e.run_dag} run {e.run_id})" if e.run_id else ""
    why = f' because "{one_line(e.asked_reason)}"' if e.asked_reason else ""  # any conf's: one printable line
    return one_line(f"{e.action}{by}{why}{run}", None)


def _iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if ts else None


def _verdict(e: EpochView) -> str:
    q = e.quality
    if q.passed is None:
        return "-"
    return "passed" if q.passed else f"FAILED: {q.headline}"


def render(sink: TwoPhaseCommitSink, url: str, rows: list[HistoryRow]) -> str:
    """The history as an aligned text table (what ``eo history`` prints): every cell one printable line
    (``text.one_line``: no recorded text - a reason, an error - can forge a row or reach the terminal raw)."""
    head = ("interval start", "end", "version", "state", "live", "decided (UTC)", "rows", "files", "verdict / reason")
    table = [head] + [tuple(one_line(c, None) for c in (
        r.interval_start[:19].replace("T", " "), r.interval_end[:19].replace("T", " "),
        f"e{r.epoch}" + ("" if r.table_version is None else f" (table v{r.table_version})"),
        r.state, "*" if r.live else "", r.decided_at or "-", _n(r.rows), _n(r.files),
        "; ".join(x for x in (r.asked, r.verdict if r.verdict != "-" else "", r.reason) if x) or "-")) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head) - 1)]
    lines = [f"{sink.sink} (pipeline {sink.pipeline}) at {redact(url)}: "
             f"{len({r.interval_start for r in rows})} interval(s), {len(rows)} version(s); * = live"]
    for row in table:
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1])
    return "\n".join(lines)


def _n(value: int | None) -> str:
    return "-" if value is None else str(value)
