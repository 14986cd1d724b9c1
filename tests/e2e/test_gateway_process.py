"""`kpg run` as users run it: a separate process, real clients, and the broker's own view."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config import HostPort
from gateway.embedded import free_port
from tests.inproc.test_clients import consume_assigned, create_topic, produce

pytestmark = pytest.mark.e2e

KPG = str(Path(sys.executable).with_name("kpg"))
ROOT = Path(__file__).resolve().parents[2]


def kpg_audit_report(input_path: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """``kpg audit report`` of ``input_path`` (a table or a spool) into ``out``, on one core."""
    return subprocess.run(
        [KPG, "audit", "report", "--input", str(input_path), "--out", str(out)]
        + ["--master", "local[1]"],
        capture_output=True,
        text=True,
        timeout=300,
    )


def kpg_env() -> dict[str, str]:
    """The environment for a ``kpg`` process: the checkout on PYTHONPATH, so that a config
    may name the test plug-ins (``tests.plugins...``), which the installed package lacks."""
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths))


def kpg_config(directory: Path, upstream: HostPort, **extra: Any) -> Path:
    """A `kpg run` configuration file in ``directory``: a free listen port, per-node ports
    of the operating system's choosing, ``upstream``, a state file of its own, and ``extra``
    sections as given."""
    raw: dict[str, Any] = {
        "listen": f"127.0.0.1:{free_port()}",
        "node_port_base": 0,
        "upstream": {"bootstrap_servers": [str(upstream)]},
        "state": {"path": str(directory / "state.db")},
        **extra,
    }
    path = directory / "gateway.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def start_kpg(*args: str) -> tuple[subprocess.Popen[str], str]:
    """`kpg run` with ``args``; one process (``--workers 1``) unless they say otherwise."""
    if "--workers" not in args:
        args = (*args, "--workers", "1")
    process = subprocess.Popen(
        [KPG, "run", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=kpg_env(),
    )
    assert process.stdout is not None
    deadline = time.monotonic() + 30
    process.embedded_line = ""  # type: ignore[attr-defined]
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if "embedded" in line:
            process.embedded_line = line  # type: ignore[attr-defined]
        match = re.search(r"bootstrap.servers=(\S+)", line)
        if match:
            return process, match.group(1)
        if not line and process.poll() is not None:
            break
    process.kill()
    raise AssertionError(f"kpg did not start: {process.stderr.read() if process.stderr else ''}")


@pytest.fixture
def kpg_process(broker: HostPort) -> Iterator[tuple[subprocess.Popen[str], str]]:
    process, bootstrap = start_kpg(
        "--upstream", str(broker), "--listen", f"127.0.0.1:{free_port()}", "--node-port-base", "0"
    )
    try:
        yield process, bootstrap
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)


def broker_peers(broker: HostPort) -> list[tuple[str, int | None]]:
    """(local address, owning pid) of every established connection to the broker's port."""
    out = subprocess.run(
        ["ss", "-tnpH", "state", "established", f"( dport = :{broker.port} )"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    peers = []
    for line in out.splitlines():
        fields = line.split()
        pid = re.search(r"pid=(\d+)", line)
        peers.append((fields[2], int(pid.group(1)) if pid else None))
    return peers


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
def test_every_broker_connection_comes_from_the_gateway(
    kpg_process: tuple[subprocess.Popen[str], str], broker: HostPort, topic_name: str
) -> None:
    process, bootstrap = kpg_process
    seen: list[tuple[str, int | None]] = []
    stop = threading.Event()

    vanished: set[str] = set()

    def sample() -> None:
        while not stop.is_set():
            peers = broker_peers(broker)
            if any(pid is None for _, pid in peers):
                # ss lists the processes' sockets before it lists connections, so one opened
                # in between has no owner yet: look again straight away.
                again = dict(broker_peers(broker))
                gone = {local for local, pid in peers if pid is None and local not in again}
                vanished.update(gone)
                # Only this sample's ownerless entry of a vanished socket is set aside; the
                # address stays judged wherever else it is seen.
                peers = [
                    (local, pid if pid is not None else again.get(local))
                    for local, pid in peers
                    if not (pid is None and local in gone)
                ]
            seen.extend(peers)
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        create_topic(bootstrap, topic_name, partitions=2)
        sent = produce(bootstrap, topic_name, 200, "zstd")
        assert sorted(consume_assigned(bootstrap, topic_name, 2, 200)) == sorted(sent)
        if shutil.which("kcat"):
            subprocess.run(
                ["kcat", "-b", bootstrap, "-L"], check=True, capture_output=True, timeout=30
            )
            subprocess.run(
                ["kcat", "-b", bootstrap, "-C", "-t", topic_name, "-o", "beginning", "-e", "-q"],
                check=True,
                capture_output=True,
                timeout=30,
            )
    finally:
        stop.set()
        sampler.join()
    assert seen, "no broker connection was observed while the clients ran"
    owners = {pid for _, pid in seen if pid is not None}
    assert owners == {process.pid}, (
        f"broker connections owned by {owners}, gateway is {process.pid}"
    )
    # Still without an owner on the second look: a socket between its owner's close() and the
    # end of the TCP connection, which must be one seen owned by the gateway.
    gateway_sockets = {local for local, pid in seen if pid == process.pid}
    assert {local for local, pid in seen if pid is None} <= gateway_sockets
    # Gone before the second look: too short-lived to be a client that learned a broker
    # address (a client keeps that connection), and unattributable; reported, not judged.
    if vanished - gateway_sockets:
        warnings.warn(
            f"broker connections too short-lived to attribute: {sorted(vanished)}", stacklevel=1
        )


def test_bad_config_names_the_key(tmp_path: Path) -> None:
    config = tmp_path / "gw.yaml"
    config.write_text("listen: 127.0.0.1:9092\nlimits:\n  max_in_flight: 5\n")
    result = subprocess.run(
        [KPG, "run", "--config", str(config)], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 2
    assert "limits.max_in_flight" in result.stderr and str(config) in result.stderr


def kpg_check(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KPG, "run", "--config", str(config), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        env=kpg_env(),
    )


def test_check_says_whether_the_gateway_would_start(tmp_path: Path) -> None:
    """kpg run --check: 0 and one line for a configuration the gateway would start with;
    2 and start-up's message for one it would not, found without starting: a plug-in class
    that is no record validation policy, a listener certificate file that is no certificate
    (which loading the file alone lets through). The upstream is a closed port: nothing is
    reached."""
    closed = HostPort(host="127.0.0.1", port=1)
    good = kpg_config(tmp_path, closed)
    result = kpg_check(good)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"kpg: configuration OK ({good}): policy version sha256:")
    assert "upstream 127.0.0.1:1" in result.stdout

    failing = tmp_path / "plug-in"
    failing.mkdir()
    plugin = "tests.plugins.kafka_test_policies.RecordingAlterConfigV2Policy"
    config = kpg_config(failing, closed, policies={"record.validation.policy.class.name": plugin})
    result = kpg_check(config)
    assert result.returncode == 2
    assert "kpg: configuration error:" in result.stderr
    assert f"policies.record.validation.policy.class.name: {plugin}" in result.stderr

    no_certificate = tmp_path / "tls"
    no_certificate.mkdir()
    not_pem = no_certificate / "not.pem"
    not_pem.write_text("not a certificate\n")
    config = kpg_config(
        no_certificate, closed, tls={"cert_file": str(not_pem), "key_file": str(not_pem)}
    )
    result = kpg_check(config)
    assert result.returncode == 2
    assert "tls: cannot load certificates" in result.stderr


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_record_scanner_it_does_not_know_stops_kpg_run_with_one_line(workers: str) -> None:
    """README: any KPG_RECORD_SCANNER other than native or python is refused. kpg run says so
    in one line and exits 2, before it starts an embedded broker or a worker (it was a
    traceback, and under a supervisor each worker's, until the supervisor gave up)."""
    ports = ["--listen", f"127.0.0.1:{free_port()}", "--node-port-base", str(free_port())]
    result = subprocess.run(
        [KPG, "run", "--upstream", "127.0.0.1:1", *ports, "--workers", workers],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(kpg_env(), KPG_RECORD_SCANNER="c"),
    )
    assert result.returncode == 2, result.stderr
    assert "kpg: KPG_RECORD_SCANNER='c': expected native or python" in result.stderr
    assert "Traceback" not in result.stderr, result.stderr


def test_embedded_broker_by_default_and_sigterm_stops_cleanly() -> None:
    process, bootstrap = start_kpg("--listen", f"127.0.0.1:{free_port()}", "--node-port-base", "0")
    try:
        create_topic(bootstrap, "embedded-check")
        assert produce(bootstrap, "embedded-check", 10)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    assert process.stdout is not None
    out = process.stdout.read()
    assert "shutting down" in out
    # The installed gateway reads records with the C scanners, and says so.
    assert process.stderr is not None
    assert "record scanner native" in process.stderr.read()
    # The embedded broker went with it: its port no longer accepts connections.
    embedded = re.search(r"embedded Tansu broker on 127.0.0.1:(\d+)", process.embedded_line)
    assert embedded is not None
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(embedded.group(1))), timeout=2)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_the_gateway_stops_when_its_embedded_broker_dies(workers: str) -> None:
    """`make run`'s broker is the gateway's child, in memory: when it exits on its own (a
    crash, a kill), its topics and records are gone. The gateway went on listening, /readyz
    503 and every client closed with "no broker reachable" naming a loopback port, and
    nothing said the embedded broker was gone; it now says so and exits 1."""
    process, _ = start_kpg(
        "--listen",
        f"127.0.0.1:{free_port()}",
        "--node-port-base",
        str(free_port()),
        "--workers",
        workers,
    )
    try:
        os.kill(_embedded_broker_pid(process), signal.SIGKILL)
        assert process.wait(60) == 1
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.stderr is not None
    said = process.stderr.read()
    assert "the embedded broker exited" in said, said
    assert "Traceback" not in said


def _embedded_broker_pid(process: subprocess.Popen[str]) -> int:
    children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
    (broker,) = [
        pid
        for pid in map(int, children)
        if "tansu" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    ]
    return broker


def test_the_embedded_broker_goes_when_the_gateway_is_killed() -> None:
    """`make run`'s broker outlived a gateway killed with SIGKILL (or by the OOM killer): it
    kept the topics in memory and answered on its loopback port, with no gateway in front,
    for as long as the machine ran. The kernel now sends it SIGTERM when the gateway dies."""
    process, _ = start_kpg("--listen", f"127.0.0.1:{free_port()}", "--node-port-base", "0")
    broker = _embedded_broker_pid(process)
    embedded = re.search(r"embedded Tansu broker on 127.0.0.1:(\d+)", process.embedded_line)
    assert embedded is not None
    process.kill()
    process.wait(30)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{broker}").exists() and _state(broker) != "Z":
        assert time.monotonic() < deadline, "the embedded broker outlived its gateway"
        time.sleep(0.1)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(embedded.group(1))), timeout=2)


def _state(pid: int) -> str:
    """A process's state letter (Z: exited, not yet reaped by its new parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


def test_log_format_json_writes_one_object_per_line(broker: HostPort) -> None:
    process, _ = start_kpg(
        "--upstream",
        str(broker),
        "--listen",
        f"127.0.0.1:{free_port()}",
        "--node-port-base",
        "0",
        "--log-format",
        "json",
    )
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=30)

    lines = [json.loads(line) for line in stderr.splitlines()]  # every line is one object
    assert process.returncode == 0
    assert lines and all(
        list(line) == ["time", "level", "logger", "message", "exception"] for line in lines
    )
    assert any(
        line["logger"] == "gateway.server" and "bootstrap listener on" in line["message"]
        for line in lines
    )
    assert all(
        re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["time"]) for line in lines
    )
