"""What the gateway allows over all its connections, with Kafka's names: how many connections
(``max.connections``, ``max.connections.per.ip``), how many new ones a second
(``max.connection.creation.rate``, ``max.connection.creation.rate.per.ip``), how many bytes
of requests it holds while it receives and hands them on (``queued.max.request.bytes``), and
how fast one client may have it write audit events (``client.audit.events.per.sec``, the
gateway's own). See the package docstring for the contracts."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import heapq
import logging
import time
from collections.abc import Callable
from typing import Final

from protocol.framing import FrameRejected

from .config import UNLIMITED, LimitsConfig
from .metrics import GatewayMetrics

log = logging.getLogger(__name__)

REFUSAL_LOG_INTERVAL_S: Final = 10.0
"""At most one log line about refused connections this often; the count is in
``kpg_connections_refused_total``."""


class RequestMemory:
    """``queued.max.request.bytes`` over every connection.

    A frame's declared size is taken when its size prefix has been read, before its body,
    and given back once the request has been handed on (sent upstream, answered or refused);
    the body is read in pieces as it arrives, so the gateway never holds more than it took. A
    frame that does not fit waits, its connection unread, until enough is given back; frames
    that wait are let in first-fit, so a small request is never held behind a large one. A
    frame larger than the whole limit could never fit: :meth:`check` refuses it.
    """

    def __init__(self, limit: int, metrics: GatewayMetrics) -> None:
        self._limit = None if limit == UNLIMITED else limit
        self._held = 0
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []
        self._gauge = metrics.queued_request_bytes
        self._waits = metrics.queued_request_waits

    @property
    def held(self) -> int:
        return self._held

    def set_limit(self, limit: int) -> None:
        """A reload's new limit: frames that wait are let in if they fit it now; bytes
        already held stay held."""
        self._limit = None if limit == UNLIMITED else limit
        self.give_back(0)

    def check(self, size: int) -> None:
        """:raises FrameRejected: for a frame of ``size`` bytes that could never fit."""
        if self._limit is not None and size > self._limit:
            raise FrameRejected(
                "queued_max_request_bytes",
                f"frame size {size} exceeds queued.max.request.bytes ({self._limit})",
            )

    async def take(self, size: int) -> None:
        """Take ``size`` bytes, waiting until they fit (:meth:`check` first)."""
        if self._fits(size):
            self._add(size)
            return
        self._waits.inc()
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = (size, granted)
        self._waiting.append(waiter)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.cancelled():
                with contextlib.suppress(ValueError):
                    self._waiting.remove(waiter)
            else:  # granted just as the wait was cancelled
                self.give_back(size)
            raise

    def give_back(self, size: int) -> None:
        self._add(-size)
        waiting, self._waiting = self._waiting, []
        for waiter in waiting:
            wanted, granted = waiter
            if granted.cancelled():
                continue
            if self._fits(wanted):
                self._add(wanted)
                granted.set_result(None)
            else:
                self._waiting.append(waiter)

    def _fits(self, size: int) -> bool:
        return self._limit is None or self._held + size <= self._limit

    def _add(self, size: int) -> None:
        self._held += size
        self._gauge.set(self._held)


class ConnectionLimits:
    """``max.connections`` and ``max.connections.per.ip``, counted over every listener from
    accept until the connection is closed; ``max.connection.creation.rate`` and
    ``max.connection.creation.rate.per.ip``, the connections admitted in each second."""

    def __init__(
        self,
        limits: LimitsConfig,
        metrics: GatewayMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max = limits.max_connections
        self._max_per_ip = limits.max_connections_per_ip
        self._rate = limits.max_connection_creation_rate
        self._rate_per_ip = limits.max_connection_creation_rate_per_ip
        self._open = 0
        self._per_ip: collections.Counter[str] = collections.Counter()
        self._created = _CreationWindow(clock)
        self._refused = metrics.connections_refused
        self._log = ThrottledWarning(log)

    def update(self, limits: LimitsConfig) -> None:
        """A reload's new limits, for connections accepted from now on (open ones stay)."""
        self._max = limits.max_connections
        self._max_per_ip = limits.max_connections_per_ip
        self._rate = limits.max_connection_creation_rate
        self._rate_per_ip = limits.max_connection_creation_rate_per_ip

    def admit(self, host: str) -> bool:
        """Count a new connection from ``host``; False when it is over a limit (counted and
        logged): the caller closes it."""
        if self._open >= self._max:
            self._refuse(host, "max.connections", self._max)
            return False
        if self._per_ip[host] >= self._max_per_ip:
            self._refuse(host, "max.connections.per.ip", self._max_per_ip)
            return False
        total, from_host = self._created.counts(host)
        if total >= self._rate:
            self._refuse(host, "max.connection.creation.rate", self._rate)
            return False
        if from_host >= self._rate_per_ip:
            self._refuse(host, "max.connection.creation.rate.per.ip", self._rate_per_ip)
            return False
        self._created.add(host)
        self._open += 1
        self._per_ip[host] += 1
        return True

    def release(self, host: str) -> None:
        """A connection :meth:`admit` let in has closed."""
        self._open -= 1
        self._per_ip[host] -= 1
        if not self._per_ip[host]:
            del self._per_ip[host]

    def _refuse(self, host: str, key: str, limit: int) -> None:
        self._refused.labels(key).inc()
        self._log.warn(f"refused a connection from {host}: {key} ({limit}) reached")


class _CreationWindow:
    """The connections admitted in the current one-second window, in all and per address.
    A fixed window: a burst across the edge of two windows may reach twice the rate. The
    per-address counts last one window, so they hold no more addresses than a second's
    admitted connections came from."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._start = float("-inf")
        self._total = 0
        self._per_ip: collections.Counter[str] = collections.Counter()

    def counts(self, host: str) -> tuple[int, int]:
        """(all, from ``host``) admitted in the window that is current now."""
        now = self._clock()
        if now - self._start >= 1.0:
            self._start = now
            self._total = 0
            self._per_ip.clear()
        return self._total, self._per_ip[host]

    def add(self, host: str) -> None:
        self._total += 1
        self._per_ip[host] += 1


class ThrottledWarning:
    """One warning per :data:`REFUSAL_LOG_INTERVAL_S` at most, saying how many were not
    logged since the last: a flood of connections does not flood the log. ``level``: the
    line's level (a warning unless said)."""

    def __init__(self, logger: logging.Logger, level: int = logging.WARNING) -> None:
        self._logger = logger
        self._level = level
        self._quiet_until = float("-inf")
        self._unlogged = 0

    def warn(self, message: str) -> None:
        now = time.monotonic()
        if now < self._quiet_until:
            self._unlogged += 1
            return
        if self._unlogged:
            message += f" ({self._unlogged} more since the last such message)"
        self._logger.log(self._level, "%s", message)
        self._unlogged = 0
        self._quiet_until = now + REFUSAL_LOG_INTERVAL_S


def peer_host(peername: object) -> str:
    """The address part of a transport's ``peername`` (the whole of it for a Unix socket)."""
    return str(peername[0]) if isinstance(peername, tuple) else str(peername)


AUDIT_BURST_S: Final = 10.0
"""A client may write this many seconds of ``client.audit.events.per.sec`` at once (a
``kpg dry-run`` of a large manifest) before its requests are paced."""


def client_key(principal: str | None, client_address: str) -> tuple[str, str]:
    """Whose budget of audit events a request uses: its authenticated principal, or, before
    or without authentication, the address it comes from (``client_address`` as the
    connection names its peer, ``host:port``; the port is left out, as a client opens as
    many connections as it likes)."""
    if principal is not None:
        return ("principal", principal)
    host, sep, _port = client_address.rpartition(":")
    return ("host", host if sep else client_address)


class AuditPace:
    """``client.audit.events.per.sec``: how fast one client may have the gateway write audit
    events (and log its denials), since every refused request writes one (about 900 bytes)
    and a client sending nothing but refused requests would otherwise fill the spool's disk
    and the audit topic (then, under ``audit.on_failure: continue``, later decisions go
    unaudited; under ``deny``, every change is refused).

    Each client (:func:`client_key`) has a budget of :data:`AUDIT_BURST_S` seconds of the
    rate, filling at the rate; a decision's events are charged to it once written, which may
    take it below zero, and the client's next request is not read, on any of its
    connections, until the budget is back to zero. No event is dropped or folded: the client
    is slowed, as Kafka slows a client over its request quota, and every decision stays an
    event of its own. A new connection from an address in debt waits the same way before its
    first request, so opening connections does not escape it; what one client can add is
    bounded by the requests it has in flight when its budget runs out. Per process: with
    ``kpg run --workers N`` a client reaching every worker gets N times the rate.
    """

    def __init__(
        self,
        rate: int,
        metrics: GatewayMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rate = None if rate == UNLIMITED else float(rate)
        self._metrics = metrics
        self._clock = clock
        # key -> (balance, when it was that): only clients below a full budget
        self._balances: dict[tuple[str, str], tuple[float, float]] = {}
        self._logged: dict[tuple[str, str], float] = {}
        # (when the client's budget is full again, at the latest charge seen then, key): one
        # entry per key of _balances, so that those full again are forgotten as their time
        # comes, each looked at once per charge. A sweep of every key past a cap of 10,000
        # cost each charge a look at every client in debt: 20,000 addresses in debt at once
        # held the event loop for 41 s over their 20,000 charges.
        self._full_at: list[tuple[float, tuple[str, str]]] = []

    def set_rate(self, rate: int) -> None:
        """A reload's new rate: budgets are counted at it from now on; unlimited forgets
        them all."""
        self._rate = None if rate == UNLIMITED else float(rate)
        if self._rate is None:
            self._balances.clear()
            self._logged.clear()
            self._full_at.clear()
            return
        self._full_at = [(self._full_time(key), key) for key in self._balances]
        heapq.heapify(self._full_at)

    def balance(self, key: tuple[str, str]) -> float:
        """The client's budget now, in events (negative: in debt)."""
        if self._rate is None:
            return 0.0
        full = self._rate * AUDIT_BURST_S
        kept = self._balances.get(key)
        if kept is None:
            return full
        balance, at = kept
        return min(full, balance + (self._clock() - at) * self._rate)

    def charge(self, key: tuple[str, str], events: int) -> None:
        """``events`` written for a decision of the client's; clients whose budget is full
        again are forgotten (they have nothing to wait for)."""
        if self._rate is None or events <= 0:
            return
        known = key in self._balances
        self._balances[key] = (self.balance(key) - events, self._clock())
        if not known:
            heapq.heappush(self._full_at, (self._full_time(key), key))
        self._forget_full()

    def _full_time(self, key: tuple[str, str]) -> float:
        """When the client's budget will be full again, if it spends nothing more."""
        assert self._rate is not None
        balance, at = self._balances[key]
        return at + (self._rate * AUDIT_BURST_S - balance) / self._rate

    def _forget_full(self) -> None:
        """Forget the clients whose budget is full again; look again later at those that
        have spent since their time was set."""
        assert self._rate is not None
        now, due = self._clock(), self._full_at
        while due and due[0][0] <= now:
            _, key = heapq.heappop(due)
            if key not in self._balances:
                continue
            full_at = self._full_time(key)
            if full_at <= now:
                del self._balances[key]
                self._logged.pop(key, None)
            else:  # it has spent since
                heapq.heappush(due, (full_at, key))

    def delay(self, key: tuple[str, str]) -> float:
        """Seconds until the client's budget is back to zero; 0 when it is not in debt."""
        if self._rate is None:
            return 0.0
        balance = self.balance(key)
        return -balance / self._rate if balance < 0 else 0.0

    async def wait(self, key: tuple[str, str]) -> None:
        """Return once the client may send another request (its budget at zero or above)."""
        delay = self.delay(key)
        if delay <= 0:
            return
        self._metrics.audit_paced.inc()
        self._log(key, delay)
        while delay > 0:
            await asyncio.sleep(delay)
            self._metrics.audit_paced_seconds.inc(delay)
            # other connections of the client may have spent meanwhile
            delay = self.delay(key)

    def _log(self, key: tuple[str, str], delay: float) -> None:
        now = self._clock()
        if now - self._logged.get(key, -REFUSAL_LOG_INTERVAL_S) < REFUSAL_LOG_INTERVAL_S:
            return
        self._logged[key] = now
        log.warning(
            "%s %s: its requests wait %.1f s: it had the gateway write audit events faster "
            "than client.audit.events.per.sec (%g)",
            key[0],
            key[1],
            delay,
            self._rate or 0,
        )
