"""One database operation of the :mod:`database target <exactly_once.targets.database>`, on a fresh
connection per attempt: a deadlock or a broken connection starts it over (safe: the marker decides)
until the retries are spent; every other failure of the driver becomes the package's error for it -
TargetSchemaError (the database refused the rows), ConfigError (a missing privilege) or
TargetUnavailableError (the database could not be reached, or broke off every attempt).
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, TypeVar

from ..errors import ConfigError, TargetSchemaError, TargetUnavailableError
from .endpoint import Endpoint, redact
from .sql_dialects import DIALECTS, advice

T = TypeVar("T")


def with_retries(ep: Endpoint, retries: int, describe: Callable[[], str], what: str,
                 body: Callable[[Any], T], logger: logging.Logger) -> T:
    """``body(conn)`` on a new connection to ``ep``, started over up to ``retries`` times after a
    transient or unavailable error (each start-over a warning on the target's ``logger``);
    ``describe()`` names the target in logs and errors."""
    d = DIALECTS[ep.dialect]
    for attempt in range(retries + 1):
        conn = None
        try:
            conn = d.connect(ep)
            return body(conn)
        except Exception as exc:
            rollback_quietly(conn)
            kind = d.classify(exc)
            if kind in ("transient", "unavailable") and attempt < retries:
                logger.warning("%s on %s: %s (%s); starting over (%d/%d)", what, describe(), kind,
                               redact(exc, *ep.secrets()).splitlines()[0], attempt + 1, retries)
                time.sleep(min(0.2 * 2 ** attempt, 2.0))
                continue
            if kind is None:
                if isinstance(exc, TargetSchemaError):
                    raise TargetSchemaError(f"{what} into {describe()}: {exc}; the transaction rolled "
                                            "back, nothing was published; fix the table or the job's output"
                                            ) from None
                raise
            raise error(f"{what} into {describe()}", exc, kind, ep, retries) from None
        finally:
            close_quietly(conn)
    raise AssertionError("unreachable")  # pragma: no cover


def error(where: str, exc: BaseException, kind: str, ep: Endpoint, retries: int) -> Exception:
    """The package's error for a failure of ``kind`` (:meth:`~.sql_dialects.Dialect.classify`) at ``where``."""
    msg = redact(exc, *ep.secrets()).strip()[:800]
    if kind == "schema":
        return TargetSchemaError(f"{where}: the database refused the rows: {msg}. The transaction rolled back, "
                                 "nothing was published; fix the table or the job's output")
    if kind == "config":
        return ConfigError(f"{where}: {msg}. The connection names no database and a table name does not either: "
                           "give the connection one (the Airflow connection's schema, the URL's /database) or "
                           "qualify table and commit_table (database.table), then publish again")
    if kind == "permission":
        return ConfigError(f"{where}: the database user lacks a privilege: {msg}. Grant it (MySQL: also "
                           "local_infile=ON on the server for LOAD DATA LOCAL) and commit again")
    hint = advice(exc)
    return TargetUnavailableError(f"{where}: the database is unavailable ({kind}, {retries + 1} attempt(s)): "
                                  f"{msg}. Anything in flight rolled back or committed with its marker; "
                                  "publishing again is safe" + (f"; {hint}" if hint else ""))


def rollback_quietly(conn: Any) -> None:
    """Roll ``conn`` back if there is one; a connection that is gone rolls back on the server."""
    if conn is not None:
        try:
            conn.rollback()
        except Exception:  # the connection is gone: the server rolls back on its own
            pass


def close_quietly(conn: Any) -> None:
    """Close ``conn`` if there is one, ignoring any error."""
    if conn is not None:
        try:
            conn.close()
        except Exception:
            pass
