"""Audit end to end: `kpg run` decides, the spool keeps every decision, `kpg audit stream`
(the real Spark job) builds the Parquet table, and `kpg audit report` the reports."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.config import HostPort
from gateway.embedded import free_port
from tests.e2e.test_gateway_process import KPG, kpg_audit_report, start_kpg

pytestmark = pytest.mark.e2e

PLUGINS = str(Path(__file__).resolve().parents[1] / "plugins")


def write_config(tmp_path: Path, broker: HostPort, spool: Path) -> Path:
    config = {
        "listen": f"127.0.0.1:{free_port()}",
        "node_port_base": 0,
        "upstream": {
            "bootstrap_servers": [str(broker)],
            "ignores_validate_only": True,
            "topic_config_source_unreliable": True,
        },
        "state": {"path": str(tmp_path / "state.db")},
        "audit": {
            "spool_dir": str(spool),
            "segment_max_age_s": 0.5,
            "fsync": "always",
            "produce_summary_interval_s": 0.5,
            "instance": "gw-e2e",
        },
        "policies": {
            "create.topic.policy.class.name": "kafka_test_policies.KafkaLikeCreateTopicPolicy",
            "create.topic.policy.class.path": PLUGINS,
            "rules": [
                {
                    "name": "topic-naming",
                    "type": "topic.name",
                    "mode": "dry-run",
                    "pattern": r"[a-z]+\.[a-z0-9-]+\.v[0-9]+",
                }
            ],
        },
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def create(
    admin: AdminClient,
    name: str,
    partitions: int,
    validate_only: bool = False,
    config: dict[str, str] | None = None,
) -> int:
    future = admin.create_topics(
        [NewTopic(name, partitions, 1, config=config or {})], validate_only=validate_only
    )[name]
    try:
        future.result(15)
    except KafkaException as exc:
        return int(exc.args[0].code())
    return 0


def run_stream(spool: Path, table: Path, checkpoint: Path) -> None:
    result = subprocess.run(
        [
            KPG,
            "audit",
            "stream",
            "--spool",
            str(spool),
            "--table",
            str(table),
            "--checkpoint",
            str(checkpoint),
            "--available-now",
            "--master",
            "local[1]",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]


def table_rows(spark: Any, table: Path) -> list[dict[str, Any]]:
    return [row.asDict() for row in spark.read.parquet(str(table)).collect()]


def test_decisions_reach_the_table_and_the_reports(
    tmp_path: Path, broker: HostPort, spark: Any
) -> None:
    spool, table = tmp_path / "spool", tmp_path / "table"
    process, bootstrap = start_kpg("--config", str(write_config(tmp_path, broker, spool)))
    tag = uuid.uuid4().hex[:6]
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        assert create(admin, f"team.a{tag}.v1", 5) == 0  # allowed
        assert create(admin, f"team.b{tag}.v1", 3) == 44  # denied
        assert create(admin, f"Bad_{tag}", 5) == 0  # would_deny
        assert create(admin, f"team.c{tag}.v1", 6, validate_only=True) == 0  # allowed, dry run
        assert create(admin, f"team.d{tag}.v1", 2, validate_only=True) == 44  # denied, dry run
        validated = f"team.v{tag}.v1"
        assert create(admin, validated, 5, config={"record.validation.policy": "trace-id"}) == 0
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "retries": 0})
        errors: list[object] = []
        producer.produce(
            validated,
            b"ok",
            partition=0,
            headers=[("trace-id", b"1")],
            on_delivery=lambda e, m: errors.append(e),
        )
        producer.flush(15)
        producer.produce(validated, b"bad", partition=0, on_delivery=lambda e, m: errors.append(e))
        producer.flush(15)
        assert errors[0] is None and errors[1] is not None
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0

    run_stream(spool, table, tmp_path / "checkpoint")
    rows = [r for r in table_rows(spark, table) if tag in r["resource_name"]]
    decisions = sorted(
        (r["verdict"], r["action"], r["resource_name"], r["validate_only"])
        for r in rows
        if r["interval_start"] is None
    )
    assert decisions == sorted(
        [
            ("allowed", "create", f"team.a{tag}.v1", False),
            ("denied", "create", f"team.b{tag}.v1", False),
            ("would_deny", "create", f"Bad_{tag}", False),
            ("allowed", "create", f"team.c{tag}.v1", True),
            ("denied", "create", f"team.d{tag}.v1", True),
            ("allowed", "create", validated, False),
            ("denied", "produce", f"{validated}-0", False),
        ]
    )
    summaries = [r for r in rows if r["interval_start"] is not None]
    assert sum(r["event_count"] for r in summaries) == 1  # the one allowed produce request
    assert len({r["event_id"] for r in rows}) == len(rows)
    by_policy = {r["resource_name"]: r["policy"] for r in rows if r["verdict"] != "allowed"}
    assert by_policy[f"team.b{tag}.v1"] == "kafka_test_policies.KafkaLikeCreateTopicPolicy"
    assert by_policy[f"Bad_{tag}"] == "topic-naming"

    out = tmp_path / "report"
    result = kpg_audit_report(table, out)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    totals = summary["totals"]
    # per event: one per verdict (the gateway's start and stop are no decision)
    assert (totals["denied"], totals["would_deny"], totals["allowed"]) == (3, 1, 4)
    # per request, as the clients made them: six CreateTopics (b and the dry run d denied;
    # Bad_ allowed with a dry-run objection; c and d dry runs) and two Produce requests (the
    # good one, in a summary, and the refused one)
    requests = (
        totals["requests"],
        totals["requests_denied"],
        totals["requests_allowed"],
        totals["requests_would_deny"],
        totals["dry_run_requests"],
    )
    assert requests == (8, 3, 5, 1, 2)
    html = (out / "index.html").read_text()
    for key in ("requests", "requests_denied", "requests_allowed", "requests_would_deny"):
        assert f'<div class="value">{totals[key]}</div>' in html


def test_sigkill_and_restarts_lose_nothing_and_count_nothing_twice(
    tmp_path: Path, broker: HostPort, spark: Any
) -> None:
    spool, table, checkpoint = tmp_path / "spool", tmp_path / "table", tmp_path / "checkpoint"
    config = write_config(tmp_path, broker, spool)
    tag = uuid.uuid4().hex[:6]
    answered: list[str] = []
    stop = threading.Event()

    def traffic(bootstrap: str, prefix: str) -> None:
        admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000})
        i = 0
        while not stop.is_set():
            name = f"{prefix}-{i}"
            try:
                future = admin.create_topics([NewTopic(name, 1, 1)], request_timeout=3)[name]
                future.result(5)
            except KafkaException as exc:
                if exc.args[0].code() == 44:
                    answered.append(name)
                else:
                    return  # the gateway is gone
            except TimeoutError:  # from future.result: the gateway went mid-request
                return
            i += 1

    process, bootstrap = start_kpg("--config", str(config))
    worker = threading.Thread(target=traffic, args=(bootstrap, f"k{tag}"))
    worker.start()
    deadline = time.monotonic() + 20
    while len(answered) < 15 and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)  # mid-traffic
    process.wait(10)
    stop.set()
    worker.join(10)
    before_kill = list(answered)
    assert len(before_kill) >= 15

    process, bootstrap = start_kpg("--config", str(config))  # recovers the open segment
    run_stream(spool, table, checkpoint)  # the job runs, then stops
    stop.clear()
    worker = threading.Thread(target=traffic, args=(bootstrap, f"r{tag}"))
    worker.start()
    while len(answered) < len(before_kill) + 10:
        time.sleep(0.05)
    stop.set()
    worker.join(10)
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    run_stream(spool, table, checkpoint)  # restarted: picks up the rest

    rows = [r for r in table_rows(spark, table) if tag in r["resource_name"]]
    assert len({r["event_id"] for r in rows}) == len(rows), "an event was counted twice"
    # Each request here is one denial (partitions) plus one dry-run would-deny (naming).
    names = [r["resource_name"] for r in rows if r["verdict"] == "denied"]
    assert sorted(names) == sorted(r["resource_name"] for r in rows if r["verdict"] == "would_deny")
    assert len(set(names)) == len(names), "a decision was recorded twice"
    missing = set(answered) - set(names)
    assert not missing, f"decisions the clients saw but the table lacks: {sorted(missing)}"
    # At most the one request in flight at the kill is recorded without its answer arriving.
    assert len(names) - len(answered) <= 1
