"""A scripted upstream: a TCP server that answers Kafka requests from a Python function.

Only for what the real test broker cannot show (several brokers, SASL, APIs Tansu lacks, a
deliberately slow answer). Each test that uses it says so in its docstring.
"""

from __future__ import annotations

import asyncio
import importlib
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import uvloop
from kio.index import load_response_schema
from kio.schema.describe_configs.v4.response import (
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
)
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta

from gateway.config import HostPort
from protocol.codec import decode_request, encode_response
from protocol.framing import SIZE, RequestHeader, parse_request_header
from tests.support import close_loop

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
        close_loop(self.loop, self._thread)


# --- answers a scripted broker gives ---------------------------------------------------------

ZERO = i32Timedelta.parse(timedelta(0))


def metadata_response(
    me: ScriptedBroker,
    topics: Iterable[tuple[str, Sequence[tuple[int, ...]] | None]],
    brokers: Sequence[int] = (1,),
) -> MetadataResponse:
    """A Metadata v12 answer: ``brokers`` all at ``me``'s address (the first the controller),
    and per topic its replicas per partition (the first replica leads, all are in sync), or
    None for a topic the broker does not know."""
    assert me.address is not None
    return MetadataResponse(
        throttle_time=ZERO,
        brokers=tuple(
            MetadataResponseBroker(
                node_id=BrokerId(n), host=me.address.host, port=i32(me.address.port)
            )
            for n in brokers
        ),
        cluster_id="scripted",
        controller_id=BrokerId(brokers[0]),
        topics=tuple(_metadata_topic(name, replicas) for name, replicas in topics),
    )


def cluster_metadata_response(
    me: ScriptedBroker,
    topics: Iterable[tuple[str, Sequence[tuple[int, ...]] | None]],
    nodes: Mapping[int, ScriptedBroker],
) -> MetadataResponse:
    """As :func:`metadata_response`, naming each of ``nodes`` at its own broker's address
    (node 1 the controller), for a cluster of several scripted brokers."""
    return replace(
        metadata_response(me, topics, brokers=(1,)),
        brokers=tuple(
            MetadataResponseBroker(
                node_id=BrokerId(n), host=b.address.host, port=i32(b.address.port)
            )
            for n, b in sorted(nodes.items())
            if b.address is not None
        ),
    )


def _metadata_topic(topic: str, replicas: Sequence[tuple[int, ...]] | None) -> Any:
    if replicas is None:
        return MetadataResponseTopic(
            error_code=ErrorCode.unknown_topic_or_partition,
            name=TopicName(topic),
            topic_id=None,
            partitions=(),
        )
    return MetadataResponseTopic(
        error_code=ErrorCode.none,
        name=TopicName(topic),
        topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, topic),
        partitions=tuple(
            MetadataResponsePartition(
                error_code=ErrorCode.none,
                partition_index=i32(p),
                leader_id=BrokerId(nodes[0]),
                replica_nodes=tuple(BrokerId(r) for r in nodes),
                isr_nodes=tuple(BrokerId(r) for r in nodes),
            )
            for p, nodes in enumerate(replicas)
        ),
    )


def describe_configs_response(results: Iterable[DescribeConfigsResult]) -> DescribeConfigsResponse:
    return DescribeConfigsResponse(throttle_time=ZERO, results=tuple(results))


def describe_configs_result(
    resource_type: int,
    resource_name: str,
    entries: Iterable[tuple[str, str | None, int]],
    error_code: ErrorCode = ErrorCode.none,
    error_message: str | None = None,
) -> DescribeConfigsResult:
    """One resource of a DescribeConfigs answer: its entries as (name, value, config source)."""
    return DescribeConfigsResult(
        error_code=error_code,
        error_message=error_message,
        resource_type=i8(resource_type),
        resource_name=resource_name,
        configs=tuple(
            DescribeConfigsResourceResult(
                name=key,
                value=value,
                read_only=False,
                config_source=i8(source),
                is_sensitive=False,
                synonyms=(),
                documentation=None,
            )
            for key, value, source in entries
        ),
    )


def alter_configs_response(
    header: RequestHeader, results: Iterable[tuple[Any, ErrorCode, str | None]]
) -> Any:
    """An AlterConfigs (33) or IncrementalAlterConfigs (44) answer in the request's version:
    (requested resource, error code, message) per resource."""
    schema: Any = load_response_schema(header.api_key, header.api_version)
    module = importlib.import_module(schema.__module__)
    return schema(
        throttle_time=ZERO,
        responses=tuple(
            module.AlterConfigsResourceResponse(
                error_code=code,
                error_message=message,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
            )
            for r, code, message in results
        ),
    )
