"""failure_reason() (tools/localrun.py) reports a stale error of an EARLIER try, and prints a secret the
spark-submit hook itself masked. Realistic `airflow dags test` log of the hosting begin task, Airflow 3.3 +
apache-spark provider installed here: the hook logs every job line raw (log.info(line)) and appends a
_mask_cmd()-masked tail ("Last spark-submit output:", last 20 lines) to "Cannot execute: ...".
Exit 1 on a break."""
import sys, tempfile
from pathlib import Path
sys.path[:0] = [str(Path(__file__).resolve().parents[3])]
from tools import localrun

HOOK = "[airflow.task.hooks.airflow.providers.apache.spark.hooks.spark_submit.SparkSubmitHook] loc=spark_submit.py:965"
TS = "2026-11-27T05:03:47.9Z"
def hook(line): return f"{TS} [info     ] {line} {HOOK}"
def task_failed(code, tail):
    return [f"{TS} [error    ] Task failed with exception     [task] loc=task_runner.py:1651",
            "Traceback (most recent call last):",
            '  File "/x/airflow/sdk/execution_time/task_runner.py", line 1579, in _run_task_and_map_outcome',
            f"airflow.sdk.exceptions.AirflowException: Cannot execute: spark-submit --master local[*] job.py --batch x. Error code is: {code}.",
            "Last spark-submit output:", *tail]
SHUTDOWN = [f"26/11/27 05:03:4{i % 10} INFO SparkContext/BlockManager/ShutdownHookManager: shutdown step {i}" for i in range(22)]
breaks = []

# A: try 1's job failed on a transient network error; try 2 (2 s later) was OOM-killed: exit 137, no exception.
job1 = [hook("Traceback (most recent call last):"), hook('File "/x/job.py", line 6, in compute_batch'),
        hook("ConnectionResetError: [Errno 104] Connection reset by peer")]
tail1 = ["Traceback (most recent call last):", 'File "/x/job.py", line 6, in compute_batch',
         "ConnectionResetError: [Errno 104] Connection reset by peer"]
job2 = [hook("26/11/27 05:03:50 INFO SparkContext: Running Spark version 4.0.1"), hook("Killed")]
tail2 = ["26/11/27 05:03:50 INFO SparkContext: Running Spark version 4.0.1", "Killed"]
log = Path(tempfile.mkdtemp()) / "a.log"
log.write_text("\n".join(job1 + task_failed(1, tail1) + [f"{TS} [info     ] retrying in 2 s [task]"] + job2 + task_failed(137, tail2)) + "\n")
why = localrun.failure_reason(log)
print("A (final try exit 137, no job exception):", why)
if "ConnectionResetError" in why or "137" not in why:
    breaks.append("A: reports try 1's ConnectionResetError as why the run failed; the last try died with exit 137")

# B: one try: the job's error line names a password; >20 lines of Spark shutdown follow, so the hook's
# masked tail holds only those, and failure_reason digs the RAW hook line out of the log.
job = [hook("Traceback (most recent call last):"),
       hook("ValueError: cannot open jdbc source: user=etl password=hunter2 url=jdbc:postgresql://db/x"),
       *[hook(s) for s in SHUTDOWN]]
tail = [localrun.re.sub(r"password=\S+", "password=******", s) for s in SHUTDOWN[-20:]]  # the hook's _mask_cmd
log.write_text("\n".join(job + task_failed(1, tail)) + "\n")
why = localrun.failure_reason(log)
print("B (secret in the job's error line):", why)
if "hunter2" in why:
    breaks.append("B: failure_reason prints password=hunter2 (the hook masked it in its own tail)")

print("\n".join(["BREAK " + b for b in breaks]) or "held")
sys.exit(1 if breaks else 0)
