"""The metrics listener: ``/metrics`` (Prometheus), ``/healthz`` and ``/readyz``.

- ``GET /healthz``: 200 while the process serves HTTP at all (alive).
- ``GET /readyz``: 200 when the gateway can serve clients: its state store is loaded and an
  upstream broker answered an ApiVersions request just now; 503 otherwise. The body says why
  in one line.
- Any other path answers the metrics, as prometheus_client's own exporter did before.

The server runs in threads of its own, so a slow probe never holds the event loop; a probe
takes at most the upstream connect timeout (capped at :data:`PROBE_TIMEOUT_S`).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import ssl
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from protocol.api_versions import probe_error, probe_request

from .client_security import read_exactly
from .config import HostPort

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S: Final = 5.0
"""The longest one readiness probe waits for a broker (kubelet's default probe timeout is
1 s, so deployments set timeoutSeconds above this or a lower connect timeout)."""
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


class MetricsEndpoint:
    """The HTTP server of the metrics listener (see the module docstring)."""

    def __init__(self, registry: CollectorRegistry, readiness: Callable[[], Readiness]) -> None:
        self._registry = registry
        self._readiness = readiness
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def serve(self, host: str, port: int) -> int:
        """Start serving in a daemon thread; returns the bound port.

        :raises OSError: when the port cannot be bound.
        """
        endpoint = self

        class Handler(_Handler):
            owner = endpoint

        server = ThreadingHTTPServer((host, port), Handler)
        server.daemon_threads = True
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

    def answer(self, path: str, accept: str | None) -> tuple[int, str, bytes]:
        """(status, content type, body) for a GET of ``path``."""
        route = path.split("?", 1)[0]
        if route == "/healthz":
            return 200, "text/plain; charset=utf-8", b"ok\n"
        if route == "/readyz":
            try:
                readiness = self._readiness()
            except Exception as exc:  # noqa: BLE001 - a probe that breaks says "not ready"
                log.exception("readiness check failed")
                readiness = Readiness(ready=False, reason=f"readiness check failed: {exc!r}")
            status = 200 if readiness.ready else 503
            return status, "text/plain; charset=utf-8", f"{readiness.reason}\n".encode()
        encoder, content_type = choose_encoder(accept or "")
        return 200, content_type, encoder(self._registry)


class _Handler(BaseHTTPRequestHandler):
    owner: MetricsEndpoint

    def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
        try:
            status, content_type, body = self.owner.answer(self.path, self.headers.get("Accept"))
        except Exception as exc:  # noqa: BLE001 - a failed scrape is answered, and logged
            log.exception("metrics listener: GET %s failed", self.path)
            status, content_type = 500, "text/plain; charset=utf-8"
            body = f"{type(exc).__name__}: {exc}\n".encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
        """Scrapes and probes every few seconds would flood the log."""
