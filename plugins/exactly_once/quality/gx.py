"""Great Expectations 1.x plumbing for the quality gate: context, runs, Data Docs, the run index.

Layout under ``report_root`` (a local directory; Data Docs are static HTML)::

    index.html                       ours: a static table of the newest validation runs, the suites (no JS)
    validations/<suite>/<run_name>/<run_time>/<batch>.html   one page per suite per validation run
    expectations/<suite>.html        the suites
    static/                          GX's CSS, fonts, images
    _gx/expectations/ _gx/validations/   GX's stores (JSON); _gx/runs.jsonl our ledger; _gx/.lock
    _gx/rendered/<hash of the name>  the suite content its page shows (a run renders a suite page only anew)

The context is ephemeral (no ``great_expectations.yml``) but its expectation and validation-result
stores and its Data Docs site are on disk, so every run is kept and the index lists the runs across
intervals. Validations sharing one ``report_root`` are serialized by a ``flock`` on ``_gx/.lock``.

``report_root`` may also be a storage URL (``s3://bucket/reports/data_docs``): the site shared by every
worker of a fleet, where no local directory is. A run then builds its pages in a private temp dir
(:func:`site`) and :func:`build_docs` publishes them - its pages, the suites' pages, ``static/`` once -
with one ledger object per run (``_gx/runs/<run time>--<id>.json``; no append, no lock: two workers
validating at once both land) and an ``index.html`` rewritten from the newest :data:`REMOTE_INDEX_ROWS`
ledger objects (a validation finishing at the same moment may be missing from it until the next one).

A run renders only its own pages: GX's own index builder re-reads every stored validation result on each
build (its cost grew by ~4 ms per earlier run: +1 s per validate after a year of daily runs), so the
index is ours, written from the ledger, and shows the newest :data:`INDEX_ROWS` entries.
"""
from __future__ import annotations

import fcntl
import hashlib
import html
import json
import logging
import os
import re
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterator
from urllib.parse import unquote

from ..errors import ConfigError, StorageError

SITE = "eo_data_docs"
_BEACON = re.compile(r"https://great-expectations-web-assets\.s3[^\"')]*?/(logo-long\.png|full_logo_dark\.png)"
                     r"[^\"')]*")
INDEX_ROWS = 2000  # newest ledger entries on index.html; every run's page stays under validations/
REMOTE_INDEX_ROWS = 500  # the same on a storage URL (each entry is one object to read)
_ICONS = {'<i class="fas fa-check-circle text-success" ></i>': "passed",
          '<i class="fas fa-times text-danger" ></i>': "FAILED"}


# GX's own chatter at INFO: "Skipping registering function ... because it is a closure", ~200 lines in every
# validate task's log (at import, and again for every data context). The gate's own lines stay.
NOISY_LOGGERS = ("great_expectations._docs_decorators",)


def quiet_gx() -> None:
    """No analytics, no progress bars, none of GX's registration chatter in the task log: set before GX is
    imported (and harmless after). A user who wants it back sets that logger's level after this."""
    os.environ["GX_ANALYTICS_ENABLED"] = "false"
    os.environ.setdefault("TQDM_DISABLE", "1")
    for name in NOISY_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:  # never lower a level the deployment chose
            logger.setLevel(logging.WARNING)


@dataclass
class SuiteRun:
    """One suite validated against one frame in one validation run."""

    suite: Any            # great_expectations.ExpectationSuite
    frame: Any            # pandas or Spark DataFrame
    engine: str           # "pandas" | "spark"
    key_columns: list[str]
    source: str           # the suite's JSON as read (canonical)

    def content(self) -> str:
        """The suite's content as GX sees it (its ``to_json_dict``, canonical), worked out once per process
        and source: a validation definition is made once per content (two files spelling one suite
        differently - GX's defaults written out - have one content, not two that invalidate each other)."""
        if self.source not in _CONTENTS:
            if len(_CONTENTS) >= 256:
                _CONTENTS.clear()
            _CONTENTS[self.source] = json.dumps(self.suite.to_json_dict(), sort_keys=True, default=str)
        return _CONTENTS[self.source]


_CONTENTS: dict[str, str] = {}  # a suite's JSON as read -> its content (~4 ms a suite to work out)


def is_remote(report_root: str) -> bool:
    """Whether ``report_root`` is a storage URL (``s3://...``) rather than a local directory."""
    return "://" in report_root and not report_root.startswith("file://")


def local_root(report_root: str) -> str:
    """``report_root`` as an absolute local path (a local directory or ``file://`` URL)."""
    if report_root.startswith("file://"):
        report_root = report_root[len("file://"):]
    if "://" in report_root:
        raise ConfigError(f"{report_root.split('://')[0]}://... is not a local directory")
    return os.path.abspath(report_root)


@contextmanager
def site(report_root: str) -> Iterator[str]:
    """The local directory a validation builds its Data Docs in: the report root itself, locked against
    other validations, or - for a storage URL - a private temp dir, removed afterwards (its pages are
    published by :func:`build_docs`)."""
    if not is_remote(report_root):
        root = local_root(report_root)
        with locked(root):
            yield root
        return
    tmp = tempfile.mkdtemp(prefix="eo-data-docs-")
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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


_CONTEXTS: dict[str, Any] = {}
_VIEW = {"module_name": "exactly_once.quality.gx_view", "class_name": "CachedJinjaPageView"}
_SECTION = {"module_name": "exactly_once.quality.gx_view", "class_name": "KeyedSiteSectionBuilder"}


def make_context(root: str) -> Any:
    """An ephemeral GX context whose stores and Data Docs site live under ``root``; one per root and
    process (a batch validates hundreds of intervals: the context, its suites and validation definitions
    are made once - a context holds nothing of one validation that another could see but its stores)."""
    if root not in _CONTEXTS:
        _CONTEXTS[root] = _new_context(root)
    return _CONTEXTS[root]


def _new_context(root: str) -> Any:
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
                                "site_section_builders": {"expectations": {**_SECTION, "view": _VIEW},
                                                          # {}: no run name filter (GX's default skips
                                                          # runs whose name holds "profiling")
                                                          "validations": {**_SECTION, "view": _VIEW,
                                                                          "run_name_filter": {}},
                                                          "profiling": "None"},
                                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"}}},
        analytics_enabled=False, progress_bars=ProgressBarsConfig(globally=False))
    context = gx.get_context(project_config=config, mode="ephemeral")
    # An ephemeral context's "save" of its project config is a YAML dump of the whole config into an in-memory
    # store that nothing reads back; GX makes one on every data source, asset and batch definition added - 9 in
    # a validate task, ~50 ms. The data sources themselves live in the context's own (in-memory) store.
    context._save_project_config = lambda: None
    return context


def run_suites(context: Any, runs: list[SuiteRun], *, run_name: str, parameters: dict[str, Any]
               ) -> tuple[list[Any], list[Any]]:
    """Validate each suite on its frame under one run id; store results. Returns (results, result ids)."""
    import great_expectations as gx
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier, ValidationResultIdentifier)

    run_id = gx.RunIdentifier(run_name=run_name, run_time=datetime.now(timezone.utc))

    results, ids = [], []
    for run in runs:
        vd = _definition(context, run)
        kwargs = {"batch_parameters": {"dataframe": run.frame}, "expectation_parameters": parameters,
                  "result_format": {"result_format": "BASIC", "partial_unexpected_count": 5}, "run_id": run_id}
        vd, result = _validate(context, run, vd, kwargs)
        if not result.success:  # again, with the report's details (value counts, the failing rows' keys),
            kwargs["result_format"] = _detailed(run)  # which a passing suite does not pay for; stored under
            vd, result = _validate(context, run, vd, kwargs)  # the same id, this result replaces the first
        batch_id = next((r.expectation_config.kwargs.get("batch_id") for r in result.results),
                        None) or f"eo_{run.engine}-{vd.suite.name}"
        results.append(result)
        ids.append(ValidationResultIdentifier(
            expectation_suite_identifier=ExpectationSuiteIdentifier(name=vd.suite.name), run_id=run_id,
            batch_identifier=batch_id))
    return results, ids


def _validate(context: Any, run: SuiteRun, vd: Any, kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """``(definition, result)`` of one validation of ``run`` (its definition made again if its suite went stale)."""
    from great_expectations.exceptions.resource_freshness import ResourceFreshnessAggregateError

    try:
        return vd, vd.run(**kwargs)
    except ResourceFreshnessAggregateError:  # another process saved the suite since: its store holds
        vd = _definition(context, run, again=True)  # another copy now
        return vd, vd.run(**kwargs)


def _detailed(run: SuiteRun) -> dict[str, Any]:
    """The result format of a failed suite's report: sampled values with counts, and the failing rows
    identified by the suite's key columns."""
    detail: dict[str, Any] = {"result_format": "SUMMARY", "partial_unexpected_count": 5}
    if run.key_columns:
        detail["unexpected_index_column_names"] = run.key_columns
    return detail


def _definition(context: Any, run: SuiteRun, *, again: bool = False) -> Any:
    """The validation definition of ``run``'s suite on its engine: made (suite stored, data asset added)
    once per context and suite content (``again``: once more), then reused with each validation's own
    data frame. The caller holds the report root's lock, so no other process saves a suite meanwhile."""
    import great_expectations as gx

    cache = context.__dict__.setdefault("_eo_definitions", {})
    key = (run.engine, run.content())
    if key not in cache or again:
        if run.engine not in cache:  # one data source per engine, one data asset per suite version
            add = context.data_sources.add_or_update_spark if run.engine == "spark" else \
                context.data_sources.add_or_update_pandas
            cache[run.engine] = add(f"eo_{run.engine}")
        taken = {a.name for a in cache[run.engine].assets}
        name = run.suite.name if run.suite.name not in taken else f"{run.suite.name}.{len(taken)}"
        asset = cache[run.engine].add_dataframe_asset(name)
        batch_def = asset.add_batch_definition_whole_dataframe("all")
        suite = context.suites.add_or_update(run.suite)
        context.__dict__.setdefault("_eo_digests", {})[suite.name] = hashlib.sha256(key[1].encode()).hexdigest()
        vd = gx.ValidationDefinition(name=f"{suite.name}.{run.engine}", data=batch_def, suite=suite)
        added = context.__dict__.setdefault("_eo_added", set())
        if vd.name in added:  # a new version of its suite, or the suite went stale: GX's update (which saves the
            cache[key] = context.validation_definitions.add_or_update(vd)  # suite again and its batch definition)
        else:  # the first in this context: its suite and batch definition were saved just above
            cache[key] = context.validation_definitions.add(vd)
            added.add(vd.name)
    return cache[key]


def build_docs(context: Any, root: str, results: list[Any], ids: list[Any], extra: dict[str, Any],
               publish_to: str | None = None, storage_options: dict[str, Any] | None = None) -> list[str]:
    """Render this run's pages and the index; returns the page of each result (same order): its local path,
    or with ``publish_to`` (a storage URL) its URL there, after publishing (module docstring)."""
    from great_expectations.data_context.types.resource_identifiers import ExpectationSuiteIdentifier

    digests = context.__dict__.get("_eo_digests", {})  # each suite's content, as validated
    stale = sorted(n for n in {i.expectation_suite_identifier.name for i in ids} if _rendered(root, n) != digests.get(n))
    suite_ids = [ExpectationSuiteIdentifier(name=n) for n in stale]
    paths = {name: os.path.join(root, _suite_page(name)) for name in stale}
    before = {name: _mtime(path) for name, path in paths.items()}
    builder = _site_builder(context)
    builder.build(resource_identifiers=[*ids, *suite_ids], build_index=False)
    # a suite page rendered from this content: later runs of it skip the page. A page GX could not render (it logs
    # the error and goes on) is not marked: the next validation renders it again
    for name in stale:
        if name in digests and _mtime(paths[name]) not in (None, before[name]):
            _write_text(_marker(root, name), digests[name])
    pages = []
    for rid in ids:
        url = builder.get_resource_url(resource_identifier=rid)
        if not url:
            raise StorageError(f"Great Expectations rendered no report page for {rid.expectation_suite_identifier.name} "
                               f"under {root} (its rendering error is in the log above); the verdict was not "
                               "recorded, and a retry of the validate task validates again")
        pages.append(unquote(url[len("file://"):]) if url.startswith("file://") else url)
    entries = [{"run_name": rid.run_id.run_name, "run_time": rid.run_id.run_time.isoformat(),
                "suite": rid.expectation_suite_identifier.name, "success": bool(result.success),
                "evaluated": result.statistics.get("evaluated_expectations"),
                "failed": result.statistics.get("unsuccessful_expectations"),
                "page": os.path.relpath(page, root), **extra} for result, rid, page in zip(results, ids, pages)]
    for page in pages:
        _localize(root, page)
    if publish_to is not None:
        return _publish(root, entries, publish_to, storage_options or {})
    ledger = os.path.join(root, "_gx", "runs.jsonl")
    with open(ledger, "a") as f:
        f.writelines(json.dumps(e) + "\n" for e in entries)
    with open(ledger) as f:
        lines = [line for line in f if line.strip()]
    shown = [json.loads(line) for line in lines[-INDEX_ROWS:]]  # only the shown ones are parsed
    _write_text(os.path.join(root, "index.html"), _index(
        shown, len(lines), lambda page: os.path.exists(os.path.join(root, page))))
    return pages


def _site_builder(context: Any) -> Any:
    """The context's Data Docs site builder, made once per context: GX's ``build_data_docs`` and
    ``get_docs_sites_urls`` make a new one on every call (~7 ms each, five times a validation) with the
    loader used here (GX's own, in every release the package allows)."""
    cache = context.__dict__.setdefault("_eo_site_builder", {})
    if SITE not in cache:
        cache[SITE] = context._load_site_builder_from_site_config(context.variables.data_docs_sites[SITE])
    return cache[SITE]


def _publish(root: str, entries: list[dict[str, Any]], url: str, options: dict[str, Any]) -> list[str]:
    """Upload a run's site from ``root`` to ``url``: its pages and the suites' (``static/`` only when it is
    missing there), one ledger object per entry, then ``index.html`` from the newest ledger objects."""
    from ..storage import storage_for  # noqa: PLC0415 - storage is only needed for a remote site

    store, base = storage_for(url, **options)
    has_static = store.exists(store.join(base, "static"))
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir.split(os.sep)[0] == "_gx" or (has_static and rel_dir.split(os.sep)[0] == "static"):
            continue
        for name in filenames:
            rel = os.path.normpath(os.path.join(rel_dir, name)).replace(os.sep, "/")
            if rel != "index.html":
                with open(os.path.join(dirpath, name), "rb") as f:
                    store.write_atomic(store.join(base, rel), f.read())
    runs = store.join(base, "_gx", "runs")
    for e in entries:  # names sort by time: the index reads only the newest
        stamp = re.sub(r"[^0-9A-Za-z]", "", e["run_time"])
        store.write_atomic(store.join(runs, f"{stamp}--{uuid.uuid4().hex[:12]}.json"), json.dumps(e).encode())
    names = sorted(n for n in store.list_names(runs) if n.endswith(".json"))
    shown = [json.loads(store.read_bytes(store.join(runs, n))) for n in names[-REMOTE_INDEX_ROWS:]]
    shown.sort(key=lambda e: e["run_time"])
    store.write_atomic(store.join(base, "index.html"), _index(
        shown, len(names), lambda page: store.exists(store.join(base, page))).encode())
    return [f"{url.rstrip('/')}/{e['page']}" for e in entries]


def _rendered(root: str, name: str) -> str | None:
    """The content digest of suite ``name`` as its page under ``root`` shows it (None: no page)."""
    if not os.path.exists(os.path.join(root, _suite_page(name))):
        return None
    try:
        with open(_marker(root, name)) as f:
            return f.read()
    except FileNotFoundError:
        return None


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return None


def _marker(root: str, name: str) -> str:
    """Where the digest of suite ``name``'s rendered content is kept (named by a hash: any suite name is safe)."""
    return os.path.join(root, "_gx", "rendered", hashlib.sha256(name.encode()).hexdigest()[:32])


def _suite_page(name: str) -> str:
    """The page of suite ``name``, relative to the site's root (GX nests a dotted suite name)."""
    return "expectations/" + name.replace(".", "/") + ".html"


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
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _index(shown: list[dict[str, Any]], total: int, exists: Any) -> str:
    """index.html: a static (JS-free) table of the runs ``shown`` (the newest of ``total``), and the suites
    whose page ``exists(page)``."""
    rows = "".join(
        f"<tr class=\"eo-run {'eo-ok' if e['success'] else 'eo-failed'}\">"
        f"<td>{html.escape(e['run_time'][:19])}Z</td>"
        f"<td>{html.escape(e['run_name'])}</td><td>{html.escape(str(e.get('partition', '')))}</td>"
        f"<td>{html.escape(e['suite'])}</td><td>{'Succeeded' if e['success'] else 'Failed'}</td>"
        f"<td>{e['failed']} of {e['evaluated']} failed</td>"
        f"<td><a href=\"{html.escape(e['page'])}\">report</a></td></tr>"
        for e in reversed(shown))
    older = (f"<p>{total - len(shown)} older runs are not listed here: their pages stay under "
             "<code>validations/</code> and every run is in the ledger under <code>_gx/</code>.</p>"
             if total > len(shown) else "")
    pages = {name: _suite_page(name) for name in sorted({e["suite"] for e in shown})}
    suites = "".join(f"<li><a href=\"{html.escape(page)}\">{html.escape(name)}</a></li>"
                     for name, page in pages.items() if exists(page))
    document = ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>Data quality reports</title></head>"
                "<body style=\"font-family:sans-serif;margin:1em\">"
                "<img src=\"static/images/logo-long.png\" alt=\"Great Expectations\" style=\"height:30px\">"
                "<h2>Data quality reports</h2>"
                f"<section id=\"eo-runs\"><h3>Validation runs ({total})</h3>{older}"
                "<table border=\"1\" cellpadding=\"4\" style=\"border-collapse:collapse\">"
                "<thead><tr><th>run time (UTC)</th>"
                "<th>run</th><th>partition</th><th>suite</th><th>status</th><th>expectations</th><th>page</th></tr>"
                f"</thead><tbody>{rows}</tbody></table></section>"
                f"<section id=\"eo-suites\"><h3>Expectation suites</h3><ul>{suites}</ul></section></body></html>")
    return document
