"""A phase task's heap: what the task process held before the task is frozen while the task runs.

A task process inherits Airflow, Great Expectations, pandas, pyarrow and PySpark from the process it was
forked from (a preloaded forkserver, a Celery pool): ~470,000 objects. Python's garbage collector walks all of
them in every full collection, and the task's own work triggers some: in the validate task one full collection
cost 0.2-0.3 s of CPU, a quarter of the task, and a Spark Connect write's end (which collects the session at
once) 0.27 s. Airflow's LocalExecutor avoids this for the workers it forks itself (``gc.freeze`` before the
fork); a worker forked from a forkserver or a Celery pool does not get it.

:func:`young_heap` moves what the process holds to the permanent generation for the block (``gc.freeze``: no
walk, no copy), so a collection walks only what the block made - still collected as before - and unfreezes it
after, also when the block fails: a process that runs many tasks (``airflow dags test``, a test) keeps
collecting what each left behind. A process that froze its heap itself (a fork of a frozen parent) is left as
it is.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def young_heap() -> Iterator[None]:
    """Freeze the process's heap for the block, then unfreeze it (module docstring); nested blocks and a
    heap frozen before the block are left as they are."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
