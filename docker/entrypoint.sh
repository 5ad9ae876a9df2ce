#!/usr/bin/env bash
# Image entrypoint: `docker run IMAGE scheduler` runs `airflow scheduler` (like the official image);
# anything that is a program on PATH (bash, spark-class, spark-submit, python ...) runs as it is.
set -euo pipefail
# An arbitrary --user uid has no passwd entry; Hadoop/Spark (UnixLoginModule) then fail with
# "invalid null input: name". The image makes /etc/passwd group-writable for exactly this.
if ! whoami >/dev/null 2>&1 && [[ -w /etc/passwd ]]; then
  echo "airflow:x:$(id -u):0:airflow:${AIRFLOW_HOME:-/opt/airflow}:/bin/bash" >> /etc/passwd
fi
if [[ $# -eq 0 ]]; then
  exec airflow version
fi
if command -v -- "$1" >/dev/null 2>&1; then
  exec "$@"
fi
exec airflow "$@"
