"""Who may act on a table: the table must belong to a DAG, and the user must be allowed to edit that DAG.

Used where no request is at hand - inside the ``eo_rollback`` task - so it imports no FastAPI module:

* :func:`owning_table`: the table at a URL, only if a DAG of the DAGs folder declares that URL (the
  operator then checks that the table's owner record names the same pipeline and sink); a path no DAG
  declares is refused;
* :func:`user_may_edit`: whether the user *named* ``name`` may edit DAG ``dag_id``
  (``is_authorized_dag(PUT)``), asked of the configured auth manager. The user is looked up by name:
  SimpleAuthManager's configured users (every user an admin under ``simple_auth_manager_all_admins``;
  Airflow 3.1 lists them as dicts, 3.2+ as user objects),
  or an auth manager whose security manager has ``find_user(username=)`` (FAB). A name no auth
  manager knows (``dag_test``, an OS user of ``airflow dags trigger``) may not.

Teams (``[core] multi_team``): a DAG's team is part of the question. A task can pass its *own* DAG's
team (``dag_run.team_name``: a reprocess checks that); nothing tells a task the team of *another* DAG (the
team comes from the DAG's bundle in the metadata DB, which a worker cannot read in Airflow 3). So under
multi_team a check without the team says no, and :func:`owning_table` - ``eo_rollback`` acting on another
DAG's table - refuses outright, naming the way out (``eo rollback`` / ``eo recover`` from a shell).
"""
from __future__ import annotations

import logging
from typing import Any

from ..errors import PermissionDeniedError
from ..storage import redact

log = logging.getLogger(__name__)


def _user_named(manager: Any, name: str) -> Any | None:
    from airflow.configuration import conf

    if hasattr(manager, "get_users"):  # SimpleAuthManager: users (and roles) come from the config
        from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

        if conf.getboolean("core", "simple_auth_manager_all_admins", fallback=False):
            return SimpleAuthManagerUser(username=name, role="admin")
        for user in manager.get_users():
            if isinstance(user, dict):  # Airflow 3.1 lists them as {"username": ..., "role": ...}
                if user.get("username") == name:
                    return SimpleAuthManagerUser(username=name, role=user.get("role"))
            elif user.get_name() == name:
                return user
        return None
    finder = getattr(getattr(manager, "security_manager", None), "find_user", None)
    return finder(username=name) if finder else None


def known_user(name: str | None) -> bool:
    """Whether ``name`` is a user of the configured auth manager (an Airflow login). ``airflow dags test``
    (``dag_test``) and ``airflow dags trigger`` (the OS user) name no login: such runs come from a shell
    with the metadata DB and the DAG files at hand, outside the API's permissions."""
    if not name:
        return False
    from airflow.api_fastapi.app import create_auth_manager

    return _user_named(create_auth_manager(), name) is not None


UNKNOWN_TEAM = object()  # the caller cannot tell the DAG's team


def multi_team() -> bool:
    """Whether Airflow runs in multi-team mode (``[core] multi_team``)."""
    from airflow.configuration import conf

    return conf.getboolean("core", "multi_team", fallback=False)


def user_may_edit(name: str | None, dag_id: str, team_name: Any = UNKNOWN_TEAM) -> bool:
    """Whether the user called ``name`` may edit (PUT) DAG ``dag_id`` of team ``team_name`` (None: no team);
    False for an unknown user, and under multi_team when the caller does not know the DAG's team."""
    if not name:
        return False
    from airflow.api_fastapi.app import create_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

    if team_name is UNKNOWN_TEAM:
        if multi_team():
            log.warning("multi_team: the team of DAG %r is unknown here, so %r may not edit it", dag_id, name)
            return False
        team_name = None
    manager = create_auth_manager()
    user = _user_named(manager, name)
    if user is None:
        log.warning("user %r is unknown to %s", name, type(manager).__name__)
        return False
    return bool(manager.is_authorized_dag(method="PUT", details=DagDetails(id=dag_id, team_name=team_name),
                                          user=user))


def owning_table(table_url: str, user: str | None) -> Any:
    """The declared table (:class:`~exactly_once.airflow.tables.TableRef`) at ``table_url`` if ``user``
    may edit the DAG that owns it; :class:`PermissionDeniedError` otherwise (no DAG declares it, or the
    user may not edit that DAG)."""
    from .tables import known_tables

    if multi_team():
        raise PermissionDeniedError("Airflow runs with [core] multi_team: a task cannot learn which team owns "
                                    "another DAG, so it cannot check that the user may act on that DAG's table "
                                    "and refuses. Use `eo rollback <table-url> ...` / `eo recover <table-url>` "
                                    "from a shell with access to the storage")
    want = table_url.rstrip("/")
    table = next((t for t in known_tables() if t.config is not None and t.url.rstrip("/") == want), None)
    if table is None:
        raise PermissionDeniedError(f"no DAG of the DAGs folder declares the table at {redact(table_url)}: only a "
                                    "DAG's own tables can be acted on (open the table from the Exactly-once tables "
                                    "page, or use `eo rollback` from a shell with access to the storage)")
    if not user_may_edit(user, table.pipeline):
        raise PermissionDeniedError(f"user {user!r} (who triggered this run) may not edit DAG {table.pipeline!r}, "
                                    f"which owns {table.sink}: ask someone with edit access to that DAG to trigger it")
    return table
