"""Who asked for a run of a pipeline's DAG, and what: the ``meta.run`` provenance of the epochs it begins,
which the table page and ``eo history`` show ("reprocess by alice because ..."). Recorded wherever an
interval's epoch begins - the ``begin`` task, and a batch's host (``one_task``, a batched backfill)."""
from __future__ import annotations

from typing import Any

from ..text import one_line

ASKED_LABELS = ("reprocess", "rerun-stale")  # what a run of a pipeline's DAG can have been asked (table page)


def asked(context: Any, conf: dict[str, Any]) -> dict[str, Any]:
    """Provenance of a run that was asked for: who triggered it (Airflow's record, not the conf) and what
    (a label of :data:`ASKED_LABELS` only: a conf naming anything else, e.g. "rollback", is a reprocess)."""
    by = getattr(context.get("dag_run"), "triggering_user_name", None)
    action = None
    if conf.get("reprocess"):
        action = conf.get("eo_action") if conf.get("eo_action") in ASKED_LABELS else "reprocess"
    if action and conf.get("allow_shrinking"):
        action += " (allow shrinking)"
    why = one_line(conf.get("eo_reason")) if action else ""  # typed at the confirm step, or any conf: one line
    return {k: v for k, v in (("by", by), ("action", action), ("reason", why)) if v}
