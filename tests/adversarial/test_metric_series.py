"""Routes to grow the gateway's metrics: a label whose value a client chooses is a new time
series for each value, held in the gateway's memory and in every scrape (and in Prometheus)
for good. Each case runs the real gateway in front of the tapped real broker."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support import BrokerTap, GatewayThread, gateway_config, unique_name

pytestmark = pytest.mark.adversarial


@pytest.fixture
def gw(tap: BrokerTap) -> Iterator[GatewayThread]:
    running = GatewayThread(gateway_config(tap.address)).start()
    try:
        yield running
    finally:
        running.stop()


def series(gw: GatewayThread, name: str, label: str) -> set[str]:
    """The values of ``label`` among the samples of ``name``."""
    return {
        sample.labels[label]
        for family in gw.gateway.metrics.registry.collect()
        for sample in family.samples
        if sample.name == name
    }


def send_frame_of_api_key(bootstrap: str, api_key: int) -> bytes:
    """A connection of one request with ``api_key`` (an API the gateway does not know); what
    came back before the gateway closed it."""
    host, _, port = bootstrap.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        body = struct.pack(">hhih", api_key, 0, 1, -1)  # key, version, correlation id, no client id
        sock.sendall(struct.pack(">i", len(body)) + body)
        return sock.recv(64)


def test_unknown_api_keys_share_one_series(gw: GatewayThread, tap: BrokerTap) -> None:
    """Each frame of an API key the gateway does not know is refused and counted in
    kpg_policy_decisions_total under its API: a label of its own per key made 2,000 series in
    0.6 s from 2,000 connections (65,536 keys: a 13 MB scrape). They share one now."""
    for api_key in range(2000, 2300):
        assert send_frame_of_api_key(gw.bootstrap, api_key) == b""  # closed, unanswered
    assert not tap.requests, "a frame of an unknown API reached the broker"
    apis = series(gw, "kpg_policy_decisions_total", "api")
    assert apis == {"Unknown"}
    assert (
        gw.metric("kpg_policy_decisions_total", api="Unknown", policy="protocol", outcome="denied")
        == 300
    )


def test_validated_topics_past_the_cap_share_one_series(gw: GatewayThread) -> None:
    """The record validation counters are labelled by topic, and a series outlives its
    topic: a client allowed to create and delete validated topics added four series for each
    one it went through. Past max_topic_labels topics, they count under topic="_other"."""
    gw.gateway.metrics.max_topic_labels = 3
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    topics = [unique_name("churn") for _ in range(5)]
    configs = {"record.validation.policy": "key-required"}
    created = admin.create_topics([NewTopic(t, 1, 1, config=configs) for t in topics])
    for future in created.values():
        future.result(30)
    producer = Producer({"bootstrap.servers": gw.bootstrap, "linger.ms": 0})
    for topic in topics:
        producer.produce(topic, b"v", key=b"k")
        assert producer.flush(30) == 0
    labelled = series(gw, "kpg_records_validated_total", "topic")
    assert len(labelled - {"_other"}) == 3 and labelled <= {*topics, "_other"}
    policy = "BuiltinRecordValidationPolicy"
    assert gw.metric("kpg_records_validated_total", topic="_other", policy=policy) == 2
