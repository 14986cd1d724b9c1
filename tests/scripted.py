"""A scripted upstream: a TCP server that answers Kafka requests from a Python function.

Only for what the real test broker cannot show (several brokers, SASL, APIs Tansu lacks, a
deliberately slow answer). Each test that uses it says so in its docstring.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import uvloop

from gateway.config import HostPort
from protocol.codec import decode_request, encode_response
from protocol.framing import SIZE, RequestHeader, parse_request_header

Responder = Callable[["ScriptedBroker", RequestHeader, Any], Awaitable[Any | None]]
"""(broker, header, decoded request) -> response payload, or None for no answer."""


@dataclass
class ScriptedBroker:
    respond: Responder
    name: str = "scripted"
    requests: list[tuple[RequestHeader, Any]] = field(default_factory=list)
    connections: int = 0
    address: HostPort | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _server: asyncio.Server | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> HostPort:
        self._loop = loop
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), loop
        ).result(10)
        self.address = HostPort(host="127.0.0.1", port=self._server.sockets[0].getsockname()[1])
        return self.address

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                size = SIZE.unpack(await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                header = parse_request_header(frame)
                request = decode_request(header, frame)
                self.requests.append((header, request))
                payload = await self.respond(self, header, request)
                if payload is not None:
                    body = encode_response(
                        header.correlation_id, header.api_key, header.api_version, payload
                    )
                    writer.write(SIZE.pack(len(body)) + body)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def stop(self) -> None:
        if self._server is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(self._server.close)


class ScriptedCluster:
    """Several scripted brokers on one background event loop."""

    def __init__(self) -> None:
        self.loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.brokers: list[ScriptedBroker] = []

    def add(self, respond: Responder, name: str) -> ScriptedBroker:
        broker = ScriptedBroker(respond=respond, name=name)
        broker.start(self.loop)
        self.brokers.append(broker)
        return broker

    def close(self) -> None:
        for broker in self.brokers:
            broker.stop()
        self.loop.call_soon_threadsafe(self.loop.stop)
