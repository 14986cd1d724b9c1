"""The built-in record validation policies: the ``record.validation.policy`` value syntax,
what each rule accepts and rejects (with the message a producer sees), the hints per value,
JSON Schema loading, and the schema registry lookup."""

from __future__ import annotations

import dataclasses
import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import policies.records as records_module
from gateway.record_validation import RecordValidator
from policies.api import (
    InvalidRecord,
    RecordIntrospectionHints,
    RecordProxy,
    RecordValidationPolicy,
    TopicMetadata,
)
from policies.builtin import RequireHeaderValidationPolicy
from policies.records import (
    JSON_SCHEMA_DIR,
    BuiltinRecordValidationPolicy,
    PerTopicHints,
    RecordRules,
    RequiredHeadersOnly,
    SchemaIdCheck,
    UsesSchemaLookup,
    UsesSchemaSubjectLookup,
    ValueRulesOnly,
    parse_record_validation_policy,
)
from protocol.records import BatchRecords, BatchView, RecordReading
from tests.batches import CODECS, reframe
from tests.batches import record as batch_record
from tests.unit.test_records import batch_with

pytestmark = pytest.mark.unit

ORDER_SCHEMA = {
    "type": "object",
    "required": ["id", "amount"],
    "properties": {"id": {"type": "string"}, "amount": {"type": "number", "minimum": 0}},
}


def topic(validation_policy: str) -> TopicMetadata:
    return TopicMetadata(topic="orders", partition=0, validation_policy=validation_policy)


def record(
    *,
    headers: tuple[tuple[str, bytes | None], ...] = (),
    key: bytes | None = None,
    value: bytes | None = None,
) -> RecordProxy:
    return RecordProxy(headers=headers, key=key, value=value)


def schema_id(number: int, body: bytes = b"") -> bytes:
    return b"\x00" + number.to_bytes(4, "big", signed=True) + body


def write_schemas(directory: Path, **schemas: object) -> Path:
    directory.mkdir(exist_ok=True)
    for name, schema in schemas.items():
        (directory / f"{name}.json").write_text(json.dumps(schema), encoding="utf-8")
    return directory


@pytest.fixture
def schema_dir(tmp_path: Path) -> Path:
    return write_schemas(tmp_path / "schemas", **{"orders-v1": ORDER_SCHEMA})


@pytest.fixture
def policy(schema_dir: Path) -> BuiltinRecordValidationPolicy:
    built = BuiltinRecordValidationPolicy()
    built.configure({JSON_SCHEMA_DIR: str(schema_dir)})
    return built


# --- the value syntax -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "rules"),
    [
        ("trace-id", RecordRules(required_headers=("trace-id",))),
        ("header:trace-id", RecordRules(required_headers=("trace-id",))),
        ("header:a:b", RecordRules(required_headers=("a:b",))),
        (" trace-id ; header:tenant ", RecordRules(required_headers=("trace-id", "tenant"))),
        ("trace-id,tenant", RecordRules(required_headers=("trace-id", "tenant"))),
        ("JSON", RecordRules(required_headers=("JSON",))),
        ("key-required", RecordRules(key_required=True)),
        ("json", RecordRules(value_json=True)),
        ("json-schema:orders-v1", RecordRules(value_json=True, value_json_schema="orders-v1")),
        (
            "json;json-schema:orders-v1",
            RecordRules(value_json=True, value_json_schema="orders-v1"),
        ),
        ("schema-id", RecordRules(value_schema_id=SchemaIdCheck.PRESENT)),
        ("schema-id:registry", RecordRules(value_schema_id=SchemaIdCheck.REGISTERED)),
        (
            "schema-id:subject:orders-value",
            RecordRules(
                value_schema_id=SchemaIdCheck.IN_SUBJECT, value_schema_subject="orders-value"
            ),
        ),
        (
            " schema-id : subject : com.example.Order ",
            RecordRules(
                value_schema_id=SchemaIdCheck.IN_SUBJECT, value_schema_subject="com.example.Order"
            ),
        ),
        ("max-bytes:1048576", RecordRules(max_record_bytes=1048576)),
        ("max-bytes:2147483647", RecordRules(max_record_bytes=2**31 - 1)),
        ("tombstones-allowed", RecordRules(tombstones_allowed=True)),
        (
            "header:trace-id;key-required;json;json-schema:orders-v1;schema-id:registry;"
            "max-bytes:1048576;tombstones-allowed",
            RecordRules(
                required_headers=("trace-id",),
                key_required=True,
                value_json=True,
                value_json_schema="orders-v1",
                value_schema_id=SchemaIdCheck.REGISTERED,
                max_record_bytes=1048576,
                tombstones_allowed=True,
            ),
        ),
    ],
)
def test_values_parse_into_rules(value: str, rules: RecordRules) -> None:
    assert parse_record_validation_policy(value) == rules


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "it is empty"),
        ("  ", "it is empty"),
        ("json;;key-required", "empty rule"),
        ("json;", "empty rule"),
        ("jsn-schema:orders-v1", "unknown rule 'jsn-schema'"),
        ("header:", "rule 'header:' needs key"),
        ("header", "rule 'header' needs key"),
        ("json-schema", "needs name"),
        ("json-schema: ", "needs name"),
        ("max-bytes", "needs bytes"),
        ("max-bytes:0", "from 1 to 2147483647"),
        ("max-bytes:-5", "from 1 to 2147483647"),
        ("max-bytes:1_000", "from 1 to 2147483647"),
        ("max-bytes:2147483648", "from 1 to 2147483647"),
        ("max-bytes:1k", "from 1 to 2147483647"),
        ("key-required:yes", "rule key-required takes no argument"),
        ("json:strict", "rule json takes no argument"),
        ("tombstones-allowed:1", "rule tombstones-allowed takes no argument"),
        ("schema-id:confluent", "schema-id takes no argument, :registry or :subject:<subject>"),
        ("schema-id:", "schema-id takes no argument, :registry or :subject:<subject>"),
        ("schema-id:subject", "schema-id takes no argument, :registry or :subject:<subject>"),
        ("schema-id:subject: ", "schema-id takes no argument, :registry or :subject:<subject>"),
        ("schema-id:registry:x", "schema-id takes no argument, :registry or :subject:<subject>"),
        ("schema-id:registry;schema-id:subject:a", "rule schema-id is given more than once"),
        ("json;json", "rule json is given more than once"),
        ("trace-id;header:trace-id", "rule header:trace-id is given more than once"),
        ("schema-id;schema-id:registry", "rule schema-id is given more than once"),
        ("json-schema:a;json-schema:b", "rule json-schema is given more than once"),
        ("max-bytes:1;max-bytes:2", "rule max-bytes is given more than once"),
    ],
)
def test_a_value_that_does_not_parse_rejects_every_record(
    policy: BuiltinRecordValidationPolicy, value: str, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_record_validation_policy(value)
    # Fail closed: even a record that would pass any rule is rejected, unread.
    anything = record(headers=(("trace-id", b"1"),), key=b"k", value=b"{}")
    with pytest.raises(InvalidRecord) as raised:
        policy.validate(topic(value), anything)
    assert raised.value.message.startswith(
        f"Topic orders has an invalid record.validation.policy {value!r}: "
    )
    assert problem in raised.value.message
    assert policy.hints_for(value) == RecordIntrospectionHints(
        access_headers=False, access_key_bytes=0, access_value_bytes=0
    )


# --- what each rule accepts and rejects -------------------------------------------------------

PASSES = None


@pytest.mark.parametrize(
    ("value", "proxy", "message"),
    [
        # header rules
        ("trace-id", record(headers=(("trace-id", b"1"),)), PASSES),
        ("trace-id", record(headers=(("a", b""), ("trace-id", None))), PASSES),
        (
            "trace-id",
            record(headers=(("Trace-Id", b"1"),)),
            "Record is missing required header 'trace-id' (record.validation.policy=trace-id)",
        ),
        (
            "header:trace-id",
            record(),
            "Record is missing required header 'trace-id' "
            "(record.validation.policy=header:trace-id)",
        ),
        ("trace-id;tenant", record(headers=(("tenant", b"t"), ("trace-id", b"1"))), PASSES),
        (
            "trace-id;tenant;region",
            record(headers=(("tenant", b"t"),)),
            "Record is missing required headers 'trace-id', 'region' "
            "(record.validation.policy=trace-id;tenant;region)",
        ),
        (
            "trace-id;tenant",
            record(headers=(("trace-id", b"t"),)),
            "Record is missing required header 'tenant' (record.validation.policy=trace-id;tenant)",
        ),
        # key-required
        ("key-required", record(key=b"k"), PASSES),
        (
            "key-required",
            record(key=None),
            "Record key is null; rule key-required needs a non-empty key "
            "(record.validation.policy=key-required)",
        ),
        (
            "key-required",
            record(key=b""),
            "Record key is empty; rule key-required needs a non-empty key "
            "(record.validation.policy=key-required)",
        ),
        # json
        ("json", record(value=b'{"id": "a"}'), PASSES),
        ("json", record(value=b' [1, 2.5, null, "\xc3\xa9"] '), PASSES),
        ("json", record(value=b"42"), PASSES),
        (
            "json",
            record(value=b"{oops"),
            "Record value is not valid JSON (Expecting property name enclosed in double quotes: "
            "line 1 column 2 (char 1)); rule json needs a JSON document "
            "(record.validation.policy=json)",
        ),
        (
            "json",
            record(value=b""),
            "Record value is not valid JSON (Expecting value: line 1 column 1 (char 0)); "
            "rule json needs a JSON document (record.validation.policy=json)",
        ),
        (
            "json",
            record(value=b"{} {}"),
            "Record value is not valid JSON (Extra data: line 1 column 4 (char 3)); "
            "rule json needs a JSON document (record.validation.policy=json)",
        ),
        (
            "json",
            record(value=b"[NaN]"),
            "Record value is not valid JSON (NaN is not JSON); "
            "rule json needs a JSON document (record.validation.policy=json)",
        ),
        (
            "json",
            record(value='{"a": 1}'.encode("utf-16")),
            "Record value is not UTF-8 (invalid start byte at byte 0); "
            "rule json needs a UTF-8 JSON document (record.validation.policy=json)",
        ),
        (
            "json",
            record(value=None),
            "Record value is null; rule json needs a value (record.validation.policy=json)",
        ),
        ("json;tombstones-allowed", record(value=None), PASSES),
        # json-schema
        ("json-schema:orders-v1", record(value=b'{"id": "a", "amount": 3}'), PASSES),
        (
            "json-schema:orders-v1",
            record(value=b'{"id": "a"}'),
            "Record value does not match the JSON schema of rule json-schema:orders-v1: "
            "'amount' is a required property at $ "
            "(record.validation.policy=json-schema:orders-v1)",
        ),
        (
            "json-schema:orders-v1",
            record(value=b'{"id": "a", "amount": -1}'),
            "Record value does not match the JSON schema of rule json-schema:orders-v1: "
            "-1 is less than the minimum of 0 at $.amount "
            "(record.validation.policy=json-schema:orders-v1)",
        ),
        (
            "json-schema:orders-v1",
            record(value=b"not json"),
            "Record value is not valid JSON (Expecting value: line 1 column 1 (char 0)); "
            "rule json-schema:orders-v1 needs a JSON document "
            "(record.validation.policy=json-schema:orders-v1)",
        ),
        (
            "json-schema:orders-v1",
            record(value=None),
            "Record value is null; rule json-schema:orders-v1 needs a value "
            "(record.validation.policy=json-schema:orders-v1)",
        ),
        ("json-schema:orders-v1;tombstones-allowed", record(value=None), PASSES),
        # schema-id (without the registry)
        ("schema-id", record(value=schema_id(7, b"avro bytes")), PASSES),
        ("schema-id", record(value=schema_id(7)), PASSES),
        (
            "schema-id",
            record(value=b"\x00\x00\x00\x07"),
            "Record value is only 4 bytes; rule schema-id needs magic byte 0 and a 4-byte "
            "schema id first (record.validation.policy=schema-id)",
        ),
        (
            "schema-id",
            record(value=b"\x01\x00\x00\x00\x07"),
            "Record value starts with byte 1, not magic byte 0; rule schema-id needs magic "
            "byte 0 and a 4-byte schema id first (record.validation.policy=schema-id)",
        ),
        (
            "schema-id",
            record(value=b""),
            "Record value is empty; rule schema-id needs magic byte 0 and a 4-byte "
            "schema id first (record.validation.policy=schema-id)",
        ),
        (
            "schema-id",
            record(value=None),
            "Record value is null; rule schema-id needs a value "
            "(record.validation.policy=schema-id)",
        ),
        ("schema-id;tombstones-allowed", record(value=None), PASSES),
        # schema-id with JSON after the 5 bytes (the JSON Schema serializer's format)
        ("schema-id;json", record(value=schema_id(7, b'{"a": 1}')), PASSES),
        (
            "schema-id;json",
            record(value=b'{"a": 1}'),
            "Record value starts with byte 123, not magic byte 0; rule schema-id needs magic "
            "byte 0 and a 4-byte schema id first (record.validation.policy=schema-id;json)",
        ),
        (
            "schema-id;json-schema:orders-v1",
            record(value=schema_id(7, b'{"id": "a", "amount": 1}')),
            PASSES,
        ),
        (
            "schema-id;json-schema:orders-v1",
            record(value=schema_id(7, b'{"id": 5, "amount": 1}')),
            "Record value does not match the JSON schema of rule json-schema:orders-v1: "
            "5 is not of type 'string' at $.id "
            "(record.validation.policy=schema-id;json-schema:orders-v1)",
        ),
        # max-bytes: key + value + header keys + header values
        ("max-bytes:10", record(headers=(("ab", b"cd"),), key=b"ef", value=b"ghij"), PASSES),
        (
            "max-bytes:9",
            record(headers=(("ab", b"cd"),), key=b"ef", value=b"ghij"),
            "Record is 10 bytes (key, value and headers), more than the 9 that rule "
            "max-bytes:9 allows (record.validation.policy=max-bytes:9)",
        ),
        (
            "max-bytes:3",
            record(headers=(("é", None),), key=None, value=b"ab"),
            "Record is 4 bytes (key, value and headers), more than the 3 that rule "
            "max-bytes:3 allows (record.validation.policy=max-bytes:3)",
        ),
        ("max-bytes:1", record(key=None, value=None), PASSES),
        # several rules: all must pass; the cheapest failure is the one reported
        (
            "header:trace-id;key-required;json-schema:orders-v1;max-bytes:100",
            record(headers=(("trace-id", b"1"),), key=b"o-1", value=b'{"id": "a", "amount": 1}'),
            PASSES,
        ),
        (
            "json-schema:orders-v1;key-required;trace-id",
            record(key=None, value=b"{}"),
            "Record is missing required header 'trace-id' "
            "(record.validation.policy=json-schema:orders-v1;key-required;trace-id)",
        ),
        (
            "json-schema:orders-v1;key-required;trace-id",
            record(headers=(("trace-id", b"1"),), key=b"k", value=b"{}"),
            "Record value does not match the JSON schema of rule json-schema:orders-v1: "
            "'id' is a required property at $ "
            "(record.validation.policy=json-schema:orders-v1;key-required;trace-id)",
        ),
    ],
)
def test_each_rule_accepts_and_rejects_records(
    policy: BuiltinRecordValidationPolicy, value: str, proxy: RecordProxy, message: str | None
) -> None:
    if message is None:
        policy.validate(topic(value), proxy)
        return
    with pytest.raises(InvalidRecord) as raised:
        policy.validate(topic(value), proxy)
    assert raised.value.message == message


def test_json_nested_too_deeply_is_rejected_not_crashed(
    policy: BuiltinRecordValidationPolicy,
) -> None:
    with pytest.raises(InvalidRecord, match="nested too deeply"):
        policy.validate(topic("json"), record(value=b"[" * 200_000 + b"]" * 200_000))


def test_an_integer_beyond_64_bits_is_judged_whole(tmp_path: Path) -> None:
    """orjson reads an integer past 64 bits as the nearest double: 2**64 + 1 would pass a
    maximum of 2**64 as 2**64.0. Such a value never takes the fast path, in either form of
    the check (a record, or its value alone)."""
    schema = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 2**64}}}
    policy = BuiltinRecordValidationPolicy()
    policy.configure({JSON_SCHEMA_DIR: str(write_schemas(tmp_path / "s", big=schema))})
    check = policy.value_check_for("json-schema:big")
    assert check is not None
    at_most, over = b'{"n": 18446744073709551616}', b'{"n": 18446744073709551617}'
    policy.validate(topic("json-schema:big"), record(value=at_most))
    check(at_most)
    with pytest.raises(InvalidRecord, match="18446744073709551617 is greater than the maximum"):
        policy.validate(topic("json-schema:big"), record(value=over))
    with pytest.raises(InvalidRecord, match="18446744073709551617 is greater than the maximum"):
        check(over)


@pytest.mark.parametrize("value", ["trace-id", "trace-id;key-required", "trace-id;tenant"])
def test_a_required_header_is_found_only_by_its_whole_key(
    policy: BuiltinRecordValidationPolicy, value: str
) -> None:
    """A key that starts or ends like the required one is another header."""
    near = record(key=b"k", headers=(("trace-idx", b"1"), ("trace", b"1"), ("tenant", b"1")))
    with pytest.raises(InvalidRecord, match="missing required header.*trace-id"):
        policy.validate(topic(value), near)


def test_unique_items_holds_where_jsonschema_rs_cannot_judge(tmp_path: Path) -> None:
    """A lone surrogate (which jsonschema-rs cannot take) sends the value to the Python
    validator, whose linear uniqueItems must still find the items given twice."""
    policy = BuiltinRecordValidationPolicy()
    schema = {"type": "array", "uniqueItems": True}
    policy.configure({JSON_SCHEMA_DIR: str(write_schemas(tmp_path / "s", u=schema))})
    policy.validate(topic("json-schema:u"), record(value=b'["\\ud800", "x"]'))
    for twice in (b'["\\ud800", "\\ud800"]', b'[{"a": "\\ud800"}, {"a": "\\ud800"}]'):
        with pytest.raises(InvalidRecord, match="has non-unique elements"):
            policy.validate(topic("json-schema:u"), record(value=twice))


def test_a_schema_mismatch_message_stays_short_for_a_large_value(
    policy: BuiltinRecordValidationPolicy,
) -> None:
    huge = json.dumps(list(range(50_000))).encode()
    with pytest.raises(InvalidRecord) as raised:
        policy.validate(topic("json-schema:orders-v1"), record(value=huge))
    # over 16 KiB: worded by jsonschema-rs (double quotes), not the jsonschema package
    assert 'is not of type "object" at $' in raised.value.message
    assert len(raised.value.message) < 400


# --- hints per value --------------------------------------------------------------------------


def hints(headers: bool, key: int, value: int) -> RecordIntrospectionHints:
    return RecordIntrospectionHints(
        access_headers=headers, access_key_bytes=key, access_value_bytes=value
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("trace-id", hints(True, 0, 0)),
        ("header:a;header:b", hints(True, 0, 0)),
        ("key-required", hints(False, 1, 0)),
        ("json", hints(False, 0, -1)),
        ("json-schema:orders-v1", hints(False, 0, -1)),
        ("schema-id", hints(False, 0, 5)),
        ("schema-id:registry", hints(False, 0, 5)),
        ("schema-id;json", hints(False, 0, -1)),
        ("tombstones-allowed", hints(False, 0, 0)),
        ("max-bytes:100", hints(True, -1, -1)),
        ("trace-id;key-required;schema-id", hints(True, 1, 5)),
        ("json-schema:unknown", hints(False, 0, 0)),
        ("jsn", hints(True, 0, 0)),
    ],
)
def test_hints_ask_only_for_what_the_topics_rules_read(
    policy: BuiltinRecordValidationPolicy, value: str, expected: RecordIntrospectionHints
) -> None:
    assert policy.hints_for(value) == expected


def cut_to(data: bytes | None, wanted: int) -> bytes | None:
    return data if data is None or wanted == -1 else data[:wanted]


SAMPLE_RECORDS = [
    record(),
    record(headers=(("trace-id", b"1"),), key=b"order-1", value=schema_id(7, b'{"id": "a"}')),
    record(headers=(("trace-id", None),), key=b"", value=schema_id(7, b"x" * 100)),
    record(key=b"k", value=b"\x00\x00\x00"),
    record(key=b"k", value=b"\x01\x00\x00\x00\x07rest"),
    record(key=b"k", value=b'{"id": "a", "amount": 1}'),
    record(headers=(("a", b"x" * 30),), key=b"k" * 30, value=b"v" * 30),
]


@pytest.mark.parametrize(
    "value",
    [
        "trace-id",
        "key-required",
        "json",
        "json-schema:orders-v1",
        "schema-id",
        "schema-id;json",
        "max-bytes:64",
        "trace-id;key-required;schema-id",
        "schema-id;tombstones-allowed",
    ],
)
def test_a_record_cut_to_the_hints_gets_the_same_answer_as_the_whole_record(
    policy: BuiltinRecordValidationPolicy, value: str
) -> None:
    """The gateway passes only what the hints ask for: no headers unless asked, key and value
    cut to the hinted prefix. The rules must not need more."""
    wanted = policy.hints_for(value)

    def answer(proxy: RecordProxy) -> str | None:
        try:
            policy.validate(topic(value), proxy)
        except InvalidRecord as exc:
            return exc.message
        return None

    for whole in SAMPLE_RECORDS:
        cut = record(
            headers=whole.headers if wanted.access_headers else (),
            key=cut_to(whole.key, wanted.access_key_bytes),
            value=cut_to(whole.value, wanted.access_value_bytes),
        )
        assert answer(cut) == answer(whole), whole


def test_get_hints_without_a_topic_asks_for_everything() -> None:
    assert BuiltinRecordValidationPolicy().get_hints() == hints(True, -1, -1)


def test_the_policy_offers_per_topic_hints_and_a_schema_lookup_hook() -> None:
    assert isinstance(BuiltinRecordValidationPolicy(), PerTopicHints)
    assert isinstance(BuiltinRecordValidationPolicy(), UsesSchemaLookup)
    assert not isinstance(RequireHeaderValidationPolicy(), PerTopicHints)
    assert not isinstance(RequireHeaderValidationPolicy(), UsesSchemaLookup)


# --- caching ----------------------------------------------------------------------------------


def test_a_value_is_parsed_once_not_per_record(
    policy: BuiltinRecordValidationPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real = records_module.parse_record_validation_policy

    def counting(value: str) -> RecordRules:
        calls.append(value)
        return real(value)

    monkeypatch.setattr(records_module, "parse_record_validation_policy", counting)
    for _ in range(100):
        policy.validate(topic("trace-id"), record(headers=(("trace-id", b"1"),)))
        policy.hints_for("trace-id")
        with pytest.raises(InvalidRecord):
            policy.validate(topic("json;json"), record(value=b"{}"))
    assert calls == ["trace-id", "json;json"]


def test_configure_again_forgets_values_compiled_against_the_old_schemas(
    tmp_path: Path,
) -> None:
    policy = BuiltinRecordValidationPolicy()
    policy.configure({JSON_SCHEMA_DIR: str(write_schemas(tmp_path / "a", v={"type": "object"}))})
    policy.validate(topic("json-schema:v"), record(value=b"{}"))
    policy.configure({JSON_SCHEMA_DIR: str(write_schemas(tmp_path / "b", v={"type": "array"}))})
    with pytest.raises(InvalidRecord, match="is not of type 'array'"):
        policy.validate(topic("json-schema:v"), record(value=b"{}"))


# --- JSON Schema loading ----------------------------------------------------------------------


def test_schemas_are_loaded_from_the_configured_directory(tmp_path: Path) -> None:
    directory = write_schemas(tmp_path / "s", **{"orders-v1": ORDER_SCHEMA, "any": True})
    (directory / "README.md").write_text("not a schema", encoding="utf-8")
    (directory / "nested.json").mkdir()
    policy = BuiltinRecordValidationPolicy()
    policy.configure({JSON_SCHEMA_DIR: str(directory)})
    assert policy.schema_names == {"orders-v1", "any"}
    policy.validate(topic("json-schema:any"), record(value=b"[1]"))


def test_schemas_may_refer_to_each_other_by_file_name_or_id(tmp_path: Path) -> None:
    directory = write_schemas(
        tmp_path / "s",
        address={"type": "object", "required": ["city"]},
        money={
            "$schema": "http://json-schema.org/draft-07/schema#",
            "$id": "https://schemas.example/money",
            "type": "number",
            "minimum": 0,
        },
        order={
            "type": "object",
            "properties": {
                "ship_to": {"$ref": "address.json"},
                "total": {"$ref": "https://schemas.example/money"},
            },
        },
    )
    policy = BuiltinRecordValidationPolicy()
    policy.configure({JSON_SCHEMA_DIR: str(directory)})
    policy.validate(topic("json-schema:order"), record(value=b'{"ship_to": {"city": "x"}}'))
    with pytest.raises(InvalidRecord, match="'city' is a required property at \\$.ship_to"):
        policy.validate(topic("json-schema:order"), record(value=b'{"ship_to": {}}'))
    with pytest.raises(InvalidRecord, match="-2 is less than the minimum of 0 at \\$.total"):
        policy.validate(topic("json-schema:order"), record(value=b'{"total": -2}'))


def test_a_draft_07_schema_is_checked_as_draft_07(tmp_path: Path) -> None:
    # In draft 7, "items" as an array is tuple validation; 2020-12 would refuse it as a schema.
    directory = write_schemas(
        tmp_path / "s",
        pair={
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "array",
            "items": [{"type": "string"}, {"type": "integer"}],
        },
    )
    policy = BuiltinRecordValidationPolicy()
    policy.configure({JSON_SCHEMA_DIR: str(directory)})
    policy.validate(topic("json-schema:pair"), record(value=b'["a", 1]'))
    with pytest.raises(InvalidRecord, match="'a' is not of type 'integer'"):
        policy.validate(topic("json-schema:pair"), record(value=b'["a", "a"]'))


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "broken.json is not a JSON file"),
        ("[1, 2]", "broken.json is not a JSON Schema \\(object or boolean\\)"),
        ('{"type": "strnig"}', "broken.json is not a valid JSON Schema: 'strnig' is not valid"),
        ('{"minimum": "zero"}', "broken.json is not a valid JSON Schema: 'zero' is not of type"),
        ('{"$schema": "https://example.com/mine"}', "broken.json names an unknown \\$schema"),
        # json keeps the last of two keys: the laxer one, silently
        (
            '{"type": "object", "additionalProperties": false, "additionalProperties": true}',
            "broken.json: the key 'additionalProperties' is given twice",
        ),
        # NaN compares false with every value: a bound that never failed
        ('{"type": "number", "maximum": NaN}', "broken.json: NaN is not JSON"),
        # the validator ignores keywords it does not know: a misspelt one checked nothing
        (
            '{"type": "object", "requried": ["id"]}',
            "broken.json: #: 'requried' is no JSON Schema keyword.*did you mean 'required'",
        ),
        (
            '{"properties": {"id": {"type": "string", "maxLenght": 3}}}',
            "broken.json: #/properties/id: 'maxLenght' is no JSON Schema keyword",
        ),
        (
            '{"anyOf": [{"type": "object", "Required": ["a"]}]}',
            "broken.json: #/anyOf/0: 'Required' is no JSON Schema keyword",
        ),
    ],
)
def test_a_bad_schema_file_stops_configure_naming_the_file(
    tmp_path: Path, content: str, problem: str
) -> None:
    directory = write_schemas(tmp_path / "s", good=ORDER_SCHEMA)
    (directory / "broken.json").write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=f"^{JSON_SCHEMA_DIR}: .*{problem}"):
        BuiltinRecordValidationPolicy().configure({JSON_SCHEMA_DIR: str(directory)})


def test_a_tools_own_annotations_stay(tmp_path: Path) -> None:
    """Keywords no validator knows and no keyword is a misspelling of (jsonschema2pojo's,
    OpenAPI's) are kept, as the validator keeps them."""
    schema = {"type": "object", "javaType": "com.acme.Order", "x-owner": "team-a", "example": {}}
    directory = write_schemas(tmp_path / "s", order=schema)
    BuiltinRecordValidationPolicy().configure({JSON_SCHEMA_DIR: str(directory)})


def test_a_schema_dir_that_is_not_a_directory_stops_configure(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(ValueError, match=f"{JSON_SCHEMA_DIR}: {missing} is not a directory"):
        BuiltinRecordValidationPolicy().configure({JSON_SCHEMA_DIR: str(missing)})


def test_an_unknown_schema_name_makes_the_value_invalid(
    policy: BuiltinRecordValidationPolicy, schema_dir: Path
) -> None:
    with pytest.raises(InvalidRecord) as raised:
        policy.validate(topic("json-schema:orders-v2"), record(value=b"{}"))
    assert raised.value.message == (
        "Topic orders has an invalid record.validation.policy 'json-schema:orders-v2': "
        f"json-schema:orders-v2 names a schema that {schema_dir} does not have "
        "(no orders-v2.json; schemas: orders-v1)"
    )


@pytest.mark.parametrize("configs", [{}, {JSON_SCHEMA_DIR: ""}])
def test_json_schema_rules_are_invalid_when_no_schema_dir_is_set(
    configs: dict[str, str],
) -> None:
    policy = BuiltinRecordValidationPolicy()
    policy.configure(configs)
    assert policy.schema_names == frozenset()
    policy.validate(topic("json"), record(value=b"{}"))
    with pytest.raises(InvalidRecord) as raised:
        policy.validate(topic("json-schema:orders-v1"), record(value=b"{}"))
    assert raised.value.message == (
        "Topic orders has an invalid record.validation.policy 'json-schema:orders-v1': "
        f"json-schema:orders-v1 names a schema, but {JSON_SCHEMA_DIR} is not set"
    )


# --- schema-id and the schema registry lookup -------------------------------------------------


def registry(*known: int) -> tuple[Callable[[int], bool], list[int]]:
    asked: list[int] = []

    def lookup(number: int) -> bool:
        asked.append(number)
        return number in known

    return lookup, asked


def test_schema_id_registry_fails_closed_without_a_lookup(
    policy: BuiltinRecordValidationPolicy,
) -> None:
    with pytest.raises(InvalidRecord) as raised:
        policy.validate(topic("schema-id:registry"), record(value=schema_id(7)))
    assert raised.value.message == (
        "Record cannot be checked: rule schema-id:registry needs a schema registry, and the "
        "gateway has none configured (record.validation.policy=schema-id:registry)"
    )


def test_schema_id_registry_asks_the_lookup_for_the_records_id(
    policy: BuiltinRecordValidationPolicy,
) -> None:
    lookup, asked = registry(7, 258)
    policy.set_schema_lookup(lookup)
    policy.validate(topic("schema-id:registry"), record(value=schema_id(7, b"payload")))
    policy.validate(topic("schema-id:registry"), record(value=b"\x00\x00\x00\x01\x02"))
    with pytest.raises(InvalidRecord) as raised:
        policy.validate(topic("schema-id:registry"), record(value=schema_id(8)))
    assert raised.value.message == (
        "Record value has schema id 8, which the schema registry does not have "
        "(rule schema-id:registry) (record.validation.policy=schema-id:registry)"
    )
    with pytest.raises(InvalidRecord, match="schema id -1,"):
        policy.validate(topic("schema-id:registry"), record(value=b"\x00\xff\xff\xff\xff"))
    assert asked == [7, 258, 8, -1]


def test_schema_id_without_registry_never_asks_the_lookup(
    policy: BuiltinRecordValidationPolicy,
) -> None:
    lookup, asked = registry()
    policy.set_schema_lookup(lookup)
    policy.validate(topic("schema-id"), record(value=schema_id(99)))
    with pytest.raises(InvalidRecord, match="not magic byte 0"):
        policy.validate(topic("schema-id:registry"), record(value=b"\x02abcd"))
    assert asked == []


def test_a_lookup_that_fails_propagates_so_the_gateway_denies(
    policy: BuiltinRecordValidationPolicy,
) -> None:
    def unreachable(number: int) -> bool:
        raise ConnectionError("schema registry unreachable")

    policy.set_schema_lookup(unreachable)
    with pytest.raises(ConnectionError, match="unreachable"):
        policy.validate(topic("schema-id:registry"), record(value=schema_id(7)))


def test_registry_and_json_schema_combine(policy: BuiltinRecordValidationPolicy) -> None:
    lookup, asked = registry(7)
    policy.set_schema_lookup(lookup)
    value = "schema-id:registry;json-schema:orders-v1"
    policy.validate(topic(value), record(value=schema_id(7, b'{"id": "a", "amount": 1}')))
    with pytest.raises(InvalidRecord, match="schema registry does not have"):
        policy.validate(topic(value), record(value=schema_id(9, b'{"id": "a", "amount": 1}')))
    with pytest.raises(InvalidRecord, match="'amount' is a required property"):
        policy.validate(topic(value), record(value=schema_id(7, b'{"id": "a"}')))
    assert asked == [7, 9, 7]


def test_schema_id_subject_asks_whether_the_registry_lists_the_id_under_the_subject(
    policy: BuiltinRecordValidationPolicy,
) -> None:
    asked: list[tuple[int, str]] = []
    subjects = {7: {"orders-value"}, 8: {"payments-value"}}

    def in_subject(number: int, subject: str) -> bool:
        asked.append((number, subject))
        return subject in subjects.get(number, set())

    ids, asked_ids = registry(7, 8)
    policy.set_schema_lookup(ids)
    policy.set_schema_subject_lookup(in_subject)
    value = "schema-id:subject:orders-value"
    policy.validate(topic(value), record(value=schema_id(7, b"payload")))
    # Another topic's schema: the registry has it, so schema-id:registry would let it through.
    with pytest.raises(InvalidRecord) as raised:
        policy.validate(topic(value), record(value=schema_id(8)))
    assert raised.value.message == (
        "Record value has schema id 8, which the schema registry does not list under subject "
        "orders-value (rule schema-id:subject:orders-value) "
        "(record.validation.policy=schema-id:subject:orders-value)"
    )
    with pytest.raises(InvalidRecord, match="rule schema-id:subject:orders-value needs magic"):
        policy.validate(topic(value), record(value=b"{}"))
    with pytest.raises(InvalidRecord, match="rule schema-id:subject:orders-value needs a value"):
        policy.validate(topic(value), record(value=None))
    assert asked == [(7, "orders-value"), (8, "orders-value")]
    assert asked_ids == []


def test_schema_id_subject_fails_closed_without_a_lookup(
    policy: BuiltinRecordValidationPolicy,
) -> None:
    lookup, _ = registry(7)
    policy.set_schema_lookup(lookup)  # a plain lookup is not enough for a subject rule
    with pytest.raises(InvalidRecord) as raised:
        policy.validate(topic("schema-id:subject:orders-value"), record(value=schema_id(7)))
    assert raised.value.message.startswith(
        "Record cannot be checked: rule schema-id:subject:orders-value needs a schema registry"
    )
    assert isinstance(policy, UsesSchemaSubjectLookup)


# --- the proposal's sample policy -------------------------------------------------------------


def test_require_header_policy_is_the_proposals_sample() -> None:
    policy = RequireHeaderValidationPolicy()
    policy.configure({})
    assert policy.get_hints() == hints(True, 0, 0)
    sample = TopicMetadata(topic="payments", partition=2, validation_policy="trace-id")
    policy.validate(sample, record(headers=(("other", b""), ("trace-id", None))))
    for headers in [(), (("Trace-Id", b"1"),), (("trace-id-2", b"1"),)]:
        with pytest.raises(InvalidRecord) as raised:
            policy.validate(sample, record(headers=headers, key=b"k", value=b"v"))
        assert raised.value.message == (
            "Topic payments requires records to contain a header with key: trace-id"
        )
    policy.close()


@pytest.mark.parametrize("value", ["trace-id", "a;b", "json", "header:x"])
def test_require_header_policy_takes_the_whole_value_as_the_key(value: str) -> None:
    policy = RequireHeaderValidationPolicy()
    policy.validate(topic(value), record(headers=((value, b"1"),)))
    with pytest.raises(InvalidRecord):
        policy.validate(topic(value), record(headers=(("trace-id-x", b"1"), ("x", b"1"))))


def test_builtin_policy_keeps_the_samples_meaning_for_a_bare_value(
    policy: BuiltinRecordValidationPolicy,
) -> None:
    sample = RequireHeaderValidationPolicy()
    for headers in [(("trace-id", b"1"),), (), (("x", b"1"), ("trace-id", None))]:
        proxy = record(headers=headers)
        outcomes = []
        for judge in (sample, policy):
            try:
                judge.validate(topic("trace-id"), proxy)
                outcomes.append(True)
            except InvalidRecord:
                outcomes.append(False)
        assert outcomes[0] == outcomes[1], headers
    assert policy.hints_for("trace-id") == sample.get_hints()


# --- header rules alone: the gateway's shortcut ---------------------------------------------


@pytest.mark.parametrize(
    ("value", "keys"),
    [
        ("trace-id", ("trace-id",)),
        ("header:a;header:b", ("a", "b")),
        ("trace-id;tombstones-allowed", ("trace-id",)),
        ("trace-id;key-required", None),
        ("trace-id;json", None),
        ("trace-id;schema-id", None),
        ("trace-id;max-bytes:100", None),
        ("key-required", None),
        ("json-schema:unknown", None),
        ("jsn-schema:x", None),
    ],
)
def test_required_headers_are_offered_only_for_header_rules_alone(
    policy: BuiltinRecordValidationPolicy, value: str, keys: tuple[str, ...] | None
) -> None:
    assert policy.required_headers_for(value) == keys


@pytest.mark.parametrize("value", ["trace-id", "header:a;header:b", "a;b;tombstones-allowed"])
def test_a_record_with_the_required_headers_passes_and_one_without_does_not(
    policy: BuiltinRecordValidationPolicy, value: str
) -> None:
    """The contract the gateway relies on to skip validate for records with every key."""
    keys = policy.required_headers_for(value)
    assert keys
    policy.validate(topic(value), record(headers=tuple((key, None) for key in keys)))
    for missing in keys:
        with pytest.raises(InvalidRecord):
            policy.validate(
                topic(value), record(headers=tuple((k, b"") for k in keys if k != missing))
            )


def test_require_header_policy_offers_its_whole_value_as_the_key() -> None:
    sample = RequireHeaderValidationPolicy()
    assert isinstance(sample, RequiredHeadersOnly)
    assert sample.required_headers_for("a;b") == ("a;b",)


class _OneByOne(RecordValidationPolicy):
    """The built-in policy without required_headers_for: the gateway calls validate for
    every record."""

    def __init__(self, inner: BuiltinRecordValidationPolicy) -> None:
        self.inner = inner

    def get_hints(self) -> RecordIntrospectionHints:
        return self.inner.get_hints()

    def hints_for(self, validation_policy: str) -> RecordIntrospectionHints:
        return self.inner.hints_for(validation_policy)

    def validate(self, topic: TopicMetadata, record: RecordProxy) -> None:
        self.inner.validate(topic, record)


def partition_data(codec: str) -> bytes:
    """Two batches: the second's batch_index values continue from the first's."""
    first = [
        batch_record(0, b"k", b"v", ((b"trace-id", b"1"),)),
        batch_record(1, None, b"v", ()),
        batch_record(2, b"", None, ((b"tenant", b"t"), (b"trace-id", None))),
        batch_record(3, b"k", b"", ((b"Trace-Id", b"1"),)),
    ]
    second = [
        batch_record(0, b"k", b"v", ((b"tenant", b"t"),)),
        batch_record(1, b"k", b"v", ((b"trace-id", b""),)),
    ]
    return batch_with(codec, tuple(first)) + batch_with(codec, tuple(second))


def partition_of_values(codec: str) -> bytes:
    """Two batches of JSON values, good and bad, keys and headers that the rules ignore."""
    first = [
        batch_record(0, b"k", b'{"id": "a", "amount": 1}', ((b"trace-id", b"1"),)),
        batch_record(1, None, b"not json", ()),
        batch_record(2, b"", None, ()),
        batch_record(3, b"k", b'{"id": "b"}', ((b"x", None),)),
    ]
    second = [
        batch_record(0, b"k", b'{"id": "c", "amount": 0}', ()),
        batch_record(1, b"k", b'{"id": "d", "amount": "1"}', ()),
    ]
    return batch_with(codec, tuple(first)) + batch_with(codec, tuple(second))


SHORTCUT_CASES = [
    ("trace-id", partition_data),
    ("trace-id;tenant", partition_data),
    ("tenant;tombstones-allowed", partition_data),
    ("json", partition_of_values),
    ("json-schema:orders-v1", partition_of_values),
    ("json;tombstones-allowed", partition_of_values),
]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(
    ("value", "data"), SHORTCUT_CASES, ids=[value for value, _ in SHORTCUT_CASES]
)
def test_the_gateways_shortcuts_answer_as_validating_each_record(
    policy: BuiltinRecordValidationPolicy, codec: str, value: str, data: Callable[[str], bytes]
) -> None:
    """Header rules alone and value rules alone each take a shortcut past validate()."""
    shortcut = RecordValidator(policy, dry_run=False)
    one_by_one = RecordValidator(_OneByOne(policy), dry_run=False)
    assert (shortcut.required_headers(value), shortcut.value_check(value)) != (None, None)
    assert (one_by_one.required_headers(value), one_by_one.value_check(value)) == (None, None)

    outcome = shortcut.validate_partition("orders", 3, value, data(codec))

    assert outcome == one_by_one.validate_partition("orders", 3, value, data(codec))
    assert outcome.error is not None and outcome.error.record_errors


def test_the_shortcuts_are_taken(
    policy: BuiltinRecordValidationPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The point of the shortcuts is what they skip: for header rules, records that carry
    the keys are never read one by one (in Python), made into a RecordProxy nor handed to
    validate(); for value rules, no record is. (Answers alike either way; only this test
    sees the shortcut lost.)"""
    import gateway.record_validation as validation_module
    import protocol.records as reader_module

    readings: list[RecordReading] = []
    read_one_by_one: list[object] = []
    proxies: list[RecordProxy] = []
    validated: list[int] = []
    real_reader, real_full_reader = validation_module.read_records, reader_module._read_fully
    real_proxy, real_validate = validation_module.RecordProxy, policy.validate

    def reader(batch: BatchView, reading: RecordReading, **limits: int) -> BatchRecords:
        readings.append(reading)
        return real_reader(batch, reading, **limits)

    def full_reader(*args: object, **kwargs: object) -> object:
        read_one_by_one.append(args)
        return real_full_reader(*args, **kwargs)  # type: ignore[arg-type]

    def proxy(**fields: object) -> RecordProxy:
        proxies.append(real_proxy(**fields))  # type: ignore[arg-type]
        return proxies[-1]

    def validate(topic: TopicMetadata, record: RecordProxy) -> None:
        validated.append(1)
        real_validate(topic, record)

    monkeypatch.setattr(validation_module, "read_records", reader)
    monkeypatch.setattr(reader_module, "_read_fully", full_reader)
    monkeypatch.setattr(validation_module, "RecordProxy", proxy)
    monkeypatch.setattr(policy, "validate", validate)
    validator = RecordValidator(policy, dry_run=False)
    with_header = tuple(batch_record(i, b"k", b"v", ((b"trace-id", b"1"),)) for i in range(5))

    assert (
        validator.validate_partition("t", 0, "trace-id", batch_with("none", with_header)).error
        is None
    )
    assert [reading.lacking for reading in readings] == [("trace-id",)]
    assert (read_one_by_one, proxies, validated) == ([], [], [])

    lacking = tuple(
        batch_record(i, b"k", b"v", () if i == 2 else ((b"trace-id", b"1"),)) for i in range(5)
    )
    outcome = validator.validate_partition("t", 0, "trace-id", batch_with("none", lacking))
    assert outcome.error is not None and [i for i, _ in outcome.error.record_errors] == [2]
    assert (len(proxies), validated) == (1, [1])  # record 2 alone went to validate()

    readings.clear()
    proxies.clear()
    validated.clear()
    outcome = validator.validate_partition("t", 0, "json", partition_of_values("none"))
    assert outcome.error is not None and outcome.error.record_errors
    assert readings == [RecordReading(value_bytes=-1)] * 2  # values alone, in both batches
    assert (read_one_by_one, proxies, validated) == ([], [], [])


@pytest.mark.parametrize(
    ("value", "data"),
    [("trace-id", partition_data), ("json", partition_of_values)],
    ids=["headers", "values"],
)
def test_the_gateways_shortcuts_report_a_corrupt_batch_as_the_record_loop_does(
    policy: BuiltinRecordValidationPolicy, value: str, data: Callable[[str], bytes]
) -> None:
    sound = data("none")
    crc_broken = sound[:-1] + bytes([sound[-1] ^ 1])  # the second batch's CRC no longer matches
    too_few = reframe(batch_with("none"), record_count=6)
    # records examined: none when a CRC is bad; else those read before the corrupt one
    for broken, examined in ((crc_broken, 0), (data("zstd") + too_few, 6 + 5)):
        outcome = RecordValidator(policy, dry_run=False).validate_partition(
            "orders", 0, value, broken
        )
        expected = RecordValidator(_OneByOne(policy), dry_run=False).validate_partition(
            "orders", 0, value, broken
        )
        assert outcome == expected
        assert outcome.error is not None and outcome.error.error_code == 2
        assert (outcome.records, outcome.bytes) == (examined, len(broken))


# --- value rules alone: the gateway's other shortcut --------------------------------------------


@pytest.mark.parametrize(
    ("value", "offered"),
    [
        ("json", True),
        ("json-schema:orders-v1", True),
        ("schema-id", True),
        ("schema-id;json-schema:orders-v1", True),
        ("json;tombstones-allowed", True),
        ("json;trace-id", False),
        ("json;key-required", False),
        ("json;max-bytes:100", False),
        ("trace-id", False),
        ("tombstones-allowed", False),
        ("json-schema:unknown", False),
        ("jsn", False),
    ],
)
def test_value_checks_are_offered_only_for_value_rules_alone(
    policy: BuiltinRecordValidationPolicy, value: str, offered: bool
) -> None:
    assert isinstance(policy, ValueRulesOnly)
    assert (policy.value_check_for(value) is not None) is offered


SAMPLE_VALUES: list[bytes | None] = [
    None,
    b"",
    b"{}",
    b'{"id": "a", "amount": 1}',
    b'{"id": "a", "amount": -1}',
    b'{"id": 1, "amount": 1}',
    b"not json",
    b"\xff\xfe",
    b'"\\ud800"',
    b"123456789012345678901234567890",
    b"\x00\x00",
    schema_id(7, b'{"id": "a", "amount": 2}'),
    schema_id(7, b"{}"),
]


@pytest.mark.parametrize(
    "value",
    ["json", "json-schema:orders-v1", "schema-id", "schema-id;json", "json;tombstones-allowed"],
)
def test_a_value_check_answers_as_validate_does(
    policy: BuiltinRecordValidationPolicy, value: str
) -> None:
    """The contract the gateway relies on to hand values alone to the check."""
    check = policy.value_check_for(value)
    assert check is not None

    def answer(run: Callable[[bytes | None], None], sample: bytes | None) -> str | None:
        try:
            run(sample)
        except InvalidRecord as exc:
            return exc.message
        return None

    def validate(sample: bytes | None) -> None:
        policy.validate(topic(value), record(value=sample))

    answers = set()
    for sample in SAMPLE_VALUES:
        expected = answer(validate, sample)
        assert answer(check, sample) == expected, sample
        answers.add(expected is None)
    assert answers == {True, False}


# --- JSON: what the fast libraries must not change ---------------------------------------------


@pytest.mark.parametrize("digit_run", ["native", "python"])
def test_integers_beyond_64_bits_keep_every_digit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, digit_run: str
) -> None:
    if digit_run == "python":
        monkeypatch.setattr(records_module, "_has_digit_run", records_module._has_digit_run_python)
    big = 123456789012345678901234567890
    policy = BuiltinRecordValidationPolicy()
    policy.configure({JSON_SCHEMA_DIR: str(write_schemas(tmp_path / "s", big={"const": big}))})
    check = policy.value_check_for("json-schema:big")
    assert check is not None
    for validate in (
        lambda value: policy.validate(topic("json-schema:big"), record(value=value)),
        check,  # what the gateway calls for value rules alone
    ):
        validate(str(big).encode())
        with pytest.raises(InvalidRecord, match="was expected"):
            validate(str(big + 1).encode())
        # orjson would round both to the same float
        with pytest.raises(InvalidRecord, match="was expected"):
            validate(str(2**64).encode() + b"0" * 10)


def test_the_digit_run_check_in_c_answers_as_python() -> None:
    """policies/_digits.c skips ahead a window at a time; the Python version reads every
    byte. Random texts of digits and not, every run length from 1 to 24."""
    from policies._digits import has_digit_run  # built by setup.py, as make test installs

    rng = random.Random(20261121)
    runs = 0
    for _ in range(100_000):
        alphabet = rng.choice([b"0123456789", b"0123456789a", b"09a\x00\xff/:", b"1a"])
        value = bytes(rng.choice(alphabet) for _ in range(rng.randrange(60)))
        n = rng.randrange(1, 25)
        expected = records_module._has_digit_run_python(value, n)
        assert has_digit_run(value, n) == expected, (value, n)
        runs += expected
    assert 10_000 < runs < 90_000  # both answers were asked for, many times
    assert records_module._has_digit_run is has_digit_run
    with pytest.raises(ValueError):
        has_digit_run(b"1", 0)


@pytest.mark.parametrize("value", [b'"\\ud800"', b"1e400", b'{"n": -1e400}'])
def test_json_the_standard_library_takes_still_passes(
    policy: BuiltinRecordValidationPolicy, value: bytes
) -> None:
    policy.validate(topic("json"), record(value=value))


def test_a_lone_surrogate_is_checked_against_the_schema(tmp_path: Path) -> None:
    policy = BuiltinRecordValidationPolicy()
    policy.configure({JSON_SCHEMA_DIR: str(write_schemas(tmp_path / "s", s={"type": "string"}))})
    policy.validate(topic("json-schema:s"), record(value=b'"\\ud800"'))
    with pytest.raises(InvalidRecord, match="is not of type 'string'"):
        policy.validate(topic("json-schema:s"), record(value=b"[]"))


def test_patterns_are_ecma_262_as_json_schema_says(tmp_path: Path) -> None:
    digits = {"type": "string", "pattern": "^\\d+$"}
    policy = BuiltinRecordValidationPolicy()
    policy.configure({JSON_SCHEMA_DIR: str(write_schemas(tmp_path / "s", digits=digits))})
    policy.validate(topic("json-schema:digits"), record(value=b'"0123"'))
    with pytest.raises(InvalidRecord) as raised:
        policy.validate(topic("json-schema:digits"), record(value='"١٢"'.encode()))
    assert raised.value.message == (
        "Record value does not match the JSON schema of rule json-schema:digits: "
        "'١٢' does not match '^\\\\d+$' at $ (record.validation.policy=json-schema:digits)"
    )


def test_format_is_an_annotation_in_draft_07_too(tmp_path: Path) -> None:
    email = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "string",
        "format": "email",
    }
    policy = BuiltinRecordValidationPolicy()
    policy.configure({JSON_SCHEMA_DIR: str(write_schemas(tmp_path / "s", email=email))})
    policy.validate(topic("json-schema:email"), record(value=b'"not an address"'))


@pytest.mark.parametrize(
    ("schema", "place"),
    [
        ({"type": "string", "pattern": "^a{,2}$"}, "#/pattern"),
        ({"properties": {"id": {"pattern": "^[a-z]{,3}$"}}}, "#/properties/id/pattern"),
        ({"patternProperties": {"^x{,2}$": {}}}, "#/patternProperties"),
        (
            {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "dependencies": {"a": ["b"], "c": {"properties": {"d": {"pattern": "^d{,2}$"}}}},
            },
            "#/dependencies/c/properties/d/pattern",
        ),
    ],
)
def test_a_pattern_only_python_reads_stops_configure(
    tmp_path: Path, schema: object, place: str
) -> None:
    """Python's re reads a{,2} (ECMA-262 does not) and was left to match it on records: the
    schema was checked by the jsonschema package alone, whose re backtracks without bound."""
    directory = write_schemas(tmp_path / "s", upto2=schema, **{"orders-v1": ORDER_SCHEMA})
    with pytest.raises(ValueError, match=f"upto2.json: {place}: .* is not an ECMA-262"):
        BuiltinRecordValidationPolicy().configure({JSON_SCHEMA_DIR: str(directory)})


BACKTRACKS = "^(\\w+\\s?)*$"
"""Words with a space between: Python's re took 0.26 s to reject 22 letters and a "!", four
times as long with each two letters more (a policy thread cannot be stopped; the built-in
rules run on the event loop)."""
SLOW_FOR_PYTHON = "a" * 60 + "!"


@pytest.mark.parametrize(
    ("schema", "value", "problem"),
    [
        (
            {"properties": {"name": {"type": "string", "pattern": BACKTRACKS}}},
            {"name": SLOW_FOR_PYTHON},
            f"'{SLOW_FOR_PYTHON}' does not match",
        ),
        (
            {"patternProperties": {BACKTRACKS: {"type": "string"}}, "additionalProperties": False},
            {SLOW_FOR_PYTHON: "x"},
            f"'{SLOW_FOR_PYTHON}' does not match any of the regexes",
        ),
        (
            {"propertyNames": {"pattern": BACKTRACKS}},
            {SLOW_FOR_PYTHON: "x"},
            f"'{SLOW_FOR_PYTHON}' does not match",
        ),
        (
            {
                "patternProperties": {BACKTRACKS: {"type": "string"}},
                "unevaluatedProperties": False,
            },
            {SLOW_FOR_PYTHON: 1},
            "Unevaluated properties are not allowed",
        ),
        (
            {
                "$schema": "https://json-schema.org/draft/2019-09/schema",
                "patternProperties": {BACKTRACKS: {"type": "string"}},
                "unevaluatedProperties": False,
            },
            {SLOW_FOR_PYTHON: 1},
            "Unevaluated properties are not allowed",
        ),
        (
            {"items": {"type": "string", "pattern": BACKTRACKS}},
            ["ok words", SLOW_FOR_PYTHON],
            f"'{SLOW_FOR_PYTHON}' does not match",
        ),
    ],
)
def test_pythons_re_never_matches_a_record(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    schema: dict[str, object],
    value: object,
    problem: str,
) -> None:
    """The rejection of a value jsonschema-rs refuses is worded by the jsonschema package,
    whose pattern keywords called Python's re.search: hours for these values, on the event
    loop. Counted, not timed: re.search must not be called at all."""
    directory = write_schemas(tmp_path / "s", names=schema)
    policy = BuiltinRecordValidationPolicy()
    policy.configure({JSON_SCHEMA_DIR: str(directory)})
    called: list[str] = []
    search = re.search

    def trap(pattern: str, string: str, flags: int = 0) -> re.Match[str] | None:
        if string in (SLOW_FOR_PYTHON, "ok words", "ok", "two words"):
            called.append(string)
            raise AssertionError("Python's re matched a record's string")
        return search(pattern, string, flags)  # pytest.raises(match=...)

    monkeypatch.setattr(re, "search", trap)
    check = policy.value_check_for("json-schema:names")
    assert check is not None
    for validate in (
        lambda v: policy.validate(topic("json-schema:names"), record(value=v)),
        check,
    ):
        with pytest.raises(InvalidRecord, match=re.escape(problem)):
            validate(json.dumps(value).encode())
    assert called == []
    policy.validate(topic("json-schema:names"), record(value=b'{"ok": "two words"}'))


def test_a_lone_surrogate_does_not_take_a_pattern_to_another_reading(tmp_path: Path) -> None:
    """jsonschema-rs cannot take a string with a lone surrogate, and the jsonschema package
    decided alone, with Python's reading of the pattern: its \\d is any Unicode digit, so
    Arabic-Indic digits passed ^\\d+ where ECMA-262's [0-9] does not."""
    digits = {"properties": {"id": {"type": "string", "pattern": "^\\d+"}}}
    policy = BuiltinRecordValidationPolicy()
    policy.configure({JSON_SCHEMA_DIR: str(write_schemas(tmp_path / "s", digits=digits))})
    with pytest.raises(InvalidRecord, match="holds a lone surrogate"):
        policy.validate(topic("json-schema:digits"), record(value='{"id": "١٢\\ud800"}'.encode()))
    with pytest.raises(InvalidRecord, match="does not match"):
        policy.validate(topic("json-schema:digits"), record(value='{"id": "١٢"}'.encode()))
    with pytest.raises(InvalidRecord, match="holds a lone surrogate"):
        policy.validate(topic("json-schema:digits"), record(value=b'{"id": "12\\ud800"}'))
    policy.validate(topic("json-schema:digits"), record(value=b'{"id": "12", "x": "\\ud800"}'))


# --- JSON: a key given twice ---------------------------------------------------------------------

TWICE = [
    # (a value giving a key twice, that key, the value with it once)
    (b'{"id": "o-1", "amount": -5, "amount": 10}', "'amount'", b'{"id": "o-1", "amount": 10}'),
    (  # the same key, escaped
        b'{"id": "o-1", "amount": 1, "\\u0061mount": 2}',
        "'amount'",
        b'{"id": "o-1", "amount": 1, "\\u0062mount": 2}',
    ),
    (
        b'{"id": "o-1", "amount": 1, "x": [{"k": 1, "k": 2}]}',
        "'k'",
        b'{"id": "o-1", "amount": 1, "x": [{"k": 1}, {"k": 2}]}',
    ),
    (
        b'{"id": "o:1\\"", "amount": 1, "x": {"a": {}, "a": {}}}',
        "'a'",
        b'{"id": "o:1\\"", "amount": 1, "x": {"a": {}, "a:": {}}}',
    ),
]


@pytest.mark.parametrize("keys_once", ["native", "python"])
@pytest.mark.parametrize("rule", ["json", "json-schema:orders-v1", "schema-id;json"])
@pytest.mark.parametrize(
    ("value", "key", "once"), TWICE, ids=["last-valid", "escaped", "in-a-list", "colon-in-string"]
)
def test_a_key_given_twice_in_one_object_is_rejected(
    schema_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    keys_once: str,
    rule: str,
    value: bytes,
    key: str,
    once: bytes,
) -> None:
    """json, orjson and jsonschema-rs keep the last of two, so {"amount": -5, "amount": 10}
    passed "minimum": 0, while a reader that keeps the first (simdjson's, several Go ones)
    hands the consumer -5, and serde's derive and Gson's maps refuse the record."""
    if keys_once == "python":
        monkeypatch.setattr(records_module, "_keys_once", records_module._keys_once_python)
        monkeypatch.setattr(
            records_module,
            "_keys_once_and_suspects",
            records_module._keys_once_and_suspects_python,
        )
    policy = BuiltinRecordValidationPolicy()
    policy.configure({JSON_SCHEMA_DIR: str(schema_dir)})
    if rule.startswith("schema-id"):
        value, once = schema_id(7, value), schema_id(7, once)
    check = policy.value_check_for(rule)
    assert check is not None
    for validate in (lambda v: policy.validate(topic(rule), record(value=v)), check):
        with pytest.raises(InvalidRecord, match=f"gives the key {re.escape(key)} twice"):
            validate(value)
    check(once)
    policy.validate(topic(rule), record(value=once))


def test_the_key_count_in_c_answers_as_decoding_again() -> None:
    """Random documents, with keys given twice or not, escapes, colons and quotes in strings."""
    from policies._digits import count_keys, count_members

    rng = random.Random(20261125)
    keys = ["a", "b", "\\u0061", "c:d", 'e\\"', "\\\\", ""]
    duplicated = 0

    def node(depth: int) -> str:
        kind = rng.randrange(4 if depth < 4 else 2)
        if kind == 0:
            return rng.choice(["1", "true", "null", '"x:\\"y"', '"\\\\"', "-2.5e3"])
        if kind == 1:
            return '"' + rng.choice(keys) + '"'
        if kind == 2:
            return "[" + ",".join(node(depth + 1) for _ in range(rng.randrange(4))) + "]"
        members = [f'"{rng.choice(keys)}": {node(depth + 1)}' for _ in range(rng.randrange(4))]
        return "{" + ", ".join(members) + "}"

    for _ in range(5_000):
        document = node(0).encode()
        decoded = json.loads(document)
        once = records_module._keys_once_python(document, decoded)
        assert (count_members(document) == count_keys(decoded)) == once, document
        duplicated += not once
    assert 200 < duplicated < 4_800  # both answers were asked for, many times
    assert records_module._keys_once is not records_module._keys_once_python
    with pytest.raises(RecursionError):
        count_keys(_deep(5_000))
    deep_objects: dict[str, object] = {}
    for _ in range(5_000):
        deep_objects = {"a": deep_objects}
    with pytest.raises(RecursionError):
        count_keys(deep_objects)


def _deep(depth: int) -> object:
    document: object = {}
    for _ in range(depth):
        document = [document]
    return document


def test_json_orjson_reads_but_too_deep_to_count_is_rejected(
    policy: BuiltinRecordValidationPolicy,
) -> None:
    """orjson reads 1024 levels; counting its keys stops at the recursion limit."""
    deep = b"[" * 1000 + b"{}" + b"]" * 1000
    with pytest.raises(InvalidRecord, match="nested too deeply"):
        policy.validate(topic("json"), record(value=deep))


# --- JSON Schema: the wording of a rejection is bounded work -------------------------------------


def test_unique_items_costs_the_wording_linear_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The jsonschema package's uniqueItems compared every pair of objects: 4,000 of them, a
    50 KB value with another mistake to word, took it 27 s on the event loop (a 1 MB one,
    hours). Counted, not timed: the equality of two items is never asked."""
    import jsonschema._utils

    schema = {"properties": {"id": {"type": "string"}, "items": {"uniqueItems": True}}}
    policy = BuiltinRecordValidationPolicy()
    policy.configure({JSON_SCHEMA_DIR: str(write_schemas(tmp_path / "s", u=schema))})
    compared = 0
    equal = jsonschema._utils.equal

    def counting(one: object, two: object) -> bool:
        nonlocal compared
        compared += 1
        return equal(one, two)

    monkeypatch.setattr(jsonschema._utils, "equal", counting)
    many = [{"a": i} for i in range(1_000)]
    for value, problem in [
        ({"id": 5, "items": many}, "5 is not of type 'string' at $.id"),
        ({"id": "x", "items": [*many, {"a": 0}]}, "has non-unique elements at $.items"),
        ({"id": "x", "items": [True, 1]}, None),
        ({"id": "x", "items": [1, 1.0]}, "has non-unique elements"),
        ({"id": "x", "items": [{"a": [1, {"b": 2}]}, {"a": [1, {"b": 2.0}]}]}, "non-unique"),
    ]:
        document = json.dumps(value).encode()
        assert len(document) <= 16 * 1024  # worded by the jsonschema package
        if problem is None:
            policy.validate(topic("json-schema:u"), record(value=document))
            continue
        with pytest.raises(InvalidRecord, match=re.escape(problem)):
            policy.validate(topic("json-schema:u"), record(value=document))
    assert compared < 100  # 499,500 pairs before


def test_a_large_rejection_is_worded_by_jsonschema_rs_stopping_at_its_first_error(
    tmp_path: Path,
) -> None:
    """Each error's message holds its instance whole: a list nested 250 deep around 900 KB
    held the event loop 2.8 s in the jsonschema package, and 1.2 s in jsonschema-rs's
    iter_errors, which makes every error first. Counted: neither is asked."""
    nested = {"type": "object", "items": {"$ref": "#"}}
    policy = BuiltinRecordValidationPolicy()
    policy.configure({JSON_SCHEMA_DIR: str(write_schemas(tmp_path / "s", n=nested))})

    def refuse(*args: object, **kwargs: object) -> object:
        raise AssertionError("asked for every error")

    class FirstErrorOnly:
        def __init__(self, fast: Any) -> None:
            self.is_valid, self.validate, self.iter_errors = fast.is_valid, fast.validate, refuse

    class NoReference:
        iter_errors = staticmethod(refuse)

    (name, schema), *_ = policy._schemas.items()
    policy._schemas = {
        name: dataclasses.replace(schema, fast=FirstErrorOnly(schema.fast), reference=NoReference())
    }
    document = b"[" * 250 + json.dumps(["x" * 1000] * 900).encode() + b"]" * 250
    with pytest.raises(InvalidRecord, match='is not of type "object" at \\$ '):
        policy.validate(topic("json-schema:n"), record(value=document))


def test_a_large_value_jsonschema_rs_cannot_take_is_rejected_unchecked(tmp_path: Path) -> None:
    """A lone surrogate in a string the schema checks left the jsonschema package to decide
    alone, whatever the size (and its time grows faster than the size)."""
    schema = {"type": "array", "items": {"enum": ["x", "y"]}}
    policy = BuiltinRecordValidationPolicy()
    policy.configure({JSON_SCHEMA_DIR: str(write_schemas(tmp_path / "s", s=schema))})
    policy.validate(topic("json-schema:s"), record(value=b'["x", "y"]'))
    with pytest.raises(InvalidRecord, match="'\\\\ud800' is not one of"):
        policy.validate(topic("json-schema:s"), record(value=b'["\\ud800", "x"]'))
    large = b'["\\ud800", ' + b'"x", ' * 5_000 + b'"x"]'
    with pytest.raises(InvalidRecord, match="cannot be checked: jsonschema-rs cannot take it"):
        policy.validate(topic("json-schema:s"), record(value=large))


def test_wording_a_rejection_matches_a_bounded_number_of_strings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a backreference a pattern backtracks, up to a limit per string (fancy-regex's
    million steps took 34 ms): 400 failing strings took 12 s to word. The jsonschema package
    now finds at most 64 errors before picking one. Counted, not timed."""
    schema = {"type": "array", "items": {"type": "string", "pattern": "^(\\w+\\s?)*\\1$"}}
    policy = BuiltinRecordValidationPolicy()
    policy.configure({JSON_SCHEMA_DIR: str(write_schemas(tmp_path / "s", b=schema))})
    searched = 0
    search = records_module._EcmaPatterns.search

    def counting(self: Any, pattern: str, string: str) -> bool:
        nonlocal searched
        searched += 1
        return search(self, pattern, string)

    monkeypatch.setattr(records_module._EcmaPatterns, "search", counting)
    document = json.dumps(["a" * 30 + "!"] * 400).encode()
    assert len(document) <= 16 * 1024  # worded by the jsonschema package
    with pytest.raises(InvalidRecord, match="does not match"):
        policy.validate(topic("json-schema:b"), record(value=document))
    assert 0 < searched <= 64


@pytest.mark.parametrize("suspects", ["c", "python"])
def test_a_number_whose_double_is_another_number_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, suspects: str
) -> None:
    """Numbers were judged as doubles: 1000.0000000000000000001 rounds to 1000.0, an integer
    within a maximum of 1000, while a consumer that keeps every digit (BigDecimal, Python's
    decimal, PostgreSQL numeric) reads a number above it, and no integer; -1e-400 rounds to
    -0.0, which an exclusiveMaximum of 0 takes as 0. Such a number is refused, through the
    fast path and the worded one. A number written as its double prints (as languages print
    doubles), or with zeros that change nothing, is judged as before; so is every number
    under a plain json rule, which judges no number. Zeros alone move a number of one
    significant digit out of the doubles' range: 0.<400 zeros>1 passed as 0.0."""
    if suspects == "python":
        monkeypatch.setattr(
            records_module, "_double_suspects", records_module._double_suspects_python
        )
        monkeypatch.setattr(
            records_module,
            "_keys_once_and_suspects",
            records_module._keys_once_and_suspects_python,
        )
    schemas = write_schemas(
        tmp_path / "s",
        n={"type": "integer", "maximum": 1000},
        tiny={"type": "number", "exclusiveMaximum": 0},
        any={"type": "object"},
    )
    policy = BuiltinRecordValidationPolicy()
    policy.configure({JSON_SCHEMA_DIR: str(schemas)})
    refused = [
        ("json-schema:n", b"1000.0000000000000000001", "1000.0"),
        ("json-schema:n", b"1000.000000000000001", "1000.0"),
        ("json-schema:n", b"999.99999999999999999", "1000.0"),
        ("json-schema:tiny", b"-1e-400", "-0.0"),
        ("json-schema:tiny", b"-1E-0400", "-0.0"),
        ("json-schema:tiny", b"-1e-99999999999999999999", "-0.0"),  # past Decimal's exponents
        ("json-schema:any", b'{"a": ["x", {"b": 0.12345678901234567891}]}', "0.12345678901234568"),
        # One significant digit and no exponent, moved out of the doubles' range by zeros.
        ("json-schema:n", b"0." + b"0" * 400 + b"1", "0.0"),
        ("json-schema:any", b'{"a": [1' + b"0" * 400 + b".0]}", "inf"),
        # 16 significant digits, where doubles are further apart than the 16th digit
        ("json-schema:any", b'{"a": 9.000000000000001}', "9.000000000000002"),
        # longer than any double prints
        ("json-schema:any", b'{"a": 1000.' + b"0" * 70 + b"1}", "1000.0"),
    ]
    for rule, value, double in refused:
        check = policy.value_check_for(rule)
        assert check is not None
        with pytest.raises(InvalidRecord, match=f"judge as the double {re.escape(double)} "):
            policy.validate(topic(rule), record(value=value))
        with pytest.raises(InvalidRecord, match=f"judge as the double {re.escape(double)} "):
            check(value)
    accepted = [
        ("json-schema:n", b"1000"),
        ("json-schema:n", b"1000.000000000000000000"),
        ("json-schema:n", b"1.0e3"),
        ("json-schema:tiny", b"-0.30000000000000004"),
        ("json-schema:n", b"0.0e-99999999999999999999"),
        ("json-schema:tiny", b"-1.2345678901234568e-300"),
        ("json-schema:n", b"1." + b"0" * 200),
        ("json-schema:tiny", b"-0." + b"0" * 310 + b"1"),  # the double -1e-311 exactly
        ("json-schema:any", b'{"s": "1000.0000000000000000001", "t": 0.1, "u": 1e-5}'),
        ("json-schema:any", b'{"id": 123456789012345678901234567890}'),
    ]
    for rule, value in accepted:
        policy.validate(topic(rule), record(value=value))
        check = policy.value_check_for(rule)
        assert check is not None
        check(value)
    policy.validate(topic("json"), record(value=b"1000.0000000000000000001"))


def test_numbers_that_read_alike_however_written_are_told_in_c(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A number written otherwise than its double prints (30000000000000004e-17 for
    0.30000000000000004) went to Python to be told one by one, some 2-4 us each: a 1 MiB
    record of them held the event loop 140-210 ms in one step, ten times one of short
    numbers. The C scan now tells that it is the same number; Python is asked of none.
    Counted, not timed."""
    asked: list[str] = []
    reads_otherwise = records_module._reads_otherwise

    def counting(text: str, double: float) -> bool:
        asked.append(text)
        return reads_otherwise(text, double)

    monkeypatch.setattr(records_module, "_reads_otherwise", counting)
    policy = BuiltinRecordValidationPolicy()
    policy.configure({JSON_SCHEMA_DIR: str(write_schemas(tmp_path / "s", a={"type": "array"}))})
    alike = ["30000000000000004e-17", "0.300000000000000040", "1.0" + "0" * 200, "-0.0e-400"]
    policy.validate(topic("json-schema:a"), record(value=f"[{', '.join(alike * 1_000)}]".encode()))
    assert asked == []
    with pytest.raises(InvalidRecord, match="the number 30000000000000005e-17,"):
        policy.validate(topic("json-schema:a"), record(value=b"[30000000000000005e-17]"))
    assert set(asked) == {"30000000000000005e-17"}  # the fast path and the worded one


def test_the_double_suspects_in_c_answer_as_decoding_again() -> None:
    """Random numbers in random documents, some in strings, with escapes before them; the
    one-pass scan_json gives the same suspects and the same member count."""
    from policies._digits import count_members, double_suspects, scan_json

    rng = random.Random(20261126)

    def number() -> str:
        digits = "".join(rng.choice("0000123456789") for _ in range(rng.randrange(1, 25)))
        whole = digits.lstrip("0") or "0"
        text = rng.choice(["", "-"]) + whole[: rng.randrange(1, len(whole) + 1)]
        if rng.random() < 0.7:
            text += "." + "".join(rng.choice("0123456789") for _ in range(rng.randrange(1, 22)))
        if rng.random() < 0.4:
            text += rng.choice("eE") + rng.choice(["", "+", "-"]) + str(rng.randrange(0, 500))
        return text

    found = 0
    for _ in range(5_000):
        items = [
            rng.choice([number(), f'"{number()}"', '"\\\\\\\\"', '"a\\"b"', "true"])
            for _ in range(rng.randrange(1, 6))
        ]
        document = ("[" + ", ".join(items) + "]").encode()
        expected = records_module._double_suspects_python(document)
        assert double_suspects(document) == expected, document
        assert scan_json(document) == (count_members(document), expected), document
        found += bool(expected)
    assert 500 < found < 4_500  # both answers were asked for, many times
    # Zeros around the 100 digits past which a number is asked, and past the doubles' range;
    # a number that is its double's repr, however written, is not listed.
    for zeros in (98, 99, 100, 101, 330, 400):
        for text in (f"0.{'0' * zeros}1", f"1{'0' * zeros}.0", f"-0.{'0' * zeros}5e-7"):
            document = f'["\\"", {text}, 30000000000000004e-17, 1.0{"0" * zeros}]'.encode()
            expected = records_module._double_suspects_python(document)
            assert double_suspects(document) == expected, document
            assert expected == ([text.encode()] if zeros >= 330 else []), document
    assert records_module._double_suspects is double_suspects


@pytest.mark.parametrize(
    "number",
    [
        "0.0000000000000000123",  # zeros before the first digit are not significant
        "-0.000000000000000000000010e-5",
        "1.5e0001",  # zeros leading an exponent are not its digits
        "2E+007",
        "1.23456789012345e0",  # 15 significant digits, not as its double prints
        "0.30000000000000004",  # as its double prints
        "1.2345678901234568e-300",
        "9.000000000000001",  # 16 significant digits: the double is 9.000000000000002
        "1000." + "0" * 70 + "1",  # longer than any double prints
        "1." + "0" * 62,  # as long as the longest number written out and compared
        "1." + "0" * 61 + "1",
        "-9.99999999999999999e-999",
    ],
)
def test_the_double_suspects_in_c_answer_as_decoding_again_at_the_edges(number: str) -> None:
    """Numbers the random ones above seldom write: each alone, in an array and as an
    object's member after a key with a colon and an escaped quote."""
    from policies._digits import count_members, double_suspects, scan_json

    for document in (number, f"[{number}, {number}]", f'{{"k:\\"": {number}}}'):
        encoded = document.encode()
        expected = records_module._double_suspects_python(encoded)
        assert double_suspects(encoded) == expected, document
        assert scan_json(encoded) == (count_members(encoded), expected), document
        assert count_members(encoded) == records_module._count_keys(json.loads(encoded)), document
