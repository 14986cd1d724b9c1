"""Record validation on Produce (seed 002) through the gateway, against the real broker."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32, i32Timedelta

from gateway.config import HostPort
from protocol.codec import decode_response
from tests.batches import batch_with, record, reframe, varint
from tests.support import BrokerTap, GatewayThread, RawClient, gateway_config, unique_name

pytestmark = pytest.mark.inproc

POLICY = "trace-id"
COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture
def tapped(tap: BrokerTap) -> Iterator[tuple[GatewayThread, BrokerTap]]:
    gw = GatewayThread(gateway_config(tap.address)).start()
    try:
        yield gw, tap
    finally:
        gw.stop()


def create_validated_topic(bootstrap: str, partitions: int = 1, policy: str = POLICY) -> str:
    topic = unique_name("rv")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics(
        [NewTopic(topic, partitions, 1, config={"record.validation.policy": policy})]
    )[topic].result(15)
    return topic


def consume(
    bootstrap: str, topic: str, partitions: int, expected: int, wait: float = 20.0
) -> list[tuple[bytes | None, list[tuple[str, bytes]] | None]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[tuple[bytes | None, list[tuple[str, bytes]] | None]] = []
    deadline = time.monotonic() + wait
    try:
        while len(got) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.3)
            if msg is not None and msg.error() is None:
                got.append((msg.value(), msg.headers()))
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_confluent_records_without_the_header_fail_with_invalid_record(
    tapped: tuple[GatewayThread, BrokerTap], compression: str
) -> None:
    gw, _ = tapped
    topic = create_validated_topic(gw.bootstrap)
    producer = Producer(
        {
            "bootstrap.servers": gw.bootstrap,
            "compression.type": compression,
            "linger.ms": 0,
            "retries": 0,
        }
    )
    reports: list[tuple[KafkaError | None, bytes]] = []
    producer.produce(topic, b"no header", on_delivery=lambda e, m: reports.append((e, m.value())))
    producer.flush(15)
    for i in range(20):
        producer.produce(
            topic,
            f"ok-{i}".encode(),
            headers=[("trace-id", f"t{i}".encode())],
            on_delivery=lambda e, m: reports.append((e, m.value())),
        )
    producer.flush(15)
    bad = [e for e, v in reports if v == b"no header"]
    assert len(bad) == 1 and bad[0] is not None
    # librdkafka reports the code with its own text; the gateway's message is checked on the
    # wire in test_record_errors_name_the_bad_record_and_the_other_partition_lands.
    assert bad[0].code() == KafkaError.INVALID_RECORD
    assert all(e is None for e, v in reports if v != b"no header")
    got = consume(gw.bootstrap, topic, 1, 20)
    assert sorted(v for v, _ in got) == sorted(f"ok-{i}".encode() for i in range(20))
    assert all(h == [("trace-id", f"t{v.decode()[3:]}".encode())] for v, h in got if v)


def test_aiokafka_is_validated_too(tapped: tuple[GatewayThread, BrokerTap]) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError as AIOKafkaError

    gw, _ = tapped
    topic = create_validated_topic(gw.bootstrap)

    async def main() -> tuple[bool, str]:
        producer = AIOKafkaProducer(bootstrap_servers=gw.bootstrap, compression_type="gzip")
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"good", headers=[("trace-id", b"x")])
            try:
                await producer.send_and_wait(topic, b"bad")
            except AIOKafkaError as exc:
                # aiokafka 0.14 has no class for INVALID_RECORD (87) and reports UnknownError;
                # the gateway's metrics below show it was this rejection.
                return True, type(exc).__name__
            return False, ""
        finally:
            await producer.stop()

    rejected, _ = asyncio.run(main())
    assert rejected
    policy = "BuiltinRecordValidationPolicy"
    assert gw.metric("kpg_batches_rejected_total", topic=topic, policy=policy) >= 1
    assert gw.metric("kpg_records_rejected_total", topic=topic, policy=policy) >= 1
    assert [v for v, _ in consume(gw.bootstrap, topic, 1, 1)] == [b"good"]


def _batch(codec: str, values: list[tuple[bytes, bool]]) -> bytes:
    """A batch (no producer id, as a plain producer sends) with the header where asked."""
    records = tuple(
        record(i, f"k{i}".encode(), v, ((b"trace-id", b"t"),) if with_header else ())
        for i, (v, with_header) in enumerate(values)
    )
    return batch_with(codec, records, idempotent=False)


def _produce(
    topic: str, parts: dict[int, bytes], acks: int = -1, transactional_id: str | None = None
) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=transactional_id,
        acks=i16(acks),
        timeout=i32Timedelta.parse(timedelta(seconds=10)),
        topic_data=(
            TopicProduceData(
                name=TopicName(topic),
                partition_data=tuple(
                    PartitionProduceData(index=i32(p), records=r) for p, r in parts.items()
                ),
            ),
        ),
    )


def _leader(gw: GatewayThread, topic: str) -> RawClient:
    """The test broker is one node, the leader of every partition."""
    return RawClient(gw.bootstrap)


@pytest.mark.parametrize("codec", ["none", "zstd", "snappy-xerial"])
def test_record_errors_name_the_bad_record_and_the_other_partition_lands(
    tapped: tuple[GatewayThread, BrokerTap], codec: str
) -> None:
    gw, _ = tapped
    topic = create_validated_topic(gw.bootstrap, partitions=2)
    five = [(b"v0", True), (b"v1", True), (b"v2-bad", False), (b"v3", True), (b"v4", True)]
    good = [(b"p1-a", True), (b"p1-b", True)]
    answer = _leader(gw, topic).request(
        0, 9, _produce(topic, {0: _batch(codec, five), 1: _batch(codec, good)})
    )
    by_partition = {p.index: p for p in answer.responses[0].partition_responses}
    rejected = by_partition[0]
    assert rejected.error_code == 87
    assert [e.batch_index for e in rejected.record_errors] == [2]
    assert rejected.record_errors[0].batch_index_error_message == (
        "Record is missing required header 'trace-id' (record.validation.policy=trace-id)"
    )
    assert rejected.error_message and rejected.error_message.startswith(
        "One or more records have been rejected"
    )
    assert by_partition[1].error_code == 0
    got = consume(gw.bootstrap, topic, 2, 2)
    assert sorted(v for v, _ in got) == [b"p1-a", b"p1-b"]


def test_before_v8_the_answer_carries_only_the_code(
    tapped: tuple[GatewayThread, BrokerTap],
) -> None:
    from kio.schema.produce.v7.request import PartitionProduceData as P7
    from kio.schema.produce.v7.request import ProduceRequest as R7
    from kio.schema.produce.v7.request import TopicProduceData as T7

    gw, _ = tapped
    topic = create_validated_topic(gw.bootstrap)
    request = R7(
        transactional_id=None,
        acks=i16(1),
        timeout=i32Timedelta.parse(timedelta(seconds=10)),
        topic_data=(
            T7(
                name=TopicName(topic),
                partition_data=(P7(index=i32(0), records=_batch("none", [(b"x", False)])),),
            ),
        ),
    )
    answer = _leader(gw, topic).request(0, 7, request)
    assert answer.responses[0].partition_responses[0].error_code == 87


def test_transactional_request_with_one_bad_partition_writes_nothing(
    tapped: tuple[GatewayThread, BrokerTap],
) -> None:
    gw, tap = tapped
    topic = create_validated_topic(gw.bootstrap, partitions=2)
    answer = _leader(gw, topic).request(
        0,
        9,
        _produce(
            topic,
            {0: _batch("none", [(b"fine", True)]), 1: _batch("none", [(b"bad", False)])},
            transactional_id="tx-1",
        ),
    )
    codes = {p.index: p.error_code for p in answer.responses[0].partition_responses}
    assert codes == {0: 87, 1: 87}
    assert not [r for r in tap.requests if r.api_key == 0]
    assert consume(gw.bootstrap, topic, 2, 1, wait=3) == []


def test_acks_zero_rejection_closes_the_connection(tapped: tuple[GatewayThread, BrokerTap]) -> None:
    gw, tap = tapped
    topic = create_validated_topic(gw.bootstrap)
    leader = _leader(gw, topic)
    leader.send(0, 9, _produce(topic, {0: _batch("none", [(b"bad", False)])}, acks=0))
    assert leader.is_closed()
    assert not [r for r in tap.requests if r.api_key == 0]
    assert consume(gw.bootstrap, topic, 1, 1, wait=3) == []


def test_corrupt_batch_is_refused_and_not_forwarded(
    tapped: tuple[GatewayThread, BrokerTap],
) -> None:
    gw, tap = tapped
    topic = create_validated_topic(gw.bootstrap)
    batch = bytearray(_batch("none", [(b"fine", True)]))
    batch[-3] ^= 0xFF
    answer = _leader(gw, topic).request(0, 9, _produce(topic, {0: bytes(batch)}))
    partition = answer.responses[0].partition_responses[0]
    assert partition.error_code == 2  # CORRUPT_MESSAGE
    assert "crc" in (partition.error_message or "").lower()
    assert not [r for r in tap.requests if r.api_key == 0]


def test_a_header_count_the_record_cannot_hold_is_refused_under_a_value_rule(
    tapped: tuple[GatewayThread, BrokerTap],
) -> None:
    """A value rule reads no header, but a record's header count must still fit what is left
    of it (each header takes two bytes at least), as Kafka's reader checks: three headers in
    four bytes is a corrupt record, refused by the C scanner's fast path as by the full
    reader (bench/mutation: CR25), never forwarded."""
    gw, tap = tapped
    topic = create_validated_topic(gw.bootstrap, policy="json")
    body = b"\x00\x00\x00" + varint(-1) + varint(2) + b"{}" + varint(3) + b"\x00" * 4
    batch = reframe(_batch("none", [(b"{}", False)]), records_section=varint(len(body)) + body)
    answer = _leader(gw, topic).request(0, 9, _produce(topic, {0: batch}))
    partition = answer.responses[0].partition_responses[0]
    assert partition.error_code == 2  # CORRUPT_MESSAGE
    assert "header count 3 does not fit the record" in (partition.error_message or "")
    assert not [r for r in tap.requests if r.api_key == 0]


def test_dry_run_writes_rejected_records_but_never_a_corrupt_batch(tap: BrokerTap) -> None:
    """record.validation.policy.mode: dry-run. A record the policy rejects is written and
    counted as would_deny; a batch that does not parse is refused all the same."""
    policies = {"record.validation.policy.mode": "dry-run"}
    gw = GatewayThread(gateway_config(tap.address, policies=policies)).start()
    try:
        topic = create_validated_topic(gw.bootstrap)
        leader = _leader(gw, topic)
        answer = leader.request(0, 9, _produce(topic, {0: _batch("none", [(b"bad", False)])}))
        assert answer.responses[0].partition_responses[0].error_code == 0
        assert [v for v, _ in consume(gw.bootstrap, topic, 1, 1)] == [b"bad"]
        labels = {"api": "Produce", "policy": "BuiltinRecordValidationPolicy"}
        assert gw.metric("kpg_policy_decisions_total", outcome="would_deny", **labels) == 1

        produced = len(tap.forwarded(0))
        corrupt = bytearray(_batch("none", [(b"fine", True)]))
        corrupt[-3] ^= 0xFF
        answer = leader.request(0, 9, _produce(topic, {0: bytes(corrupt)}))
        partition = answer.responses[0].partition_responses[0]
        assert partition.error_code == 2  # CORRUPT_MESSAGE
        assert "crc" in (partition.error_message or "").lower()
        assert len(tap.forwarded(0)) == produced
        assert gw.metric("kpg_policy_decisions_total", outcome="denied", **labels) == 1
    finally:
        gw.stop()


def test_unvalidated_topics_are_forwarded_byte_for_byte(
    tapped: tuple[GatewayThread, BrokerTap],
) -> None:
    gw, tap = tapped
    create_validated_topic(gw.bootstrap)  # validation is on for some topic
    plain = unique_name("plain")
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    admin.create_topics([NewTopic(plain, 1, 1)])[plain].result(15)
    request = _produce(plain, {0: _batch("none", [(b"anything", False)])})
    leader = _leader(gw, plain)
    cid = leader.send(0, 9, request)
    frame = leader.recv_frame()
    assert decode_response(0, 9, frame).responses[0].partition_responses[0].error_code == 0
    from protocol.codec import encode_request

    sent = [r.frame for r in tap.requests if r.api_key == 0]
    assert sent == [encode_request(0, 9, cid, "raw-test", request)[4:]]


def test_describe_configs_shows_the_policy(tapped: tuple[GatewayThread, BrokerTap]) -> None:
    gw, _ = tapped
    topic = create_validated_topic(gw.bootstrap)
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(15)
    assert configs["record.validation.policy"].value == POLICY


@pytest.mark.parametrize("store", ["sqlite", "kafka"])
def test_policy_survives_restart_and_is_seen_by_a_second_instance(
    broker: HostPort, tmp_path: object, store: str
) -> None:
    import os

    state = {
        "store": store,
        "path": os.path.join(str(tmp_path), "shared-state.db"),
        "topic": f"_kpg_state_{uuid.uuid4().hex[:6]}",
        "refresh_interval_s": 0.2,
    }
    first = GatewayThread(gateway_config(broker, state=state)).start()
    second = GatewayThread(gateway_config(broker, state=state)).start()
    try:
        topic = create_validated_topic(first.bootstrap)
        bad = _produce(topic, {0: _batch("none", [(b"bad", False)])})
        deadline = time.monotonic() + 10
        code = 0
        while time.monotonic() < deadline and code != 87:
            code = (
                _leader(second, topic)
                .request(0, 9, bad)
                .responses[0]
                .partition_responses[0]
                .error_code
            )
            time.sleep(0.2)
        assert code == 87, "the second gateway never enforced the first one's topic config"
    finally:
        first.stop()
        second.stop()
    restarted = GatewayThread(gateway_config(broker, state=state)).start()
    try:
        answer = _leader(restarted, topic).request(0, 9, bad)
        assert answer.responses[0].partition_responses[0].error_code == 87
    finally:
        restarted.stop()


def delete_behind_the_gateway(broker: HostPort, topic: str) -> None:
    """Delete ``topic`` on the broker directly, and wait until the broker no longer lists it."""
    behind = AdminClient({"bootstrap.servers": str(broker)})
    behind.delete_topics([topic])[topic].result(15)
    deadline = time.monotonic() + 30
    while topic in behind.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"{topic} still listed 30 s after its delete"
        time.sleep(0.2)


def produce_without_header(bootstrap: str, topic: str, **config: Any) -> list[KafkaError | None]:
    """Produce one record without headers to ``topic``; its delivery report."""
    reports: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, **config})
    producer.produce(topic, b"no header", on_delivery=lambda e, m: reports.append(e))
    producer.flush(30)
    return reports


def test_a_topic_created_again_after_a_delete_the_gateway_did_not_see_has_no_old_policy(
    broker: HostPort,
) -> None:
    """A topic deleted at the broker directly (or lost with `make run`'s embedded broker)
    leaves its record.validation.policy in the state store; a topic of that name created
    again through the gateway without one is not validated with the old value."""
    gw = GatewayThread(gateway_config(broker)).start()
    try:
        topic = create_validated_topic(gw.bootstrap)
        delete_behind_the_gateway(broker, topic)
        admin = AdminClient({"bootstrap.servers": gw.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        configs = admin.describe_configs([resource])[resource].result(15)
        assert "record.validation.policy" not in configs
        assert produce_without_header(gw.bootstrap, topic, retries=0) == [None]
    finally:
        gw.stop()


def test_a_topic_auto_created_after_a_delete_the_gateway_did_not_see_has_no_old_policy(
    broker: HostPort,
) -> None:
    """The same through auto-creation: a producer's Metadata request makes the gateway create
    the topic, which sets no record.validation.policy, so the old one is removed."""
    gw = GatewayThread(gateway_config(broker)).start()
    try:
        topic = create_validated_topic(gw.bootstrap)
        delete_behind_the_gateway(broker, topic)
        reports = produce_without_header(gw.bootstrap, topic, **{"message.timeout.ms": 20000})
        assert reports == [None]  # auto-created by the producer's Metadata request
    finally:
        gw.stop()
