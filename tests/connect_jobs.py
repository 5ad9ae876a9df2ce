"""Spark Connect write jobs for the tests that kill a write under its client or its server
(tests/integration/test_fault_matrix_connect.py, test_spark_connect.py)."""
# A Spark Connect write job whose FIRST attempt (no marker file yet) runs an endless write into the partition's
# output dir - to be killed under (its client, or the server) - and whose later attempts run the pv job. Format
# with job (the pv job's path), first (the marker) and started (created as the write starts).
# The endless write is KILLABLE the way a real job is (it reads input: a file scan or a shuffle read checks
# Spark's kill flag row by row): its rows pass through a Python function, whose worker Spark kills once the
# task is marked killed. A bare ``spark.range(...)`` write is not: its generated loop checks the kill flag only
# at the end of a batch of 1,000 rows, which a row-at-a-time consumer (the writer) never reaches, so only the
# thread interrupt can stop it - and Hadoop's Shell swallows that interrupt when it lands while the task
# chmods its new output dirs (RawLocalFileSystem.setPermission without the native library). Such a task runs
# on for hours after its query was interrupted, holding the server's cores: every later write on the shared
# server hung (what failed these cells, and the Spark tests after them, in the full suite's order).
SLOW_FIRST_JOB = '''
import os
import time
from exactly_once.airflow.write import load_compute

pv = load_compute({job!r})


def compute(ctx):
    if not os.path.exists({first!r}):
        open({first!r}, "w").close()
        open({started!r}, "w").close()

        def crawl(batches):  # nested: pickled by value (this module cannot be imported on the server)
            for batch in batches:
                time.sleep(0.2)
                yield batch

        (ctx.spark.range(0, 10 ** 12, 1, 4).mapInArrow(crawl, "id long")
         .write.mode("overwrite").parquet(ctx.output_dir(ctx.partitions[0])))
    return pv(ctx)
'''
