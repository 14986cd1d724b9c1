"""The gateway's own topic config ``record.validation.policy`` (seed 002) in config changes:
IncrementalAlterConfigs and DeleteTopics against the real broker, the legacy AlterConfigs
against a scripted one (the test broker has no AlterConfigs).

The broker never sees the key (it would refuse a config name it does not know); the gateway
stores it once the rest of the change is made, and the records of the topic are validated
from then on.
"""

from __future__ import annotations

import dataclasses
import importlib
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from kio.index import load_response_schema
from kio.schema.describe_configs.v4.response import (
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
)
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta

from gateway.record_validation import STATE_NAMESPACE
from protocol import client_configs as wire
from protocol.alter_configs import DELETE, SET
from protocol.codec import decode_request
from protocol.framing import parse_request_header
from tests.plugins.kafka_test_policies import RecordingAlterConfigV2Policy
from tests.scripted import ScriptedBroker, ScriptedCluster
from tests.support import BrokerTap, GatewayThread, RawClient, gateway_config

pytestmark = pytest.mark.inproc

KEY = "record.validation.policy"
POLICY = "trace-id"
V2 = {
    "alter.config.v2.policy.class.name": (
        "tests.plugins.kafka_test_policies.RecordingAlterConfigV2Policy"
    )
}
ZERO = i32Timedelta.parse(timedelta(0))


@pytest.fixture
def tapped(tap: BrokerTap) -> Iterator[tuple[GatewayThread, BrokerTap]]:
    gw = GatewayThread(gateway_config(tap.address, policies=V2)).start()
    try:
        yield gw, tap
    finally:
        gw.stop()


def new_topic(bootstrap: str, configs: dict[str, str] | None = None) -> str:
    topic = f"rvc-{uuid.uuid4().hex[:8]}"
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
    future = admin.incremental_alter_configs([resource], validate_only=validate_only)[resource]
    try:
        future.result(15)
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        return error.code(), error.str()
    return None


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


def at_broker(tap: BrokerTap, topic: str) -> dict[str, str]:
    """The topic's configs as the broker itself holds them (asked past the gateway)."""
    admin = AdminClient({"bootstrap.servers": str(tap.address)})
    resource = ConfigResource("topic", topic)
    entries = admin.describe_configs([resource])[resource].result(15)
    return {k: e.value for k, e in entries.items() if e.value is not None}


def forwarded(tap: BrokerTap, api_key: int) -> list[Any]:
    return [
        decode_request(parse_request_header(r.frame), r.frame)
        for r in tap.requests
        if r.api_key == api_key
    ]


def set_policy(value: str) -> ConfigEntry:
    return ConfigEntry(KEY, value, incremental_operation=AlterConfigOpType.SET)


def test_set_then_delete_turns_validation_on_and_off(
    tapped: tuple[GatewayThread, BrokerTap],
) -> None:
    gw, tap = tapped
    topic = new_topic(gw.bootstrap)
    assert produce_without_header(gw.bootstrap, topic) == 0
    tap.requests.clear()

    assert raw_alter(gw.bootstrap, topic, [(KEY, SET, POLICY)]) == (0, None)
    # A change of the gateway's key alone never reaches the broker.
    assert forwarded(tap, 44) == []
    assert gw.gateway.state.get(STATE_NAMESPACE, topic) == POLICY
    assert produce_without_header(gw.bootstrap, topic) == KafkaError.INVALID_RECORD
    assert described(gw.bootstrap, topic)[KEY] == (POLICY, 1)  # DYNAMIC_TOPIC_CONFIG

    assert raw_alter(gw.bootstrap, topic, [(KEY, DELETE, None)]) == (0, None)
    assert forwarded(tap, 44) == []
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

    sent = forwarded(tap, 44)
    assert [
        [(r.resource_name, [(c.name, c.value) for c in r.configs]) for r in s.resources]
        for s in sent
    ] == [[(topic, [("retention.ms", "2000")])]]
    assert at_broker(tap, topic) == {"retention.ms": "2000"}
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

    missing = f"rvc-missing-{uuid.uuid4().hex[:6]}"
    assert alter(gw.bootstrap, missing, [set_policy(POLICY)]) == (
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        f"The topic '{missing}' does not exist.",
    )
    assert gw.gateway.state.get(STATE_NAMESPACE, missing) is None
    assert forwarded(tap, 44) == []


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
            return self._metadata(me, request)
        if header.api_key == 32:
            return DescribeConfigsResponse(
                throttle_time=ZERO,
                results=tuple(
                    DescribeConfigsResult(
                        error_code=ErrorCode.none,
                        error_message=None,
                        resource_type=r.resource_type,
                        resource_name=r.resource_name,
                        configs=tuple(
                            DescribeConfigsResourceResult(
                                name=k,
                                value=v,
                                read_only=False,
                                config_source=i8(DYNAMIC_TOPIC),
                                is_sensitive=False,
                                synonyms=(),
                                documentation=None,
                            )
                            for k, v in self.configs.get(r.resource_name, {}).items()
                        ),
                    )
                    for r in request.resources
                ),
            )
        if header.api_key == 33:
            schema: Any = load_response_schema(33, header.api_version)
            module = importlib.import_module(schema.__module__)
            results = []
            for r in request.resources:
                unknown = [c.name for c in r.configs if c.name in (KEY, "no.such.config")]
                if not unknown and not request.validate_only:
                    self.configs[r.resource_name] = {c.name: c.value for c in r.configs}
                results.append(
                    module.AlterConfigsResourceResponse(
                        error_code=ErrorCode.invalid_config if unknown else ErrorCode.none,
                        error_message=f"Unknown topic config name: {unknown[0]}"
                        if unknown
                        else None,
                        resource_type=r.resource_type,
                        resource_name=r.resource_name,
                    )
                )
            return schema(throttle_time=ZERO, responses=tuple(results))
        raise AssertionError(f"unexpected API {header.api_key}")

    def _metadata(self, me: ScriptedBroker, request: Any) -> Any:
        assert me.address is not None
        return MetadataResponse(
            throttle_time=ZERO,
            brokers=(
                MetadataResponseBroker(
                    node_id=BrokerId(1), host=me.address.host, port=i32(me.address.port)
                ),
            ),
            cluster_id="scripted",
            controller_id=BrokerId(1),
            topics=tuple(
                MetadataResponseTopic(
                    error_code=ErrorCode.none,
                    name=TopicName(t.name),
                    topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, t.name),
                    partitions=(
                        MetadataResponsePartition(
                            error_code=ErrorCode.none,
                            partition_index=i32(0),
                            leader_id=BrokerId(1),
                            replica_nodes=(BrokerId(1),),
                            isr_nodes=(BrokerId(1),),
                        ),
                    ),
                )
                for t in request.topics or ()
            ),
        )


@pytest.fixture
def scripted() -> Iterator[ScriptedCluster]:
    cluster = ScriptedCluster()
    try:
        yield cluster
    finally:
        cluster.close()


def legacy(
    client: RawClient, topic: str, configs: dict[str, str], validate_only: bool = False
) -> tuple[int, str | None]:
    from kio.schema.alter_configs.v1.request import (
        AlterableConfig,
        AlterConfigsRequest,
        AlterConfigsResource,
    )

    request = AlterConfigsRequest(
        resources=(
            AlterConfigsResource(
                resource_type=i8(2),
                resource_name=topic,
                configs=tuple(AlterableConfig(name=k, value=v) for k, v in configs.items()),
            ),
        ),
        validate_only=validate_only,
    )
    (result,) = client.request(33, 1, request).responses
    return int(result.error_code), result.error_message


def test_legacy_alter_configs_sets_and_implicitly_deletes(scripted: ScriptedCluster) -> None:
    """Scripted upstream: the test broker has no AlterConfigs (API key 33), and accepts
    config names it does not know. The scripted one refuses unknown names as a Kafka broker
    does, so a success shows the gateway's key was taken out."""
    topic, bare = f"rvc-l-{uuid.uuid4().hex[:6]}", f"rvc-b-{uuid.uuid4().hex[:6]}"
    broker = LegacyConfigsBroker({topic: {"retention.ms": "100"}})
    upstream = scripted.add(broker.respond, "legacy")
    assert upstream.address is not None
    # A Kafka-like broker: it honours validate_only and reports config sources truly.
    kafka_like = {"ignores_validate_only": False, "topic_config_source_unreliable": False}
    config = gateway_config(upstream.address)
    config = dataclasses.replace(
        config, upstream=dataclasses.replace(config.upstream, **kafka_like)
    )
    gw = GatewayThread(config).start()
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
