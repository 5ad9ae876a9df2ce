"""A Hypothesis state machine over the whole protocol: begin / write / pre_commit / commit / abort /
recover / duplicate attempts, each optionally "crashing" at a failpoint (``EO_FAILPOINTS=<name>=error``,
in-process for speed), over several intervals, each publishing two partitions.

Invariants after every step:
* every phase fails exactly when the log says it must (oracle from the log state before the call);
* a transaction's state only moves forward, and a decided outcome never changes;
* every partition shows nothing or exactly the rows one pre-committed transaction wrote (plain pyarrow
  reader and exact reader agree locally), that transaction is COMMITTED, and no newer committed one has
  been published; once every decided commit finished publishing, it is the newest committed one.
After a final settle (teardown of every attempt + recovery) nothing is staged, everything committed is
published, and the live files are byte-identical to their manifests.
"""
from __future__ import annotations

import fcntl
import itertools
from collections import Counter
import os
import threading
import shutil
import tempfile
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, multiple, rule, run_state_machine_as_test

from exactly_once import (FailpointError, FencedError, InputChangedError, Interval, State,
                          TransactionAbortedError, TransactionStateError, TxnRef)
from exactly_once.maintenance import gc
from protocol_helpers import (assert_exact_version, exact_reader_rows, failpoints, is_local, leftovers,
                              log_problems, open_sink, plain_reader_rows, refresh, write_output)


def _at_switch(args) -> bool:
    """The call that makes a version live: the local symlink of a version dir, the S3 manifest PUT."""
    return bool(args) and (str(args[0]).endswith("/_MANIFEST.json") or "/_versions/" in str(args[0]))

INTERVALS = [Interval.daily(d) for d in ("2026-01-01", "2026-01-02", "2026-01-03")]  # consecutive


def partitions_of(iv: Interval) -> list[str]:
    """Each interval writes its day and a partition of late events; no two intervals share one."""
    return [f"dt={iv.day}", f"dt={iv.day}-late"]


def predecessor(iv: Interval) -> Interval | None:
    i = INTERVALS.index(iv)
    return INTERVALS[i - 1] if i else None


ALL_PARTITIONS = [p for iv in INTERVALS for p in partitions_of(iv)]
OK = None  # "no failpoint" - drawn more often than any single failpoint
BEGIN_FP = [OK, OK, OK, "begin.after", "commit.before_publish"]
PRE_COMMIT_FP = [OK, OK, OK, "pre_commit.after"]
COMMIT_FP = [OK, OK, "commit.before_publish", "commit.mid_publish", "commit.after_publish"]
ABORT_FP = [OK, OK, "abort.mid"]
RECOVER_FP = [OK, OK, "commit.mid_publish", "commit.after_publish", "abort.mid"]
FORWARD = {State.OPEN: {State.OPEN, State.PRE_COMMITTED, State.ABORTED, State.COMMITTED},
           State.PRE_COMMITTED: {State.PRE_COMMITTED, State.COMMITTED, State.ABORTED},
           State.COMMITTED: {State.COMMITTED}, State.ABORTED: {State.ABORTED}}


@dataclass(eq=False)
class Attempt:
    """What one attempt (an Airflow task instance chain) knows: its transaction and what it wrote."""

    txn: TxnRef
    files: dict[str, list[list[tuple[int, str]]]] = field(default_factory=dict)
    reads: TxnRef | None = None  # the predecessor's committed version whose state it read
    sealed: bool = False

    def __repr__(self) -> str:
        return f"Attempt({self.txn.name})"


class ProtocolMachine(RuleBasedStateMachine):
    new_url = staticmethod(lambda: "")  # set by the test: a fresh table location per example
    steps = 0
    fired: Counter = Counter()  # how often the race-making rules really raced (reported by the tests)

    attempts = Bundle("attempts")

    def __init__(self) -> None:
        super().__init__()
        self.url = type(self).new_url()
        self.sink = open_sink(self.url)
        self.row_ids = itertools.count()
        self.sealed_rows: dict[tuple[str, int], dict[str, list]] = {}  # (interval, epoch) -> rows
        self.seen: dict[tuple[str, int], State] = {}
        self.handles: list[Attempt] = []
        self.dirty: set[Interval] = set(INTERVALS)  # intervals whose state a step may have changed

    # ------------------------------------------------------------------------------------ helpers
    def _state(self, txn: TxnRef) -> tuple[State | None, int]:
        statuses = self.sink.status(txn.interval)
        st = statuses.get(txn.epoch)
        return (st.state if st and st.records else None), max(statuses, default=0)

    def _call(self, fp, fn, *args, **kwargs):
        type(self).steps += 1
        txn = next((a for a in args if isinstance(a, TxnRef)), None)
        ivs = [txn.interval] if txn else [a for a in args if isinstance(a, Interval)]
        self.dirty.update(ivs if ivs or fn.__name__ != "recover" else INTERVALS)
        with failpoints(f"{fp}=error" if fp else None):
            return fn(*args, **kwargs)

    # -------------------------------------------------------------------------------------- rules
    def _begin(self, iv: Interval, fp, reads: TxnRef | None = None):
        self.dirty.add(iv)
        before = max(self.sink.status(iv), default=0)
        try:
            txn = self._call(fp, self.sink.begin, iv, reads=reads)
        except FailpointError:
            return multiple()  # the attempt died without learning its epoch; recovery must clean up
        assert txn.epoch > before, "epochs must strictly grow"
        attempt = Attempt(txn, reads=reads)
        self.handles.append(attempt)
        return attempt

    @rule(target=attempts, iv=st.sampled_from(INTERVALS), fp=st.sampled_from(BEGIN_FP))
    def begin(self, iv, fp):
        return self._begin(iv, fp)

    @rule(target=attempts, iv=st.sampled_from(INTERVALS[1:]), fp=st.sampled_from(BEGIN_FP))
    def begin_dependent(self, iv, fp):
        """A stateful attempt: it reads the predecessor interval's current committed version."""
        found = self.sink.committed(predecessor(iv))
        return self._begin(iv, fp, reads=found[0]) if found else multiple()

    @rule(target=attempts, other=attempts, fp=st.sampled_from(BEGIN_FP))
    def duplicate_attempt(self, other, fp):
        """A second attempt of the same interval (Airflow retry, clear, backfill over a scheduled run)."""
        return self._begin(other.txn.interval, fp)

    @rule(target=attempts, other=attempts)
    def racing_attempt(self, other):
        """A second attempt whose begin ran concurrently with ``other``: its recovery pass happened
        before ``other``'s latest step, so only its epoch allocation lands now (the real begin code,
        with the recovery that already ran taken out)."""
        type(self).steps += 1
        self.dirty.add(other.txn.interval)
        self.sink.recover = lambda *a, **k: []
        try:
            txn = self.sink.begin(other.txn.interval)
        finally:
            del self.sink.recover
        attempt = Attempt(txn)
        self.handles.append(attempt)
        return attempt

    @rule(target=attempts, iv=st.sampled_from(INTERVALS), sizes=st.lists(st.integers(0, 3), min_size=2,
                                                                        max_size=2))
    def attempt_to_commit(self, iv, sizes):
        """An attempt that runs all its phases without interference."""
        attempt = self._begin(iv, OK)
        self.write(attempt, sizes)
        self.pre_commit(attempt, OK)
        self.commit(attempt, OK)
        return attempt

    @rule(attempt=attempts, sizes=st.lists(st.integers(0, 3), min_size=2, max_size=2))
    def write(self, attempt, sizes):
        if attempt.sealed:
            return  # the writer ran before pre_commit; a zombie writer is modelled by writing unsealed
        type(self).steps += 1
        self.dirty.add(attempt.txn.interval)
        files = {}
        for part, n in zip(partitions_of(attempt.txn.interval), sizes):
            rows = [(i, f"{attempt.txn.name}-{i}") for i in itertools.islice(self.row_ids, n)]
            files[part] = [rows]
            attempt.files.setdefault(part, []).append(rows)
        index = len(attempt.files[partitions_of(attempt.txn.interval)[0]]) - 1
        write_output(self.sink, attempt.txn, files, prefix=f"w{index}")

    @rule(attempt=attempts, fp=st.sampled_from(PRE_COMMIT_FP))
    def pre_commit(self, attempt, fp):
        if not attempt.files:
            return  # an attempt that wrote nothing (see the dropped-partition bug test) is not modelled
        state, newest = self._state(attempt.txn)
        attempt.sealed = True
        rows = {p: sorted(r for f in fs for r in f) for p, fs in attempt.files.items()}
        try:
            manifest = self._call(fp, self.sink.pre_commit, attempt.txn)
        except TransactionAbortedError:
            assert state is State.ABORTED, f"pre_commit said aborted, log said {state}"
            return
        except TransactionStateError:
            assert state is State.COMMITTED, "only a committed epoch compacted by gc has no manifest"
            return
        except FencedError:
            assert state is State.OPEN and newest > attempt.txn.epoch
            return
        except FailpointError:
            manifest = None
        key = (attempt.txn.interval.token, attempt.txn.epoch)
        if state is State.OPEN:
            self.sealed_rows[key] = rows
        if manifest is not None:
            assert state in (State.OPEN, State.PRE_COMMITTED, State.COMMITTED), state
            assert newest == attempt.txn.epoch or state is not State.OPEN
            for part, part_rows in self.sealed_rows[key].items():
                assert sum(f.rows for f in manifest.partitions[part]) == len(part_rows)

    @rule(attempt=attempts, fp=st.sampled_from(COMMIT_FP))
    def commit(self, attempt, fp):
        state, newest = self._state(attempt.txn)
        try:
            result = self._call(fp, self.sink.commit, attempt.txn)
        except FailpointError:
            assert state in (State.PRE_COMMITTED, State.COMMITTED)
            return
        except TransactionAbortedError:
            assert state is State.ABORTED
            return
        except InputChangedError:
            type(self).fired["dependent refused: input changed"] += 1
            assert state is State.PRE_COMMITTED and attempt.reads is not None
            newer = [e for e in self.sink.status(attempt.reads.interval) if e > attempt.reads.epoch]
            assert newer, "input changed, but the predecessor has no newer version"
            return
        except FencedError:
            assert state is State.PRE_COMMITTED and newest > attempt.txn.epoch
            return
        except TransactionStateError:
            assert state is State.OPEN
            return
        assert state is State.COMMITTED or (state is State.PRE_COMMITTED and newest == attempt.txn.epoch)
        assert set(result.partitions.values()) <= {"published", "already", "superseded"}
        assert self._state(attempt.txn)[0] is State.COMMITTED

    @rule(attempt=attempts, fp=st.sampled_from(ABORT_FP))
    def abort(self, attempt, fp):
        state, _ = self._state(attempt.txn)
        try:
            final = self._call(fp, self.sink.abort, attempt.txn)
        except FailpointError:
            return
        assert final is (State.COMMITTED if state is State.COMMITTED else State.ABORTED)

    @rule(iv=st.sampled_from(INTERVALS + [None]), abort_open=st.booleans(), fp=st.sampled_from(RECOVER_FP))
    def recover(self, iv, abort_open, fp):
        try:
            self._call(fp, self.sink.recover, iv, abort_open=abort_open)
        except FailpointError:
            pass

    @rule(min_age=st.sampled_from([0, 3600]))
    def collect_garbage(self, min_age):
        """gc beside everything else: it may delete only what the log says is finished."""
        type(self).steps += 1
        self.dirty.update(INTERVALS)
        report = gc(self.sink, min_age=min_age)
        type(self).fired[f"gc(min_age={min_age})"] += 1
        assert report["failed"] == [] and not any(a.startswith("FAILED") for a in report["recovered"])

    def _sealed_attempt(self, iv, sizes, reads=None):
        """A new attempt of ``iv`` that wrote and pre-committed (None if something refused it)."""
        attempt = self._begin(iv, OK, reads=reads)
        self.write(attempt, sizes)
        self.pre_commit(attempt, OK)
        state, newest = self._state(attempt.txn)
        return attempt if state is State.PRE_COMMITTED and newest == attempt.txn.epoch else None

    @rule(target=attempts, iv=st.sampled_from(INTERVALS),
          sizes=st.lists(st.integers(0, 3), min_size=2, max_size=2))
    def reader_overlapping_a_commit(self, iv, sizes):
        """A reader plans (local: pyarrow lists the partitions; S3: the exact reader reads the manifests)
        before ``attempt``'s commit and reads after it: per partition it gets the version it planned on
        whole, or (local, names gone after a swap) an error to retry on - never a mix of two versions."""
        before = {p: exact_reader_rows(self.sink, p) for iv in INTERVALS for p in partitions_of(iv)}
        if is_local(self.sink):
            import pyarrow.dataset as ds

            planned = (ds.dataset(self.sink.table, format="parquet", partitioning="hive").get_fragments()
                       if os.path.isdir(self.sink.table) else [])
        else:
            planned = [(p, self.sink.live_files(p)) for p in before]
        attempt = self._sealed_attempt(iv, sizes)
        if attempt is None:
            return multiple()
        self.commit(attempt, OK)
        got: dict[str, list] = {}
        if is_local(self.sink):
            failed: set[str] = set()
            for frag in planned:
                part = os.path.relpath(os.path.dirname(frag.path), self.sink.table)
                try:
                    t = frag.to_table(columns=["k", "v"])
                except OSError:
                    failed.add(part)
                    continue
                got.setdefault(part, []).extend(zip(t.column("k").to_pylist(), t.column("v").to_pylist()))
            got = {p: r for p, r in got.items() if p not in failed}
        else:
            from protocol_helpers import _read_rows

            got = {p: _read_rows(self.sink, files) for p, files in planned if files}  # never a 404: grace
        for part, rows in got.items():
            assert sorted(rows) == before[part], f"{part}: a reader overlapping the commit read {rows}"
        if any(before[p] != exact_reader_rows(self.sink, p) for p in before):
            type(self).fired["reader overlapped a switch"] += 1
        return attempt

    @rule(target=attempts, iv=st.sampled_from(INTERVALS),
          sizes=st.lists(st.integers(0, 3), min_size=4, max_size=4))
    def stalled_publisher(self, iv, sizes):
        """``attempt`` decides and stalls right before it makes its version live; meanwhile another
        process (a thread here) runs a whole newer attempt of the interval. The stalled one must never
        make its older version live over the newer one (locally it holds the partition lock, so the
        other waits; on S3 its conditional switch loses)."""
        attempt = self._sealed_attempt(iv, sizes[:2])
        if attempt is None:
            return multiple()
        sizes = sizes[2:]
        type(self).steps += 1
        self.dirty.add(attempt.txn.interval)
        other, news, waiting = open_sink(self.url), {}, threading.Event()
        real_flock = fcntl.flock

        def flock(fd, op):
            try:
                return real_flock(fd, op)
            except BlockingIOError:
                waiting.set()
                raise

        def newer():
            try:
                news["attempt"] = self._run_whole(other, attempt.txn.interval, sizes)
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                news["error"] = exc
            finally:
                waiting.set()

        def stall(*args, **kwargs):
            if not news:
                thread = threading.Thread(target=newer, daemon=True)
                news["thread"] = thread
                thread.start()
                assert waiting.wait(60), "the newer attempt neither finished nor waited"
            return real_point(*args, **kwargs)

        target = os if is_local(self.sink) else self.sink.storage
        name = "symlink" if is_local(self.sink) else "put_conditional"
        real_point = getattr(target, name)
        fcntl.flock = flock
        setattr(target, name, lambda *a, **k: stall(*a, **k) if _at_switch(a) else real_point(*a, **k))
        try:
            self.sink.commit(attempt.txn)
        except (FencedError, InputChangedError):
            pass
        finally:
            setattr(target, name, real_point)
            fcntl.flock = real_flock
        if "thread" in news:
            news["thread"].join(120)
        assert "error" not in news, news.get("error")
        if "attempt" in news:
            self.handles.append(news["attempt"])
            type(self).fired["stalled publisher overtaken"] += 1
        return attempt

    @rule(iv=st.sampled_from(INTERVALS[1:]), sizes=st.lists(st.integers(0, 3), min_size=2, max_size=2),
          fp=st.sampled_from(COMMIT_FP))
    def reprocess_while_a_dependent_runs(self, iv, sizes, fp):
        """A stateful attempt of ``iv`` read its predecessor's version and sealed its output; then the
        predecessor is reprocessed and committed; then the dependent tries to commit."""
        found = self.sink.committed(predecessor(iv))
        if found is None:
            return
        dependent = self._sealed_attempt(iv, sizes, reads=found[0])
        if dependent is None:
            return
        self.attempt_to_commit(predecessor(iv), sizes)
        self.commit(dependent, fp)

    def _run_whole(self, sink, iv, sizes) -> Attempt:
        """begin + write + pre_commit + commit of a new attempt on ``sink`` (another process's view)."""
        txn = sink.begin(iv)
        attempt = Attempt(txn)
        files = {}
        for part, n in zip(partitions_of(iv), sizes):
            rows = [(i, f"{txn.name}-{i}") for i in itertools.islice(self.row_ids, n)]
            files[part] = [rows]
            attempt.files[part] = [rows]
        write_output(sink, txn, files, prefix="w0")
        attempt.sealed = True
        self.sealed_rows[(iv.token, txn.epoch)] = {p: sorted(r for f in fs for r in f) for p, fs in files.items()}
        sink.pre_commit(txn)
        sink.commit(txn)
        return attempt

    # --------------------------------------------------------------------------------- invariants
    @invariant()
    def protocol_invariants(self) -> None:
        """Checked for every interval a step may have touched (the others cannot have changed)."""
        refresh(self.sink)
        plain = plain_reader_rows(self.sink.table) if is_local(self.sink) else None
        for iv in sorted(self.dirty):
            statuses = self.sink.status(iv)
            self._states_only_move_forward(iv, statuses)
            self._readers_see_one_complete_version(iv, statuses, plain)
            self._no_commit_on_replaced_state(iv, statuses)
        self.dirty.clear()

    def _no_commit_on_replaced_state(self, iv, statuses) -> None:
        """A committed stateful epoch whose predecessor version was replaced by a newer committed one
        was decided before it, and that newer commit reported it stale (it never commits after)."""
        for epoch, st in statuses.items():
            reads = st.reads
            if st.state is not State.COMMITTED or reads is None:
                continue
            newer = {e: s for e, s in self.sink.status(reads.interval).items()
                     if e > reads.epoch and s.state is State.COMMITTED}
            if newer:
                reported = {n for s in newer.values() for n in (s.records["outcome"].get("stale") or [])}
                type(self).fired["dependent committed first, reported stale"] += 1
                assert self.sink.ref(iv, epoch).name in reported, \
                    f"{iv.token} e{epoch} committed on {reads.name}, replaced by {sorted(newer)} unreported"

    def _states_only_move_forward(self, iv, statuses) -> None:
        for epoch, st in statuses.items():
            key = (iv.token, epoch)
            old = self.seen.get(key, State.OPEN)
            assert st.state in FORWARD[old], f"{key}: {old} -> {st.state}"
            self.seen[key] = st.state
            if st.state is State.COMMITTED:
                assert key in self.sealed_rows, f"{key} committed but no attempt sealed it"

    def _readers_see_one_complete_version(self, iv, statuses, plain) -> None:
        everything_published = all(s.published for s in statuses.values() if s.state is State.COMMITTED)
        assert log_problems(self.sink, iv, idle=everything_published, statuses=statuses) == []
        for part in partitions_of(iv):
            live = self.sink.live_version(part)
            exact = exact_reader_rows(self.sink, part)
            if plain is not None:
                assert plain.get(part, []) == exact, f"{part}: plain reader != exact reader"
            if live is None:
                assert exact == []
                continue
            epoch = int(live.rsplit(".e", 1)[1])
            assert statuses[epoch].state is State.COMMITTED
            assert exact == self.sealed_rows[(iv.token, epoch)].get(part, []), f"{part}: not {live}"

    def teardown(self) -> None:
        try:
            self.settle()
        finally:
            if is_local(self.sink):
                shutil.rmtree(os.path.dirname(self.sink.table), ignore_errors=True)

    def settle(self) -> None:
        """Every attempt's teardown runs, then a recovery: the interval is idle and clean."""
        for attempt in self.handles:
            self.sink.abort(attempt.txn)
        for iv in INTERVALS:
            self.sink.recover(iv, abort_open=True)
        assert leftovers(self.sink) == []
        for iv in INTERVALS:
            statuses = self.sink.status(iv)
            assert all(s.state in (State.COMMITTED, State.ABORTED) for s in statuses.values())
            assert log_problems(self.sink, iv) == []
            committed = [e for e, s in statuses.items() if s.state is State.COMMITTED]
            for part in partitions_of(iv):
                if not committed:
                    assert_exact_version(self.sink, part, [], None)
                    continue
                newest = self.sink.ref(iv, max(committed))
                assert_exact_version(self.sink, part, self.sealed_rows[(iv.token, newest.epoch)][part], newest)


RACES = ("gc(min_age=0)", "reader overlapped a switch", "stalled publisher overtaken",
         "dependent refused: input changed")


def run_machine(new_url, max_examples: int, steps: int) -> int:
    ProtocolMachine.new_url = staticmethod(new_url)
    ProtocolMachine.steps = 0
    ProtocolMachine.fired = Counter()
    run_state_machine_as_test(ProtocolMachine, settings=settings(
        max_examples=max_examples, stateful_step_count=steps, deadline=None, database=None,
        suppress_health_check=list(HealthCheck)))
    return ProtocolMachine.steps


def test_protocol_state_machine_local(tmp_path):
    counter = itertools.count()
    total = run_machine(lambda: str(tmp_path / f"ex{next(counter)}" / "t"), max_examples=60, steps=30)
    print(f"\nHypothesis protocol state machine (local): {total} protocol steps; races: "
          f"{dict(ProtocolMachine.fired)}")
    assert total >= 1500, f"only {total} protocol steps ran"
    assert all(ProtocolMachine.fired[k] for k in RACES), f"some races never happened: {dict(ProtocolMachine.fired)}"


@pytest.mark.s3
def test_protocol_state_machine_s3(s3_server):
    from conftest import make_bucket

    total = run_machine(lambda: f"s3://{make_bucket(s3_server)}/warehouse/t", max_examples=6, steps=12)
    print(f"\nHypothesis protocol state machine (S3): {total} protocol steps; races: "
          f"{dict(ProtocolMachine.fired)}")
    assert total >= 40, f"only {total} protocol steps ran"
