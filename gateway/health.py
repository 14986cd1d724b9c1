"""The metrics listener: ``/metrics`` (Prometheus), ``/healthz`` and ``/readyz``.

- ``GET /healthz``: 200 while the process serves HTTP at all (alive).
- ``GET /readyz``: 200 when the gateway can serve clients: its state store is loaded and an
  upstream broker answered an ApiVersions request within the last second; 503 otherwise. The
  body says why in one line.
- Any other path answers the metrics, as prometheus_client's own exporter did before.

The server runs in threads of its own, so a slow probe never holds the event loop; a probe
takes at most the upstream connect timeout (capped at :data:`PROBE_TIMEOUT_S`).

Anyone who can reach the port can talk to it, so what a client can make it hold is bounded,
and every drop is counted (``kpg_metrics_http_dropped_total{reason}``):

- Connections: at most :data:`MAX_CONNECTIONS` at once, :data:`MAX_CONNECTIONS_PER_ADDRESS`
  from one address; one over is closed at accept. Each holds a thread and a file descriptor,
  from the same open-file limit the Kafka listeners need (:mod:`gateway.rlimits`): without a
  cap, idle connections to this port could stop the gateway accepting Kafka clients.
- Rate: :data:`ACCEPTS_PER_SEC` connections accepted a second; the next ones wait in the
  listen backlog (the kubelet's probes and the scrapes need a few a second).
- Time: a request must arrive whole within :data:`REQUEST_TIMEOUT_S` of the connection's
  accept (an idle client, or one sending a byte now and then, is dropped), and its answer
  must leave within as long again. One request per connection (HTTP/1.0).
- Size: the request line and headers together, at most :data:`MAX_REQUEST_BYTES`.
- Scrapes: ``/metrics`` encodes the registry holding the interpreter's lock the event loop
  needs, so scrapes share encodings, begun after they asked, one at a time and for at most
  :data:`SCRAPE_DUTY` of the time (:class:`SharedScrape`).
- Upstream probes: ``/readyz`` answers from a result at most :data:`READINESS_MAX_AGE_S` old;
  at most one probe runs at a time and the requests arriving meanwhile share its result, so
  a flood of ``/readyz`` is not a flood of broker connections.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import io
import itertools
import logging
import socket
import ssl
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import CounterMetricFamily, Metric

from protocol.api_versions import probe_error, probe_request

from .client_security import read_exactly
from .config import HostPort

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S: Final = 5.0
"""The longest one readiness probe waits for a broker (kubelet's default probe timeout is
1 s, so deployments set timeoutSeconds above this or a lower connect timeout)."""
MAX_CONNECTIONS: Final = 32
"""HTTP connections open at once on the metrics listener (a scrape or a probe holds one for
milliseconds: kubelet's three probes and a few Prometheus servers use a handful)."""
MAX_CONNECTIONS_PER_ADDRESS: Final = 8
"""HTTP connections open at once from one client address, so that one client cannot take
every connection from the kubelet's probes and the scrapes."""
REQUEST_TIMEOUT_S: Final = 5.0
"""How long a connection may take to send its whole request, from its accept (and, again,
to take its answer)."""
MAX_REQUEST_BYTES: Final = 16 * 1024
"""The request line and headers of one request (a probe or a scrape sends some 200 bytes)."""
ACCEPTS_PER_SEC: Final = 50
"""Connections the listener accepts a second (as many at once); more wait in the listen
backlog. Its threads share the interpreter's lock with the event loop: 2,200 ``/healthz`` a
second made Kafka requests through the gateway 4.5 times slower (p50 0.49 to 2.22 ms)."""
SCRAPE_DUTY: Final = 0.1
"""The share of the time the listener may spend encoding ``/metrics`` (see
:class:`SharedScrape`)."""
MIN_SCRAPE_INTERVAL_S: Final = 0.1
"""The shortest time between the ends and starts of two encodings of ``/metrics``."""
MAX_FORMATS: Final = 4
"""Exposition formats (content types) served; the text format for any further one."""
READINESS_MAX_AGE_S: Final = 1.0
"""How old the readiness a ``/readyz`` answer gives may be (kubelet probes every 10 s by
default, at most every second)."""
DROP_REASONS: Final = (
    "max_connections",
    "max_connections_per_address",
    "request_timeout",
    "request_too_large",
    "connection_error",
)
"""Why the metrics listener closed a connection without answering it."""
_MAX_ANSWER: Final = 1024 * 1024
_correlation_ids = itertools.count(1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Readiness:
    ready: bool
    reason: str
    """One line: what is ready, or what is not."""


def probe_upstream(
    servers: Sequence[HostPort], timeout_s: float, tls: ssl.SSLContext | None = None
) -> str | None:
    """Ask the brokers, one after another, for their API versions (over TLS with ``tls``, as
    every other connection to them); None as soon as one answers, otherwise what went wrong
    with each."""
    problems = []
    for server in servers:
        try:
            problem = _ask(server, min(timeout_s, PROBE_TIMEOUT_S), tls)
        except (OSError, struct.error) as exc:
            problem = f"{type(exc).__name__}: {exc}"
        if problem is None:
            return None
        problems.append(f"{server}: {problem}")
    return "; ".join(problems) or "no upstream bootstrap servers"


def _ask(server: HostPort, timeout_s: float, tls: ssl.SSLContext | None) -> str | None:
    correlation_id = next(_correlation_ids) % 2**31
    with contextlib.ExitStack() as stack:
        sock = stack.enter_context(
            socket.create_connection((server.host, server.port), timeout=timeout_s)
        )
        if tls is not None:
            sock = stack.enter_context(tls.wrap_socket(sock, server_hostname=server.host))
        sock.sendall(probe_request(correlation_id, "kpg-readiness"))
        (size,) = struct.unpack(">i", read_exactly(sock, 4, "the broker"))
        if not 4 <= size <= _MAX_ANSWER:
            return f"answered a frame of {size} bytes"
        frame = read_exactly(sock, size, "the broker")
    if struct.unpack_from(">i", frame)[0] != correlation_id:
        return "answered another request's correlation id"
    return probe_error(frame)


class SharedReadiness:
    """A readiness check run at most once at a time, and its result given again for
    ``max_age_s``: requests that arrive while it runs wait for it and share its result, for
    ``max_wait_s`` at most (a probe of several unreachable brokers takes 5 s each): then they
    are answered not ready, and give their connection back."""

    def __init__(
        self,
        readiness: Callable[[], Readiness],
        max_age_s: float = READINESS_MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
        max_wait_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self._readiness = readiness
        self._max_age_s = max_age_s
        self._max_wait_s = max_wait_s
        self._clock = clock
        self._done = threading.Condition()
        self._running = False
        self._last: tuple[float, Readiness] | None = None
        self.checks = 0
        """Readiness checks run (each one a probe of the brokers)."""

    def __call__(self) -> Readiness:
        give_up = time.monotonic() + self._max_wait_s
        with self._done:
            while True:
                last = self._last
                if last is not None and self._clock() - last[0] < self._max_age_s:
                    return last[1]
                if not self._running:
                    self._running = True
                    self.checks += 1
                    break
                waited = give_up - time.monotonic()
                if waited <= 0:
                    return Readiness(
                        ready=False,
                        reason=f"not ready: a probe of the upstream has run over "
                        f"{self._max_wait_s:g} s",
                    )
                self._done.wait(waited)
        readiness = Readiness(ready=False, reason="not ready: the readiness check did not end")
        try:
            readiness = self._check()
        finally:
            with self._done:
                self._running = False
                self._last = (self._clock(), readiness)
                self._done.notify_all()
        return readiness

    def _check(self) -> Readiness:
        try:
            return self._readiness()
        except Exception as exc:  # noqa: BLE001 - a probe that breaks says "not ready"
            log.exception("readiness check failed")
            return Readiness(ready=False, reason=f"readiness check failed: {exc!r}")


class SharedScrape:
    """Encodings of the registry for ``/metrics``: fresh (begun after the scrape asked), one
    at a time, and no more than :data:`SCRAPE_DUTY` of the time: after an encoding of ``d``
    seconds the next begins ``max(MIN_SCRAPE_INTERVAL_S, d * (1 / SCRAPE_DUTY - 1))`` later.
    Scrapes arriving meanwhile share the next one. An encoding holds the interpreter's lock
    that the event loop needs: 6 clients scraping in a loop (940 scrapes a second) made Kafka
    requests through the gateway 5 times slower (p50 0.40 ms to 2.11 ms, p99 0.60 to 6.11)."""

    def __init__(
        self, encode: Callable[[], bytes], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._encode = encode
        self._clock = clock
        self._changed = threading.Condition()
        self._running = False
        self._started = 0
        self._finished = 0
        self._body = b""
        self._next_start = float("-inf")
        self.encodings = 0

    def __call__(self) -> bytes:
        with self._changed:
            asked_after = self._started  # an encoding under way began before this scrape
            while True:
                if self._finished > asked_after:
                    return self._body
                wait = self._next_start - self._clock()
                if not self._running and wait <= 0:
                    self._running = True
                    self._started += 1
                    number = self._started
                    break
                self._changed.wait(wait if not self._running else None)
        began = self._clock()
        body = None
        try:
            body = self._encode()
        finally:
            with self._changed:
                took = self._clock() - began
                self._running = False
                self.encodings += 1
                self._next_start = (
                    began + took + max(MIN_SCRAPE_INTERVAL_S, took * (1 / SCRAPE_DUTY - 1))
                )
                if body is not None:
                    self._finished, self._body = number, body
                self._changed.notify_all()
        return body


class _Drops:
    """What the metrics listener dropped, by reason, as a Prometheus collector."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: collections.Counter[str] = collections.Counter()

    def add(self, reason: str) -> None:
        with self._lock:
            self.counts[reason] += 1

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "kpg_metrics_http_dropped",
            "Connections to the metrics listener closed unanswered, by reason: over its "
            "connection caps, too slow, too large, or broken",
            labels=["reason"],
        )
        with self._lock:
            for reason in DROP_REASONS:
                family.add_metric([reason], self.counts[reason])
        yield family


class _Slots:
    """The connections open now, in all and by client address, against their caps."""

    def __init__(self, max_connections: int, max_per_address: int) -> None:
        self._max = max_connections
        self._max_per_address = max_per_address
        self._lock = threading.Lock()
        self._by_address: collections.Counter[str] = collections.Counter()
        self._open = 0

    def take(self, address: str) -> str | None:
        """None when the connection may stay (then :meth:`give_back` once it ends), else the
        cap it is over."""
        with self._lock:
            if self._open >= self._max:
                return "max_connections"
            if self._by_address[address] >= self._max_per_address:
                return "max_connections_per_address"
            self._open += 1
            self._by_address[address] += 1
            return None

    def give_back(self, address: str) -> None:
        with self._lock:
            self._open -= 1
            self._by_address[address] -= 1
            if self._by_address[address] <= 0:
                del self._by_address[address]


class _AcceptPace:
    """At most ``rate`` accepts a second, ``rate`` at once: a token bucket, taken by the
    accepting thread alone."""

    def __init__(self, rate: float) -> None:
        self._rate = rate
        self._tokens = rate
        self._at = time.monotonic()

    def wait(self) -> None:
        now = time.monotonic()
        self._tokens = min(self._rate, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens < 1:
            time.sleep((1 - self._tokens) / self._rate)
            self._tokens, self._at = 1.0, time.monotonic()
        self._tokens -= 1


class _Server(ThreadingHTTPServer):
    """ThreadingHTTPServer with the listener's caps: a connection over them is closed at
    accept; a handler's failure (a client gone mid-answer) is counted, not printed."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(
        self, address: tuple[str, int], handler: type[_Handler], endpoint: MetricsEndpoint
    ) -> None:
        self.endpoint = endpoint
        self.slots = _Slots(endpoint.max_connections, endpoint.max_connections_per_address)
        self.accepts = _AcceptPace(endpoint.accepts_per_sec)
        super().__init__(address, handler)

    def get_request(self) -> tuple[Any, Any]:
        self.accepts.wait()  # further connections wait in the listen backlog meanwhile
        return super().get_request()

    def verify_request(self, request: Any, client_address: Any) -> bool:
        over = self.slots.take(str(client_address[0]))
        if over is not None:
            self.endpoint.drops.add(over)
            return False
        return True

    def process_request(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.give_back(str(client_address[0]))
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.give_back(str(client_address[0]))

    def handle_error(self, request: Any, client_address: Any) -> None:
        """socketserver prints a traceback to stderr for each: a client could write the
        log full by resetting its connections."""
        dropped = sys.exc_info()[1]
        self.endpoint.drops.add(
            dropped.reason if isinstance(dropped, _Dropped) else "connection_error"
        )
        log.debug("metrics listener: connection from %s failed", client_address, exc_info=True)


class _Dropped(OSError):
    """A request the listener will not read further: why, one of :data:`DROP_REASONS`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _RequestReader(io.RawIOBase):
    """A connection's bytes, up to a deadline and a size (then :class:`_Dropped`)."""

    def __init__(self, connection: socket.socket, deadline: float, max_bytes: int) -> None:
        self._connection = connection
        self._deadline = deadline
        self._left = max_bytes

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._left <= 0:
            raise _Dropped("request_too_large")
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise _Dropped("request_timeout")
        self._connection.settimeout(remaining)
        try:
            received = self._connection.recv_into(memoryview(buffer)[: self._left])
        except TimeoutError:
            raise _Dropped("request_timeout") from None
        self._left -= received
        return received


class MetricsEndpoint:
    """The HTTP server of the metrics listener (see the module docstring)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        readiness: Callable[[], Readiness],
        *,
        max_connections: int = MAX_CONNECTIONS,
        max_connections_per_address: int = MAX_CONNECTIONS_PER_ADDRESS,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        readiness_max_age_s: float = READINESS_MAX_AGE_S,
        accepts_per_sec: float = ACCEPTS_PER_SEC,
    ) -> None:
        self._registry = registry
        self.readiness = SharedReadiness(
            readiness, readiness_max_age_s, max_wait_s=request_timeout_s
        )
        self.max_connections = max_connections
        self.max_connections_per_address = max_connections_per_address
        self.request_timeout_s = request_timeout_s
        self.max_request_bytes = max_request_bytes
        self.accepts_per_sec = accepts_per_sec
        self.drops = _Drops()
        self._scrapes: dict[str, SharedScrape] = {}
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def serve(self, host: str, port: int) -> int:
        """Start serving in a daemon thread; returns the bound port.

        :raises OSError: when the port cannot be bound.
        """
        endpoint = self

        class Handler(_Handler):
            owner = endpoint

        server = _Server((host, port), Handler, self)
        self._registry.register(self.drops)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, name="kpg-metrics", daemon=True
        )
        self._thread.start()
        return int(server.server_address[1])

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
            self._registry.unregister(self.drops)

    def answer(self, path: str, accept: str | None) -> tuple[int, str, bytes]:
        """(status, content type, body) for a GET of ``path``."""
        route = path.split("?", 1)[0]
        if route == "/healthz":
            return 200, "text/plain; charset=utf-8", b"ok\n"
        if route == "/readyz":
            readiness = self.readiness()
            status = 200 if readiness.ready else 503
            return status, "text/plain; charset=utf-8", f"{readiness.reason}\n".encode()
        content_type, scrape = self._scrape_for(accept or "")
        return 200, content_type, scrape()

    def _scrape_for(self, accept: str) -> tuple[str, SharedScrape]:
        """The format ``accept`` asks for (Prometheus asks for OpenMetrics), among the
        :data:`MAX_FORMATS` first asked for; else, or for an Accept header prometheus_client
        cannot read (``text/plain; version=x`` raised TypeError, answered 500 with a
        traceback logged), the text format. The client writes the version into the content
        type: one encoding each would be unshared, and kept."""
        try:
            encoder, content_type = choose_encoder(accept)
        except (TypeError, ValueError):
            encoder, content_type = choose_encoder("")
        scrape = self._scrapes.get(content_type)
        if scrape is None and len(self._scrapes) >= MAX_FORMATS:
            encoder, content_type = choose_encoder("")
            scrape = self._scrapes.get(content_type)
        if scrape is None:
            scrape = self._scrapes.setdefault(
                content_type, SharedScrape(functools.partial(encoder, self._registry))
            )
        return content_type, scrape


class _Handler(BaseHTTPRequestHandler):
    owner: MetricsEndpoint

    def setup(self) -> None:
        super().setup()
        owner = self.owner
        deadline = time.monotonic() + owner.request_timeout_s
        self.rfile.close()  # the socket closes for good only once every file on it is closed
        self.rfile = io.BufferedReader(
            _RequestReader(self.connection, deadline, owner.max_request_bytes)
        )

    def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
        try:
            status, content_type, body = self.owner.answer(self.path, self.headers.get("Accept"))
        except Exception as exc:  # noqa: BLE001 - a failed scrape is answered, and logged
            log.exception("metrics listener: GET %s failed", self.path)
            status, content_type = 500, "text/plain; charset=utf-8"
            body = f"{type(exc).__name__}: {exc}\n".encode()
        # sendall's timeout bounds each write whole: a client that reads the answer slowly
        # is dropped as one that asks slowly
        self.connection.settimeout(self.owner.request_timeout_s)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
        """Scrapes and probes every few seconds would flood the log."""
