"""Prometheus metrics. One registry per gateway (no globals), served on ``--metrics`` with
``/healthz`` and ``/readyz`` beside them (:mod:`gateway.health`).

Under ``kpg run --workers N`` each worker's values also go to files in
``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client's multiprocess mode), and the supervisor
serves their sum: counters and histograms add up over the workers; the gauges say how they
add up (``multiprocess_mode``), live workers only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from protocol.versions import API_NAMES, TAKEN, UNREAD_API_KEY, api_name

from .health import MetricsEndpoint, Readiness
from .record_validation import PartitionOutcome

_UNSUPPORTED_VERSION = -1
"""Stands for every version of an API the gateway cannot decode, in the request counts."""

UNKNOWN_API: Final = "Unknown"
"""The ``api`` label of every API key the gateway does not know."""

MAX_TOPIC_LABELS: Final = 1000
"""Topics with series of their own in the record validation counters (per process)."""
OTHER_TOPICS: Final = "_other"
"""The ``topic`` label of the validations of every topic past :data:`MAX_TOPIC_LABELS`."""

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


def api_label(api_key: int) -> str:
    """The ``api`` label of ``api_key``: one for every key the gateway does not know, so that
    a client sending a frame of each int16 key cannot make a series of each (it made 2,000
    series of ``kpg_policy_decisions_total`` in 0.6 s, 65,536 at most: a 13 MB scrape)."""
    if api_key == UNREAD_API_KEY or api_key in API_NAMES:
        return api_name(api_key)
    return UNKNOWN_API


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.connections_total = Counter(
            "kpg_connections", "Client connections accepted", ["listener"], registry=r
        )
        self.connections_active = Gauge(
            "kpg_connections_active",
            "Client connections open now",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.connections_refused = Counter(
            "kpg_connections_refused",
            "Connections closed at accept, by the limit they were over "
            "(max.connections, max.connections.per.ip, max.connection.creation.rate, "
            "max.connection.creation.rate.per.ip)",
            ["reason"],
            registry=r,
        )
        self.tls_handshakes_failed = Counter(
            "kpg_tls_handshakes_failed",
            "Client TLS handshakes that failed (reason failed) or did not finish in time "
            "(reason timeout); the connection is closed and its place given back",
            ["reason"],
            registry=r,
        )
        self.connections_idle_closed = Counter(
            "kpg_connections_idle_closed",
            "Connections closed after connections.max.idle.ms with no request in flight",
            registry=r,
        )
        self.queued_request_bytes = Gauge(
            "kpg_queued_request_bytes",
            "Declared bytes of the requests being received or handed on, the sum "
            "queued.max.request.bytes caps",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.queued_request_waits = Counter(
            "kpg_queued_request_waits",
            "Requests whose reading waited for queued.max.request.bytes to free",
            registry=r,
        )
        self.audit_paced = Counter(
            "kpg_audit_paced",
            "Requests whose reading waited because their client (a principal, or an "
            "unauthenticated client's address) had written audit events faster than "
            "client.audit.events.per.sec",
            registry=r,
        )
        self.audit_paced_seconds = Counter(
            "kpg_audit_paced_seconds",
            "Seconds requests waited under client.audit.events.per.sec",
            registry=r,
        )
        self.requests = Counter(
            "kpg_requests", "Client requests by API and version", ["api", "version"], registry=r
        )
        self.bytes_in = Counter("kpg_bytes_in", "Bytes received from clients", registry=r)
        self.bytes_out = Counter("kpg_bytes_out", "Bytes sent to clients", registry=r)
        self.upstream_latency = Histogram(
            "kpg_upstream_latency_seconds",
            "Time from forwarding a request to the broker's response",
            ["api"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.unaudited_refusals = Counter(
            "kpg_unaudited_refusals",
            "Requests refused because the audit sinks were failing (audit.on_failure: deny)",
            registry=r,
        )
        self.rejected_frames = Counter(
            "kpg_rejected_frames",
            "Frames refused, connection closed, by reason",
            ["reason"],
            registry=r,
        )
        self.upstream_failures = Counter(
            "kpg_upstream_failures",
            "Upstream connections that failed or dropped",
            ["reason"],
            registry=r,
        )
        self.policy_decisions = Counter(
            "kpg_policy_decisions",
            "Verdicts of rules and plug-ins, by API, policy and outcome",
            ["api", "policy", "outcome"],
            registry=r,
        )
        self.records_validated = Counter(
            "kpg_records_validated",
            "Records checked by the record validation policy",
            ["topic", "policy"],
            registry=r,
        )
        self.records_rejected = Counter(
            "kpg_records_rejected",
            "Records the record validation policy rejected",
            ["topic", "policy"],
            registry=r,
        )
        self.batches_validated = Counter(
            "kpg_batches_validated",
            "Partition batches checked",
            ["topic", "policy"],
            registry=r,
        )
        self.batches_rejected = Counter(
            "kpg_batches_rejected",
            "Partition batches refused (INVALID_RECORD or CORRUPT_MESSAGE)",
            ["topic", "policy"],
            registry=r,
        )
        self.config_reloads = Counter(
            "kpg_config_reloads",
            "Configuration reloads (SIGHUP, kpg reload), by result: applied or refused",
            ["result"],
            registry=r,
        )
        self.policy_version = Gauge(
            "kpg_policy_version",
            "1 for the policy version in force (the hash of policies, limits, client_configs "
            "and the judging upstream keys), 0 for one replaced by a reload",
            ["version"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self._endpoint: MetricsEndpoint | None = None
        self.max_topic_labels = MAX_TOPIC_LABELS
        self._topic_labels: set[str] = set()
        self._request_children: dict[tuple[int, int], Counter] = {}
        self._latency_children: dict[int, Histogram] = {}

    def count_request(self, api_key: int, api_version: int) -> None:
        """Count a request under its API and version; a version the gateway cannot take
        counts as ``unsupported``, so that a client cannot make a series of every int16."""
        versions = TAKEN.get(api_key)
        if versions is None or api_version not in versions:
            api_version = _UNSUPPORTED_VERSION
        child = self._request_children.get((api_key, api_version))
        if child is None:
            version = "unsupported" if api_version == _UNSUPPORTED_VERSION else str(api_version)
            child = self.requests.labels(api_name(api_key), version)
            self._request_children[(api_key, api_version)] = child
        child.inc()

    def observe_latency(self, api_key: int, seconds: float) -> None:
        child = self._latency_children.get(api_key)
        if child is None:
            child = self.upstream_latency.labels(api_name(api_key))
            self._latency_children[api_key] = child
        child.observe(seconds)

    def serve(self, host: str, port: int, readiness: Callable[[], Readiness]) -> int:
        """Start the metrics listener in a thread; returns the bound port."""
        self._endpoint = MetricsEndpoint(self.registry, readiness)
        return self._endpoint.serve(host, port)

    def stop_serving(self) -> None:
        if self._endpoint is not None:
            self._endpoint.stop()
            self._endpoint = None

    def set_policy_version(self, version: str, previous: str | None = None) -> None:
        if previous is not None and previous != version:
            self.policy_version.labels(previous).set(0)
        self.policy_version.labels(version).set(1)

    def count_validation(self, outcome: PartitionOutcome, policy: str) -> None:
        """Count one partition's validation."""
        topic = self._topic_label(outcome.topic)
        self.records_validated.labels(topic, policy).inc(outcome.records)
        self.batches_validated.labels(topic, policy).inc(outcome.batches or 1)
        if outcome.error is not None:
            self.batches_rejected.labels(topic, policy).inc()
            self.records_rejected.labels(topic, policy).inc(
                outcome.rejected or len(outcome.error.record_errors)
            )

    def _topic_label(self, topic: str) -> str:
        """``topic``, for the first :attr:`max_topic_labels` topics counted; then
        :data:`OTHER_TOPICS`. A series stays after its topic is deleted, so a client allowed
        to create and delete validated topics made four more for each one it went through."""
        if topic in self._topic_labels:
            return topic
        if len(self._topic_labels) < self.max_topic_labels:
            self._topic_labels.add(topic)
            return topic
        return OTHER_TOPICS
