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
validation there outlasts ``policy.timeout.ms`` rejects. Where the policy says a topic's
rules are header keys alone (``required_headers_for``, see
:class:`policies.records.RequiredHeadersOnly`), the gateway looks for the keys in the
batches itself and calls ``validate`` only for the records that lack one: same answers,
without a RecordProxy per record. Likewise where they are value rules alone
(``value_check_for``, :class:`policies.records.ValueRulesOnly`): the gateway reads each
value whole and hands it to the policy's check.
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
from protocol.records import (
    BatchView,
    CorruptBatch,
    check_headers,
    read_batches,
    read_record_fields,
    read_values,
)
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


class RecordValidator:
    """The configured RecordValidationPolicy and what it needs per topic: its hints, and
    whether header keys are all it checks (then the gateway looks for them itself)."""

    def __init__(self, policy: RecordValidationPolicy, *, dry_run: bool) -> None:
        self.policy = policy
        self.name = type(policy).__name__
        self.dry_run = dry_run
        self._hints: dict[str, RecordIntrospectionHints] = {}
        self._required_headers: dict[str, tuple[str, ...] | None] = {}
        self._headers_only = isinstance(policy, RequiredHeadersOnly)
        self._values_only = isinstance(policy, ValueRulesOnly)
        self._value_checks: dict[str, ValueCheck | None] = {}
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
        hints = self.hints(validation_policy)
        required_headers = self.required_headers(validation_policy)
        metadata = TopicMetadata(
            topic=topic, partition=partition, validation_policy=validation_policy
        )
        record_errors: list[tuple[int, str | None]] = []
        count = size = 0
        try:
            batches = read_batches(records)
            if required_headers is not None and hints.access_headers:
                checked = self._check_headers(metadata, batches, hints, required_headers)
                if checked is not None:
                    record_errors, size = checked
                    count = sum(batch.record_count for batch in batches)
                    return _outcome(metadata, record_errors, count, size, len(batches))
            value_check = self.value_check(validation_policy)
            if value_check is not None:
                checked = self._check_values(batches, value_check)
                if checked is not None:
                    record_errors, size = checked
                    count = sum(batch.record_count for batch in batches)
                    return _outcome(metadata, record_errors, count, size, len(batches))
            validate = self.policy.validate
            base = 0
            for batch in batches:
                for index, key, value, headers, _, _, size_in_bytes in read_record_fields(
                    batch,
                    headers=hints.access_headers,
                    key_bytes=hints.access_key_bytes,
                    value_bytes=hints.access_value_bytes,
                ):
                    count += 1
                    size += size_in_bytes
                    try:
                        validate(metadata, RecordProxy(headers=headers, key=key, value=value))
                    except InvalidRecord as exc:
                        record_errors.append((base + index, exc.message))
                    except Exception as exc:  # fail closed, naming the policy
                        record_errors.append((base + index, self._failed(exc)))
                base += batch.record_count
        except CorruptBatch as exc:
            return PartitionOutcome(
                topic=topic,
                partition=partition,
                records=count,
                bytes=len(records),
                batches=0,
                error=ItemError(
                    error_code=int(CORRUPT_MESSAGE),
                    error_message=f"Record batch for {topic}-{partition} is corrupt: {exc}",
                ),
            )
        return _outcome(metadata, record_errors, count, size, len(batches))

    def _check_headers(
        self,
        metadata: TopicMetadata,
        batches: Sequence[BatchView],
        hints: RecordIntrospectionHints,
        keys: tuple[str, ...],
    ) -> tuple[list[tuple[int, str | None]], int] | None:
        """(record_errors, bytes) for a topic whose policy checks header keys alone: the keys
        are looked for here, and the policy sees only the records that lack one. None for a
        corrupt batch: the record-by-record loop then says what is wrong, and after how many
        records."""
        record_errors: list[tuple[int, str | None]] = []
        size = base = 0
        try:
            for batch in batches:
                checked = check_headers(batch, keys)
                size += checked.size_in_bytes
                if checked.missing:
                    lacking = frozenset(checked.missing)
                    for index, key, value, headers, *_ in read_record_fields(
                        batch,
                        headers=True,
                        key_bytes=hints.access_key_bytes,
                        value_bytes=hints.access_value_bytes,
                    ):
                        if index not in lacking:
                            continue
                        try:
                            self.policy.validate(
                                metadata, RecordProxy(headers=headers, key=key, value=value)
                            )
                        except InvalidRecord as exc:
                            record_errors.append((base + index, exc.message))
                        except Exception as exc:  # fail closed, naming the policy
                            record_errors.append((base + index, self._failed(exc)))
                base += batch.record_count
        except CorruptBatch:
            return None
        return record_errors, size

    def _check_values(
        self, batches: Sequence[BatchView], check: ValueCheck
    ) -> tuple[list[tuple[int, str | None]], int] | None:
        """(record_errors, bytes) for a topic whose policy reads values alone. None for a
        corrupt batch: the record-by-record loop then says what is wrong, and after how many
        records."""
        record_errors: list[tuple[int, str | None]] = []
        size = base = 0
        try:
            for batch in batches:
                read = read_values(batch)
                size += read.size_in_bytes
                for index, value in enumerate(read.values, base):
                    try:
                        check(value)
                    except InvalidRecord as exc:
                        record_errors.append((index, exc.message))
                    except Exception as exc:  # fail closed, naming the policy
                        record_errors.append((index, self._failed(exc)))
                base += batch.record_count
        except CorruptBatch:
            return None
        return record_errors, size

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
    except Exception as exc:
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
