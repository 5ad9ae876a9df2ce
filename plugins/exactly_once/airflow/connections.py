"""Credentials from Airflow connections, resolved in the Airflow layer (once per task), never stored in a
:class:`~exactly_once.protocol.config.PipelineConfig` and never logged."""
from __future__ import annotations

from typing import Any


def storage_options(conn_id: str | None) -> dict[str, Any]:
    """s3fs options from an Airflow (aws) connection: key, secret, endpoint_url. Empty if no conn id."""
    if not conn_id:
        return {}
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(conn_id)
    extra = conn.extra_dejson
    opts: dict[str, Any] = {}
    if conn.login:
        opts["key"] = conn.login
    if conn.password:
        opts["secret"] = conn.password
    endpoint = extra.get("endpoint_url") or (extra.get("service_config", {}).get("s3", {}) or {}).get("endpoint_url")
    if endpoint:
        opts["endpoint_url"] = endpoint
    return opts
