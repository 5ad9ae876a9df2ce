"""The storage options a write job's process is handed: the storage connection's (s3fs options: key, secret,
endpoint_url), resolved by the write task in Airflow - the job's process has no Airflow connection.

The write task puts them, as JSON, in the environment of the ``spark-submit`` it starts
(:data:`OPTIONS_ENV`), never on its command line or in ``--conf`` (the Spark provider logs both). In
client deploy mode (and ``local``) the driver inherits that environment; in cluster deploy mode the driver
runs elsewhere and gets none - it uses the cluster's own credentials (docs/DEPLOYING.md, "S3").
"""
from __future__ import annotations

import json
import os
from typing import Any

from ..errors import ConfigError

OPTIONS_ENV = "EO_JOB_STORAGE_OPTIONS"


def job_storage_options() -> dict[str, Any]:
    """The storage options in this process's environment (:data:`OPTIONS_ENV`), ``{}`` when none. A value
    that is not a JSON object is refused (ConfigError) without showing it: it holds credentials."""
    raw = os.environ.get(OPTIONS_ENV, "").strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise ConfigError(f"{OPTIONS_ENV} must be a JSON object of storage options (its value is not shown: "
                          "it holds credentials); the write task sets it - unset it in the job's environment")
    return value


def options_env(options: dict[str, Any]) -> dict[str, str]:
    """The environment entry that hands ``options`` to a job process (empty when there are none)."""
    return {OPTIONS_ENV: json.dumps(options, sort_keys=True)} if options else {}
