"""A local Spark Connect server for the write phase (``make spark-connect`` / ``make spark-connect-stop``).

    python -m tools.spark_connect start [--port 15002] [--master local[*]] [--dir .spark-connect]
    python -m tools.spark_connect stop
    python -m tools.spark_connect status

``start`` launches pip's pyspark (``spark-submit --class ...SparkConnectServer``; the server jar ships in
``pyspark/jars``) in the background, bound to 127.0.0.1 only, writes its pid and log under ``--dir``,
and returns once the port accepts connections. It is idempotent: a server already answering on the
port is left alone. ``stop`` terminates the process of the pid file (SIGTERM, then SIGKILL) and waits
for the port to close. Point the write phase at it with ``EO_SPARK_REMOTE=sc://127.0.0.1:15002``.
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
HOST = "127.0.0.1"
PORT = 15002
STATE_DIR = Path(__file__).resolve().parents[1] / ".spark-connect"
SERVER_CONF = {
    "spark.connect.grpc.binding.address": HOST,
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "8",
}


@dataclass(frozen=True)
class Server:
    """Where a local Spark Connect server listens and keeps its pid/log files."""

    port: int = PORT
    state_dir: Path = STATE_DIR
    master: str = "local[*]"

    @property
    def url(self) -> str:
        return f"sc://{HOST}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / f"server-{self.port}.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / f"server-{self.port}.log"

    def pid(self) -> int | None:
        """The recorded server pid when that process is still alive, else None."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        try:  # our own child (the test fixture's server) stays a zombie, alive to kill(0), until reaped
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return None
        except ChildProcessError:  # not our child: `make spark-connect` started it
            pass
        try:
            os.kill(pid, 0)
            return pid
        except OSError:
            return None


def accepts(port: int, host: str = HOST, timeout: float = 0.5) -> bool:
    """True if something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def spark_submit() -> str:
    """pip's pyspark ``spark-submit`` (next to this interpreter)."""
    import pyspark

    path = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    if not path.exists():
        raise SystemExit(f"spark-submit not found at {path}; run `make install`")
    return str(path)


def start(server: Server, *, timeout: float = 120.0, extra_conf: dict[str, str] | None = None) -> str:
    """Start the server unless it already answers; return its ``sc://`` URL once it accepts connections."""
    if accepts(server.port):
        return server.url
    server.state_dir.mkdir(parents=True, exist_ok=True)
    conf = {**SERVER_CONF, "spark.connect.grpc.binding.port": str(server.port), **(extra_conf or {})}
    cmd = [spark_submit(), "--master", server.master, "--name", f"Spark Connect server {server.port}",
           "--class", SERVER_CLASS]
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": HOST}
    with open(server.log_file, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
    server.pid_file.write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if accepts(server.port):
            return server.url
        if proc.poll() is not None:
            server.pid_file.unlink(missing_ok=True)
            raise SystemExit(f"the Spark Connect server exited with {proc.returncode}; see {server.log_file}")
        time.sleep(0.5)
    stop(server)
    raise SystemExit(f"the Spark Connect server did not accept connections on {HOST}:{server.port} within "
                     f"{timeout:.0f} s; see {server.log_file}")


def stop(server: Server, *, timeout: float = 30.0) -> bool:
    """Stop the server of the pid file (its whole process group); True if one was running."""
    pid = server.pid()
    if pid is None:
        server.pid_file.unlink(missing_ok=True)
        return False
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and server.pid() is not None:
            time.sleep(0.2)
        if server.pid() is None:
            break
    server.pid_file.unlink(missing_ok=True)
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.spark_connect", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cmd", choices=("start", "stop", "status"))
    p.add_argument("--port", type=int, default=int(os.environ.get("EO_SPARK_CONNECT_PORT", PORT)))
    p.add_argument("--master", default=os.environ.get("EO_SPARK_CONNECT_MASTER", "local[*]"))
    p.add_argument("--dir", type=Path, default=STATE_DIR, help="pid and log files")
    args = p.parse_args(argv)
    server = Server(args.port, args.dir, args.master)
    if args.cmd == "start":
        t0 = time.perf_counter()
        was_up = accepts(server.port)
        url = start(server)
        how = "already running" if was_up else f"started in {time.perf_counter() - t0:.0f} s"
        print(f"Spark Connect server {how}: {url}  (log: {server.log_file})")
        print(f"  use it: export EO_SPARK_REMOTE={url}")
        return 0
    if args.cmd == "stop":
        print("Spark Connect server stopped" if stop(server) else "no Spark Connect server was running")
        return 0
    up = accepts(server.port)
    print(f"{server.url}: {'accepting connections' if up else 'not running'}")
    return 0 if up else 1


if __name__ == "__main__":
    sys.exit(main())
