"""The world of the pipeline-level fault tests (tests/integration/test_fault_matrix*.py): one storage with
day 1 committed in a template root that every scenario copies, the clean run's output, the Airflow-like
driver of a faulted run (:func:`run_with_fault`), the checks every scenario ends with, and the counters
``EO_FAULT_FIGURES`` reports. See test_fault_matrix.py's docstring for what is checked."""
from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import reference_pv as ref
from conftest import make_bucket
from exactly_once.ops.maintenance import gc
from fault_helpers import (PHASES, Driver, Outcome, Setup, epoch_problems, footprint, leftovers, log_problems,
                           published_records, rows_checksum, sink_of, visible_rows, warm_children)

from exactly_once.failpoints import CRASH_EXIT_CODE, NAMES
from exactly_once.ids import Interval
from exactly_once.records.txlog import State
from tools.sample_data import generate

D1, D2 = "2026-01-01", "2026-01-02"
IV2 = Interval.daily(D2)
PART2 = f"dt={D2}"
CONN_ID = "eo_fault_s3"
FIRES_IN = {"begin.after": "begin", "write.partial": "write", "pre_commit.after": "pre_commit",
            "validate.after": "validate", "commit.before_publish": "commit", "commit.mid_publish": "commit",
            "commit.after_publish": "commit", "abort.mid": "validate"}  # abort.mid: the gate's in-task abort
COUNTERS = ("scenarios", "task_attempts", "child_processes", "kills", "injected_errors", "third_party_recoveries")
KINDS = ("local", "s3", "delta-local", "delta-s3")  # storage, and the table format (a Delta table)
FIGURES_BY_KIND: dict[str, dict[str, int]] = {k: dict.fromkeys(COUNTERS, 0) for k in KINDS}
_UNDER_TEST = {"kind": "local"}
# The full product on S3 takes ~2x the local time on a loaded 2-core box (every task is a fresh s3fs
# client and a dozen requests to the loopback server; validation reads through s3fs). By default S3 runs
# every failpoint with `crash` (the real kill) and `error` only where S3's publish differs from a local
# rename (half-copied files, the lost acknowledgement); `error` leaves the same state on storage as
# `crash` for every failpoint (each sits between two complete storage operations), and the local column
# runs the whole product. EO_FAULT_FULL=1 runs the full product on S3 too.
FULL = os.environ.get("EO_FAULT_FULL") == "1"
S3_ERROR = ("commit.mid_publish", "commit.after_publish")
LOCAL = pytest.param("local", id="local")
S3 = pytest.param("s3", id="s3", marks=pytest.mark.s3)


def figures() -> dict[str, int]:
    """The counters of the storage under test (the ``world`` of the running test)."""
    return FIGURES_BY_KIND[_UNDER_TEST["kind"]]


LATE = [{"event_id": f"late-{i}", "app_id": "app_late", "user_id": f"u{i % 3}", "event": "page_view",
         "ts": f"{D2}T23:59:0{i}Z"} for i in range(5)]


@dataclass
class World:
    """One storage: a template root with day 1 committed, and the clean run's output."""

    kind: str
    base: Path
    setup: Setup            # of the template (day 1 committed)
    landing: Path           # the local copy of the landing files (the reference reads these)
    expected: dict[str, list]   # clean run: {day: sorted rows}
    expected_late: list     # day 2 reprocessed with the late file, by the reference
    fs: Any = None
    bucket: str = ""
    roots: list[str] = field(default_factory=list)

    @property
    def local(self) -> bool:
        return not self.kind.endswith("s3")

    def fresh(self, template: str = "d1", **kw: Any) -> Setup:
        """A copy of a template root (``d1``: day 1 committed; ``d2``: days 1 and 2 committed)."""
        src = self.setup.root if template == "d1" else self.setup.root + "-d2"
        name = f"s-{uuid.uuid4().hex[:10]}"
        if self.local:
            dst = str(self.base / name)
            shutil.copytree(src, dst, symlinks=True)
        else:
            dst = f"s3://{self.bucket}/{name}"
            self.fs.invalidate_cache()
            self.fs.copy(src[len("s3://"):], dst[len("s3://"):], recursive=True)
        return self.setup.replace(root=dst, **kw)

    def add_late_file(self, setup: Setup) -> None:
        data = "".join(json.dumps(r) + "\n" for r in LATE).encode()
        rel = f"landing/app_logs/dt={D2}/hour=23/late-0.jsonl"
        if self.local:
            path = Path(setup.root) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        else:
            self.fs.pipe_file(f"{setup.root[len('s3://'):]}/{rel}", data)


def _day_files(landing: Path, day: str) -> list[str]:
    return sorted(str(p) for p in (landing / "app_logs" / f"dt={day}").rglob("*.jsonl"))


def _as_rows(rows: list[dict]) -> list:
    return sorted((r["app_id"], r["pv"], r["uv"], r["cumulative_pv"]) for r in rows)


def _world_fixture(kind: str) -> Any:
    """The module-scoped fixture ``<kind>_world`` (a test module imports the ones it uses)."""
    @pytest.fixture(scope="module", name=f"{kind.replace('-', '_')}_world")
    def fixture(request, tmp_path_factory):
        yield from make_world(kind, request, tmp_path_factory)
    return fixture


local_world, s3_world, delta_local_world, delta_s3_world = (_world_fixture(k) for k in KINDS)


def matrix(local: str = "local", s3: str = "s3") -> list:
    """The cells ``(kind, failpoint, action)``: every failpoint x {crash, error} on ``local``; on ``s3``
    every failpoint with ``crash``, ``error`` only where S3 differs (all of them with EO_FAULT_FULL=1)."""
    out = [pytest.param(local, fp, action, id=f"{local}-{fp}-{action}") for fp in NAMES for action in ("crash", "error")]
    out += [pytest.param(s3, fp, action, id=f"{s3}-{fp}-{action}", marks=pytest.mark.s3)
            for fp in NAMES for action in ("crash", "error") if FULL or action == "crash" or fp in S3_ERROR]
    return out


@pytest.fixture
def world(request):
    """The world of the test's storage and table format (``kind``), built once per module."""
    kind = request.getfixturevalue("kind")
    _UNDER_TEST["kind"] = kind
    return request.getfixturevalue(f"{kind.replace('-', '_')}_world")


def make_world(kind: str, request, tmp_path_factory):
    warm_children()  # the forkserver imports GX & co. while this process commits day 1
    base = tmp_path_factory.mktemp(f"fault-{kind}")
    table_format = "delta" if kind.startswith("delta") else "files"
    landing = base / "landing"
    generate(str(landing), [D1, D2], events_per_day=120)
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("EO_FAILPOINTS", raising=False)
        mp.setenv("EO_REPORTS_DIR", str(base / "reports"))
        env = {"EO_REPORTS_DIR": str(base / "reports")}
        fs, bucket = None, ""
        if not kind.endswith("s3"):
            root = str(base / "tmpl")
            shutil.copytree(landing, Path(root) / "landing")
            setup = Setup(root=root, start=D1, reports=str(base / "reports"), env=env, table_format=table_format)
        else:
            import s3fs

            s3 = request.getfixturevalue("s3_server")
            bucket = make_bucket(s3)
            conn = json.dumps({"conn_type": "aws", "login": s3["key"], "password": s3["secret"],
                               "extra": {"endpoint_url": s3["endpoint_url"]}})
            mp.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", conn)
            env[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = conn
            fs = s3fs.S3FileSystem(key=s3["key"], secret=s3["secret"], skip_instance_cache=True,
                                   client_kwargs={"endpoint_url": s3["endpoint_url"], "region_name": "us-east-1"})
            root = f"s3://{bucket}/tmpl"
            for p in sorted(landing.rglob("*.jsonl")):
                fs.pipe_file(f"{bucket}/tmpl/landing/{p.relative_to(landing).as_posix()}", p.read_bytes())
            setup = Setup(root=root, start=D1, reports=str(base / "reports"), conn_id=CONN_ID, env=env,
                          table_format=table_format)
        Driver(setup).clean_run(D1)
        sink = sink_of(setup)
        assert sink.table_format == table_format and (table_format != "delta" or sink.target.snapshot() is not None)
        w = World(kind, base, setup, landing, {}, [], fs=fs, bucket=bucket)
        # the clean run of day 2 (on a copy): what every faulted run must end with
        d2 = w.fresh()
        if w.local:
            shutil.move(d2.root, root + "-d2")
        else:
            fs.copy(d2.root[len("s3://"):], root[len("s3://"):] + "-d2", recursive=True)
        d2 = setup.replace(root=root + "-d2")
        Driver(d2).clean_run(D2)
        w.expected = visible_rows(d2)
        # ... which is also what the independent reference computes
        state: dict[str, int] = {}
        for day in (D1, D2):
            rows, state, _ = ref.compute(_day_files(landing, day), state, f"dt={day}")
            assert w.expected[day] == _as_rows(rows), f"clean run of {day} differs from the reference"
        late = base / "late-0.jsonl"
        late.write_text("".join(json.dumps(r) + "\n" for r in LATE))
        _, state1, _ = ref.compute(_day_files(landing, D1), {}, f"dt={D1}")
        rows, _, _ = ref.compute(_day_files(landing, D2) + [str(late)], state1, PART2)
        w.expected_late = _as_rows(rows)
        assert ("app_late", 5, 3, 5) in w.expected_late
        yield w
    out = os.environ.get("EO_FAULT_FIGURES")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps({"module": request.module.__name__, "storage": kind, **FIGURES_BY_KIND[kind]}) + "\n")
    FIGURES_BY_KIND[kind].update(dict.fromkeys(COUNTERS, 0))  # each module reports its own


# ------------------------------------------------------------------------------------------ the driver
def count(out: Outcome) -> Outcome:
    figures()["task_attempts"] += 1
    figures()["child_processes"] += out.exit is not None
    figures()["kills"] += out.exit == CRASH_EXIT_CODE
    figures()["injected_errors"] += out.error == "FailpointError"
    return out


def assert_fault(out: Outcome, fp: str, action: str) -> None:
    """The failpoint (and nothing else) ended this task attempt."""
    if action == "crash":
        assert out.exit == CRASH_EXIT_CODE, f"{out.phase} did not crash at {fp}: {out}"
    else:
        assert out.error == "FailpointError" and fp in out.message, f"{out.phase} did not fail at {fp}: {out}"


def run_with_fault(setup: Setup, day: str, fp_spec: str, action: str, *, expect: str,
                   refresh: bool = False, snapshot=None) -> dict[str, Any]:
    """One DAG run of ``day`` with ``EO_FAILPOINTS=fp_spec`` armed until the fault, then Airflow's retries.

    ``expect`` is the failpoint that must end one task attempt (in the task ``FIRES_IN`` says).
    ``snapshot(phase)`` is called right after the fault, before any retry. Returns the XCom, the phase
    that failed, and each task's final outcome.
    """
    drv = Driver(setup)
    crash = action == "crash"
    xcom: dict[str, Any] = {}
    fired: str | None = None
    final: dict[str, Outcome] = {}

    def task(phase: str) -> Outcome:
        armed = fired is None
        kw = {"refresh": refresh} if phase == "begin" else {}
        return count(drv.task(day, phase, xcom, child=crash or not armed,
                              failpoints=fp_spec if armed else None, **kw))

    for phase in PHASES:
        out = task(phase)
        if not out.ok and not out.final:
            assert fired is None, f"a second failure after the fault at {fired}: {out}"
            assert_fault(out, expect, action)
            fired = phase
            if snapshot is not None:
                snapshot(phase)
            out = task(phase)  # Airflow's retry: a fresh process, no failpoints
        final[phase] = out
        if phase == "begin":
            assert out.ok, out
            xcom = {"txn": out.result["txn"], "spec": out.result["spec"]}
        if not out.ok:
            assert out.final, f"{phase} failed after its retry: {out}"
            break  # downstream tasks are upstream_failed; only the teardown runs
    td = task("abort")
    if not td.ok:
        assert fired is None, f"teardown failed after the fault at {fired}: {td}"
        assert_fault(td, expect, action)
        fired = "abort"
        if snapshot is not None:
            snapshot("abort")
        td = task("abort")  # the teardown is retried too
    assert td.ok, td
    final["abort"] = td
    assert fired is not None, f"the failpoint {expect} never fired"
    return {"xcom": xcom, "fired": fired, "final": final, "attempts": drv.attempts}


def assert_idle_and_consistent(setup: Setup, *, committed_epochs: int) -> Any:
    sink = sink_of(setup)
    for day in (D1, D2):
        iv = Interval.daily(day)
        assert epoch_problems(sink, iv) == [], day
        assert log_problems(sink, iv) == [], day
    assert leftovers(sink) == []
    assert sink.storage.list_names(sink.storage.join(sink.home, "_staging")) == []
    committed = [e for e, st in sink.status(IV2).items() if st.state is State.COMMITTED]
    assert len(committed) == committed_epochs
    if committed:  # exactly one live version: the newest committed epoch, one physical copy of each
        assert sink.live_version(PART2) == sink.ref(IV2, max(committed)).name
        fp = footprint(sink, PART2)
        assert len(fp) == len(committed), fp  # superseded versions stay for the grace period ...
        gc(sink, min_age=0)  # ... and go once it is over, by the log
        assert len(footprint(sink, PART2)) == 1 and sink.live_version(PART2) == sink.ref(IV2, max(committed)).name
        assert leftovers(sink) == []
    return sink


def assert_output(setup: Setup, expected: dict[str, list]) -> None:
    seen = visible_rows(setup)
    assert seen.keys() == expected.keys()
    for day, rows in expected.items():
        assert seen[day] == rows, f"{day}: visible rows differ from the clean run"
        assert rows_checksum(seen[day]) == rows_checksum(rows)


def fault_then_retry(world: World, fp: str, action: str, **setup_kw: Any) -> None:
    """One cell of the matrix: the fault, Airflow's retries, then the checks of the module docstring."""
    figures()["scenarios"] += 1
    gate_fails = fp == "abort.mid"  # abort is reached through a failing quality gate
    setup = world.fresh(max_malformed_ratio=0.0 if gate_fails else 0.05, **setup_kw)
    at_fault: dict[str, Any] = {}

    def snapshot(phase: str) -> None:
        at_fault["phase"] = phase
        at_fault["rows"] = visible_rows(setup)

    res = run_with_fault(setup, D2, f"{fp}={action}", action, expect=fp, snapshot=snapshot)
    assert res["fired"] == FIRES_IN[fp]

    # at the fault a reader saw the previous state, or the complete new version once it was published
    if fp == "commit.after_publish":
        assert at_fault["rows"] == world.expected
    else:
        assert at_fault["rows"] == {D1: world.expected[D1]}

    sink = sink_of(setup)
    states = {e: st.state for e, st in sink.status(IV2).items()}
    if gate_fails:
        # the gate said no: nothing of day 2 was published, the abort that crashed was finished
        assert res["final"]["validate"].error == "ValidationFailedError"
        assert "commit" not in res["final"] and res["final"]["abort"].result == "ABORTED"
        assert states == {1: State.ABORTED}
        assert_output(setup, {D1: world.expected[D1]})
        assert_idle_and_consistent(setup, committed_epochs=0)
        # the operator fixes the threshold and re-runs the interval: a clean new version
        again = setup.replace(max_malformed_ratio=0.05)
        Driver(again).clean_run(D2, child=True)
        assert_output(again, world.expected)
        assert {e: st.state for e, st in sink_of(again).status(IV2).items()} == {1: State.ABORTED,
                                                                                2: State.COMMITTED}
        assert_idle_and_consistent(again, committed_epochs=1)
        return

    assert_output(setup, world.expected)
    if fp == "begin.after":  # the crashed attempt is fenced and aborted by the retry's begin
        assert states == {1: State.ABORTED, 2: State.COMMITTED}
    else:
        assert states == {1: State.COMMITTED}
    assert_idle_and_consistent(setup, committed_epochs=1)
    newest = max(states)
    published = published_records(sink, IV2)
    if fp == "commit.after_publish":
        # the lost acknowledgement: the retry found the version in place and published nothing again
        assert published == {newest: {PART2: "already"}}
        assert res["final"]["commit"].result["partitions"] == {PART2: "already"}
    else:
        assert published == {newest: {PART2: "published"}}
    name = sink.ref(IV2, newest).name
    if world.local or sink.table_format == "delta":  # a version dir (locally, and a Delta table's <txn>/)
        assert footprint(sink, PART2) == [name]
    else:
        assert footprint(sink, PART2) == [f"{name}--part-0.parquet"]
    # the retry replayed the frozen inputs and day 1's checkpoint: the same counts as a clean run
    counts = sink.status(IV2)[newest].records["pre_committed"]["counts"]
    assert counts["rows_written"] == {f"dt={D2}": len(world.expected[D2])}


# ------------------------------------------------------------------------- commit outcome unknown
UNKNOWN = {
    # name: (failpoints, max_malformed_ratio, third-party recover kwargs, expected winner)
    "decided-then-killed": ("commit.before_publish=crash", 0.05, {}, "new"),
    "killed-before-deciding-validated": ("validate.after=crash", 0.05, {}, "new"),
    "killed-before-deciding-not-validated": ("pre_commit.after=crash", 0.05, {"stale_after": 0.0}, "old"),
    "killed-before-deciding-gate-failed": ("validate.after=crash", 0.0, {}, "old"),
}


def third_party_resolves(world: World, case: str) -> None:
    """A reprocessing run of day 2 (a late file taken in) is killed right around its commit decision. The
    run's own tasks never come back; a third party (``sink.recover()`` in another process - what ``eo
    recover`` does - not a retry of the task) resolves it from the log and the target: it rolls the new
    version forward exactly when the decision was taken (or when recoverAndCommit may take it: the
    newest epoch, pre-committed and validated), aborts otherwise, and never deletes the live version."""
    figures()["scenarios"] += 1
    spec, ratio, recover_kw, winner = UNKNOWN[case]
    setup = world.fresh("d2", max_malformed_ratio=ratio)
    world.add_late_file(setup)
    old_sink = sink_of(setup)
    old_name = old_sink.live_version(PART2)
    old_files = old_sink.live_files(PART2)
    assert old_name == old_sink.ref(IV2, 1).name

    drv = Driver(setup)
    xcom: dict[str, Any] = {}
    for phase in PHASES:
        kw = {"refresh": True} if phase == "begin" else {}  # a reprocessing run takes the late file in
        out = count(drv.task(D2, phase, xcom, child=True, failpoints=spec, **kw))
        if phase == "begin":
            xcom = {"txn": out.result["txn"], "spec": out.result["spec"]}
        if out.exit == CRASH_EXIT_CODE:
            break
        assert out.ok, out
    else:
        pytest.fail("the committing process was not killed")
    sink = sink_of(setup)
    st = sink.status(IV2)[2]
    decided = st.records.get("outcome")
    assert (decided is not None) == (case == "decided-then-killed"), st.records.keys()
    assert visible_rows(setup)[D2] == world.expected[D2]  # nothing of epoch 2 visible yet

    # the third party, in another process; a plain recover first
    out = count(drv.task(D2, "recover", {}, child=True))
    figures()["third_party_recoveries"] += 1
    assert out.ok, out
    if recover_kw:  # not validated, no decision: a plain recover must leave it alone (validation may
        assert out.result == [], out.result  # still be running in a live attempt) ... until it is stale
        assert sink_of(setup).status(IV2)[2].state is State.PRE_COMMITTED
        assert visible_rows(setup)[D2] == world.expected[D2]
        out = count(drv.task(D2, "recover", {}, child=True, **recover_kw))
        figures()["third_party_recoveries"] += 1
        assert out.ok, out
    assert out.result, "the third party did nothing"
    sink = sink_of(setup)
    states = {e: s.state for e, s in sink.status(IV2).items()}
    if winner == "new":
        assert states == {1: State.COMMITTED, 2: State.COMMITTED}
        assert visible_rows(setup)[D2] == world.expected_late
        assert sink.live_version(PART2) == sink.ref(IV2, 2).name
        assert published_records(sink, IV2)[2] == {PART2: "published"}
    else:
        assert states == {1: State.COMMITTED, 2: State.ABORTED}
        assert visible_rows(setup)[D2] == world.expected[D2]
        # the live version was never deleted: same version, same files, still readable
        assert sink.live_version(PART2) == old_name
        assert sink.live_files(PART2) == old_files
    # the crashed run's teardown arrives late: it changes nothing
    td = count(drv.task(D2, "abort", xcom, child=True))
    assert td.ok and td.result == ("COMMITTED" if winner == "new" else "ABORTED"), td
    assert visible_rows(setup)[D1] == world.expected[D1]
    assert_idle_and_consistent(setup, committed_epochs=2 if winner == "new" else 1)
