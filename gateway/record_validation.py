"""Record validation on Produce (seed 002): which topics are validated, by what, and how.

A topic is validated when its ``record.validation.policy`` config is set; the gateway keeps
that config in its state store (namespace :data:`STATE_NAMESPACE`, key = topic), since a
Kafka broker would refuse a config it does not know. The policy class comes from
``record.validation.policy.class.name`` (default: the built-in rules of
:mod:`policies.records`), configured once with the ``policies:`` section.

Validation reads no more than the policy's hints ask for (per topic when the policy offers
``hints_for``) and fails closed: a policy that raises anything but InvalidRecord rejects.
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
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from policies.api import (
    InvalidRecord,
    RecordIntrospectionHints,
    RecordProxy,
    RecordValidationPolicy,
    TopicMetadata,
)
from policies.records import RequiredHeadersOnly, ValueCheck, ValueRulesOnly
from protocol.errors import CORRUPT_MESSAGE, INVALID_RECORD
from protocol.records import BatchRecords, CorruptBatch, RecordReading, read_batches, read_records
from protocol.results import ItemError

from .config import ConfigError
from .schema_registry import SchemaRegistryClient

VALIDATION_POLICY_KEY: Final = "record.validation.policy"
STATE_NAMESPACE: Final = "topic.record.validation.policy"
_CLASS_KEY: Final = "record.validation.policy.class.name"
_PATH_KEY: Final = "record.validation.policy.class.path"
_MODE_KEY: Final = "record.validation.policy.mode"
_REGISTRY_KEY: Final = "record.validation.schema.registry.url"
_DEFAULT_CLASS: Final = "policies.records.BuiltinRecordValidationPolicy"
_SHOWN_ERRORS: Final = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionOutcome:
    topic: str
    partition: int
    error: ItemError | None
    records: int
    bytes: int
    batches: int


def rejection_message(record_errors: Sequence[tuple[int, str | None]]) -> str:
    """The partition's error_message, in the words Kafka uses for rejected records."""
    shown = ", ".join(
        f"(batchIndex={index}, message={message})"
        for index, message in record_errors[:_SHOWN_ERRORS]
    )
    return (
        f"One or more records have been rejected due to {len(record_errors)} record errors in "
        f"total, and only showing the first three errors at most: [{shown}]"
    )


def _outcome(
    metadata: TopicMetadata,
    record_errors: list[tuple[int, str | None]],
    records: int,
    size: int,
    batches: int,
) -> PartitionOutcome:
    error = None
    if record_errors:
        error = ItemError(
            error_code=int(INVALID_RECORD),
            error_message=rejection_message(record_errors),
            record_errors=tuple(record_errors),
        )
    return PartitionOutcome(
        topic=metadata.topic,
        partition=metadata.partition,
        error=error,
        records=records,
        bytes=size,
        batches=batches,
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

    def __init__(self, policy: RecordValidationPolicy, *, dry_run: bool) -> None:
        self.policy = policy
        self.name = type(policy).__name__
        self.dry_run = dry_run
        self._hints: dict[str, RecordIntrospectionHints] = {}
        self._required_headers: dict[str, tuple[str, ...] | None] = {}
        self._headers_only = isinstance(policy, RequiredHeadersOnly)
        self._values_only = isinstance(policy, ValueRulesOnly)
        self._value_checks: dict[str, ValueCheck | None] = {}
        self._plans: dict[str, _Plan] = {}
        # The built-in policies do bounded work per record and never block: they run on the
        # event loop. A plug-in runs on a worker thread, where a hang can be timed out.
        self.inline = type(policy).__module__.split(".")[0] == "policies"

    def hints(self, validation_policy: str) -> RecordIntrospectionHints:
        hints = self._hints.get(validation_policy)
        if hints is None:
            hints_for = getattr(self.policy, "hints_for", None)
            hints = hints_for(validation_policy) if hints_for else self.policy.get_hints()
            self._hints[validation_policy] = hints
        return hints

    def required_headers(self, validation_policy: str) -> tuple[str, ...] | None:
        """The header keys that are all the policy checks for this topic, if it says so."""
        if not self._headers_only:
            return None
        if validation_policy not in self._required_headers:
            assert isinstance(self.policy, RequiredHeadersOnly)
            self._required_headers[validation_policy] = self.policy.required_headers_for(
                validation_policy
            )
        return self._required_headers[validation_policy]

    def value_check(self, validation_policy: str) -> ValueCheck | None:
        """The check of one value, when the policy says it is all this topic's rules read."""
        if not self._values_only:
            return None
        if validation_policy not in self._value_checks:
            assert isinstance(self.policy, ValueRulesOnly)
            self._value_checks[validation_policy] = self.policy.value_check_for(validation_policy)
        return self._value_checks[validation_policy]

    def validate_partition(
        self, topic: str, partition: int, validation_policy: str, records: bytes | memoryview | None
    ) -> PartitionOutcome:
        """Check every record of one partition's data. CPU-bound; call it off the loop."""
        if records is None:
            return PartitionOutcome(
                topic=topic, partition=partition, error=None, records=0, bytes=0, batches=0
            )
        plan = self._plan(validation_policy)
        metadata = TopicMetadata(
            topic=topic, partition=partition, validation_policy=validation_policy
        )
        record_errors: list[tuple[int, str | None]] = []
        count = size = 0  # of the batches read to their end
        read: BatchRecords | None = None
        try:
            batches = read_batches(records)
            for batch in batches:
                read = read_records(batch, plan.reading)
                self._check(metadata, read, plan.value_check, count, record_errors)
                count += read.records_read
                size += read.size_in_bytes
        except CorruptBatch as exc:
            return PartitionOutcome(
                topic=topic,
                partition=partition,
                records=count + (0 if read is None else read.records_read),
                bytes=len(records),
                batches=0,
                error=ItemError(
                    error_code=int(CORRUPT_MESSAGE),
                    error_message=f"Record batch for {topic}-{partition} is corrupt: {exc}",
                ),
            )
        return _outcome(metadata, record_errors, count, size, len(batches))

    def _check(
        self,
        metadata: TopicMetadata,
        records: BatchRecords,
        value_check: ValueCheck | None,
        base: int,
        record_errors: list[tuple[int, str | None]],
    ) -> None:
        """The validation loop: each record the reader hands over goes to the plan's check; a
        rejection is noted at its batch_index in the partition, base + its index in the
        batch.

        :raises CorruptBatch: from the reader, for a batch it cannot read.
        """
        validate = self.policy.validate
        for index, key, value, headers, _, _, _ in records:
            try:
                if value_check is None:
                    validate(metadata, RecordProxy(headers=headers, key=key, value=value))
                else:
                    value_check(value)
            except InvalidRecord as exc:
                record_errors.append((base + index, exc.message))
            except Exception as exc:  # noqa: BLE001 - a policy that raises denies (fail closed)
                record_errors.append((base + index, self._failed(exc)))

    def _plan(self, validation_policy: str) -> _Plan:
        plan = self._plans.get(validation_policy)
        if plan is None:
            plan = self._plans[validation_policy] = self._make_plan(validation_policy)
        return plan

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


def load_record_validator(
    section: Mapping[str, object], flat: Mapping[str, str], source: str
) -> RecordValidator:
    """Build the validator from the ``policies:`` section.

    :raises ConfigError: naming the key when the class cannot be loaded or configured.
    """
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
    registry_url = section.get(_REGISTRY_KEY)
    set_lookup = getattr(policy, "set_schema_lookup", None)
    if registry_url is not None and set_lookup is not None:
        if not isinstance(registry_url, str) or not registry_url.startswith(
            ("http://", "https://")
        ):
            raise ConfigError(
                f"{source}: policies.{_REGISTRY_KEY}: expected an http(s) URL, got {registry_url!r}"
            )
        set_lookup(SchemaRegistryClient(registry_url).exists)
    validator = RecordValidator(policy, dry_run=mode == "dry-run")
    if registry_url is not None:
        validator.inline = False  # registry lookups block on HTTP: keep them off the loop
    return validator
