"""Where the gateway's CPU per request goes: `kpg run --workers 1` (in front of the embedded
Tansu broker) under cProfile while a producer sends 1 KiB records to 3 topics of 10 partitions
at a fixed rate and 3 consumers (fetch.wait.max.ms 10) read them; prints the requests served
and the functions with the most time of their own, per request.

    .venv/bin/python bench/request_profile.py [--rate 500] [--seconds 40] [--top 25]

cProfile slows Python code (so per-request figures are high), not the system calls the
gateway's socket writes make; compare functions with each other, not with the OMB run.
``runners.py(run)`` is the event loop itself (uvloop's C code, its wait for sockets
included); ``exec`` and ``compile`` are mostly start-up.
"""

from __future__ import annotations

import argparse
import pstats
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml
from confluent_kafka import Consumer, Producer

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import create_topics  # noqa: E402
from gateway.embedded import free_port  # noqa: E402

_READY = re.compile(r"bootstrap\.servers=(\S+)")
_TOPICS = 3
_PARTITIONS = 10
_RECORD = b"x" * 1024


def start(workdir: Path, profile: Path) -> tuple[subprocess.Popen[str], str]:
    """``kpg run`` under cProfile; (process, bootstrap) once it serves."""
    config = workdir / "gateway.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "listen": f"127.0.0.1:{free_port()}",
                "node_port_base": 0,
                "state": {"path": str(workdir / "state.db")},
            }
        )
    )
    command = [sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "gateway.cli"]
    command += ["run", "--config", str(config), "--workers", "1"]
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert process.stdout is not None
    for line in process.stdout:
        found = _READY.search(line)
        if found:
            threading.Thread(target=process.stdout.read, daemon=True).start()
            return process, found.group(1)
    raise SystemExit(f"kpg run stopped before serving (status {process.wait()})")


def load(bootstrap: str, topics: list[str], rate: float, seconds: float) -> tuple[int, int]:
    """(records sent, records consumed) by one producer and a consumer per topic."""
    stop = time.monotonic() + seconds
    consumed = [0] * len(topics)

    def consume(i: int) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"profile-{topics[i]}",
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 10,
            }
        )
        consumer.subscribe([topics[i]])
        while time.monotonic() < stop:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                consumed[i] += 1
        consumer.close()

    readers = [threading.Thread(target=consume, args=(i,)) for i in range(len(topics))]
    for reader in readers:
        reader.start()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    sent, started = 0, time.monotonic()
    while time.monotonic() < stop:
        producer.produce(topics[sent % len(topics)], _RECORD)
        sent += 1
        producer.poll(0)
        time.sleep(max(0.0, started + sent / rate - time.monotonic()))
    producer.flush(30)
    for reader in readers:
        reader.join()
    return sent, sum(consumed)


def report(profile: Path, top: int) -> None:
    stats = pstats.Stats(str(profile))
    entries = stats.stats  # type: ignore[attr-defined]
    requests = next(
        (
            calls
            for (_, _, name), (_, calls, *_) in entries.items()
            if name == "parse_request_header"
        ),
        0,
    )
    print(f"requests served: {requests:,}")
    if not requests:
        return
    rows = sorted(entries.items(), key=lambda item: item[1][2], reverse=True)[:top]
    print(f"{'own µs/request':>15} {'calls/request':>14}  function")
    for (file, line, name), (_, calls, own, *_) in rows:
        where = f"{Path(file).name}:{line}({name})" if line else name
        print(f"{own / requests * 1e6:15.1f} {calls / requests:14.2f}  {where}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=" ".join((__doc__ or "").split("\n\n")[0].split()))
    parser.add_argument("--rate", type=float, default=500.0, help="records per second")
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kpg-profile-") as directory:
        workdir = Path(directory)
        profile = workdir / "gateway.prof"
        process, bootstrap = start(workdir, profile)
        try:
            topics = create_topics(
                bootstrap, None, count=_TOPICS, partitions=_PARTITIONS, prefix="profile"
            )
            sent, consumed = load(bootstrap, topics, args.rate, args.seconds)
            print(f"records sent {sent:,}, consumed {consumed:,} in {args.seconds:.0f} s")
        finally:
            process.send_signal(signal.SIGINT)
            process.wait(60)
        report(profile, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
