"""The world the protocol state machine models (intervals, partitions, failpoints, attempts) and its
race rules: readers overlapping a commit, stalled publishers, gc racing a commit, reprocessing while
a dependent runs, and time passing on the machine's own clock (gc's grace for slow readers).
``ProtocolMachine`` in test_protocol_stateful.py mixes them in."""
from __future__ import annotations

import fcntl
import itertools
import os
import threading
import time
from dataclasses import dataclass, field

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, multiple, rule

from exactly_once import FencedError, InputChangedError, Interval, State, TxnRef, maintenance, txlog
from exactly_once.targets.delta import DeltaTarget
from delta_helpers import is_delta
from protocol_helpers import exact_reader_rows, is_local, open_sink, write_output


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


def produced(iv: Interval, sizes) -> list[tuple[str, int]]:
    """(partition, rows) an attempt writes: its day always, the late partition only when it has rows,
    so a newer version may drop a partition an older one had (published then as an empty version)."""
    return [(p, n) for i, (p, n) in enumerate(zip(partitions_of(iv), sizes)) if i == 0 or n]


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


STORAGE_CLOCK = maintenance.StorageClock  # the real one, put back by uninstall


class MachineClock:
    """The machine's clock. The log stamps its records with it (``txlog``'s ``time``), and it stands for
    the STORAGE's clock where gc judges the grace (``maintenance.StorageClock``): a record's storage
    timestamp is the machine time it was written at, gc's "now" is the machine's now. Takeovers
    (liveness) are judged on the real storage clock, not this."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def time(self) -> float:
        return self.now

    def install(self) -> None:
        machine = self

        class MachineStorageClock(STORAGE_CLOCK):  # type: ignore[misc,valid-type]
            def __init__(self, sink) -> None:  # noqa: ANN001
                self.sink, self.now = sink, machine.now

            def stamps(self, interval):  # noqa: ANN001, ANN202
                def stamp(epoch: int, kind: str) -> float | None:
                    rec = self.sink.log.read(interval, epoch, kind)
                    return float(rec["owner"]["at"]) if rec else None
                return stamp

        txlog.time = self  # type: ignore[attr-defined]
        maintenance.StorageClock = MachineStorageClock  # type: ignore[misc]

    def uninstall(self) -> None:
        txlog.time = time  # type: ignore[attr-defined]
        maintenance.StorageClock = STORAGE_CLOCK  # type: ignore[misc]


@dataclass(eq=False)
class Attempt:
    """What one attempt (an Airflow task instance chain) knows: its transaction and what it wrote."""

    txn: TxnRef
    files: dict[str, list[list[tuple[int, str]]]] = field(default_factory=dict)
    reads: TxnRef | None = None  # the predecessor's committed version whose state it read
    sealed: bool = False

    def __repr__(self) -> str:
        return f"Attempt({self.txn.name})"


class RaceRules:
    """Rules that race a second actor against an attempt; need ``_begin``, ``write``, ``pre_commit``,
    ``commit``, ``collect_garbage`` and ``_state`` of the machine."""

    attempts = Bundle("attempts")

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
        if is_delta(self.sink):  # a Delta reader: the snapshot it planned on, read after the commit
            planned = self.sink.target.snapshot()
        elif is_local(self.sink):
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
        if is_delta(self.sink):
            t = planned.to_pyarrow_table() if planned is not None else None
            for k, v, dt in zip(*(t.column(c).to_pylist() for c in ("k", "v", "dt"))) if t is not None else ():
                got.setdefault(f"dt={dt}", []).append((k, v))
        elif is_local(self.sink):
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
        other, news, waiting = open_sink(self.url, table_format=self.sink.table_format), {}, threading.Event()
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

        if is_delta(self.sink):  # the Delta commit of this attempt is the switch
            target, name = DeltaTarget, "_commit"
            at_switch = lambda a: a[3] == attempt.txn  # noqa: E731 - (self, dt, app, txn, ...)
        else:
            target = os if is_local(self.sink) else self.sink.storage
            name, at_switch = "symlink" if is_local(self.sink) else "put_conditional", _at_switch
        real_point = getattr(target, name)
        fcntl.flock = flock
        setattr(target, name, lambda *a, **k: stall(*a, **k) if at_switch(a) else real_point(*a, **k))
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

    @rule(target=attempts, iv=st.sampled_from(INTERVALS), sizes=st.lists(st.integers(0, 3), min_size=2,
                                                                        max_size=2),
          fp=st.sampled_from(["commit.before_publish", "commit.mid_publish"]))
    def gc_racing_a_commit(self, iv, sizes, fp):
        """gc's recovery pass runs while ``attempt`` is still writing; then it pre-commits, decides and
        dies before or in the middle of its publish; then gc collects: it must keep what that decided
        commit still needs (the log records of the versions it replaces, its own filled version dir)."""
        attempt = self._begin(iv, OK)
        self.write(attempt, sizes)
        real, pending = self.sink.recover, [attempt]

        def recover_then_commit(*args, **kwargs):
            done = real(*args, **kwargs)
            if pending:
                self.pre_commit(pending[0], OK)
                self.commit(pending.pop(), fp)
            return done

        self.sink.recover = recover_then_commit
        try:
            self.collect_garbage(0)
        finally:
            del self.sink.recover
        type(self).fired["gc raced a commit"] += 1
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

    @rule(seconds=st.sampled_from([1800, 3600]))
    def time_passes(self, seconds):
        """The machine's clock - the one the log stamps records with and gc judges ages by - moves on."""
        self.clock.now += seconds

    def _run_whole(self, sink, iv, sizes) -> Attempt:
        """begin + write + pre_commit + commit of a new attempt on ``sink`` (another process's view)."""
        txn = sink.begin(iv)
        attempt = Attempt(txn)
        files = {}
        for part, n in produced(iv, sizes):
            rows = [(i, f"{txn.name}-{i}") for i in itertools.islice(self.row_ids, n)]
            files[part] = [rows]
            attempt.files[part] = [rows]
        write_output(sink, txn, files, prefix="w0")
        attempt.sealed = True
        self.sealed_rows[(iv.token, txn.epoch)] = {p: sorted(r for f in fs for r in f) for p, fs in files.items()}
        sink.pre_commit(txn)
        sink.commit(txn)
        return attempt

