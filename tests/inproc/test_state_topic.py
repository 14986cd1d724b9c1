"""The Kafka-topic state store against the real broker: several instances on one topic stand for
several gateways in front of one cluster."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from gateway.config import HostPort
from gateway.embedded import EmbeddedBroker, free_port
from gateway.state import KafkaTopicStore, StateStoreError
from tests.support import BrokerTap

pytestmark = pytest.mark.inproc

NS = "topic-config"


@pytest.fixture
def state_topic() -> str:
    return f"kpg-state-{uuid.uuid4().hex[:10]}"


def run(coro: Awaitable[Any]) -> Any:
    async def main() -> Any:
        return await asyncio.wait_for(coro, 120)

    return asyncio.run(main())


async def started(broker: HostPort, topic: str, refresh_interval_s: float = 0.2) -> KafkaTopicStore:
    store = KafkaTopicStore(
        [broker], topic, refresh_interval_s=refresh_interval_s, request_timeout_s=20
    )
    await store.start()
    return store


async def eventually(predicate: Callable[[], bool], timeout: float = 15.0) -> bool:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def read_topic(broker: HostPort, topic: str) -> list[tuple[bytes, bytes | None]]:
    """Every record of the state topic, as a plain consumer sees it."""
    consumer = AIOKafkaConsumer(bootstrap_servers=str(broker), enable_auto_commit=False)
    await consumer.start()
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        await consumer.seek_to_beginning(partition)
        end = (await consumer.end_offsets([partition]))[partition]
        found: list[tuple[bytes, bytes | None]] = []
        while await consumer.position(partition) < end:
            batches = await consumer.getmany(partition, timeout_ms=1000)
            found += [(r.key, r.value) for r in batches.get(partition, [])]
        return found
    finally:
        await consumer.stop()


def test_a_put_on_one_instance_is_seen_by_the_other(broker: HostPort, state_topic: str) -> None:
    async def main() -> None:
        a = await started(broker, state_topic)
        b = await started(broker, state_topic)
        try:
            await a.put(NS, "orders", "strict")
            assert a.get(NS, "orders") == "strict", "a put is visible to its own instance"
            assert await eventually(lambda: b.get(NS, "orders") == "strict")
            await b.put(NS, "orders", "lenient")
            assert b.get(NS, "orders") == "lenient"
            assert await eventually(lambda: a.get(NS, "orders") == "lenient")
        finally:
            await a.close()
            await b.close()

    run(main())


def test_records_are_namespace_nul_key_and_a_tombstone_deletes(
    broker: HostPort, state_topic: str
) -> None:
    async def main() -> None:
        a = await started(broker, state_topic)
        b = await started(broker, state_topic)
        try:
            await a.put(NS, "orders", "strict")
            assert await eventually(lambda: b.get(NS, "orders") == "strict")
            await a.put(NS, "orders", None)
            assert a.get(NS, "orders") is None
            assert await eventually(lambda: b.get(NS, "orders") is None)
            assert dict(b.items(NS)) == {}
        finally:
            await a.close()
            await b.close()
        assert await read_topic(broker, state_topic) == [
            (b"topic-config\0orders", b"strict"),
            (b"topic-config\0orders", None),
        ]

    run(main())


def test_a_restarted_instance_loads_the_full_state(broker: HostPort, state_topic: str) -> None:
    async def main() -> None:
        first = await started(broker, state_topic)
        try:
            await asyncio.gather(*(first.put(NS, f"topic-{i}", f"v{i}") for i in range(30)))
            await first.put(NS, "topic-3", "changed")
            await first.put(NS, "topic-4", None)
            await first.put("client-config", "user=alice", "producer_byte_rate=1024")
        finally:
            await first.close()

        expected = {f"topic-{i}": f"v{i}" for i in range(30) if i != 4} | {"topic-3": "changed"}
        restarted = await started(broker, state_topic)
        try:
            assert dict(restarted.items(NS)) == expected
            assert restarted.get("client-config", "user=alice") == "producer_byte_rate=1024"
        finally:
            await restarted.close()

    run(main())


def test_delete_prefix(broker: HostPort, state_topic: str) -> None:
    async def main() -> None:
        a = await started(broker, state_topic)
        b = await started(broker, state_topic)
        try:
            for key in ("t1/policy", "t1/retention", "t10/policy"):
                await a.put(NS, key, "v")
            await a.put("client-config", "t1/policy", "kept")
            assert await eventually(lambda: len(b.items(NS)) == 3)
            await b.delete_prefix(NS, "t1/")
            assert dict(b.items(NS)) == {"t10/policy": "v"}
            assert await eventually(lambda: dict(a.items(NS)) == {"t10/policy": "v"})
            assert a.get("client-config", "t1/policy") == "kept"
        finally:
            await a.close()
            await b.close()

    run(main())


def record_batches(broker: HostPort, topic: str) -> list[list[bytes | None]]:
    """The state topic's record batches as the broker stores them: the keys of each."""
    from protocol.records import RecordReading, read_batches, read_records
    from tests.support import RawClient, fetch_request

    request = fetch_request(topic, max_wait=timedelta(milliseconds=200))
    client = RawClient(broker)
    try:
        answer = client.request(1, 12, request)
    finally:
        client.close()
    (data,) = answer.responses[0].partitions
    return [
        [key for _, key, *_ in read_records(batch, RecordReading(key_bytes=-1))]
        for batch in read_batches(data.records or b"")
    ]


def test_put_all_is_one_record_batch(broker: HostPort, state_topic: str) -> None:
    """Kafka appends a batch whole or not at all: every instance reads all the changes of one
    write or none of them."""

    async def main() -> None:
        a = await started(broker, state_topic)
        b = await started(broker, state_topic)
        try:
            await a.put(NS, "gone", "soon")
            await a.put_all(NS, {"x": "1", "y": "2", "gone": None})
            assert dict(a.items(NS)) == {"x": "1", "y": "2"}
            assert await eventually(lambda: dict(b.items(NS)) == {"x": "1", "y": "2"})
        finally:
            await a.close()
            await b.close()

    run(main())
    prefix = NS.encode() + b"\x00"
    assert record_batches(broker, state_topic) == [
        [prefix + b"gone"],
        [prefix + b"x", prefix + b"y", prefix + b"gone"],
    ]


def test_delete_prefix_catches_up_before_choosing_keys(broker: HostPort, state_topic: str) -> None:
    """A key another instance wrote just before is deleted too, though the deleting instance's
    tail has not reached it yet (Tansu holds its slow fetch for the whole 2 s)."""

    async def main() -> None:
        a = await started(broker, state_topic)
        b = await started(broker, state_topic, refresh_interval_s=2)
        try:
            await a.put(NS, "t1/policy", "v")
            assert b.get(NS, "t1/policy") is None, "b's tail is behind"
            await b.delete_prefix(NS, "t1/")
            assert b.get(NS, "t1/policy") is None
            assert await eventually(lambda: a.get(NS, "t1/policy") is None)
        finally:
            await a.close()
            await b.close()

    run(main())


def test_the_topic_is_created_compacted_with_one_partition(
    broker: HostPort, state_topic: str
) -> None:
    async def main() -> None:
        store = await started(broker, state_topic)
        await store.close()
        admin = AIOKafkaAdminClient(bootstrap_servers=str(broker))
        await admin.start()
        try:
            (described,) = await admin.describe_topics([state_topic])
            responses = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, state_topic)]
            )
        finally:
            await admin.close()
        assert described["error_code"] == 0
        assert len(described["partitions"]) == 1
        (resource,) = responses[0].to_object()["resources"]
        configs = {c["config_names"]: c["config_value"] for c in resource["config_entries"]}
        assert configs.get("cleanup.policy") == "compact"

    run(main())


async def _produce(broker: HostPort, topic: str, *records: tuple[Any, ...]) -> None:
    """Records written to the state topic by another program (or another gateway version):
    (key, value) or (key, value, headers)."""
    producer = AIOKafkaProducer(bootstrap_servers=str(broker))
    await producer.start()
    try:
        for key, value, *headers in records:
            await producer.send_and_wait(
                topic, key=key, value=value, headers=headers[0] if headers else None
            )
    finally:
        await producer.stop()


@pytest.mark.parametrize(
    "record",
    [
        pytest.param((b"topic-config\0orders", b"\xff"), id="value-not-utf8"),
        pytest.param((b"no-separator", b"x"), id="key-not-namespace-nul-key"),
        pytest.param((b"\xfe\0orders", b"x"), id="key-not-utf8"),
        pytest.param((None, b"x"), id="no-key"),
        pytest.param((b"topic-config\0orders", b"x", [("kpg.format", b"2")]), id="headers"),
    ],
)
def test_a_record_it_cannot_read_stops_start(
    broker: HostPort, state_topic: str, record: tuple[Any, ...]
) -> None:
    """A record this version cannot read (a newer gateway's, or hand-written) may be a topic's
    record.validation.policy or a client config: skipped, the topic was unvalidated."""

    async def main() -> None:
        store = await started(broker, state_topic)
        await store.put(NS, "before", "1")
        await store.close()
        await _produce(broker, state_topic, record)
        with pytest.raises(StateStoreError, match="cannot be read"):
            await started(broker, state_topic)

    run(main())


def test_a_tombstone_of_the_unreadable_key_lets_the_store_start(
    broker: HostPort, state_topic: str
) -> None:
    async def main() -> None:
        await (await started(broker, state_topic)).close()  # the topic, of one partition
        await _produce(
            broker,
            state_topic,
            (b"no-separator", b"x"),
            (b"topic-config\0orders", b"\xff"),
            (b"no-separator", None),
            (b"topic-config\0orders", b"strict"),
        )
        store = await started(broker, state_topic)
        try:
            assert dict(store.items(NS)) == {"orders": "strict"}
        finally:
            await store.close()

    run(main())


def test_a_record_it_cannot_read_arriving_later_fails_closed(
    broker: HostPort, state_topic: str
) -> None:
    """Written while the store runs: settle (every Produce, every topic config change) and
    writes are refused until a later record of its key replaces it."""

    async def main() -> None:
        store = await started(broker, state_topic)
        try:
            await store.put(NS, "before", "1")
            await _produce(broker, state_topic, (b"topic-config\0orders", b"\xff"))
            with pytest.raises(StateStoreError, match="offset 1 cannot be read"):
                await store.settle()
            with pytest.raises(StateStoreError, match="cannot be read"):
                await store.put(NS, "other", "2")
            await _produce(broker, state_topic, (b"topic-config\0orders", b"strict"))
            await store.settle()
            assert store.get(NS, "orders") == "strict"
        finally:
            await store.close()

    run(main())


def test_a_put_too_large_for_one_batch_raises(broker: HostPort, state_topic: str) -> None:
    async def main() -> None:
        store = await started(broker, state_topic)
        try:
            with pytest.raises(StateStoreError, match=f"cannot write {NS}/huge"):
                await store.put(NS, "huge", "x" * 2 * 1024 * 1024)
            assert store.get(NS, "huge") is None
        finally:
            await store.close()

    run(main())


def test_a_put_with_the_broker_gone_raises(state_topic: str) -> None:
    """Its own broker, killed mid-test."""
    embedded = EmbeddedBroker()
    address = embedded.start()

    async def main() -> None:
        store = KafkaTopicStore([address], state_topic, refresh_interval_s=0.2, request_timeout_s=3)
        await store.start()
        try:
            await store.put(NS, "orders", "strict")
            assert embedded.process is not None
            embedded.process.kill()  # as a crash; terminate() takes Tansu seconds
            embedded.process.wait()
            with pytest.raises(StateStoreError, match=f"{NS}/orders"):
                await store.put(NS, "orders", "lenient")
            assert store.get(NS, "orders") == "strict"
        finally:
            await store.close()

    try:
        run(main())
    finally:
        embedded.stop()


def test_start_fails_clearly_without_a_broker(state_topic: str) -> None:
    nowhere = HostPort(host="127.0.0.1", port=free_port())
    store = KafkaTopicStore([nowhere], state_topic, request_timeout_s=3)
    with pytest.raises(StateStoreError, match=f"state topic {state_topic} on {nowhere}"):
        run(store.start())


def test_put_before_start_raises(broker: HostPort, state_topic: str) -> None:
    store = KafkaTopicStore([broker], state_topic)
    with pytest.raises(StateStoreError, match="not started"):
        run(store.put(NS, "orders", "strict"))


def test_a_refused_topic_creation_stops_start(state_topic: str) -> None:
    """Scripted upstream: Tansu creates any topic it is asked for, so a broker that refuses
    the creation is scripted here (ApiVersions, Metadata, CreateTopics only)."""
    import importlib
    from datetime import timedelta

    from kio.schema.errors import ErrorCode
    from kio.static.primitive import i16, i32, i32Timedelta

    from tests.scripted import ScriptedCluster

    def response_module(api: str, version: int) -> Any:
        return importlib.import_module(f"kio.schema.{api}.v{version}.response")

    cluster = ScriptedCluster()
    no_delay = i32Timedelta.parse(timedelta(0))

    async def respond(me, header, request):  # type: ignore[no-untyped-def]
        version = header.api_version
        if header.api_key == 18:
            m = response_module("api_versions", version)
            supported = {3: (0, 5), 18: (0, 3), 19: (2, 3)}
            return m.ApiVersionsResponse(
                error_code=ErrorCode.none,
                api_keys=tuple(
                    m.ApiVersion(api_key=i16(key), min_version=i16(lo), max_version=i16(hi))
                    for key, (lo, hi) in supported.items()
                ),
                **({"throttle_time": no_delay} if version >= 1 else {}),
            )
        if header.api_key == 3:
            m = response_module("metadata", version)
            return m.MetadataResponse(
                throttle_time=no_delay,
                brokers=(
                    m.MetadataResponseBroker(
                        node_id=i32(1), host=me.address.host, port=i32(me.address.port)
                    ),
                ),
                cluster_id="scripted",
                controller_id=i32(1),
                topics=(),
            )
        m = response_module("create_topics", version)
        return m.CreateTopicsResponse(
            throttle_time=no_delay,
            topics=tuple(
                m.CreatableTopicResult(
                    name=topic.name,
                    error_code=ErrorCode.topic_authorization_failed,
                    error_message="not yours",
                )
                for topic in request.topics
            ),
        )

    scripted = cluster.add(respond, "refuses-creation")
    assert scripted.address is not None
    store = KafkaTopicStore([scripted.address], state_topic, request_timeout_s=10)
    try:
        with pytest.raises(StateStoreError, match="cannot create it: TopicAuthorizationFailed"):
            run(store.start())
        assert {h.api_key for h, _ in scripted.requests} == {18, 3, 19}
    finally:
        cluster.close()


def test_a_conditional_write_is_made_only_over_what_was_judged(
    broker: HostPort, state_topic: str
) -> None:
    """``put_all_if`` catches up first, so another instance's write that has reached the
    topic makes it fail and write nothing (between the comparison and the write, on one
    instance only, see its docstring)."""

    async def main() -> None:
        a = await started(broker, state_topic, refresh_interval_s=5.0)
        b = await started(broker, state_topic)
        try:
            await a.put(NS, "alice/app/acks", "1")
            judged = {"alice/app/acks": "1"}
            await b.put(NS, "alice/app/retries", "3")
            assert not await a.put_all_if(
                NS, {"alice/app/acks": "-1"}, prefix="alice/app/", expected=judged
            )
            assert a.get(NS, "alice/app/acks") == "1"
            judged = {k: v for k, v in a.items(NS).items() if k.startswith("alice/app/")}
            assert await a.put_all_if(
                NS, {"alice/app/acks": "-1"}, prefix="alice/app/", expected=judged
            )
            assert await eventually(lambda: b.get(NS, "alice/app/acks") == "-1")
        finally:
            await a.close()
            await b.close()

    run(main())


def test_settles_at_the_same_time_share_one_end_offset_query(
    tap: BrokerTap, state_topic: str
) -> None:
    """Every Produce through an instance of a shared store settles first, so settles at the
    same time share a query of the topic's end: one under way, and one more for every call
    made after it had been sent (it may have read the end before a write those calls must
    see). Without sharing, each Produce cost the broker a ListOffsets."""
    list_offsets = 2

    def queries() -> int:
        return sum(1 for r in tap.requests if r.api_key == list_offsets)

    async def main() -> None:
        a = await started(tap.address, state_topic)
        b = await started(tap.address, state_topic, refresh_interval_s=5.0)
        try:
            before = queries()
            tap.hold_requests(list_offsets)
            first = asyncio.ensure_future(b.settle())
            assert await eventually(lambda: queries() == before + 1)
            await a.put(NS, "orders", "strict")
            late = [asyncio.ensure_future(b.settle()) for _ in range(20)]
            await asyncio.sleep(0)  # each late call runs up to its wait
            tap.release_requests()
            await asyncio.gather(first, *late)
            assert b.get(NS, "orders") == "strict"
            assert queries() == before + 2
        finally:
            tap.release_requests()
            await a.close()
            await b.close()

    run(main())


def test_a_settle_called_during_another_sees_a_write_made_before_it(
    broker: HostPort, state_topic: str
) -> None:
    """A settle called while another is under way does not take that one's end offset, read
    before the call and so perhaps before a write the caller must see (a topic's policy,
    written before the topic was created): it waits for a query of its own. B's end-offset
    answer is held back here, after the broker gave it, while A writes; B's tail, on Tansu,
    sees the write only with its next fetch, 5 s on."""

    class HeldEnds(KafkaTopicStore):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.gate = asyncio.Event()
            self.gate.set()
            self.asked = asyncio.Event()

        async def _end_offset(self) -> int:
            end = await super()._end_offset()
            self.asked.set()
            await self.gate.wait()
            return end

    async def main() -> None:
        a = await started(broker, state_topic)
        b = HeldEnds([broker], state_topic, refresh_interval_s=5.0, request_timeout_s=20)
        await b.start()
        try:
            b.gate.clear()
            b.asked.clear()
            first = asyncio.ensure_future(b.settle())
            await b.asked.wait()  # its end offset read, its answer held
            await a.put(NS, "orders", "strict")
            late = asyncio.ensure_future(b.settle())
            await asyncio.sleep(0)  # the late call runs up to its wait
            b.gate.set()
            await first
            await late
            assert b.get(NS, "orders") == "strict"
        finally:
            b.gate.set()
            await a.close()
            await b.close()

    run(main())


@pytest.mark.parametrize(
    ("partitions", "configs", "complaint"),
    [
        pytest.param(1, {"cleanup.policy": "delete"}, "cleanup.policy", id="delete"),
        pytest.param(
            1, {"cleanup.policy": "compact,delete"}, "cleanup.policy", id="compact-delete"
        ),
        pytest.param(1, {}, "cleanup.policy", id="broker-default"),
        pytest.param(3, {"cleanup.policy": "compact"}, "3 partitions", id="partitions"),
    ],
)
def test_a_state_topic_made_otherwise_stops_start(
    broker: HostPort, state_topic: str, partitions: int, configs: dict[str, str], complaint: str
) -> None:
    """A state topic the gateway did not create (an operator's, made ahead with the cluster's
    defaults): under a delete policy its records expire (retention.ms, 7 days by default),
    and a gateway started after that loaded no record.validation.policy, every topic
    unvalidated; records another writer put in a partition but 0 were never read."""

    async def main() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=str(broker))
        await admin.start()
        try:
            await admin.create_topics([NewTopic(state_topic, partitions, 1, topic_configs=configs)])
        finally:
            await admin.close()
        with pytest.raises(StateStoreError, match=complaint):
            await started(broker, state_topic)

    run(main())
