"""Failpoints: named places where a test (or a person reproducing a bug) can make the process fail.

``EO_FAILPOINTS`` is a comma-separated list of ``name=action`` with action

* ``crash`` - the process exits at once with :data:`CRASH_EXIT_CODE` (``os._exit``: no cleanup, no
  ``finally``, no flushing of Python buffers - the same as ``kill -9`` for everything on disk);
* ``error`` - :class:`~exactly_once.errors.FailpointError` is raised;
* ``hang`` - the process stops there (sleeps until it is killed), so that a test can kill it - or the
  whole worker or machine running it - at exactly that point; it announces itself on stderr and, with
  ``:once``, by its marker in ``EO_FAILPOINTS_STATE``;
* any of them with the suffix ``:once`` - fires only the first time across all processes (a marker is
  created exclusively in ``EO_FAILPOINTS_STATE``, default ``<tmp>/eo-failpoints``), so that the
  retry Airflow runs next succeeds. Processes on different machines (Celery workers, each with its own
  temp dir) share "once" only through a shared location: ``EO_FAILPOINTS_STATE`` may be a storage URL
  (``s3://bucket/prefix``, created with put-if-absent; credentials from the AWS environment).

Unset, a failpoint costs one dict lookup.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time

from .errors import ConfigError, FailpointError

CRASH_EXIT_CODE = 137
NAMES = (
    "begin.after",
    "write.partial",
    "pre_commit.after",
    "validate.after",
    "commit.before_publish",
    "commit.mid_publish",
    "commit.after_publish",
    "abort.mid",
)
# places only a batched backfill passes (exactly_once.protocol.batch): not in NAMES, which every single run reaches
BATCH_NAMES = ("batch.between_commits",)
# after a publish is complete and its `published` record written: the protocol's state is final there (the
# crash matrices, which check the data, gain nothing from it); what is left is the finisher announcing it
# (exactly_once.airflow.endings: the teardown announces a publish whose commit task died here on its last try)
RECORDED_NAMES = ("commit.after_record",)
ALL_NAMES = NAMES + BATCH_NAMES + RECORDED_NAMES
_ACTIONS = ("crash", "error", "hang")


def parse(spec: str) -> dict[str, tuple[str, bool]]:
    """Parse an ``EO_FAILPOINTS`` value into ``{name: (action, once)}``; unknown names are refused."""
    out: dict[str, tuple[str, bool]] = {}
    for item in filter(None, (p.strip() for p in spec.split(","))):
        name, sep, action = item.partition("=")
        action, _, flag = action.partition(":")
        if not sep or name not in ALL_NAMES or action not in _ACTIONS or flag not in ("", "once"):
            raise ConfigError(
                f"bad EO_FAILPOINTS entry {item!r}: expected name=crash|error|hang[:once], name one of {ALL_NAMES}"
            )
        out[name] = (action, flag == "once")
    return out


def _claim_once(name: str) -> bool:
    """True the first time ``name`` fires (exclusive create of a marker), False afterwards."""
    state = os.environ.get("EO_FAILPOINTS_STATE") or os.path.join(tempfile.gettempdir(), "eo-failpoints")
    if "://" in state:  # shared by every process that can reach it, on any machine
        from .storage import storage_for  # noqa: PLC0415 - only for a URL state

        store, root = storage_for(state)
        return store.create_exclusive(store.join(root, name), f"pid {os.getpid()}\n".encode())
    os.makedirs(state, exist_ok=True)
    try:
        os.close(os.open(os.path.join(state, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def failpoint(name: str) -> None:
    """Fail here if ``EO_FAILPOINTS`` names ``name``; otherwise return at once."""
    spec = os.environ.get("EO_FAILPOINTS")
    if not spec:
        return
    hit = parse(spec).get(name)
    if hit is None:
        return
    action, once = hit
    if once and not _claim_once(name):
        return
    if action == "crash":
        sys.stderr.write(f"[failpoint] {name}: crashing the process (exit {CRASH_EXIT_CODE})\n")
        sys.stderr.flush()
        os._exit(CRASH_EXIT_CODE)
    if action == "hang":
        sys.stderr.write(f"[failpoint] {name}: hanging until killed (pid {os.getpid()})\n")
        sys.stderr.flush()
        while True:
            time.sleep(3600)
    raise FailpointError(f"failpoint {name} fired")
