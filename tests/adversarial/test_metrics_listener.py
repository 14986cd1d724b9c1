"""Routes through the metrics listener (``metrics: HOST:PORT``), the gateway's other door:
whoever reaches the port can open connections and send HTTP. Each case runs the real gateway
(in-process, or `kpg run` as a process) in front of the tapped real broker, and talks to the
listener over real sockets. What the listener bounds is in :mod:`gateway.health`."""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import resource
import signal
import socket
import struct
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.metrics_core import Metric

from gateway.health import (
    ACCEPTS_PER_SEC,
    MAX_CONNECTIONS,
    MAX_CONNECTIONS_PER_ADDRESS,
    MAX_FORMATS,
    REQUEST_TIMEOUT_S,
    MetricsEndpoint,
    Readiness,
)
from tests.e2e.test_gateway_process import kpg_config, start_kpg
from tests.e2e.test_workers import write_config
from tests.support import BrokerTap, GatewayThread, RawClient, gateway_config, wait_for

pytestmark = pytest.mark.adversarial

API_VERSIONS = 18
WITHIN = REQUEST_TIMEOUT_S + 25
"""How long a test waits for a drop that is due after REQUEST_TIMEOUT_S (generous: the
machine is shared)."""


@pytest.fixture
def gw(tap: BrokerTap) -> Iterator[GatewayThread]:
    running = GatewayThread(gateway_config(tap.address, metrics="127.0.0.1:0")).start()
    try:
        yield running
    finally:
        running.stop()


def metrics_address(gw: GatewayThread) -> tuple[str, int]:
    port = gw.gateway.metrics_port
    assert port is not None
    return "127.0.0.1", port


def get(address: tuple[str, int], path: str, accept: str | None = None) -> tuple[int, str]:
    url = f"http://{address[0]}:{address[1]}{path}"
    request = urllib.request.Request(url, headers={} if accept is None else {"Accept": accept})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def connect(address: tuple[str, int], source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(address, timeout=30, source_address=(source, 0))


def closed_unanswered(sock: socket.socket, timeout: float) -> bool:
    """The listener closes ``sock`` within ``timeout`` without a byte of answer."""
    sock.settimeout(timeout)
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def dropped(gw: GatewayThread, reason: str) -> float:
    return gw.metric("kpg_metrics_http_dropped_total", reason=reason)


def served(bootstrap: str) -> bool:
    answer = RawClient(bootstrap).request(
        API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1")
    )
    return bool(answer.error_code == 0)


# --- connections that hold a thread and a file -------------------------------------------


def test_a_silent_connection_is_dropped(gw: GatewayThread) -> None:
    sock = connect(metrics_address(gw))
    assert closed_unanswered(sock, WITHIN), "a silent connection is held past the timeout"
    assert dropped(gw, "request_timeout") == 1
    assert get(metrics_address(gw), "/healthz") == (200, "ok\n")


def test_a_request_sent_a_byte_at_a_time_is_dropped(gw: GatewayThread) -> None:
    """Each byte comes well within any per-read timeout; the request as a whole does not."""
    sock = connect(metrics_address(gw))
    request = b"GET /metrics HTTP/1.0\r\n" + b"X-Slow: " + b"a" * 1000
    deadline = time.monotonic() + WITHIN
    closed = False
    for byte in request:
        if time.monotonic() > deadline:
            break
        try:
            sock.sendall(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            closed = True
            break
        if closed_unanswered(sock, 0.5):
            closed = True
            break
    assert closed, "a trickling request is held past the timeout"
    assert dropped(gw, "request_timeout") == 1


def test_a_huge_request_is_dropped_unread(gw: GatewayThread) -> None:
    """Headers under http.server's own limits (100 lines of 64 KiB) still add up to 6 MiB a
    connection; the listener reads 16 KiB of a request at most."""
    sock = connect(metrics_address(gw))
    headers = b"".join(b"X-Big-%d: %s\r\n" % (i, b"a" * 4000) for i in range(20))
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        sock.sendall(b"GET /metrics HTTP/1.0\r\n" + headers + b"\r\n")
    assert closed_unanswered(sock, WITHIN), "an 80 KB request was answered"
    assert wait_for(lambda: dropped(gw, "request_too_large") == 1)


def test_connections_over_the_caps_are_closed_at_once(gw: GatewayThread) -> None:
    """One address holds MAX_CONNECTIONS_PER_ADDRESS at most; all addresses together,
    MAX_CONNECTIONS; the next is closed at accept, long before any timeout."""
    address = metrics_address(gw)
    held = [connect(address) for _ in range(MAX_CONNECTIONS_PER_ADDRESS)]
    one_more = connect(address)
    assert closed_unanswered(one_more, REQUEST_TIMEOUT_S / 2)
    assert dropped(gw, "max_connections_per_address") == 1
    # from other loopback addresses, up to the listener's cap
    sources = [f"127.0.0.{2 + i // MAX_CONNECTIONS_PER_ADDRESS}" for i in range(MAX_CONNECTIONS)]
    held += [connect(address, source) for source in sources[: MAX_CONNECTIONS - len(held)]]
    over = connect(address, "127.0.0.99")
    assert closed_unanswered(over, REQUEST_TIMEOUT_S / 2)
    assert dropped(gw, "max_connections") == 1
    for sock in held:
        sock.close()
    assert wait_for(lambda: get(address, "/healthz")[0] == 200, 30)


def test_resets_are_counted_not_printed(
    gw: GatewayThread, capfd: pytest.CaptureFixture[str]
) -> None:
    """socketserver printed a 28-line traceback to stderr for each connection reset
    mid-request: a client could write the log full at will."""
    address = metrics_address(gw)
    for _ in range(20):
        sock = connect(address)
        sock.sendall(b"GET /metrics HTTP/1.0\r\n")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    assert wait_for(lambda: dropped(gw, "connection_error") == 20, 30)
    assert get(address, "/healthz")[0] == 200
    assert "Traceback" not in capfd.readouterr().err


@contextlib.contextmanager
def open_file_limit(pid: int, limit: int) -> Iterator[None]:
    """The process ``pid`` runs with at most ``limit`` open files meanwhile (its soft limit:
    lowering the hard one could not be undone without privileges)."""
    before = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, before[1]))
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            resource.prlimit(pid, resource.RLIMIT_NOFILE, before)


def flood(address: tuple[str, int], connections: int) -> list[socket.socket]:
    """Up to ``connections`` idle connections from 8 loopback addresses; stops at the first
    that the listener does not take within 2 s (it has stopped accepting)."""
    opened = []
    for i in range(connections):
        try:
            opened.append(
                socket.create_connection(
                    address, timeout=2, source_address=(f"127.0.0.{10 + i % 8}", 0)
                )
            )
        except TimeoutError:
            break
    return opened


def test_idle_metrics_connections_do_not_starve_the_kafka_listener(
    tap: BrokerTap, tmp_path: Path
) -> None:
    """The metrics port and the Kafka listeners share the process's open files: idle HTTP
    connections to a `kpg run` limited to 256 files used to take them all (400 from 8
    addresses), and a Kafka client was no longer accepted."""
    metrics = f"127.0.0.1:{_free_port()}"
    config = kpg_config(tmp_path, tap.address, metrics=metrics)
    process, bootstrap = start_kpg("--config", str(config))
    host, _, port = metrics.rpartition(":")
    idle: list[socket.socket] = []
    try:
        assert served(bootstrap)
        assert len(list(Path(f"/proc/{process.pid}/fd").iterdir())) < 128
        with open_file_limit(process.pid, 256):
            idle = flood((host, int(port)), 400)
            assert served(bootstrap), "a Kafka client is not served beside idle HTTP ones"
    finally:
        for sock in idle:
            sock.close()
        process.send_signal(signal.SIGTERM)
        process.wait(30)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def readyz_flood(address: tuple[str, int], tap: BrokerTap, count: int) -> tuple[int, float]:
    """``count`` GET /readyz from four threads, every one answered 200: the broker
    connections the probes behind them opened, and the seconds the flood took."""
    before = tap.connections
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: get(address, "/readyz"), range(count)))
    seconds = time.monotonic() - started
    assert all(status == 200 for status, _ in answers)
    return tap.connections - before, seconds


# --- /readyz and the brokers ---------------------------------------------------------------


def test_a_flood_of_readyz_is_not_a_flood_of_broker_connections(
    gw: GatewayThread, tap: BrokerTap
) -> None:
    """Every GET /readyz opened a connection to a broker (up to 5 s each): 200 of them, 200
    broker connections. Now at most one probe runs at a time, and its result answers for a
    second: the probes are bounded by the flood's length in seconds, not by its size."""
    address = metrics_address(gw)
    assert get(address, "/readyz")[0] == 200
    probes, seconds = readyz_flood(address, tap, 200)
    assert probes <= seconds + 2, f"{probes} broker connections for 200 /readyz in {seconds:.1f} s"


def test_readyz_still_follows_the_upstream(gw: GatewayThread, tap: BrokerTap) -> None:
    """The shared result ages out: a broker that stops answering makes /readyz 503 within a
    probe's time, and 200 again once it answers."""
    address = metrics_address(gw)
    assert get(address, "/readyz")[0] == 200
    tap.hold_answers()
    try:
        assert wait_for(lambda: get(address, "/readyz")[0] == 503, 60)
    finally:
        tap.release_answers()
    assert wait_for(lambda: get(address, "/readyz")[0] == 200, 30)


# --- /metrics and the event loop ---------------------------------------------------------


def test_a_flood_of_requests_is_accepted_at_a_bounded_rate(gw: GatewayThread) -> None:
    """The listener's threads share the interpreter's lock with the event loop: 2,200
    /healthz a second made Kafka requests through the gateway 4.5 times slower. It accepts
    ACCEPTS_PER_SEC connections a second now (as many at once); the others wait their turn
    in the listen backlog, and are answered."""
    address = metrics_address(gw)
    time.sleep(1)  # the burst the gateway's start-up left
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: get(address, "/healthz"), range(200)))
    seconds = time.monotonic() - started
    assert answers == [(200, "ok\n")] * 200
    assert len(answers) <= ACCEPTS_PER_SEC * (1 + seconds) + 2, f"200 answered in {seconds:.2f} s"


class CountedCollections:
    """A collector that counts how often the registry is encoded."""

    def __init__(self) -> None:
        self.count = 0

    def collect(self) -> Iterator[Metric]:
        self.count += 1
        return iter(())


def test_a_flood_of_scrapes_is_not_a_flood_of_encodings(gw: GatewayThread) -> None:
    """Each GET /metrics encoded the whole registry while holding the interpreter's lock the
    event loop needs: 6 clients scraping in a loop made Kafka requests 5 times slower. Now
    scrapes share encodings, at most 10 a second (less for a large registry)."""
    address = metrics_address(gw)
    counted = CountedCollections()
    gw.gateway.metrics.registry.register(counted)  # type: ignore[arg-type]
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: get(address, "/metrics"), range(200)))
    seconds = time.monotonic() - started
    assert all(status == 200 and "kpg_connections_total" in text for status, text in answers)
    assert counted.count <= 10 * seconds + 2, f"{counted.count} encodings in {seconds:.1f} s"


def test_accept_headers_neither_break_nor_multiply_scrapes(
    gw: GatewayThread, caplog: pytest.LogCaptureFixture
) -> None:
    """prometheus_client reads the Accept header: ``text/plain; version=x`` made it raise
    (a 500 and a traceback logged per request), and each OpenMetrics version a client names
    is a content type of its own. An unreadable header gets the text format, and the formats
    served are a few: no version string buys an encoding of its own."""
    address = metrics_address(gw)
    with caplog.at_level(logging.ERROR, logger="gateway.health"):
        status, text = get(address, "/metrics", accept="text/plain; version=x")
    assert (status, "kpg_connections_total" in text) == (200, True)
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    counted = CountedCollections()
    gw.gateway.metrics.registry.register(counted)  # type: ignore[arg-type]
    started = time.monotonic()
    versions = [f"application/openmetrics-text; version=1.0.{i}" for i in range(60)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda accept: get(address, "/metrics", accept), versions))
    seconds = time.monotonic() - started
    assert all(status == 200 for status, _ in answers)
    formats = MAX_FORMATS + 1  # and the text format
    assert counted.count <= formats * (10 * seconds + 2), f"{counted.count} in {seconds:.1f} s"


def test_a_scrape_sees_what_happened_before_it_asked(gw: GatewayThread) -> None:
    """Shared encodings are never older than the scrape: each begins after it asked."""
    address = metrics_address(gw)
    counter = Counter("kpg_test_scraped", "a test's", registry=gw.gateway.metrics.registry)
    for expected in range(1, 6):
        counter.inc()
        assert f"kpg_test_scraped_total {expected}.0" in get(address, "/metrics")[1]


def test_readyz_waits_for_a_long_probe_only_so_long() -> None:
    """Requests that share a probe wait for it within the request timeout, then are answered
    not ready: a probe of unreachable brokers (5 s each) held every /readyz waiting on it,
    and the connection slots with them. The probe here is one the test holds."""
    held = threading.Event()
    probing = threading.Event()

    def readiness() -> Readiness:
        probing.set()
        held.wait(60)
        return Readiness(ready=True, reason="ready")

    endpoint = MetricsEndpoint(CollectorRegistry(), readiness, request_timeout_s=1)
    address = ("127.0.0.1", endpoint.serve("127.0.0.1", 0))
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            first = pool.submit(get, address, "/readyz")
            assert probing.wait(30)
            status, body = get(address, "/readyz")
            assert (status, body.startswith("not ready: a probe of the upstream has run")) == (
                503,
                True,
            )
            assert not first.done()  # the probe still runs
            held.set()
            assert first.result(30) == (200, "ready\n")
    finally:
        held.set()
        endpoint.stop()


# --- kpg run --workers N: the supervisor serves the port -----------------------------------


def test_the_supervisors_listener_has_the_same_bounds(tap: BrokerTap, tmp_path: Path) -> None:
    """Under `kpg run --workers 2` the supervisor serves the metrics port (the workers serve
    none): its connections are capped and timed out as a single gateway's are, and its
    /readyz shares its probes."""
    config = write_config(tmp_path, tap.address)
    process, _ = start_kpg("--config", str(config), "--workers", "2")
    host, _, port = str(yaml.safe_load(config.read_text())["metrics"]).rpartition(":")
    address = (host, int(port))
    try:
        assert wait_for(lambda: get(address, "/readyz")[0] == 200, 60)
        held = [connect(address) for _ in range(MAX_CONNECTIONS_PER_ADDRESS)]
        assert closed_unanswered(connect(address), REQUEST_TIMEOUT_S / 2)
        assert all(closed_unanswered(sock, WITHIN) for sock in held)
        text = get(address, "/metrics")[1]
        assert 'kpg_metrics_http_dropped_total{reason="max_connections_per_address"} 1.0' in text
        assert f'kpg_metrics_http_dropped_total{{reason="request_timeout"}} {len(held)}.0' in text
        probes, seconds = readyz_flood(address, tap, 100)
        assert probes <= seconds + 2
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
