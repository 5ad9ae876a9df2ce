"""OpenLineage for every publish, through Airflow's OpenLineage provider (optional).

With ``apache-airflow-providers-openlineage`` installed and a transport configured (``[openlineage]
transport``; the provider is off without one), the provider emits a START and a COMPLETE (or FAIL)
event for every task instance. It asks the operator for lineage through
``get_openlineage_facets_on_complete`` / ``_on_failure``; the phase operators answer with datasets
only from the task instance that *published* a version - the commit task, or the begin or teardown
that finished a publish the commit task did not (the same rule as the table's asset event,
:mod:`~exactly_once.airflow.notes`). Every other event of the pipeline carries no datasets, so each
publish is in exactly one event, whatever retries, clears and reruns happened. (A commit killed after
publishing is re-announced by its retry, or after its last try by the group's teardown:
:mod:`~exactly_once.airflow.endings`, which names what is left.)

What a publish's event holds, read from the transaction log (the facts that went live):

* ``inputs`` - one dataset per frozen input file of the published version, with
  ``inputStatistics`` (its size; ``fileCount`` 1);
* ``outputs`` - the table (files, Delta: its location; a database or Redis target: the table or
  namespace there), with ``version`` (``datasetVersion`` = the transaction name, e.g.
  ``20260101T000000Z_20260102T000000Z.e000002``), ``dataQualityAssertions`` (the gate's verdict, one
  assertion per expectation suite) and ``outputStatistics`` (rows, files);
* the run facet ``exactlyOnce`` (:data:`RUN_FACET_SCHEMA`: docs/openlineage/ExactlyOnceRunFacet.json):
  pipeline, sink, version, epoch, the interval ``[start, end)`` and the partitions published.

Dataset names follow OpenLineage's naming: ``file`` + absolute path for local files,
``s3://bucket`` + key for S3, ``postgres://host:port`` + ``database.table``, ``mysql://host:port`` +
``database.table``. Nothing here runs without the provider: the methods are only called by it.
"""
from __future__ import annotations

import functools
import logging
import os
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger(__name__)
RUN_FACET = "exactlyOnce"
RUN_FACET_SCHEMA = "urn:exactly-once-pipelines:openlineage:ExactlyOnceRunFacet:1-0-0"
OBJECT_STORES = ("s3", "s3a", "gs", "gcs", "abfs", "abfss", "wasb", "wasbs", "oss")


def dataset_id(url: str) -> tuple[str, str]:
    """``(namespace, name)`` of a file, directory or table location under OpenLineage's naming."""
    parts = urlsplit(url)
    if not parts.scheme or len(parts.scheme) == 1 or parts.scheme == "file":  # a path (or C:\...)
        return "file", os.path.abspath(parts.path if parts.scheme == "file" else url)
    scheme = "s3" if parts.scheme == "s3a" else parts.scheme
    path = parts.path.lstrip("/") if scheme in OBJECT_STORES else parts.path
    return f"{scheme}://{parts.netloc}", path


def output_id(config: Any) -> tuple[str, str]:
    """Where ``config``'s versions go live: its table location, or its database / Redis target."""
    target = config.target
    endpoint = getattr(target, "endpoint", None)
    if target is None or endpoint is None:
        return dataset_id(config.table_url)
    ep = endpoint()  # the target's connection, resolved as its publish resolves it (no password here)
    scheme = "postgres" if ep.dialect.startswith("postgres") else ep.dialect
    table = getattr(target, "table", None)
    name = ".".join(p for p in (ep.database, table) if p) if table else str(getattr(target, "namespace", ""))
    return f"{scheme}://{ep.host}:{ep.port}", name


def publish_facts(run: Any, summary: dict[str, Any]) -> dict[str, Any]:
    """The facts of one published version (JSON data), from ``run``'s transaction log: the commit's
    ``summary`` (:meth:`~exactly_once.protocol.pipeline.IntervalRun.commit`) names the version."""
    version = str(summary["version"])
    epoch = int(version.rsplit(".e", 1)[1])
    st = run.sink.status(run.interval)[epoch]
    sources = (st.records.get("open") or {}).get("sources") or []
    suites = ((st.validation or {}).get("summary") or {}).get("suites") or {}
    namespace, name = output_id(run.config)
    return {
        "pipeline": run.config.pipeline, "sink": run.config.sink, "version": version, "epoch": epoch,
        "interval": {"start": run.interval.start.isoformat(), "end": run.interval.end.isoformat()},
        "partitions": sorted(summary.get("partitions") or {}), "rows": summary.get("rows"),
        "files": summary.get("files"), "output": {"namespace": namespace, "name": name},
        "inputs": [{"source": s.get("source"), "path": s["path"], "size": s.get("size")} for s in sources],
        "gate": None if not st.validation else {
            "suites": {n: {"success": bool(s.get("success")), "evaluated": s.get("evaluated"),
                           "failed": s.get("failed")} for n, s in sorted(suites.items())}},
    }


@functools.cache
def run_facet_class() -> type:
    """The ``exactlyOnce`` run facet (an OpenLineage client class: built on first use, with the provider)."""
    import attr
    from openlineage.client.facet_v2 import RunFacet

    @attr.define
    class ExactlyOnceRunFacet(RunFacet):  # type: ignore[misc]
        pipeline: str
        sink: str
        version: str
        epoch: int
        interval: dict[str, str]
        partitions: list[str]

        @staticmethod
        def _get_schema() -> str:
            return RUN_FACET_SCHEMA

    return ExactlyOnceRunFacet


def operator_lineage(published: list[dict[str, Any]]) -> Any:
    """The provider's ``OperatorLineage`` for the versions a task published (empty when none)."""
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import InputDataset, OutputDataset
    from openlineage.client.facet_v2 import (data_quality_assertions_dataset, dataset_version_dataset,
                                             input_statistics_input_dataset, output_statistics_output_dataset)

    if not published:
        return OperatorLineage()
    inputs: dict[tuple[str, str], Any] = {}
    outputs = []
    for facts in published:
        for src in facts["inputs"]:
            ns, name = dataset_id(src["path"])
            inputs[(ns, name)] = InputDataset(ns, name, inputFacets={
                "inputStatistics": input_statistics_input_dataset.InputStatisticsInputDatasetFacet(
                    size=src["size"], fileCount=1)})
        facets: dict[str, Any] = {"version": dataset_version_dataset.DatasetVersionDatasetFacet(facts["version"])}
        if facts["gate"] is not None:
            Assertion = data_quality_assertions_dataset.Assertion
            facets["dataQualityAssertions"] = data_quality_assertions_dataset.DataQualityAssertionsDatasetFacet(
                assertions=[Assertion(assertion="expectation_suite", success=s["success"], name=suite,
                                      severity="error", expected="0 failed",
                                      actual=f"{s['failed']} of {s['evaluated']} failed")
                            for suite, s in facts["gate"]["suites"].items()])
        outputs.append(OutputDataset(facts["output"]["namespace"], facts["output"]["name"], facets=facets,
                                     outputFacets={"outputStatistics":
                                                   output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
                                                       rowCount=facts["rows"], fileCount=facts["files"])}))
    last = published[-1]
    run_facet = run_facet_class()(pipeline=last["pipeline"], sink=last["sink"], version=last["version"],
                                  epoch=last["epoch"], interval=last["interval"], partitions=last["partitions"])
    return OperatorLineage(inputs=list(inputs.values()), outputs=outputs, run_facets={RUN_FACET: run_facet})


class PublishLineage:
    """Mixin of the phase operators: remember what this task instance published, hand it to the
    OpenLineage provider when it asks (module docstring)."""

    _eo_published: list[tuple[Any, dict[str, Any], bool]]
    # a task whose group's teardown announces what it finished should it end without success (the commit
    # task: the teardown runs after it in any state; endings.lost_by_others)
    teardown_adopts: bool = False

    def forget_published(self, ti: Any = None) -> None:
        """At the start of every attempt: a retry in the same process reports only its own publishes.
        ``ti``: this try's task instance - whether a retry follows should it fail (Airflow's own rule), for
        a provider that asks without the task instance's state."""
        self._eo_published = []
        self._eo_retry_follows = int(getattr(ti, "try_number", 0) or 0) <= int(getattr(ti, "max_tries", 0) or 0)

    def published(self, run: Any, summary: dict[str, Any], *, retried: bool = False) -> None:
        """This try announced ``summary``'s version; ``retried``: a retry of this task re-announces it (it
        finished the publish: :func:`~exactly_once.airflow.endings.finished_before`; or it announces a publish
        another task of its run lost: :func:`~exactly_once.airflow.endings.lost_by_others`) - and, for a task
        that :attr:`teardown_adopts`, its teardown does after its last try."""
        self._eo_published = [*getattr(self, "_eo_published", []), (run, summary, retried)]

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        return self._lineage(getattr(self, "_eo_published", []))

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """A try that announced a version and then failed (its note, its XCom): its FAIL event reports the
        version unless the task is up for a retry that re-announces it - the retry's event then carries it
        with the asset event Airflow dropped from this try, so each version is in one event. The last try
        (failed, no retry) reports all it announced - except, for a task whose teardown adopts what it
        finished (:attr:`teardown_adopts`: commit), those versions: the teardown's event carries them."""
        state = getattr(task_instance, "state", None)
        retry = str(getattr(state, "value", state)) == "up_for_retry" if state is not None \
            else bool(getattr(self, "_eo_retry_follows", False))
        retry = retry or self.teardown_adopts
        return self._lineage([p for p in getattr(self, "_eo_published", []) if not (retry and p[2])])

    @staticmethod
    def _lineage(published: list[tuple[Any, dict[str, Any], bool]]) -> Any:
        facts = []
        for run, summary, _ in published:
            try:
                facts.append(publish_facts(run, summary))
            except Exception:  # noqa: BLE001 - lineage never fails a publish that happened
                log.warning("no lineage for %s: its log could not be read", summary.get("version"), exc_info=True)
        return operator_lineage(facts)
