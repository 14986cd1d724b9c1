"""schema-id:registry and schema-id:subject: record schema ids checked against a schema
registry over HTTP.

The registry here is a small HTTP server the test runs (no registry package is available);
it answers the two endpoints the gateway asks, GET /schemas/ids/{id} and
GET /schemas/ids/{id}/versions, as Confluent's does.
"""

from __future__ import annotations

import base64
import concurrent.futures
import http.server
import json
import socket
import ssl
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.config import (
    DEFAULT_SCHEMA_REGISTRY_LOOKUPS_PER_REQUEST,
    ConfigError,
    HostPort,
    Secret,
)
from gateway.record_validation import load_record_validator
from gateway.schema_registry import SchemaRegistryClient, SchemaRegistryError
from policies.loader import flatten_configs
from tests.batches import produce_v9, record, uncompressed_batch
from tests.support import (
    GatewayThread,
    RawClient,
    gateway_config,
    make_pki,
    unique_name,
    wait_for,
)

pytestmark = pytest.mark.inproc

PRODUCE = 0
INVALID_RECORD = 87
KNOWN = {1, 7}
REGISTERED = range(10_000, 11_000)  # known too: a registry of many schemas
BROKEN = 500  # the registry fails on this id
GARBLED = 600  # its versions are not a list of subjects
HUGE = 601  # its versions run past what the client reads
MOVED = 302  # the registry redirects this id's look-up to another server
CUT = 603  # the registry's first answer of its versions breaks off half-way
SUBJECTS = {1: ("orders-value",), 7: ("payments-value", "audit-value")}
"""The subjects each id is registered under (REGISTERED: bulk-value)."""


def _versions(schema_id: int) -> bytes:
    if schema_id == GARBLED:
        return b'{"subject": "orders-value"}'
    if schema_id == HUGE:
        return b"[" + b" " * (2 * 1024 * 1024) + b"]"
    subjects = SUBJECTS.get(schema_id, ("bulk-value",))
    return json.dumps([{"subject": s, "version": 1} for s in subjects]).encode()


class Registry(http.server.BaseHTTPRequestHandler):
    asked: list[int] = []
    hold: threading.Event | None = None
    """Set: each answer waits for it."""
    elsewhere = 9
    """The port MOVED redirects to."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        versions = self.path.endswith("/versions")
        schema_id = int(self.path.removesuffix("/versions").rsplit("/", 1)[1])
        Registry.asked.append(schema_id)
        if Registry.hold is not None:
            Registry.hold.wait(30)
        if schema_id == CUT and versions and Registry.asked.count(CUT) == 1:
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b'100\r\n[{"subject": "bul')  # of 256 bytes; the connection closes
            self.close_connection = True
        elif schema_id == MOVED:
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{Registry.elsewhere}/schemas/ids/1")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif schema_id == BROKEN:
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif schema_id in KNOWN or schema_id in REGISTERED or schema_id in (GARBLED, HUGE, CUT):
            body = _versions(schema_id) if versions else b'{"schema": "{\\"type\\": \\"string\\"}"}'
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


def registry_topic(bootstrap: str, policy: str = "schema-id:registry") -> str:
    topic = unique_name("sr")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"record.validation.policy": policy})])[
        topic
    ].result(15)
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


def test_a_redirect_is_not_followed(registry: str) -> None:
    """urllib followed a redirect anywhere, and would have sent the registry's credentials
    (the Authorization header) along."""
    with socket.socket() as elsewhere:
        elsewhere.bind(("127.0.0.1", 0))
        elsewhere.listen(1)
        Registry.elsewhere = elsewhere.getsockname()[1]
        client = SchemaRegistryClient(registry, timeout_s=1)
        with pytest.raises(SchemaRegistryError, match="answered 302 for schema id 302"):
            client.exists(MOVED)
        elsewhere.setblocking(False)
        with pytest.raises(BlockingIOError):
            elsewhere.accept()  # nobody came


def test_registry_client_asks_which_subjects_list_an_id(registry: str) -> None:
    now = [0.0]
    client = SchemaRegistryClient(
        registry, negative_ttl_s=10, subject_ttl_s=60, clock=lambda: now[0]
    )
    assert client.registered_under(7, "payments-value")
    assert client.registered_under(7, "payments-value")
    assert not client.registered_under(7, "orders-value")
    assert not client.registered_under(7, "orders-value")
    assert not client.registered_under(3, "orders-value")  # an id the registry does not have
    assert client.requests == 3
    now[0] = 11.0  # the no's are asked again; the yes is still remembered
    assert not client.registered_under(7, "orders-value")
    assert client.registered_under(7, "payments-value")
    assert client.requests == 4
    now[0] = 61.0  # the version may have been deleted since: the yes is asked again
    assert client.registered_under(7, "payments-value")
    assert client.requests == 5
    assert Registry.asked == [7, 7, 3, 7, 7]
    with pytest.raises(SchemaRegistryError, match="something other than a list of subjects"):
        client.registered_under(GARBLED, "orders-value")
    with pytest.raises(SchemaRegistryError, match="more than 1,048,576 bytes"):
        client.registered_under(HUGE, "orders-value")
    with pytest.raises(SchemaRegistryError, match="answered 500 for schema id 500"):
        client.registered_under(BROKEN, "orders-value")


def test_records_serialized_with_another_subjects_schema_are_rejected(
    broker: HostPort, registry: str
) -> None:
    """schema-id:registry takes any id the registry has: a producer serializing with another
    topic's schema (id 7, registered under payments-value) passed it. schema-id:subject takes
    only the ids the registry lists under the subject named."""
    gw = GatewayThread(
        gateway_config(broker, policies={"record.validation.schema.registry.url": registry})
    ).start()
    try:
        loose = registry_topic(gw.bootstrap)
        assert produce_each(gw.bootstrap, loose, [framed(7)]) == {framed(7): None}
        topic = registry_topic(gw.bootstrap, "schema-id:subject:orders-value")
        results = produce_each(gw.bootstrap, topic, [framed(1), framed(7), framed(2)])
        assert results[framed(1)] is None
        for refused in (framed(7), framed(2)):
            assert results[refused].code() == KafkaError.INVALID_RECORD  # type: ignore[union-attr]
        answer = produce_batch(gw.bootstrap, topic, [framed(1), framed(7, b"other")])
        assert answer.error_code == INVALID_RECORD
        assert [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors] == [
            (
                1,
                "Record value has schema id 7, which the schema registry does not list under "
                "subject orders-value (rule schema-id:subject:orders-value) "
                "(record.validation.policy=schema-id:subject:orders-value)",
            )
        ]
    finally:
        gw.stop()


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


# --- what a producer can make the gateway ask the registry -----------------------------------


def produce_batch(bootstrap: str, topic: str, values: list[bytes]) -> Any:
    """One Produce v9 of one batch holding a record per value; the partition's answer."""
    records = tuple(record(i, None, value) for i, value in enumerate(values))
    batch = uncompressed_batch(records, idempotent=False)
    answer = RawClient(bootstrap, timeout=60).request(PRODUCE, 9, produce_v9({topic: {0: batch}}))
    return answer.responses[0].partition_responses[0]


def test_made_up_schema_ids_cost_a_bounded_number_of_registry_requests(
    broker: HostPort, registry: str
) -> None:
    """Each record with an id the gateway did not know was one registry request: a 36 KB
    Produce of 2,000 records with made-up ids made 2,000 (20,000 records, 20,000, the
    validation thread asking on for 10 s after the request was refused). Now one request asks
    about 32 ids at most; the records past that are rejected, never written unchecked."""
    gw = GatewayThread(
        gateway_config(broker, policies={"record.validation.schema.registry.url": registry})
    ).start()
    try:
        topic = registry_topic(gw.bootstrap)
        Registry.asked.clear()
        answer = produce_batch(gw.bootstrap, topic, [framed(20_000 + i) for i in range(2000)])
        assert answer.error_code == INVALID_RECORD
        assert len(Registry.asked) == DEFAULT_SCHEMA_REGISTRY_LOOKUPS_PER_REQUEST
        messages = [e.batch_index_error_message for e in answer.record_errors]
        assert "limits: schema.registry.lookups.per.request" in messages[-1]
        # ids the registry has are still taken, over as many requests as the bound needs:
        # the ids looked up are remembered
        registered = [framed(schema_id) for schema_id in REGISTERED[:40]]
        first = produce_batch(gw.bootstrap, topic, registered)
        assert first.error_code == INVALID_RECORD
        assert produce_batch(gw.bootstrap, topic, registered).error_code == 0
    finally:
        gw.stop()


def test_the_registry_is_asked_at_most_so_often_a_second() -> None:
    now = [0.0]
    client = SchemaRegistryClient(
        "http://127.0.0.1:9", lookups_per_sec=5, failure_backoff_s=0, clock=lambda: now[0]
    )
    for schema_id in range(5):
        with pytest.raises(SchemaRegistryError, match="unreachable"):
            client.exists(schema_id)
    with pytest.raises(SchemaRegistryError, match="schema.registry.lookups.per.sec"):
        client.exists(5)
    assert client.requests == 5
    now[0] = 1.0
    with pytest.raises(SchemaRegistryError, match="unreachable"):
        client.exists(5)


def test_a_registry_that_fails_is_not_asked_again_at_once() -> None:
    """A registry that does not answer held a validation thread for its timeout once per
    record: 2 s each. After a failure, the ids asked about within failure_backoff_s are
    refused without a request."""
    now = [0.0]
    with socket.socket() as silent:  # accepts (backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        client = SchemaRegistryClient(url, timeout_s=0.5, clock=lambda: now[0])
        with pytest.raises(SchemaRegistryError, match="unreachable"):
            client.exists(1)
        for schema_id in range(2, 100):
            with pytest.raises(SchemaRegistryError, match="not looked up: .*unreachable"):
                client.exists(schema_id)
        assert client.requests == 1
        now[0] = 1.5
        with pytest.raises(SchemaRegistryError, match="unreachable"):
            client.exists(2)
        assert client.requests == 2


def test_an_answer_that_breaks_off_fails_that_look_up_alone(registry: str) -> None:
    """The registry's answer ends half-way (it restarted, say): http.client's IncompleteRead,
    which is no OSError, went past the client's handling and left the id marked as being
    asked, so every later look-up of it waited for an answer that would never come, holding
    its validation thread for good (and the pool's threads, one per record naming the id).
    Now the look-up fails closed like any unreadable answer, and the id is asked again."""
    client = SchemaRegistryClient(registry, timeout_s=5, failure_backoff_s=0)
    with pytest.raises(SchemaRegistryError, match="could not be read: IncompleteRead"):
        client.registered_under(CUT, "bulk-value")

    again: concurrent.futures.Future[bool] = concurrent.futures.Future()
    thread = threading.Thread(
        target=lambda: again.set_result(client.registered_under(CUT, "bulk-value")), daemon=True
    )
    thread.start()
    thread.join(30)  # a bound on a hang, not on speed: it answers in milliseconds
    assert again.done(), "the second look-up of the id never returned"
    assert again.result() is True
    assert Registry.asked == [CUT, CUT]


def test_one_id_asked_by_many_threads_at_once_is_asked_once(registry: str) -> None:
    """The registry holds its first answer until eight threads have asked about the id (or
    5 s): they share the one request."""
    Registry.hold = threading.Event()
    client = SchemaRegistryClient(registry, timeout_s=30)
    try:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            found = [pool.submit(client.exists, 10_001) for _ in range(8)]
            wait_for(lambda: len(Registry.asked) == 8, 5)
            Registry.hold.set()
            assert all(f.result(30) for f in found)
    finally:
        Registry.hold.set()
        Registry.hold = None
    assert Registry.asked == [10_001]


def test_missing_ids_are_remembered_within_a_bound() -> None:
    """Every id ever missed stayed in memory (expired ones too): 1,000,000 made-up ids, some
    100 MB. Now the expired ones go first, and at most max_missing are kept."""
    now = [0.0]
    client = SchemaRegistryClient(
        "http://127.0.0.1:9",
        max_missing=100,
        negative_ttl_s=10,
        lookups_per_sec=10**6,
        clock=lambda: now[0],
    )
    client._ask = lambda schema_id, below="": None  # type: ignore[method-assign]  # a registry of none
    for schema_id in range(1000):
        assert not client.exists(schema_id)
    assert client.missing_cached == 100
    now[0] = 11.0
    assert not client.exists(5000)
    assert client.missing_cached == 1


# --- a registry behind TLS and basic authentication ----------------------------------------

USER_INFO = "kpg:registry-pw-4Tq9zL"


class SecuredRegistry(Registry):
    """The registry above, answering 401 without the gateway's credentials."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        expected = "Basic " + base64.b64encode(USER_INFO.encode()).decode()
        if self.headers.get("Authorization") != expected:
            body = b'{"error_code": 401, "message": "Unauthorized"}'
            self.send_response(401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()


@pytest.fixture
def secured_registry(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An https registry whose certificate ``make_pki``'s CA signs, which asks for a client
    certificate from that CA (``gateway.pem``) and basic authentication as ``USER_INFO``."""
    pki = make_pki(tmp_path, {"gateway": "/CN=gateway"})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SecuredRegistry)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki / "ca.pem"))
    context.load_cert_chain(pki / "server.pem", pki / "server.key")
    context.verify_mode = ssl.CERT_REQUIRED
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Registry.asked.clear()
    try:
        yield f"https://localhost:{server.server_address[1]}", pki
    finally:
        server.shutdown()
        server.server_close()


def test_the_client_authenticates_to_a_registry_behind_tls(
    secured_registry: tuple[str, Path],
) -> None:
    url, pki = secured_registry
    context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    context.load_cert_chain(pki / "gateway.pem", pki / "gateway.key")
    secret = Secret(USER_INFO, "test")
    client = SchemaRegistryClient(url, basic_auth=secret, ssl_context=context)
    assert client.exists(1) and client.registered_under(1, "orders-value")
    anonymous = SchemaRegistryClient(url, ssl_context=context)
    with pytest.raises(SchemaRegistryError, match="answered 401 for schema id 1") as raised:
        anonymous.exists(1)
    # The message reaches the producer (INVALID_RECORD): no internal address in it.
    assert str(raised.value) == "the schema registry answered 401 for schema id 1"
    untrusting = SchemaRegistryClient(url, basic_auth=secret)  # the system's trust store
    with pytest.raises(SchemaRegistryError, match="(?i)certificate verify failed"):
        untrusting.exists(1)


def test_the_gateway_asks_a_registry_behind_tls_and_basic_auth(
    broker: HostPort, secured_registry: tuple[str, Path], tmp_path: Path
) -> None:
    """A registry that asks for credentials (as Confluent's with basic auth, behind TLS)
    answered every look-up 401: the gateway had no setting for them, so every record of a
    schema-id:registry topic was rejected."""
    url, pki = secured_registry
    user_info = tmp_path / "registry-user-info"
    user_info.write_text(USER_INFO + "\n")
    prefix = "record.validation.schema.registry."
    policies = {
        f"{prefix}url": url,
        f"{prefix}basic.auth.user.info_file": str(user_info),
        f"{prefix}ssl.ca.location": str(pki / "ca.pem"),
        f"{prefix}ssl.certificate.location": str(pki / "gateway.pem"),
        f"{prefix}ssl.key.location": str(pki / "gateway.key"),
        f"{prefix}timeout.ms": 5000,
    }
    gw = GatewayThread(gateway_config(broker, policies=policies)).start()
    try:
        topic = registry_topic(gw.bootstrap)
        results = produce_each(gw.bootstrap, topic, [framed(1), framed(2)])
        assert results[framed(1)] is None
        assert results[framed(2)].code() == KafkaError.INVALID_RECORD  # type: ignore[union-attr]
    finally:
        gw.stop()


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        (
            {"url": "https://kpg:hunter2@registry:8081"},
            "the URL holds a user name (and password?); give the credentials in "
            "policies.record.validation.schema.registry.basic.auth.user.info_file or _env",
        ),
        (
            {"url": "http://registry:8081", "basic.auth.user.info_env": "KPG_TEST_USER_INFO"},
            "is http://, which would send the password in the clear",
        ),
        (
            {"url": "https://registry:8081", "basic.auth.user.info_env": "KPG_TEST_NO_COLON"},
            "is not user:password",
        ),
        (
            {"url": "http://registry:8081", "ssl.ca.location": __file__},
            "ssl.ca.location: the registry URL is not https",
        ),
        (
            {"url": "https://registry:8081", "ssl.ca.location": "/nonexistent/ca.pem"},
            "'/nonexistent/ca.pem' is not a file",
        ),
        (
            {"url": "https://registry:8081", "ssl.certificate.location": __file__},
            "certificate.location and key.location go together",
        ),
        (
            {"url": "https://registry:8081", "ssl.ca.location": __file__},
            "cannot use the files",
        ),
        ({"url": "https://registry:8081", "timeout.ms": 0}, "milliseconds from 1 to 60000"),
        ({"url": "https://registry:8081", "timeout.ms": "2s"}, "milliseconds from 1 to 60000"),
    ],
)
def test_registry_settings_that_cannot_work_stop_start_up(
    monkeypatch: pytest.MonkeyPatch, settings: dict[str, Any], problem: str
) -> None:
    monkeypatch.setenv("KPG_TEST_USER_INFO", "kpg:pw")
    monkeypatch.setenv("KPG_TEST_NO_COLON", "kpg-pw")
    section = {f"record.validation.schema.registry.{k}": v for k, v in settings.items()}
    with pytest.raises(ConfigError) as raised:
        load_record_validator(section, flatten_configs(section), "gateway.yaml")
    assert problem in str(raised.value)
    assert "hunter2" not in str(raised.value)
