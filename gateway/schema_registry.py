"""A small client for a Confluent-compatible schema registry: does schema id N exist, and is
it registered under subject S?

Used by record policies that check a record's schema id against the registry (the built-in
``schema-id:registry`` and ``schema-id:subject:<subject>`` rules). Calls come from the
record-validation worker thread, so they block (urllib) with a timeout. Schema ids never
change meaning, so a found id is cached for good, an id found under a subject for
``subject_ttl_s`` (a subject's version may be deleted); a missing one is cached for
``negative_ttl_s`` (it may be registered soon), at most ``max_missing`` of them (the oldest
forgotten first). Anything other than 200 or 404, a list of subjects that does
not parse or runs past ``MAX_ANSWER_BYTES``, or no answer in time, raises
:class:`SchemaRegistryError`, which the policy passes on (and a policy that raises denies:
see :mod:`policies`). Its messages reach producers (an ``INVALID_RECORD`` answer's message), so
they do not name the registry's address.

A producer chooses the ids its records carry, so what it can make the gateway ask is bounded;
an id the bounds keep the client from asking about raises :class:`SchemaRegistryError`
(its record is rejected, never written unchecked):

- per Produce request: ``lookups_per_request`` ids asked about (within :meth:`request`);
- per second, over every request: ``lookups_per_sec`` (a token bucket of one second's worth);
- after the registry could not be reached, did not answer in time or broke its answer off,
  nothing is asked for ``failure_backoff_s``: a registry that hangs holds one thread for its
  timeout, not one per record;
- one id asked about by several threads at once is asked once; the others wait for its answer.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import http.client
import json
import math
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Final

from .config import Secret

DEFAULT_MAX_MISSING: Final = 10_000
"""Missing ids remembered (some 100 bytes each)."""
DEFAULT_FAILURE_BACKOFF_S: Final = 1.0
MAX_ANSWER_BYTES: Final = 1024 * 1024
"""The most of a registry's answer read (the subjects and versions of one id)."""

_Key = int | tuple[int, str]
"""What a look-up asks: an id, or an id and a subject."""


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A 3xx answer is an error (urllib raises HTTPError for its code), not followed."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


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
        subject_ttl_s: float = 60.0,
        lookups_per_request: int = 32,
        lookups_per_sec: float = 100.0,
        max_missing: int = DEFAULT_MAX_MISSING,
        failure_backoff_s: float = DEFAULT_FAILURE_BACKOFF_S,
        basic_auth: Secret | None = None,
        ssl_context: ssl.SSLContext | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``basic_auth``: ``user:password`` for HTTP basic authentication (Confluent's
        ``basic.auth.user.info``); ``ssl_context``: for an https registry (default: the
        system's trust store)."""
        self.url = url.rstrip("/")
        self._headers = {"Accept": "application/vnd.schemaregistry.v1+json, application/json"}
        if basic_auth is not None:
            token = base64.b64encode(basic_auth.reveal().encode()).decode("ascii")
            self._headers["Authorization"] = f"Basic {token}"
        # No redirects: urllib would send the Authorization header on to wherever one
        # points, and a registry has no reason to send the gateway elsewhere.
        self._opener = urllib.request.build_opener(
            _NoRedirects(), urllib.request.HTTPSHandler(context=ssl_context)
        )
        self.timeout_s = timeout_s
        self.negative_ttl_s = negative_ttl_s
        self.subject_ttl_s = subject_ttl_s
        self.lookups_per_request = lookups_per_request
        self.lookups_per_sec = lookups_per_sec
        self.max_missing = max_missing
        self.failure_backoff_s = failure_backoff_s
        self._clock = clock
        self._known: dict[_Key, float] = {}
        """Found id (or id and subject) -> until when."""
        self._missing: collections.OrderedDict[_Key, float] = collections.OrderedDict()
        """Missing id (or id and subject) -> until when; in the order cached, so also in the
        order they expire."""
        self._asking: dict[_Key, threading.Event] = {}
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
        return self._answer(schema_id, schema_id, lambda: self._ask(schema_id) is not None)

    def registered_under(self, schema_id: int, subject: str) -> bool:
        """Whether the registry lists ``schema_id`` under ``subject`` (in any version it has
        not deleted), by ``GET /schemas/ids/{id}/versions``. A yes is remembered for
        ``subject_ttl_s`` (the version may be deleted), a no as a missing id is (the same
        schema may be registered under the subject later).

        :raises SchemaRegistryError: when the registry cannot say, or may not be asked.
        """
        return self._answer(
            (schema_id, subject),
            schema_id,
            lambda: subject in self._subjects_of(schema_id),
        )

    def _answer(self, key: _Key, schema_id: int, ask: Callable[[], bool]) -> bool:
        while True:
            with self._lock:
                cached = self._cached(key)
                if cached is not None:
                    return cached
                asking = self._asking.get(key)
                if asking is None:
                    self._take_lookup(schema_id)
                    done = self._asking[key] = threading.Event()
                    break
            asking.wait(self.timeout_s + 1)  # then look again: cached, or ask
        try:
            found = ask()
        except BaseException as exc:
            # Whatever ended the look-up, the key is no longer being asked: left in _asking,
            # every later look-up of it waited on an event nobody would set, over and over,
            # holding its validation thread for good (a registry whose answer broke off).
            with self._lock:
                if isinstance(exc, _NoAnswer):
                    self._failed = (self._clock(), str(exc))
                del self._asking[key]
            done.set()
            raise
        with self._lock:
            if found:
                self._known[key] = (
                    math.inf if isinstance(key, int) else self._clock() + self.subject_ttl_s
                )
            else:
                self._remember_missing(key)
            del self._asking[key]
        done.set()
        return found

    def _cached(self, key: _Key) -> bool | None:
        known_until = self._known.get(key)
        if known_until is not None:
            if known_until > self._clock():
                return True
            del self._known[key]
        missing_until = self._missing.get(key)
        if missing_until is None:
            return None
        if missing_until > self._clock():
            return False
        del self._missing[key]
        return None

    def _remember_missing(self, key: _Key) -> None:
        now = self._clock()
        missing = self._missing
        while missing:  # the expired ones lead, then the oldest
            oldest, until = next(iter(missing.items()))
            if until > now and len(missing) < self.max_missing:
                break
            missing.popitem(last=False)
        missing[key] = now + self.negative_ttl_s

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

    def _subjects_of(self, schema_id: int) -> frozenset[str]:
        """The subjects the registry lists the id under (none for an id it does not have).

        :raises SchemaRegistryError: for an answer that is not such a list.
        """
        body = self._ask(schema_id, "/versions")
        if body is None:
            return frozenset()
        try:
            versions = json.loads(body)
            return frozenset(str(entry["subject"]) for entry in versions)
        except (ValueError, TypeError, KeyError) as exc:
            raise SchemaRegistryError(
                f"the schema registry answered schema id {schema_id}'s versions with "
                f"something other than a list of subjects and versions ({type(exc).__name__})"
            ) from None

    def _ask(self, schema_id: int, below: str = "") -> bytes | None:
        """The answer's body to ``GET /schemas/ids/{schema_id}{below}`` (read only when
        ``below`` asks for more than the id), or None when the registry has no such id."""
        request = urllib.request.Request(
            f"{self.url}/schemas/ids/{schema_id}{below}", headers=self._headers
        )
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                if response.status != 200:
                    return None
                if not below:
                    return b""
                body: bytes = response.read(MAX_ANSWER_BYTES + 1)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise SchemaRegistryError(
                f"the schema registry answered {exc.code} for schema id {schema_id}"
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            raise _NoAnswer(
                f"the schema registry is unreachable: {getattr(exc, 'reason', exc)}"
            ) from None
        except http.client.HTTPException as exc:  # an answer cut short or malformed
            raise _NoAnswer(
                f"the schema registry's answer for schema id {schema_id} could not be read: "
                f"{type(exc).__name__}"
            ) from None
        if len(body) > MAX_ANSWER_BYTES:
            raise SchemaRegistryError(
                f"the schema registry answered schema id {schema_id}{below} with more "
                f"than {MAX_ANSWER_BYTES:,} bytes"
            )
        return body
