"""Is an unfinished attempt still alive? A heartbeat for the write phase, and the ONE takeover rule.

``recover(stale_after=...)``, ``gc`` and the UI's dry run of ``recover`` abort an OPEN (or a waiting
PRE_COMMITTED) attempt only when :func:`is_stale` says so - they all call this one function, so they
never disagree. The rule is judged on the STORAGE's clock only, never on any process's clock (a writer
whose clock is days off must neither be taken over while it works nor escape a takeover once dead):

* an attempt's *last sign of life* is the newest storage timestamp (local mtime, S3 ``LastModified``)
  of its heartbeat object and of its own log records (``open``, ``pre_committed``, ``validated``);
  without a heartbeat that is the begin record's storage timestamp;
* *now* is the storage timestamp of a probe object written for the purpose (``_heartbeats/_clock``);
* the attempt is stale when ``now - last sign of life > stale_after``. An attempt whose heartbeat is
  fresh is never taken over, however long ago it began.

The write task keeps the heartbeat fresh (:func:`write_heartbeat` around the Spark job, a thread that
rewrites ``<home>/_heartbeats/<txn>`` every ``EO_HEARTBEAT_SECONDS``, default 30); a dead task stops
beating, and the attempt becomes stale ``stale_after`` later. A takeover is about liveness only:
safety never depends on it (an attempt taken over by mistake is fenced by its outcome record and
can never publish). ``gc`` deletes the heartbeats of finished attempts.
"""
from __future__ import annotations

import logging
import posixpath
import threading
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, ContextManager, Iterator, Sequence

from .. import settings
from ..errors import ContractError, ExactlyOnceError, StorageError
from ..storage import Storage, redact, storage_for, to_json
from ..records.txlog import EpochStatus, State, owner

if TYPE_CHECKING:
    from ..ids import TxnRef
    from .sinkview import SinkView

log = logging.getLogger(__name__)
HEARTBEATS = "_heartbeats"
CLOCK = "_clock"  # the probe whose storage timestamp is "now"
LIFE_RECORDS = ("open", "pre_committed", "validated")  # records an attempt writes while it is alive


def heartbeat_path(storage: Storage, staging_dir: str) -> str:
    """The heartbeat object of the transaction whose staging dir is ``staging_dir``
    (``<home>/_staging/<txn>`` -> ``<home>/_heartbeats/<txn>``)."""
    staging_root, name = posixpath.split(staging_dir.rstrip("/"))
    home, leaf = posixpath.split(staging_root)
    if leaf != "_staging" or not name:
        raise ContractError(f"{staging_dir} is not a transaction's staging dir (<home>/_staging/<txn>)")
    return storage.join(home, HEARTBEATS, name)


def txn_heartbeat(sink: "SinkView", txn: "TxnRef") -> str:
    """The heartbeat object of ``txn``: ``<home>/_heartbeats/<txn>``, wherever its target stages it (a
    Delta table stages inside the table, the files targets under ``<home>/_staging/``)."""
    return sink.storage.join(sink.home, HEARTBEATS, txn.name)


def storage_now(storage: Storage, home: str) -> float:
    """The storage's clock: the timestamp the storage gives a probe object written now."""
    probe = storage.join(home, HEARTBEATS, CLOCK)
    for _ in range(3):
        try:
            storage.write_atomic(probe, b"")
            return storage.modified_at(probe)
        except FileNotFoundError:  # gc removed our temp file (it looked like a dead beat's): again
            continue
    raise StorageError(f"could not write the storage clock's probe {probe}")


def last_alive(sink: "SinkView", txn: "TxnRef", st: EpochStatus) -> float | None:
    """The newest storage timestamp of ``txn``'s heartbeat and its own log records; None if none exists."""
    paths = [txn_heartbeat(sink, txn)]
    paths += [sink.log.record_path(txn.interval, txn.epoch, k) for k in LIFE_RECORDS if k in st.records]
    stamps = []
    for path in paths:
        try:
            stamps.append(sink.storage.modified_at(path))
        except FileNotFoundError:
            continue
    return max(stamps, default=None)


def is_stale(sink: "SinkView", txn: "TxnRef", st: EpochStatus, stale_after: float | None) -> bool:
    """THE takeover rule (module docstring): may ``recover``/``gc`` abort the unfinished attempt ``txn``?
    Never for ``stale_after=None``, never for a decided one; no storage access unless it is unfinished."""
    if stale_after is None or st.state not in (State.OPEN, State.PRE_COMMITTED):
        return False
    if stale_after <= 0:  # "take over whatever is unfinished now" (eo recover --stale-after 0)
        return True
    alive = last_alive(sink, txn, st)  # read before "now": a beat in between only makes it fresher
    if alive is None:  # its records vanished under us: nothing to judge by, leave it alone
        return False
    age = storage_now(sink.storage, sink.home) - alive
    if age > stale_after:
        log.info("%s: no sign of life for %.0f s on the storage clock (stale after %.0f s)",
                 txn.name, age, stale_after)
        return True
    return False


class Heartbeat:
    """Rewrites one heartbeat object (or each of ``path``'s objects: a batch's attempts) every ``every``
    seconds from a daemon thread while entered (the first beat is written before ``__enter__`` returns).
    A failed beat is logged, never raised: without beats the attempt is judged by its records, as if it
    had no heartbeat."""

    def __init__(self, storage: Storage, path: str | Sequence[str], every: float | None = None) -> None:
        self.storage, self.paths = storage, [path] if isinstance(path, str) else list(path)
        self.path = self.paths[0]
        self.every = settings.heartbeat_seconds() if every is None else every
        self.beats = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> None:
        body = to_json({"beat": self.beats + 1, "owner": owner()})
        for path in self.paths:
            try:
                self.storage.write_atomic(path, body)
            except Exception as exc:  # noqa: BLE001 - the write goes on; a takeover may come sooner
                log.warning("heartbeat %s not written: %s", path, exc)
        self.beats += 1

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.beat()

    def __enter__(self) -> "Heartbeat":
        self.beat()
        self._thread = threading.Thread(target=self._run, name=f"eo-heartbeat {self.path}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def heartbeat(sink: "SinkView", txn: "TxnRef", every: float | None = None) -> Heartbeat:
    """``with heartbeat(sink, txn): write ...`` - keep ``txn`` alive while a writer works on it."""
    return Heartbeat(sink.storage, txn_heartbeat(sink, txn), every)


def write_heartbeat(args: Sequence[str], storage_options: dict[str, Any] | None = None) -> ContextManager[Any]:
    """The write task's heartbeat, from its arguments (``--spec <url> ...``): the job spec names the
    staging dir. No heartbeat (a warning) when the arguments name no spec."""
    if len(args) < 2 or args[0] != "--spec":
        log.warning("the write task's arguments name no --spec: it runs without a heartbeat")
        return nullcontext()
    return _spec_heartbeat(str(args[1]), storage_options or {})


@contextmanager
def _spec_heartbeat(spec_url: str, storage_options: dict[str, Any]) -> Iterator[Heartbeat | None]:
    from ..contracts import JobSpec  # noqa: PLC0415 - the job contract only where a spec is read

    try:
        store, key = storage_for(spec_url, **dict(storage_options))
        spec = JobSpec.from_json(store.read_bytes(key))
        if spec.heartbeat:
            storage, path = storage_for(spec.heartbeat, **dict(storage_options))
        else:  # a spec written before the heartbeat field: the files targets' staging shape
            storage, staging = storage_for(spec.staging_dir, **dict(storage_options))
            path = heartbeat_path(storage, staging)
    except (OSError, ValueError, ExactlyOnceError) as exc:  # the job itself will say what is wrong
        log.warning("no heartbeat for the write task (job spec %s unreadable: %s)", redact(spec_url), exc)
        yield None
        return
    with Heartbeat(storage, path) as beat:
        yield beat
