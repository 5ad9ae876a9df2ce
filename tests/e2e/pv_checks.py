"""What the end-to-end tests assert: the published table equals an independent pure-Python computation."""
from __future__ import annotations

import glob
import json
import os
from datetime import datetime
from pathlib import Path

import pyarrow.dataset as ds

from reference_pv import compute

from exactly_once.ids import Interval
from exactly_once.protocol.transaction import TwoPhaseCommitSink
from exactly_once.records.txlog import State


def landing_files(root: Path, day: str) -> list[str]:
    return sorted(glob.glob(str(root / "landing" / "app_logs" / f"dt={day}" / "**" / "*.jsonl"), recursive=True))


def expected_rows(root: Path, days: list[str]) -> dict[str, set[tuple]]:
    """Per day, the rows the reference computes, chaining state day by day."""
    state: dict[str, int] = {}
    out = {}
    for day in days:
        rows, state, _ = compute(landing_files(root, day), state)
        out[day] = {(r["app_id"], r["pv"], r["uv"], r["cumulative_pv"]) for r in rows}
    return out


def visible_rows(root: Path) -> dict[str, set[tuple]]:
    """What a plain reader sees: pyarrow's hive dataset over the table (skips _ and . names)."""
    table = root / "warehouse" / "app_pv"
    if not table.exists():
        return {}
    t = ds.dataset(str(table), format="parquet", partitioning="hive").to_table()
    out: dict[str, set[tuple]] = {}
    rows = t.to_pylist()
    for r in rows:
        out.setdefault(str(r["dt"]), set()).add((r["app_id"], r["pv"], r["uv"], r["cumulative_pv"]))
    assert len(rows) == sum(len(v) for v in out.values()), "duplicate rows visible"
    return out


def sink(root: Path) -> TwoPhaseCommitSink:
    return TwoPhaseCommitSink.at(str(root / "warehouse" / "app_pv"), pipeline="pv_pipeline", sink="app_pv")


def assert_clean(root: Path, days: list[str]) -> None:
    """No staging leftovers; every day has exactly one live, published, committed version."""
    s = sink(root)
    staging = root / "warehouse" / "_exactly_once" / "app_pv" / "_staging"
    assert not (staging.exists() and os.listdir(staging)), f"staging leftovers: {os.listdir(staging)}"
    for day in days:
        statuses = s.status(Interval.daily(day))
        committed = [e for e, st in statuses.items() if st.state is State.COMMITTED]
        assert committed, f"{day} not committed"
        assert all(st.state in (State.COMMITTED, State.ABORTED) for st in statuses.values()), statuses
        assert all(statuses[e].published for e in committed)
        live = s.live_version(f"dt={day}")
        assert live == s.ref(Interval.daily(day), committed[-1]).name


def lineage_transport(path: Path) -> dict[str, str]:
    """The environment giving Airflow's OpenLineage provider its file transport (one JSON event a line)."""
    return {"AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(path),
                                                          "append": True}),
            "AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD": "True"}  # no fork per event: cheaper, same events


def assert_lineage_once_per_publish(root: Path, events_file: Path, days: list[str]) -> list[dict]:
    """Every version of ``days`` the log says was published is in exactly one OpenLineage event, from the
    task that published it, and no other event has datasets. Each such event's inputs are the files the
    version froze, its output the table with that version, its rows and files and the gate's passed
    suites, its ``exactlyOnce`` run facet the version's interval, epoch and partitions (and valid against
    docs/openlineage/ExactlyOnceRunFacet.json). Returns those events."""
    import jsonschema

    schema = json.loads((Path(__file__).resolve().parents[2] / "docs" / "openlineage"
                         / "ExactlyOnceRunFacet.json").read_text())
    events = [json.loads(line) for line in events_file.read_text().splitlines() if line.strip()]
    assert events, "no OpenLineage event was written"
    s = sink(root)
    lineage = [e for e in events if e.get("inputs") or e.get("outputs")]
    seen = []
    for e in lineage:
        assert e["eventType"] in ("COMPLETE", "FAIL") and e["job"]["name"].startswith("pv_pipeline.app_pv."), e["job"]
        facet = e["run"]["facets"]["exactlyOnce"]
        jsonschema.validate(facet, schema)
        iv = Interval(datetime.fromisoformat(facet["interval"]["start"]), datetime.fromisoformat(facet["interval"]["end"]))
        st = s.status(iv)[facet["epoch"]]
        assert st.published and facet["version"] == s.ref(iv, facet["epoch"]).name
        assert facet["partitions"] == [f"dt={iv.start:%Y-%m-%d}"]
        (out,) = e["outputs"]
        assert (out["namespace"], out["name"]) == ("file", str(root / "warehouse" / "app_pv"))
        assert out["facets"]["version"]["datasetVersion"] == facet["version"]
        stats = out["outputFacets"]["outputStatistics"]
        assert (stats["rowCount"], stats["fileCount"]) == (st.manifest.rows, st.manifest.files)
        assertions = out["facets"]["dataQualityAssertions"]["assertions"]
        assert {a["name"] for a in assertions} >= {"app_pv", "app_pv.completeness"}
        assert all(a["success"] for a in assertions)
        frozen = {("file", src["path"]): src["size"] for src in st.records["open"]["sources"]}
        assert frozen and {(i["namespace"], i["name"]): i["inputFacets"]["inputStatistics"]["size"]
                           for i in e["inputs"]} == frozen
        seen.append(facet["version"])
    published = [s.ref(Interval.daily(day), epoch).name for day in days
                 for epoch, st in s.status(Interval.daily(day)).items() if st.published]
    assert sorted(seen) == sorted(published), (seen, published)
    return lineage
