"""Airflow's own authentication and authorization for every route of the plugin's FastAPI app.

Airflow 3 mounts a plugin's FastAPI app under its API server *without* any auth, so the plugin applies
the same checks Airflow's REST API does (``airflow.api_fastapi.core_api.security``):

* authentication: :func:`get_user` - a JWT from ``Authorization: Bearer`` or the UI's ``_token`` cookie,
  verified by the configured auth manager; none or an invalid one -> 401 / 403;
* authorization: the auth manager's ``is_authorized_dag(GET, RUN, <dag>)`` - a table, its reports and
  its run pages belong to the pipeline's DAG; a page about no single DAG (the Data Docs index, static
  assets) needs read access to every DAG (``DagDetails(id=None)``). Denied -> 403;
* actions (``actions``): edit access to the pipeline's DAG and trigger access to the DAG that runs them.
"""
from __future__ import annotations

import re

from fastapi import HTTPException, status

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
from airflow.api_fastapi.core_api.security import GetUserDep, get_user

__all__ = ["authorize_dag", "can_act", "can_read_dag", "dag_of_report", "get_user", "GetUserDep"]

# A Data Docs run directory is named ``<pipeline>.<interval token>.e<epoch>`` (quality.validate_staged)
_RUN_DIR = re.compile(r"(?P<dag>[A-Za-z0-9][A-Za-z0-9_.-]*)\.[0-9]{8}T[0-9]{6}Z_[0-9]{8}T[0-9]{6}Z\.e[0-9]{6,}")


def can_read_dag(user: GetUserDep, dag_id: str | None) -> bool:
    """Whether ``user`` may read the runs of ``dag_id`` (None: of every DAG), as Airflow's
    ``requires_access_dag("GET", RUN)`` decides - but never from a query parameter."""
    from airflow.models.dag import DagModel

    team = DagModel.get_team_name(dag_id) if dag_id else None
    return get_auth_manager().is_authorized_dag(method="GET", access_entity=DagAccessEntity.RUN,
                                                details=DagDetails(id=dag_id, team_name=team), user=user)


def can_act(user: GetUserDep, dag_id: str, run_dag: str) -> bool:
    """Whether ``user`` may act on the tables of ``dag_id``: edit that DAG (``is_authorized_dag(PUT)``)
    and trigger ``run_dag``, the DAG whose run carries the action out (``POST`` of its runs)."""
    from airflow.models.dag import DagModel

    manager = get_auth_manager()
    team = DagModel.get_team_name(dag_id)
    edit = manager.is_authorized_dag(method="PUT", details=DagDetails(id=dag_id, team_name=team), user=user)
    return edit and manager.is_authorized_dag(method="POST", access_entity=DagAccessEntity.RUN, user=user,
                                              details=DagDetails(id=run_dag, team_name=DagModel.get_team_name(run_dag)))


def authorize_dag(user: GetUserDep, dag_id: str | None) -> None:
    """Raise 403 unless ``user`` may read the runs of ``dag_id`` (None: of every DAG)."""
    if not can_read_dag(user, dag_id):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "Forbidden")


def dag_of_report(rel_path: str) -> str | None:
    """The DAG a report file belongs to, from its path under the reports root; None if it is shared.

    ``runs/<pipeline>/...`` and any path with a ``<pipeline>.<interval>.e<epoch>`` directory (a Data
    Docs validation page or its JSON) belong to that pipeline's DAG.
    """
    parts = rel_path.split("/")
    if len(parts) >= 2 and parts[0] == "runs":
        return parts[1]
    for seg in parts:
        m = _RUN_DIR.fullmatch(seg)
        if m:
            return m.group("dag")
    return None
