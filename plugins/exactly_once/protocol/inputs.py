"""An interval's input files, for :class:`~exactly_once.protocol.pipeline.IntervalRun`: frozen from the
landing zone when an attempt begins, or replayed from an earlier attempt (so a retry computes the same
answer); the files the committed version read that a reprocess would drop; the files that landed late.

:func:`~exactly_once.protocol.layout.list_inputs` lists one source's files; here are all the sources of
a pipeline together, as an attempt's ``open`` record freezes them: ``{"source": <name>, **FrozenInput}``
(a record without ``source`` is the first source's). Nothing here logs: the run reports what it finds.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from .. import advice
from ..contracts import FrozenInput
from ..errors import InputsShrankError, NoInputError
from ..ids import Interval, TxnRef
from ..records.txlog import EpochStatus, State
from ..storage import storage_for
from .layout import Source, late_files, list_inputs


def replayable(statuses: Mapping[int, EpochStatus]) -> EpochStatus | None:
    """The attempt whose inputs a retry replays: the newest committed one, or the newest live one (not
    aborted) that got past its write (pre-committed); None if there is none."""
    for _, st in sorted(statuses.items(), reverse=True):
        if st.state is State.COMMITTED or (st.state is not State.ABORTED and "pre_committed" in st.records):
            return st
    return None


def replayed(st: EpochStatus, sources: Sequence[Source]) -> dict[str, list[FrozenInput]]:
    """The inputs per source that the attempt of ``st`` froze."""
    first = sources[0].name
    out: dict[str, list[FrozenInput]] = {s.name: [] for s in sources}
    for item in (st.records.get("open") or {}).get("sources") or []:
        out.setdefault(item.get("source", first), []).append(FrozenInput.from_dict(item))
    return out


def frozen_now(pipeline: str, data_root: str, options: Mapping[str, Any], sources: Sequence[Source],
               interval: Interval, *, shrinking: bool) -> dict[str, list[FrozenInput]]:
    """The inputs per source in the landing zone now. NoInputError for a source that matched no file
    and does not allow empty intervals - unless ``shrinking`` (a reprocess of a committed interval that
    finds none of its files left is a shrink: refused by :func:`dropped_inputs`, not a missing input)."""
    fresh = {}
    for source in sources:
        store, root = storage_for(source.landing(data_root), **options)
        fresh[source.name] = list_inputs(store, root, source, interval)
        if not fresh[source.name] and not source.allow_empty and not shrinking:
            raise NoInputError(
                f"{pipeline}: no input for interval {interval} in source {source.name}: "
                f"nothing under {store.url(root)} matches {source.patterns(interval)} with a "
                f"{source.format} ending {source.endings[:3]}...; if empty intervals are normal, declare "
                f"Source({source.name!r}, ..., allow_empty=True)")
    return fresh


def dropped_inputs(pipeline: str, interval: Interval, committed: tuple[TxnRef, EpochStatus],
                   inputs: Mapping[str, list[FrozenInput]], sources: Sequence[Source], allow: bool,
                   table: str = "<table-url>") -> list[str]:
    """Files (``source:rel``) the ``committed`` version read that are not among ``inputs``; raises
    InputsShrankError if there are any and ``allow`` is false."""
    first = sources[0].name
    now = {(name, fi.rel) for name, fis in inputs.items() for fi in fis}
    before = (committed[1].records.get("open") or {}).get("sources") or []
    gone = sorted(f"{item.get('source', first)}:{item.get('rel', item['path'])}" for item in before
                  if (item.get("source", first), item.get("rel", item["path"])) not in now)
    if gone and not allow:
        raise InputsShrankError(
            f"{pipeline}: interval {interval}: {len(gone)} input file(s) that the committed "
            f"version {committed[0].name} read are no longer in the landing zone ({', '.join(gone[:5])}"
            f"{', ...' if len(gone) > 5 else ''}); publishing would drop their data. Put them back and "
            "reprocess, or - if removing them is intended - reprocess with allow_shrinking: "
            + advice.reprocess(pipeline, table, interval.start.isoformat(), allow_shrinking=True))
    return gone


def late_inputs(st: EpochStatus, data_root: str, options: Mapping[str, Any], sources: Sequence[Source],
                interval: Interval) -> dict[str, list[str]]:
    """Files that landed for ``interval`` after the attempt of ``st`` froze its sources, and frozen ones
    that changed or are missing now (all sources together)."""
    out: dict[str, list[str]] = {"new": [], "changed": [], "missing": []}
    first = sources[0].name
    frozen = [(i.get("source", first), FrozenInput.from_dict(i))
              for i in (st.records.get("open") or {}).get("sources") or []]
    for source in sources:
        store, root = storage_for(source.landing(data_root), **options)
        diff = late_files([fi for name, fi in frozen if name == source.name],
                          list_inputs(store, root, source, interval))
        for k, v in diff.items():
            out[k] += v
    return out
