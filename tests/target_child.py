"""A child process that publishes one staged version and can die at the exact point a test names.

``python tests/target_child.py '<json>'`` with ``{"target": "db"|"redis", "config": {...}, "staged": dir,
"txn": TxnRef.to_dict(), "crash": null | "after_target_commit"}``. ``after_target_commit`` exits with
137 (``os._exit``: no cleanup) right after the database COMMIT / the Redis EXEC returned - the target has
the version, the caller never hears of it: the lost acknowledgement. Failpoints (``EO_FAILPOINTS``) work
as usual. Prints the publish result as JSON.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT / "tests")]

from exactly_once import TxnRef  # noqa: E402
from exactly_once.targets import DatabaseTarget, RedisTarget  # noqa: E402
from exactly_once.targets import sql_dialects  # noqa: E402
from target_helpers import staged_from_dir  # noqa: E402

CRASH = 137


class _Cursor:
    def __init__(self, owner: "_Conn", real) -> None:
        self._owner, self._real = owner, real

    def execute(self, sql, params=None):
        if sql.startswith("UPDATE"):  # the marker update: the next COMMIT is the publish's
            self._owner.armed = True
        return self._real.execute(sql, params)

    def __getattr__(self, name):
        return getattr(self._real, name)


class _Conn:
    """A DB-API connection that dies right after the COMMIT that carried the marker."""

    def __init__(self, real) -> None:
        self._real, self.armed = real, False

    def cursor(self, *a, **k):
        return _Cursor(self, self._real.cursor(*a, **k))

    def commit(self):
        self._real.commit()
        if self.armed:
            os._exit(CRASH)

    def __getattr__(self, name):
        return getattr(self._real, name)


def _crash_after_commit() -> None:
    for dialect in sql_dialects.DIALECTS.values():
        real = dialect.connect
        object.__setattr__(dialect, "connect", lambda ep, real=real: _Conn(real(ep)))
    import redis.client

    execute = redis.client.Pipeline.execute

    def execute_then_die(self, *a, **k):
        execute(self, *a, **k)  # the target's only Pipeline.execute is its MULTI/EXEC
        os._exit(CRASH)

    redis.client.Pipeline.execute = execute_then_die


def main() -> None:
    spec = json.loads(sys.argv[1])
    if spec.get("crash") == "after_target_commit":
        _crash_after_commit()
    cls = DatabaseTarget if spec["target"] == "db" else RedisTarget
    config = dict(spec["config"])
    for k in ("key_columns", "value_columns"):
        if k in config:
            config[k] = tuple(config[k])
    target = cls(**config)
    result = target.publish(TxnRef.from_dict(spec["txn"]), staged_from_dir(spec["staged"]))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
