"""Test support: the real gateway in a background thread, raw Kafka requests, a broker tap.

Nothing here mocks the gateway's sockets or the broker: the gateway runs its real listeners
on loopback ports, in front of a real broker (or, where a test says so, a scripted upstream).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import struct
import tempfile
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import uvloop
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.types import TopicName
from kio.static.primitive import i8, i32, i64

from gateway.config import GatewayConfig, HostPort, from_mapping
from gateway.server import Gateway
from protocol.codec import decode_response, encode_request
from protocol.framing import SIZE


def gateway_config(upstream: HostPort | list[HostPort], /, **extra: Any) -> GatewayConfig:
    servers = upstream if isinstance(upstream, list) else [upstream]
    raw: dict[str, Any] = {
        "listen": "127.0.0.1:0",
        "node_port_base": 0,
        # The test broker is Tansu: it ignores validate_only and reports topic configs with
        # the DEFAULT source (TEST_BROKER.md); scripted upstreams override these.
        "upstream": {
            "bootstrap_servers": [str(s) for s in servers],
            "connect_timeout_s": 3,
            "ignores_validate_only": True,
            "topic_config_source_unreliable": True,
        },
        "shutdown_timeout_s": 5,
        "state": {"path": os.path.join(tempfile.mkdtemp(prefix="kpg-state-"), "state.db")},
    }
    upstream_extra = extra.pop("upstream", {})
    raw["upstream"].update(upstream_extra)
    raw.update(extra)
    return from_mapping(raw, "<test>")


class GatewayThread:
    """The real gateway, on its own uvloop event loop in a thread, for synchronous clients."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.loop = uvloop.new_event_loop()
        self.gateway = Gateway(config)
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
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)

    def metric(self, name: str, **labels: str) -> float:
        value = self.gateway.metrics.registry.get_sample_value(name, labels or None)
        return float(value or 0.0)


# --- raw Kafka requests ---------------------------------------------------------------


class RawClient:
    """A plain socket speaking Kafka frames; for requests a test builds itself."""

    def __init__(self, address: str | HostPort, timeout: float = 10.0) -> None:
        host, _, port = str(address).rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
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


@dataclass
class BrokerTap:
    """A relay in front of the real broker that records every request frame it carries.

    The tapped broker advertises the tap's own address (see the ``tap`` fixture), so every
    connection the gateway opens, bootstrap and node listeners alike, passes the tap: a test
    sees exactly what reaches the broker.
    """

    broker: HostPort
    port: int = 0
    requests: list[TapRecord] = field(default_factory=list)
    connections: int = 0
    _server: asyncio.Server | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None

    @property
    def address(self) -> HostPort:
        assert self._server is not None
        return HostPort(host="127.0.0.1", port=self._server.sockets[0].getsockname()[1])

    def start(self) -> HostPort:
        self._loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._relay, "127.0.0.1", self.port), self._loop
        ).result(10)
        return self.address

    async def _relay(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        self.connections += 1
        breader, bwriter = await asyncio.open_connection(self.broker.host, self.broker.port)

        async def upstream() -> None:
            try:
                while True:
                    prefix = await creader.readexactly(4)
                    frame = await creader.readexactly(SIZE.unpack(prefix)[0])
                    key, version, cid = struct.unpack_from(">hhi", frame)
                    self.requests.append(TapRecord(key, version, cid, frame))
                    bwriter.write(prefix + frame)
                    await bwriter.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                bwriter.close()

        async def downstream() -> None:
            try:
                while data := await breader.read(65536):
                    cwriter.write(data)
                    await cwriter.drain()
            except ConnectionError:
                pass
            finally:
                cwriter.close()

        await asyncio.gather(upstream(), downstream())

    def api_keys(self) -> set[int]:
        return {r.api_key for r in self.requests}

    def stop(self) -> None:
        if self._loop is not None and self._server is not None:
            self._loop.call_soon_threadsafe(self._server.close)
            self._loop.call_soon_threadsafe(self._loop.stop)


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
