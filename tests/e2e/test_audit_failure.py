"""When the audit cannot be written: ``audit.on_failure``.

The disk refuses the spool's writes for real: the gateway runs as its own process under a
file-size limit (RLIMIT_FSIZE), so once the open segment reaches it every write fails with
EFBIG, as a full disk fails with ENOSPC (Python ignores SIGXFSZ, so the write returns the
error). Denied CreateTopics requests fill the segment; then a CreateTopics the policies allow:
under ``deny`` it is refused and the broker never sees it, under ``continue`` (the default)
it goes through unaudited, counted in ``kpg_audit_events_failed_total``. So with a record a
dry-run record policy objects to: its would-deny event unwritten, ``deny`` refuses the
partition with KAFKA_STORAGE_ERROR (retriable), ``continue`` writes it.
"""

from __future__ import annotations

import re
import resource
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.config import HostPort
from gateway.embedded import free_port
from protocol.errors import POLICY_VIOLATION
from tests.e2e.test_gateway_process import KPG, kpg_env
from tests.support import existing_topics, outcome, unique_name, wait_for

pytestmark = pytest.mark.e2e

FILE_SIZE_LIMIT = 48 * 1024
"""Bytes any file of the gateway may reach: a few dozen audit events."""


class Gateway:
    def __init__(
        self, process: subprocess.Popen[str], bootstrap: str, metrics: str, on_failure: str
    ) -> None:
        self.process = process
        self.bootstrap = bootstrap
        self.metrics = metrics
        self.on_failure = on_failure

    def metric(self, name: str) -> float:
        """The value of an unlabelled sample (0 when absent)."""
        with urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=10) as response:
            text = response.read().decode()
        match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
        return float(match.group(1)) if match else 0.0


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))


@pytest.fixture(params=["deny", "continue"])
def gateway(request: pytest.FixtureRequest, broker: HostPort, tmp_path: Path) -> Iterator[Gateway]:
    listen, metrics = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    config = {
        "listen": listen,
        "node_port_base": 0,
        "metrics": metrics,
        "upstream": {
            "bootstrap_servers": [str(broker)],
            "ignores_validate_only": True,
            "topic_config_source_unreliable": True,
            "broker_defaults": {"num.partitions": 1, "default.replication.factor": 1},
        },
        "state": {"path": str(tmp_path / "state.db")},
        "audit": {
            "spool_dir": str(tmp_path / "audit"),
            "segment_max_age_s": 3600,  # the segment stays open, at the limit, to the end
            "on_failure": request.param,
        },
        "policies": {
            "rules": [{"name": "few-partitions", "type": "partitions", "max": 2}],
            "record.validation.policy.mode": "dry-run",
        },
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    process = subprocess.Popen(
        [KPG, "run", "--config", str(path), "--workers", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        env=kpg_env(),
        preexec_fn=_limit_file_size,
    )
    gateway = Gateway(process, listen, metrics, request.param)
    try:
        assert wait_for(lambda: _ready(gateway), 30), "kpg did not start"
        yield gateway
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)


def _ready(gateway: Gateway) -> bool:
    try:
        with urllib.request.urlopen(f"http://{gateway.metrics}/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def fill_the_spool(admin: AdminClient, gateway: Gateway) -> None:
    """Denied CreateTopics requests (each one audit event) until a write has failed."""
    deadline = time.monotonic() + 60
    while gateway.metric("kpg_audit_events_failed_total") == 0:
        assert time.monotonic() < deadline, "the spool never failed a write"
        topics = [NewTopic(unique_name("too-wide"), 5, 1) for _ in range(10)]
        for future in admin.create_topics(topics).values():
            assert outcome(future) is not None  # refused: 5 partitions, at most 2


def test_a_decision_the_audit_cannot_record(gateway: Gateway, broker: HostPort) -> None:
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    validated = unique_name("validated")
    config = {"record.validation.policy": "trace-id"}
    assert (
        outcome(admin.create_topics([NewTopic(validated, 1, 1, config=config)])[validated]) is None
    )
    fill_the_spool(admin, gateway)
    topic = unique_name("allowed")

    said = outcome(admin.create_topics([NewTopic(topic, 1, 1)])[topic])

    if gateway.on_failure == "deny":
        # refused as a policy violation that says why, and never sent to the broker
        assert said is not None
        code, message = said
        assert code == POLICY_VIOLATION, said
        assert "could not write the audit event" in message, message
        assert "audit.on_failure is deny" in message, message
        assert topic not in existing_topics(str(broker))
        assert gateway.metric("kpg_unaudited_refusals_total") == 1
        assert produce_without_trace_id(gateway, validated) == KafkaError.KAFKA_STORAGE_ERROR
        assert gateway.metric("kpg_unaudited_refusals_total") == 2
    else:
        # the request goes on; the loss is counted and logged, not refused
        assert said is None
        assert topic in existing_topics(str(broker))
        assert produce_without_trace_id(gateway, validated) is None
        assert gateway.metric("kpg_unaudited_refusals_total") == 0


def produce_without_trace_id(gateway: Gateway, topic: str) -> int | None:
    """One record the dry-run trace-id policy objects to, not retried: its error code, or
    None once written."""
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "retries": 0})
    errors: list[KafkaError | None] = []
    producer.produce(topic, b"no trace-id", on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(30) == 0
    (error,) = errors
    return None if error is None else int(error.code())
