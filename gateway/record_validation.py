"""Record validation on Produce (seed 002): which topics are validated, by what, and how.

A topic is validated when its ``record.validation.policy`` config is set; the gateway keeps
that config in its state store (namespace :data:`STATE_NAMESPACE`, key = topic), since a
Kafka broker would refuse a config it does not know. The policy class comes from
``record.validation.policy.class.name`` (default: the built-in rules of
:mod:`policies.records`), configured once with the ``policies:`` section.

Validation reads no more than the policy's hints ask for (per topic when the policy offers
``hints_for``), runs off the event loop, and fails closed: a policy that raises anything but
InvalidRecord, or a request whose validation outlasts ``policy.timeout.ms``, rejects.
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
from protocol.errors import CORRUPT_MESSAGE, INVALID_RECORD
from protocol.produce import PartitionError
from protocol.records import CorruptBatch, read_batches, read_records

from .config import ConfigError

VALIDATION_POLICY_KEY: Final = "record.validation.policy"
STATE_NAMESPACE: Final = "topic.record.validation.policy"
_CLASS_KEY: Final = "record.validation.policy.class.name"
_PATH_KEY: Final = "record.validation.policy.class.path"
_MODE_KEY: Final = "record.validation.policy.mode"
_DEFAULT_CLASS: Final = "policies.records.BuiltinRecordValidationPolicy"
_SHOWN_ERRORS: Final = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionOutcome:
    topic: str
    partition: int
    error: PartitionError | None
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


class RecordValidator:
    """The configured RecordValidationPolicy and the per-topic hints it needs."""

    def __init__(self, policy: RecordValidationPolicy, *, dry_run: bool) -> None:
        self.policy = policy
        self.name = type(policy).__name__
        self.dry_run = dry_run
        self._hints: dict[str, RecordIntrospectionHints] = {}

    def hints(self, validation_policy: str) -> RecordIntrospectionHints:
        hints = self._hints.get(validation_policy)
        if hints is None:
            hints_for = getattr(self.policy, "hints_for", None)
            hints = hints_for(validation_policy) if hints_for else self.policy.get_hints()
            self._hints[validation_policy] = hints
        return hints

    def validate_partition(
        self, topic: str, partition: int, validation_policy: str, records: bytes | memoryview | None
    ) -> PartitionOutcome:
        """Check every record of one partition's data. CPU-bound; call it off the loop."""
        if records is None:
            return PartitionOutcome(
                topic=topic, partition=partition, error=None, records=0, bytes=0, batches=0
            )
        hints = self.hints(validation_policy)
        metadata = TopicMetadata(
            topic=topic, partition=partition, validation_policy=validation_policy
        )
        record_errors: list[tuple[int, str | None]] = []
        count = size = 0
        try:
            batches = read_batches(records)
            base = 0
            for batch in batches:
                for record in read_records(
                    batch,
                    headers=hints.access_headers,
                    key_bytes=hints.access_key_bytes,
                    value_bytes=hints.access_value_bytes,
                ):
                    count += 1
                    size += record.size_in_bytes
                    try:
                        self.policy.validate(
                            metadata,
                            RecordProxy(headers=record.headers, key=record.key, value=record.value),
                        )
                    except InvalidRecord as exc:
                        record_errors.append((base + record.index, exc.message))
                    except Exception as exc:  # fail closed, naming the policy
                        record_errors.append(
                            (
                                base + record.index,
                                f"{self.name} failed: {type(exc).__name__}: {exc}",
                            )
                        )
                base += batch.record_count
        except CorruptBatch as exc:
            return PartitionOutcome(
                topic=topic,
                partition=partition,
                records=count,
                bytes=len(records),
                batches=0,
                error=PartitionError(
                    error_code=int(CORRUPT_MESSAGE),
                    error_message=f"Record batch for {topic}-{partition} is corrupt: {exc}",
                ),
            )
        error = None
        if record_errors:
            error = PartitionError(
                error_code=int(INVALID_RECORD),
                error_message=rejection_message(record_errors),
                record_errors=tuple(record_errors),
            )
        return PartitionOutcome(
            topic=topic,
            partition=partition,
            error=error,
            records=count,
            bytes=size,
            batches=len(batches),
        )

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
    return RecordValidator(policy, dry_run=mode == "dry-run")
