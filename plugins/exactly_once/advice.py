"""What to run next, in the words of where the process runs.

Every error and warning of the library that tells the user to run something names a command that exists
in a deployment holding only the installed package: ``eo ...``, the table page (Browse -> Exactly-once
tables), Airflow's own CLI and REST API. The repository's ``make`` targets exist only in a checkout of the
project: they are added as a second line, and only when this library is imported from one
(:func:`in_checkout`). ``tests/unit/test_advice.py`` fails if any other library module names a ``make``
target.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=1)
def in_checkout() -> bool:
    """Whether this library is imported from a checkout of the project (``plugins/exactly_once`` beside
    the project's ``Makefile`` and ``tools/dev.py``), where the ``make`` targets exist. An installed wheel
    (site-packages, a ``--py-files`` zip on a Spark driver) is not."""
    here = Path(__file__).resolve().parent
    root = here.parents[1] if len(here.parents) > 1 else here
    return here.parent.name == "plugins" and (root / "Makefile").is_file() and (root / "tools" / "dev.py").is_file()


def _checkout(line: str) -> str:
    return f"; in a checkout: {line}" if in_checkout() else ""


def reprocess(pipeline: str, table: str, start: str, *, allow_shrinking: bool = False) -> str:
    """How to reprocess the interval starting at ``start`` (ISO-8601) of ``pipeline``'s table ``table``
    (its URL, as ``eo`` takes it)."""
    shrink = " --allow-shrinking" if allow_shrinking else ""
    return (f"`eo reprocess {table} --interval {start}{shrink}` or the table page's Reprocess action"
            + _checkout(f"make run-interval DAG={pipeline} START={start} REPROCESS=1"
                        + (" ALLOW_SHRINKING=1" if allow_shrinking else "")))


def run_interval(pipeline: str, start: str) -> str:
    """How to run (backfill) the one interval of ``pipeline`` that starts at ``start`` (ISO-8601) - also when
    its run exists and failed (or ended without committing it): Airflow's default ``--reprocess-behavior
    none`` creates no run for a logical date that has one, so the advice re-runs a finished run too
    (``completed``, Airflow 3.1+; the UI's "All Runs"): one date, whose interval is not committed."""
    return (f"`airflow backfill create --dag-id {pipeline} --from-date {start} --to-date {start} "
            "--reprocess-behavior completed` (Airflow's CLI; or the DAG's Trigger -> Backfill in the UI, Reprocess "
            "Behavior \"All Runs\")" + _checkout(f"make run-interval DAG={pipeline} START={start}"))
