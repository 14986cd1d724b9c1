"""A client pipelining past ``limits.max_in_flight_requests``: the gateway stops taking a
connection's requests to the broker once that many answers are pending. It counted only the
answers queued for the writer: the one the writer was waiting on and the one the reader had
already sent before finding the queue full came on top, so a connection had the limit plus two
requests at the broker (4 with a limit of 2, 102 with the default 100).

Scripted upstream: the test broker (Tansu) answers at once, so a broker of the test's own
(on the scripted cluster's event loop) reads every request as it arrives, counts it, and
holds the answers until the test lets them go; then it answers each in order, as Kafka does.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest
from kio.schema.metadata.v12.request import MetadataRequest

from gateway.config import HostPort
from protocol.addresses import METADATA
from protocol.codec import decode_request, encode_response
from protocol.framing import SIZE, parse_request_header
from tests.scripted import ScriptedBroker, ScriptedCluster, metadata_response
from tests.support import GatewayThread, RawClient, gateway_config, wait_for

pytestmark = pytest.mark.adversarial

LIMIT = 2
SENT = 6
SETTLE_S = 1.5
"""How long the broker is watched for a request past the limit: one arrives within
milliseconds when the gateway lets it through; with the limit kept, none ever does."""


class HeldAnswers:
    """A broker that reads and counts every request as it arrives, and answers them (in
    order) only once released."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.received = 0
        self.release = asyncio.Event()
        self.me = ScriptedBroker(respond=self._unused, name="held")
        server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), loop
        ).result(10)
        self.server = server
        self.me.address = HostPort(host="127.0.0.1", port=server.sockets[0].getsockname()[1])

    @staticmethod
    async def _unused(*_: Any) -> Any:
        raise AssertionError("not called")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[Any] = asyncio.Queue()
        answering = asyncio.create_task(self._answer(queue, writer))
        try:
            while True:
                size = SIZE.unpack(await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                header = parse_request_header(frame)
                self.received += 1
                queue.put_nowait((header, decode_request(header, frame)))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            answering.cancel()
            writer.close()

    async def _answer(self, queue: asyncio.Queue[Any], writer: asyncio.StreamWriter) -> None:
        await self.release.wait()
        while True:
            header, _ = await queue.get()
            assert header.api_key == METADATA, f"unscripted API key {header.api_key}"
            body = encode_response(
                header.correlation_id,
                METADATA,
                header.api_version,
                metadata_response(self.me, [], brokers=(1,)),
            )
            writer.write(SIZE.pack(len(body)) + body)
            await writer.drain()

    def let_go(self) -> None:
        self.loop.call_soon_threadsafe(self.release.set)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)


def test_a_pipelining_client_has_at_most_the_limit_at_the_broker(
    scripted_cluster: ScriptedCluster,
) -> None:
    broker = HeldAnswers(scripted_cluster.loop)
    assert broker.me.address is not None
    config = gateway_config(broker.me.address, limits={"max_in_flight_requests": LIMIT})
    gw = GatewayThread(config).start()
    client = RawClient(gw.bootstrap)
    try:
        request = MetadataRequest(
            topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
        sent = [client.send(METADATA, 12, request) for _ in range(SENT)]
        assert wait_for(lambda: broker.received >= LIMIT), broker.received
        past = wait_for(lambda: broker.received > LIMIT, timeout=SETTLE_S)
        assert not past, f"{broker.received} requests at the broker, limit {LIMIT}"
        broker.let_go()
        got = [struct.unpack_from(">i", client.recv_frame())[0] for _ in range(SENT)]
        assert got == sent
        assert broker.received == SENT
    finally:
        client.close()
        gw.stop()
        broker.close()
