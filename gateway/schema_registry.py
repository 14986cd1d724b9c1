"""A small client for a Confluent-compatible schema registry: does schema id N exist?

Used by record policies that check a record's schema id against the registry (the built-in
``schema-id:registry`` rule). Calls come from the record-validation worker thread, so they
block (urllib) with a timeout. Schema ids never change meaning, so a found id is cached for
good; a missing id is cached for ``negative_ttl_s`` (it may be registered soon), at most
``max_missing`` of them (the oldest forgotten first). Anything other than 200 or 404, or no
answer in time, raises :class:`SchemaRegistryError`, which the policy passes on (and a policy
that raises denies: see :mod:`policies`).

A producer chooses the ids its records carry, so what it can make the gateway ask is bounded;
an id the bounds keep the client from asking about raises :class:`SchemaRegistryError`
(its record is rejected, never written unchecked):

- per Produce request: ``lookups_per_request`` ids asked about (within :meth:`request`);
- per second, over every request: ``lookups_per_sec`` (a token bucket of one second's worth);
- after the registry could not be reached or did not answer in time, nothing is asked for
  ``failure_backoff_s``: a registry that hangs holds one thread for its timeout, not one per
  record;
- one id asked about by several threads at once is asked once; the others wait for its answer.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Final

DEFAULT_MAX_MISSING: Final = 10_000
"""Missing ids remembered (some 100 bytes each)."""
DEFAULT_FAILURE_BACKOFF_S: Final = 1.0


class SchemaRegistryError(Exception):
    """The registry did not give a yes or a no."""


class _NoAnswer(SchemaRegistryError):
    """The registry could not be reached, or did not answer in time."""


class _Budget:
    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left


_request_budget: ContextVar[_Budget | None] = ContextVar("schema_registry_budget", default=None)


class SchemaRegistryClient:
    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 2.0,
        negative_ttl_s: float = 30.0,
        lookups_per_request: int = 32,
        lookups_per_sec: float = 100.0,
        max_missing: int = DEFAULT_MAX_MISSING,
        failure_backoff_s: float = DEFAULT_FAILURE_BACKOFF_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.negative_ttl_s = negative_ttl_s
        self.lookups_per_request = lookups_per_request
        self.lookups_per_sec = lookups_per_sec
        self.max_missing = max_missing
        self.failure_backoff_s = failure_backoff_s
        self._clock = clock
        self._known: set[int] = set()
        self._missing: collections.OrderedDict[int, float] = collections.OrderedDict()
        """Missing id -> until when; in the order cached, so also in the order they expire."""
        self._asking: dict[int, threading.Event] = {}
        self._tokens = float(lookups_per_sec)
        self._refilled = clock()
        self._failed: tuple[float, str] | None = None
        self._lock = threading.Lock()
        self.requests = 0

    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        """The look-ups made meanwhile (in this context) are one Produce request's."""
        token = _request_budget.set(_Budget(self.lookups_per_request))
        try:
            yield
        finally:
            _request_budget.reset(token)

    @property
    def missing_cached(self) -> int:
        return len(self._missing)

    def exists(self, schema_id: int) -> bool:
        """:raises SchemaRegistryError: when the registry cannot say, or may not be asked."""
        while True:
            with self._lock:
                cached = self._cached(schema_id)
                if cached is not None:
                    return cached
                asking = self._asking.get(schema_id)
                if asking is None:
                    self._take_lookup(schema_id)
                    done = self._asking[schema_id] = threading.Event()
                    break
            asking.wait(self.timeout_s + 1)  # then look again: cached, or ask
        try:
            found = self._ask(schema_id)
        except SchemaRegistryError as exc:
            with self._lock:
                if isinstance(exc, _NoAnswer):
                    self._failed = (self._clock(), str(exc))
                del self._asking[schema_id]
            done.set()
            raise
        with self._lock:
            if found:
                self._known.add(schema_id)
            else:
                self._remember_missing(schema_id)
            del self._asking[schema_id]
        done.set()
        return found

    def _cached(self, schema_id: int) -> bool | None:
        if schema_id in self._known:
            return True
        missing_until = self._missing.get(schema_id)
        if missing_until is None:
            return None
        if missing_until > self._clock():
            return False
        del self._missing[schema_id]
        return None

    def _remember_missing(self, schema_id: int) -> None:
        now = self._clock()
        missing = self._missing
        while missing:  # the expired ones lead, then the oldest
            oldest, until = next(iter(missing.items()))
            if until > now and len(missing) < self.max_missing:
                break
            missing.popitem(last=False)
        missing[schema_id] = now + self.negative_ttl_s

    def _take_lookup(self, schema_id: int) -> None:
        """Count one look-up against the bounds, or say which one it is over.

        :raises SchemaRegistryError: naming the bound.
        """
        now = self._clock()
        if self._failed is not None and now - self._failed[0] < self.failure_backoff_s:
            raise SchemaRegistryError(
                f"schema id {schema_id} not looked up: {self._failed[1]} "
                f"{now - self._failed[0]:.1f} s ago (asked again {self.failure_backoff_s:g} s "
                "after a failure)"
            )
        budget = _request_budget.get()
        if budget is not None and budget.left <= 0:
            raise SchemaRegistryError(
                f"schema id {schema_id} not looked up: this produce request already had the "
                f"gateway look up {self.lookups_per_request} schema ids it did not know, its "
                "most (limits: schema.registry.lookups.per.request); ids looked up are "
                "remembered, so sending the records again asks for the next ones"
            )
        self._tokens = min(
            float(self.lookups_per_sec),
            self._tokens + (now - self._refilled) * self.lookups_per_sec,
        )
        self._refilled = now
        if self._tokens < 1:
            raise SchemaRegistryError(
                f"schema id {schema_id} not looked up: the gateway looks up at most "
                f"{self.lookups_per_sec:g} schema ids a second "
                "(limits: schema.registry.lookups.per.sec)"
            )
        self._tokens -= 1
        if budget is not None:
            budget.left -= 1
        self.requests += 1

    def _ask(self, schema_id: int) -> bool:
        request = urllib.request.Request(
            f"{self.url}/schemas/ids/{schema_id}",
            headers={"Accept": "application/vnd.schemaregistry.v1+json, application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return bool(response.status == 200)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return False
            raise SchemaRegistryError(
                f"schema registry {self.url} answered {exc.code} for schema id {schema_id}"
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            raise _NoAnswer(
                f"schema registry {self.url} is unreachable: {getattr(exc, 'reason', exc)}"
            ) from None
