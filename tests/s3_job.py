"""pv_pipeline's write job as ``spark-submit`` (or a Spark Connect client) runs it on S3 here, through the
library's own ``run_job``: it reads its spec (``--spec``) or batch spec (``--batch``), checks the frozen
inputs and writes the counts last, all with the storage options the write task handed the job
(``EO_JOB_STORAGE_OPTIONS`` in spark-submit's environment; a Spark Connect write passes them directly).

pip's PySpark has no s3a jars, so local Spark starts (run_job's session) but the rows are computed by the
oracle stand-in (``tests/pv_standin.py``, ``tests/batch_helpers.py``) through the same options: the
job's output contract, reading and writing S3 directly.
"""
from __future__ import annotations

import sys

from exactly_once.contracts import SPEC, Counts
from exactly_once.job import BatchContext, JobContext, run_job


def compute(ctx: JobContext) -> Counts:
    """One interval: the stand-in's rows, state and quarantine in the staging dir (on S3)."""
    from pv_standin import stage_write

    return Counts.from_dict(stage_write(ctx.spec.staging_dir.rstrip("/") + "/" + SPEC, ctx.storage_options))


def compute_batch(ctx: BatchContext) -> list[Counts]:
    """A batch: the stand-in's batch write of the ``--batch`` spec, chained like the real job's."""
    from batch_helpers import stage_batch_write

    url = sys.argv[sys.argv.index("--batch") + 1]
    return [Counts.from_dict(c) for c in stage_batch_write(url, ctx.jobs[0].storage_options)]


if __name__ == "__main__":
    raise SystemExit(run_job(compute, compute_batch=compute_batch))
