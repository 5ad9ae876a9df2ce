"""``eo`` - inspect and repair the transactions of a table, from any directory.

    eo status  s3://bucket/warehouse/orders     every interval's epochs and states, from the log
    eo status  --dag pv_pipeline                 the tables the DAG's exactly-once groups write (and their URLs)
    eo recover <table-url> | --dag <id>          finish decided commits, abort stale attempts
    eo gc      <table-url> | --dag <id>          delete what the log says is finished
    eo history <table-url>                      every version of every interval: time, rows, verdict
    eo rollback <table-url> --interval <start> --to e2    make an earlier version live again
    eo reprocess <table-url> --interval <start>  a run of the table's DAG, through Airflow's REST API, that
                                                 recomputes the interval from its input files as they are now
    eo rerun-stale <table-url>                   runs that recompute the table's stale intervals, in order

A table is addressed by its URL - where the pipeline's table is (``<EO_DATA_ROOT>/warehouse/<sink>`` unless
the pipeline says ``table=``), a local path, ``file://`` or ``s3://``, the same for every target: for a
database or Redis target the rows are in the database, that path holds no data (it need not exist) and the
log is beside it, in ``<parent>/_exactly_once/<sink>/``; ``eo status --dag <id>`` prints each table's URL.
S3 credentials come from the Airflow connection ``--conn-id`` (default ``EO_STORAGE_CONN_ID``) or the usual
AWS environment. A DAG is found by its id through Airflow's DagBag (the configured dags folder, or
``--dags-folder``). ``reprocess`` and ``rerun-stale`` talk to the Airflow that runs the DAG: ``--api-url``
(or ``EO_AIRFLOW_URL``, Airflow's ``[api] base_url``), a login (``--user``/``EO_AIRFLOW_USER`` and
``EO_AIRFLOW_PASSWORD`` or a prompt, or ``EO_AIRFLOW_TOKEN``) that may trigger and edit the DAG.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import asdict
from typing import Any, Iterator

from . import settings
from .errors import ConfigError, ExactlyOnceError
from .protocol.transaction import TwoPhaseCommitSink
from .records.txlog import State

log = logging.getLogger(__name__)


def _options(conn_id: str | None) -> dict[str, Any]:
    if not conn_id:
        return {}
    from .airflow.connections import storage_options

    return storage_options(conn_id)


def open_table(url: str, conn_id: str | None = None) -> TwoPhaseCommitSink:
    """The sink of the table at ``url``, as the pipeline that owns it, publishing through the target it is
    bound to (both read from the table's owner record; ``EO_TARGET_URL`` gives a database / Redis
    target's credentials when its Airflow connection or the driver's environment does not)."""
    try:
        return TwoPhaseCommitSink.open(url, storage_options=_options(conn_id), require_validation=True,
                                       target_url=settings.target_url())
    except ConfigError as exc:
        raise SystemExit(f"eo: {exc}") from None


def dags_folder(explicit: str | None = None) -> str | None:
    """Where ``--dag`` looks: ``--dags-folder``; else Airflow's configured folder when ``AIRFLOW_HOME`` or
    ``AIRFLOW__CORE__DAGS_FOLDER`` is set; else, in a checkout's root (a ``dags/`` folder here), that
    folder - with the checkout's ``AIRFLOW_HOME`` (``.airflow``, as ``make`` sets it). None: Airflow's."""
    if explicit:
        return os.path.abspath(explicit)
    if os.environ.get("AIRFLOW__CORE__DAGS_FOLDER") or os.environ.get("AIRFLOW_HOME"):
        return None
    if not os.path.isdir("dags"):
        return None
    os.environ["AIRFLOW_HOME"] = os.path.abspath(".airflow")  # read when Airflow is first imported
    return os.path.abspath("dags")


def dag_sinks(dag_id: str, sink: str | None = None, folder: str | None = None) -> Iterator[TwoPhaseCommitSink]:
    """The sinks of ``dag_id``'s exactly-once groups (one per group), loaded through Airflow's DagBag from
    ``folder`` (default: :func:`dags_folder`)."""
    folder = folder or dags_folder()
    # Airflow itself first, whole: importing it loads this package's plugin (``[core] lazy_load_plugins =
    # False``: plugin -> operators -> compat). Were compat the first to import Airflow, the plugin would find
    # it half-imported ("Failed to import plugin exactly_once ... circular import").
    import airflow  # noqa: F401

    from .airflow.compat import dag_bag_class
    from .airflow.connections import storage_options
    from .airflow.operators import BeginOperator

    DagBag = dag_bag_class()  # noqa: N806 - Airflow's class, from where this Airflow version keeps it
    bag = DagBag(dag_folder=folder) if folder else DagBag()
    dag = bag.dags.get(dag_id)
    if dag is None:
        errors = "; ".join(f"{k}: {str(v).splitlines()[-1]}" for k, v in bag.import_errors.items())
        raise SystemExit(f"no DAG {dag_id!r} in {bag.dag_folder}" + (f" (import errors: {errors})" if errors else "")
                         + "; run eo from the checkout's root, or give --dags-folder (or AIRFLOW_HOME)")
    configs = [t.config for t in dag.tasks if isinstance(t, BeginOperator)]
    configs = [c for c in configs if sink is None or c.sink == sink]
    if not configs:
        raise SystemExit(f"DAG {dag_id} has no exactly-once group" + (f" writing {sink}" if sink else ""))
    for cfg in configs:
        yield cfg.sink_handle(storage_options(cfg.storage_conn_id))


def _sinks(args: argparse.Namespace) -> Iterator[TwoPhaseCommitSink]:
    if bool(args.table) == bool(args.dag):
        raise SystemExit("give a table URL or --dag <dag_id> (one of them)")
    if args.dag:
        yield from dag_sinks(args.dag, args.sink, dags_folder(args.dags_folder))
    else:
        yield open_table(args.table, args.conn_id)


def cmd_status(args: argparse.Namespace) -> int:
    for sink in _sinks(args):
        print(f"{sink.pipeline}/{sink.sink}: {sink.storage.url(sink.table)}"
              + (f" (the table's URL for eo; its rows are in {sink.target.describe()})"
                 if sink.target.keeps_staged_copies else ""))
        for iv in sink.log.intervals():
            desc = ", ".join(f"e{e}:{st.state.value}"
                             f"{'' if st.published or st.state is not State.COMMITTED else '(publishing)'}"
                             for e, st in sink.status(iv).items())
            print(f"  {iv.start.isoformat()} .. {iv.end.isoformat()}  {desc}")
    return 0


def cmd_recover(args: argparse.Namespace) -> int:
    failed = False
    for sink in _sinks(args):
        actions = sink.recover(stale_after=args.stale_after)
        failed |= any(a.startswith("FAILED") for a in actions)
        print(f"{sink.sink}: " + ("\n  ".join(["", *actions]) if actions else "nothing to recover"))
    return 1 if failed else 0


def cmd_gc(args: argparse.Namespace) -> int:
    from .ops.maintenance import gc

    for sink in _sinks(args):
        report = gc(sink, min_age=args.min_age, stale_after=args.stale_after)
        for k, v in report.items():
            print(f"{sink.sink} {k}: {len(v)}" + ("".join(f"\n  {x}" for x in v) if args.verbose else ""))
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    """``eo rollback``: republish an earlier version through the protocol (a new, fenced epoch)."""
    from .ops.rollback import describe, find_interval, parse_version, rollback

    sink = open_table(args.table_url, args.conn_id)
    interval = find_interval(sink, args.interval)
    result = describe(rollback(sink, interval, parse_version(args.to, interval)), sink)
    print(f"{result['version']}: {result['rollback_of']} is live again ({result['rows']} rows, partitions "
          f"{result['partitions']})")
    if result["stale"]:
        print(f"stale intervals of the table now (computed on a state that is no longer live), re-run them in "
              f"order: {', '.join(result['stale'])} - `eo rerun-stale {args.table_url}` or the table page's action")
    else:
        print("no stale interval: every later interval was computed on the live state")
    return 0


def _api(args: argparse.Namespace) -> Any:
    from .airflow.rest import Api, api_url

    return Api.login(api_url(args.api_url), args.user)


def _not_pending(api: Any, sink: TwoPhaseCommitSink, url: str, intervals: list[Any]) -> None:
    """The table page's rule: no second action on an interval with a run on it queued or running
    (:class:`ActionPendingError` naming that run). Checked before posting: two commands at the very same
    moment can both pass (the table page decides under a row lock; the REST API has none)."""
    from .airflow import runs as airflow_runs
    from .airflow.tables import TableRef
    from .errors import ActionPendingError

    found = api.pending_runs(TableRef(sink.pipeline, sink.sink, url))
    for interval in intervals:
        for r in airflow_runs.pending(found, interval)[:1]:
            by = f" by {r.by}" if r.by else ""
            raise ActionPendingError(f"a {r.what}{by} of {sink.sink} {interval.label} is {r.state} (run {r.run_id} of "
                                     f"{r.dag_id}): nothing started - wait until it ends (follow it at "
                                     f"{api.run_url(r.dag_id, r.run_id)}), then run the command again")


def cmd_reprocess(args: argparse.Namespace) -> int:
    """``eo reprocess``: one run of the table's DAG for the interval, with conf reprocess, through the REST API;
    refused while a run on the interval is queued or running."""
    from .ops.rollback import find_interval

    sink = open_table(args.table_url, args.conn_id)
    interval = find_interval(sink, args.interval)
    api = _api(args)
    _not_pending(api, sink, args.table_url, [interval])
    conf = {"reprocess": True, "sinks": [sink.sink], "eo_action": "reprocess",
            **({"allow_shrinking": True} if args.allow_shrinking else {})}
    run = api.trigger(sink.pipeline, interval, conf, action="reprocess", note=f"eo reprocess of {sink.sink}",
                      dates=_dates(api, sink, args.table_url, [interval], args.allow_shrinking))
    print(f"started {run['dag_run_id']} of {sink.pipeline}: reprocess of {sink.sink} {interval.label}"
          f"{' (allow shrinking)' if args.allow_shrinking else ''}; follow it at "
          f"{api.run_url(sink.pipeline, run['dag_run_id'])}")
    return 0


def _dates(api: Any, sink: Any, table_url: str, intervals: list[Any], allow_shrinking: bool = False) -> Any:
    """The dates a run of the table's DAG gets its group's tasks within (``airflow.run_dates``); ConfigError
    with the way out if one of ``intervals`` cannot be dated there - before any run starts."""
    from .airflow.run_dates import first_refusal, no_date_advice

    dates = api.dag_dates(sink.pipeline)
    why = first_refusal(dates, intervals, sink.pipeline, lambda: no_date_advice(
        "reprocess", sink.pipeline, sink.sink, table_url, intervals, allow_shrinking=allow_shrinking))
    if why:
        raise ConfigError(why)
    return dates


def cmd_rerun_stale(args: argparse.Namespace) -> int:
    """``eo rerun-stale``: one run of the table's DAG per stale interval (the table page's list), oldest first;
    refused (nothing started) while a run on any of them is queued or running."""
    from .ops.inspection import stale_intervals
    from .ids import Interval

    sink = open_table(args.table_url, args.conn_id)
    stale = [Interval.from_token(t) for t in stale_intervals(sink)]
    if not stale:
        print(f"{sink.sink} has no stale interval: nothing to re-run")
        return 0
    api = _api(args)
    _not_pending(api, sink, args.table_url, stale)
    dates = _dates(api, sink, args.table_url, stale)  # every run can be dated, or none starts
    for order, interval in enumerate(stale):
        run = api.trigger(sink.pipeline, interval, {"reprocess": True, "sinks": [sink.sink], "eo_action": "rerun-stale"},
                          action="rerun-stale", order=order, note=f"eo rerun-stale of {sink.sink}", dates=dates)
        print(f"started {run['dag_run_id']} of {sink.pipeline}: re-run of stale {sink.sink} {interval.label}; "
              f"{api.run_url(sink.pipeline, run['dag_run_id'])}")
    print(f"{len(stale)} run(s) queued in interval order (a stateful DAG runs them one at a time)")
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    """``eo history``: print the table's history (``--json``: one JSON object per version); S3
    credentials from ``EO_STORAGE_CONN_ID`` or the usual AWS environment."""
    from .ops.history import history, render
    from .ops.inspection import open_table as open_any_table

    try:
        sink = open_any_table(args.table_url, storage_options=_options(settings.storage_conn_id()))
        rows = history(sink)
    except (ExactlyOnceError, OSError) as exc:
        sys.stderr.write(f"eo history: {exc}\n")  # the command's own error line, not a log record
        return 2
    if args.json:
        sys.stdout.write("".join(json.dumps(asdict(r), sort_keys=True) + "\n" for r in rows))
    else:
        sys.stdout.write(render(sink, args.table_url, rows) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="eo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name, fn, helptext in (("status", cmd_status, "show the transaction log"),
                               ("recover", cmd_recover, "finish or abort unfinished transactions"),
                               ("gc", cmd_gc, "remove finished staging, old versions, compact the log")):
        s = sub.add_parser(name, help=helptext)
        s.add_argument("table", nargs="?", help="table URL or path (s3://bucket/warehouse/orders)")
        s.add_argument("--dag", help="a DAG id: its exactly-once groups' tables (through Airflow's DagBag)")
        s.add_argument("--sink", help="with --dag: only this sink")
        s.add_argument("--dags-folder", help="with --dag: the DAG files' folder (default: Airflow's configured "
                                             "one, or ./dags in a checkout's root)")
        s.add_argument("--conn-id", default=settings.storage_conn_id(),
                       help="Airflow connection with the S3 credentials (default EO_STORAGE_CONN_ID)")
        s.add_argument("--stale-after", type=float, default=6 * 3600,
                       help="seconds without a heartbeat (storage clock) before an unfinished txn is taken over")
        s.add_argument("--min-age", type=float, default=3600, help="gc: keep superseded versions this long")
        s.add_argument("-v", "--verbose", action="store_true")
        s.set_defaults(fn=fn)
    h = sub.add_parser("history", help="every version of every interval of a table (time, rows, verdict)")
    h.add_argument("table_url", help="the table's location: a path, file:// or s3://bucket/prefix/<table>")
    h.add_argument("--json", action="store_true", help="one JSON object per version instead of a table")
    h.set_defaults(fn=cmd_history)
    r = sub.add_parser("rollback", help="make an earlier committed version of an interval live again")
    r.add_argument("table_url", help="the table's location: a path, file:// or s3://bucket/prefix/<table>")
    r.add_argument("--interval", required=True, help="the interval's start, ISO-8601 (eo history lists them)")
    r.add_argument("--to", required=True, help="the version to make live again: e2 (or 2)")
    r.add_argument("--conn-id", default=settings.storage_conn_id(), help="Airflow connection with S3 credentials")
    r.set_defaults(fn=cmd_rollback)
    for name, fn, helptext in (
            ("reprocess", cmd_reprocess, "recompute an interval from its inputs as they are now: a run of the "
                                         "table's DAG through Airflow's REST API"),
            ("rerun-stale", cmd_rerun_stale, "re-run the table's stale intervals in order: runs of its DAG through "
                                             "Airflow's REST API")):
        s = sub.add_parser(name, help=helptext)
        s.add_argument("table_url", help="the table's location (eo status --dag <id> prints it)")
        if name == "reprocess":
            s.add_argument("--interval", required=True, help="the interval's start, ISO-8601 (eo history lists them)")
            s.add_argument("--allow-shrinking", action="store_true",
                           help="let the reprocess read fewer input files than the live version did")
        s.add_argument("--api-url", help="Airflow's API server (default EO_AIRFLOW_URL, [api] base_url, "
                                         "http://localhost:8080)")
        s.add_argument("--user", help="the Airflow login (default EO_AIRFLOW_USER; password: EO_AIRFLOW_PASSWORD "
                                      "or a prompt; or a token in EO_AIRFLOW_TOKEN)")
        s.add_argument("--conn-id", default=settings.storage_conn_id(), help="Airflow connection with S3 credentials")
        s.set_defaults(fn=fn)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.fn(args)
    except ExactlyOnceError as exc:
        print(f"eo {args.cmd}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
