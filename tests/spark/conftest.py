"""The Spark tests share the session-scoped ``spark`` fixture of tests/conftest.py, and those
that run the job on a cluster the session-scoped ``spark_cluster``."""

import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

# py4j's Python callback server (foreachBatch) waits on its sockets with select(), which
# cannot take a file descriptor of 1,024 or more: past that, a streaming query hangs for
# good. Leave room for Spark's own.
_MAX_OPEN_FDS = 768


@pytest.fixture(autouse=True)
def few_open_file_descriptors() -> None:
    """Fail fast, naming the cause, where a test process that leaks descriptors (an event
    loop left open, say) would make the Spark tests hang."""
    if not os.path.isdir("/proc/self/fd"):
        return
    count = len(os.listdir("/proc/self/fd"))
    assert count < _MAX_OPEN_FDS, (
        f"{count} file descriptors open in the test process: something earlier leaked them, "
        "and py4j's select() hangs past 1,024"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SparkCluster:
    """A standalone Spark cluster of this machine: one master, one worker of one core."""

    master_url: str
    spark_home: Path
    conf_dir: Path
    """The cluster's ``spark-defaults.conf`` (``SPARK_CONF_DIR``) for its submitters."""
    bare_python: Path
    """A Python of the driver's version with nothing but its standard library: what a
    cluster node has that was set up for Spark alone. Spark adds its own pyspark."""

    def submit_command(self) -> list[str]:
        return [str(self.spark_home / "bin" / "spark-submit"), "--master", self.master_url]


def _spark_home() -> Path:
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def _java_missing() -> bool:
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        return not (Path(java_home) / "bin" / "java").exists()
    return shutil.which("java") is None


def _start_daemon(
    home: Path, log: Path, env: dict[str, str], *args: str
) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        # A session of its own: stopping the worker's process group stops its executors.
        return subprocess.Popen(
            [str(home / "bin" / "spark-class"), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=_terminate_with_parent,
        )


def _terminate_with_parent() -> None:
    """SIGTERM to the daemon (its JVM, which spark-class executes in its place) when the test
    process dies without its teardown (killed); the worker's shutdown then stops its
    executors. Linux only; elsewhere the teardown alone stops them."""
    if sys.platform == "linux":
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _wait_for_line(
    process: subprocess.Popen[bytes], log: Path, pattern: str, timeout_s: float = 120
) -> re.Match[str]:
    """The first match of ``pattern`` in a daemon's log, once it is written."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = re.search(pattern, log.read_text(errors="replace"))
        if found:
            return found
        if process.poll() is not None:
            break
        time.sleep(0.2)
    raise RuntimeError(f"Spark daemon did not log {pattern!r}:\n{log.read_text()[-3000:]}")


def _stop_daemon(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """A real standalone cluster (master and worker JVMs from the venv's pyspark) for the
    tests that run the audit job as the README tells users to: spark-submit against a
    cluster. The worker's executors run Python workers of ``bare_python`` unless the
    driver names another (``PYSPARK_PYTHON``)."""
    if _java_missing():
        pytest.skip("no Java (java on the PATH or JAVA_HOME): Spark's master cannot start")
    home = _spark_home()
    base = tmp_path_factory.mktemp("spark-cluster")
    bare = base / "bare-python"
    subprocess.run(
        [getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip"]
        + [str(bare)],
        check=True,
    )
    # The cluster's own defaults, read by every spark-submit (and kpg's) that names it, in
    # place of the machine's: small executors that start quickly (the JIT's first tier, the
    # serial collector), no web UI, one partition per shuffle (the inputs are a few rows).
    conf_dir = base / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        "spark.executor.memory 512m\n"
        "spark.default.parallelism 1\n"
        "spark.sql.shuffle.partitions 1\n"
        "spark.executor.extraJavaOptions -XX:+UseSerialGC -XX:TieredStopAtLevel=1\n"
        "spark.ui.enabled false\n"
    )
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYSPARK_", "SPARK_")) and key != "PYTHONPATH"
    } | {
        "SPARK_HOME": str(home),
        "SPARK_CONF_DIR": str(conf_dir),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_WORKER_DIR": str(base / "work"),
        # No REST submission server: its port 6066 is fixed, and nothing here uses it.
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        # Small, quick daemons: the machine is shared.
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_DAEMON_JAVA_OPTS": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    }
    master_log, worker_log = base / "master.log", base / "worker.log"
    master = _start_daemon(
        home,
        master_log,
        env,
        "org.apache.spark.deploy.master.Master",
        *("--host", "127.0.0.1", "--port", "0", "--webui-port", "0"),
    )
    worker: subprocess.Popen[bytes] | None = None
    try:
        url = _wait_for_line(master, master_log, r"Starting Spark master at (spark://\S+)")[1]
        _wait_for_line(master, master_log, r"I have been elected leader")
        worker = _start_daemon(
            home,
            worker_log,
            env,
            "org.apache.spark.deploy.worker.Worker",
            url,
            *("--host", "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", "0"),
        )
        _wait_for_line(worker, worker_log, r"Successfully registered with master")
        yield SparkCluster(
            master_url=url, spark_home=home, conf_dir=conf_dir, bare_python=bare / "bin" / "python"
        )
    finally:
        if worker is not None:
            _stop_daemon(worker)
        _stop_daemon(master)
