"""A Hypothesis state machine over the whole protocol: begin / write / pre_commit / commit / abort /
recover / duplicate attempts, each optionally "crashing" at a failpoint (``EO_FAILPOINTS=<name>=error``,
in-process for speed), over several intervals, each publishing two partitions.

Invariants after every step:
* every phase fails exactly when the log says it must (oracle from the log state before the call);
* a transaction's state only moves forward, and a decided outcome never changes;
* every partition shows nothing or exactly the rows one pre-committed transaction wrote (plain pyarrow
  reader and exact reader agree locally), that transaction is COMMITTED, and no newer committed one has
  been published; once every decided commit finished publishing, it is the newest committed one;
* (at every gc) no file a slow reader resolved less than ``min_age`` ago (the machine's clock) is gone.
After a final settle (teardown of every attempt + recovery) nothing is staged, everything committed is
published, and the live files are byte-identical to their manifests.
"""
from __future__ import annotations

import itertools
from collections import Counter
import os
import shutil

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, multiple, rule, run_state_machine_as_test

from exactly_once import (FailpointError, FencedError, InputChangedError, Interval, State,
                          TransactionAbortedError, TransactionStateError, TxnRef)
from exactly_once.ops.maintenance import gc
from delta_helpers import is_delta
from protocol_helpers import (assert_exact_version, exact_reader_rows, failpoints, is_local, leftovers,
                              log_problems, open_sink, plain_reader_rows, refresh, write_output)
from protocol_machine_model import (ABORT_FP, ALL_PARTITIONS, BEGIN_FP, COMMIT_FP, FORWARD, INTERVALS, OK,
                                    PRE_COMMIT_FP, RECOVER_FP, Attempt, MachineClock, RaceRules, partitions_of,
                                    predecessor, produced)


class ProtocolMachine(RaceRules, RuleBasedStateMachine):
    new_url = staticmethod(lambda: "")  # set by the test: a fresh table location per example
    table_format = "files"  # set by the test: "delta" runs the same machine on a Delta table
    steps = 0
    fired: Counter = Counter()  # how often the race-making rules really raced (reported by the tests)

    attempts = Bundle("attempts")

    def __init__(self) -> None:
        super().__init__()
        self.url = type(self).new_url()
        self.sink = open_sink(self.url, table_format=type(self).table_format)
        self.row_ids = itertools.count()
        self.sealed_rows: dict[tuple[str, int], dict[str, list]] = {}  # (interval, epoch) -> rows
        self.seen: dict[tuple[str, int], State] = {}
        self.handles: list[Attempt] = []
        self.dirty: set[Interval] = set(INTERVALS)  # intervals whose state a step may have changed
        self.held: dict[tuple[str, tuple[str, ...]], float] = {}  # slow readers: files -> last resolved at
        self.clock = MachineClock()
        self.clock.install()

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
        for part, n in produced(attempt.txn.interval, sizes):
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

    @rule(min_age=st.sampled_from([0, 1800, 3600]))
    def collect_garbage(self, min_age):
        """gc beside everything else: it may delete only what the log says is finished."""
        type(self).steps += 1
        self.dirty.update(INTERVALS)
        report = gc(self.sink, min_age=min_age)
        type(self).fired[f"gc(min_age={min_age})"] += 1
        assert report["failed"] == [] and not any(a.startswith("FAILED") for a in report["recovered"])
        refresh(self.sink)
        for (part, files), at in self.held.items():  # replaced at or after ``at``: within the grace
            if self.clock.now - at < min_age:
                gone = [f for f in files if not self.sink.storage.exists(f)]
                assert not gone, f"{part}: gc(min_age={min_age}) deleted {gone}, which a reader resolved " \
                                 f"{self.clock.now - at:.0f} s ago (the grace is {min_age} s)"
                if list(files) != self._resolved(part):
                    type(self).fired["gc kept a replaced version for a slow reader"] += 1
        self.held = {k: at for k, at in self.held.items() if self.clock.now - at < min_age}

    def _resolved(self, part: str) -> list[str]:
        """The files a reader resolving ``part`` now gets (locally: through the link)."""
        files = self.sink.live_files(part)
        return [os.path.realpath(f) for f in files] if is_local(self.sink) else files

    # --------------------------------------------------------------------------------- invariants
    @invariant()
    def protocol_invariants(self) -> None:
        """Checked for every interval a step may have touched (the others cannot have changed)."""
        refresh(self.sink)
        plain = plain_reader_rows(self.sink.table) if is_local(self.sink) and not is_delta(self.sink) else None
        for iv in sorted(self.dirty):
            statuses = self.sink.status(iv)
            self._states_only_move_forward(iv, statuses)
            self._readers_see_one_complete_version(iv, statuses, plain)
            self._no_commit_on_replaced_state(iv, statuses)
        self.dirty.clear()
        for part in ALL_PARTITIONS:  # slow readers resolve the live files now and read them later
            files = tuple(self._resolved(part))
            if files:
                self.held[(part, files)] = self.clock.now

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
            self.clock.uninstall()
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
                ever = any(part in self.sealed_rows[(iv.token, e)] for e in committed)
                assert_exact_version(self.sink, part, self.sealed_rows[(iv.token, newest.epoch)].get(part, []),
                                     newest if ever else None)


RACES = ("gc(min_age=0)", "reader overlapped a switch", "stalled publisher overtaken",
         "dependent refused: input changed", "gc raced a commit", "gc kept a replaced version for a slow reader")


def run_machine(new_url, max_examples: int, steps: int, table_format: str = "files", *,
                derandomize: bool = False) -> int:
    """Run the machine; returns the protocol steps taken. ``derandomize``: the same examples every run - for
    the small budgets, whose random step counts could fall below the floor a test asserts."""
    ProtocolMachine.new_url = staticmethod(new_url)
    ProtocolMachine.table_format = table_format
    ProtocolMachine.steps = 0
    ProtocolMachine.fired = Counter()
    run_state_machine_as_test(ProtocolMachine, settings=settings(
        max_examples=max_examples, stateful_step_count=steps, deadline=None, database=None, derandomize=derandomize,
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

    total = run_machine(lambda: f"s3://{make_bucket(s3_server)}/warehouse/t", max_examples=6, steps=12, derandomize=True)
    print(f"\nHypothesis protocol state machine (S3): {total} protocol steps; races: "
          f"{dict(ProtocolMachine.fired)}")
    assert total >= 40, f"only {total} protocol steps ran"


def test_protocol_state_machine_delta_local(tmp_path):
    """The same machine on a Delta table (issue 18): Delta readers, the Delta commit as the switch."""
    pytest.importorskip("deltalake")
    counter = itertools.count()
    total = run_machine(lambda: str(tmp_path / f"ex{next(counter)}" / "t"), max_examples=8, steps=15,
                        table_format="delta", derandomize=True)
    print(f"\nHypothesis protocol state machine (Delta, local): {total} protocol steps; races: "
          f"{dict(ProtocolMachine.fired)}")
    assert total >= 80, f"only {total} protocol steps ran"


@pytest.mark.s3
def test_protocol_state_machine_delta_s3(s3_server):
    pytest.importorskip("deltalake")
    from conftest import make_bucket

    total = run_machine(lambda: f"s3://{make_bucket(s3_server)}/warehouse/t", max_examples=3, steps=10,
                        table_format="delta", derandomize=True)
    print(f"\nHypothesis protocol state machine (Delta, S3): {total} protocol steps; races: "
          f"{dict(ProtocolMachine.fired)}")
    assert total >= 20, f"only {total} protocol steps ran"
