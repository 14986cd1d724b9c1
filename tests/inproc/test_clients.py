"""Real clients through the real gateway in front of the real broker: nothing is lost."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support import GatewayThread

pytestmark = pytest.mark.inproc

COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(15)


def produce(bootstrap: str, topic: str, count: int, compression: str = "none") -> list[bytes]:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "compression.type": compression, "linger.ms": 5}
    )
    values = [f"{topic}-{i}-".encode() + bytes(range(i % 50)) for i in range(count)]
    errors: list[KafkaError] = []
    for i, value in enumerate(values):
        producer.produce(
            topic,
            key=str(i).encode(),
            value=value,
            on_delivery=lambda err, _msg: err and errors.append(err),
        )
    assert producer.flush(30) == 0
    assert errors == []
    return values


def consume_assigned(bootstrap: str, topic: str, partitions: int, expected: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_confluent_kafka_every_record_arrives(
    gateway: GatewayThread, topic_name: str, compression: str
) -> None:
    create_topic(gateway.bootstrap, topic_name, partitions=2)
    sent = produce(gateway.bootstrap, topic_name, 300, compression)
    got = consume_assigned(gateway.bootstrap, topic_name, 2, len(sent))
    assert sorted(got) == sorted(sent)


def test_consumer_group_subscribe_commit_and_rebalance(
    gateway: GatewayThread, topic_name: str
) -> None:
    """Two members of one group share the partitions; commits are seen by a later member."""
    create_topic(gateway.bootstrap, topic_name, partitions=4)
    sent = produce(gateway.bootstrap, topic_name, 400)
    group = f"g-{uuid.uuid4().hex[:8]}"

    def member() -> Consumer:
        c = Consumer(
            {
                "bootstrap.servers": gateway.bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 500,
            }
        )
        c.subscribe([topic_name])
        return c

    first = member()
    got: dict[bytes, int] = {}
    deadline = time.monotonic() + 60
    # The first member alone takes some records and commits them.
    while len(got) < 100 and time.monotonic() < deadline:
        msg = first.poll(0.5)
        if msg is not None and msg.error() is None:
            got[msg.value()] = got.get(msg.value(), 0) + 1
    assert got, "the first member never received records"
    first.commit(asynchronous=False)
    committed_before = len(got)

    second = member()  # joins: the group rebalances to two members
    assignments: dict[str, set[int]] = {"first": set(), "second": set()}
    try:
        while time.monotonic() < deadline and (
            len(got) < len(sent) or not (assignments["first"] and assignments["second"])
        ):
            for name, consumer in (("first", first), ("second", second)):
                msg = consumer.poll(0.2)
                assignments[name] = {tp.partition for tp in consumer.assignment()}
                if msg is not None and msg.error() is None:
                    got[msg.value()] = got.get(msg.value(), 0) + 1
        assert assignments["first"] and assignments["second"], assignments
        assert not assignments["first"] & assignments["second"]
        assert set(got) == set(sent)
        committed = first.committed([TopicPartition(topic_name, p) for p in range(4)], 10)
        assert sum(max(tp.offset, 0) for tp in committed) >= committed_before
    finally:
        first.close()
        second.close()


def test_aiokafka_produce_and_consume(gateway: GatewayThread, topic_name: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def main() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=gateway.bootstrap, compression_type="gzip")
        await producer.start()
        try:
            for i in range(200):
                await producer.send(topic_name, f"aio-{i}".encode())
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic_name, bootstrap_servers=gateway.bootstrap, auto_offset_reset="earliest"
        )
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                while len(got) < 200:
                    batch = await consumer.getmany(timeout_ms=500)
                    for records in batch.values():
                        got.extend(r.value for r in records)
        finally:
            await consumer.stop()
        return got

    create_topic(gateway.bootstrap, topic_name)
    assert sorted(asyncio.run(main())) == sorted(f"aio-{i}".encode() for i in range(200))


def test_kafka_python_produce_and_consume(gateway: GatewayThread, topic_name: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    create_topic(gateway.bootstrap, topic_name)
    producer = KafkaProducer(bootstrap_servers=gateway.bootstrap, compression_type="lz4")
    for i in range(150):
        producer.send(topic_name, f"kp-{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=gateway.bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=5000
    )
    consumer.assign([KTopicPartition(topic_name, 0)])
    got = [m.value for m in consumer]
    consumer.close()
    assert sorted(got) == sorted(f"kp-{i}".encode() for i in range(150))


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is installed by `make test`")
def test_kcat_sees_only_gateway_addresses_and_round_trips(
    gateway: GatewayThread, topic_name: str
) -> None:
    create_topic(gateway.bootstrap, topic_name)
    listing = subprocess.run(
        ["kcat", "-b", gateway.bootstrap, "-L", "-J"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    import json

    brokers = json.loads(listing.stdout)["brokers"]
    gateway_ports = {port for _, port in gateway.gateway.nodes.gateway_addresses_snapshot()}
    assert brokers and all(int(b["name"].rsplit(":", 1)[1]) in gateway_ports for b in brokers)
    assert all(
        b["name"].rsplit(":", 1)[1] != str(gateway.config.upstream.bootstrap_servers[0].port)
        for b in brokers
    )
    lines = "\n".join(f"kcat-{i}" for i in range(50)) + "\n"
    subprocess.run(
        ["kcat", "-b", gateway.bootstrap, "-P", "-t", topic_name, "-z", "snappy"],
        input=lines,
        text=True,
        timeout=30,
        check=True,
    )
    out = subprocess.run(
        ["kcat", "-b", gateway.bootstrap, "-C", "-t", topic_name, "-o", "beginning", "-e", "-q"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert sorted(out.stdout.split()) == sorted(f"kcat-{i}" for i in range(50))
