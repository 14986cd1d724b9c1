"""The gateway on the wire: ordering, refusals, bad input, acks=0, every address rewritten."""

from __future__ import annotations

import datetime
import io
import socket
import struct
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from gateway.config import HostPort
from gateway.embedded import EmbeddedBroker
from protocol.codec import decode_response
from protocol.framing import SIZE
from protocol.versions import DECODABLE
from tests.inproc.test_clients import create_topic
from tests.support import (
    BrokerTap,
    GatewayThread,
    RawClient,
    fetch_request,
    gateway_config,
    unique_name,
    wait_for,
)

pytestmark = pytest.mark.inproc


def metadata_request(topic: str | None = None) -> MetadataRequest:
    topics = None if topic is None else (MetadataRequestTopic(name=topic, topic_id=None),)
    return MetadataRequest(
        topics=topics, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )


def gateway_ports(gw: GatewayThread) -> set[int]:
    return {port for _, port in gw.gateway.nodes.gateway_addresses_snapshot()}


def test_pipelined_requests_come_back_in_order(gateway: GatewayThread) -> None:
    client = RawClient(gateway.bootstrap)
    sent = []
    for i in range(60):
        if i % 2:
            sent.append((3, client.send(3, 12, metadata_request(), correlation_id=1000 + i)))
        else:
            sent.append(
                (
                    18,
                    client.send(
                        18,
                        3,
                        ApiVersionsRequest(client_software_name="raw", client_software_version="1"),
                        correlation_id=1000 + i,
                    ),
                )
            )
    for api_key, cid in sent:
        frame = client.recv_frame()
        assert struct.unpack_from(">i", frame)[0] == cid
        decode_response(api_key, 12 if api_key == 3 else 3, frame)  # decodes in its layout
    client.close()


def test_a_pipelining_client_has_several_requests_in_flight_upstream(tap: BrokerTap) -> None:
    """A Kafka client sends requests on a connection without waiting for the answers before
    (librdkafka: up to max.in.flight); the gateway forwards each as it comes, so while the
    broker has answered none of them, several of one connection have reached it. Forwarding
    one at a time, answer by answer, would add a broker round trip per request queued. The
    tap holds the broker's answers meanwhile; released, every record is delivered."""
    gw = GatewayThread(gateway_config(tap.address)).start()
    topic = unique_name("pipelined")
    create_topic(gw.bootstrap, topic, partitions=8)
    producer = Producer({"bootstrap.servers": gw.bootstrap, "linger.ms": 0, "acks": "all"})
    failed: list[KafkaError] = []
    delivered: list[Message] = []

    def report(err: KafkaError | None, msg: Message) -> None:
        (failed if err is not None else delivered).append(err or msg)

    try:
        producer.produce(topic, b"first", partition=0, on_delivery=report)
        assert producer.flush(30) == 0 and len(delivered) == 1  # node connection up
        before = len(tap.requests)
        tap.hold_answers()
        try:
            for i in range(16):  # a batch per partition and round: a request each
                producer.produce(topic, b"r%d" % i, partition=i % 8, on_delivery=report)
                producer.poll(0.02)

            def most_in_flight() -> int:
                held = [r.connection for r in tap.requests[before:] if r.api_key == 0]
                return max((held.count(c) for c in set(held)), default=0)

            assert wait_for(lambda: most_in_flight() >= 2), (
                f"{most_in_flight()} Produce request(s) of one connection reached the broker "
                "while it had answered none"
            )
            assert not delivered[1:] and not failed
        finally:
            tap.release_answers()
        assert producer.flush(30) == 0
        assert not failed and len(delivered) == 17
    finally:
        gw.stop()


def test_unknown_api_key_is_not_forwarded(tap: BrokerTap) -> None:
    gw = GatewayThread(gateway_config(tap.address)).start()
    try:
        bad = RawClient(gw.bootstrap)
        bad.send_bytes(SIZE.pack(12) + struct.pack(">hhih", 31999, 0, 7, -1) + b"\x00\x00")
        assert bad.is_closed()
        good = RawClient(gw.bootstrap)
        assert good.request(3, 12, metadata_request()).brokers
        assert 31999 not in tap.api_keys() and 3 in tap.api_keys()
        assert gw.metric("kpg_rejected_frames_total", reason="unknown_api_key") == 1
    finally:
        gw.stop()


def _header(api_key: int = 3, version: int = 12, client_id_len: int = 3) -> bytes:
    return struct.pack(">hhih", api_key, version, 1, client_id_len)


BAD_INPUTS = {
    # name: (bytes sent, metric reason)
    "garbage": (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "oversized"),
    "negative_size": (b"\xff\xff\xff\xfe" + b"x" * 10, "negative_size"),
    "oversized": (SIZE.pack(2 * 1024 * 1024) + b"x" * 100, "oversized"),
    "truncated_frame": (SIZE.pack(500) + _header() + b"abc", "truncated"),
    "short_header": (SIZE.pack(3) + b"\x00\x03\x00", "bad_header"),
    "header_does_not_parse": (SIZE.pack(12) + _header(client_id_len=300) + b"ab", "bad_header"),
    "unsupported_version": (SIZE.pack(14) + _header(1, 19) + b"abc\x00", "unsupported_version"),
}


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_bad_input_closes_only_its_connection(broker: HostPort, name: str) -> None:
    data, reason = BAD_INPUTS[name]
    gw = GatewayThread(gateway_config(broker, limits={"max_frame_bytes": 1024 * 1024})).start()
    try:
        bystander = RawClient(gw.bootstrap)
        assert bystander.request(3, 12, metadata_request()).brokers
        bad = RawClient(gw.bootstrap)
        bad.send_bytes(data)
        if name == "truncated_frame":
            bad.sock.shutdown(socket.SHUT_WR)
        assert bad.is_closed(), f"{name}: connection left open"
        assert wait_for(lambda: gw.metric("kpg_rejected_frames_total", reason=reason) == 1)
        assert bystander.request(3, 12, metadata_request()).brokers  # still served
    finally:
        gw.stop()


def _records(values: list[bytes]) -> bytes:
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    batch = NewRecordBatch(
        producer_id=i64(-1),
        producer_epoch=i16(-1),
        base_sequence=i32(-1),
        attributes=i16(0),
        records=tuple(
            Record(attributes=i8(0), timestamp=now, offset=i64(i), key=None, value=v, headers=())
            for i, v in enumerate(values)
        ),
    )
    buffer = io.BytesIO()
    write_new_batch(buffer, batch)
    return buffer.getvalue()


def test_acks_zero_produce_gets_no_answer_and_is_written(
    gateway: GatewayThread, topic_name: str
) -> None:
    create_topic(gateway.bootstrap, topic_name)
    client = RawClient(gateway.bootstrap)
    # The produce goes to the partition leader: the node listener the metadata names.
    meta = client.request(3, 12, metadata_request(topic_name))
    leader = RawClient(f"{meta.brokers[0].host}:{meta.brokers[0].port}")
    produce = ProduceRequest(
        acks=i16(0),
        timeout=i32Timedelta.parse(__import__("datetime").timedelta(seconds=5)),
        topic_data=(
            TopicProduceData(
                name=topic_name,
                partition_data=(
                    PartitionProduceData(index=i32(0), records=_records([b"a0", b"a1"])),
                ),
            ),
        ),
    )
    leader.send(0, 9, produce, correlation_id=500)
    cid = leader.send(3, 12, metadata_request(), correlation_id=501)
    frame = leader.recv_frame()
    assert struct.unpack_from(">i", frame)[0] == cid == 501  # no answer for 500
    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "acks0"})
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 2 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    assert got == [b"a0", b"a1"]


def _all_versions(api_key: int, gw: GatewayThread) -> range:
    """Every version of ``api_key`` the gateway advertises (its cap and the broker's, both)."""
    answer = RawClient(gw.bootstrap).request(
        18, 3, ApiVersionsRequest(client_software_name="raw", client_software_version="1")
    )
    advertised = {int(k.api_key): k for k in answer.api_keys}[api_key]
    return range(int(advertised.min_version), int(advertised.max_version) + 1)


def test_every_address_bearing_answer_carries_only_gateway_addresses(
    gateway: GatewayThread, broker: HostPort, topic_name: str
) -> None:
    from kio.index import load_request_schema

    create_topic(gateway.bootstrap, topic_name)
    client = RawClient(gateway.bootstrap)
    client.request(
        18, 3, ApiVersionsRequest(client_software_name="raw", client_software_version="1")
    )
    seen: list[tuple[str, int]] = []
    for version in _all_versions(3, gateway):
        cls = load_request_schema(3, version)
        fields = {"topics": None} if version else {"topics": ()}
        if "allow_auto_topic_creation" in cls.__dataclass_fields__:
            fields["allow_auto_topic_creation"] = False
        for name in (
            "include_cluster_authorized_operations",
            "include_topic_authorized_operations",
        ):
            if name in cls.__dataclass_fields__:
                fields[name] = False
        answer = client.request(3, version, cls(**fields))
        seen += [(b.host, b.port) for b in answer.brokers]
    for version in _all_versions(10, gateway):
        cls = load_request_schema(10, version)
        if version >= 4:
            request = cls(key_type=i8(0), coordinator_keys=("g1", "g2"))
            answer = client.request(10, version, request)
            seen += [(c.host, c.port) for c in answer.coordinators if c.node_id >= 0]
            assert len(answer.coordinators) == 2
        else:
            kwargs = {"key": "g1"} | ({"key_type": i8(0)} if version else {})
            answer = client.request(10, version, cls(**kwargs))
            seen.append((answer.host, answer.port))
    for version in _all_versions(60, gateway):
        cls = load_request_schema(60, version)
        answer = client.request(60, version, cls(include_cluster_authorized_operations=False))
        seen += [(b.host, b.port) for b in answer.brokers]
    assert seen
    ports = gateway_ports(gateway)
    assert all(host == "127.0.0.1" and port in ports for host, port in seen), seen
    assert broker.port not in {port for _, port in seen}


def test_api_versions_advertises_only_what_the_gateway_carries(gateway: GatewayThread) -> None:
    client = RawClient(gateway.bootstrap)
    answer = client.request(
        18, 3, ApiVersionsRequest(client_software_name="raw", client_software_version="1")
    )
    ranges = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    # Produce and Fetch: the test broker's newest (v11, v17), leader endpoints rewritten
    assert ranges[0] == (3, 11) and ranges[1] == (0, 17)
    assert ranges[3][1] <= DECODABLE[3].max_version
    assert set(ranges) <= set(DECODABLE)
    client.close()
    # A version of ApiVersions the gateway does not know: v0 answer, UNSUPPORTED_VERSION.
    raw = RawClient(gateway.bootstrap)
    body = struct.pack(">hhih", 18, 99, 77, 3) + b"raw" + b"\x00"
    raw.send_bytes(SIZE.pack(len(body)) + body)
    frame = raw.recv_frame()
    v0 = decode_response(18, 0, frame)
    assert struct.unpack_from(">i", frame)[0] == 77 and v0.error_code == 35


def test_three_brokers_get_three_gateway_addresses() -> None:
    """Scripted upstream: the test broker is a single node, so three brokers that answer
    ApiVersions and a three-broker Metadata are scripted here."""
    from kio.schema.api_versions.v3.response import ApiVersion, ApiVersionsResponse
    from kio.schema.metadata.v12.response import MetadataResponse, MetadataResponseBroker

    from tests.scripted import ScriptedCluster

    cluster = ScriptedCluster()
    addresses: dict[int, HostPort] = {}

    async def respond(me, header, request):  # type: ignore[no-untyped-def]
        if header.api_key == 18:
            return ApiVersionsResponse(
                error_code=ErrorCode.none,
                throttle_time=i32Timedelta.parse(__import__("datetime").timedelta(0)),
                api_keys=(
                    ApiVersion(api_key=i16(3), min_version=i16(0), max_version=i16(12)),
                    ApiVersion(api_key=i16(18), min_version=i16(0), max_version=i16(3)),
                ),
            )
        return MetadataResponse(
            throttle_time=i32Timedelta.parse(__import__("datetime").timedelta(0)),
            brokers=tuple(
                MetadataResponseBroker(node_id=i32(n), host=a.host, port=i32(a.port), rack=None)
                for n, a in addresses.items()
            ),
            cluster_id="scripted",
            controller_id=i32(1),
            topics=(),
        )

    brokers = {n: cluster.add(respond, f"broker-{n}") for n in (1, 2, 3)}
    for n, b in brokers.items():
        assert b.address is not None
        addresses[n] = b.address
    gw = GatewayThread(gateway_config(addresses[1])).start()
    try:
        answer = RawClient(gw.bootstrap).request(3, 12, metadata_request())
        advertised = {b.node_id: (b.host, b.port) for b in answer.brokers}
        assert len(set(advertised.values())) == 3
        assert not {p for _, p in advertised.values()} & {a.port for a in addresses.values()}
        for node_id, (host, port) in advertised.items():
            before = {n: b.connections for n, b in brokers.items()}
            RawClient(f"{host}:{port}").request(3, 12, metadata_request())
            after = {n: b.connections for n, b in brokers.items()}
            assert {n for n in brokers if after[n] > before[n]} == {node_id}
    finally:
        gw.stop()
        cluster.close()


def test_upstream_gone_closes_clients_and_serves_again_when_back() -> None:
    embedded = EmbeddedBroker()
    address = embedded.start()
    gw = GatewayThread(gateway_config(address)).start()
    try:
        client = RawClient(gw.bootstrap)
        assert client.request(3, 12, metadata_request()).brokers
        embedded.stop()
        assert client.is_closed(10)
        with pytest.raises(ConnectionError):  # still listening, but no broker to reach
            RawClient(gw.bootstrap, timeout=5).request(3, 12, metadata_request())
        embedded = EmbeddedBroker(port=address.port)
        embedded.start()
        assert RawClient(gw.bootstrap).request(3, 12, metadata_request()).brokers
    finally:
        gw.stop()
        embedded.stop()


def test_shutdown_lets_in_flight_requests_finish(gateway: GatewayThread, topic_name: str) -> None:
    """A fetch the broker holds for its max wait is still answered after shutdown begins."""
    create_topic(gateway.bootstrap, topic_name)
    client = RawClient(gateway.bootstrap)
    meta = client.request(3, 12, metadata_request(topic_name))
    leader = RawClient(f"{meta.brokers[0].host}:{meta.brokers[0].port}")
    fetch = fetch_request(topic_name, max_wait=datetime.timedelta(seconds=2))
    bootstrap = gateway.bootstrap
    started = time.monotonic()
    cid = leader.send(1, 12, fetch)
    time.sleep(0.3)
    stopping = gateway.submit(gateway.gateway.stop())
    frame = leader.recv_frame()
    assert struct.unpack_from(">i", frame)[0] == cid
    assert decode_response(1, 12, frame).responses[0].partitions[0].error_code == 0
    stopping.result(30)
    assert time.monotonic() - started < 20
    with pytest.raises(OSError):
        RawClient(bootstrap, timeout=2)


def test_metrics_endpoint(broker: HostPort) -> None:
    gw = GatewayThread(gateway_config(broker, metrics="127.0.0.1:0")).start()
    try:
        RawClient(gw.bootstrap).request(3, 12, metadata_request())
        port = gw.gateway.metrics_port
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert 'kpg_requests_total{api="Metadata",version="12"} 1.0' in text
        assert 'kpg_connections_total{listener="bootstrap"} 1.0' in text
        assert 'kpg_upstream_latency_seconds_count{api="Metadata"} 1.0' in text
        assert "kpg_bytes_in_total" in text and "kpg_bytes_out_total" in text
        assert "kpg_rejected_frames" in text
    finally:
        gw.stop()
