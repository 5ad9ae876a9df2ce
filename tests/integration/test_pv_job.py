"""The page-view Spark job (spark_jobs/pv_counts.py) against the pure-Python oracle (tests/reference_pv.py).

Spark tests share the session-scoped ``spark`` fixture; one test runs the job through spark-submit.
"""
from __future__ import annotations

import glob
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import reference_pv as ref
from tools import sample_data
from exactly_once.contracts import Counts, FrozenInput, JobSpec, SourceInputs
from exactly_once.errors import FailpointError, StorageError
from exactly_once.ids import Interval

ROOT = Path(__file__).resolve().parents[2]
JOB_PATH = ROOT / "spark_jobs" / "pv_counts.py"
DATA_COLUMNS = [("app_id", pa.string()), ("pv", pa.int64()), ("uv", pa.int64()), ("cumulative_pv", pa.int64())]
ALL_REASONS = {"not_json", "not_object", "bad_ts", *(f"{k}:{f}" for k in ("missing", "bad_type", "empty")
                                                     for f in ref.FIELDS)}


@pytest.fixture(scope="module")
def job():
    """The job module, imported from its file (spark_jobs/ is not a package)."""
    spec = importlib.util.spec_from_file_location("pv_counts", JOB_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_spec(tmp: Path, name: str, files: list[str], day: str, prev_state: str | None) -> JobSpec:
    """A job spec over ``files`` (frozen now) staging into ``tmp/staging/<name>``."""
    inputs = tuple(FrozenInput(p, os.path.basename(p), os.stat(p).st_size, os.stat(p).st_mtime) for p in files)
    iv = Interval.daily(day)
    staging = str(tmp / "staging" / name)
    return JobSpec(pipeline="pv_pipeline", sink="app_pv", txn=name, interval_start=iv.start.isoformat(),
                   interval_end=iv.end.isoformat(), partitions=(f"dt={day}",),
                   sources=(SourceInputs("app_logs", "json", {}, inputs),), staging_dir=staging,
                   data_dir=os.path.join(staging, "data"), prev_state=prev_state, stateful=True)


def read_data(staging: str, partition: str) -> list[dict[str, Any]]:
    """The staged data rows, asserting the declared schema and a single part file."""
    files = glob.glob(os.path.join(staging, "data", partition, "part-*.parquet"))
    assert len(files) == 1, files
    table = pq.read_table(files[0])
    assert [(f.name, f.type) for f in table.schema] == DATA_COLUMNS
    return table.to_pylist()


def read_state(staging: str) -> dict[str, int]:
    table = pq.read_table(os.path.join(staging, "_state"))
    assert [(f.name, f.type) for f in table.schema] == [("app_id", pa.string()), ("cumulative_pv", pa.int64())]
    state = {r["app_id"]: r["cumulative_pv"] for r in table.to_pylist()}
    assert len(state) == table.num_rows
    return state


def read_quarantine(staging: str) -> list[tuple[str, str, str]]:
    out = []
    for path in glob.glob(os.path.join(staging, "_quarantine", "part-*")):
        with open(path, encoding="utf-8") as f:
            out += [(r["file"], r["raw"], r["reason"]) for r in map(json.loads, f) if r]
    return sorted(out)


def check_against_reference(spec: JobSpec, counts: Counts | dict[str, Any], prev: dict[str, int]) -> dict[str, Any]:
    """Assert the staged output and counts equal the oracle's; return the new state."""
    files = [i.path for i in spec.source().inputs]
    rows, state, expected_counts = ref.compute(files, prev, spec.partitions[0])
    staging = spec.staging_dir
    counts = counts.to_dict() if isinstance(counts, Counts) else counts
    assert counts == expected_counts
    with open(os.path.join(staging, "_counts.json")) as f:
        assert json.load(f) == expected_counts
    assert read_data(staging, spec.partitions[0]) == rows
    assert read_state(staging) == state
    expected_q = sorted((q["file"], q["raw"], q["reason"]) for q in ref.quarantine(files))
    assert read_quarantine(staging) == expected_q
    assert counts["records_in"] == counts["records_out"] + counts["records_deduplicated"] + counts["records_rejected"]
    assert counts["metrics"]["page_views"] == sum(r["pv"] for r in rows)
    return state


def write_state(path: Path, state: dict[str, int]) -> str:
    path.mkdir(parents=True)
    table = pa.table({"app_id": pa.array(list(state), pa.string()),
                      "cumulative_pv": pa.array(list(state.values()), pa.int64())})
    pq.write_table(table, path / "part-00000.parquet")
    return str(path)


# ---------------------------------------------------------------- no JVM


def test_generator_is_deterministic_and_covers_every_malformed_kind(tmp_path):
    days = ["2026-01-01", "2026-01-02"]
    a = sample_data.generate(str(tmp_path / "a"), days, events_per_day=1000, malformed_rate=0.05)
    b = sample_data.generate(str(tmp_path / "b"), days, events_per_day=1000, malformed_rate=0.05)
    c = sample_data.generate(str(tmp_path / "c"), days, seed=7, events_per_day=1000, malformed_rate=0.05)
    rel = lambda s, root: [os.path.relpath(p, tmp_path / root) for p in s["files"]]  # noqa: E731
    assert rel(a, "a") == rel(b, "b") == rel(c, "c") and len(a["files"]) == 8
    assert [Path(p).read_bytes() for p in a["files"]] == [Path(p).read_bytes() for p in b["files"]]
    assert [Path(p).read_bytes() for p in a["files"]] != [Path(p).read_bytes() for p in c["files"]]
    assert sample_data.generate(str(tmp_path / "a"), days, events_per_day=1000, malformed_rate=0.05)["written"] == 0
    assert not [p for p in (tmp_path / "a").rglob(".*")], "temp files left behind"
    files = [p for p in a["files"] if "dt=2026-01-01" in p]
    _, _, counts = ref.compute(files, {})
    assert set(counts["rejected_by_reason"]) == ALL_REASONS
    assert counts["records_in"] == a["lines"]["2026-01-01"]
    assert counts["records_out"] == 1000 and counts["records_deduplicated"] == a["duplicates"]["2026-01-01"]


@pytest.mark.parametrize("line, reason", [
    ('{"event_id":"e","app_id":"a","user_id":"u","event":"x","ts":"2026-01-01T10:00:00.123+02:00"}', None),
    ('{"event_id":"e","app_id":"a","user_id":"u","event":"x","ts":"2026-01-01T10:00:00Z"} x', "not_json"),
    ("", "not_json"), ('{"a":1,"a":2}', "not_json"), ('{"a":NaN}', "not_json"), ("[1]", "not_object"),
    ('{"app_id":"a"}', "missing:event_id"), ('{"event_id":1,"app_id":"a"}', "bad_type:event_id"),
    ('{"event_id":"e","app_id":"","user_id":null}', "empty:app_id"),
    ('{"event_id":"e","app_id":"a","user_id":"u","event":"x","ts":"2026-01-01"}', "bad_ts"),
    ('{"event_id":"e","app_id":"a","user_id":"u","event":"x","ts":"2026-13-01T10:00:00Z"}', "bad_ts"),
])
def test_reference_rules(line, reason):
    assert ref.classify(line)[0] == reason


# ---------------------------------------------------------------- Spark


@pytest.mark.spark
def test_three_chained_days_match_reference(spark, job, tmp_path):
    days = ["2026-01-01", "2026-01-02", "2026-01-03"]
    generated = sample_data.generate(str(tmp_path / "landing"), days)
    prev_dir, prev = None, {}
    for day in days:
        files = sorted(p for p in generated["files"] if f"dt={day}" in p)
        spec = make_spec(tmp_path, day, files, day, prev_dir)
        counts = job.run(spark, spec)
        assert counts.records_rejected > 0 and counts.records_deduplicated > 0
        prev = check_against_reference(spec, counts, prev)
        prev_dir = os.path.join(spec.staging_dir, "_state")
    assert sum(prev.values()) > 3 * 1000


def _event(eid: str, app: str = "A", user: str = "u1", event: str = "page_view",
           ts: str = "2026-01-01T10:00:00Z", **extra: Any) -> str:
    return json.dumps({"event_id": eid, "app_id": app, "user_id": user, "event": event, "ts": ts, **extra},
                      ensure_ascii=False)


def _edge_lines() -> list[bytes]:
    ev = lambda *a, **k: _event(*a, **k).encode()  # noqa: E731
    good = [ev(f"p{i}", app=a) for i, a in enumerate(["../x", "a/b", "%2e%2e", "ünï", "应用", "😀 app", " "])]
    dups = [ev("d1", app="late", ts="2026-01-01T10:00:00Z"), ev("d1", app="early", ts="2026-01-01T11:00:00+02:00"),
            ev("d2", app="C"), ev("d2", app="B"), ev("d3", app="Z", ts="2026-01-01T12:00:00+02:00"),
            ev("d3", app="Y", ts="2026-01-01T10:00:00.0000001Z"), ev("d1", app="early"), ev("d4", user=None)]
    ts_ok = [ev(f"t{i}", ts=t) for i, t in enumerate(
        ["2026-01-01T00:00:00+18:00", "2026-01-01T00:00:00-00:00", "2026-01-01T00:00:00.123456789Z",
         "2024-02-29T00:00:00Z", "0001-01-01T00:00:00+01:00"])]
    ts_bad = [ev(f"b{i}", ts=t) for i, t in enumerate(
        ["2026-01-01", "2026-13-01T00:00:00Z", "2026-02-30T00:00:00Z", "2026-01-01T24:00:00Z",
         "2026-01-01T23:59:60Z", "2026-01-01T00:00:00+18:01", "2026-01-01T00:00:00+00:60",
         "0000-01-01T00:00:00Z", "2026-01-01t00:00:00z", "2026-01-01T00:00:00", "2026-01-01T00:00:00+0200",
         "2026-01-01T00:00:00.Z", "2026-01-01T00:00:00.1234567890Z", "2026-01-01T00:00:00Z\n", "٢٠٢٦-01-01T00:00:00Z"])]
    base = json.loads(_event("m"))
    fields = [json.dumps({**base, f: v}).encode() for f in ref.FIELDS for v in (1, True, None, {"x": 1}, ["y"], "")]
    with_number = lambda eid, digits: ev(eid)[:-1] + b', "n": ' + b"1" * digits + b"}"  # noqa: E731
    missing = [json.dumps({k: "v" for k in ref.FIELDS if k != f}).encode() for f in ref.FIELDS]
    deep = lambda n: b"[" * n + b"]" * n  # noqa: E731
    not_json = [b"", b"   ", b"\t", b"\r", b'{"a":1} x', b'{"a":1}{"b":2}', b'{"a":1} }', b'{"a":1}]',
                b'{"a":1},"y":2', b"{'a':1}", b'{"a":NaN}', b'{"a":1,}', b'{"a":"tab\there"}', b"\xff",
                b'{"event_id":"x","event_id":"y","app_id":"A","user_id":"u","event":"page_view","ts":"2026-01-01T10:00:00Z"}',
                "\ufeff".encode() + ev("bom"), b"x" * 1_000_000, deep(1000), with_number("n1", 1001),
                b'{"' + b"k" * 50_001 + b'":1}', b"[" + b" " * 2_000_000 + b"]",
                deep(65), b'{"a":' * 65 + b"1" + b"}" * 65, b'{"s":"]]","a":[' * 33 + b"]}" * 33,
                deep(999_999)]  # nesting past MAX_DEPTH never reaches the (recursive) parser
    limits_ok = [deep(64), b'{"a":' * 64 + b"1" + b"}" * 64, b'{"s":"]]","a":[' * 32 + b"]}" * 32,
                 ev("nest", pad='\\"' + "[{" * 100, arr=[[i] for i in range(100)]),
                 b'{"' + b"k" * 50_000 + b'":1}', with_number("n2", 1000),
                 ev("big", pad="x" * 1_000_000),
                 b'{"event_id":"s","app_id":"x\\ud800","user_id":"u","event":"page_view","ts":"2026-01-01T10:00:00Z"}',
                 b'{"event_id":"e\xff","app_id":"bytes","user_id":"u","event":"page_view","ts":"2026-01-01T10:00:00Z"}']
    other = [ev("o1", app="clicks-only", event="click"), b"[1]", b"5", b'"s"', b"null", b"true"]
    return good + dups + ts_ok + ts_bad + fields + missing + not_json + limits_ok + other + _flat_edges()


def _flat_edges() -> list[bytes]:
    """Lines on both sides of the job's FLAT_LINE (parsed by a scan, not as JSON): 3 of them not_json."""
    def line(*members: tuple[str, str], sep: str = ",", colon: str = ":") -> bytes:
        return ("{" + sep.join(f'"{k}"{colon}"{v}"' for k, v in members) + "}").encode()
    five = [("event_id", "f0"), ("app_id", "F"), ("user_id", "u"), ("event", "page_view"),
            ("ts", "2026-01-01T10:00:00Z")]
    ids = lambda n, extra=(): [("event_id", f"f{n}"), *five[1:], *extra]  # noqa: E731
    return [line(*five), line(*ids(1), sep=" ,\t", colon="\r: "),  # whitespace between tokens is flat
            line(*ids(2, [("tsx", "k")])), line(*ids(3, [("event_", "k")])),  # an extra key near a field's name
            line(*ids(4, [("ts", "2026-01-01T11:00:00Z")])),  # a repeated field: parsed, not_json
            line(*ids(5, [("event_id", "dup")])),  # not_json
            line(*ids(6, [("r", "1"), ("s", "2")])), line(*ids(7, [("k" * 1001, "long key")])),
            line(*ids(8, [("r", "\x7f ü \u2028")])), line(*ids(9, [("r", "\x01")])),  # a control char: not_json
            b" " + line(*ids(10)), line(*ids(11)) + b"\r", line(*ids(12)).replace(b'"page_view"', b'"page\\u005fview"'),
            line(*ids(13)).replace(b'"F"', b'"F\\"q"'), line(*ids(14)).replace(b'"user_id"', b'"user\\u005fid"'),
            line(*ids(15)).replace(b'"f15"', b'""'), line(*ids(16)).replace(b'"F"', b'""'),
            line(*ids(17)).replace(b'"2026-01-01T10:00:00Z"', b'"2026-02-30T10:00:00Z"'),
            line(("app_id", "F"), ("event_id", "f18"), *five[2:])]  # another order: parsed, valid


@pytest.mark.spark
def test_edge_cases_match_reference(spark, job, tmp_path):
    landing = tmp_path / "landing" / "odd dir [1] {x}"
    landing.mkdir(parents=True)
    edge, bom = landing / "edge [a]*.jsonl", landing / "bom.jsonl"
    edge.write_bytes(b"\n".join(_edge_lines()) + b"\n\n")
    bom.write_bytes(b"\xef\xbb\xbf" + _event("bom-first").encode() + b"\n" + _event("no-newline").encode())
    prev_dir = write_state(tmp_path / "prev", {"old-app": 40, "A": 2})
    spec = make_spec(tmp_path, "edge", [str(edge), str(bom)], "2026-01-01", prev_dir)
    counts = job.run(spark, spec)
    check_against_reference(spec, counts, {"old-app": 40, "A": 2})
    assert set(counts.rejected_by_reason) == ALL_REASONS
    assert counts.rejected_by_reason["not_json"] == 25 + 3 + 1  # + the blank line before the final \n
    rows = {r["app_id"]: r for r in read_data(spec.staging_dir, "dt=2026-01-01")}
    assert {"../x", "a/b", "%2e%2e", "ünï", "应用", "😀 app", " ", "x?", "early", "B", "Y"} <= set(rows)
    assert not {"late", "C", "Z", "clicks-only"} & set(rows)
    assert read_state(spec.staging_dir)["old-app"] == 40
    raws = [raw for _, raw, _ in read_quarantine(spec.staging_dir)]
    assert max(map(len, raws)) == ref.RAW_CHARS


@pytest.mark.spark
def test_the_common_line_is_scanned_not_parsed(spark, job, tmp_path):
    """FLAT_LINE (the scan that replaces two JSON parses) matches exactly the lines it may, and almost every
    line the generator writes; test_edge_cases_match_reference holds both kinds to the oracle."""
    from pyspark.sql import functions as F

    def flat(lines: list[str]) -> list[bool]:
        frame = spark.createDataFrame(list(enumerate(lines)), "i int, raw string")
        return [r[1] for r in frame.select("i", F.col("raw").rlike(job.FLAT_LINE)).orderBy("i").collect()]

    edges = [line.decode() for line in _flat_edges()]
    assert [i for i, f in enumerate(flat(edges)) if f] == [0, 1, 2, 3, 8, 15, 16, 17]
    generated = sample_data.generate(str(tmp_path / "landing"), ["2026-01-01"], events_per_day=2000)
    lines = [line for path in generated["files"] for line in ref.read_lines(path)]
    assert sum(flat(lines)) > 0.9 * len(lines)


@pytest.mark.spark
def test_the_dedup_streams_a_group_instead_of_holding_it(spark, job):
    """Review 37: one event sent many times is ONE group of the dedup. A window holds a group's lines at once
    (with small spill thresholds, 800 copies ran the driver out of heap); the aggregation streams them. Neither
    path's dedup plans a Window, and 800 copies of one event (ties on ts broken by the line) are one row."""
    import contextlib
    import io

    lines = [_event("hot", app=f"a{i % 7}", ts="2026-01-01T10:00:00Z" if i % 2 else "2026-01-01T12:00:00+02:00")
             for i in range(800)]
    frame = spark.createDataFrame([(0, "f.jsonl", line) for line in lines], "eo_interval int, file string, raw string")
    one_pass = job._one_pass(job.classify(frame, keep=["eo_interval"]))
    single = job.per_app(job.classify(frame.drop("eo_interval")), spark.createDataFrame([], job.STATE_SCHEMA))
    for df in (one_pass, single):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            df.explain()
        assert "Window" not in out.getvalue() and "Aggregate" in out.getvalue(), out.getvalue()
    winner = json.loads(min(lines))["app_id"]  # one instant, written two ways: the line's text decides
    [row] = one_pass.collect()
    assert (row["reason"], row["n"], row["app_id"]) == (None, 800, winner)
    assert [(r["app_id"], r["events"]) for r in single.collect()] == [(winner, 1)]


@pytest.mark.spark
def test_empty_interval_carries_state_forward(spark, job, tmp_path):
    prev = {"old": 5, "ü/../x": 7}
    spec = make_spec(tmp_path, "empty", [], "2026-01-04", write_state(tmp_path / "prev", prev))
    counts = job.run(spark, spec)
    check_against_reference(spec, counts, prev)
    assert counts.rows_written == {"dt=2026-01-04": 0} and counts.state_rows == 2
    assert counts.records_in == counts.metrics["page_views"] == counts.input_bytes == 0


@pytest.mark.spark
@pytest.mark.parametrize("change", ["append", "delete"])
def test_changed_input_is_refused(spark, job, tmp_path, change):
    path = tmp_path / "in.jsonl"
    path.write_text(_event("e1") + "\n")
    spec = make_spec(tmp_path, "changed", [str(path)], "2026-01-01", None)
    size = spec.source().inputs[0].size
    if change == "append":
        with open(path, "a") as f:
            f.write(_event("e2") + "\n")
        after = str(os.stat(path).st_size)
    else:
        path.unlink()
        after = "missing"
    with pytest.raises(StorageError, match=rf"source {path} changed since it was frozen "
                                           rf"\(size {size} -> {after}\); replay is impossible"):
        job.run(spark, spec)
    assert not os.path.exists(os.path.join(spec.staging_dir, "_counts.json"))


@pytest.mark.spark
def test_write_partial_failpoint_then_rerun(spark, job, tmp_path):
    generated = sample_data.generate(str(tmp_path / "landing"), ["2026-01-01"], events_per_day=300)
    spec = make_spec(tmp_path, "partial", generated["files"], "2026-01-01", None)
    staging = spec.staging_dir
    os.makedirs(staging)
    Path(staging, "_counts.json").write_text('{"stale": true}')  # from an older attempt: must not survive
    old = os.environ.get("EO_FAILPOINTS")
    os.environ["EO_FAILPOINTS"] = "write.partial=error"
    try:
        with pytest.raises(FailpointError):
            job.run(spark, spec)
    finally:
        if old is None:
            os.environ.pop("EO_FAILPOINTS")
        else:
            os.environ["EO_FAILPOINTS"] = old
    assert read_data(staging, "dt=2026-01-01")
    assert not os.path.exists(os.path.join(staging, "_counts.json"))
    assert not os.path.exists(os.path.join(staging, "_state"))
    check_against_reference(spec, job.run(spark, spec), {})


@pytest.mark.spark
def test_spark_submit_end_to_end(tmp_path):
    path = tmp_path / "landing" / "part-000.jsonl"
    path.parent.mkdir()
    path.write_text("\n".join([_event("e1"), _event("e1"), _event("e2", app="ü", user="u2"), "{oops"]) + "\n")
    spec = make_spec(tmp_path, "submit", [str(path)], "2026-01-01", None)
    spec_path = tmp_path / "spec.json"
    spec_path.write_bytes(spec.to_json())
    submit = ROOT / ".venv" / "bin" / "spark-submit"
    if not submit.exists():
        submit = Path(sys.executable).parent / "spark-submit"
    env = {k: v for k, v in os.environ.items() if k != "EO_FAILPOINTS"}
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run([str(submit), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
                           "--conf", "spark.sql.shuffle.partitions=2", str(JOB_PATH), "--spec", str(spec_path)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    counts = json.loads(proc.stdout.strip().splitlines()[-1])["counts"]
    check_against_reference(spec, counts, {})
    assert counts["records_deduplicated"] == 1 and counts["rejected_by_reason"] == {"not_json": 1}
