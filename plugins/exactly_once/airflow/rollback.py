"""Rollback and recovery from Airflow, two ways:

* **in the pipeline's own DAG** (what the table page triggers; needs nothing but the installed package): a
  run of the DAG for the interval's data interval with conf ``{"eo_action": "rollback", "to_version": "e2",
  "sinks": ["<sink>"]}`` - or ``"eo_action": "recover"`` (the whole table; any data interval of it) - is
  carried out by that sink's ``begin`` task (:func:`carry_out`); the rest of the group is skipped, and the
  DAG's other groups skip as ``sinks`` says. The triggering user is checked as for a reprocess (the DAG's
  own team under ``multi_team``): :func:`~exactly_once.airflow.operators.may_reprocess`.
* **the** ``eo_rollback`` **DAG** of a checkout (dags/eo_rollback.py): a thin operator over
  :func:`exactly_once.ops.rollback.rollback` and ``recover`` for a table given by its URL. The rest of
  this docstring is about it.

Only a table a DAG of the DAGs folder declares can be acted on, and only by a user who may edit that
DAG: the run's *triggering user* (set by Airflow, not by the run's conf) is checked against the auth
manager (:mod:`exactly_once.airflow.owners`). A refusal fails the task at once, without retries.
The new epoch's begin records who asked and through which run (``meta.run``), which the table page and
``eo history`` show.

One DAG run rolls back once: the run (``<dag_id>/<run_id>``) is the rollback's ``request``, so a retry
after a kill, or a clear of a finished run, returns the epoch that run committed ("already", nothing
rolled back again) - see :func:`exactly_once.ops.rollback.rollback`. Under Airflow's ``[core] multi_team``
the task refuses (:func:`~exactly_once.airflow.owners.owning_table`): it cannot learn the owning DAG's team.
"""
from __future__ import annotations

import logging
from typing import Any, Sequence

from airflow.sdk import BaseOperator
from .compat import AirflowFailException

from .. import settings
from ..errors import ExactlyOnceError, PermissionDeniedError
from ..ops.rollback import describe, find_interval, parse_version, rollback
from ..protocol.transaction import TwoPhaseCommitSink
from ..text import one_line
from .connections import storage_options
from .lineage import PublishLineage
from .owners import owning_table

log = logging.getLogger(__name__)
ACTIONS = ("rollback", "recover")
ROLLBACK_ALIAS = "exactly_once:rollback"  # RollbackOperator's outlet: the tables' asset events go through it


def action_of(conf: dict[str, Any]) -> str | None:
    """The maintenance action a run of a pipeline's DAG was asked for (``conf.eo_action`` rollback or
    recover), None for an ordinary run. A conf asking a reprocess too is refused: one run does one thing."""
    action = conf.get("eo_action")
    if action not in ACTIONS:
        return None
    if conf.get("reprocess"):
        raise AirflowFailException(f"conf asks both a reprocess and eo_action {action!r}: trigger one run for each")
    return action


def carry_out(operator: Any, run: Any, context: Any, action: str, conf: dict[str, Any]) -> dict[str, Any]:
    """Carry out ``action`` (rollback: the run's interval back to ``conf.to_version``; recover: every
    transaction of the table) in the ``begin`` task of the sink's group, then skip the rest of the group
    (nothing to write, gate or commit: a rollback republishes a version that passed its gate). A rollback
    that published announces the table's asset event and leaves the run's note, like a commit.
    Refusals (a wrong or gc'ed version, a lineage that no longer holds) fail the task at once."""
    from .compat import DownstreamTasksSkipped
    from .endings import ended
    from .notes import NOTE_KEY

    user = getattr(context.get("dag_run"), "triggering_user_name", None)
    ti = context["ti"]
    try:
        if action == "recover":
            operator._eo_recovering = True  # a retry re-announces what a failed try finished, in any interval
            result: dict[str, Any] = {"recover": run.sink.recover(), "by": user}
            note = f"recover by {user or 'a run'}: " + ("; ".join(result["recover"]) or "nothing to do")
            operator._eo_action_note = note  # the note of what it published leads with it (endings.note)
        else:
            version = parse_version(str(conf.get("to_version") or ""), run.interval)
            meta = {"run": provenance(context, "rollback", to=f"e{version}")}
            result = describe(rollback(run.sink, run.interval, version, meta=meta, request=request_of(context)),
                              run.sink)
            note = f"rollback to e{version} as {result['version'].rsplit('.', 1)[-1]}"
            if result.get("already"):
                note += " (done by this run before: nothing done again)"
            for summary in run.ended():  # the publish it finished: its asset event, lineage and the run's note
                ended(operator, context, run, summary, finished=True, how=f" (rollback to e{version})")
                note = ""
    except ExactlyOnceError as exc:
        raise AirflowFailException(f"{type(exc).__name__}: {exc}") from exc
    log.info("%s of %s: %s", action, run.sink.sink, result)
    if note:
        ti.xcom_push(key=NOTE_KEY, value=note[:200])
    ti.xcom_push(key="return_value", value=result)  # raising below skips Airflow's own push
    rest = sorted(operator.get_flat_relative_ids(upstream=False))
    raise DownstreamTasksSkipped(tasks=rest)


def provenance(context: Any, action: str, **what: Any) -> dict[str, Any]:
    """``meta.run`` of an epoch an action begins: the Airflow run, who triggered it, what was asked."""
    dag_run, ti = context.get("dag_run"), context.get("ti")
    why = one_line((getattr(dag_run, "conf", None) or {}).get("eo_reason"))  # typed at the confirm step, or any conf
    return {"run_id": getattr(dag_run, "run_id", None), "dag_id": getattr(dag_run, "dag_id", None),
            "task_id": getattr(ti, "task_id", None), "by": getattr(dag_run, "triggering_user_name", None),
            "action": action, **({"reason": why} if why else {}), **what}


def request_of(context: Any) -> str | None:
    """The rollback's idempotency key: this DAG run (``<dag_id>/<run_id>``), None outside a run."""
    dag_run = context.get("dag_run")
    run_id = getattr(dag_run, "run_id", None)
    return f"{getattr(dag_run, 'dag_id', None)}/{run_id}" if run_id else None


class RollbackOperator(PublishLineage, BaseOperator):
    """``action="rollback"``: make version ``to_version`` of the interval starting at ``interval_start``
    of the table at ``table_url`` live again, through the protocol. ``action="recover"``: bring every
    transaction of the table to a final state now (``eo recover``). Templated, so a DAG passes its params in.
    Every publish it finishes ends through the one seam (:mod:`exactly_once.airflow.endings`): the table's
    asset event through its AssetAlias outlet (``exactly_once:rollback``), its lineage, the run's note."""

    template_fields: Sequence[str] = ("table_url", "interval_start", "to_version", "action")
    ui_color = "#f3e5f5"

    def __init__(self, *, table_url: str, interval_start: str = "", to_version: str = "", action: str = "rollback",
                 storage_conn_id: str | None = None, **kwargs: Any) -> None:
        from airflow.sdk import AssetAlias

        given = kwargs.pop("outlets", None) or []  # the user's own, and the alias of whichever table it acts on
        given = list(given) if isinstance(given, (list, tuple)) else [given]
        kwargs["outlets"] = [*given, *([] if any(isinstance(o, AssetAlias) and o.name == ROLLBACK_ALIAS
                                                 for o in given) else [AssetAlias(ROLLBACK_ALIAS)])]
        super().__init__(**kwargs)
        self.table_url, self.interval_start, self.to_version = table_url, interval_start, to_version
        self.action, self.storage_conn_id = action, storage_conn_id
        self.asset_uri: str | None = None  # the table's Asset, once the table is known

    def execute(self, context: Any) -> dict[str, Any]:
        from . import endings

        action = (self.action or "rollback").strip()
        if action not in ACTIONS:
            raise AirflowFailException(f"unknown action {action!r}: use one of {', '.join(ACTIONS)}")
        user = getattr(context.get("dag_run"), "triggering_user_name", None)
        endings.start_try(self, context)
        run = None
        try:
            options = storage_options(self.storage_conn_id)
            table = owning_table(self.table_url, user)
            sink = TwoPhaseCommitSink.open(self.table_url, storage_options=options,
                                           require_validation=True, target_url=settings.target_url())
            if (sink.pipeline, sink.sink) != table.key:
                raise PermissionDeniedError(f"the table at {table.describe()} is owned by {sink.pipeline}/{sink.sink}, "
                                            f"not by {table.pipeline}/{table.sink} that declares it: fix the DAG")
            if action == "recover":
                every = sink.log.intervals()
                run = self._announcer(context, table, sink, options, max(every) if every else None)
                self._eo_recovering = True  # a retry re-announces what a failed try finished, in any interval
                self._eo_action_note = f"recover by {user or 'a run'}"
            else:
                interval = find_interval(sink, self.interval_start)
                version = parse_version(self.to_version, interval)
                run = self._announcer(context, table, sink, options, interval)
                self._eo_action_note = f"rollback of {interval.start.isoformat()} to e{version} by {user or 'a run'}"
            try:
                if action == "recover":
                    result: dict[str, Any] = {"recover": sink.recover(), "by": user}
                else:
                    meta = {"run": provenance(context, "rollback", to=f"e{version}")}
                    result = describe(rollback(sink, interval, version, meta=meta, request=request_of(context)), sink)
            finally:  # every publish this try finished goes through the one seam (announced once)
                endings.finish_try(self, context, run)
            if action == "rollback" and result.get("already"):
                result["note"] = (f"this run rolled {interval.token} back already as {result['version']}: "
                                  "nothing was done again (a retry or a clear never rolls back twice; "
                                  "trigger a new rollback to do it again)")
                log.warning("%s", result["note"])
        except ExactlyOnceError as exc:  # no retry can fix a refusal, a wrong version, a gc'ed one, an unknown table
            raise AirflowFailException(f"{type(exc).__name__}: {exc}") from exc
        log.info("%s: %s", action, result)
        return result

    def _announcer(self, context: Any, table: Any, sink: TwoPhaseCommitSink, options: dict[str, Any],
                   interval: Any) -> Any:
        """The pipeline run at ``interval`` that announces what this task finishes on ``sink`` (signed with
        this task; a publish of another interval is announced as that interval's: ``IntervalRun.at``); None
        without an interval (a table with an empty log: nothing to finish) or the table's config."""
        from ..protocol.pipeline import IntervalRun
        from . import endings
        from .notes import asset_uri

        if table.config is None or interval is None:
            return None
        self.asset_uri = asset_uri(table.config)
        run = IntervalRun(table.config, interval, storage_options=options)
        run.sink, run.storage = sink, sink.storage
        endings.sign(context, sink)
        return run
