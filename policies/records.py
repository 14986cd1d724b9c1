"""The built-in record validation policy and the ``record.validation.policy`` value it reads.

:class:`BuiltinRecordValidationPolicy` is what the gateway runs when
``record.validation.policy.class.name`` is not set. As in the record validation proposal, a
topic is checked only when its topic config ``record.validation.policy`` is set; its value
says which rules apply to that topic's records.

The value
=========

One or more rules, separated by ``;`` (or ``,``); spaces around a rule are ignored::

    record.validation.policy=trace-id
    record.validation.policy=header:trace-id;key-required;json-schema:orders-v1;max-bytes:65536
    record.validation.policy=schema-id:registry;tombstones-allowed

=======================  ==================================================================
rule                     a record passes when
=======================  ==================================================================
``header:<key>``         it has a header with this key (exact, case-sensitive; any value)
``<key>``                the same: a bare word that is no rule keyword and has no ``:``, so
                         the proposal's sample value ``trace-id`` keeps its meaning
``key-required``         its key is neither null nor empty
``json``                 its value is one JSON document (RFC 8259) in UTF-8 whose objects
                         give each key once (I-JSON, RFC 7493: readers take a key given
                         twice differently); ``NaN`` and ``Infinity`` are not JSON
``json-schema:<name>``   its value is JSON (as for ``json``) that the JSON Schema
                         ``<name>.json`` accepts; schemas are read once, at start-up, from the
                         directory in the policy config ``record.validation.json.schema.dir``
                         (see "JSON Schema" below)
``schema-id``            its value starts with a Confluent-style schema id: magic byte 0,
                         then the id as a 4-byte big-endian int. With ``json`` or
                         ``json-schema``, the JSON is what follows those 5 bytes (the JSON
                         Schema serializer's format)
``schema-id:registry``   as ``schema-id``, and the schema registry knows the id (asked through
                         the lookup the gateway gives :meth:`~BuiltinRecordValidationPolicy.
                         set_schema_lookup`; without one every record is rejected)
``schema-id:subject:S``  as ``schema-id``, and the registry lists the id under subject
                         ``S`` (e.g. ``orders-value``, the subject Confluent's serializers
                         use for topic ``orders``): a record serialized with another topic's
                         schema, which ``schema-id:registry`` lets through, is rejected. Asked
                         through :meth:`~BuiltinRecordValidationPolicy.
                         set_schema_subject_lookup`; without one every record is rejected
``max-bytes:<n>``        its key, value, header keys (UTF-8) and header values add up to at
                         most ``n`` bytes (1 to 2147483647)
``tombstones-allowed``   not a check: lets a null value (a tombstone) pass the value rules
                         (``json``, ``json-schema``, ``schema-id``), which otherwise reject it
=======================  ==================================================================

Every rule given must pass. A rule may appear once (``header:`` once per key), ``schema-id``,
``schema-id:registry`` and ``schema-id:subject:`` count as one rule, and ``json`` may go with
``json-schema`` (which implies it). Header keys, schema names and subjects cannot contain ``;``
or ``,``; for a header key with ``:`` write ``header:<key>``. To require a header key exactly
as the whole value reads, use :class:`policies.builtin.RequireHeaderValidationPolicy`.

A value that does not parse (an unknown rule such as ``jsn-schema:x``, a rule given twice,
``max-bytes:0``, a schema name with no file) rejects every record of the topic with a
message that says the topic's ``record.validation.policy`` is invalid.
:func:`parse_record_validation_policy` is the parser, for checking a value before it is set.

What the gateway calls
======================

* ``configure(configs)`` once; it reads and checks every ``*.json`` in the schema directory
  (compiling a validator per schema), and raises ``ValueError`` naming the file or key.
* ``set_schema_lookup(lookup)`` after ``configure``, when a schema registry is configured:
  ``lookup(schema_id) -> bool`` answers from the gateway's client and cache. The policy does
  no I/O itself. The lookup runs on the threads ``validate`` runs on; whatever it raises
  propagates, and the gateway denies (see :mod:`policies.api`): so does a lookup the gateway
  may not make (past its bounds on registry requests per Produce and per second).
* ``set_schema_subject_lookup(lookup)`` likewise (:class:`UsesSchemaSubjectLookup`):
  ``lookup(schema_id, subject) -> bool``, for ``schema-id:subject:<subject>``.
* ``hints_for(validation_policy)`` per topic (:class:`PerTopicHints`): only headers for header
  rules, the first byte of the key for ``key-required``, the whole value for the JSON rules,
  5 value bytes for ``schema-id`` alone, everything for ``max-bytes``. A policy that does not
  offer ``hints_for`` is asked ``get_hints()``, which for this one is "everything", since
  which topics carry which rules is not known in advance.
* ``required_headers_for(validation_policy)`` per topic (:class:`RequiredHeadersOnly`): the
  header keys, when header rules are all the value has. The gateway then checks those keys
  itself, and calls ``validate`` only for the records that lack one (for the message).
* ``value_check_for(validation_policy)`` per topic (:class:`ValueRulesOnly`): a check of one
  record value, when the value rules (``json``, ``json-schema``, ``schema-id``, with
  ``tombstones-allowed``) are all the value has. The gateway then reads the values alone and
  hands each to it, instead of a RecordProxy per record to ``validate``.
* ``validate(topic, record)`` per record; a value is parsed and compiled once and cached.

JSON Schema
===========

Each schema is checked (``check_schema``) and compiled twice: by ``jsonschema-rs``, which
decides whether a value matches (in Rust: some hundred times faster than the ``jsonschema``
package on a 1 KiB document), and by ``jsonschema``, which words the rejection (its
``best_match``: the error a person would look at first). As the JSON Schema specification
says, ``pattern`` is an ECMA-262 regular expression: ``\\d`` is ``[0-9]``, not any Unicode
digit as in Python's ``re``. Both libraries match patterns (``pattern``, ``patternProperties``)
with jsonschema-rs's engine, in time linear in the string (:class:`_EcmaPatterns`): Python's
``re``, which the ``jsonschema`` package calls, backtracks without bound (hours for a record
against ``^(\\w+\\s?)*$``). A pattern jsonschema-rs cannot compile (one only Python reads,
such as ``a{,2}``) stops ``configure``, naming the file and the place; a string holding a lone
surrogate (``"\\ud800"``, which jsonschema-rs cannot take) that a pattern must be checked
against rejects its record. ``format`` is an annotation only, in every draft, as the
``jsonschema`` package has it by default. The ``jsonschema`` package words the rejections
of values up to 16 KiB (its ``uniqueItems`` made linear), jsonschema-rs's first error those
of larger ones (see :meth:`_JsonSchema.problem`). A schema that jsonschema-rs cannot compile
otherwise is checked by ``jsonschema`` alone, with a warning at start-up. Nothing is ever
fetched: schemas refer to each other by file name or ``$id``.
"""

from __future__ import annotations

import difflib
import enum
import functools
import itertools
import json
import logging
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

import jsonschema_rs
import orjson
from jsonschema import _keywords as jsonschema_keywords
from jsonschema import _legacy_keywords as jsonschema_legacy_keywords
from jsonschema import _utils as jsonschema_utils
from jsonschema import validators
from jsonschema.exceptions import SchemaError, ValidationError, best_match
from referencing import Registry, Resource
from referencing.exceptions import NoSuchResource
from referencing.jsonschema import DRAFT202012, UnknownDialect, specification_with

from policies.api import (
    InvalidRecord,
    RecordIntrospectionHints,
    RecordProxy,
    RecordValidationPolicy,
    TopicMetadata,
)

__all__ = [
    "JSON_SCHEMA_DIR",
    "BuiltinRecordValidationPolicy",
    "PerTopicHints",
    "RecordRules",
    "RequiredHeadersOnly",
    "SchemaIdCheck",
    "SchemaLookup",
    "SchemaSubjectLookup",
    "UsesSchemaLookup",
    "UsesSchemaSubjectLookup",
    "ValueCheck",
    "ValueRulesOnly",
    "parse_record_validation_policy",
]

JSON_SCHEMA_DIR: Final = "record.validation.json.schema.dir"
"""The policy config naming the directory of ``<name>.json`` JSON Schemas."""

SchemaLookup = Callable[[int], bool]
"""Whether the schema registry knows a schema id."""

SchemaSubjectLookup = Callable[[int, str], bool]
"""Whether the schema registry lists a schema id under a subject."""

_SEPARATORS: Final = re.compile(r"[;,]")
_MAX_BYTES: Final = re.compile(r"[0-9]{1,10}")
_INT_MAX: Final = 2**31 - 1
_SCHEMA_ID_BYTES: Final = 5
_MAGIC_BYTE: Final = 0
_CACHED_VALUES: Final = 1024
_DETAIL_CHARS: Final = 200
_RS_BASE_URI: Final = "json-schema:///"  # jsonschema-rs's base URI for a schema with no $id

log = logging.getLogger(__name__)


@runtime_checkable
class PerTopicHints(Protocol):
    """A record validation policy whose hints depend on the topic's
    ``record.validation.policy``; the gateway prefers this to ``get_hints()``."""

    def hints_for(self, validation_policy: str) -> RecordIntrospectionHints: ...


@runtime_checkable
class RequiredHeadersOnly(Protocol):
    """A record validation policy that can tell when a topic's rules check nothing but that
    each record carries some header keys.

    For such a topic the gateway looks for the keys itself, without building a RecordProxy
    per record, and calls ``validate`` only for the records that lack one (whatever
    ``validate`` then decides stands). The answer must be exact: a record with every key
    must pass ``validate``.
    """

    def required_headers_for(self, validation_policy: str) -> tuple[str, ...] | None:
        """The header keys (exact, case-sensitive; any value) every record must carry, when
        that is all the rules of this ``record.validation.policy`` check; otherwise None."""
        ...


ValueCheck = Callable[[bytes | None], None]
"""Checks one record value (None for a null one); raises InvalidRecord."""


@runtime_checkable
class ValueRulesOnly(Protocol):
    """A record validation policy that can tell when a topic's rules read nothing of a
    record but its whole value.

    For such a topic the gateway reads the values alone, without building a RecordProxy per
    record, and calls the check with each. The answer must be exact: for every record,
    ``check(record.value)`` and ``validate(topic, record)`` decide alike, in the same words.
    """

    def value_check_for(self, validation_policy: str) -> ValueCheck | None:
        """The check of one value, when the rules of this ``record.validation.policy`` read
        the value alone; otherwise None."""
        ...


@runtime_checkable
class UsesSchemaLookup(Protocol):
    """A record validation policy that may ask the gateway's schema registry client."""

    def set_schema_lookup(self, lookup: SchemaLookup) -> None: ...


@runtime_checkable
class UsesSchemaSubjectLookup(Protocol):
    """A record validation policy that may ask the gateway's schema registry client which
    subjects list a schema id."""

    def set_schema_subject_lookup(self, lookup: SchemaSubjectLookup) -> None: ...


class SchemaIdCheck(enum.Enum):
    """How much the ``schema-id`` rule checks."""

    PRESENT = "schema-id"
    REGISTERED = "schema-id:registry"
    IN_SUBJECT = "schema-id:subject"


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordRules:
    """A parsed ``record.validation.policy`` value (see the module docstring).

    ``value_json`` is true for ``json`` and for ``json-schema``.
    """

    required_headers: tuple[str, ...] = ()
    key_required: bool = False
    value_json: bool = False
    value_json_schema: str | None = None
    value_schema_id: SchemaIdCheck | None = None
    value_schema_subject: str | None = None
    """The subject of ``schema-id:subject:<subject>``."""
    max_record_bytes: int | None = None
    tombstones_allowed: bool = False

    @property
    def headers_only(self) -> bool:
        """Whether header rules are all there is (``tombstones-allowed`` checks nothing)."""
        return (
            bool(self.required_headers)
            and not self.key_required
            and not self.value_json
            and self.value_schema_id is None
            and self.max_record_bytes is None
        )

    @property
    def value_only(self) -> bool:
        """Whether value rules are all there is (``tombstones-allowed`` checks nothing)."""
        return (
            (self.value_json or self.value_schema_id is not None)
            and not self.required_headers
            and not self.key_required
            and self.max_record_bytes is None
        )

    @property
    def hints(self) -> RecordIntrospectionHints:
        """The least of a record these rules read."""
        whole = self.max_record_bytes is not None
        if whole or self.value_json:
            value_bytes = -1
        elif self.value_schema_id is not None:
            value_bytes = _SCHEMA_ID_BYTES
        else:
            value_bytes = 0
        return RecordIntrospectionHints(
            access_headers=whole or bool(self.required_headers),
            access_key_bytes=-1 if whole else int(self.key_required),
            access_value_bytes=value_bytes,
        )


_KEYWORDS: Final = frozenset(
    {
        "header",
        "key-required",
        "json",
        "json-schema",
        "schema-id",
        "max-bytes",
        "tombstones-allowed",
    }
)


_ARGUMENTS: Final = {"header": "key", "json-schema": "name", "max-bytes": "bytes"}


def parse_record_validation_policy(value: str) -> RecordRules:
    """Parse a topic's ``record.validation.policy`` value.

    Whether a ``json-schema`` name has a schema is not checked here; the policy checks it.

    :raises ValueError: saying what is wrong with the value.
    """
    if not value.strip():
        raise ValueError("it is empty")
    headers: list[str] = []
    seen: set[str] = set()
    fields: dict[str, Any] = {}
    for item in _SEPARATORS.split(value):
        rule = item.strip()
        name, colon, argument = _rule_parts(rule)
        identity = f"header:{argument}" if name == "header" else name
        if identity in seen:
            raise ValueError(f"rule {identity} is given more than once")
        seen.add(identity)
        if name == "header":
            headers.append(argument)
        else:
            fields.update(_rule_fields(rule, name, colon, argument))
    return RecordRules(required_headers=tuple(headers), **fields)


def _rule_parts(rule: str) -> tuple[str, str, str]:
    """(keyword, ``:`` or "", argument) of one rule; a bare word is a header key.

    :raises ValueError:
    """
    if not rule:
        raise ValueError("it has an empty rule (two separators in a row, or one at an end)")
    name, colon, argument = rule.partition(":")
    name, argument = name.strip(), argument.strip()
    if name not in _KEYWORDS:
        if colon:
            raise ValueError(
                f"unknown rule {name!r} in {rule!r} (rules: {', '.join(sorted(_KEYWORDS))}; "
                "write header:<key> for a header key that contains ':')"
            )
        return "header", "", rule
    if name in _ARGUMENTS and not argument:
        raise ValueError(f"rule {rule!r} needs {_ARGUMENTS[name]}: {name}:<{_ARGUMENTS[name]}>")
    if name in ("key-required", "json", "tombstones-allowed") and colon:
        raise ValueError(f"rule {name} takes no argument, got {rule!r}")
    return name, colon, argument


def _rule_fields(rule: str, name: str, colon: str, argument: str) -> dict[str, Any]:
    """The :class:`RecordRules` fields one rule other than a header rule sets.

    :raises ValueError:
    """
    if name == "key-required":
        return {"key_required": True}
    if name == "json":
        return {"value_json": True}
    if name == "json-schema":
        return {"value_json": True, "value_json_schema": argument}
    if name == "schema-id":
        return _schema_id_fields(rule, colon, argument)
    if name == "max-bytes":
        if not _MAX_BYTES.fullmatch(argument) or not 1 <= int(argument) <= _INT_MAX:
            raise ValueError(f"rule {rule!r} needs a whole number of bytes from 1 to {_INT_MAX}")
        return {"max_record_bytes": int(argument)}
    assert name == "tombstones-allowed"
    return {"tombstones_allowed": True}


def _schema_id_fields(rule: str, colon: str, argument: str) -> dict[str, Any]:
    """:raises ValueError:"""
    if not colon:
        return {"value_schema_id": SchemaIdCheck.PRESENT}
    if argument == "registry":
        return {"value_schema_id": SchemaIdCheck.REGISTERED}
    kind, sep, subject = argument.partition(":")
    if kind.strip() == "subject" and sep and subject.strip():
        return {
            "value_schema_id": SchemaIdCheck.IN_SUBJECT,
            "value_schema_subject": subject.strip(),
        }
    raise ValueError(
        f"rule {rule!r}: schema-id takes no argument, :registry or :subject:<subject>, "
        f"got {argument!r}"
    )


# --- the policy -------------------------------------------------------------------------------

_Check = Callable[[RecordProxy], None]
_Validator = Any  # a jsonschema validator instance (jsonschema ships no type hints)


@dataclass(frozen=True, slots=True)
class _JsonSchema:
    """One schema of the directory, compiled by both libraries (module docstring)."""

    reference: _Validator
    """The jsonschema package's validator: the words of a rejection."""
    fast: jsonschema_rs.Validator | None
    """jsonschema-rs's, which decides; None when it cannot compile the schema."""

    def problem(self, instance: Any, size: int) -> tuple[str, str] | None:
        """(message, JSON path) of what is wrong with a decoded JSON document of ``size``
        bytes, or None when the schema accepts it.

        The jsonschema package's work grows faster than the document (each error's message
        holds its instance whole: a list nested 250 deep around 900 KB took it 2.8 s), so it
        words the rejections of documents of at most :data:`_WORDED_BY_PYTHON` bytes, and
        jsonschema-rs's first error those of larger ones. A document jsonschema-rs cannot take
        (a lone surrogate in a string the schema checks) the jsonschema package decides alone,
        up to that size too: a larger one is rejected unchecked.
        """
        small = size <= _WORDED_BY_PYTHON
        if self.fast is None:
            return self._reference_problem(instance)
        try:
            if self.fast.is_valid(instance):
                return None
        except ValueError as exc:
            if small:
                return self._reference_problem(instance)
            return (
                f"it cannot be checked: jsonschema-rs cannot take it ({_cut(str(exc))}), and the "
                f"slower checker is given at most {_WORDED_BY_PYTHON} bytes, not {size}",
                "$",
            )
        if small:
            try:
                errors = self.reference.iter_errors(instance)
                error = best_match(itertools.islice(errors, _WORDED_ERRORS))
            except (RecursionError, _Unmatchable):
                error = None
            if error is not None:
                return error.message, error.json_path
        return _first_error(self.fast, instance)

    def _reference_problem(self, instance: Any) -> tuple[str, str] | None:
        """:meth:`problem`, as the jsonschema package alone decides it."""
        try:
            if next(self.reference.iter_errors(instance), None) is None:
                return None
            error = best_match(self.reference.iter_errors(instance))
        except _Unmatchable as exc:
            return str(exc), "$"
        except RecursionError:
            return "it is nested too deeply to check", "$"
        return error.message, error.json_path


def _first_error(fast: jsonschema_rs.Validator, instance: Any) -> tuple[str, str]:
    """jsonschema-rs's first error, for an instance it refuses: ``validate`` stops there,
    where ``iter_errors`` makes them all first (each message holding its instance whole: 1.2 s
    for a list nested 250 deep around 900 KB)."""
    try:
        fast.validate(instance)
    except jsonschema_rs.ValidationError as error:
        return error.message, _json_path(list(error.instance_path))
    except ValueError:  # its recursion limit
        return "it is nested too deeply to say where", "$"
    return "jsonschema-rs refused it, then accepted it", "$"


_WORDED_BY_PYTHON: Final = 16 * 1024
"""The largest JSON document whose rejection the jsonschema package words (with its
``best_match``, the error a person would look at first); about 50 ms of its work at worst."""
_WORDED_ERRORS: Final = 64
"""The errors the jsonschema package finds before ``best_match`` picks one: each may cost a
pattern's backtracking limit, and 400 strings that fail one cost 400 times that."""


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """The jsonschema package's ``uniqueItems``, in time linear in the array: it compared every
    pair of items that do not sort (objects, lists), and 4,000 objects took it 27 s, on the
    event loop, to word the rejection of a 50 KB value."""
    if unique and validator.is_type(instance, "array"):
        items = [_canonical(item) for item in instance]
        if len(set(items)) != len(items):
            yield ValidationError(f"{instance!r} has non-unique elements")


def _canonical(value: Any) -> Any:
    """A hashable value equal to another's exactly when JSON Schema calls the two equal: 1
    and 1.0 are, true and 1 are not, objects are whatever their order.

    :raises RecursionError: nested too deeply.
    """
    if isinstance(value, bool):
        return (bool, value)
    if isinstance(value, dict):
        return (dict, frozenset((key, _canonical(item)) for key, item in value.items()))
    if isinstance(value, list):
        return (list, tuple(_canonical(item) for item in value))
    return value  # str, int, float, None


@functools.cache
def _linear(validator_class: Any) -> Any:
    """``validator_class`` with :func:`_unique_items` for ``uniqueItems``."""
    return validators.extend(validator_class, {"uniqueItems": _unique_items})


class _Unmatchable(ValueError):
    """A string no ECMA-262 engine here can match: one holding a lone surrogate (JSON's
    ``"\\ud800"``), which is not Unicode text. The record is rejected."""


class _EcmaPatterns:
    """What the ``jsonschema`` package calls as ``re`` (:func:`_match_patterns_as_ecma`):
    ``search(pattern, string)``, answered by jsonschema-rs's ECMA-262 engine, the one that
    decides. Python's ``re`` backtracks without bound: ``^(\\w+\\s?)*$`` took 0.26 s on 22
    letters and a ``!``, four times as long with each two letters more, on the event loop, where
    the rejection of such a value was worded; the Rust engine is linear (or, for a pattern with
    a backreference, stops at its backtracking limit and does not match)."""

    __slots__ = ("_compiled",)

    def __init__(self) -> None:
        self._compiled: dict[str, jsonschema_rs.Validator] = {}

    def compile(self, pattern: str) -> jsonschema_rs.Validator:
        """:raises ValueError: a pattern that is not ECMA-262 as jsonschema-rs reads it."""
        compiled = self._compiled.get(pattern)
        if compiled is None:
            compiled = jsonschema_rs.validator_for(
                {"type": "string", "pattern": pattern},
                validate_formats=False,
                offline=True,
                pattern_options=_PATTERN_OPTIONS,
            )
            self._compiled[pattern] = compiled
        return compiled

    def search(self, pattern: str, string: str) -> bool:
        """Whether ``pattern`` matches somewhere in ``string``, as ECMA-262 has it.

        :raises _Unmatchable: for a string holding a lone surrogate.
        """
        compiled = self.compile(pattern)
        try:
            return compiled.is_valid(string)
        except UnicodeEncodeError:
            raise _Unmatchable(
                f"{_cut(repr(string))} holds a lone surrogate (not Unicode text), which "
                f"pattern {pattern!r} cannot be checked against"
            ) from None


_ECMA_PATTERNS: Final = _EcmaPatterns()
_BACKTRACK_LIMIT: Final = 10_000
"""Steps a pattern that needs backtracking (a backreference, a lookbehind: the others run in
linear time) may take on one string before it is taken as not matching. fancy-regex's own
limit, a million, took 34 ms a string: 12 s to word the rejection of 14 KB of strings against
``^(\\w+\\s?)*\\1$``."""
_PATTERN_OPTIONS: Final = jsonschema_rs.FancyRegexOptions(backtrack_limit=_BACKTRACK_LIMIT)


def _match_patterns_as_ecma() -> None:
    """Make the ``jsonschema`` package match ``pattern`` and ``patternProperties`` (in
    ``additionalProperties`` and ``unevaluatedProperties`` too) with :data:`_ECMA_PATTERNS`:
    it calls ``re.search`` in these modules, nowhere else that record content reaches. For
    the whole process: a plug-in's use of the package matches patterns the same way."""
    for module in (jsonschema_keywords, jsonschema_legacy_keywords, jsonschema_utils):
        module.re = _ECMA_PATTERNS


_match_patterns_as_ecma()


def _json_path(path: list[str | int]) -> str:
    """As jsonschema's ``ValidationError.json_path``."""
    return "$" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path)


_EVERYTHING: Final = RecordIntrospectionHints(
    access_headers=True, access_key_bytes=-1, access_value_bytes=-1
)
_NOTHING: Final = RecordIntrospectionHints(
    access_headers=False, access_key_bytes=0, access_value_bytes=0
)


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


# One decoder, made once: json.loads with keyword arguments would build one per call.
_JSON: Final = json.JSONDecoder(parse_constant=_reject_constant)
# Every digit as b"1", everything else as b"0": finds a run of digits without a regex.
_DIGITS: Final = bytes(0x31 if 0x30 <= byte <= 0x39 else 0x30 for byte in range(256))
# An integer orjson would turn into a float has at least this many digits (-2**63 - 1).
_LONG_NUMBER_DIGITS: Final = 19


def _has_digit_run_python(value: bytes, n: int) -> bool:
    """Whether value holds n ASCII digits in a row: policies/_digits.c, in Python."""
    return b"1" * n in value.translate(_DIGITS)


_has_digit_run: Callable[[bytes, int], bool]
try:
    from ._digits import has_digit_run as _has_digit_run
except ImportError:  # built without a C compiler: the same answer, four times the cost
    _has_digit_run = _has_digit_run_python


class _DuplicateKey(Exception):
    """A JSON object that gives ``key`` twice."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _each_key_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """:raises _DuplicateKey: for the first key given twice."""
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return found


_JSON_EACH_KEY_ONCE: Final = json.JSONDecoder(
    parse_constant=_reject_constant, object_pairs_hook=_each_key_once
)


def _duplicate_key(document: bytes) -> str | None:
    """The first key an object of a JSON document (one that decodes) gives twice, if any."""
    try:
        _JSON_EACH_KEY_ONCE.decode(str(document, "utf-8"))
    except _DuplicateKey as exc:
        return exc.key
    return None


def _keys_once_python(document: bytes, decoded: Any) -> bool:
    """Whether every object of the document gives each key once: policies/_digits.c's
    count, by decoding the text again."""
    return _duplicate_key(document) is None


_keys_once: Callable[[bytes, Any], bool]
try:
    from ._digits import count_keys as _count_keys
    from ._digits import count_members as _count_members

    def _keys_once(document: bytes, decoded: Any) -> bool:
        """Whether every object of the document gives each key once: the members its text
        writes are the keys its dicts hold. :raises RecursionError: nested too deeply."""
        return _count_members(document) == _count_keys(decoded)

except ImportError:  # built without a C compiler: the same answer, more slowly
    _keys_once = _keys_once_python


_MANTISSA_DIGITS: Final = 100
"""The most digits a number may write before its exponent and be told apart as a double by
its significant digits (policies/_digits.c's MANTISSA_DIGITS): zeros move the first
significant digit, and ``0.<400 zeros>1``, one significant digit and no exponent, is 0.0."""


def _is_double_suspect(text: str) -> bool:
    """policies/_digits.c's test of one number with a fraction or an exponent: more than 15
    significant digits, an exponent of 3 digits or more, or more than
    :data:`_MANTISSA_DIGITS` digits before the exponent."""
    mantissa, _, exponent = text.lower().partition("e")
    written = mantissa.lstrip("-").replace(".", "")
    return (
        len(written.strip("0")) > 15
        or len(exponent.lstrip("+-").lstrip("0")) >= 3
        or len(written) > _MANTISSA_DIGITS
    )


def _double_suspects_python(document: bytes) -> list[bytes]:
    """policies/_digits.c's double_suspects, by decoding the text again: the decoder hands
    every number with a fraction or an exponent to ``parse_float`` as written. One whose
    double's ``repr`` is the same number, however written, is no suspect."""
    found: list[bytes] = []

    def keep(text: str) -> float:
        double = float(text)
        if _is_double_suspect(text) and _reads_otherwise(text, double):
            found.append(text.encode("ascii"))
        return double

    json.JSONDecoder(parse_float=keep, parse_constant=_reject_constant).decode(
        str(document, "utf-8")
    )
    return found


def _keys_once_and_suspects_python(document: bytes, decoded: Any) -> tuple[bool, list[bytes]]:
    """policies/_digits.c's scan_json, as used: (:func:`_keys_once`, the double suspects),
    each by decoding the text again."""
    return _keys_once_python(document, decoded), _double_suspects_python(document)


_double_suspects: Callable[[bytes], list[bytes]]
_keys_once_and_suspects: Callable[[bytes, Any], tuple[bool, list[bytes]]]
try:
    from ._digits import count_keys as _count_keys
    from ._digits import double_suspects as _double_suspects
    from ._digits import scan_json as _scan_json

    def _keys_once_and_suspects(document: bytes, decoded: Any) -> tuple[bool, list[bytes]]:
        """(:func:`_keys_once`, :func:`_double_suspects`) in one pass over the text."""
        members, suspects = _scan_json(document)
        return members == _count_keys(decoded), suspects

except ImportError:  # built without a C compiler: the same answer, by decoding again
    _double_suspects = _double_suspects_python
    _keys_once_and_suspects = _keys_once_and_suspects_python


def _read_otherwise_as_double(document: bytes) -> tuple[str, str] | None:
    """The first number of a (decoded) JSON text whose double is another number, as
    written and as the double: ``1000.0000000000000000001`` is read as ``1000.0``, and
    ``1e-400`` as ``0.0``. The schema judges the double (jsonschema-rs and the jsonschema
    package take what the decoder gives, a float), while a consumer reading numbers whole
    (Java's BigDecimal, Python's decimal, PostgreSQL's numeric) acts on the number written:
    a value above a ``maximum``, or no integer, passed as one. A double's shortest form
    (``0.30000000000000004``, as every language prints doubles) reads the same both ways.
    """
    return _first_read_otherwise(_double_suspects(document))


def _first_read_otherwise(suspects: list[bytes]) -> tuple[str, str] | None:
    """Of numbers as written (:func:`_double_suspects`, which lists only such numbers: each
    is decided again here), the first whose double is another number: (as written, as the
    double)."""
    for token in suspects:
        text = token.decode("ascii")
        double = float(text)
        if _reads_otherwise(text, double):
            return text, repr(double)
    return None


def _reads_otherwise(text: str, double: float) -> bool:
    """Whether the number ``text`` is another number than its ``double``."""
    if not math.isfinite(double):
        return True
    try:
        return Decimal(text) != Decimal(repr(double))
    except InvalidOperation:
        # An exponent past what Decimal holds (beyond 10**18 either way): the double is 0.0,
        # which the number is only when it has no digit but zeros.
        mantissa = text.lower().partition("e")[0]
        return any(digit in mantissa for digit in "123456789")


def _check_doubles(document: bytes, json_rule: str, where: str) -> None:
    """:raises InvalidRecord: for a number a JSON Schema would judge as another one."""
    try:
        found = _read_otherwise_as_double(document)
    except (ValueError, RecursionError):  # only without the C module, decoding again
        raise InvalidRecord(
            f"Record value cannot be checked for numbers that read otherwise as doubles; "
            f"rule {json_rule} needs a JSON document{where}"
        ) from None
    if found is not None:
        written, double = found
        raise InvalidRecord(
            f"Record value has the number {_cut(written)}, which the schema would judge as "
            f"the double {double} and a reader of exact decimals as written; rule {json_rule} "
            f"needs numbers that read alike{where}"
        )


def _decode_json(document: bytes, json_rule: str, where: str) -> Any:
    """The JSON document of a record value (:func:`_decode_any_json`), whose objects give
    each key once: readers take ``{"amount": -5, "amount": 10}`` differently (json, orjson,
    Jackson the last; simdjson's and some Go readers the first; serde's derive and Gson's maps
    refuse it), so the schema would judge one reading and a consumer act on another.

    :raises InvalidRecord: not UTF-8, not JSON, too deeply nested, or a key given twice.
    """
    decoded = _decode_any_json(document, json_rule, where)
    try:
        once = _keys_once(document, decoded)
    except RecursionError:
        raise InvalidRecord(
            f"Record value is JSON nested too deeply to check; "
            f"rule {json_rule} needs a JSON document{where}"
        ) from None
    if not once:
        try:
            key = repr(_duplicate_key(document))
        except (ValueError, RecursionError):
            key = "a key"
        raise InvalidRecord(
            f"Record value gives the key {key} twice in one object, which JSON readers take "
            f"differently (the first, the last, or an error); rule {json_rule} needs each "
            f"key once{where}"
        )
    return decoded


def _decode_any_json(document: bytes, json_rule: str, where: str) -> Any:
    """The JSON document of a record value, as the standard library's json decodes it.

    orjson decodes it (in a third of the time) when it gives the same: not when the value has
    19 digits in a row (orjson turns an integer beyond 64 bits into a float, json keeps it
    whole), and not when orjson refuses it (json then decides, and words the rejection: it
    takes ``"\\ud800"`` and ``1e400``). One difference is left: orjson reads documents nested
    up to 1024 deep, where json gives up a little earlier.

    :raises InvalidRecord: not UTF-8, not JSON, or too deeply nested to decode.
    """
    if not _has_digit_run(document, _LONG_NUMBER_DIGITS):
        try:
            return orjson.loads(document)
        except orjson.JSONDecodeError:
            pass
    try:
        text = str(document, "utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRecord(
            f"Record value is not UTF-8 ({exc.reason} at byte {exc.start}); "
            f"rule {json_rule} needs a UTF-8 JSON document{where}"
        ) from None
    try:
        return _JSON.decode(text)
    except ValueError as exc:
        raise InvalidRecord(
            f"Record value is not valid JSON ({_cut(str(exc))}); "
            f"rule {json_rule} needs a JSON document{where}"
        ) from None
    except RecursionError:
        raise InvalidRecord(
            f"Record value is JSON nested too deeply to check; "
            f"rule {json_rule} needs a JSON document{where}"
        ) from None


@dataclass(frozen=True, slots=True)
class _Compiled:
    """A value ready to apply: its checks, cheapest first, or why it is invalid."""

    hints: RecordIntrospectionHints
    checks: tuple[_Check, ...]
    problem: str | None = None
    required_headers: tuple[str, ...] | None = None
    """Set when the value's rules are header rules alone (see RequiredHeadersOnly)."""
    value_check: ValueCheck | None = None
    """Set when the value's rules are value rules alone (see ValueRulesOnly)."""


class BuiltinRecordValidationPolicy(RecordValidationPolicy):
    """Applies the rules a topic's ``record.validation.policy`` names (module docstring).

    Also :class:`PerTopicHints`, :class:`RequiredHeadersOnly`, :class:`ValueRulesOnly`,
    :class:`UsesSchemaLookup` and :class:`UsesSchemaSubjectLookup`.
    """

    def __init__(self) -> None:
        self._schemas: Mapping[str, _JsonSchema] = {}
        self._schema_dir: str | None = None
        self._schema_lookup: SchemaLookup | None = None
        self._subject_lookup: SchemaSubjectLookup | None = None
        self._compiled = functools.lru_cache(maxsize=_CACHED_VALUES)(self._compile)

    def configure(self, configs: Mapping[str, str]) -> None:
        """Load the JSON Schemas from ``record.validation.json.schema.dir``, if set.

        :raises ValueError: naming the directory or the file that cannot be used.
        """
        directory = configs.get(JSON_SCHEMA_DIR) or None
        self._schemas = {} if directory is None else _load_json_schemas(directory)
        self._schema_dir = directory
        self._compiled.cache_clear()

    def set_schema_lookup(self, lookup: SchemaLookup) -> None:
        """Give the policy the gateway's schema registry lookup (for ``schema-id:registry``)."""
        self._schema_lookup = lookup

    def set_schema_subject_lookup(self, lookup: SchemaSubjectLookup) -> None:
        """Give the policy the gateway's lookup of the subjects that list a schema id (for
        ``schema-id:subject:<subject>``)."""
        self._subject_lookup = lookup

    @property
    def schema_names(self) -> frozenset[str]:
        """The JSON Schemas loaded by :meth:`configure`."""
        return frozenset(self._schemas)

    def get_hints(self) -> RecordIntrospectionHints:
        """Everything: without the topic, any rule may apply. Prefer :meth:`hints_for`."""
        return _EVERYTHING

    def hints_for(self, validation_policy: str) -> RecordIntrospectionHints:
        """What the rules of this ``record.validation.policy`` value read; for a value that
        does not parse, nothing (every record is rejected unread)."""
        return self._compiled(validation_policy).hints

    def required_headers_for(self, validation_policy: str) -> tuple[str, ...] | None:
        """The header keys, when header rules are all this value has; for a value that does
        not parse, None (its records go through :meth:`validate`, which rejects them)."""
        return self._compiled(validation_policy).required_headers

    def value_check_for(self, validation_policy: str) -> ValueCheck | None:
        """The check of one value, when value rules are all this value has; for a value that
        does not parse, None (its records go through :meth:`validate`, which rejects them)."""
        return self._compiled(validation_policy).value_check

    def validate(self, topic: TopicMetadata, record: RecordProxy) -> None:
        """:raises InvalidRecord: naming the rule the record breaks, or saying that the
        topic's ``record.validation.policy`` is invalid."""
        compiled = self._compiled(topic.validation_policy)
        if compiled.problem is not None:
            raise InvalidRecord(
                f"Topic {topic.topic} has an invalid record.validation.policy "
                f"{topic.validation_policy!r}: {compiled.problem}"
            )
        for check in compiled.checks:
            check(record)

    def _compile(self, value: str) -> _Compiled:
        try:
            rules = parse_record_validation_policy(value)
        except ValueError as exc:
            return _Compiled(hints=_NOTHING, checks=(), problem=str(exc))
        validator = None
        if rules.value_json_schema is not None:
            validator = self._schemas.get(rules.value_json_schema)
            if validator is None:
                return _Compiled(
                    hints=_NOTHING, checks=(), problem=self._no_schema(rules.value_json_schema)
                )
        where = f" (record.validation.policy={value})"
        checks: list[_Check] = []
        if rules.required_headers:
            checks.append(_headers_check(rules.required_headers, where))
        if rules.key_required:
            checks.append(functools.partial(_check_key, where=where))
        if rules.max_record_bytes is not None:
            checks.append(functools.partial(_check_size, limit=rules.max_record_bytes, where=where))
        value_check = None
        if rules.value_json or rules.value_schema_id is not None:
            value_check = self._value_check(rules, validator, where)
            checks.append(_of_value(value_check))
        return _Compiled(
            hints=rules.hints,
            checks=tuple(checks),
            required_headers=rules.required_headers if rules.headers_only else None,
            value_check=value_check if rules.value_only else None,
        )

    def _no_schema(self, name: str) -> str:
        if self._schema_dir is None:
            return f"json-schema:{name} names a schema, but {JSON_SCHEMA_DIR} is not set"
        known = ", ".join(sorted(self._schemas)) or "none"
        return (
            f"json-schema:{name} names a schema that {self._schema_dir} does not have "
            f"(no {name}.json; schemas: {known})"
        )

    def _value_check(
        self, rules: RecordRules, validator: _JsonSchema | None, where: str
    ) -> ValueCheck:
        schema_id = rules.value_schema_id
        tombstones_allowed = rules.tombstones_allowed
        schema = rules.value_json_schema
        json_rule = "json" if schema is None else f"json-schema:{schema}"
        id_rule = _schema_id_rule(rules)
        first_rule = id_rule if id_rule is not None else json_rule
        check_schema_id = None if schema_id is None else self._schema_id_check(rules, where)
        skip = 0 if schema_id is None else _SCHEMA_ID_BYTES
        check_json = _json_check(validator, json_rule, where) if rules.value_json else None

        def check_value(value: bytes | None) -> None:
            if value is None:
                if tombstones_allowed:
                    return
                raise InvalidRecord(f"Record value is null; rule {first_rule} needs a value{where}")
            if check_schema_id is not None:
                check_schema_id(value)
            if check_json is not None:
                check_json(value[skip:] if skip else value)

        if schema_id is None and validator is not None and validator.fast is not None:
            return _accepting_fast(validator.fast, check_value)
        return check_value

    def _schema_id_check(self, rules: RecordRules, where: str) -> Callable[[bytes], None]:
        """The check of a value's schema id prefix (and, for ``schema-id:registry``, that the
        registry has the id, for ``schema-id:subject:<subject>`` that it lists the id under
        the subject; the lookups are the ones set when a value is checked)."""
        policy = self
        schema_id, subject = rules.value_schema_id, rules.value_schema_subject
        rule = _schema_id_rule(rules)
        assert schema_id is not None and rule is not None

        def check_schema_id(value: bytes) -> None:
            if len(value) < _SCHEMA_ID_BYTES or value[0] != _MAGIC_BYTE:
                raise InvalidRecord(_no_schema_id(value, rule, where))
            if schema_id is SchemaIdCheck.PRESENT:
                return
            number = int.from_bytes(value[1:_SCHEMA_ID_BYTES], "big", signed=True)
            if subject is None:
                lookup = policy._schema_lookup
                if lookup is None:
                    raise _no_registry(rule, where)
                if not lookup(number):
                    raise InvalidRecord(
                        f"Record value has schema id {number}, which the schema registry "
                        f"does not have (rule {rule}){where}"
                    )
                return
            in_subject = policy._subject_lookup
            if in_subject is None:
                raise _no_registry(rule, where)
            if not in_subject(number, subject):
                raise InvalidRecord(
                    f"Record value has schema id {number}, which the schema registry does "
                    f"not list under subject {subject} (rule {rule}){where}"
                )

        return check_schema_id


def _no_registry(rule: str, where: str) -> InvalidRecord:
    return InvalidRecord(
        f"Record cannot be checked: rule {rule} needs a schema registry, and the gateway "
        f"has none configured{where}"
    )


def _schema_id_rule(rules: RecordRules) -> str | None:
    """The ``schema-id`` rule as written (normalised), if there is one."""
    if rules.value_schema_id is None:
        return None
    if rules.value_schema_subject is None:
        return rules.value_schema_id.value
    return f"{rules.value_schema_id.value}:{rules.value_schema_subject}"


def _json_check(
    validator: _JsonSchema | None, json_rule: str, where: str
) -> Callable[[bytes], Any]:
    """The check of a value's JSON document: that it decodes and, with a ``validator``, that
    its schema accepts it."""
    if validator is None:
        return functools.partial(_decode_json, json_rule=json_rule, where=where)
    fast = validator.fast

    def check_json(document: bytes) -> None:
        instance = _decode_json(document, json_rule, where)
        _check_doubles(document, json_rule, where)
        if fast is not None:
            try:
                if fast.is_valid(instance):
                    return
            except ValueError:
                pass  # validator.problem says what to do with it
        problem = validator.problem(instance, len(document))
        if problem is not None:
            message, path = problem
            raise InvalidRecord(
                f"Record value does not match the JSON schema of rule {json_rule}: "
                f"{_cut(message)} at {path}{where}"
            )

    return check_json


def _accepting_fast(fast: jsonschema_rs.Validator, check: ValueCheck) -> ValueCheck:
    """``check`` for a ``json-schema`` rule, with the common case taken first: a value that
    orjson decodes as _decode_json would (no run of 19 digits), whose keys are each given
    once, whose numbers read alike as doubles and which jsonschema-rs accepts passes in five
    calls. Every other value goes to ``check``, which decides it and words a rejection, as
    before."""
    is_valid = fast.is_valid
    loads = orjson.loads
    has_digit_run = _has_digit_run
    keys_once_and_suspects = _keys_once_and_suspects

    def check_value(value: bytes | None) -> None:
        if value is not None and not has_digit_run(value, _LONG_NUMBER_DIGITS):
            try:
                decoded = loads(value)
                if is_valid(decoded):
                    once, suspects = keys_once_and_suspects(value, decoded)
                    if once and (not suspects or _first_read_otherwise(suspects) is None):
                        return
            except (ValueError, RecursionError):  # orjson refuses it, or jsonschema-rs
                pass  # cannot take it, or it is nested too deeply to count its keys
        check(value)

    return check_value


def _of_value(check: ValueCheck) -> _Check:
    """A value check as a record check."""

    def check_record(record: RecordProxy) -> None:
        check(record.value)

    return check_record


def _headers_check(required: tuple[str, ...], where: str) -> _Check:
    if len(required) == 1:
        (wanted,) = required
        missing_one = f"Record is missing required header {wanted!r}{where}"

        def check_header(record: RecordProxy) -> None:
            for key, _ in record.headers:
                if key == wanted:
                    return
            raise InvalidRecord(missing_one)

        return check_header

    def check_headers(record: RecordProxy) -> None:
        present = {key for key, _ in record.headers}
        missing = [key for key in required if key not in present]
        if missing:
            names = ", ".join(repr(key) for key in missing)
            plural = "s" if len(missing) > 1 else ""
            raise InvalidRecord(f"Record is missing required header{plural} {names}{where}")

    return check_headers


def _check_key(record: RecordProxy, *, where: str) -> None:
    if not record.key:
        state = "null" if record.key is None else "empty"
        raise InvalidRecord(
            f"Record key is {state}; rule key-required needs a non-empty key{where}"
        )


def _check_size(record: RecordProxy, *, limit: int, where: str) -> None:
    size = len(record.key or b"") + len(record.value or b"")
    for key, value in record.headers:
        size += len(key.encode()) + len(value or b"")
    if size > limit:
        raise InvalidRecord(
            f"Record is {size} bytes (key, value and headers), more than the {limit} "
            f"that rule max-bytes:{limit} allows{where}"
        )


def _no_schema_id(value: bytes, rule: str, where: str) -> str:
    if not value or value[0] != _MAGIC_BYTE:
        found = "is empty" if not value else f"starts with byte {value[0]}, not magic byte 0"
    else:
        found = f"is only {len(value)} bytes"
    return (
        f"Record value {found}; rule {rule} needs magic byte 0 and a 4-byte schema id first{where}"
    )


def _cut(text: str) -> str:
    """At most _DETAIL_CHARS; the middle goes, since jsonschema's messages put the (possibly
    huge) instance first and what is wrong with it last."""
    if len(text) <= _DETAIL_CHARS:
        return text
    half = (_DETAIL_CHARS - 3) // 2
    return f"{text[:half]}...{text[-half:]}"


# --- JSON Schemas -----------------------------------------------------------------------------


def _load_json_schemas(directory: str) -> dict[str, _JsonSchema]:
    """Read and check every ``<name>.json`` in ``directory``; one validator per schema.

    The schemas may refer to each other by file name (``{"$ref": "address.json"}``) or by
    their ``$id``; nothing is ever fetched. A schema jsonschema-rs cannot compile is logged
    and left to the jsonschema package alone.

    :raises ValueError: naming the directory, or the file and what is wrong with it.
    """
    root = Path(directory)
    if not root.is_dir():
        raise ValueError(f"{JSON_SCHEMA_DIR}: {directory} is not a directory")
    schemas: dict[str, Any] = {}
    resources: list[tuple[str, Resource[Any]]] = []
    for path in sorted(root.glob("*.json")):
        if not path.is_file():
            continue
        schema = _read_schema(path)
        try:
            dialect = schema.get("$schema") if isinstance(schema, dict) else None
            specification = DRAFT202012 if dialect is None else specification_with(dialect)
            resource = specification.create_resource(schema)
            validator_class = validators.validator_for(
                schema, default=validators.Draft202012Validator
            )
            validator_class.check_schema(schema)
            _check_keywords(schema, validator_class, "#")
            _check_patterns(schema, "#")
        except _ReadsOtherwise as exc:
            raise ValueError(f"{JSON_SCHEMA_DIR}: {path}: {exc}") from None
        except UnknownDialect:
            raise ValueError(
                f"{JSON_SCHEMA_DIR}: {path} names an unknown $schema {dialect!r}"
            ) from None
        except SchemaError as exc:
            raise ValueError(
                f"{JSON_SCHEMA_DIR}: {path} is not a valid JSON Schema: "
                f"{_cut(exc.message)} at {exc.json_path}"
            ) from None
        schemas[path.stem] = (validator_class, schema)
        resources.append((path.name, resource))
        schema_id = resource.id()
        if schema_id is not None:
            resources.append((schema_id, resource))
    try:
        registry: Registry[Any] = Registry().with_resources(resources).crawl()
    except (NoSuchResource, ValueError) as exc:
        raise ValueError(f"{JSON_SCHEMA_DIR}: the schemas in {directory}: {exc}") from None
    fast = _compile_fast(directory, schemas, resources)
    return {
        name: _JsonSchema(
            reference=_linear(validator_class)(schema, registry=registry), fast=fast.get(name)
        )
        for name, (validator_class, schema) in schemas.items()
    }


def _read_schema(path: Path) -> Any:
    """One schema file's JSON, read strictly (:func:`_object_once`, :func:`_no_constant`).

    :raises ValueError: naming the file.
    """
    try:
        schema = json.loads(
            path.read_text(encoding="utf-8"),
            object_pairs_hook=_object_once,
            parse_constant=_no_constant,
        )
    except _ReadsOtherwise as exc:
        raise ValueError(f"{JSON_SCHEMA_DIR}: {path}: {exc}") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{JSON_SCHEMA_DIR}: {path} is not a JSON file: {exc}") from None
    if not isinstance(schema, dict | bool):
        raise ValueError(f"{JSON_SCHEMA_DIR}: {path} is not a JSON Schema (object or boolean)")
    return schema


class _ReadsOtherwise(ValueError):
    """A schema file that reads one way to its author and another to the validator."""


def _object_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose every key is given once: ``json`` keeps the last of two silently,
    so ``"additionalProperties": false`` followed by ``true`` (a merge left both) read as
    the laxer one."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise _ReadsOtherwise(
                f"the key {key!r} is given twice in one object (JSON keeps the last silently)"
            )
        found[key] = value
    return found


def _no_constant(name: str) -> Any:
    """NaN and Infinity are no JSON: ``{"maximum": NaN}`` compared false with every value, a
    bound that never failed."""
    raise _ReadsOtherwise(f"{name} is not JSON (a bound of {name} never fails)")


_ANNOTATIONS: Final = frozenset(
    {
        "$schema", "$id", "id", "$anchor", "$dynamicAnchor", "$recursiveAnchor", "$defs",
        "definitions", "$comment", "$vocabulary", "title", "description", "default",
        "examples", "example", "deprecated", "readOnly", "writeOnly", "contentEncoding",
        "contentMediaType", "contentSchema", "then", "else",
    }
)  # fmt: skip
"""Keywords that are not validators but are the dialects' own (and OpenAPI's ``example``)."""
_SUBSCHEMA_MAPS: Final = (
    "properties", "patternProperties", "$defs", "definitions", "dependentSchemas",
    "dependencies",  # drafts 4 to 7: a schema, or a list of names (no schema)
)  # fmt: skip
_SUBSCHEMA: Final = (
    "additionalProperties", "additionalItems", "items", "contains", "not", "if", "then",
    "else", "propertyNames", "unevaluatedItems", "unevaluatedProperties", "contentSchema",
)  # fmt: skip
_SUBSCHEMA_LISTS: Final = ("allOf", "anyOf", "oneOf", "prefixItems", "items")


def _check_keywords(schema: object, validator_class: Any, where: str) -> None:
    """A keyword the validator does not know is ignored by it, so a misspelt one
    (``requried``, ``maxLenght``, ``additionalProperty``) checked nothing: one that is a
    known keyword but for a letter or two (or its case) is refused, here and in every
    subschema. Other unknown keywords (a tool's own annotations) stay."""
    known = frozenset(validator_class.VALIDATORS) | _ANNOTATIONS
    stack: list[tuple[object, str]] = [(schema, where)]
    while stack:
        node, at = stack.pop()
        if not isinstance(node, dict):
            continue
        for key in node:
            meant = _misspelt(key, known)
            if meant is not None:
                raise _ReadsOtherwise(
                    f"{at}: {key!r} is no JSON Schema keyword, so the validator ignores it "
                    f"(did you mean {meant!r}?)"
                )
        stack.extend(_subschemas(node, at))


def _check_patterns(schema: object, where: str) -> None:
    """Every ``pattern`` and ``patternProperties`` key must be an ECMA-262 regular expression
    that jsonschema-rs compiles (:class:`_EcmaPatterns` matches them all): one only Python's
    ``re`` read (``a{,2}``) was matched by it, which backtracks without bound.

    :raises _ReadsOtherwise: naming the place.
    """
    stack: list[tuple[object, str]] = [(schema, where)]
    while stack:
        node, at = stack.pop()
        if not isinstance(node, dict):
            continue
        pattern = node.get("pattern")
        found = [(pattern, f"{at}/pattern")] if isinstance(pattern, str) else []
        named = node.get("patternProperties")
        if isinstance(named, dict):
            found += [(key, f"{at}/patternProperties") for key in named]
        for regex, place in found:
            try:
                _ECMA_PATTERNS.compile(regex)
            except ValueError as exc:
                first_line = str(exc).partition("\n")[0]
                raise _ReadsOtherwise(
                    f"{place}: {regex!r} is not an ECMA-262 regular expression, as JSON Schema "
                    f"patterns are ({first_line}); Python's re, which reads it, can take hours "
                    "on a record"
                ) from None
        stack.extend(_subschemas(node, at))


def _misspelt(key: str, known: frozenset[str]) -> str | None:
    """The known keyword ``key`` is a misspelling of, if it is one."""
    if key in known:
        return None
    close = [k for k in known if k.lower() == key.lower()] or difflib.get_close_matches(
        key, sorted(known), n=1, cutoff=0.8
    )
    return close[0] if close else None


def _subschemas(schema: dict[str, Any], at: str) -> list[tuple[object, str]]:
    """The schemas directly inside ``schema``, each with its JSON pointer."""
    found: list[tuple[object, str]] = []
    for key in _SUBSCHEMA_MAPS:
        inner = schema.get(key)
        if isinstance(inner, dict):
            found += [(sub, f"{at}/{key}/{name}") for name, sub in inner.items()]
    found += [(schema.get(key), f"{at}/{key}") for key in _SUBSCHEMA]
    for key in _SUBSCHEMA_LISTS:
        inner = schema.get(key)
        if isinstance(inner, list):
            found += [(sub, f"{at}/{key}/{index}") for index, sub in enumerate(inner)]
    return found


def _compile_fast(
    directory: str,
    schemas: Mapping[str, tuple[Any, Any]],
    resources: list[tuple[str, Resource[Any]]],
) -> dict[str, jsonschema_rs.Validator]:
    """jsonschema-rs validators for the schemas it can compile, with the same resources: a
    file name is relative to jsonschema-rs's base URI for a schema with no ``$id``."""
    uris = [(uri if ":" in uri else _RS_BASE_URI + uri, r.contents) for uri, r in resources]
    try:
        registry = jsonschema_rs.Registry(uris)
    except (ValueError, jsonschema_rs.ReferencingError) as exc:  # jsonschema decides alone
        log.warning(
            "%s: jsonschema-rs cannot take the schemas in %s: %s", JSON_SCHEMA_DIR, directory, exc
        )
        return {}
    compiled: dict[str, jsonschema_rs.Validator] = {}
    for name, (_, schema) in schemas.items():
        try:
            compiled[name] = jsonschema_rs.validator_for(
                schema,
                registry=registry,
                validate_formats=False,
                offline=True,
                pattern_options=_PATTERN_OPTIONS,
            )
        except (ValueError, jsonschema_rs.ReferencingError) as exc:  # jsonschema checks it
            first_line = str(exc).partition("\n")[0]
            log.warning(
                "%s: %s/%s.json is checked by the slower jsonschema package alone: "
                "jsonschema-rs cannot compile it: %s",
                JSON_SCHEMA_DIR,
                directory,
                name,
                first_line,
            )
    return compiled
