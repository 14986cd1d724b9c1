"""SIGTERM (the gateway's graceful stop) while a request is being judged: the request was
read whole, so it is judged, carried out and answered, and its decision audited, within
shutdown_timeout_s; it was cancelled half-way (a plug-in's verdict never awaited, nothing
answered), so the client lost its answer and could not tell whether anything had been done.
The gateway is the real one in front of the real broker; the request is held inside a plug-in
until the stop has begun."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from gateway.config import HostPort
from tests.support import (
    GatewayThread,
    RawClient,
    create_topic_request,
    existing_topics,
    gateway_config,
    unique_name,
    wait_for,
)

pytestmark = pytest.mark.inproc

PLUGINS = str(Path(__file__).resolve().parents[1] / "plugins")
CREATE_TOPICS = 19


def _refused(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        return True
    return False


def test_a_request_under_judgement_when_the_gateway_stops_is_answered_and_audited(
    broker: HostPort, tmp_path: Path
) -> None:
    config = gateway_config(
        broker,
        policies={
            "create.topic.policy.class.name": "kafka_test_policies.HangingCreateTopicPolicy",
            "create.topic.policy.class.path": PLUGINS,
            "policy.timeout.ms": 30_000,
        },
        audit={"spool_dir": str(tmp_path / "audit"), "segment_max_age_s": 0.2},
        shutdown_timeout_s=20,
    )
    gw = GatewayThread(config).start()
    hanging = sys.modules["kafka_test_policies"].HangingCreateTopicPolicy
    hanging.release.clear()
    hanging.entered.clear()
    topic = unique_name("hang")
    try:
        client = RawClient(gw.bootstrap, timeout=30)
        client.send(CREATE_TOPICS, 7, create_topic_request(topic))
        assert hanging.entered.wait(30)
        stopping = gw.submit(gw.gateway.stop())
        assert wait_for(lambda: _refused(gw.bootstrap)), "the gateway did not begin to stop"
        hanging.release.set()
        answer = client.recv_frame()  # ConnectionError: closed unanswered
        assert answer[:4] == b"\x00\x00\x00\x01"
        stopping.result(30)
    finally:
        hanging.release.set()
        gw.stop()
    assert topic in existing_topics(str(broker))
    events = [
        json.loads(line)
        for segment in sorted((tmp_path / "audit").glob("events-*.jsonl"))
        for line in segment.read_text().splitlines()
    ]
    decided = [e for e in events if e.get("resource_name") == topic]
    assert [(e["api"], e["verdict"]) for e in decided] == [("CreateTopics", "allowed")]
