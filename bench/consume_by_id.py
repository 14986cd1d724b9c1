"""The consume path with own topics: direct, and through `kpg run` from two checkouts (say
main and a branch), in one run, against one embedded Tansu broker.

A gateway with an audit topic (one own topic) reads something of every Fetch: before v13 its
bytes are searched for the own topics' names; from v13 (topics by id) main searched them for
the own ids learnt (a minute at a time), the branch walks the request to its topic ids and
checks each against the ids learnt to name other topics. This measures what a consumer sees:
records per second drained by a confluent-kafka consumer from the topic's start (Fetch at
librdkafka's version), and by a raw Fetch v13 loop (one partition per request, small
fetches: the per-request cost dominates), each run ``--rounds`` times, the best kept.

    python bench/consume_by_id.py --before /work/main --after . [--records 200000]

Not a test: numbers, printed as JSON (and written to bench/results/ with --out).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import socket
import struct
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import broker_node_ids, start_gateway  # noqa: E402
from gateway.embedded import EmbeddedBroker  # noqa: E402

PARTITIONS = 4


def fill(bootstrap: str, topic: str, records: int, size: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20})
    value = b"v" * size
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(120)


def drain(bootstrap: str, topic: str, records: int) -> float:
    """Records per second a consumer drains ``topic`` from its start at."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.max.bytes": 1 << 20,
        }
    )
    consumer.subscribe([topic])
    seen = 0
    start = None
    try:
        while seen < records:
            batch = consumer.consume(1000, 1.0)
            for message in batch:
                if message.error() is None:
                    if start is None:
                        start = time.perf_counter()
                    seen += 1
    finally:
        consumer.close()
    assert start is not None
    return seen / (time.perf_counter() - start)


def _topic_id(bootstrap: str, topic: str) -> uuid.UUID:
    from protocol.codec import decode_response, encode_request

    m = importlib.import_module("kio.schema.metadata.v12.request")
    request = m.MetadataRequest(
        topics=(m.MetadataRequestTopic(topic_id=None, name=topic),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    with _connect(bootstrap) as sock:
        sock.sendall(encode_request(3, 12, 1, "bench", request))
        answer = decode_response(3, 12, _frame(sock))
    return uuid.UUID(str(answer.topics[0].topic_id))


def _connect(bootstrap: str) -> socket.socket:
    host, _, port = bootstrap.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=30)


def _frame(sock: socket.socket) -> bytes:
    def exact(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    return exact(struct.unpack(">i", exact(4))[0])


def raw_fetches(bootstrap: str, topic_id: uuid.UUID, requests: int) -> float:
    """Fetch v13 requests per second, one partition at a time from offset 0, 64 KiB each, one
    in flight: the gateway's cost per request, its shortcut included."""
    from kio.static.primitive import i32, i32Timedelta

    from protocol.codec import encode_request
    from tests.enforcement_support import fetch_payload

    frames = [
        encode_request(
            1,
            13,
            7,
            "bench",
            dataclasses.replace(
                fetch_payload(13, (topic_id, p)),
                max_wait=i32Timedelta.parse(timedelta(milliseconds=0)),
                min_bytes=i32(0),
                max_bytes=i32(64 << 10),
            ),
        )
        for p in range(PARTITIONS)
    ]
    with _connect(bootstrap) as sock:
        sock.sendall(frames[0])
        _frame(sock)  # the first: the gateway learns the ids
        start = time.perf_counter()
        for i in range(requests):
            sock.sendall(frames[i % PARTITIONS])
            _frame(sock)
        return requests / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="checkout A (e.g. main)")
    parser.add_argument("--after", type=Path, required=True, help="checkout B (e.g. a branch)")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results: dict[str, Any] = {"records": args.records, "size": args.size}
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as workdir:
        direct = str(broker.address)
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        fill(direct, topic, args.records, args.size)
        topic_id = _topic_id(direct, topic)
        nodes = broker_node_ids(direct)
        gateways = {}
        for name, checkout in (("before", args.before), ("after", args.after)):
            gateways[name] = start_gateway(
                direct,
                Path(workdir) / name,
                node_ids=nodes,
                extra={"audit": {"topic": f"kpg-audit-{name}"}},
                env={"PYTHONPATH": str(checkout.resolve())},
            )
        try:
            targets = {"direct": direct, **{n: g.bootstrap for n, g in gateways.items()}}
            consumed: dict[str, list[float]] = {name: [] for name in targets}
            fetched: dict[str, list[float]] = {name: [] for name in targets}
            # rounds interleaved (direct, before, after, direct, ...): a noisy neighbour
            # slows each target alike, not one of them
            for _ in range(args.rounds):
                for name, bootstrap in targets.items():
                    consumed[name].append(drain(bootstrap, topic, args.records))
                    fetched[name].append(raw_fetches(bootstrap, topic_id, args.requests))
            for name in targets:
                results[name] = {
                    "consumer_records_per_s": round(max(consumed[name])),
                    "consumer_rounds": [round(x) for x in consumed[name]],
                    "fetch_v13_requests_per_s": round(max(fetched[name])),
                    "fetch_v13_rounds": [round(x) for x in fetched[name]],
                }
        finally:
            for gateway in gateways.values():
                gateway.stop()
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
