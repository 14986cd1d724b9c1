"""Record validation on Produce (seed 002): which topics are validated, by what, and how.

A topic is validated when its ``record.validation.policy`` config is set; the gateway keeps
that config in its state store (namespace :data:`STATE_NAMESPACE`, key = topic), since a
Kafka broker would refuse a config it does not know. The policy class comes from
``record.validation.policy.class.name`` (default: the built-in rules of
:mod:`policies.records`), configured once with the ``policies:`` section.

Validation reads no more than the policy's hints ask for (per topic when the policy offers
``hints_for``) and fails closed: a policy that raises anything but InvalidRecord rejects. A
control batch (transaction markers, which only a transaction coordinator writes) is refused
unread with INVALID_RECORD, as Kafka refuses one from a client, in dry-run mode too: a broker
that takes it (Tansu) holds a marker no transaction coordinator wrote.
The built-in policies do bounded work and run on the event loop; a plug-in (or any policy
once a schema registry is configured) runs on a worker thread, and a request whose
validation there outlasts ``policy.timeout.ms`` rejects.

Every topic's records go through one loop over one reader
(:func:`protocol.records.read_records`), told once per ``record.validation.policy`` value
what to read and what to call. Where the policy says a topic's rules are header keys alone
(``required_headers_for``, see :class:`policies.records.RequiredHeadersOnly`), the reader
looks for the keys itself and hands over only the records that lack one, for ``validate``:
same answers, without a RecordProxy per record. Where they are value rules alone
(``value_check_for``, :class:`policies.records.ValueRulesOnly`), it reads each value whole,
for the policy's check of one value. Otherwise each record, read as the hints ask, goes to
``validate``.

A Produce request's validation has a budget (:class:`ValidationBudget`, from ``limits:``):
the records its batches declare, counted before any is read; what its compressed batches
decompress to; the size of one record. A partition over it is refused unread (or as soon as
the reader gets there) with INVALID_RECORD and a message that names the limit and by how
much, in dry-run mode too. On the event loop (:meth:`RecordValidator.validate_sliced`) the
work goes in slices of about a quarter of a millisecond, with the loop's other work run
between them; the answers are the same as in one go (:meth:`RecordValidator.validate`, on a
worker thread). A slice ends after a bounded step: a window of the reader, or 64 records
checked; one record is never split.
"""

from __future__ import annotations

import asyncio
import importlib
import math
import os
import ssl
import sys
import urllib.parse
from collections.abc import Callable, Generator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from time import perf_counter
from typing import Any, Final, Generic, TypeAlias, TypeVar, cast

from policies.api import (
    InvalidRecord,
    RecordIntrospectionHints,
    RecordProxy,
    RecordValidationPolicy,
    TopicMetadata,
)
from policies.records import JSON_SCHEMA_DIR, RequiredHeadersOnly, ValueCheck, ValueRulesOnly
from protocol.errors import CORRUPT_MESSAGE, INVALID_RECORD
from protocol.framing import DEFAULT_MAX_FRAME_BYTES
from protocol.records import (
    BatchRecords,
    BatchView,
    CompressionType,
    CorruptBatch,
    OverLimit,
    RecordReading,
    read_batches,
    read_records,
)
from protocol.results import ItemError

from .config import (
    DEFAULT_RECORD_VALIDATION_MAX_RECORD_BYTES,
    DEFAULT_RECORD_VALIDATION_MAX_RECORDS,
    ConfigError,
    LimitsConfig,
    read_secret,
)
from .schema_registry import SchemaRegistryClient

VALIDATION_POLICY_KEY: Final = "record.validation.policy"
STATE_NAMESPACE: Final = "topic.record.validation.policy"
_CLASS_KEY: Final = "record.validation.policy.class.name"
_PATH_KEY: Final = "record.validation.policy.class.path"
_MODE_KEY: Final = "record.validation.policy.mode"
_REGISTRY_KEY: Final = "record.validation.schema.registry.url"
_REGISTRY_TIMEOUT_KEY: Final = "record.validation.schema.registry.timeout.ms"
_DEFAULT_REGISTRY_TIMEOUT_MS: Final = 2000
_REGISTRY_AUTH_KEY: Final = "record.validation.schema.registry.basic.auth.user.info"
"""With ``_file`` or ``_env``, as every secret in the config: ``user:password``."""
_REGISTRY_SSL_PREFIX: Final = "record.validation.schema.registry.ssl."
_REGISTRY_SSL_KEYS: Final = ("ca.location", "certificate.location", "key.location")
_DEFAULT_CLASS: Final = "policies.records.BuiltinRecordValidationPolicy"
_SHOWN_ERRORS: Final = 3
_SLICE_SECONDS: Final = 0.00025
"""How long validation runs on the event loop before the loop's other work gets a turn. A
request through the gateway waits for a turn about five times on its way (its frame, the
broker's answer, ...): with 1 ms slices a victim of a client sending bombs waited 5 ms more
(p50) and 9 ms (p99); with 0.25 ms, 1 ms. A turn given when nothing else waits costs 2 us."""
_CLOCK_EVERY: Final = 64
"""Records checked between two looks at the clock."""
_CACHED_VALUES: Final = 1024
"""How many ``record.validation.policy`` values the validator keeps what it learnt of (hints,
plans, checks): those in use. A value no topic holds any more is forgotten once this many
newer ones came; kept for good, 23 KB each, a client altering its topic's value before each
Produce grew a worker by some 10 MB a second until the kernel killed it."""

_MAX_RECORD_ERRORS: Final = 1000
"""record_errors listed in one request's answer: the rest are counted in error_message. An
answer listing a million costs 5 s to encode (one step) and is 50 MB long; Java clients give
a record not listed the generic message for its batch, librdkafka reads none of them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionOutcome:
    topic: str
    partition: int
    error: ItemError | None
    records: int
    bytes: int
    batches: int
    fail_closed: bool = False
    """A refusal that dry-run mode does not lift: the records could not be read through (a
    batch the gateway cannot read, or over the request's budget), so the gateway cannot say
    what it would forward."""
    rejected: int = 0
    """Records the policy rejected, all of them (``record_errors`` lists at most
    _MAX_RECORD_ERRORS of a request)."""


PartitionData: TypeAlias = tuple[str, int, str, bytes | memoryview | None]
"""One partition to validate: topic, partition, its record.validation.policy, records."""
Steps: TypeAlias = Generator[None, None, list[PartitionOutcome]]
"""Validation under way: it yields when its slice is spent, and returns the outcomes."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidationBudget:
    """What validating one Produce request may cost: ``limits:``'s
    ``record.validation.max.records``, ``.max.inflated.bytes`` and ``.max.record.bytes``."""

    max_records: int = DEFAULT_RECORD_VALIDATION_MAX_RECORDS
    max_inflated_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_record_bytes: int = DEFAULT_RECORD_VALIDATION_MAX_RECORD_BYTES

    @classmethod
    def of(cls, limits: LimitsConfig) -> ValidationBudget:
        return cls(
            max_records=limits.record_validation_max_records,
            max_inflated_bytes=limits.record_validation_max_inflated_bytes,
            max_record_bytes=limits.record_validation_max_record_bytes,
        )


class _Run:
    """One request's validation: what is left of its budget, and when its slice ends."""

    __slots__ = ("budget", "errors_left", "inflated_left", "records_left", "slice_ends")

    def __init__(self, budget: ValidationBudget, slice_ends: float) -> None:
        self.budget = budget
        self.records_left = budget.max_records
        self.inflated_left = budget.max_inflated_bytes
        self.errors_left = _MAX_RECORD_ERRORS
        self.slice_ends = slice_ends


def rejection_message(record_errors: Sequence[tuple[int, str | None]], total: int = 0) -> str:
    """The partition's error_message, in the words Kafka uses for rejected records; total:
    how many were rejected, when record_errors does not list them all."""
    shown = ", ".join(
        f"(batchIndex={index}, message={message})"
        for index, message in record_errors[:_SHOWN_ERRORS]
    )
    return (
        f"One or more records have been rejected due to {max(total, len(record_errors))} "
        f"record errors in total, and only showing the first three errors at most: [{shown}]"
    )


def _outcome(
    metadata: TopicMetadata,
    record_errors: list[tuple[int, str | None]],
    rejected: int,
    records: int,
    size: int,
    batches: int,
) -> PartitionOutcome:
    error = None
    if rejected:
        error = ItemError(
            error_code=int(INVALID_RECORD),
            error_message=rejection_message(record_errors, rejected),
            record_errors=tuple(record_errors),
        )
    return PartitionOutcome(
        topic=metadata.topic,
        partition=metadata.partition,
        error=error,
        records=records,
        bytes=size,
        batches=batches,
        rejected=rejected,
    )


def _note(
    record_errors: list[tuple[int, str | None]], index: int, message: str | None, run: _Run
) -> int:
    """One rejected record: listed in record_errors while the request may list more, and
    the first of each partition always."""
    if run.errors_left > 0 or not record_errors:
        run.errors_left -= 1
        record_errors.append((index, message))
    return 1


def _refused(
    metadata: TopicMetadata, message: str, records: int, data: bytes | memoryview
) -> PartitionOutcome:
    """A partition over the request's budget: INVALID_RECORD, never forwarded."""
    return PartitionOutcome(
        topic=metadata.topic,
        partition=metadata.partition,
        error=ItemError(error_code=int(INVALID_RECORD), error_message=message),
        records=records,
        bytes=len(data),
        batches=0,
        fail_closed=True,
    )


def _control_batch(metadata: TopicMetadata) -> str:
    """Kafka's refusal of a control batch from a client (LogValidator.validateBatch)."""
    return (
        "Clients are not allowed to write control records in topic partition "
        f"{metadata.topic}-{metadata.partition}."
    )


def _over_records(metadata: TopicMetadata, declared: int, run: _Run) -> str:
    left, maximum = run.records_left, run.budget.max_records
    of = "the" if left == maximum else f"the {left} left of the"
    return (
        f"Record batches for {metadata.topic}-{metadata.partition} declare {declared} records, "
        f"{declared - left} over {of} record validation budget of {maximum} records per "
        "produce request (limits: record.validation.max.records); none was read or written."
    )


def _over_limit(metadata: TopicMetadata, exc: OverLimit, base: int, run: _Run) -> str:
    tp = f"{metadata.topic}-{metadata.partition}"
    if exc.limit == "max_record_bytes":
        index = base + (exc.record or 0)
        return (
            f"Record {index} of the batches for {tp} is {exc.size} bytes, "
            f"{exc.size - exc.maximum} over the record validation limit of {exc.maximum} bytes "
            "per record (limits: record.validation.max.record.bytes); none was written."
        )
    left, maximum = run.inflated_left, run.budget.max_inflated_bytes
    of = "the" if left == maximum else f"the {left} bytes left of the"
    return (
        f"Record batch for {tp} decompresses to at least {exc.size} bytes, "
        f"{exc.size - left} over {of} record validation budget of {maximum} inflated bytes "
        "per produce request (limits: record.validation.max.inflated.bytes); none was written."
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _Plan:
    """How the records of one ``record.validation.policy`` value are checked."""

    reading: RecordReading
    """What the reader takes of each record, and of which records."""
    value_check: ValueCheck | None
    """Called with the value of each record read; None: ``validate``, with the record."""


class RecordValidator:
    """The configured RecordValidationPolicy and what it needs per topic: its hints, and
    whether header keys or values are all it checks (then the reader takes less)."""

    def __init__(
        self,
        policy: RecordValidationPolicy,
        *,
        dry_run: bool,
        budget: ValidationBudget = ValidationBudget(),
    ) -> None:
        self.policy = policy
        self.name = type(policy).__name__
        self.dry_run = dry_run
        self.budget = budget
        self._hints: _Kept[RecordIntrospectionHints] = _Kept()
        self._required_headers: _Kept[tuple[str, ...] | None] = _Kept()
        self._headers_only = isinstance(policy, RequiredHeadersOnly)
        self._values_only = isinstance(policy, ValueRulesOnly)
        self._value_checks: _Kept[ValueCheck | None] = _Kept()
        self._plans: _Kept[_Plan] = _Kept()
        # The built-in policies do bounded work per record and never block: they run on the
        # event loop. A plug-in runs on a worker thread, where a hang can be timed out.
        self.inline = type(policy).__module__.split(".")[0] == "policies"
        self.request_scope: Callable[[], AbstractContextManager[object]] = nullcontext
        """Entered around each request's validation (the schema registry's look-ups of one
        request are counted in it)."""

    def hints(self, validation_policy: str) -> RecordIntrospectionHints:
        hints_for = getattr(self.policy, "hints_for", None)
        return self._hints.learn(
            validation_policy, hints_for or (lambda _: self.policy.get_hints())
        )

    def required_headers(self, validation_policy: str) -> tuple[str, ...] | None:
        """The header keys that are all the policy checks for this topic, if it says so."""
        if not self._headers_only:  # (isinstance of a runtime protocol is slow per call)
            return None
        policy = cast(RequiredHeadersOnly, self.policy)
        return self._required_headers.learn(validation_policy, policy.required_headers_for)

    def value_check(self, validation_policy: str) -> ValueCheck | None:
        """The check of one value, when the policy says it is all this topic's rules read."""
        if not self._values_only:
            return None
        policy = cast(ValueRulesOnly, self.policy)
        return self._value_checks.learn(validation_policy, policy.value_check_for)

    def validate(self, partitions: Sequence[PartitionData]) -> list[PartitionOutcome]:
        """Check every record of one request's partitions, under one budget, in one go.
        CPU-bound: on a worker thread, or for tests."""
        steps = self._request(partitions, _Run(self.budget, slice_ends=math.inf))
        with self.request_scope():
            while (outcomes := _step(steps)) is None:
                pass
            return outcomes

    async def validate_sliced(self, partitions: Sequence[PartitionData]) -> list[PartitionOutcome]:
        """The same answers as :meth:`validate`, on the event loop: the work goes in slices of
        about _SLICE_SECONDS, and the loop runs its other work between them."""
        run = _Run(self.budget, slice_ends=perf_counter() + _SLICE_SECONDS)
        steps = self._request(partitions, run)
        with self.request_scope():  # a context of this task's own
            while (outcomes := _step(steps)) is None:
                await asyncio.sleep(0)
                run.slice_ends = perf_counter() + _SLICE_SECONDS
            return outcomes

    def validate_partition(
        self, topic: str, partition: int, validation_policy: str, records: bytes | memoryview | None
    ) -> PartitionOutcome:
        """Check every record of one partition's data, as a request of its own."""
        (outcome,) = self.validate([(topic, partition, validation_policy, records)])
        return outcome

    def _request(self, partitions: Sequence[PartitionData], run: _Run) -> Steps:
        outcomes = []
        for topic, partition, validation_policy, records in partitions:
            if records is None:
                outcome = PartitionOutcome(
                    topic=topic, partition=partition, error=None, records=0, bytes=0, batches=0
                )
            else:
                metadata = TopicMetadata(
                    topic=topic, partition=partition, validation_policy=validation_policy
                )
                outcome = yield from self._partition(metadata, records, run)
            outcomes.append(outcome)
        return outcomes

    def _partition(
        self, metadata: TopicMetadata, records: bytes | memoryview, run: _Run
    ) -> Generator[None, None, PartitionOutcome]:
        """One partition's batches: headers first, then the records, against the budget."""
        plan = self._plan(metadata.validation_policy)
        record_errors: list[tuple[int, str | None]] = []
        count = size = rejected = 0  # of the batches read to their end
        read: BatchRecords | None = None
        try:
            batches = read_batches(records)
            if any(batch.is_control for batch in batches):
                return _refused(metadata, _control_batch(metadata), 0, records)
            declared = sum(batch.record_count for batch in batches)
            if declared > run.records_left:
                return _refused(metadata, _over_records(metadata, declared, run), 0, records)
            run.records_left -= declared
            if perf_counter() >= run.slice_ends:
                yield  # CRCs of up to a frame's worth of batches
            for batch in batches:
                read = self._read(batch, plan.reading, run)
                rejected += yield from self._check(
                    metadata, read, plan.value_check, count, record_errors, run
                )
                count += read.records_read
                size += read.size_in_bytes
                if batch.compression is not CompressionType.NONE:
                    run.inflated_left -= read.size_in_bytes
        except OverLimit as exc:
            read_so_far = count + (0 if read is None else read.records_read)
            message = _over_limit(metadata, exc, count, run)
            if exc.limit == "max_decompressed_bytes":
                run.inflated_left = 0  # spent on the way there
            return _refused(metadata, message, read_so_far, records)
        except CorruptBatch as exc:
            tp = f"{metadata.topic}-{metadata.partition}"
            error = ItemError(
                error_code=int(CORRUPT_MESSAGE),
                error_message=f"Record batch for {tp} is corrupt: {exc}",
            )
            return PartitionOutcome(
                topic=metadata.topic,
                partition=metadata.partition,
                records=count + (0 if read is None else read.records_read),
                bytes=len(records),
                batches=0,
                error=error,
                fail_closed=True,
            )
        return _outcome(metadata, record_errors, rejected, count, size, len(batches))

    def _read(self, batch: BatchView, reading: RecordReading, run: _Run) -> BatchRecords:
        """The batch's records, within what is left of the budget."""
        max_record_bytes = run.budget.max_record_bytes
        if batch.compression is CompressionType.NONE:
            return read_records(batch, reading, max_record_bytes=max_record_bytes)
        # With nothing left, still let a batch of no records through: it decompresses to 0.
        return read_records(
            batch,
            reading,
            max_decompressed_bytes=max(run.inflated_left, 1),
            max_record_bytes=max_record_bytes,
        )

    def _check(
        self,
        metadata: TopicMetadata,
        records: BatchRecords,
        value_check: ValueCheck | None,
        base: int,
        record_errors: list[tuple[int, str | None]],
        run: _Run,
    ) -> Generator[None, None, int]:
        """The validation loop: each record the reader hands over goes to the plan's check; a
        rejection is noted at its batch_index in the partition, base + its index in the
        batch, while the request may list more. Yields when the slice is spent: between the
        reader's windows, and every _CLOCK_EVERY records within one. Returns how many records
        were rejected.

        :raises CorruptBatch: from the reader, for a batch it cannot read.
        """
        validate = self.policy.validate
        rejected = 0
        for window in records.windows():
            for start in range(0, len(window), _CLOCK_EVERY):
                for index, key, value, headers, _, _, _ in window[start : start + _CLOCK_EVERY]:
                    try:
                        if value_check is None:
                            validate(metadata, RecordProxy(headers=headers, key=key, value=value))
                        else:
                            value_check(value)
                    except InvalidRecord as exc:
                        rejected += _note(record_errors, base + index, exc.message, run)
                    except Exception as exc:  # noqa: BLE001 - a policy that raises denies
                        rejected += _note(record_errors, base + index, self._failed(exc), run)
                if perf_counter() >= run.slice_ends:
                    yield
            if not window and perf_counter() >= run.slice_ends:
                yield
        return rejected

    def _plan(self, validation_policy: str) -> _Plan:
        return self._plans.learn(validation_policy, self._make_plan)

    def _make_plan(self, validation_policy: str) -> _Plan:
        hints = self.hints(validation_policy)
        required_headers = self.required_headers(validation_policy)
        if required_headers is not None and hints.access_headers:
            reading = RecordReading(
                headers=True,
                key_bytes=hints.access_key_bytes,
                value_bytes=hints.access_value_bytes,
                lacking=required_headers,
            )
            return _Plan(reading=reading, value_check=None)
        value_check = self.value_check(validation_policy)
        if value_check is not None:
            return _Plan(reading=RecordReading(value_bytes=-1), value_check=value_check)
        reading = RecordReading(
            headers=hints.access_headers,
            key_bytes=hints.access_key_bytes,
            value_bytes=hints.access_value_bytes,
        )
        return _Plan(reading=reading, value_check=None)

    def _failed(self, exc: Exception) -> str:
        return f"{self.name} failed: {type(exc).__name__}: {exc}"

    def close(self) -> None:
        self.policy.close()


def _step(steps: Steps) -> list[PartitionOutcome] | None:
    """Run one slice of a request's validation: its outcomes once it is done, else None."""
    try:
        next(steps)
    except StopIteration as done:
        outcomes: list[PartitionOutcome] = done.value
        return outcomes
    return None


_V = TypeVar("_V")


class _Kept(Generic[_V]):
    """What was learnt of each ``record.validation.policy`` value, for the
    :data:`_CACHED_VALUES` values last learnt (the oldest is forgotten first; one in use is
    learnt again when next needed)."""

    def __init__(self) -> None:
        self._items: dict[str, _V] = {}

    def __len__(self) -> int:
        return len(self._items)

    def learn(self, value: str, learn: Callable[[str], _V]) -> _V:
        """What was learnt of ``value``, learnt now if it is not kept (the oldest kept value
        forgotten past the bound)."""
        if value in self._items:
            return self._items[value]
        learnt = self._items[value] = learn(value)
        while len(self._items) > _CACHED_VALUES:
            del self._items[next(iter(self._items))]
        return learnt


def load_record_validator(
    section: Mapping[str, object],
    flat: Mapping[str, str],
    source: str,
    limits: LimitsConfig | None = None,
) -> RecordValidator:
    """Build the validator from the ``policies:`` section, with ``limits:``'s budget.

    :raises ConfigError: naming the key when the class cannot be loaded or configured.
    """
    _check_own_keys(section, source)
    class_name = str(section.get(_CLASS_KEY) or _DEFAULT_CLASS)
    class_path = section.get(_PATH_KEY)
    mode = section.get(_MODE_KEY, "enforce")
    if mode not in ("enforce", "dry-run"):
        raise ConfigError(
            f"{source}: policies.{_MODE_KEY}: expected enforce or dry-run, got {mode!r}"
        )
    if class_path is not None:
        directory = os.path.abspath(str(class_path))
        if not os.path.isdir(directory):
            raise ConfigError(f"{source}: policies.{_PATH_KEY}: {directory} is not a directory")
        if directory not in sys.path:
            sys.path.insert(0, directory)
    module_name, _, attr = class_name.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
        if not (isinstance(cls, type) and issubclass(cls, RecordValidationPolicy)):
            raise TypeError(f"{class_name} is not a policies.api.RecordValidationPolicy")
        policy = cls()
        policy.configure(flat)
    except Exception as exc:  # noqa: BLE001 - whatever a plug-in raises stops start-up, named
        raise ConfigError(
            f"{source}: policies.{_CLASS_KEY}: {class_name}: {type(exc).__name__}: {exc}"
        ) from None
    registry = _schema_registry(section, policy, source, limits)
    budget = ValidationBudget() if limits is None else ValidationBudget.of(limits)
    validator = RecordValidator(policy, dry_run=mode == "dry-run", budget=budget)
    if registry is not None:
        validator.request_scope = registry.request
    if section.get(_REGISTRY_KEY) is not None:
        validator.inline = False  # registry lookups block on HTTP: keep them off the loop
    return validator


_OWN_PREFIXES: Final = (
    "record.validation.policy.",
    "record.validation.schema.registry.",
    "record.validation.json.",
    "record.validation.max.",
)
"""Where the gateway reads its own record validation settings in ``policies:``."""
_OWN_KEYS: Final = frozenset(
    {
        _CLASS_KEY,
        _PATH_KEY,
        _MODE_KEY,
        _REGISTRY_KEY,
        _REGISTRY_TIMEOUT_KEY,
        f"{_REGISTRY_AUTH_KEY}_file",
        f"{_REGISTRY_AUTH_KEY}_env",
        *(f"{_REGISTRY_SSL_PREFIX}{key}" for key in _REGISTRY_SSL_KEYS),
        JSON_SCHEMA_DIR,
    }
)


def _check_own_keys(section: Mapping[str, object], source: str) -> None:
    """Refuse a key under the gateway's own record validation prefixes that it does not
    read: a misspelling (``record.validation.policy.clas.name`` ran the built-in rules in
    the plug-in's place, ``...policy.mod: dry-run`` enforced), a key of a newer version of the
    gateway (its setting would be half applied), or one of ``limits:`` given here (the
    record validation budget stayed at its default). Other keys stay the plug-ins' own.

    :raises ConfigError: naming the key.
    """
    for key in section:
        if not isinstance(key, str) or key in _OWN_KEYS:
            continue
        if key.startswith("record.validation.max."):
            raise ConfigError(
                f"{source}: policies.{key}: a setting of limits:, not policies: (under "
                "policies: it would only reach the plug-ins, and the budget stay its default)"
            )
        if key == _REGISTRY_AUTH_KEY:
            raise ConfigError(
                f"{source}: policies.{key}: give the credentials in {key}_file or {key}_env, "
                "never in the config itself"
            )
        prefix = next((p for p in _OWN_PREFIXES if key.startswith(p)), None)
        if prefix is not None:
            known = sorted(k for k in _OWN_KEYS if k.startswith(prefix))
            raise ConfigError(
                f"{source}: policies.{key}: unknown key (a misspelling, or a setting of "
                f"another version of the gateway); the record validation keys are: "
                f"{', '.join(known)}"
            )


def _registry_url(url: object, source: str) -> str:
    """:raises ConfigError: for anything but an http(s) URL without credentials."""
    where = f"{source}: policies.{_REGISTRY_KEY}"
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ConfigError(f"{where}: expected an http(s) URL, got {url!r}")
    try:
        has_credentials = urllib.parse.urlsplit(url).username is not None
    except ValueError as exc:
        raise ConfigError(f"{where}: not a URL: {exc}") from None
    if has_credentials:
        # Not echoed: the URL holds a password.
        raise ConfigError(
            f"{where}: the URL holds a user name (and password?); give the credentials in "
            f"policies.{_REGISTRY_AUTH_KEY}_file or _env instead, so that they never show in "
            "a log line or the policy version's input"
        )
    return url


def _registry_connection(section: Mapping[str, object], url: str, source: str) -> dict[str, Any]:
    """The registry client's timeout, credentials and TLS settings from ``policies:``.

    :raises ConfigError: naming the key.
    """
    auth = read_secret(section, _REGISTRY_AUTH_KEY, "policies", source)
    if auth is not None and ":" not in auth.reveal():
        raise ConfigError(
            f"{source}: policies.{_REGISTRY_AUTH_KEY}: the value read from {auth.source} is "
            "not user:password"
        )
    https = url.startswith("https://")
    if auth is not None and not https:
        raise ConfigError(
            f"{source}: policies.{_REGISTRY_AUTH_KEY}: the registry URL is http://, which "
            "would send the password in the clear; use https://"
        )
    context = _registry_tls(section, https=https, source=source)
    return {
        "timeout_s": _registry_timeout_s(section, source),
        "basic_auth": auth,
        "ssl_context": context,
    }


def _registry_timeout_s(section: Mapping[str, object], source: str) -> float:
    """:raises ConfigError:"""
    timeout_ms = section.get(_REGISTRY_TIMEOUT_KEY, _DEFAULT_REGISTRY_TIMEOUT_MS)
    if (
        isinstance(timeout_ms, bool)
        or not isinstance(timeout_ms, int)
        or not 1 <= timeout_ms <= 60_000
    ):
        raise ConfigError(
            f"{source}: policies.{_REGISTRY_TIMEOUT_KEY}: expected milliseconds from 1 to "
            f"60000, got {timeout_ms!r}"
        )
    return timeout_ms / 1000


def _registry_tls(
    section: Mapping[str, object], *, https: bool, source: str
) -> ssl.SSLContext | None:
    """The TLS context for an https registry: its CA bundle (default: the system's trust
    store) and the gateway's own certificate, if given.

    :raises ConfigError: naming the key.
    """
    files = {key: section.get(f"{_REGISTRY_SSL_PREFIX}{key}") for key in _REGISTRY_SSL_KEYS}
    for key, path in files.items():
        name = f"policies.{_REGISTRY_SSL_PREFIX}{key}"
        if path is not None and not https:
            raise ConfigError(f"{source}: {name}: the registry URL is not https")
        if path is not None and not (isinstance(path, str) and os.path.isfile(path)):
            raise ConfigError(f"{source}: {name}: {path!r} is not a file")
    if not https:
        return None
    ca_file, cert_file, key_file = (cast(str | None, files[k]) for k in _REGISTRY_SSL_KEYS)
    if (cert_file is None) != (key_file is None):
        raise ConfigError(
            f"{source}: policies.{_REGISTRY_SSL_PREFIX}certificate.location and "
            "key.location go together"
        )
    try:
        context = ssl.create_default_context(cafile=ca_file)
        if cert_file is not None:
            context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"{source}: policies.{_REGISTRY_SSL_PREFIX}*: cannot use the files: {exc}"
        ) from None
    return context


def _schema_registry(
    section: Mapping[str, object],
    policy: RecordValidationPolicy,
    source: str,
    limits: LimitsConfig | None,
) -> SchemaRegistryClient | None:
    """The registry client given to a policy that takes one, with ``limits:``'s bounds on
    its look-ups.

    :raises ConfigError: when the URL is not an http(s) one.
    """
    registry_url = section.get(_REGISTRY_KEY)
    set_lookup = getattr(policy, "set_schema_lookup", None)
    set_subject_lookup = getattr(policy, "set_schema_subject_lookup", None)
    if registry_url is None or (set_lookup is None and set_subject_lookup is None):
        return None
    limits = limits or LimitsConfig()
    registry = SchemaRegistryClient(
        _registry_url(registry_url, source),
        lookups_per_request=limits.schema_registry_lookups_per_request,
        lookups_per_sec=limits.schema_registry_lookups_per_sec,
        **_registry_connection(section, str(registry_url), source),
    )
    if set_lookup is not None:
        set_lookup(registry.exists)
    if set_subject_lookup is not None:
        set_subject_lookup(registry.registered_under)
    return registry
