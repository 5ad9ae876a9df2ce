"""OpenLineage naming of what a publish reads and writes, the provider's lineage object, and the
pipeline without the provider (exactly_once.airflow.lineage). The events of real publishes, once each,
under ``airflow dags test``: tests/e2e/test_pv_dag.py (the crash test)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import need
from exactly_once.airflow.lineage import dataset_id, output_id

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("url,expected", [
    ("/data/landing/a/part-0.jsonl", ("file", "/data/landing/a/part-0.jsonl")),
    ("file:///data/warehouse/t", ("file", "/data/warehouse/t")),
    ("s3://bucket/warehouse/t", ("s3://bucket", "warehouse/t")),
    ("s3a://bucket/landing/x.csv", ("s3://bucket", "landing/x.csv")),
    ("gs://b/k", ("gs://b", "k")),
    ("hdfs://nn:8020/data/t", ("hdfs://nn:8020", "/data/t")),
])
def test_dataset_names_follow_openlineage_naming(url, expected):
    assert dataset_id(url) == expected


def test_a_relative_path_is_named_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert dataset_id("data/warehouse/t") == ("file", str(tmp_path / "data" / "warehouse" / "t"))


def test_the_output_is_the_target_table_without_credentials():
    from exactly_once.targets import DatabaseTarget, RedisTarget

    pg = DatabaseTarget(table="app_pv", url="postgresql://etl:s3cret@db.internal:5433/analytics")
    my = DatabaseTarget(table="app_pv", url="mysql://root:pw@127.0.0.1:3306/test")
    kv = RedisTarget(namespace="app_pv", key_columns=("app_id",), url="redis://:pw@cache:6379/0")
    assert output_id(SimpleNamespace(target=pg, table_url="/x")) == ("postgres://db.internal:5433", "analytics.app_pv")
    assert output_id(SimpleNamespace(target=my, table_url="/x")) == ("mysql://127.0.0.1:3306", "test.app_pv")
    assert output_id(SimpleNamespace(target=kv, table_url="/x")) == ("redis://cache:6379", "app_pv")
    assert output_id(SimpleNamespace(target=None, table_url="s3://b/warehouse/t")) == ("s3://b", "warehouse/t")


def test_the_lineage_of_a_publish_and_of_no_publish():
    need(importlib.util.find_spec("airflow.providers.openlineage") is not None,
         "apache-airflow-providers-openlineage is not installed (requirements.lock has it)")
    from openlineage.client.serde import Serde

    from exactly_once.airflow.lineage import RUN_FACET, operator_lineage

    assert operator_lineage([]).inputs == [] and operator_lineage([]).outputs == []
    facts = {"pipeline": "p", "sink": "t", "version": "20260101T000000Z_20260102T000000Z.e000002", "epoch": 2,
             "interval": {"start": "2026-01-01T00:00:00+00:00", "end": "2026-01-02T00:00:00+00:00"},
             "partitions": ["dt=2026-01-01"], "rows": 7, "files": 1,
             "output": {"namespace": "s3://b", "name": "warehouse/t"},
             "inputs": [{"source": "s", "path": "s3://b/landing/1.csv", "size": 10},
                        {"source": "s", "path": "s3://b/landing/2.csv", "size": 20}],
             "gate": {"suites": {"t.completeness": {"success": True, "evaluated": 18, "failed": 0}}}}
    lineage = operator_lineage([facts])
    assert [(d.namespace, d.name) for d in lineage.inputs] == [("s3://b", "landing/1.csv"), ("s3://b", "landing/2.csv")]
    (out,) = lineage.outputs
    assert (out.namespace, out.name, out.facets["version"].datasetVersion) == ("s3://b", "warehouse/t", facts["version"])
    assert out.outputFacets["outputStatistics"].rowCount == 7
    (assertion,) = out.facets["dataQualityAssertions"].assertions
    assert (assertion.name, assertion.success) == ("t.completeness", True)
    run_facet = json.loads(Serde.to_json(lineage.run_facets[RUN_FACET]))
    import jsonschema

    jsonschema.validate(run_facet, json.loads((ROOT / "docs" / "openlineage" / "ExactlyOnceRunFacet.json").read_text()))
    assert (run_facet["version"], run_facet["epoch"], run_facet["interval"]) == (facts["version"], 2, facts["interval"])


def test_the_pipeline_needs_no_openlineage():
    """Nothing of the library imports OpenLineage at import time: only the provider calls the methods
    that do (a deployment without the provider runs as before - `make compat`'s Airflow corners install
    the package without the [openlineage] extra and run an interval)."""
    import ast

    for path in (ROOT / "plugins" / "exactly_once").rglob("*.py"):
        tree = ast.parse(path.read_text())
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        names = [a.name for n in top if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in top if isinstance(n, ast.ImportFrom)]
        assert not [n for n in names if "openlineage" in n], path
    from exactly_once.airflow.operators import CommitOperator

    assert callable(CommitOperator.get_openlineage_facets_on_complete)  # what the provider looks for
