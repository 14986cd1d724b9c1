"""The plug-in interfaces: the values' invariants and the shape a Kafka admin expects."""

from __future__ import annotations

import dataclasses

import pytest

from policies.api import (
    AlterConfigPolicy,
    AlterConfigRequestMetadata,
    AlterConfigV2Policy,
    ConfigResource,
    ConfigResourceType,
    CreateTopicPolicy,
    CreateTopicRequestMetadata,
    FrozenMap,
    InvalidRecord,
    PolicyViolation,
    RecordIntrospectionHints,
    RecordProxy,
    RecordValidationPolicy,
    TopicAction,
    TopicActionPolicy,
    TopicActionRequestMetadata,
    TopicMetadata,
    TopicState,
)

pytestmark = pytest.mark.unit


def counts(**overrides: object) -> CreateTopicRequestMetadata:
    fields: dict[str, object] = {
        "topic": "orders",
        "num_partitions": 3,
        "replication_factor": 2,
        "replicas_assignments": None,
        "configs": {"retention.ms": "1000"},
    }
    fields.update(overrides)
    return CreateTopicRequestMetadata(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "overrides",
    [
        {"num_partitions": None},
        {"replication_factor": None},
        {"replicas_assignments": {0: [1, 2]}},
        {"num_partitions": None, "replication_factor": None},
    ],
    ids=["no-partitions", "no-replication-factor", "both-sides", "neither-side"],
)
def test_create_topic_metadata_takes_counts_or_assignments_never_both(
    overrides: dict[str, object],
) -> None:
    with pytest.raises(ValueError):
        counts(**overrides)


def test_create_topic_metadata_with_assignments_freezes_them_into_tuples() -> None:
    metadata = counts(
        num_partitions=None, replication_factor=None, replicas_assignments={0: [1, 2], 1: [2, 3]}
    )
    assert metadata.replicas_assignments == {0: (1, 2), 1: (2, 3)}
    assert isinstance(metadata.replicas_assignments, FrozenMap)


def test_metadata_is_frozen_read_only_and_hashable() -> None:
    raw = {"retention.ms": "1000"}
    metadata = counts(configs=raw)
    raw["retention.ms"] = "changed"
    assert metadata.configs == {"retention.ms": "1000"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        metadata.topic = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        metadata.configs["retention.ms"] = "2"  # type: ignore[index]
    assert hash(metadata) == hash(counts())
    assert {metadata, counts()} == {metadata}


def test_frozen_map_equals_plain_mappings_and_hashes_by_content() -> None:
    assert FrozenMap({"a": "1"}) == {"a": "1"}
    assert FrozenMap({"a": "1"}) != {"a": "2"}
    assert hash(FrozenMap({"a": "1", "b": None})) == hash(FrozenMap([("b", None), ("a", "1")]))


def test_nested_names_match_kafka_and_module_level_names() -> None:
    assert CreateTopicPolicy.RequestMetadata is CreateTopicRequestMetadata
    assert AlterConfigPolicy.RequestMetadata is AlterConfigRequestMetadata
    assert TopicActionPolicy.RequestMetadata is TopicActionRequestMetadata
    assert TopicActionPolicy.Action is TopicAction
    assert TopicActionPolicy.TopicState is TopicState
    assert [a.name for a in TopicAction] == ["CREATE", "MODIFY", "DELETE"]


def test_config_resource_types_use_kafkas_codes() -> None:
    codes = {t.name: t.value for t in ConfigResourceType}
    assert codes == {
        "UNKNOWN": 0,
        "TOPIC": 2,
        "BROKER": 4,
        "BROKER_LOGGER": 8,
        "CLIENT_METRICS": 16,
        "GROUP": 32,
        # the gateway's own (seed 003), clear of Kafka's codes
        "CLIENT": 120,
        "USER_CLIENT": 121,
    }


def test_alter_config_metadata_keeps_deletes_as_none() -> None:
    metadata = AlterConfigRequestMetadata(
        resource=ConfigResource(type=ConfigResourceType.TOPIC, name="orders"),
        configs={"retention.ms": None, "cleanup.policy": "compact"},
    )
    assert metadata.configs == {"retention.ms": None, "cleanup.policy": "compact"}


STATE = TopicState(num_partitions=1, replication_factor=1, replicas_assignments=None, configs={})


@pytest.mark.parametrize(
    ("action", "pre", "post"),
    [
        (TopicAction.CREATE, STATE, STATE),
        (TopicAction.CREATE, None, None),
        (TopicAction.MODIFY, None, STATE),
        (TopicAction.MODIFY, STATE, None),
        (TopicAction.DELETE, None, STATE),
        (TopicAction.DELETE, STATE, STATE),
    ],
)
def test_topic_action_states_must_fit_the_action(
    action: TopicAction, pre: TopicState | None, post: TopicState | None
) -> None:
    with pytest.raises(ValueError, match=action.name):
        TopicActionRequestMetadata(
            action=action,
            topic="t",
            principal="User:alice",
            pre_request_state=pre,
            post_request_state=post,
        )


def test_requested_state_of_a_create_with_assignments_derives_the_counts() -> None:
    metadata = counts(
        num_partitions=None,
        replication_factor=None,
        replicas_assignments={0: [1, 2, 3], 1: [2, 3, 1]},
    )
    state = TopicState.requested_by(metadata)
    assert (state.num_partitions, state.replication_factor) == (2, 3)
    assert state.replicas_assignments == {0: (1, 2, 3), 1: (2, 3, 1)}
    assert TopicState.requested_by(counts()).replicas_assignments is None


def test_exceptions_carry_their_message() -> None:
    assert PolicyViolation("no").message == "no"
    assert InvalidRecord("bad record").message == "bad record"


def test_hints_reject_byte_counts_below_minus_one() -> None:
    RecordIntrospectionHints(access_headers=True, access_key_bytes=-1, access_value_bytes=0)
    with pytest.raises(ValueError, match="access_value_bytes"):
        RecordIntrospectionHints(access_headers=False, access_key_bytes=0, access_value_bytes=-2)


class RequireHeader(RecordValidationPolicy):
    """The sample policy of the record validation proposal, written against this API."""

    def get_hints(self) -> RecordIntrospectionHints:
        return RecordIntrospectionHints(
            access_headers=True, access_key_bytes=0, access_value_bytes=0
        )

    def validate(self, topic: TopicMetadata, record: RecordProxy) -> None:
        if not any(key == topic.validation_policy for key, _ in record.headers):
            raise InvalidRecord(
                f"Topic {topic.topic} requires records to contain a header with key: "
                f"{topic.validation_policy}"
            )


def test_a_record_validation_policy_can_be_written_against_the_api() -> None:
    policy = RequireHeader()
    policy.configure({})
    topic = TopicMetadata(topic="orders", partition=0, validation_policy="schema-id")
    policy.validate(topic, RecordProxy(headers=(("schema-id", b"1"),), key=None, value=b"x"))
    with pytest.raises(InvalidRecord, match="requires records to contain a header"):
        policy.validate(topic, RecordProxy(headers=(), key=None, value=b"x"))
    policy.close()


def test_policy_classes_must_implement_validate() -> None:
    class Incomplete(AlterConfigV2Policy):
        pass

    with pytest.raises(TypeError):
        Incomplete()  # type: ignore[abstract]
