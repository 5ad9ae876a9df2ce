"""Great Expectations 1.x plumbing for the quality gate: context, runs, Data Docs, the run index.

Layout under ``report_root`` (a local directory; Data Docs are static HTML)::

    index.html                       ours: a static table of the newest validation runs, the suites (no JS)
    validations/<suite>/<run_name>/<run_time>/<batch>.html   one page per suite per validation run
    expectations/<suite>.html        the suites
    static/                          GX's CSS, fonts, images
    _gx/expectations/ _gx/validations/   GX's stores (JSON); _gx/runs.jsonl our ledger; _gx/.lock

The context is ephemeral (no ``great_expectations.yml``) but its expectation and validation-result
stores and its Data Docs site are on disk, so every run is kept and the index lists the runs across
intervals. Validations sharing one ``report_root`` are serialized by a ``flock`` on ``_gx/.lock``.

A run renders only its own pages: GX's own index builder re-reads every stored validation result on each
build (its cost grew by ~4 ms per earlier run: +1 s per validate after a year of daily runs), so the
index is ours, written from the ledger, and shows the newest :data:`INDEX_ROWS` entries.
"""
from __future__ import annotations

import fcntl
import html
import json
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterator
from urllib.parse import unquote

from .errors import ConfigError

SITE = "eo_data_docs"
_BEACON = re.compile(r"https://great-expectations-web-assets\.s3[^\"')]*?/(logo-long\.png|full_logo_dark\.png)"
                     r"[^\"')]*")
INDEX_ROWS = 2000  # newest ledger entries on index.html; every run's page stays under validations/
_ICONS = {'<i class="fas fa-check-circle text-success" ></i>': "passed",
          '<i class="fas fa-times text-danger" ></i>': "FAILED"}


def quiet_gx() -> None:
    """No analytics, no progress bars: set before GX is imported (and harmless after)."""
    os.environ["GX_ANALYTICS_ENABLED"] = "false"
    os.environ.setdefault("TQDM_DISABLE", "1")


@dataclass
class SuiteRun:
    """One suite validated against one frame in one validation run."""

    suite: Any            # great_expectations.ExpectationSuite
    frame: Any            # pandas or Spark DataFrame
    engine: str           # "pandas" | "spark"
    key_columns: list[str]


def local_root(report_root: str) -> str:
    """``report_root`` as an absolute local path; Data Docs here are written to a local directory."""
    if report_root.startswith("file://"):
        report_root = report_root[len("file://"):]
    if "://" in report_root:
        raise ConfigError(f"report_root must be a local directory (got {report_root.split('://')[0]}://...); "
                          "Data Docs are written locally and served by the Airflow plugin")
    return os.path.abspath(report_root)


@contextmanager
def locked(root: str) -> Iterator[None]:
    """Serialize GX store/Data Docs updates of one report root across processes."""
    os.makedirs(os.path.join(root, "_gx"), exist_ok=True)
    with open(os.path.join(root, "_gx", ".lock"), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def make_context(root: str) -> Any:
    """An ephemeral GX context whose stores and Data Docs site live under ``root``."""
    quiet_gx()
    import great_expectations as gx
    from great_expectations.data_context.types.base import DataContextConfig, ProgressBarsConfig

    def on_disk(sub: str) -> dict[str, Any]:
        return {"class_name": "TupleFilesystemStoreBackend", "base_directory": os.path.join(root, "_gx", sub)}

    in_memory = {"class_name": "InMemoryStoreBackend"}
    config = DataContextConfig(
        stores={"expectations_store": {"class_name": "ExpectationsStore",
                                       "store_backend": on_disk("expectations")},
                "validation_results_store": {"class_name": "ValidationResultsStore",
                                             "store_backend": on_disk("validations")},
                "checkpoint_store": {"class_name": "CheckpointStore", "store_backend": in_memory},
                "validation_definition_store": {"class_name": "ValidationDefinitionStore",
                                                "store_backend": in_memory}},
        expectations_store_name="expectations_store", validation_results_store_name="validation_results_store",
        checkpoint_store_name="checkpoint_store",
        data_docs_sites={SITE: {"class_name": "SiteBuilder", "show_how_to_buttons": False,
                                "store_backend": {"class_name": "TupleFilesystemStoreBackend",
                                                  "base_directory": root},
                                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"}}},
        analytics_enabled=False, progress_bars=ProgressBarsConfig(globally=False))
    return gx.get_context(project_config=config, mode="ephemeral")


def run_suites(context: Any, runs: list[SuiteRun], *, run_name: str, parameters: dict[str, Any]
               ) -> tuple[list[Any], list[Any]]:
    """Validate each suite on its frame under one run id; store results. Returns (results, result ids)."""
    import great_expectations as gx
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier, ValidationResultIdentifier)

    run_id = gx.RunIdentifier(run_name=run_name, run_time=datetime.now(timezone.utc))
    sources = {}
    results, ids = [], []
    for run in runs:
        if run.engine not in sources:
            add = context.data_sources.add_or_update_spark if run.engine == "spark" else \
                context.data_sources.add_or_update_pandas
            sources[run.engine] = add(f"eo_{run.engine}")
        asset = sources[run.engine].add_dataframe_asset(run.suite.name)
        batch_def = asset.add_batch_definition_whole_dataframe("all")
        suite = context.suites.add_or_update(run.suite)
        vd = context.validation_definitions.add_or_update(
            gx.ValidationDefinition(name=f"{suite.name}.{run.engine}", data=batch_def, suite=suite))
        result_format: dict[str, Any] = {"result_format": "SUMMARY", "partial_unexpected_count": 5}
        if run.key_columns:
            result_format["unexpected_index_column_names"] = run.key_columns
        result = vd.run(batch_parameters={"dataframe": run.frame}, expectation_parameters=parameters,
                        result_format=result_format, run_id=run_id)
        batch_id = next((r.expectation_config.kwargs.get("batch_id") for r in result.results),
                        None) or f"eo_{run.engine}-{suite.name}"
        results.append(result)
        ids.append(ValidationResultIdentifier(
            expectation_suite_identifier=ExpectationSuiteIdentifier(name=suite.name), run_id=run_id,
            batch_identifier=batch_id))
    return results, ids


def build_docs(context: Any, root: str, results: list[Any], ids: list[Any], extra: dict[str, Any]) -> list[str]:
    """Render this run's pages and the index; returns the local page path of each result (same order)."""
    from great_expectations.data_context.types.resource_identifiers import ExpectationSuiteIdentifier

    suite_ids = [ExpectationSuiteIdentifier(name=i.expectation_suite_identifier.name) for i in ids]
    context.build_data_docs(site_names=[SITE], resource_identifiers=[*ids, *suite_ids], build_index=False)
    pages = []
    for rid in ids:
        url = context.get_docs_sites_urls(resource_identifier=rid, site_name=SITE)[0]["site_url"]
        pages.append(unquote(url[len("file://"):]) if url.startswith("file://") else url)
    ledger = os.path.join(root, "_gx", "runs.jsonl")
    with open(ledger, "a") as f:
        for result, rid, page in zip(results, ids, pages):
            stats = result.statistics
            f.write(json.dumps({"run_name": rid.run_id.run_name, "run_time": rid.run_id.run_time.isoformat(),
                                "suite": rid.expectation_suite_identifier.name, "success": bool(result.success),
                                "evaluated": stats.get("evaluated_expectations"),
                                "failed": stats.get("unsuccessful_expectations"),
                                "page": os.path.relpath(page, root), **extra}) + "\n")
    for page in pages:
        _localize(root, page)
    _write_index(root, ledger)
    return pages


def _localize(root: str, page: str) -> None:
    """Make a page readable offline (its CSS/JS/icons come from CDNs): local logo instead of GX's remote
    one (a tracking image), and a text label next to each per-expectation status icon."""
    with open(page) as f:
        text = f.read()
    images = os.path.relpath(os.path.join(root, "static", "images"), os.path.dirname(page))
    new = _BEACON.sub(lambda m: f"{images}/{m.group(1).replace('full_logo_dark', 'logo-long')}", text)
    # a smaller logo, so that without the CDN's CSS it does not overlap the breadcrumb
    new = new.replace('style="width: auto; height: 50px"', 'style="width: auto; height: 30px"')
    for icon, label in _ICONS.items():
        new = new.replace(icon, f"{icon}<span class=\"eo-status\"> {label}</span>")
    if new != text:
        _write_text(page, new)


def _write_text(path: str, text: str) -> None:
    """Replace ``path`` atomically: the Airflow plugin may be serving it right now."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _write_index(root: str, ledger: str) -> None:
    """Write index.html: a static (JS-free) table of the newest runs from the ledger, and the suites."""
    with open(ledger) as f:
        entries = [json.loads(line) for line in f if line.strip()]
    shown = entries[-INDEX_ROWS:]
    rows = "".join(
        f"<tr class=\"eo-run {'eo-ok' if e['success'] else 'eo-failed'}\">"
        f"<td>{html.escape(e['run_time'][:19])}Z</td>"
        f"<td>{html.escape(e['run_name'])}</td><td>{html.escape(str(e.get('partition', '')))}</td>"
        f"<td>{html.escape(e['suite'])}</td><td>{'Succeeded' if e['success'] else 'Failed'}</td>"
        f"<td>{e['failed']} of {e['evaluated']} failed</td>"
        f"<td><a href=\"{html.escape(e['page'])}\">report</a></td></tr>"
        for e in reversed(shown))
    older = (f"<p>{len(entries) - len(shown)} older runs are not listed here: their pages stay under "
             "<code>validations/</code> and every run is a line of <code>_gx/runs.jsonl</code>.</p>"
             if len(entries) > len(shown) else "")
    pages = {name: "expectations/" + name.replace(".", "/") + ".html"  # GX nests a dotted suite name
             for name in sorted({e["suite"] for e in shown})}
    suites = "".join(f"<li><a href=\"{html.escape(page)}\">{html.escape(name)}</a></li>"
                     for name, page in pages.items() if os.path.exists(os.path.join(root, page)))
    document = ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>Data quality reports</title></head>"
                "<body style=\"font-family:sans-serif;margin:1em\">"
                "<img src=\"static/images/logo-long.png\" alt=\"Great Expectations\" style=\"height:30px\">"
                "<h2>Data quality reports</h2>"
                f"<section id=\"eo-runs\"><h3>Validation runs ({len(entries)})</h3>{older}"
                "<table border=\"1\" cellpadding=\"4\" style=\"border-collapse:collapse\">"
                "<thead><tr><th>run time (UTC)</th>"
                "<th>run</th><th>partition</th><th>suite</th><th>status</th><th>expectations</th><th>page</th></tr>"
                f"</thead><tbody>{rows}</tbody></table></section>"
                f"<section id=\"eo-suites\"><h3>Expectation suites</h3><ul>{suites}</ul></section></body></html>")
    _write_text(os.path.join(root, "index.html"), document)
