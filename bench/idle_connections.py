"""Idle client connections through the gateway: its memory (RSS of all its processes, from /proc)
at 1,000, 5,000 and 10,000 of them.

Each connection is a real Kafka client connection, as a client library opens one: ApiVersions
v3, then Metadata v12 for every topic, then nothing (the gateway's connections.max.idle.ms,
10 minutes by default, is longer than the run). They are opened in waves of --concurrency
from one asyncio process, which raises its own open-file limit to the hard one first. Also
reported: the gateway's open files (each client holds one socket to it and one from it to the
broker) and how many connections were still open at the end.

Every client connection costs the gateway two open files: with a hard limit of 20,000, as
on this project's machine, one process holds at most (20,000 - 64) / 2 = 9,968 clients, so
10,000 need two workers (`--workers 2`; each has its own limit).

    .venv/bin/python bench/idle_connections.py                   # 1k, 5k, 10k
    .venv/bin/python bench/idle_connections.py --steps 100,500 --workers 1
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kio.schema.api_versions.v3.request import ApiVersionsRequest  # noqa: E402
from kio.schema.metadata.v12.request import MetadataRequest  # noqa: E402

from bench.harness import (  # noqa: E402
    broker_node_ids,
    kpg_has_workers,
    machine,
    process_tree,
    start_gateway,
    tree_rss_bytes,
    write_result,
)
from gateway.embedded import EmbeddedBroker  # noqa: E402
from protocol.codec import encode_request  # noqa: E402

API_VERSIONS = encode_request(
    18, 3, 1, "idle", ApiVersionsRequest(client_software_name="idle", client_software_version="1")
)
METADATA = encode_request(
    3,
    12,
    2,
    "idle",
    MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    ),
)


def raise_open_file_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


async def _answer(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


async def open_client(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection(host, port)
    for request in (API_VERSIONS, METADATA):
        writer.write(request)
        await _answer(reader)
    return reader, writer


Client = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def open_clients(host: str, port: int, count: int, concurrency: int) -> list[Client]:
    gate = asyncio.Semaphore(concurrency)

    async def one() -> Client:
        async with gate:
            return await asyncio.wait_for(open_client(host, port), 120)

    return list(await asyncio.gather(*(one() for _ in range(count))))


def open_files(pid: int) -> int:
    total = 0
    for member in process_tree(pid):
        try:
            total += len(os.listdir(f"/proc/{member}/fd"))
        except FileNotFoundError:
            continue
    return total


async def measure(args: argparse.Namespace, gateway_pid: int, bootstrap: str) -> dict[str, Any]:
    host, _, port = bootstrap.rpartition(":")
    clients: list[Client] = []
    steps: list[dict[str, Any]] = []
    await asyncio.sleep(args.settle)
    baseline = tree_rss_bytes(gateway_pid)
    print(f"{0:6d} clients: gateway RSS {baseline / 1e6:7.1f} MB", flush=True)
    for target in args.steps:
        started = time.monotonic()
        clients += await open_clients(host, int(port), target - len(clients), args.concurrency)
        opened_s = time.monotonic() - started
        await asyncio.sleep(args.settle)  # whatever the gateway frees after the answers
        rss = tree_rss_bytes(gateway_pid)
        step = {
            "clients": len(clients),
            "gateway_rss_bytes": rss,
            "gateway_rss_mb": rss / 1e6,
            "per_client_kb": (rss - baseline) / len(clients) / 1e3,
            "gateway_open_files": open_files(gateway_pid),
            "gateway_processes": len(process_tree(gateway_pid)),
            "open_s": opened_s,
        }
        steps.append(step)
        print(
            f"{len(clients):6d} clients: gateway RSS {step['gateway_rss_mb']:7.1f} MB "
            f"({step['per_client_kb']:.1f} KB per client), {step['gateway_open_files']} open "
            f"files in {step['gateway_processes']} processes; opened in {opened_s:.1f} s",
            flush=True,
        )
    still_open = sum(1 for reader, writer in clients if not reader.at_eof())
    for _, writer in clients:
        writer.close()
    return {"baseline_rss_bytes": baseline, "steps": steps, "still_open_at_end": still_open}


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join((__doc__ or "").split("\n\n")[0].split()))
    parser.add_argument(
        "--steps",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1_000, 5_000, 10_000],
        help="client counts to measure at, comma-separated",
    )
    parser.add_argument(
        "--workers", type=int, default=2, help="kpg run --workers (when it has the flag)"
    )
    parser.add_argument("--concurrency", type=int, default=200, help="clients opening at once")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds before each reading")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    limit = raise_open_file_limit()
    has_workers = kpg_has_workers()
    workers = args.workers if has_workers else 1
    started = machine()
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as workdir:
        upstream = str(broker.address)
        gateway = start_gateway(
            upstream, Path(workdir), workers=workers, node_ids=broker_node_ids(upstream)
        )
        try:
            result = asyncio.run(measure(args, gateway.pid, gateway.bootstrap))
        finally:
            gateway.stop()
    summary = {
        "benchmark": "idle_connections",
        "machine": {"start": started, "end": machine()},
        "open_file_limit": limit,
        "workers": workers,
        "kpg_run_has_workers": has_workers,
        "requests_per_connection": ["ApiVersions v3", "Metadata v12 (all topics)"],
        **result,
    }
    last = result["steps"][-1]
    print(
        f"\n{last['clients']} idle clients through the gateway ({workers} worker(s)): "
        f"RSS {last['gateway_rss_mb']:.0f} MB summed over its processes; "
        f"{result['still_open_at_end']} still open at the end"
    )
    path = write_result(args.out, "idle", summary)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
