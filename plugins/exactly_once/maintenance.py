"""Garbage collection: delete only what the transaction log says is finished (DESIGN §4 "Garbage").

``gc`` never touches a transaction that could still commit: it first runs ``recover`` (which finishes
decided commits and aborts attempts older than ``stale_after``), then removes

* staging dirs of ABORTED or COMMITTED-and-published transactions (and orphans with no log record);
* checkpoints that are not their interval's current committed version;
* superseded versions / stray files no live version references, older than ``min_age`` (so a reader
  that resolved the old version a moment ago can still finish);
* log records of finished, superseded epochs - except each epoch's ``outcome`` and ``published``
  records, which stay as tombstones (a zombie of that epoch stays fenced, recovery sees it finished) -
  again only when older than ``min_age``.
"""
from __future__ import annotations

import time

from .ids import Interval, parse_txn_name
from .transaction import TwoPhaseCommitSink
from .txlog import State

COMPACTABLE = ("open", "pre_committed", "validated")  # outcome + published stay: tiny tombstones


def gc(sink: TwoPhaseCommitSink, *, min_age: float = 3600.0, stale_after: float = 6 * 3600.0) -> dict[str, list[str]]:
    """Collect garbage of one sink; returns what was removed, by kind."""
    report: dict[str, list[str]] = {"recovered": sink.recover(stale_after=stale_after), "staging": [],
                                    "checkpoints": [], "versions": [], "log_records": []}
    storage, now = sink.storage, time.time()
    for iv in sink.log.intervals():
        statuses = sink.status(iv)
        newest = max(statuses, default=0)
        current = sink.committed(iv)
        for epoch, st in statuses.items():
            txn = sink.ref(iv, epoch)
            finished = st.state is State.ABORTED or (st.state is State.COMMITTED and st.published)
            if not finished:
                continue
            for kind, path in (("staging", sink.staging_dir(txn)), ("checkpoints", sink.checkpoint_dir(txn))):
                if kind == "checkpoints" and current and current[0] == txn:
                    continue
                if storage.exists(path):
                    storage.remove_tree(path)
                    report[kind].append(path)
            if epoch != newest and not (current and current[0] == txn) and now - st.started_at >= min_age:
                for kind in COMPACTABLE:
                    if kind in st.records:
                        sink.log.remove(iv, epoch, kind)
                        report["log_records"].append(f"{txn.name}.{kind}")
    staging_root = storage.join(sink.table, "_staging")
    for name in storage.list_names(staging_root):
        parsed = parse_txn_name(name)
        if parsed and not sink.status(Interval.from_token(parsed[0])).get(parsed[1]):
            path = storage.join(staging_root, name)
            storage.remove_tree(path)
            report["staging"].append(path)
    report["versions"] = storage.sweep(sink.table, min_age)
    return report
