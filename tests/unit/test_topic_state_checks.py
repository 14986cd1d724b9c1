"""The pure checks behind the topic-state routes (issue 11 items 5 and 8): which
``record.validation.policy`` values the gateway stores, what CreateTopics refuses before any
policy (as Kafka's controller does), what a count of -1 is judged as, and
``upstream.broker_defaults``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.config import (
    TANSU_BROKER_DEFAULTS,
    BrokerDefaults,
    ConfigError,
    HostPort,
    from_mapping,
    with_embedded_upstream,
)
from gateway.handlers._validation_policy import MAX_VALUE_BYTES, value_problem
from gateway.handlers.create_topics import _metadata, refusal
from policies.builtin import RequireHeaderValidationPolicy
from policies.records import JSON_SCHEMA_DIR, BuiltinRecordValidationPolicy
from policies.rules import UnknownDefaults
from protocol.create_topics import TopicSpec
from protocol.results import ItemError

pytestmark = pytest.mark.unit

KEY = "record.validation.policy"


@pytest.fixture
def builtin(tmp_path: Path) -> BuiltinRecordValidationPolicy:
    (tmp_path / "orders-v1.json").write_text(json.dumps({"type": "object"}))
    policy = BuiltinRecordValidationPolicy()
    policy.configure({JSON_SCHEMA_DIR: str(tmp_path)})
    return policy


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("trace-id", None),
        ("header:trace-id;key-required;json-schema:orders-v1;max-bytes:65536", None),
        ("x" * MAX_VALUE_BYTES, None),
        (
            "max-bytes:0",
            f"Invalid value max-bytes:0 for configuration {KEY}: rule 'max-bytes:0' needs a "
            "whole number of bytes from 1 to 2147483647",
        ),
        (
            "jsn-schema:orders-v1",
            f"Invalid value jsn-schema:orders-v1 for configuration {KEY}: unknown rule "
            "'jsn-schema' in 'jsn-schema:orders-v1' (rules: header, json, json-schema, "
            "key-required, max-bytes, schema-id, tombstones-allowed; write header:<key> for a "
            "header key that contains ':')",
        ),
        ("", f"Invalid value  for configuration {KEY}: it is empty"),
        (
            "json-schema:payments-v2",
            f"Invalid value json-schema:payments-v2 for configuration {KEY}: json-schema:"
            "payments-v2 names a schema the gateway has not loaded (schemas: orders-v1)",
        ),
        (
            "x" * (MAX_VALUE_BYTES + 1),
            f"Invalid value of {MAX_VALUE_BYTES + 1} bytes for configuration {KEY}: the gateway "
            f"stores at most {MAX_VALUE_BYTES} bytes",
        ),
        (
            "é" * (MAX_VALUE_BYTES // 2 + 1),  # counted in UTF-8 bytes, not characters
            f"Invalid value of {MAX_VALUE_BYTES + 2} bytes for configuration {KEY}: the gateway "
            f"stores at most {MAX_VALUE_BYTES} bytes",
        ),
    ],
    ids=[
        "bare-header",
        "every-rule",
        "at-the-cap",
        "max-bytes-0",
        "unknown-rule",
        "empty",
        "unknown-schema",
        "over-the-cap",
        "over-the-cap-in-utf8",
    ],
)
def test_values_the_builtin_policy_cannot_apply_are_refused(
    builtin: BuiltinRecordValidationPolicy, value: str, problem: str | None
) -> None:
    assert value_problem(value, builtin) == problem


def test_a_plugin_reads_values_its_own_way_so_only_the_size_is_checked() -> None:
    plugin = RequireHeaderValidationPolicy()
    assert value_problem("max-bytes:0", plugin) is None
    assert value_problem("x" * (MAX_VALUE_BYTES + 1), plugin) is not None


def spec(
    *,
    partitions: int = 1,
    replication_factor: int = 1,
    assignments: tuple[tuple[int, tuple[int, ...]], ...] = (),
    configs: tuple[tuple[str, str | None], ...] = (),
) -> TopicSpec:
    return TopicSpec(
        name="orders",
        num_partitions=partitions,
        replication_factor=replication_factor,
        assignments=assignments,
        configs=configs,
    )


BAD_POLICY = ItemError(error_code=40, error_message="bad policy")


def no_policy_accepted(value: str) -> ItemError:
    return BAD_POLICY


def assigned(*assignments: tuple[int, tuple[int, ...]]) -> TopicSpec:
    """A topic with manual assignments and counts of -1."""
    return spec(partitions=-1, replication_factor=-1, assignments=assignments)


@pytest.mark.parametrize(
    ("topic", "answer"),
    [
        (spec(), None),
        (spec(partitions=-1, replication_factor=-1), None),
        (spec(partitions=-1, replication_factor=-1, assignments=((0, (1,)),)), None),
        (
            spec(configs=(("retention.ms", "1"), ("cleanup.policy", None), ("segment.ms", None))),
            (40, "Null value not supported for topic configs: cleanup.policy,segment.ms"),
        ),
        (
            spec(configs=(("retention.ms", "1"), ("retention.ms", None))),
            (40, "Null value not supported for topic configs: retention.ms"),
        ),
        (
            spec(configs=(("retention.ms", "1"), ("retention.ms", "2"))),
            (42, "Error due to duplicate config keys"),
        ),
        (spec(configs=((KEY, "whatever"),)), (40, "bad policy")),
        (
            spec(partitions=-1, replication_factor=3, assignments=((0, (1,)),)),
            (
                42,
                "A manual partition assignment was specified, but replication factor was not "
                "set to -1.",
            ),
        ),
        (
            spec(partitions=40, replication_factor=-1, assignments=((0, (1,)),)),
            (
                42,
                "A manual partition assignment was specified, but numPartitions was not set to -1.",
            ),
        ),
        (
            spec(replication_factor=0),
            (38, "Replication factor must be larger than 0, or -1 to use the default value."),
        ),
        (
            spec(replication_factor=-2),
            (38, "Replication factor must be larger than 0, or -1 to use the default value."),
        ),
        (
            spec(partitions=0),
            (37, "Number of partitions was set to an invalid non-positive value."),
        ),
        (
            spec(partitions=-5),
            (37, "Number of partitions was set to an invalid non-positive value."),
        ),
        # Configs before counts, as Kafka's controller checks them.
        (
            spec(partitions=0, configs=(("retention.ms", None),)),
            (40, "Null value not supported for topic configs: retention.ms"),
        ),
        (
            assigned((0, (1,)), (1, (2,)), (0, (3,))),
            (39, "Found multiple manual partition assignments for partition 0"),
        ),
        (
            assigned((0, (1,)), (1, ())),
            (39, "The manual partition assignment includes an empty replica list."),
        ),
        (
            assigned((0, (3, 1, 3, 1))),
            (39, "The manual partition assignment includes the broker 1 more than once."),
        ),
        (
            assigned((0, (1, 2)), (1, (1,))),
            (
                39,
                "The manual partition assignment includes a partition with 1 replica(s), but "
                "this is not consistent with previous partitions, which have 2 replica(s).",
            ),
        ),
        (
            assigned((1, (1,)), (2, (1,))),
            (39, "partitions should be a consecutive 0-based integer sequence"),
        ),
        (
            assigned((0, (1,)), (-1, (1,))),
            (39, "partitions should be a consecutive 0-based integer sequence"),
        ),
        # Counts before assignments, as Kafka checks them.
        (
            spec(partitions=2, replication_factor=-1, assignments=((0, ()),)),
            (
                42,
                "A manual partition assignment was specified, but numPartitions was not set to -1.",
            ),
        ),
        (assigned((1, (2, 3)), (0, (3, 2))), None),
    ],
    ids=[
        "plain",
        "defaults",
        "assignments",
        "nulls",
        "null-after-a-value",
        "key-twice",
        "bad-policy",
        "assignments-and-replication-factor",
        "assignments-and-partitions",
        "zero-replicas",
        "negative-replicas",
        "zero-partitions",
        "negative-partitions",
        "configs-first",
        "partition-twice",
        "empty-replicas",
        "broker-twice",
        "replica-counts-differ",
        "not-from-0",
        "negative-index",
        "counts-first",
        "out-of-order-but-whole",
    ],
)
def test_create_topics_refuses_what_kafka_refuses_before_any_policy(
    topic: TopicSpec, answer: tuple[int, str] | None
) -> None:
    refused = refusal(topic, no_policy_accepted)
    assert (None if refused is None else (refused.error_code, refused.error_message)) == answer


@pytest.mark.parametrize(
    ("topic", "defaults", "judged"),
    [
        (spec(partitions=6, replication_factor=2), BrokerDefaults(), (6, 2)),
        (spec(partitions=-1, replication_factor=-1), TANSU_BROKER_DEFAULTS, (3, 1)),
        (spec(partitions=-1, replication_factor=2), BrokerDefaults(num_partitions=7), (7, 2)),
        (
            spec(partitions=-1, replication_factor=-1),
            BrokerDefaults(default_replication_factor=3),
            "num.partitions",
        ),
        (
            spec(partitions=4, replication_factor=-1),
            BrokerDefaults(num_partitions=7),
            "default.replication.factor",
        ),
    ],
    ids=["given", "stated", "partitions-stated", "partitions-unknown", "replicas-unknown"],
)
def test_a_default_is_judged_as_known_or_said_to_be_unknown(
    topic: TopicSpec, defaults: BrokerDefaults, judged: tuple[int, int] | str
) -> None:
    """An unknown default is no denial by itself: the policies that need it deny with why
    (tests/inproc/test_kafkajs.py)."""
    metadata = _metadata(topic, defaults)
    if isinstance(judged, str):
        assert isinstance(metadata, UnknownDefaults)
        unknown = (
            metadata.partitions_unknown
            if judged == "num.partitions"
            else metadata.replication_factor_unknown
        )
        assert unknown == (
            f"Topic 'orders' leaves {judged} to the broker's default (-1), which the gateway "
            "cannot read, so its policies cannot judge the topic; give the count, or state the "
            f"broker's default in the gateway's upstream.broker_defaults.{judged}"
        )
    else:
        assert not isinstance(metadata, UnknownDefaults)
        assert (metadata.num_partitions, metadata.replication_factor) == judged


def config_with(broker_defaults: Any) -> Any:
    return from_mapping(
        {"upstream": {"bootstrap_servers": "k:9092", "broker_defaults": broker_defaults}}, "g.yaml"
    )


def test_broker_defaults_are_read_in_kafkas_names() -> None:
    stated = config_with({"num.partitions": 6, "default.replication.factor": 3})
    assert stated.upstream.broker_defaults == BrokerDefaults(
        num_partitions=6, default_replication_factor=3
    )
    assert config_with(None).upstream.broker_defaults == BrokerDefaults()


@pytest.mark.parametrize(
    ("broker_defaults", "error"),
    [
        ({"num_partitions": 3}, "g.yaml: upstream.broker_defaults.num_partitions: unknown key"),
        ({"num.partitions": 0}, "g.yaml: upstream.broker_defaults.num.partitions: must be at"),
        ({"num.partitions": "3"}, "g.yaml: upstream.broker_defaults.num.partitions: expected a"),
        (
            {"default.replication.factor": 40000},
            "g.yaml: upstream.broker_defaults.default.replication.factor: at most 32767",
        ),
        ([3, 1], "g.yaml: upstream.broker_defaults: expected a mapping"),
    ],
)
def test_bad_broker_defaults_stop_start_up_naming_the_key(broker_defaults: Any, error: str) -> None:
    with pytest.raises(ConfigError) as raised:
        config_with(broker_defaults)
    assert str(raised.value).startswith(error)


def test_the_embedded_broker_states_what_it_creates_for_minus_one() -> None:
    embedded = with_embedded_upstream(config_with(None), HostPort(host="127.0.0.1", port=1))
    assert embedded.upstream.broker_defaults == BrokerDefaults(
        num_partitions=3, default_replication_factor=1
    )
