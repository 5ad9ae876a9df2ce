"""Quality over time (issue 47): the table page's chart and the Data Docs index by interval, rendered in
process from a table's log (the browser test on ``make ui`` measures them at a year of intervals)."""
from __future__ import annotations

import re
from datetime import date, timedelta

from exactly_once.airflow import chart, docsindex
from exactly_once.airflow.tables import TableRef
from exactly_once.ids import Interval
from exactly_once.ops.inspection import EpochView, Quality
from exactly_once.records.txlog import State


def _epoch(rows, dups, bad, passed) -> EpochView:
    counts = {k: v for k, v in (("records_deduplicated", dups), ("records_rejected", bad)) if v is not None}
    return EpochView(epoch=1, version="x.e000001", state=State.COMMITTED, published=True, started_at=0.0,
                     ended_at=0.0, run_id=None, rows=rows, files=1, quality=Quality(passed=passed, counts=counts),
                     reason="")


def test_every_interval_is_one_link_to_its_report_with_its_figures_and_gaps_stay_gaps():
    days = [Interval.daily(str(date(2026, 1, 1) + timedelta(days=i))) for i in range(5)]
    figures = [(10, 1, 0, True), (12, 2, 3, False), (None, None, None, None), (9, 0, 1, True), (11, 4, 2, True)]
    points = [chart.point(iv, _epoch(*f), f"/eo/v/{iv.token}?a=1&b=<2>") for iv, f in zip(days, figures)]
    svg = chart.svg(points)
    links = re.findall(r'<a href="([^"]+)"><title>([^<]+)</title>', svg)
    assert [h for h, _ in links] == [f"/eo/v/{iv.token}?a=1&amp;b=&lt;2&gt;" for iv in days]    # escaped
    assert links[1][1] == "2026-01-02 e1: 12 rows, 2 duplicates dropped, 3 malformed lines; FAILED"
    assert links[2][1] == "2026-01-03 e1: - rows, - duplicates dropped, - malformed lines; no verdict"
    assert re.findall(r'<rect class="(pass|fail|none)"', svg) == ["pass", "fail", "none", "pass", "pass"]
    # the unmeasured day breaks each line in two: two points before it, two after (no line drawn through it)
    assert svg.count('<polyline class="s1"') == 2 and svg.count("<circle") == 0
    assert chart.svg([]) == ""


def test_the_data_docs_index_groups_validations_by_interval_newest_first_and_pages_them(tmp_path, monkeypatch):
    from exactly_once.protocol.transaction import TwoPhaseCommitSink
    from ui_server import commit_day

    monkeypatch.setattr(docsindex, "PAGE_SIZE", 4)
    tables = []
    for sink_name in ("a", "b"):
        sink = TwoPhaseCommitSink.at(str(tmp_path / sink_name), pipeline="p", sink=sink_name, require_validation=True)
        for i in range(5 if sink_name == "a" else 2):
            commit_day(sink, str(date(2026, 1, 1) + timedelta(days=i)), f"r{i}", f"s{i}")
        tables.append(TableRef("p", sink_name, str(tmp_path / sink_name)))
    first = docsindex.docs_page(tables, 1)
    assert (first.total, first.pages) == (5, 2)
    assert [iv.label for iv, _ in first.groups] == ["2026-01-05", "2026-01-04", "2026-01-03", "2026-01-02"]
    assert [[e.table.sink for e in entries] for _, entries in first.groups] == [["a"], ["a"], ["a"], ["a", "b"]]
    last = docsindex.docs_page(tables, 99)                                       # clamped to the last page
    assert last.page == 2 and [iv.label for iv, _ in last.groups] == ["2026-01-01"]
    only_b = docsindex.docs_page(tables, 1, "p/b")
    assert only_b.total == 2 and all(e.table.sink == "b" for _, es in only_b.groups for e in es)
    html = docsindex.docs_html(first, tables)
    assert "page 1 of 2" in html and 'href="/eo/data-docs?page=2">older</a>' in html
    assert html.count("<b>live</b>") == 5 and "/eo/dags/p/tables/a/versions/" in html
