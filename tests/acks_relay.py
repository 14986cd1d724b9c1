"""A relay in front of a real broker that answers acks=0 Produce as Apache Kafka does: not at
all.

The test broker (Tansu) answers every Produce, acks=0 included (TEST_BROKER.md); Kafka sends
no answer to acks=0. Where a test needs Kafka's behaviour, the gateway's upstream is this
relay: it carries every request to the real broker and every answer back, except the
answers to acks=0 Produce requests, which it swallows. It pairs answers with requests by
position (the broker answers in request order), never by correlation id.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from dataclasses import dataclass, field

import uvloop

from gateway.config import HostPort
from protocol.framing import SIZE, parse_request_header
from protocol.produce import produce_acks
from tests.support import close_loop

PRODUCE = 0


@dataclass
class AcksZeroRelay:
    """Run with :meth:`start` (its own event loop, in a thread) and :meth:`stop`."""

    broker: HostPort
    swallowed: int = 0
    """Broker answers to acks=0 Produce requests withheld so far."""
    _server: asyncio.Server | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _streams: list[asyncio.StreamWriter] = field(default_factory=list)

    @property
    def address(self) -> HostPort:
        assert self._server is not None
        return HostPort(host="127.0.0.1", port=self._server.sockets[0].getsockname()[1])

    def start(self) -> HostPort:
        self._loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._relay, "127.0.0.1", 0), self._loop
        ).result(10)
        return self.address

    async def _relay(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        breader, bwriter = await asyncio.open_connection(self.broker.host, self.broker.port)
        self._streams += [cwriter, bwriter]
        answer_due: collections.deque[bool] = collections.deque()

        async def upstream() -> None:
            try:
                while True:
                    prefix = await creader.readexactly(4)
                    frame = await creader.readexactly(SIZE.unpack(prefix)[0])
                    header = parse_request_header(frame)
                    acks = produce_acks(header, frame) if header.api_key == PRODUCE else -1
                    answer_due.append(acks != 0)
                    bwriter.write(prefix + frame)
                    await bwriter.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                bwriter.close()

        async def downstream() -> None:
            try:
                while True:
                    prefix = await breader.readexactly(4)
                    frame = await breader.readexactly(SIZE.unpack(prefix)[0])
                    if answer_due and not answer_due.popleft():
                        self.swallowed += 1
                        continue
                    cwriter.write(prefix + frame)
                    await cwriter.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                cwriter.close()

        await asyncio.gather(upstream(), downstream())

    def stop(self) -> None:
        if self._loop is None:
            return

        async def shut() -> None:
            if self._server is not None:
                self._server.close()
            for writer in self._streams:
                writer.close()

        if self._thread is not None and self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(shut(), self._loop).result(10)
        close_loop(self._loop, self._thread)
