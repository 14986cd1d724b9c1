"""schema-id:registry: record schema ids checked against a schema registry over HTTP.

The registry here is a small HTTP server the test runs (no registry package is available);
it answers the one endpoint the gateway asks, GET /schemas/ids/{id}, as Confluent's does.
"""

from __future__ import annotations

import http.server
import struct
import threading
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.config import HostPort
from gateway.schema_registry import SchemaRegistryClient, SchemaRegistryError
from tests.support import GatewayThread, gateway_config, unique_name

pytestmark = pytest.mark.inproc

KNOWN = {1, 7}
BROKEN = 500  # the registry fails on this id


class Registry(http.server.BaseHTTPRequestHandler):
    asked: list[int] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        schema_id = int(self.path.rsplit("/", 1)[1])
        Registry.asked.append(schema_id)
        if schema_id == BROKEN:
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif schema_id in KNOWN:
            body = b'{"schema": "{\\"type\\": \\"string\\"}"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            body = b'{"error_code": 40403, "message": "Schema not found"}'
            self.send_response(404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def registry() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Registry.asked.clear()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def framed(schema_id: int, payload: bytes = b"hello") -> bytes:
    return b"\x00" + struct.pack(">i", schema_id) + payload


def registry_topic(bootstrap: str) -> str:
    topic = unique_name("sr")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics(
        [NewTopic(topic, 1, 1, config={"record.validation.policy": "schema-id:registry"})]
    )[topic].result(15)
    return topic


def produce_each(bootstrap: str, topic: str, values: list[bytes]) -> dict[bytes, KafkaError | None]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "retries": 0})
    results: dict[bytes, KafkaError | None] = {}
    for value in values:
        producer.produce(topic, value, on_delivery=lambda e, m: results.update({m.value(): e}))
        producer.flush(15)
    return results


def test_records_with_unknown_schema_ids_are_rejected(broker: HostPort, registry: str) -> None:
    gw = GatewayThread(
        gateway_config(broker, policies={"record.validation.schema.registry.url": registry})
    ).start()
    try:
        topic = registry_topic(gw.bootstrap)
        values = [framed(1), framed(1, b"again"), framed(2), b"no-magic-byte"]
        results = produce_each(gw.bootstrap, topic, values)
        assert results[framed(1)] is None and results[framed(1, b"again")] is None
        assert results[framed(2)] is not None
        assert results[framed(2)].code() == KafkaError.INVALID_RECORD  # type: ignore[union-attr]
        assert results[b"no-magic-byte"].code() == KafkaError.INVALID_RECORD  # type: ignore[union-attr]
        assert Registry.asked.count(1) == 1  # a known id is cached
    finally:
        gw.stop()


def test_registry_client_caches_and_fails_closed(registry: str) -> None:
    now = [0.0]
    client = SchemaRegistryClient(registry, negative_ttl_s=10, clock=lambda: now[0])
    assert client.exists(7) and client.exists(7)
    assert not client.exists(3) and not client.exists(3)
    assert client.requests == 2
    now[0] = 11.0
    assert not client.exists(3)
    assert client.requests == 3
    with pytest.raises(SchemaRegistryError, match="answered 500 for schema id 500"):
        client.exists(BROKEN)
    down = SchemaRegistryClient("http://127.0.0.1:9", timeout_s=0.5)
    with pytest.raises(SchemaRegistryError, match="unreachable"):
        down.exists(1)


@pytest.mark.parametrize("answer", ["unreachable", "500"])
def test_records_are_rejected_while_the_registry_cannot_answer(
    broker: HostPort, registry: str, answer: str
) -> None:
    """Fail closed: an id the registry cannot vouch for is not written, whether the registry
    is down or answers with an error; a known id in the same run still is."""
    url = "http://127.0.0.1:9" if answer == "unreachable" else registry
    gw = GatewayThread(
        gateway_config(broker, policies={"record.validation.schema.registry.url": url})
    ).start()
    try:
        topic = registry_topic(gw.bootstrap)
        results = produce_each(gw.bootstrap, topic, [framed(BROKEN), framed(1)])
        assert results[framed(BROKEN)] is not None
        assert results[framed(BROKEN)].code() == KafkaError.INVALID_RECORD  # type: ignore[union-attr]
        assert (results[framed(1)] is None) == (answer == "500")
        policy = "BuiltinRecordValidationPolicy"
        assert gw.metric("kpg_records_rejected_total", topic=topic, policy=policy) >= 1
    finally:
        gw.stop()
