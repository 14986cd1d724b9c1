"""The gateway's own topic config ``record.validation.policy`` (seed 002) in config changes:
IncrementalAlterConfigs and DeleteTopics against the real broker, the legacy AlterConfigs
against a scripted one (the test broker has no AlterConfigs).

The broker never sees the key (it would refuse a config name it does not know); the gateway
stores it once the rest of the change is made, and the records of the topic are validated
from then on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from kio.schema.errors import ErrorCode

from gateway.record_validation import STATE_NAMESPACE
from protocol import client_configs as wire
from protocol.alter_configs import DELETE, SET
from tests.plugins.kafka_test_policies import RecordingAlterConfigV2Policy
from tests.scripted import (
    ScriptedBroker,
    ScriptedCluster,
    alter_configs_response,
    describe_configs_response,
    describe_configs_result,
    metadata_response,
)
from tests.support import (
    KAFKA_LIKE_UPSTREAM,
    BrokerTap,
    GatewayThread,
    RawClient,
    gateway_config,
    legacy_alter_configs_request,
    outcome,
    topic_configs,
    unique_name,
)

pytestmark = pytest.mark.inproc

KEY = "record.validation.policy"
POLICY = "trace-id"
V2 = {
    "alter.config.v2.policy.class.name": (
        "tests.plugins.kafka_test_policies.RecordingAlterConfigV2Policy"
    )
}


@pytest.fixture
def tapped(tap: BrokerTap) -> Iterator[tuple[GatewayThread, BrokerTap]]:
    gw = GatewayThread(gateway_config(tap.address, policies=V2)).start()
    try:
        yield gw, tap
    finally:
        gw.stop()


def new_topic(bootstrap: str, configs: dict[str, str] | None = None) -> str:
    topic = unique_name("rvc")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=configs or {})])[topic].result(15)
    return topic


def produce_without_header(bootstrap: str, topic: str) -> int:
    """Produce one record without the trace-id header; the delivery's error code (0: ok)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "retries": 0})
    reports: list[KafkaError | None] = []
    producer.produce(topic, b"no header", on_delivery=lambda e, m: reports.append(e))
    producer.flush(15)
    assert len(reports) == 1
    return 0 if reports[0] is None else int(reports[0].code())


def alter(
    bootstrap: str, topic: str, entries: list[ConfigEntry], validate_only: bool = False
) -> tuple[int, str] | None:
    """IncrementalAlterConfigs on one topic with confluent-kafka: None or (code, message)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource("topic", topic, incremental_configs=entries)
    return outcome(
        admin.incremental_alter_configs([resource], validate_only=validate_only)[resource]
    )


def raw_alter(
    bootstrap: str, topic: str, ops: list[tuple[str, int, str | None]]
) -> tuple[int, str | None]:
    """IncrementalAlterConfigs v1 on the gateway's bootstrap connection, the one connection
    the tap is sure to see (the test broker advertises its own address, not the tap's, so
    node connections pass it by)."""
    client = RawClient(bootstrap)
    try:
        client.send_bytes(
            wire.incremental_alter_request(
                [(2, topic, ops)], validate_only=False, correlation_id=1, client_id="raw-test"
            )
        )
        (result,) = wire.read_incremental_alter_response(client.recv_frame())
    finally:
        client.close()
    return result.error_code, result.error_message


def described(bootstrap: str, topic: str) -> dict[str, tuple[str | None, int]]:
    """The topic's configs through the gateway: name -> (value, source)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource("topic", topic)
    entries = admin.describe_configs([resource])[resource].result(15)
    return {k: (e.value, int(e.source)) for k, e in entries.items()}


def set_policy(value: str) -> ConfigEntry:
    return ConfigEntry(KEY, value, incremental_operation=AlterConfigOpType.SET)


def changes_sent(tap: BrokerTap) -> list[Any]:
    """The IncrementalAlterConfigs that reached the broker, less the gateway's authorization
    asks (validate_only, no entries: they change nothing)."""
    return [
        s
        for s in tap.forwarded(44)
        if not (s.validate_only and all(not r.configs for r in s.resources))
    ]


def test_set_then_delete_turns_validation_on_and_off(
    tapped: tuple[GatewayThread, BrokerTap],
) -> None:
    gw, tap = tapped
    topic = new_topic(gw.bootstrap)
    assert produce_without_header(gw.bootstrap, topic) == 0
    tap.requests.clear()

    assert raw_alter(gw.bootstrap, topic, [(KEY, SET, POLICY)]) == (0, None)
    # A change of the gateway's key alone never reaches the broker; the broker is asked only
    # whether the client may alter the topic's configs.
    assert changes_sent(tap) == []
    assert [[r.resource_name for r in s.resources] for s in tap.forwarded(44)] == [[topic]]
    assert gw.gateway.state.get(STATE_NAMESPACE, topic) == POLICY
    assert produce_without_header(gw.bootstrap, topic) == KafkaError.INVALID_RECORD
    assert described(gw.bootstrap, topic)[KEY] == (POLICY, 1)  # DYNAMIC_TOPIC_CONFIG

    assert raw_alter(gw.bootstrap, topic, [(KEY, DELETE, None)]) == (0, None)
    assert changes_sent(tap) == []
    assert gw.gateway.state.get(STATE_NAMESPACE, topic) is None
    assert produce_without_header(gw.bootstrap, topic) == 0
    assert KEY not in described(gw.bootstrap, topic)


def test_mixed_change_sends_the_broker_the_rest_and_policies_see_the_key(
    tapped: tuple[GatewayThread, BrokerTap],
) -> None:
    gw, tap = tapped
    topic = new_topic(gw.bootstrap, {"retention.ms": "1000"})
    assert alter(gw.bootstrap, topic, [set_policy("first")]) is None
    tap.requests.clear()
    start = len(RecordingAlterConfigV2Policy.seen)

    ops = [("retention.ms", SET, "2000"), (KEY, SET, POLICY)]
    assert raw_alter(gw.bootstrap, topic, ops)[0] == 0  # Tansu's message on success is ""

    sent = changes_sent(tap)
    assert [
        [(r.resource_name, [(c.name, c.value) for c in r.configs]) for r in s.resources]
        for s in sent
    ] == [[(topic, [("retention.ms", "2000")])]]
    # The configs as the broker itself holds them (asked past the gateway).
    assert topic_configs(str(tap.address), topic) == {"retention.ms": "2000"}
    assert gw.gateway.state.get(STATE_NAMESPACE, topic) == POLICY
    seen = [m for m in RecordingAlterConfigV2Policy.seen[start:] if m.resource.name == topic]
    assert [(m.configs_before, m.configs_after) for m in seen] == [
        (
            {"retention.ms": "1000", KEY: "first"},
            {"retention.ms": "2000", KEY: POLICY},
        )
    ]


def test_validate_only_and_refusals_store_nothing(
    tapped: tuple[GatewayThread, BrokerTap],
) -> None:
    gw, tap = tapped
    topic = new_topic(gw.bootstrap)
    assert alter(gw.bootstrap, topic, [set_policy(POLICY)], validate_only=True) is None
    assert gw.gateway.state.get(STATE_NAMESPACE, topic) is None

    append = ConfigEntry(KEY, "x", incremental_operation=AlterConfigOpType.APPEND)
    assert alter(gw.bootstrap, topic, [append]) == (
        KafkaError.INVALID_CONFIG,
        f"Can't APPEND to key {KEY} because its type is not LIST.",
    )

    missing = unique_name("rvc-missing")
    assert alter(gw.bootstrap, missing, [set_policy(POLICY)]) == (
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        f"The topic '{missing}' does not exist.",
    )
    assert gw.gateway.state.get(STATE_NAMESPACE, missing) is None
    assert changes_sent(tap) == []


def test_deleting_the_topic_forgets_its_policy(tapped: tuple[GatewayThread, BrokerTap]) -> None:
    gw, _ = tapped
    topic = new_topic(gw.bootstrap, {KEY: POLICY})
    assert gw.gateway.state.get(STATE_NAMESPACE, topic) == POLICY
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    admin.delete_topics([topic])[topic].result(15)
    assert gw.gateway.state.get(STATE_NAMESPACE, topic) is None
    # A topic made later under the same name starts unvalidated.
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    assert produce_without_header(gw.bootstrap, topic) == 0
    assert KEY not in described(gw.bootstrap, topic)


# --- the legacy AlterConfigs, against a scripted upstream -------------------------------------

DYNAMIC_TOPIC = 1


class LegacyConfigsBroker:
    """A broker with AlterConfigs (the test broker has none): it holds each topic's configs,
    describes them, replaces them on AlterConfigs, and reports every topic as existing."""

    def __init__(self, configs: dict[str, dict[str, str]]) -> None:
        self.configs = configs

    async def respond(self, me: ScriptedBroker, header: Any, request: Any) -> Any:
        if header.api_key == 3:
            # Every topic exists, with one partition on broker 1.
            return metadata_response(me, ((t.name, [(1,)]) for t in request.topics or ()))
        if header.api_key == 32:
            return describe_configs_response(
                describe_configs_result(
                    r.resource_type,
                    r.resource_name,
                    (
                        (k, v, DYNAMIC_TOPIC)
                        for k, v in self.configs.get(r.resource_name, {}).items()
                    ),
                )
                for r in request.resources
            )
        if header.api_key == 44:
            # The gateway's authorization ask (validate_only, no entries): allowed.
            assert request.validate_only and all(not r.configs for r in request.resources)
            return alter_configs_response(
                header, ((r, ErrorCode.none, None) for r in request.resources)
            )
        if header.api_key == 33:
            results = []
            for r in request.resources:
                unknown = [c.name for c in r.configs if c.name in (KEY, "no.such.config")]
                if not unknown and not request.validate_only:
                    self.configs[r.resource_name] = {c.name: c.value for c in r.configs}
                if unknown:
                    message = f"Unknown topic config name: {unknown[0]}"
                    results.append((r, ErrorCode.invalid_config, message))
                else:
                    results.append((r, ErrorCode.none, None))
            return alter_configs_response(header, results)
        raise AssertionError(f"unexpected API {header.api_key}")


def legacy(
    client: RawClient, topic: str, configs: dict[str, str], validate_only: bool = False
) -> tuple[int, str | None]:
    request = legacy_alter_configs_request(1, [(2, topic, configs)], validate_only)
    (result,) = client.request(33, 1, request).responses
    return int(result.error_code), result.error_message


def test_legacy_alter_configs_sets_and_implicitly_deletes(
    scripted_cluster: ScriptedCluster,
) -> None:
    """Scripted upstream: the test broker has no AlterConfigs (API key 33), and accepts
    config names it does not know. The scripted one refuses unknown names as a Kafka broker
    does, so a success shows the gateway's key was taken out."""
    topic, bare = unique_name("rvc-l"), unique_name("rvc-b")
    broker = LegacyConfigsBroker({topic: {"retention.ms": "100"}})
    upstream = scripted_cluster.add(broker.respond, "legacy")
    assert upstream.address is not None
    gw = GatewayThread(gateway_config(upstream.address, upstream=KAFKA_LIKE_UPSTREAM)).start()
    try:
        client = RawClient(gw.bootstrap)
        state = gw.gateway.state
        refused = legacy(client, topic, {"no.such.config": "1", KEY: POLICY})
        assert refused == (40, "Unknown topic config name: no.such.config")
        assert state.get(STATE_NAMESPACE, topic) is None  # the broker refused the change

        assert legacy(client, topic, {"retention.ms": "200", KEY: POLICY}) == (0, None)
        assert broker.configs[topic] == {"retention.ms": "200"}
        assert state.get(STATE_NAMESPACE, topic) == POLICY

        # The legacy API replaces the whole set: leaving the key out deletes it.
        assert legacy(client, topic, {"retention.ms": "300"}) == (0, None)
        assert broker.configs[topic] == {"retention.ms": "300"}
        assert state.get(STATE_NAMESPACE, topic) is None

        # A topic with nothing else set: only the gateway's key changes, the broker is not
        # asked to change anything.
        before = len([h for h, _ in upstream.requests if h.api_key == 33])
        assert legacy(client, bare, {KEY: POLICY}, validate_only=True) == (0, None)
        assert state.get(STATE_NAMESPACE, bare) is None
        assert legacy(client, bare, {KEY: POLICY}) == (0, None)
        assert state.get(STATE_NAMESPACE, bare) == POLICY
        assert len([h for h, _ in upstream.requests if h.api_key == 33]) == before
        assert legacy(client, bare, {}) == (0, None)
        assert state.get(STATE_NAMESPACE, bare) is None
        assert len([h for h, _ in upstream.requests if h.api_key == 33]) == before
    finally:
        gw.stop()
