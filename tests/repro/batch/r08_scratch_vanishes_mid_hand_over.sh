#!/bin/sh
# REAL Spark. Two writes of one batch at once (an Airflow retry of the host while the old try is a
# zombie: same batch id, same <home>/_batches/<id>/scratch): one's cleanup (BatchRun._write_spec /
# finish remove the scratch) removes the other's output between its Spark write and its hand-over;
# BatchContext._hand_over took the missing dir for "no rows" and staged EMPTY state/data files, then the
# counts. On main the job "succeeds"; the test asserts it fails and that nothing looks written.
cd "$(dirname "$0")/../../.." && PYTHONPATH=$PWD/plugins:$PWD .venv/bin/python -m pytest -q -p no:cacheprovider \
  tests/integration/test_batch.py -k vanishes
