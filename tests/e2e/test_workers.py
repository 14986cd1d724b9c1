"""`kpg run --workers N` and live operation as users run them: the real `kpg run` in a process
of its own, real clients, the real broker; which worker serves a connection is read from the
kernel (`ss -p`: the pid owning the gateway's end of it)."""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest

from gateway.config import HostPort
from gateway.embedded import EmbeddedBroker, free_port
from protocol import client_configs as wire
from protocol.alter_configs import SET
from protocol.codec import decode_response
from protocol.framing import SIZE
from tests.batches import record, uncompressed_batch
from tests.e2e.test_gateway_process import KPG, kpg_env, start_kpg
from tests.enforcement_support import produce as produce_request
from tests.inproc.test_clients import consume_assigned, create_topic, produce
from tests.support import RawClient, make_pki, outcome, unique_name, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)"),
]

TANSU_NODE_ID = 111
PLUGINS = "tests.plugins.kafka_test_policies"
INVALID_RECORD = 87
POLICY_VIOLATION = 44


# --- a gateway of several workers --------------------------------------------------------


class Running:
    """A `kpg run` process (the supervisor with --workers N) and what it was given."""

    def __init__(self, process: subprocess.Popen[str], bootstrap: str, config: Path) -> None:
        self.process = process
        self.bootstrap = bootstrap
        self.config = config
        raw = yaml.safe_load(config.read_text())
        self.port = int(bootstrap.rpartition(":")[2])
        self.node_port = int(raw["node_port_base"]) + TANSU_NODE_ID
        self.metrics_url = f"http://{raw['metrics']}"
        self.spool = Path(raw["audit"]["spool_dir"])
        self.pid_file = pid_file(config)
        self.stderr_lines: list[str] = []
        assert process.stderr is not None
        stderr = process.stderr
        self._reader = threading.Thread(
            target=lambda: self.stderr_lines.extend(iter(stderr.readline, "")), daemon=True
        )
        self._reader.start()

    def stderr(self) -> str:
        return "".join(self.stderr_lines)

    def workers(self) -> set[int]:
        """The pids of the supervisor's children now."""
        return children(self.process.pid)

    def metric(self, name: str, **labels: str) -> float:
        """One sample of the whole gateway's scrape (0 when absent)."""
        status, text = get(self.metrics_url + "/metrics")
        assert status == 200, f"{status} {text}\n{self.stderr()}"
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            sample, _, value = line.rpartition(" ")
            metric, _, label_text = sample.partition("{")
            if metric != name:
                continue
            found = dict(re.findall(r'(\w+)="([^"]*)"', label_text))
            if all(found.get(k) == v for k, v in labels.items()):
                return float(value)
        return 0.0

    def policy_versions(self) -> dict[str, float]:
        """``kpg_policy_version`` of the whole gateway: version -> 1 while a worker has it in
        force, 0 for one a reload replaced."""
        return {labels["version"]: v for labels, v in self.samples("kpg_policy_version")}

    def set_policies(self, **keys: Any) -> None:
        """Rewrite the config file with ``keys`` set in its ``policies`` section."""
        raw = yaml.safe_load(self.config.read_text())
        raw["policies"].update(keys)
        self.config.write_text(yaml.safe_dump(raw))

    def samples(self, name: str) -> list[tuple[dict[str, str], float]]:
        """Every sample of ``name`` in one scrape of the whole gateway: (labels, value)."""
        status, text = get(self.metrics_url + "/metrics")
        assert status == 200, f"{status} {text}\n{self.stderr()}"
        found = []
        for line in text.splitlines():
            sample, _, value = line.rpartition(" ")
            metric, _, label_text = sample.partition("{")
            if not line.startswith("#") and metric == name:
                found.append((dict(re.findall(r'(\w+)="([^"]*)"', label_text)), float(value)))
        return found

    def reload(self, status: int = 0) -> str:
        """`kpg reload --pid-file`: it waits for the gateway's outcome; its exit status must
        be ``status``; returns what it printed."""
        done = subprocess.run(
            [KPG, "reload", "--pid-file", str(self.pid_file)],
            capture_output=True,
            text=True,
            timeout=200,
        )
        assert done.returncode == status, f"{done}\n{self.stderr()}"
        return done.stdout + done.stderr

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        status = self.process.wait(60)
        self._reader.join(30)  # every line it wrote is in stderr()
        return status


def children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so split after its ")"
        state, ppid = stat.rpartition(")")[2].split()[:2]
        if int(ppid) == pid and state != "Z":
            found.add(int(entry.name))
    return found


def owners(port: int) -> dict[str, int]:
    """Client ``host:port`` -> the pid that holds the gateway's end of that connection to
    ``port``."""
    out = subprocess.run(
        ["ss", "-tnpH", "state", "established", f"( sport = :{port} )"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = {}
    for line in out.splitlines():
        fields = line.split()
        pid = re.search(r"pid=(\d+)", line)
        if pid:
            found[fields[3]] = int(pid.group(1))
    return found


def local(client: RawClient) -> str:
    """The client's end of its connection, as :func:`owners` names it."""
    host, port = client.sock.getsockname()[:2]
    return f"{host}:{port}"


def get(url: str) -> tuple[int, str]:
    """(status, body) of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def write_config(directory: Path, upstream: HostPort, **extra: Any) -> Path:
    node_port = free_port()
    raw: dict[str, Any] = {
        "listen": f"127.0.0.1:{free_port()}",
        "node_port_base": node_port - TANSU_NODE_ID,
        "metrics": f"127.0.0.1:{free_port()}",
        "shutdown_timeout_s": 5,
        "upstream": {
            "bootstrap_servers": [str(upstream)],
            "connect_timeout_s": 3,
            "ignores_validate_only": True,
            "topic_config_source_unreliable": True,
            "broker_defaults": {"num.partitions": 3, "default.replication.factor": 1},
        },
        "state": {"path": str(directory / "state.db"), "refresh_interval_s": 3600},
        "audit": {"spool_dir": str(directory / "audit"), "segment_max_age_s": 0.5},
    }
    raw.update(extra)
    path = directory / "gateway.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def refused_start(config: Path) -> subprocess.CompletedProcess[str]:
    """``kpg run --workers 2`` on ``config``, which it must refuse (exit 2) before serving."""
    process = subprocess.run(
        [KPG, "run", "--config", str(config), "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        env=kpg_env(),
    )
    assert process.returncode == 2, process.stderr
    return process


def pid_file(config: Path) -> Path:
    return config.with_name("kpg.pid")


def start(config: Path, workers: int = 2) -> Running:
    process, bootstrap = start_kpg(
        "--config", str(config), "--workers", str(workers), "--pid-file", str(pid_file(config))
    )
    running = Running(process, bootstrap, config)
    assert wait_for(lambda: len(running.workers()) == workers, timeout=30)
    assert wait_for(lambda: running.metric("kpg_workers", state="ready") == workers, timeout=60)
    return running


@pytest.fixture
def two_workers(broker: HostPort, tmp_path: Path) -> Iterator[Running]:
    running = start(write_config(tmp_path, broker))
    try:
        yield running
    finally:
        if running.process.poll() is None:
            running.stop()


def clients_on_each_worker(
    running: Running, workers: int = 2, port: int | None = None
) -> dict[int, RawClient]:
    """One open connection served by each worker (to the bootstrap port, or ``port``):
    connections are opened, each from a loopback address of its own (127.0.0.2, 127.0.0.3,
    ...), until the supervisor has steered one to each worker (by a hash of the client's
    address, and of its port unless a per-address limit is set)."""
    port = running.port if port is None else port
    chosen: dict[int, RawClient] = {}
    spare: list[RawClient] = []
    for n in range(2, 200):
        client = RawClient(f"127.0.0.1:{port}", source=f"127.0.0.{n}")
        assert wait_for(lambda c=client: local(c) in owners(port), timeout=10)
        pid = owners(port)[local(client)]
        if pid in chosen:
            spare.append(client)
        else:
            chosen[pid] = client
        if len(chosen) == workers:
            break
    for client in spare:
        client.close()
    assert len(chosen) == workers, f"every connection went to {set(chosen)}"
    return chosen


def raw_produce(client: RawClient, topic: str, headers: tuple[tuple[bytes, bytes], ...]) -> int:
    """One record through ``client`` (Produce v9, acks=-1); the partition's error code."""
    batch = uncompressed_batch((record(0, None, b"v", headers),), idempotent=False)
    frame = produce_request(9, {(topic, 0): batch})
    client.send_bytes(SIZE.pack(len(frame)) + frame)
    answer = decode_response(0, 9, client.recv_frame())
    return int(answer.responses[0].partition_responses[0].error_code)


def raw_set_validation(client: RawClient, topic: str, policy: str) -> int:
    """IncrementalAlterConfigs v1 of the topic's record.validation.policy; its error code."""
    client.send_bytes(
        wire.incremental_alter_request(
            [(2, topic, [("record.validation.policy", SET, policy)])],
            validate_only=False,
            correlation_id=1,
            client_id="raw-test",
        )
    )
    (result,) = wire.read_incremental_alter_response(client.recv_frame())
    return int(result.error_code)


def validated_topic(running: Running) -> str:
    """A new topic whose records must carry a trace-id header."""
    topic = unique_name("workers")
    admin = AdminClient({"bootstrap.servers": running.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    client = RawClient(running.bootstrap)
    try:
        assert raw_set_validation(client, topic, "trace-id") == 0
    finally:
        client.close()
    return topic


def spool_events(spool: Path) -> list[dict[str, Any]]:
    """Every event of every completed segment of every worker's spool."""
    events = []
    for segment in sorted(spool.glob("worker-*/events-*.jsonl")):
        events.extend(json.loads(line) for line in segment.read_text().splitlines())
    return events


# --- the tests ---------------------------------------------------------------------------


def test_two_workers_behind_one_port_serve_real_clients(
    two_workers: Running, topic_name: str
) -> None:
    running = two_workers
    workers = running.workers()
    served = clients_on_each_worker(running)
    assert set(served) == workers, "both workers accept connections on the one port"
    for client in served.values():
        client.close()

    create_topic(running.bootstrap, topic_name, partitions=2)
    sent = produce(running.bootstrap, topic_name, 200, "zstd")
    assert sorted(consume_assigned(running.bootstrap, topic_name, 2, 200)) == sorted(sent)
    # One scrape covers both workers: the connections both of them accepted are summed.
    assert running.metric("kpg_connections_total", listener="bootstrap") >= 2
    assert running.stop() == 0
    # The workers stopped at once: no task of theirs kept them to the shutdown timeout.
    assert running.stderr().count("gateway stopped") == 2
    assert "shutdown timeout" not in running.stderr()


def test_a_policy_set_through_one_worker_decides_the_next_request_on_the_other(
    two_workers: Running,
) -> None:
    running = two_workers
    topic = unique_name("workers")
    admin = AdminClient({"bootstrap.servers": running.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    (pid_a, one), (pid_b, other) = clients_on_each_worker(running).items()
    assert pid_a != pid_b
    assert raw_produce(other, topic, ()) == 0

    assert raw_set_validation(one, topic, "trace-id") == 0
    # At once, on the other worker's connection: no refresh interval to wait for (it is an
    # hour in this config).
    assert raw_produce(other, topic, ()) == INVALID_RECORD
    assert raw_produce(other, topic, ((b"trace-id", b"t-1"),)) == 0
    assert raw_produce(one, topic, ()) == INVALID_RECORD


def test_a_killed_worker_loses_no_completed_segment_and_is_started_again(
    two_workers: Running,
) -> None:
    running = two_workers
    topic = validated_topic(running)
    victim, survivor = sorted(running.workers())
    served = clients_on_each_worker(running)
    for client in served.values():
        # Refused and audited (before the answer leaves) by the worker serving it.
        assert raw_produce(client, topic, ()) == INVALID_RECORD
    # Completed within segment_max_age_s (0.5 s here) and the sink's next maintenance.
    assert wait_for(lambda: len(list(running.spool.glob("worker-*/events-*.jsonl"))) >= 2, 30)
    before = {p: p.read_bytes() for p in running.spool.glob("worker-*/events-*.jsonl")}
    # Counted from here: this test is about the restart its kill causes.
    restarts = running.metric("kpg_worker_restarts_total")

    os.kill(victim, signal.SIGKILL)
    assert wait_for(lambda: len(running.workers() - {victim}) == 2, 60)
    assert survivor in running.workers(), running.stderr()
    (newcomer,) = running.workers() - {survivor}
    assert wait_for(lambda: running.metric("kpg_workers", state="ready") == 2, timeout=60)
    assert running.metric("kpg_worker_restarts_total") == restarts + 1, running.stderr()
    for client in served.values():
        client.close()

    for path, data in before.items():
        assert path.read_bytes() == data, f"{path} changed or went missing"
    # The newcomer serves: a connection lands on it and is answered.
    fresh = clients_on_each_worker(running)
    assert set(fresh) == {survivor, newcomer}
    assert raw_produce(fresh[newcomer], topic, ()) == INVALID_RECORD
    # It accepts on the node port too, with no Metadata answer of its own yet: the
    # supervisor had it open the node listener the other worker opened (a connection
    # steered to it would otherwise wait in the queue of its socket).
    node = clients_on_each_worker(running, port=running.node_port)
    assert set(node) == {survivor, newcomer}
    assert answered(node[newcomer])
    for client in [*fresh.values(), *node.values()]:
        client.close()
    assert "was killed by SIGKILL" in running.stderr()
    assert running.stop() == 0


class ContinuousProducer(threading.Thread):
    """Produces a 2,000-byte record with a trace-id header every 20 ms until stopped, noting
    when each was handed to the client and how it was delivered."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 0, "retries": 0, "acks": "all"}
        )
        self.topic = topic
        self.outcomes: list[tuple[float, int]] = []
        """(monotonic time produce() was called, error code or 0), in delivery order."""
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            sent_at = time.monotonic()
            self.producer.produce(
                self.topic,
                b"x" * 2000,
                headers=[("trace-id", b"t")],
                on_delivery=lambda e, m, t=sent_at: self.outcomes.append(
                    (t, 0 if e is None else int(e.code()))
                ),
            )
            self.producer.poll(0)
            self.halt.wait(0.02)
        self.producer.flush(15)


def test_reload_under_continuous_produce_keeps_connections_and_the_new_limit_decides(
    two_workers: Running,
) -> None:
    running = two_workers
    topic = validated_topic(running)
    raw = yaml.safe_load(running.config.read_text())
    producer = ContinuousProducer(running.bootstrap, topic)
    producer.start()
    try:
        assert wait_for(lambda: len(producer.outcomes) >= 50, timeout=30)
        # The producer's connection to the partition's leader, through the node listener.
        connections = set(owners(running.node_port))
        assert connections

        # The producer's 2,000-byte records are now longer than record validation takes.
        raw["limits"] = {"record.validation.max.record.bytes": 1000}
        running.config.write_text(yaml.safe_dump(raw))
        hangup_at = time.monotonic()
        running.reload()
        # Counted once for the gateway, by the supervisor, once both workers applied it.
        assert wait_for(
            lambda: running.metric("kpg_config_reloads_total", result="applied") == 1, 30
        )
        applied_at = time.monotonic()
        assert wait_for(lambda: any(t > applied_at for t, _ in producer.outcomes), 30)
    finally:
        producer.halt.set()
        producer.join(30)
    # Records handed over well before the SIGHUP were delivered under the old limit, every
    # one handed over once both workers had applied the new one was refused by it.
    before = [code for t, code in producer.outcomes if t < hangup_at - 0.2]
    after = [code for t, code in producer.outcomes if t > applied_at]
    assert before and set(before) == {0}
    assert after and set(after) == {INVALID_RECORD}
    # No connection of the producer's was dropped or replaced by the reload.
    assert connections <= set(owners(running.node_port))
    assert running.stop() == 0

    events = spool_events(running.spool)
    reloads = [e for e in events if e["event_kind"] == "lifecycle" and e["action"] == "reload"]
    assert len(reloads) == 2  # one per worker, each in its own chain
    new = {e["policy_version"] for e in reloads}
    assert len(new) == 1
    (new_version,) = new
    assert all(new_version in e["message"] for e in reloads)
    starts = [e for e in events if e["event_kind"] == "lifecycle" and e["action"] == "start"]
    old = {e["policy_version"] for e in starts}
    assert len(old) == 1 and old != new
    assert all(f"{next(iter(old))} -> {new_version}" in e["message"] for e in reloads)
    # The denials (one per partition: topic-0) were decided by the new version; the
    # summaries of what was allowed before, by the old one.
    refused = [e for e in events if e["resource_name"] == f"{topic}-0"]
    assert refused and {(e["verdict"], e["policy_version"]) for e in refused} == {
        ("denied", new_version)
    }
    summaries = [e for e in events if e["event_kind"] == "summary" and e["resource_name"] == topic]
    assert old <= {e["policy_version"] for e in summaries}


def test_a_broken_config_on_reload_is_refused_and_the_old_rules_stay(
    two_workers: Running,
) -> None:
    """The supervisor checks the new file as start-up does; a refused one never reaches a
    worker, and each worker records the refusal in its own audit chain."""
    running = two_workers
    raw = yaml.safe_load(running.config.read_text())
    raw["policies"] = {"rules": [{"name": "partition-count", "type": "partitions", "max": 2}]}
    running.config.write_text(yaml.safe_dump(raw))
    assert re.search(r"kpg reload: applied: policy version \S+ -> \S+", running.reload())
    assert wait_for(lambda: running.metric("kpg_config_reloads_total", result="applied") == 1, 30)
    admin = AdminClient({"bootstrap.servers": running.bootstrap})
    too_many = unique_name("wide")
    refused = outcome(admin.create_topics([NewTopic(too_many, 5, 1)])[too_many])
    assert refused is not None and refused[0] == KafkaError.POLICY_VIOLATION, refused
    in_force = {
        labels["version"] for labels, value in running.samples("kpg_policy_version") if value == 1
    }
    assert len(in_force) == 1

    raw["limits"] = {"max_in_flight": 5}
    running.config.write_text(yaml.safe_dump(raw))
    problem = f"{running.config}: limits.max_in_flight: unknown key"
    assert f"kpg reload: refused: {problem}" in running.reload(status=1)
    assert wait_for(lambda: running.metric("kpg_config_reloads_total", result="refused") == 1, 30)
    assert wait_for(lambda: "supervisor: reload refused" in running.stderr(), 30)
    # Start-up's message, naming the key and the file, once: from the supervisor; no worker
    # read the file, so none refused it, none was sent SIGHUP.
    assert running.stderr().count(problem) == 1, running.stderr()
    assert "reload: 0 of 2 workers" not in running.stderr()
    assert running.metric("kpg_config_reloads_total", result="applied") == 1
    refused = outcome(admin.create_topics([NewTopic(too_many, 5, 1)])[too_many])
    assert refused is not None and refused[0] == KafkaError.POLICY_VIOLATION, refused
    fits = unique_name("narrow")
    admin.create_topics([NewTopic(fits, 2, 1)])[fits].result(15)

    # A worker started after the refusal runs the rules in force, not the broken file.
    victim = min(running.workers())
    os.kill(victim, signal.SIGKILL)
    assert wait_for(lambda: running.metric("kpg_worker_restarts_total") == 1, 60)
    assert wait_for(lambda: running.metric("kpg_workers", state="ready") == 2, 60)
    for client in clients_on_each_worker(running).values():
        client.close()
    assert running.stop() == 0

    # Each worker that was running recorded the refusal in its own chain, with the version
    # that stays.
    events = spool_events(running.spool)
    refusals = [e for e in events if e["action"] == "reload_refused"]
    assert len(refusals) == 2, refusals
    assert len({e["chain_id"] for e in refusals}) == 2
    for event in refusals:
        assert event["verdict"] == "denied" and event["event_kind"] == "lifecycle"
        assert event["policy_version"] in in_force
        assert problem in event["message"]


def test_a_worker_started_while_a_reload_is_decided_runs_the_rules_in_force(
    two_workers: Running,
) -> None:
    """A worker that starts while a refused reload is being decided must not start on the
    refused file. One worker is stopped (SIGSTOP), so a reload waits for its verdict; the
    other one is killed in the meantime and started again."""
    running = two_workers
    raw = yaml.safe_load(running.config.read_text())
    stalled, victim = sorted(running.workers())
    os.kill(stalled, signal.SIGSTOP)
    try:
        # Loads, but its policies do not build.
        raw["policies"] = {"create.topic.policy.class.name": "no_such_module.Policy"}
        running.config.write_text(yaml.safe_dump(raw))
        running.process.send_signal(signal.SIGHUP)  # kill -HUP: no waiting for the outcome
        assert wait_for(
            lambda: running.metric("kpg_config_reloads_total", result="refused") >= 1, 30
        )
        os.kill(victim, signal.SIGKILL)
        assert wait_for(lambda: running.metric("kpg_worker_restarts_total") >= 1, 60)
        # The newcomer starts on the configuration in force and serves.
        assert wait_for(lambda: len(running.workers() - {stalled, victim}) == 1, 60)
        (newcomer,) = running.workers() - {stalled, victim}
        assert wait_for(lambda: f"(pid {newcomer}) serving" in running.stderr(), 60), (
            running.stderr()
        )
        assert "configuration error" not in running.stderr()
    finally:
        os.kill(stalled, signal.SIGCONT)
    assert wait_for(lambda: running.metric("kpg_workers", state="ready") == 2, 60)
    assert running.metric("kpg_worker_restarts_total") == 1
    for client in clients_on_each_worker(running).values():
        client.close()
    assert running.stop() == 0


@dataclass(frozen=True)
class HeldNewcomer:
    """Two workers behind GatedCreateTopicPolicy; worker 1 was killed, and the worker started
    in its place has read the workers' copy and is held building its policies (not serving,
    so a reload sends it no SIGHUP)."""

    running: Running
    gate: Path
    old: str
    """The policy version both workers started with."""
    newcomer: int
    serving_before: int
    """How many ``serving`` lines the gateway's log had when the newcomer was started."""

    def reload_then_release(self, **policies: str) -> None:
        """Reload with a new rule (and ``policies`` keys), wait until the serving worker has
        applied it, then let the newcomer go on."""
        rules = [{"name": "p", "type": "partitions", "max": 2}]
        self.running.set_policies(rules=rules, **policies)
        self.running.process.send_signal(signal.SIGHUP)
        assert wait_for(
            lambda: self.running.metric("kpg_config_reloads_total", result="applied") >= 1, 60
        )
        (self.gate / "hold-worker-1").unlink()

    def versions(self) -> dict[str, float]:
        return self.running.policy_versions()


@pytest.fixture
def held_newcomer(broker: HostPort, tmp_path: Path) -> Iterator[HeldNewcomer]:
    gate = tmp_path / "gate"
    gate.mkdir()
    policies: dict[str, Any] = {
        "create.topic.policy.class.name": f"{PLUGINS}.GatedCreateTopicPolicy",
        "test.gate.dir": str(gate),
    }
    running = start(write_config(tmp_path, broker, policies=policies))
    try:
        (old,) = [labels["version"] for labels, _ in running.samples("kpg_policy_version")]
        # The live worker 1, not the first pid the log named: a worker the supervisor had
        # already restarted (CI once found that pid gone) is not the one to kill.
        (victim,) = [pid for pid in running.workers() if worker_index(pid) == 1]
        started = re.findall(r"worker 1 started \(pid (\d+)\)", running.stderr())
        serving_before = len(re.findall(r"\) serving", running.stderr()))
        (gate / "hold-worker-1").touch()
        os.kill(victim, signal.SIGKILL)
        assert wait_for(
            lambda: len(re.findall(r"worker 1 started", running.stderr())) == len(started) + 1,
            60,
        ), running.stderr()
        newcomer = int(re.findall(r"worker 1 started \(pid (\d+)\)", running.stderr())[-1])
        # It has read the copy and is building its policies, not serving.
        assert wait_for(lambda: (gate / f"configuring-{newcomer}").exists(), 60)
        yield HeldNewcomer(
            running=running,
            gate=gate,
            old=old,
            newcomer=newcomer,
            serving_before=serving_before,
        )
    finally:
        (gate / "hold-worker-1").unlink(missing_ok=True)
        running.stop()


def test_a_worker_that_read_the_file_before_a_reload_reloads_once_ready(
    held_newcomer: HeldNewcomer,
) -> None:
    """A worker that read the workers' copy just before a reload replaced it, and was not yet
    serving (so not sent SIGHUP), must not run the replaced configuration. A test plug-in
    holds the restarted worker between reading its configuration and serving while the
    reload happens (tests/plugins: GatedCreateTopicPolicy)."""
    held = held_newcomer
    running, versions = held.running, held.versions
    held.reload_then_release()
    # Once the newcomer serves (its policy version is then in the scrape), both workers
    # come to the new version: the old one is 1 on no live worker.
    assert wait_for(lambda: f"(pid {held.newcomer}) serving" in running.stderr(), 60)
    assert wait_for(lambda: len(versions()) == 2 and versions()[held.old] == 0, 60), (
        versions(),
        running.stderr(),
    )
    assert "started on the file a reload replaced: reloading it" in running.stderr()


def test_a_worker_that_read_the_file_before_a_reload_and_refuses_it_is_stopped(
    held_newcomer: HeldNewcomer,
) -> None:
    """As above, but the newcomer refuses the file in force (tests/plugins:
    GatedCreateTopicPolicy with test.fail.in.workers): it must not go on serving the rules
    the reload replaced; it is stopped and started again on the file in force, which it
    cannot build, so it stays down (counted towards a crash loop) and only worker 0 serves."""
    held = held_newcomer
    running, versions, newcomer = held.running, held.versions, held.newcomer
    # Worker 0, the only one serving, applies it.
    held.reload_then_release(**{"test.fail.in.workers": "1"})
    # The newcomer serves on the old file, refuses the new one, and is stopped: soon no
    # live worker has the old version in force. Worker 1, started again on the file in
    # force, cannot build it: it never serves again.
    assert wait_for(lambda: f"(pid {newcomer}) serving" in running.stderr(), 60)
    assert wait_for(lambda: versions().get(held.old, 0) == 0, 60), (versions(), running.stderr())
    assert wait_for(lambda: newcomer not in running.workers(), 60)
    assert f"(pid {newcomer}) did not reload the file in force" in running.stderr()
    assert wait_for(lambda: "refused in worker 1" in running.stderr(), 60)
    assert running.metric("kpg_workers", state="ready") <= 1
    # The newcomer served once, and worker 1 started again on the file in force never did.
    serving = len(re.findall(r"\) serving", running.stderr()))
    assert serving == held.serving_before + 1, running.stderr()


def worker_index(pid: int) -> int:
    """The ``--worker-index`` of a worker process."""
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    return int(argv[argv.index(b"--worker-index") + 1])


def test_a_file_any_worker_refuses_is_undone_everywhere_and_counted_once(
    broker: HostPort, tmp_path: Path
) -> None:
    """The workers' own check, behind the supervisor's: a plug-in that fails to build in the
    workers only (tests/plugins: WorkerRefusedCreateTopicPolicy). Refused by one worker, the
    file is undone in the other (workers that disagree would let a client pick the laxer
    rules by reconnecting), and the refusing worker, started again, does not crash in a loop
    on a file it cannot build."""
    policies: dict[str, Any] = {
        "create.topic.policy.class.name": f"{PLUGINS}.WorkerRefusedCreateTopicPolicy"
    }
    running = start(write_config(tmp_path, broker, policies=policies))
    try:
        (old,) = [labels["version"] for labels, _ in running.samples("kpg_policy_version")]
        running.set_policies(**{"test.fail.in.workers": "0,1"})
        said = running.reload(status=1)
        assert "kpg reload: refused: " in said and "refused in worker" in said
        assert "reload refused by every worker: the previous file stays" in running.stderr()

        running.set_policies(**{"test.fail.in.workers": "1"})
        said = running.reload(status=1)
        assert "kpg reload: refused: refused by 1 of 2 workers: " in said, said
        assert "refused in worker 1" in said
        assert f"the others went back to policy version {old}" in said
        assert running.samples("kpg_config_reloads_total") == [
            ({"result": "applied"}, 0.0),
            ({"result": "refused"}, 2.0),
            ({"result": "partial"}, 0.0),
        ]
        # Both workers run the previous file again: the scrape shows no worker on another
        # version (it shows a version 1 while any worker has it in force).
        versions = running.policy_versions()
        assert versions[old] == 1 and sum(versions.values()) == 1, versions

        (refuser,) = [pid for pid in running.workers() if worker_index(pid) == 1]
        os.kill(refuser, signal.SIGKILL)
        assert wait_for(lambda: running.metric("kpg_worker_restarts_total") == 1, 60)
        assert wait_for(lambda: running.metric("kpg_workers", state="ready") == 2, 60)
        assert refuser not in running.workers()
        versions = running.policy_versions()
        assert versions[old] == 1 and sum(versions.values()) == 1, versions
        assert "crashing in a loop" not in running.stderr()
    finally:
        running.stop()


def test_a_worker_that_cannot_go_back_is_reported_as_partial(
    broker: HostPort, tmp_path: Path
) -> None:
    """Worker 1 refuses the new file; worker 0 applies it but fails to build the previous
    one again (its third configure(): start-up, the new file, the previous file): the workers
    disagree, and the outcome says so."""
    policies: dict[str, Any] = {
        "create.topic.policy.class.name": f"{PLUGINS}.WorkerRefusedCreateTopicPolicy",
        "test.fail.in.worker.from": "0:3",
    }
    running = start(write_config(tmp_path, broker, policies=policies))
    try:
        (old,) = [labels["version"] for labels, _ in running.samples("kpg_policy_version")]
        running.set_policies(**{"test.fail.in.workers": "1"})
        said = running.reload(status=1)
        assert "kpg reload: partial: refused by 1 of 2 workers: " in said, said
        assert f"1 could not go back to policy version {old}" in said
        assert dict(
            (labels["result"], v) for labels, v in running.samples("kpg_config_reloads_total")
        ) == {"applied": 0.0, "refused": 0.0, "partial": 1.0}
        versions = running.policy_versions()
        assert versions[old] == 1 and sorted(versions.values()) == [1.0, 1.0], versions
        assert "could not go back" in running.stderr()
    finally:
        running.stop()


def test_a_bad_config_stops_kpg_run_before_any_worker_starts(
    broker: HostPort, tmp_path: Path
) -> None:
    """A policy plug-in that does not import: the file loads, the policies do not build."""
    config = write_config(
        tmp_path, broker, policies={"create.topic.policy.class.name": "no_such_module.Policy"}
    )
    process = refused_start(config)
    assert (
        f"\nkpg: configuration error: {config}: policies.create.topic.policy.class.name: "
        "cannot import no_such_module" in process.stderr
    ), process.stderr
    assert "worker 0 started" not in process.stderr
    assert "gateway ready" not in process.stdout


def test_a_spool_directory_others_can_write_stops_kpg_run_before_any_worker_starts(
    broker: HostPort, tmp_path: Path
) -> None:
    """The workers' spools are its subdirectories, and kpg audit stream reads every one: in a
    directory anyone may add to (sticky, as /tmp), another user could add a worker-7/ of
    forged events beside the workers' own."""
    config = write_config(tmp_path, broker)
    spool = tmp_path / "audit"
    spool.mkdir()
    spool.chmod(0o1777)
    process = refused_start(config)
    assert (
        f"kpg: configuration error: {config}: audit: audit spool directory {spool} is "
        "writable by group and others (mode 1777)" in process.stderr
    ), process.stderr
    assert "worker 0 started" not in process.stderr
    assert list(spool.iterdir()) == []


def test_the_metrics_of_two_workers_are_those_of_one_gateway(two_workers: Running) -> None:
    """One scrape of the supervisor: a reload counts once, gauges add up over the live
    workers with no per-process series, the version in force is 1 and the old one 0."""
    running = two_workers
    (old,) = [labels["version"] for labels, _ in running.samples("kpg_policy_version")]
    served = clients_on_each_worker(running)
    assert wait_for(lambda: running.metric("kpg_connections_active") == 2, 30)

    raw = yaml.safe_load(running.config.read_text())
    raw["policies"] = {"rules": [{"name": "partition-count", "type": "partitions", "max": 2}]}
    running.config.write_text(yaml.safe_dump(raw))
    running.reload()
    assert wait_for(lambda: running.metric("kpg_config_reloads_total", result="applied") >= 1, 30)
    assert running.samples("kpg_config_reloads_total") == [
        ({"result": "applied"}, 1.0),
        ({"result": "refused"}, 0.0),
        ({"result": "partial"}, 0.0),
    ]
    versions = dict(
        (labels["version"], value) for labels, value in running.samples("kpg_policy_version")
    )
    assert versions.pop(old) == 0
    ((new, in_force),) = versions.items()
    assert in_force == 1 and new != old

    # One series for the whole gateway, not one per worker's pid.
    assert running.samples("kpg_audit_queue_depth") == [({}, 0.0)]
    assert running.samples("kpg_connections_active") == [({}, 2.0)]
    for client in served.values():
        client.close()
    assert wait_for(lambda: running.metric("kpg_connections_active") == 0, 30)
    assert running.stop() == 0


def test_a_worker_metrics_file_being_created_does_not_fail_the_scrape(
    two_workers: Running,
) -> None:
    """prometheus_client creates a worker's metrics file empty and then extends it to its
    size; a scrape that read it in between (a worker just started, or first counting a kind of
    metric) answered 500 (``struct.error``), and a worker killed in between left the file
    so for good: every scrape failed from then on. The file here is that empty file, at a pid
    no process has (as a worker killed in between leaves it)."""
    running = two_workers
    environ = Path(f"/proc/{min(running.workers())}/environ").read_bytes().split(b"\0")
    (setting,) = [v for v in environ if v.startswith(b"PROMETHEUS_MULTIPROC_DIR=")]
    directory = Path(setting.partition(b"=")[2].decode())
    RawClient(running.bootstrap).close()
    assert wait_for(lambda: running.metric("kpg_connections_total", listener="bootstrap") >= 1)
    connections = running.metric("kpg_connections_total", listener="bootstrap")
    (directory / "counter_0.db").touch()
    status, text = get(running.metrics_url + "/metrics")
    assert status == 200, text
    assert running.metric("kpg_workers", state="ready") == 2
    assert running.metric("kpg_connections_total", listener="bootstrap") == connections
    assert running.stop() == 0


def test_a_reload_under_workers_names_the_settings_that_need_a_restart(
    two_workers: Running,
) -> None:
    """The workers are given the listen address and node ports on their command line, and no
    metrics listener, so only the supervisor sees these change in the file: it names them, as
    one process does, and keeps serving where it was."""
    running = two_workers
    raw = yaml.safe_load(running.config.read_text())
    raw["listen"] = f"127.0.0.1:{free_port()}"
    raw["node_port_base"] = free_port() - TANSU_NODE_ID
    raw["metrics"] = f"127.0.0.1:{free_port()}"
    running.config.write_text(yaml.safe_dump(raw))
    said = running.reload()
    assert "not applied, needs a restart: listen, node_port_base, metrics" in said, said
    for key in ("listen", "node_port_base", "metrics"):
        assert wait_for(
            lambda key=key: (
                f"supervisor: reload: {key} changed: it needs a restart" in running.stderr()
            ),
            30,
        ), running.stderr()
    assert running.metric("kpg_config_reloads_total", result="applied") == 1
    admin = AdminClient({"bootstrap.servers": running.bootstrap})
    assert admin.list_topics(timeout=15).brokers


def test_kpg_reload_of_one_process_says_how_the_reload_went(
    broker: HostPort, tmp_path: Path
) -> None:
    config = write_config(tmp_path, broker)
    process, _ = start_kpg("--config", str(config), "--pid-file", str(pid_file(config)))
    try:
        running = Running(process, "127.0.0.1:0", config)
        raw = yaml.safe_load(config.read_text())
        raw["limits"] = {"max_in_flight": 5}
        config.write_text(yaml.safe_dump(raw))
        said = running.reload(status=1)
        assert f"kpg reload: refused: {config}: limits.max_in_flight: unknown key" in said
        del raw["limits"]
        raw["policies"] = {"rules": [{"name": "p", "type": "partitions", "max": 2}]}
        config.write_text(yaml.safe_dump(raw))
        assert re.search(r"kpg reload: applied: policy version \S+ -> \S+", running.reload())
        assert running.metric("kpg_config_reloads_total", result="applied") == 1
        assert running.metric("kpg_config_reloads_total", result="refused") == 1
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    assert not pid_file(config).exists()
    assert not pid_file(config).with_name("kpg.pid.reload").exists()


def waits_for_a_flock(pid: int) -> bool:
    """Whether process ``pid`` is blocked asking for a flock (/proc/locks lists a blocked
    request after "->": ``N: -> FLOCK  ADVISORY  WRITE <pid> <dev:inode> 0 EOF``)."""
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if fields[1:3] == ["->", "FLOCK"] and int(fields[5]) == pid:
            return True
    return False


def kpg_reload(running: Running) -> subprocess.Popen[str]:
    """`kpg reload --pid-file` started, not waited for."""
    return subprocess.Popen(
        [KPG, "reload", "--pid-file", str(running.pid_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=kpg_env(),
    )


def test_two_kpg_reloads_at_once_each_print_their_own_outcome(
    broker: HostPort, tmp_path: Path
) -> None:
    """The second `kpg reload --pid-file` starts while the first one's reload is under way
    (both workers held in configure(): tests/plugins: GatedCreateTopicPolicy) and after the
    file changed again: it waits its turn, so the first prints old -> v1 and the second
    v1 -> v2. Verdicts name no caller: a second call that read the latest seq before the
    first reload's verdict came would take that verdict for its own."""
    gate = tmp_path / "gate"
    gate.mkdir()
    policies: dict[str, Any] = {
        "create.topic.policy.class.name": f"{PLUGINS}.GatedCreateTopicPolicy",
        "test.gate.dir": str(gate),
        "test.round": "0",
    }
    running = start(write_config(tmp_path, broker, policies=policies))
    reloads: list[subprocess.Popen[str]] = []
    try:
        (old,) = [labels["version"] for labels, _ in running.samples("kpg_policy_version")]
        for started in gate.glob("configuring-*"):
            started.unlink()  # written at start-up
        for worker in (0, 1):
            (gate / f"hold-worker-{worker}").touch()
        raw = yaml.safe_load(running.config.read_text())
        raw["policies"]["test.round"] = "1"
        running.config.write_text(yaml.safe_dump(raw))
        reloads.append(kpg_reload(running))
        # The supervisor has checked round 1 and both workers are reloading it, held.
        assert wait_for(
            lambda: all((gate / f"configuring-{pid}").exists() for pid in running.workers()), 60
        ), running.stderr()

        raw["policies"]["test.round"] = "2"
        running.config.write_text(yaml.safe_dump(raw))
        reloads.append(kpg_reload(running))
        # It queues behind the first call's lock. (A call taking no lock has read the latest
        # verdict's seq, still the one before the first reload, and signalled by the time
        # this wait gives up.)
        wait_for(lambda: waits_for_a_flock(reloads[1].pid), 60)
        for worker in (0, 1):
            (gate / f"hold-worker-{worker}").unlink()

        said = []
        for reload in reloads:
            out, err = reload.communicate(timeout=200)
            assert reload.returncode == 0, f"{out}{err}\n{running.stderr()}"
            said.append(out + err)
        first = re.search(r"kpg reload: applied: policy version (\S+) -> (\S+)", said[0])
        second = re.search(r"kpg reload: applied: policy version (\S+) -> (\S+)", said[1])
        assert first is not None and second is not None, said
        assert first.group(1) == old and first.group(2) != old, said
        assert second.group(1) == first.group(2) and second.group(2) != first.group(2), said
        assert "kpg reload: waiting for another kpg reload of this gateway" in said[1]
        assert wait_for(
            lambda: running.metric("kpg_config_reloads_total", result="applied") == 2, 60
        )
        assert running.samples("kpg_config_reloads_total") == [
            ({"result": "applied"}, 2.0),
            ({"result": "refused"}, 0.0),
            ({"result": "partial"}, 0.0),
        ]
        versions = running.policy_versions()
        assert versions[second.group(2)] == 1, versions
    finally:
        for worker in (0, 1):
            (gate / f"hold-worker-{worker}").unlink(missing_ok=True)
        for reload in reloads:
            if reload.poll() is None:
                reload.kill()
                reload.communicate()
        running.stop()


def test_kpg_reload_goes_on_unlocked_when_it_cannot_create_its_lock_file(
    broker: HostPort, tmp_path: Path
) -> None:
    """A lock file that cannot be opened (here a directory stands in its place; a caller
    that may not write the pid file's directory is the real case): the reload still happens
    and is reported, and stderr says the call was not serialized."""
    config = write_config(tmp_path, broker)
    process, _ = start_kpg("--config", str(config), "--pid-file", str(pid_file(config)))
    try:
        running = Running(process, "127.0.0.1:0", config)
        lock = pid_file(config).with_name("kpg.pid.reload.lock")
        lock.mkdir()
        raw = yaml.safe_load(config.read_text())
        raw["policies"] = {"rules": [{"name": "p", "type": "partitions", "max": 2}]}
        config.write_text(yaml.safe_dump(raw))
        said = running.reload()
        assert re.search(r"kpg reload: applied: policy version \S+ -> \S+", said), said
        warnings = [line for line in said.splitlines() if str(lock) in line]
        assert len(warnings) == 1, said
        assert warnings[0].startswith(f"kpg reload: cannot lock {lock} (Is a directory): ")
        assert running.metric("kpg_config_reloads_total", result="applied") == 1
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)


def test_healthz_and_readyz_follow_the_upstream(tmp_path: Path) -> None:
    embedded = EmbeddedBroker()
    upstream = embedded.start()
    running = start(write_config(tmp_path, upstream))
    try:
        assert get(running.metrics_url + "/healthz") == (200, "ok\n")
        status, body = get(running.metrics_url + "/readyz")
        assert (status, body.split(",")[0]) == (200, "ready: 2/2 workers ready")
        embedded.stop()  # /readyz may answer from a probe up to a second old
        assert wait_for(lambda: get(running.metrics_url + "/readyz")[0] == 503, 30)
        assert "upstream" in get(running.metrics_url + "/readyz")[1]
        assert get(running.metrics_url + "/healthz")[0] == 200
    finally:
        embedded.stop()
        running.stop()


def test_one_process_answers_readyz_too(tmp_path: Path) -> None:
    embedded = EmbeddedBroker()
    upstream = embedded.start()
    process, _ = start_kpg("--config", str(write_config(tmp_path, upstream)), "--workers", "1")
    url = f"http://{yaml.safe_load((tmp_path / 'gateway.yaml').read_text())['metrics']}"
    try:
        assert get(url + "/readyz")[0] == 200
        assert "kpg_connections_active" in get(url + "/metrics")[1]
        embedded.stop()  # /readyz may answer from a probe up to a second old
        assert wait_for(lambda: get(url + "/readyz")[0] == 503, 30)
        assert get(url + "/healthz")[0] == 200
    finally:
        embedded.stop()
        process.send_signal(signal.SIGTERM)
        process.wait(30)


def test_the_open_file_limit_is_raised_and_max_connections_follows(
    broker: HostPort, tmp_path: Path
) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard <= 1024:
        pytest.skip(f"the hard open-file limit is {hard}: nothing to raise to")
    process = subprocess.Popen(
        [KPG, "run", "--upstream", str(broker), "--listen", f"127.0.0.1:{free_port()}"]
        + ["--node-port-base", "0", "--workers", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard)),
    )
    try:
        assert process.stdout is not None
        assert "gateway ready" in process.stdout.readline()
        with open(f"/proc/{process.pid}/limits") as limits:
            line = next(li for li in limits if li.startswith("Max open files"))
        assert line.split()[3] == str(hard)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    assert process.stderr is not None
    log = process.stderr.read()
    assert f"open-file limit raised from 1024 to {hard}" in log
    assert f"max.connections {(hard - 64) // 2}," in log


def test_a_worker_crashing_in_a_loop_is_reported_and_left_down(two_workers: Running) -> None:
    """A worker that cannot start (its state file has become a directory) is started again
    with growing pauses, then reported and left down (tried again only every 30 s: see
    tests/unit/test_live_operation.py); the other one serves on."""
    running = two_workers
    state = Path(yaml.safe_load(running.config.read_text())["state"]["path"])
    state.unlink()
    state.mkdir()  # the running workers keep their open file; a new one cannot open it
    victim, survivor = sorted(running.workers())
    os.kill(victim, signal.SIGKILL)
    assert wait_for(lambda: running.metric("kpg_workers", state="given_up") == 1, 120)
    assert "crashing in a loop, given up; trying it again in 30 s" in running.stderr()
    # Five quick deaths in a row: the kill (quick too, unless the worker had run 10 s) and
    # the starts that failed; the last one is not followed by a start.
    assert running.metric("kpg_worker_restarts_total") in (4, 5)
    assert running.workers() == {survivor}
    assert running.process.poll() is None
    (client,) = clients_on_each_worker(running, workers=1).values()
    client.close()
    assert get(running.metrics_url + "/readyz")[1].startswith("ready: 1/2 workers ready")
    assert running.stop() == 0


def test_workers_stop_when_the_supervisor_is_killed(two_workers: Running) -> None:
    running = two_workers
    workers = running.workers()
    running.process.kill()
    running.process.wait(30)

    def gone() -> bool:
        return not any(Path(f"/proc/{pid}").exists() for pid in workers)

    assert wait_for(gone, 60), "a worker outlived its supervisor"


# --- per-address limits: each client address is steered to one worker --------------------


def answered(client: RawClient) -> bool:
    """Whether the gateway serves the connection: an ApiVersions request gets its answer (a
    connection refused at accept is closed unread)."""
    hello = ApiVersionsRequest(client_software_name="kpg-test", client_software_version="1")
    try:
        client.request(18, 3, hello)
    except OSError:
        return False
    return True


def open_node_listener(running: Running) -> None:
    """Have a worker open the node listener (a Metadata answer names the node), from an
    address of its own (127.0.0.254), closed after."""
    client = RawClient(running.bootstrap, source="127.0.0.254")
    try:
        client.request(
            3,
            12,
            MetadataRequest(
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
        )
    finally:
        client.close()


def test_one_address_holds_max_connections_per_ip_over_the_whole_gateway(
    two_workers: Running,
) -> None:
    """Before: each worker counted the address on its own, and the kernel spread its
    connections over both workers, so it held up to twice the limit. The limit is set by a
    reload: the supervisor steers by address from then on."""
    running = two_workers
    limit = 3
    raw = yaml.safe_load(running.config.read_text())
    raw["limits"] = {"max.connections.per.ip": limit}
    running.config.write_text(yaml.safe_dump(raw))
    running.reload()
    open_node_listener(running)
    clients: list[RawClient] = []
    try:
        # One address, over the bootstrap port and the node port alike.
        for n in range(12):
            port = running.port if n % 2 else running.node_port
            clients.append(RawClient(f"127.0.0.1:{port}"))
        served = [client for client in clients if answered(client)]
        assert len(served) == limit
        held = owners(running.port) | owners(running.node_port)
        assert len({pid for peer, pid in held.items() if peer.startswith("127.0.0.1:")}) == 1
        # Another address is counted apart.
        assert answered(RawClient(running.bootstrap, source="127.0.0.2"))
    finally:
        for client in clients:
            client.close()


def test_each_address_keeps_to_one_worker_and_addresses_spread_over_both(
    broker: HostPort, tmp_path: Path
) -> None:
    running = start(write_config(tmp_path, broker, limits={"max.connections.per.ip": 100}))
    open_node_listener(running)
    clients = []
    for n in range(2, 18):
        for port in (running.port, running.node_port, running.port, running.node_port):
            client = RawClient(f"127.0.0.1:{port}", source=f"127.0.0.{n}")
            assert answered(client)
            clients.append(client)
    held = owners(running.port) | owners(running.node_port)
    workers_of: dict[str, set[int]] = {}
    for client in clients:
        workers_of.setdefault(client.sock.getsockname()[0], set()).add(held[local(client)])
    assert len(workers_of) == 16
    assert all(len(pids) == 1 for pids in workers_of.values()), workers_of
    assert set().union(*workers_of.values()) == running.workers()
    for client in clients:
        client.close()
    assert running.stop() == 0


def test_over_tls_too_one_address_holds_max_connections_per_ip(
    broker: HostPort, tmp_path: Path
) -> None:
    """TLS listeners accept in Python, on the sockets the supervisor handed over: the limit
    holds before the handshake, for the whole gateway."""
    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki", {})
    tls = {
        "cert_file": str(pki / "server.pem"),
        "key_file": str(pki / "server.key"),
        "client_auth": "none",
    }
    limits = {"max.connections.per.ip": 2}
    running = start(write_config(tmp_path, broker, tls=tls, limits=limits))
    context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    clients: list[RawClient] = []
    served = 0
    try:
        for _ in range(8):
            try:
                client = RawClient(running.bootstrap, tls=context)
            except OSError:  # closed at accept, before the handshake
                continue
            clients.append(client)
            served += answered(client)
        assert served == 2
    finally:
        for client in clients:
            client.close()
        running.stop()


def test_each_pod_names_its_own_audit_events(broker: HostPort, tmp_path: Path) -> None:
    """Replicas share one configuration (a ConfigMap), so its audit.instance named every
    pod's events alike ("kpg"): in the one audit topic they all write, nothing said which pod
    decided. `--audit-instance` (the Kubernetes Deployment passes the pod's name) names the
    events of every worker of this process, across the supervisor's workers."""
    config = write_config(tmp_path, broker)
    process, bootstrap = start_kpg(
        "--config", str(config), "--workers", "2", "--audit-instance", "kpg-7f9c4-x2x9p"
    )
    running = Running(process, bootstrap, config)
    try:
        assert wait_for(lambda: running.metric("kpg_workers", state="ready") == 2, timeout=60)
    finally:
        assert running.stop() == 0
    events = spool_events(tmp_path / "audit")
    starts = [e for e in events if e["action"] == "start"]
    assert len(starts) == 2, running.stderr()
    assert {e["gateway_instance"] for e in events} == {"kpg-7f9c4-x2x9p"}
