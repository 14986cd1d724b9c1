"""A small client for a Confluent-compatible schema registry: does schema id N exist?

Used by record policies that check a record's schema id against the registry (the built-in
``schema-id:registry`` rule). Calls come from the record-validation worker thread, so they
block (urllib) with a timeout. Schema ids never change meaning, so a found id is cached for
good; a missing id is cached for ``negative_ttl_s`` (it may be registered soon). Anything
other than 200 or 404, or no answer in time, raises :class:`SchemaRegistryError`, which the
policy passes on (and a policy that raises denies: see :mod:`policies`).
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable


class SchemaRegistryError(Exception):
    """The registry did not give a yes or a no."""


class SchemaRegistryClient:
    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 2.0,
        negative_ttl_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.negative_ttl_s = negative_ttl_s
        self._clock = clock
        self._known: set[int] = set()
        self._missing: dict[int, float] = {}
        self._lock = threading.Lock()
        self.requests = 0

    def exists(self, schema_id: int) -> bool:
        """:raises SchemaRegistryError: when the registry cannot say."""
        with self._lock:
            if schema_id in self._known:
                return True
            missing_until = self._missing.get(schema_id)
            if missing_until is not None and missing_until > self._clock():
                return False
        found = self._ask(schema_id)
        with self._lock:
            if found:
                self._known.add(schema_id)
                self._missing.pop(schema_id, None)
            else:
                self._missing[schema_id] = self._clock() + self.negative_ttl_s
        return found

    def _ask(self, schema_id: int) -> bool:
        self.requests += 1
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
            raise SchemaRegistryError(
                f"schema registry {self.url} is unreachable: {getattr(exc, 'reason', exc)}"
            ) from None
