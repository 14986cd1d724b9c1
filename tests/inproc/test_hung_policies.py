"""Plug-ins that never return, on the topic path and on the record path, called more times
than the policy pool has threads: every call denies within ``policy.timeout.ms`` (a call that
finds every worker busy waits for one until then, and denies unmade), and a request that
needs no plug-in, an allowed CreateTopics, is still served at once: nothing else waits behind
the hung calls.

The bounds below are socket timeouts (the test fails when an answer never comes), generous
against a slow machine; they are not performance measurements.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.produce.v9.request import ProduceRequest
from kio.static.primitive import i8

from gateway.config import HostPort
from tests.batches import one_record_batch, produce_v9
from tests.plugins.kafka_test_policies import (
    HangingAlterConfigPolicy,
    HangingRecordValidationPolicy,
)
from tests.support import (
    GatewayThread,
    RawClient,
    create_topic_request,
    existing_topics,
    gateway_config,
    outcome,
)

pytestmark = pytest.mark.inproc

PLUGINS = str(Path(__file__).resolve().parents[1] / "plugins")
THREADS = 2
TIMEOUT_MS = 300
CALLS = 8
"""More hung calls than the pool has threads, and more than asyncio's default executor has
on a 2-core machine (6): the old runner queued every later check behind them."""
POLICY_VIOLATION = 44
INVALID_RECORD = 87


@pytest.fixture
def gw(broker: HostPort) -> Iterator[GatewayThread]:
    HangingAlterConfigPolicy.release.clear()
    HangingRecordValidationPolicy.release.clear()
    policies = {
        "alter.config.policy.class.name": "kafka_test_policies.HangingAlterConfigPolicy",
        "alter.config.policy.class.path": PLUGINS,
        "record.validation.policy.class.name": "kafka_test_policies.HangingRecordValidationPolicy",
        "record.validation.policy.class.path": PLUGINS,
        "policy.timeout.ms": TIMEOUT_MS,
        "policy.threads": THREADS,
    }
    running = GatewayThread(gateway_config(broker, policies=policies)).start()
    try:
        yield running
    finally:
        HangingAlterConfigPolicy.release.set()
        HangingRecordValidationPolicy.release.set()
        running.stop()


def _create(bootstrap: str, topic: str, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, 1, 1, config=config or {})])
    assert outcome(futures[topic]) is None


def _produce(topic: str) -> ProduceRequest:
    return produce_v9({topic: {0: one_record_batch()}})


def _alter(topic: str) -> IncrementalAlterConfigsRequest:
    return IncrementalAlterConfigsRequest(
        resources=(
            AlterConfigsResource(
                resource_type=i8(2),
                resource_name=topic,
                configs=(
                    AlterableConfig(name="retention.ms", config_operation=i8(0), value="1000"),
                ),
            ),
        ),
        validate_only=False,
    )


def test_hung_plugins_deny_in_time_and_hold_nothing_else_up(
    gw: GatewayThread, topic_name: str
) -> None:
    hung_topic = f"hang-{topic_name}"
    _create(gw.bootstrap, hung_topic, {"record.validation.policy": "any"})
    bound = TIMEOUT_MS / 1000 + 5

    for _ in range(CALLS):
        answer = RawClient(gw.bootstrap, timeout=bound).request(0, 9, _produce(hung_topic))
        (partition,) = answer.responses[0].partition_responses
        assert int(partition.error_code) == INVALID_RECORD
        assert "HangingRecordValidationPolicy" in (partition.error_message or "")

    for _ in range(CALLS):
        answer = RawClient(gw.bootstrap, timeout=bound).request(44, 1, _alter(hung_topic))
        (resource,) = answer.responses
        assert int(resource.error_code) == POLICY_VIOLATION
        assert "HangingAlterConfigPolicy" in (resource.error_message or "")

    allowed = f"ok-{topic_name}"
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    futures = admin.create_topics([NewTopic(allowed, 1, 1)], request_timeout=1.0)
    assert futures[allowed].result(timeout=1.0) is None
    assert allowed in existing_topics(gw.bootstrap)


def test_a_plugin_burning_cpu_denies_in_time_and_others_are_served(
    broker: HostPort, topic_name: str
) -> None:
    """A plug-in that burns CPU in Python (a pattern gone quadratic, say) rather than waiting:
    it runs on a policy thread, so the event loop still gets the interpreter's lock at every
    switch interval; the call denies after policy.timeout.ms (the thread stays busy until the
    call returns, which is why policy.threads bounds what hung calls can hold) and another
    client's CreateTopics, which no plug-in holds, is decided and created meanwhile."""
    spinning = "kafka_test_policies.SpinningCreateTopicPolicy"
    policies = {
        "create.topic.policy.class.name": spinning,
        "create.topic.policy.class.path": PLUGINS,
        "policy.timeout.ms": TIMEOUT_MS,
        "policy.threads": THREADS,
    }
    gw = GatewayThread(gateway_config(broker, policies=policies)).start()
    plugin = sys.modules["kafka_test_policies"].SpinningCreateTopicPolicy
    plugin.release.clear()
    try:
        spun = RawClient(gw.bootstrap, timeout=TIMEOUT_MS / 1000 + 10)
        answer = spun.request(19, 7, create_topic_request(f"spin-{topic_name}"))
        (topic,) = answer.topics
        assert int(topic.error_code) == POLICY_VIOLATION
        assert "SpinningCreateTopicPolicy" in (topic.error_message or "")
        allowed = f"ok-{topic_name}"
        other = RawClient(gw.bootstrap, timeout=10).request(19, 7, create_topic_request(allowed))
        assert int(other.topics[0].error_code) == 0
    finally:
        plugin.release.set()
        gw.stop()
