"""Sections that need Spark, all in ONE session per process: the write path (1), recovery (3) and the
validate phase (5). Every comparison alternates its variants rep by rep, after one warm-up of each."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path
from typing import Any, Callable

from bench.common import ROOT, clock, loadavg, say, stats

from exactly_once import Interval, TwoPhaseCommitSink  # noqa: E402
from exactly_once.errors import FailpointError  # noqa: E402

COMMITTER_KEY = "mapreduce.fileoutputcommitter.algorithm.version"
BASE_DAY = date(2030, 1, 1)


def spark_session(cores: int = 2, driver_memory: str = "2g") -> Any:
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(f"local[{cores}]").appName("eo-bench")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", driver_memory).config("spark.sql.shuffle.partitions", "8")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def frame(spark: Any, rows: int, files: int) -> Any:
    """``rows`` generated rows in exactly ``files`` partitions (= output files): cheap, deterministic."""
    from pyspark.sql import functions as F

    return spark.range(0, rows, 1, files).select(
        F.col("id"),
        F.concat(F.lit("app-"), (F.col("id") % 1000).cast("string")).alias("app_id"),
        ((F.col("id") * 7919) % 1000003).alias("user_id"),
        F.when(F.col("id") % 10 == 0, F.lit("click")).otherwise(F.lit("page_view")).alias("event"),
        F.timestamp_seconds(F.lit(1893456000) + F.col("id") % 86400).alias("ts"),
        ((F.xxhash64("id") % 100000) / 100.0).alias("amount"))


def fingerprint(spark: Any, url: str) -> dict[str, Any]:
    """Row count and an order-independent checksum (sum of a 64-bit row hash) of a parquet dir."""
    from pyspark.sql import functions as F

    df = spark.read.parquet(url)
    row = df.select(F.count(F.lit(1)).alias("n"),
                    F.sum(F.xxhash64(*df.columns).cast("decimal(38,0)")).alias("h")).first()
    files = [f for f in os.listdir(url.removeprefix("file://")) if f.endswith(".parquet")]
    return {"rows": int(row["n"]), "checksum": str(row["h"]), "files": len(files)}


def _url(path: str) -> str:
    return "file://" + os.path.abspath(path)


# ---------------------------------------------------------------------------- section 1
class TwoPhase:
    """One two-phase-commit table; every call publishes a fresh daily interval (a fresh partition)."""

    def __init__(self, table: str, checksums: bool, table_format: str = "files") -> None:
        self.sink = TwoPhaseCommitSink.at(table, pipeline="bench", sink="t", checksums=checksums,
                                          table_format=table_format)
        self.n = 0
        self.last_partition: str | None = None

    def run(self, df: Any) -> dict[str, float]:
        day = (BASE_DAY + timedelta(days=self.n)).isoformat()
        self.n += 1
        part = f"dt={day}"
        t: dict[str, float] = {}
        t["begin"], txn = clock(lambda: self.sink.begin(Interval.daily(day)))
        target = _url(self.sink.storage.join(self.sink.data_dir(txn), part))
        t["write"], _ = clock(lambda: df.write.mode("overwrite").parquet(target))
        t["pre_commit"], _ = clock(lambda: self.sink.pre_commit(txn))
        t["commit"], _ = clock(lambda: self.sink.commit(txn))
        t["total"] = sum(t.values())
        live = self.sink.live_files(part)  # a Delta table's files stay where the job wrote them
        self.last_partition = os.path.dirname(live[0]) if live else self.sink.storage.join(self.sink.table, part)
        return t


def write_path(spark: Any, work: Path, sizes: list[int], files: int, reps: int, warmup: int) -> dict[str, Any]:
    """Plain overwrite vs FileOutputCommitter v1 vs v2 vs the two-phase commit (with/without checksums,
    and into a Delta table's staging: ``table_format="delta"``, issue 18's "within 1.05x of a plain write")."""
    out: dict[str, Any] = {"files": files, "reps": reps, "warmup": warmup,
                           "default_committer_version": spark.sparkContext._jsc.hadoopConfiguration().get(
                               COMMITTER_KEY), "sizes": {}}
    for rows in sizes:
        say(f"write path: {rows:,} rows, {files} files")
        base = work / f"write_{rows}"
        shutil.rmtree(base, ignore_errors=True)
        df = frame(spark, rows, files)
        targets = {k: _url(str(base / k)) for k in ("plain", "v1", "v2")}
        tpc = {"two_phase": TwoPhase(str(base / "tpc"), True),
               "two_phase_no_checksums": TwoPhase(str(base / "tpc_nosum"), False),
               "two_phase_delta": TwoPhase(str(base / "tpc_delta"), True, "delta")}

        def plain(name: str, version: str | None) -> Callable[[], dict[str, float]]:
            def go() -> dict[str, float]:
                w = df.write.mode("overwrite")
                if version:
                    w = w.option(COMMITTER_KEY, version)
                secs, _ = clock(lambda: w.parquet(targets[name]))
                return {"total": secs}
            return go

        variants: dict[str, Callable[[], dict[str, float]]] = {
            "plain": plain("plain", None), "v1": plain("v1", "1"), "v2": plain("v2", "2"),
            "two_phase": lambda: tpc["two_phase"].run(df),
            "two_phase_no_checksums": lambda: tpc["two_phase_no_checksums"].run(df),
            "two_phase_delta": lambda: tpc["two_phase_delta"].run(df)}
        for _ in range(warmup):
            for go in variants.values():
                go()
        samples: dict[str, list[dict[str, float]]] = {k: [] for k in variants}
        load = [loadavg()]
        for _ in range(reps):
            for name, go in variants.items():  # interleaved: drift hits every variant alike
                samples[name].append(go())
            load.append(loadavg())
        res: dict[str, Any] = {"loadavg": load, "variants": {}}
        plain_med = stats([s["total"] for s in samples["plain"]])["median"]
        for name, ss in samples.items():
            entry = {phase: stats([s[phase] for s in ss]) for phase in ss[0]}
            entry["ratio_to_plain"] = round(entry["total"]["median"] / plain_med, 3) if plain_med else None
            res["variants"][name] = entry
        # same data, same number of files, same rows: check it
        outputs = {**{k: targets[k] for k in ("plain", "v1", "v2")},
                   **{k: _url(v.last_partition) for k, v in tpc.items()}}
        res["outputs"] = {k: {"path": v.removeprefix("file://"), **fingerprint(spark, v)} for k, v in outputs.items()}
        ref = res["outputs"]["plain"]
        res["outputs_equal"] = all((o["rows"], o["checksum"], o["files"]) == (ref["rows"], ref["checksum"], ref["files"])
                                   for o in res["outputs"].values())
        size = sum(f.stat().st_size for f in Path(ref["path"]).glob("*.parquet"))
        res["output_bytes"] = size
        out["sizes"][str(rows)] = res
        say("  " + ", ".join(f"{k} {v['total']['median']:.2f}s ({v['ratio_to_plain']}x)"
                             for k, v in res["variants"].items()) + f"; equal={res['outputs_equal']}")
    return out


# ---------------------------------------------------------------------------- section 3
def recovery(spark: Any, work: Path, sizes: list[int], files: int, reps: int, warmup: int) -> dict[str, Any]:
    """Full run (begin+write+pre_commit+commit) vs the recovery of a run that crashed after pre_commit."""
    out: dict[str, Any] = {"files": files, "reps": reps, "sizes": {}}
    for rows in sizes:
        say(f"recovery: {rows:,} rows")
        base = work / f"recovery_{rows}"
        shutil.rmtree(base, ignore_errors=True)
        df = frame(spark, rows, files)
        full = TwoPhase(str(base / "full"), True)
        crashed = TwoPhaseCommitSink.at(str(base / "crashed"), pipeline="bench", sink="t")
        n = 0

        def crash_then_recover() -> dict[str, Any]:
            nonlocal n
            day = (BASE_DAY + timedelta(days=n)).isoformat()
            n += 1
            iv = Interval.daily(day)
            txn = crashed.begin(iv)
            t_write, _ = clock(lambda: df.write.mode("overwrite").parquet(
                _url(crashed.storage.join(crashed.data_dir(txn), f"dt={day}"))))
            os.environ["EO_FAILPOINTS"] = "pre_commit.after=error"  # the real failpoint, in-process
            try:
                crashed.pre_commit(txn)
                raise AssertionError("failpoint pre_commit.after did not fire")
            except FailpointError:
                pass
            finally:
                os.environ.pop("EO_FAILPOINTS", None)
            # a retry: a fresh sink object (nothing cached) recovers the interval - no Spark involved
            again = TwoPhaseCommitSink.at(str(base / "crashed"), pipeline="bench", sink="t")
            t_rec, actions = clock(lambda: again.recover(iv))
            live = again.live_version(f"dt={day}")
            return {"recover": t_rec, "write_before_crash": t_write, "actions": actions,
                    "committed_without_recompute": live == txn.name}

        for _ in range(warmup):
            full.run(df)
            crash_then_recover()
        fulls, recs = [], []
        for _ in range(reps):
            fulls.append(full.run(df))
            recs.append(crash_then_recover())
        full_med = stats([f["total"] for f in fulls])["median"]
        rec_med = stats([r["recover"] for r in recs])["median"]
        out["sizes"][str(rows)] = {
            "full_run": {k: stats([f[k] for f in fulls]) for k in fulls[0]},
            "recover": stats([r["recover"] for r in recs]),
            "ratio": round(rec_med / full_med, 4),
            "actions": recs[-1]["actions"],
            "all_committed_without_recompute": all(r["committed_without_recompute"] for r in recs),
            "loadavg": loadavg()}
        say(f"  full {full_med:.2f}s, recover {rec_med:.3f}s ({out['sizes'][str(rows)]['ratio']:.1%}); "
            f"{recs[-1]['actions']}")
    return out


# ---------------------------------------------------------------------------- section 5
def gx_import_seconds(reps: int) -> dict[str, Any]:
    """``import great_expectations`` in a fresh interpreter (what the validate task pays once)."""
    code = "import time; t=time.perf_counter(); import great_expectations; print(time.perf_counter()-t)"
    env = {**os.environ, "GX_ANALYTICS_ENABLED": "false"}
    samples = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                                    check=True).stdout.strip().splitlines()[-1]) for _ in range(reps)]
    return stats(samples)


def validate_cost(spark: Any, work: Path, events: int, reps: int, warmup: int) -> dict[str, Any]:
    """The pv job's write (in-process, no JVM start) vs ``validate_staged`` on its staged output."""
    import pv_counts
    from exactly_once.quality import validate_staged
    from tools.sample_data import generate
    from tools.sample_data import pv_spec

    say(f"validate: pv job on {events:,} events")
    base = work / "validate"
    shutil.rmtree(base, ignore_errors=True)
    day = "2030-01-01"
    gen = generate(str(base / "landing"), [day], events_per_day=events, apps=500, users=max(1000, events // 10))
    staging = str(base / "staging")
    spec = pv_spec(str(base / "landing" / "app_logs"), day, staging)
    suite = str(ROOT / "expectations" / "app_pv.json")
    counts: dict[str, Any] = {}
    first_validate: dict[str, Any] = {}

    def write() -> float:
        nonlocal counts
        secs, counts = clock(lambda: pv_counts.run(spark, spec).to_dict())
        return secs

    def validate(i: int) -> float:
        secs, outcome = clock(lambda: validate_staged(
            suite_path=suite, table="app_pv", staging_dir=staging, partitions=[f"dt={day}"], counts=counts,
            prev_state_dir=None,
            report_root=str(base / "reports"), run_name=f"bench.v{i}"))
        if not outcome.passed:
            raise RuntimeError(f"validation failed on the bench data: {outcome.failures}")
        if not first_validate:
            first_validate.update(seconds=round(secs, 4), timings_ms=outcome.summary.get("timings_ms"))
        return secs

    for i in range(warmup):
        write()
        validate(-1 - i)
    writes, validates = [], []
    for i in range(reps):
        writes.append(write())
        validates.append(validate(i))
    w, v = stats(writes), stats(validates)
    res = {"events": events, "lines": gen["lines"][day], "input_files": len(spec.source().inputs),
           "rows_out": sum((counts.get("rows_written") or {}).values()), "write": w, "validate": v,
           "share_of_write": round(v["median"] / w["median"], 3), "first_validate_in_process": first_validate,
           "gx_import_fresh_process": gx_import_seconds(max(reps, 1)), "loadavg": loadavg()}
    say(f"  write {w['median']:.2f}s, validate {v['median']:.2f}s ({res['share_of_write']:.0%} of the write); "
        f"GX import {res['gx_import_fresh_process']['median']:.2f}s")
    return res
