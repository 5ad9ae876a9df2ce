"""The table's Airflow Asset never carries a database URL's user or password: Airflow drops them from an
asset's URI, but keeps the name (the URI as given) in its metadata DB and shows it in the UI."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from exactly_once.airflow.notes import asset_uri


@pytest.mark.parametrize("table, uri", [
    ("/data/warehouse/app_pv", "file:///data/warehouse/app_pv"),
    ("s3://bucket/warehouse/app_pv", "s3://bucket/warehouse/app_pv"),
    ("postgresql://127.0.0.1:5432/test/public.t", "postgresql://127.0.0.1:5432/test/public.t"),
    ("postgresql://eo:s3cr@t@db.example:5432/test/t", "postgresql://db.example:5432/test/t"),  # a raw '@'
    ("mysql://root@127.0.0.1/test/t", "mysql://127.0.0.1/test/t"),
    ("redis://:pw@127.0.0.1:6379/0/ns", "redis://127.0.0.1:6379/0/ns"),
    ("s3://AKIAEXAMPLE:wJalr/K7MDENG/bPxR@bucket/warehouse/t", "s3://bucket/warehouse/t"),  # a '/' in the secret
    ("s3://bucket/warehouse/t@v1", "s3://bucket/warehouse/t@v1"),  # an '@' in the path is no user
    ("postgresql://db.example:5432/test/t@v1", "postgresql://db.example:5432/test/t@v1"),  # nor with a port
    ("postgresql://eo:p%40ss%2Fw@[::1]:5432/test/t", "postgresql://[::1]:5432/test/t"),
])
def test_the_asset_uri_is_the_table_url_without_user_or_password(table, uri):
    assert asset_uri(SimpleNamespace(table_url=table)) == uri


def test_the_asset_airflow_stores_names_no_secret():
    from airflow.sdk import Asset

    asset = Asset(uri=asset_uri(SimpleNamespace(table_url="postgresql://eo:hunter2@db:5432/test/t")))
    assert "hunter2" not in asset.name and "hunter2" not in asset.uri and asset.name == asset.uri
