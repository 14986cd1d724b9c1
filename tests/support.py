"""Test support: the real gateway in a background thread, raw Kafka requests, a broker tap,
admin-client and TLS helpers, audit events.

Nothing here mocks the gateway's sockets or the broker: the gateway runs its real listeners
on loopback ports, in front of a real broker (or, where a test says so, a scripted upstream).
"""

from __future__ import annotations

import asyncio
import atexit
import importlib
import itertools
import os
import re
import shutil
import socket
import ssl
import struct
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import uvloop
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kio.schema.create_topics.v7.request import (
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from gateway.config import GatewayConfig, HostPort, from_mapping
from gateway.server import Gateway
from protocol.codec import decode_request, decode_response, encode_request
from protocol.create_topics import CREATE_TOPICS as CREATE_TOPICS_KEY
from protocol.framing import SIZE, parse_request_header
from spark_audit.event import AuditEvent

KAFKA_LIKE_UPSTREAM = {
    "ignores_validate_only": False,
    "topic_config_source_unreliable": False,
    "ignores_replica_assignments": False,
    "broker_defaults": {},
}
"""``gateway_config(..., upstream=KAFKA_LIKE_UPSTREAM)``: for a scripted upstream that, like a
Kafka broker and unlike the test broker, honours validate_only and replica assignments,
reports config sources truly and reports its own defaults."""

TEST_BROKER_DEFAULTS = {"num.partitions": 3, "default.replication.factor": 1}
"""What the test broker (Tansu, one broker) creates for a CreateTopics count of -1; it
reports no broker configs, so gateways in front of it state them."""


_STATE_ROOT: list[str] = []


def _state_root() -> str:
    """One directory per test process for the gateways' state databases, removed when the
    process ends (the suite made thousands, left in /tmp)."""
    if not _STATE_ROOT:
        _STATE_ROOT.append(tempfile.mkdtemp(prefix="kpg-test-state-"))
        atexit.register(shutil.rmtree, _STATE_ROOT[0], True)
    return _STATE_ROOT[0]


def gateway_config(upstream: HostPort | list[HostPort], /, **extra: Any) -> GatewayConfig:
    servers = upstream if isinstance(upstream, list) else [upstream]
    raw: dict[str, Any] = {
        "listen": "127.0.0.1:0",
        "node_port_base": 0,
        # The test broker is Tansu: it ignores validate_only, reports topic configs with
        # the DEFAULT source and no broker configs (TEST_BROKER.md), and creates its default
        # counts for a CreateTopics with manual replica assignments; scripted upstreams
        # override these.
        "upstream": {
            "bootstrap_servers": [str(s) for s in servers],
            "connect_timeout_s": 3,
            "ignores_validate_only": True,
            "topic_config_source_unreliable": True,
            "ignores_replica_assignments": True,
            "broker_defaults": TEST_BROKER_DEFAULTS,
        },
        "shutdown_timeout_s": 5,
        "state": {"path": os.path.join(tempfile.mkdtemp(dir=_state_root()), "state.db")},
    }
    upstream_extra = extra.pop("upstream", {})
    raw["upstream"].update(upstream_extra)
    raw.update(extra)
    return from_mapping(raw, "<test>")


def close_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread | None) -> None:
    """Stop ``loop``, running in ``thread``, and free what it holds: its executor's threads
    and its file descriptors (half a dozen per uvloop loop; a test process that leaves them
    open passes 1,024, where select()-based servers, py4j's among them, stop working)."""
    if thread is not None and thread.is_alive():
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
    if not loop.is_running() and not loop.is_closed():
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()


class GatewayThread:
    """The real gateway, on its own uvloop event loop in a thread, for synchronous clients."""

    def __init__(self, config: GatewayConfig, *, reuse_port: bool = False) -> None:
        """``reuse_port``: listen as a worker of ``kpg run --workers N`` does."""
        self.config = config
        self.loop = uvloop.new_event_loop()
        self.gateway = Gateway(config, reuse_port=reuse_port)
        self._thread = threading.Thread(target=self.loop.run_forever, name="gateway", daemon=True)

    def start(self) -> GatewayThread:
        self._thread.start()
        self.run(self.gateway.start())
        return self

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def submit(self, coro: Coroutine[Any, Any, Any]) -> Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    @property
    def bootstrap(self) -> str:
        return str(self.gateway.bootstrap_address)

    def stop(self) -> None:
        if self._thread.is_alive():
            self.run(self.gateway.stop(), timeout=60)
        close_loop(self.loop, self._thread)

    def metric(self, name: str, **labels: str) -> float:
        value = self.gateway.metrics.registry.get_sample_value(name, labels or None)
        return float(value or 0.0)

    def requests_seen(self, api: str, version: int) -> int:
        """How many requests of ``api`` in ``version`` the gateway took."""
        return int(self.metric("kpg_requests_total", api=api, version=str(version)))

    def addresses(self) -> set[str]:
        """Every ``host:port`` the gateway hands clients: bootstrap and node listeners."""
        nodes = self.gateway.nodes.gateway_addresses_snapshot()
        return {f"{host}:{port}" for host, port in nodes} | {self.bootstrap}


# --- raw Kafka requests ---------------------------------------------------------------


class RawClient:
    """A socket speaking Kafka frames, plain or over ``tls``; for requests a test builds
    itself."""

    def __init__(
        self,
        address: str | HostPort,
        timeout: float = 10.0,
        tls: ssl.SSLContext | None = None,
        source: str | None = None,
    ) -> None:
        """``source``: the local address to connect from (another loopback address, such as
        127.0.0.2, for a client the gateway counts apart)."""
        host, _, port = str(address).rpartition(":")
        self.sock = socket.create_connection(
            (host, int(port)),
            timeout=timeout,
            source_address=None if source is None else (source, 0),
        )
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname=host)
        self._correlation = itertools.count(1)

    def send(
        self, api_key: int, version: int, payload: Any, correlation_id: int | None = None
    ) -> int:
        cid = next(self._correlation) if correlation_id is None else correlation_id
        self.sock.sendall(encode_request(api_key, version, cid, "raw-test", payload))
        return cid

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes:
        size = SIZE.unpack(self._exact(4))[0]
        return self._exact(size)

    def request(self, api_key: int, version: int, payload: Any) -> Any:
        cid = self.send(api_key, version, payload)
        frame = self.recv_frame()
        assert struct.unpack_from(">i", frame)[0] == cid
        return decode_response(api_key, version, frame)

    def _exact(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError(f"closed after {len(data)} of {n} bytes")
            data += chunk
        return data

    def is_closed(self, timeout: float = 5.0) -> bool:
        """True when the peer closes the connection (EOF or reset) within ``timeout``."""
        self.sock.settimeout(timeout)
        try:
            while True:
                if not self.sock.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


# --- a tap between the gateway and the broker ------------------------------------------


@dataclass
class TapRecord:
    api_key: int
    api_version: int
    correlation_id: int
    frame: bytes
    connection: int = 0
    """Which of the tap's connections carried it (numbered from 1 as they are accepted)."""

    @property
    def client_id(self) -> str | None:
        return parse_request_header(self.frame).client_id


@dataclass
class BrokerTap:
    """A relay in front of the real broker that records every request frame it carries.

    The tapped broker advertises the tap's own address (see the ``tap`` fixture), so every
    connection the gateway opens, bootstrap and node listeners alike, passes the tap: a test
    sees exactly what reaches the broker.

    :meth:`hold_answers` keeps the broker's answers in the tap (requests still pass) until
    :meth:`release_answers`: what the gateway sends while it has no answer is then visible.
    :meth:`hold_requests` keeps requests of one API in the tap, recorded but not forwarded (a
    connection's later requests wait behind them), until :meth:`release_requests`: what
    happens meanwhile on other connections then reaches the broker first.
    """

    broker: HostPort
    port: int = 0
    requests: list[TapRecord] = field(default_factory=list)
    connections: int = 0
    _server: asyncio.Server | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _answers_flow: asyncio.Event = field(default_factory=asyncio.Event)
    _requests_flow: asyncio.Event = field(default_factory=asyncio.Event)
    _held_api_keys: set[int] = field(default_factory=set)

    @property
    def address(self) -> HostPort:
        assert self._server is not None
        return HostPort(host="127.0.0.1", port=self._server.sockets[0].getsockname()[1])

    def start(self) -> HostPort:
        self._answers_flow.set()
        self._requests_flow.set()
        self._loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._relay, "127.0.0.1", self.port), self._loop
        ).result(10)
        return self.address

    def hold_answers(self) -> None:
        """From now on, keep every answer the broker sends in the tap."""
        self._in_loop(self._answers_flow.clear)

    def release_answers(self) -> None:
        """Let the answers held, and all later ones, through."""
        self._in_loop(self._answers_flow.set)

    def hold_requests(self, api_key: int) -> None:
        """From now on, keep requests of ``api_key`` in the tap, unforwarded."""

        def hold() -> None:
            self._held_api_keys.add(api_key)
            self._requests_flow.clear()

        self._in_loop(hold)

    def release_requests(self) -> None:
        """Forward the requests held, and all later ones."""

        def release() -> None:
            self._held_api_keys.clear()
            self._requests_flow.set()

        self._in_loop(release)

    def _in_loop(self, action: Callable[[], None]) -> None:
        """Run ``action`` in the tap's loop and return once it has run."""
        assert self._loop is not None

        async def run() -> None:
            action()

        asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    async def _relay(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        self.connections += 1
        connection = self.connections
        breader, bwriter = await asyncio.open_connection(self.broker.host, self.broker.port)

        async def upstream() -> None:
            try:
                while True:
                    prefix = await creader.readexactly(4)
                    frame = await creader.readexactly(SIZE.unpack(prefix)[0])
                    key, version, cid = struct.unpack_from(">hhi", frame)
                    self.requests.append(TapRecord(key, version, cid, frame, connection))
                    if key in self._held_api_keys:
                        await self._requests_flow.wait()
                    bwriter.write(prefix + frame)
                    await bwriter.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                bwriter.close()

        async def downstream() -> None:
            try:
                while data := await breader.read(65536):
                    await self._answers_flow.wait()
                    cwriter.write(data)
                    await cwriter.drain()
            except ConnectionError:
                pass
            finally:
                cwriter.close()

        await asyncio.gather(upstream(), downstream())

    def api_keys(self) -> set[int]:
        return {r.api_key for r in self.requests}

    def forwarded(self, api_key: int) -> list[Any]:
        """The decoded requests of ``api_key`` that reached the broker."""
        return [
            decode_request(parse_request_header(r.frame), r.frame)
            for r in self.requests
            if r.api_key == api_key
        ]

    def created(self) -> list[tuple[int, list[str]]]:
        """(version, topic names) of each CreateTopics that reached the broker."""
        sent = [r for r in self.requests if r.api_key == CREATE_TOPICS_KEY]
        return [
            (r.api_version, [t.name for t in c.topics])
            for r, c in zip(sent, self.forwarded(CREATE_TOPICS_KEY), strict=True)
        ]

    def stop(self) -> None:
        if self._loop is not None:
            if self._server is not None:
                self._loop.call_soon_threadsafe(self._server.close)
            close_loop(self._loop, self._thread)


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.05) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def fetch_request(topic: str, *, max_wait: timedelta, min_bytes: int = 1) -> FetchRequest:
    """A Fetch v12 of partition 0 of ``topic`` from offset 0, up to 1 MiB."""
    return FetchRequest(
        replica_id=i32(-1),
        max_wait=max_wait,
        min_bytes=i32(min_bytes),
        max_bytes=i32(1 << 20),
        isolation_level=i8(0),
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=(
            FetchTopic(
                topic=TopicName(topic),
                partitions=(
                    FetchPartition(
                        partition=i32(0),
                        current_leader_epoch=i32(-1),
                        fetch_offset=i64(0),
                        last_fetched_epoch=i32(-1),
                        log_start_offset=i64(-1),
                        partition_max_bytes=i32(1 << 20),
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )


def legacy_alter_configs_request(
    version: int, resources: list[tuple[int, str, dict[str, str]]], validate_only: bool = False
) -> Any:
    """An AlterConfigs (API 33) request of ``version``: (resource type, name, configs) each."""
    module = importlib.import_module(f"kio.schema.alter_configs.v{version}.request")
    return module.AlterConfigsRequest(
        resources=tuple(
            module.AlterConfigsResource(
                resource_type=i8(t),
                resource_name=n,
                configs=tuple(module.AlterableConfig(name=k, value=v) for k, v in configs.items()),
            )
            for t, n, configs in resources
        ),
        validate_only=validate_only,
    )


# --- admin-client helpers ------------------------------------------------------------------


def unique_name(prefix: str) -> str:
    """``prefix`` with a random suffix: a topic name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def outcome(future: Any) -> tuple[int, str] | None:
    """A confluent-kafka admin future's outcome: None on success, else (error code, message)."""
    try:
        future.result(15)
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        return error.code(), error.str()
    return None


def topic_with_id(address: HostPort) -> tuple[str, uuid.UUID]:
    """A new one-partition topic, created at ``address`` directly (the broker, or a tap in
    front of it), with the topic id the broker's Metadata v12 gives it."""
    topic = unique_name("t")
    direct = AdminClient({"bootstrap.servers": str(address)})
    assert outcome(direct.create_topics([NewTopic(topic, 1, 1)])[topic]) is None
    metadata = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=TopicName(topic)),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    answer = RawClient(str(address)).request(3, 12, metadata)
    return topic, answer.topics[0].topic_id


def records_at(broker: HostPort, topic: str) -> int:
    """How many records partition 0 of ``topic`` holds, asked of the broker itself."""
    consumer = Consumer({"bootstrap.servers": str(broker), "group.id": uuid.uuid4().hex})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(high - low)
    finally:
        consumer.close()


def existing_topics(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)


def topic_configs(bootstrap: str, topic: str) -> dict[str, str]:
    """The topic's configs as ``bootstrap`` describes them, those without a value left out
    (Tansu lists only those set)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource("topic", topic)
    entries = admin.describe_configs([resource])[resource].result(15)
    return {key: entry.value for key, entry in entries.items() if entry.value is not None}


# --- TLS ---------------------------------------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(directory: Path, clients: Mapping[str, str]) -> Path:
    """In ``directory``, made with openssl: a CA (``ca.pem``), a server certificate for
    127.0.0.1 and localhost (``server.pem``/``.key``) and a client certificate for each of
    ``clients`` (file stem -> subject; ``<stem>.pem``/``.key``). Over TLS the client
    certificate is the principal."""
    ca = ["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=test-ca"]
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", *ca, cwd=directory)
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    certificates: list[tuple[str, str, list[str]]] = [
        ("server", "/CN=localhost", ["-extfile", "san.ext"])
    ]
    certificates += [(stem, subject, []) for stem, subject in clients.items()]
    for stem, subject, ext in certificates:
        key = ["-keyout", f"{stem}.key", "-out", f"{stem}.csr", "-subj", subject]
        _openssl("req", "-newkey", "rsa:2048", "-nodes", *key, cwd=directory)
        sign = ["-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2", *ext]
        _openssl("x509", "-req", "-in", f"{stem}.csr", "-out", f"{stem}.pem", *sign, cwd=directory)
    return directory


def tls_listener(pki: Path) -> dict[str, str]:
    """The gateway's ``tls:`` section for ``make_pki``'s server certificate, client
    certificates required."""
    return {
        "cert_file": str(pki / "server.pem"),
        "key_file": str(pki / "server.key"),
        "ca_file": str(pki / "ca.pem"),
        "client_auth": "required",
    }


def tls_context(pki: Path, who: str) -> ssl.SSLContext:
    """A client TLS context trusting ``make_pki``'s CA, with the client certificate ``who``
    (for RawClient)."""
    context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    context.load_cert_chain(str(pki / f"{who}.pem"), str(pki / f"{who}.key"))
    return context


def ssl_client(bootstrap: str, pki: Path, who: str | None) -> dict[str, str]:
    """A confluent-kafka config for TLS to ``bootstrap``, with the client certificate
    ``who`` of ``make_pki`` (None: no client certificate)."""
    config = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki / "ca.pem"),
    }
    if who is not None:
        config["ssl.certificate.location"] = str(pki / f"{who}.pem")
        config["ssl.key.location"] = str(pki / f"{who}.key")
    return config


# --- audit events ------------------------------------------------------------------------------


def spool_events(
    spool: Path, keep: Callable[[AuditEvent], bool], count: int = 1, timeout: float = 10.0
) -> list[AuditEvent]:
    """The audit events in ``spool`` (completed segments and the open one) that ``keep``
    keeps, once there are ``count`` of them or ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        events = []
        for path in sorted(spool.glob("events-*.jsonl")) + sorted(spool.glob(".events-*.open")):
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip() and keep(event := AuditEvent.from_json(line)):
                    events.append(event)
        if len(events) >= count or time.monotonic() > deadline:
            return events
        time.sleep(0.05)


def audit_event(**overrides: Any) -> AuditEvent:
    """An audit event: User:alice's CreateTopics of ``orders`` denied by
    min-replication-factor, unless ``overrides`` say otherwise."""
    fields: dict[str, Any] = {
        "time": "2026-11-21T09:00:00.123Z",
        "gateway_instance": "kpg-1",
        "client_address": "10.0.0.7:53122",
        "principal": "User:alice",
        "client_id": "app",
        "api": "CreateTopics",
        "api_version": 7,
        "resource_type": "topic",
        "resource_name": "orders",
        "action": "create",
        "policy": "min-replication-factor",
        "mode": "enforce",
        "verdict": "denied",
        "error_code": 87,
    }
    fields.update(overrides)
    return AuditEvent(**fields)


class noted(str):  # noqa: N801 - used like a string literal in assertions
    """An error message the gateway made for a decision: ``text`` followed by
    `` (audit request id <32 hex digits>)``. Compares equal to exactly such messages."""

    _NOTE = r" \(audit request id [0-9a-f]{32}\)"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, str)
            and re.fullmatch(re.escape(str(self)) + self._NOTE, other) is not None
        )

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return str.__hash__(self)

    def __repr__(self) -> str:
        return f"noted({str.__repr__(self)})"


def policy_message(message: str | None) -> str | None:
    """A denial's message as the policy wrote it: the gateway's `` (audit request id ...)``
    note checked and taken off (other messages as they are)."""
    if message is None:
        return None
    match = re.search(noted._NOTE + "$", message)
    return message[: match.start()] if match else message


def create_topic_request(
    name: str,
    *,
    partitions: int = 1,
    replication_factor: int = 1,
    assignments: tuple[tuple[int, tuple[int, ...]], ...] = (),
    configs: tuple[tuple[str, str | None], ...] = (),
    validate_only: bool = False,
) -> CreateTopicsRequest:
    """A CreateTopics v7 request for one topic, as a raw client sends it."""
    return CreateTopicsRequest(
        topics=(
            CreatableTopic(
                name=TopicName(name),
                num_partitions=i32(partitions),
                replication_factor=i16(replication_factor),
                assignments=tuple(
                    CreatableReplicaAssignment(
                        partition_index=i32(p), broker_ids=tuple(BrokerId(b) for b in brokers)
                    )
                    for p, brokers in assignments
                ),
                configs=tuple(CreatableTopicConfig(name=k, value=v) for k, v in configs),
            ),
        ),
        timeout=i32Timedelta.parse(timedelta(seconds=10)),
        validate_only=validate_only,
    )
