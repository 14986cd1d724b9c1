"""The ``record.validation.policy`` values the gateway agrees to store, checked when a client
sets one (CreateTopics, AlterConfigs, IncrementalAlterConfigs) rather than when every produce
to the topic fails on it.

A value the record validator could not apply (an unknown rule, a bad argument such as
``max-bytes:0``, a ``json-schema`` name with no schema) is refused with INVALID_CONFIG (40)
and a message naming the problem, in the words Kafka uses for a topic config value it cannot
parse (``ConfigException``: "Invalid value <value> for configuration <key>: <why>"). The
check is the record validator's own: :func:`policies.records.parse_record_validation_policy`
and the schemas the built-in policy has loaded. A plug-in
(``record.validation.policy.class.name``) reads values its own way, so for it only the size
is checked.

Size: at most :data:`MAX_VALUE_BYTES` (4 KiB of UTF-8). A value names a few rules (a dozen
header keys and a schema name are a few hundred bytes), and the cap keeps every value
writable: the Kafka state store writes at most one record batch of 1 MiB at a time, and a
CreateTopics stores the values of all its topics in one write, so some 250 topics with values
at the cap still fit one request.
"""

from __future__ import annotations

from typing import Final

from policies.api import RecordValidationPolicy
from policies.records import BuiltinRecordValidationPolicy, parse_record_validation_policy
from protocol.errors import INVALID_CONFIG
from protocol.results import ItemError

from ..record_validation import VALIDATION_POLICY_KEY

MAX_VALUE_BYTES: Final = 4096


def value_problem(value: str, policy: RecordValidationPolicy) -> str | None:
    """Why ``value`` cannot be stored as a topic's record.validation.policy, in Kafka's words
    for an invalid config value; None when it can."""
    size = len(value.encode())
    if size > MAX_VALUE_BYTES:
        return (
            f"Invalid value of {size} bytes for configuration {VALIDATION_POLICY_KEY}: the "
            f"gateway stores at most {MAX_VALUE_BYTES} bytes"
        )
    if not isinstance(policy, BuiltinRecordValidationPolicy):
        return None
    try:
        rules = parse_record_validation_policy(value)
    except ValueError as exc:
        return f"Invalid value {value} for configuration {VALIDATION_POLICY_KEY}: {exc}"
    schema = rules.value_json_schema
    if schema is not None and schema not in policy.schema_names:
        known = ", ".join(sorted(policy.schema_names)) or "none"
        return (
            f"Invalid value {value} for configuration {VALIDATION_POLICY_KEY}: json-schema:"
            f"{schema} names a schema the gateway has not loaded (schemas: {known})"
        )
    return None


def invalid_value(value: str, policy: RecordValidationPolicy) -> ItemError | None:
    """INVALID_CONFIG naming the problem, for a value that cannot be stored; else None."""
    problem = value_problem(value, policy)
    if problem is None:
        return None
    return ItemError(error_code=int(INVALID_CONFIG), error_message=problem)
