"""Built-in rules, table-driven, through the chain the gateway calls."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import pytest

from policies.api import (
    ConfigResource,
    ConfigResourceType,
    CreateTopicRequestMetadata,
    TopicState,
)
from policies.chain import Decision, PolicyChain
from policies.rules import (
    BROKER_SYNONYMS,
    BrokerConfigsRule,
    ConfigRule,
    ForbiddenConfigsRule,
    Mode,
    PartitionsRule,
    ProtectedTopicsRule,
    ReplicationFactorRule,
    RequiredConfigsRule,
    Rule,
    TopicChange,
    TopicNameRule,
)

pytestmark = pytest.mark.unit


def create(
    topic: str = "orders",
    partitions: int | None = 6,
    replication_factor: int | None = 3,
    assignments: Mapping[int, tuple[int, ...]] | None = None,
    **configs: str,
) -> CreateTopicRequestMetadata:
    return CreateTopicRequestMetadata(
        topic=topic,
        num_partitions=None if assignments else partitions,
        replication_factor=None if assignments else replication_factor,
        replicas_assignments=assignments,
        configs={k.replace("_", "."): v for k, v in configs.items()},
    )


def state(partitions: int = 6, configs: Mapping[str, str] | None = None) -> TopicState:
    return TopicState(
        num_partitions=partitions,
        replication_factor=3,
        replicas_assignments=None,
        configs=configs or {},
    )


@dataclass(frozen=True)
class Alter:
    """An incremental config change: ``altered`` applied to ``before``."""

    altered: Mapping[str, str | None]
    before: Mapping[str, str] = field(default_factory=dict)
    topic: str = "orders"
    principal: str | None = "User:bob"

    @property
    def after(self) -> dict[str, str]:
        after = dict(self.before)
        for key, value in self.altered.items():
            if value is None:
                after.pop(key, None)
            else:
                after[key] = value
        return after


@dataclass(frozen=True)
class CreatePartitions:
    total: int
    topic: str = "orders"
    principal: str | None = "User:bob"


@dataclass(frozen=True)
class Delete:
    topic: str = "orders"
    principal: str | None = "User:bob"


@dataclass(frozen=True)
class AlterResource(Alter):
    """A config change on a resource other than a topic: the cluster-wide broker default
    unless ``resource_type``/``name`` say otherwise."""

    resource_type: ConfigResourceType = ConfigResourceType.BROKER
    name: str = ""


Request = CreateTopicRequestMetadata | Alter | CreatePartitions | Delete


def decide(rule: Rule, request: Request) -> Decision:
    chain = PolicyChain(rules=[rule])
    try:
        if isinstance(request, CreateTopicRequestMetadata):
            return chain.check_create_topic(request, principal="User:bob")
        if isinstance(request, AlterResource):
            return chain.check_alter_config(
                ConfigResource(type=request.resource_type, name=request.name),
                altered=request.altered,
                before=request.before,
                after=request.after,
                principal=request.principal,
            )
        if isinstance(request, Alter):
            return chain.check_alter_config(
                ConfigResource(type=ConfigResourceType.TOPIC, name=request.topic),
                altered=request.altered,
                before=request.before,
                after=request.after,
                principal=request.principal,
            )
        if isinstance(request, CreatePartitions):
            return chain.check_create_partitions(
                request.topic,
                pre_state=state(1),
                post_state=state(request.total),
                principal=request.principal,
            )
        return chain.check_delete_topic(
            request.topic, pre_state=state(), principal=request.principal
        )
    finally:
        chain.close()


PARTITIONS = PartitionsRule(name="partition-count", min=3, max=12)
REPLICATION = ReplicationFactorRule(name="replication", min=2, max=3)
MIN_ISR = ConfigRule(name="min-isr", config="min.insync.replicas", min=2, max=3)
RETENTION = ConfigRule(name="retention", config="retention.ms", min=3_600_000, max=604_800_000)
RETENTION_MAX = ConfigRule(name="retention", config="retention.ms", max=604_800_000)
RATIO = ConfigRule(name="ratio", config="min.cleanable.dirty.ratio", min=0.1, max=0.9)
CLEANUP = ConfigRule(
    name="cleanup", config="cleanup.policy", allowed=frozenset({"delete", "compact"})
)
COMPRESSION = ConfigRule(
    name="compression", config="compression.type", allowed=frozenset({"lz4", "zstd"})
)
REQUIRED = RequiredConfigsRule(name="explicit-retention", configs=("retention.ms",))
FORBIDDEN = ForbiddenConfigsRule(name="no-unclean", configs=("unclean.leader.election.enable",))
NAMING = TopicNameRule(name="naming", pattern=re.compile(r"[a-z]+\.v[0-9]+"))
PROTECTED = ProtectedTopicsRule(
    name="platform",
    topics=(re.compile(r"__.*"), re.compile(r"audit")),
    allowed_principals=frozenset({"User:admin"}),
)
MAX_MESSAGE = ConfigRule(name="max-message", config="max.message.bytes", max=1_048_576)
SEGMENT_TIME = ConfigRule(name="segment-time", config="segment.ms", min=3_600_000)
FORBIDDEN_TIMESTAMP = ForbiddenConfigsRule(name="no-timestamp", configs=("message.timestamp.type",))
BROKER_ADMINS = BrokerConfigsRule(
    name="broker-admins", allowed_principals=frozenset({"User:admin"})
)
NO_BROKER_CHANGES = BrokerConfigsRule(name="no-broker-changes")
CLUSTER_DEFAULT = "the cluster-wide broker default"

# (rule, request, expected): expected is None for allowed, else part of the client's message
CASES = [
    # partitions: both bounds on create, only the maximum on a partition increase
    pytest.param(PARTITIONS, create(partitions=3), None, id="partitions-create-ok"),
    pytest.param(
        PARTITIONS,
        create(partitions=2),
        "2 partitions is below the minimum of 3",
        id="partitions-create-low",
    ),
    pytest.param(
        PARTITIONS,
        create(partitions=13),
        "13 partitions is above the maximum of 12",
        id="partitions-create-high",
    ),
    pytest.param(
        PARTITIONS,
        create(assignments={0: (1, 2), 1: (2, 3)}),
        "2 partitions is below",
        id="partitions-assignments",
    ),
    pytest.param(PARTITIONS, CreatePartitions(total=12), None, id="partitions-increase-ok"),
    pytest.param(
        PARTITIONS,
        CreatePartitions(total=13),
        "above the maximum of 12",
        id="partitions-increase-high",
    ),
    pytest.param(PARTITIONS, CreatePartitions(total=2), None, id="partitions-increase-below-min"),
    # replication factor, also from assignments (every partition counts)
    pytest.param(REPLICATION, create(replication_factor=2), None, id="rf-ok"),
    pytest.param(
        REPLICATION,
        create(replication_factor=1),
        "replication factor 1 is below the minimum of 2",
        id="rf-low",
    ),
    pytest.param(
        REPLICATION,
        create(replication_factor=4),
        "replication factor 4 is above the maximum of 3",
        id="rf-high",
    ),
    pytest.param(
        REPLICATION,
        create(assignments={0: (1, 2), 1: (1,)}),
        "replication factor 1",
        id="rf-assignments-uneven",
    ),
    pytest.param(
        REPLICATION, create(assignments={0: (1, 2), 1: (2, 3)}), None, id="rf-assignments-ok"
    ),
    # numeric bounds on a config, on create (as given) and on alter (the new value)
    pytest.param(MIN_ISR, create(min_insync_replicas="2"), None, id="bounds-create-ok"),
    pytest.param(
        MIN_ISR,
        create(min_insync_replicas="1"),
        "min.insync.replicas=1 is below the minimum of 2",
        id="bounds-create-low",
    ),
    pytest.param(
        MIN_ISR, create(min_insync_replicas="4"), "above the maximum of 3", id="bounds-create-high"
    ),
    pytest.param(MIN_ISR, create(), None, id="bounds-create-absent"),
    pytest.param(
        MIN_ISR,
        create(min_insync_replicas="two"),
        "min.insync.replicas=two is not a number",
        id="bounds-not-a-number",
    ),
    pytest.param(
        RETENTION,
        create(retention_ms="-1"),
        "retention.ms=-1 means no limit, above the maximum of 604800000",
        id="bounds-infinite-retention",
    ),
    # -1 (no limit) is above any max: "at most 7 days" must not let "forever" through
    pytest.param(
        RETENTION_MAX,
        create(retention_ms="-1"),
        "retention.ms=-1 means no limit, above the maximum of 604800000",
        id="max-only-infinite-retention",
    ),
    pytest.param(
        ConfigRule(name="size", config="retention.bytes", max=10**10),
        create(retention_bytes="-5"),
        "retention.bytes=-5 means no limit",
        id="max-only-unlimited-bytes",
    ),
    pytest.param(
        RETENTION_MAX,
        AlterResource({"log.retention.hours": "-1"}),
        "log.retention.hours=-1 (retention.ms=-3600000) means no limit",
        id="max-only-broker-infinite-retention",
    ),
    # as documented: a negative value is below a positive min (min alone, too)
    pytest.param(
        ConfigRule(name="keep", config="retention.ms", min=3_600_000),
        create(retention_ms="-1"),
        "retention.ms=-1 is below the minimum of 3600000",
        id="min-only-infinite-retention",
    ),
    # -2: "as retention.ms", not a number of its own
    pytest.param(
        ConfigRule(name="local", config="local.retention.ms", max=86_400_000),
        create(local_retention_ms="-2"),
        None,
        id="local-retention-as-retention",
    ),
    # ... only on the local. configs: -2 on retention.ms is a negative like any other, no limit
    pytest.param(
        RETENTION_MAX,
        create(retention_ms="-2"),
        "retention.ms=-2 means no limit, above the maximum of 604800000",
        id="max-only-minus-two-retention",
    ),
    pytest.param(RATIO, create(min_cleanable_dirty_ratio="0.5"), None, id="bounds-float-ok"),
    pytest.param(
        RATIO,
        create(min_cleanable_dirty_ratio="0.95"),
        "above the maximum of 0.9",
        id="bounds-float-high",
    ),
    pytest.param(
        MIN_ISR,
        Alter({"min.insync.replicas": "1"}, {"min.insync.replicas": "2"}),
        "min.insync.replicas=1 is below",
        id="bounds-alter-low",
    ),
    pytest.param(
        MIN_ISR,
        Alter({"min.insync.replicas": "3"}, {"min.insync.replicas": "1"}),
        None,
        id="bounds-alter-ok",
    ),
    pytest.param(
        MIN_ISR,
        Alter({"min.insync.replicas": None}, {"min.insync.replicas": "2"}),
        None,
        id="bounds-alter-delete",
    ),
    pytest.param(
        MIN_ISR,
        Alter({"retention.ms": "1"}, {"min.insync.replicas": "1"}),
        None,
        id="bounds-alter-untouched-old-value",
    ),
    # every key the change alters is judged, not only its first
    pytest.param(
        MIN_ISR,
        Alter({"retention.ms": "1", "min.insync.replicas": "1"}, {"min.insync.replicas": "2"}),
        "min.insync.replicas=1 is below",
        id="bounds-alter-second-key",
    ),
    # allowed values; cleanup.policy is a list, compression.type is not
    pytest.param(CLEANUP, create(cleanup_policy="compact"), None, id="allowed-ok"),
    pytest.param(CLEANUP, create(cleanup_policy="compact, delete"), None, id="allowed-list"),
    pytest.param(
        CLEANUP,
        create(cleanup_policy="compact,archive"),
        "'archive' is not one of compact, delete",
        id="allowed-list-bad-item",
    ),
    pytest.param(
        COMPRESSION,
        create(compression_type="gzip"),
        "'gzip' is not one of lz4, zstd",
        id="allowed-bad",
    ),
    pytest.param(
        COMPRESSION,
        create(compression_type="lz4,zstd"),
        "'lz4,zstd' is not one of",
        id="allowed-not-a-list",
    ),
    pytest.param(
        CLEANUP, Alter({"cleanup.policy": "archive"}), "'archive' is not one of", id="allowed-alter"
    ),
    # required configs: given on create, not deletable later
    pytest.param(REQUIRED, create(retention_ms="3600000"), None, id="required-given"),
    pytest.param(REQUIRED, create(), "config retention.ms must be set", id="required-missing"),
    pytest.param(
        REQUIRED,
        Alter({"retention.ms": None}, {"retention.ms": "1"}),
        "must be set",
        id="required-deleted",
    ),
    pytest.param(
        REQUIRED,
        Alter({"cleanup.policy": "delete"}, {"retention.ms": "1"}),
        None,
        id="required-kept",
    ),
    # forbidden configs: not settable, deletable
    pytest.param(
        FORBIDDEN,
        create(unclean_leader_election_enable="true"),
        "unclean.leader.election.enable may not be set",
        id="forbidden-create",
    ),
    pytest.param(FORBIDDEN, create(), None, id="forbidden-create-absent"),
    # every config of the list is forbidden, not only its first
    pytest.param(
        ForbiddenConfigsRule(
            name="no-unclean", configs=("unclean.leader.election.enable", "preallocate")
        ),
        create(preallocate="true"),
        "config preallocate may not be set",
        id="forbidden-second-of-two",
    ),
    pytest.param(
        FORBIDDEN,
        Alter({"unclean.leader.election.enable": "false"}),
        "may not be set",
        id="forbidden-alter-set",
    ),
    pytest.param(
        FORBIDDEN,
        Alter({"unclean.leader.election.enable": None}, {"unclean.leader.election.enable": "true"}),
        None,
        id="forbidden-alter-delete",
    ),
    # topic names match the whole pattern, on create only
    pytest.param(NAMING, create(topic="orders.v1"), None, id="naming-ok"),
    pytest.param(
        NAMING, create(topic="Orders.v1"), "topic name 'Orders.v1' does not match", id="naming-case"
    ),
    pytest.param(
        NAMING, create(topic="orders.v1.old"), "does not match the pattern", id="naming-full-match"
    ),
    pytest.param(NAMING, Delete(topic="Legacy"), None, id="naming-not-on-delete"),
    # protected topics: no create, delete, partition increase or config change but by the
    # allow-list; the message names who asked, never who is allowed
    pytest.param(
        PROTECTED,
        Delete(topic="__consumer_offsets"),
        "topic __consumer_offsets is protected: User:bob may not delete it",
        id="protected-delete",
    ),
    pytest.param(
        PROTECTED,
        Delete(topic="__consumer_offsets", principal="User:admin"),
        None,
        id="protected-delete-admin",
    ),
    pytest.param(
        PROTECTED,
        Delete(topic="audit", principal=None),
        "topic audit is protected: an unauthenticated client may not delete it",
        id="protected-unauthenticated",
    ),
    pytest.param(PROTECTED, Delete(topic="auditlog"), None, id="protected-full-match"),
    pytest.param(
        PROTECTED,
        Alter({"retention.ms": "1"}, topic="audit"),
        "User:bob may not change its configs",
        id="protected-alter",
    ),
    pytest.param(
        PROTECTED,
        Alter({"retention.ms": "1"}, topic="audit", principal="User:admin"),
        None,
        id="protected-alter-admin",
    ),
    pytest.param(
        PROTECTED,
        CreatePartitions(total=3, topic="audit"),
        "User:bob may not add partitions to it",
        id="protected-partitions",
    ),
    pytest.param(
        PROTECTED,
        create(topic="__evil"),
        "topic __evil is protected: User:bob may not create it",
        id="protected-create",
    ),
    pytest.param(PROTECTED, create(topic="auditlog"), None, id="protected-create-full-match"),
    # broker configs: the topic config rules judge the default a broker synonym gives topics,
    # on the value the broker will use after the change, in the topic config's units
    pytest.param(
        RETENTION,
        AlterResource({"log.retention.ms": "1"}),
        f"{CLUSTER_DEFAULT}: log.retention.ms=1 (retention.ms=1) is below the minimum of 3600000",
        id="broker-retention-ms-low",
    ),
    pytest.param(
        RETENTION,
        AlterResource({"log.retention.ms": "1"}, name="1"),
        "broker 1: log.retention.ms=1 (retention.ms=1) is below the minimum",
        id="broker-id-retention-ms-low",
    ),
    pytest.param(
        RETENTION, AlterResource({"log.retention.ms": "86400000"}), None, id="broker-retention-ok"
    ),
    pytest.param(
        RETENTION,
        AlterResource({"log.retention.hours": "0"}),
        "log.retention.hours=0 (retention.ms=0) is below the minimum of 3600000",
        id="broker-retention-hours-converted",
    ),
    pytest.param(
        RETENTION, AlterResource({"log.retention.hours": "1"}), None, id="broker-retention-1-hour"
    ),
    pytest.param(
        RETENTION,
        AlterResource({"log.retention.minutes": "30"}),
        "log.retention.minutes=30 (retention.ms=1800000) is below",
        id="broker-retention-minutes-converted",
    ),
    pytest.param(
        RETENTION,
        AlterResource({"log.retention.hours": "169"}),
        "(retention.ms=608400000) is above the maximum of 604800000",
        id="broker-retention-hours-high",
    ),
    pytest.param(
        RETENTION,
        AlterResource({"log.retention.hours": "1h"}),
        "log.retention.hours=1h (retention.ms=1h) is not a number",
        id="broker-retention-hours-not-a-number",
    ),
    pytest.param(
        RETENTION,
        AlterResource({"log.retention.hours": "0"}, {"log.retention.ms": "86400000"}),
        None,
        id="broker-retention-ms-wins-over-hours",
    ),
    pytest.param(
        RETENTION,
        AlterResource({"log.retention.minutes": "0", "log.retention.ms": "86400000"}),
        None,
        id="broker-retention-ms-wins-in-one-request",
    ),
    pytest.param(
        RETENTION,
        AlterResource({"log.retention.ms": "1", "log.retention.minutes": "600"}),
        "log.retention.ms=1 (retention.ms=1) is below",
        id="broker-retention-minutes-do-not-save-ms",
    ),
    pytest.param(
        RETENTION,
        AlterResource(
            {"log.retention.ms": None}, {"log.retention.ms": "86400000", "log.retention.hours": "0"}
        ),
        "log.retention.hours=0 (retention.ms=0) is below",
        id="broker-retention-delete-hands-over-to-hours",
    ),
    pytest.param(
        RETENTION,
        AlterResource({"log.retention.ms": None}, {"log.retention.ms": "1"}),
        None,
        id="broker-retention-delete-all",
    ),
    pytest.param(
        RETENTION,
        AlterResource({"log.cleaner.threads": "2"}, {"log.retention.ms": "1"}),
        None,
        id="broker-retention-untouched-old-value",
    ),
    pytest.param(
        MIN_ISR,
        AlterResource({"min.insync.replicas": "1"}),
        f"{CLUSTER_DEFAULT}: min.insync.replicas=1 is below the minimum of 2",
        id="broker-min-isr-same-name",
    ),
    pytest.param(
        CLEANUP,
        AlterResource({"log.cleanup.policy": "compact,archive"}),
        "log.cleanup.policy=compact,archive (cleanup.policy=compact,archive): 'archive' is not one",
        id="broker-cleanup-policy-list",
    ),
    pytest.param(
        CLEANUP,
        AlterResource({"log.cleanup.policy": "compact,delete"}),
        None,
        id="broker-cleanup-ok",
    ),
    pytest.param(
        MAX_MESSAGE,
        AlterResource({"message.max.bytes": "2000000"}),
        "message.max.bytes=2000000 (max.message.bytes=2000000) is above the maximum of 1048576",
        id="broker-message-max-bytes",
    ),
    pytest.param(
        SEGMENT_TIME,
        AlterResource({"log.roll.hours": "0"}),
        "log.roll.hours=0 (segment.ms=0) is below",
        id="broker-roll-hours",
    ),
    pytest.param(
        FORBIDDEN,
        AlterResource({"unclean.leader.election.enable": "true"}, name="1"),
        "broker 1: config unclean.leader.election.enable may not be set",
        id="broker-forbidden-same-name",
    ),
    pytest.param(
        FORBIDDEN,
        AlterResource(
            {"unclean.leader.election.enable": None}, {"unclean.leader.election.enable": "true"}
        ),
        None,
        id="broker-forbidden-delete",
    ),
    pytest.param(
        FORBIDDEN_TIMESTAMP,
        AlterResource({"log.message.timestamp.type": "LogAppendTime"}),
        "config log.message.timestamp.type (the default of message.timestamp.type) may not be set",
        id="broker-forbidden-synonym",
    ),
    # who may change broker configs
    pytest.param(
        BROKER_ADMINS,
        AlterResource({"log.cleaner.threads": "2"}),
        f"{CLUSTER_DEFAULT}: User:bob may not change its configs",
        id="broker-configs-refused",
    ),
    pytest.param(
        BROKER_ADMINS,
        AlterResource({"log.cleaner.threads": "2"}, name="1", principal=None),
        "broker 1: an unauthenticated client may not change its configs",
        id="broker-configs-unauthenticated",
    ),
    pytest.param(
        BROKER_ADMINS,
        AlterResource({"log.cleaner.threads": "2"}, principal="User:admin"),
        None,
        id="broker-configs-admin",
    ),
    pytest.param(
        BROKER_ADMINS,
        AlterResource(
            {"kafka.server": "DEBUG"}, resource_type=ConfigResourceType.BROKER_LOGGER, name="1"
        ),
        "the loggers of broker 1: User:bob may not change its configs",
        id="broker-configs-logger",
    ),
    pytest.param(
        BROKER_ADMINS,
        AlterResource(
            {"interval.ms": "1"}, resource_type=ConfigResourceType.CLIENT_METRICS, name="all"
        ),
        "client metrics subscription all: User:bob may not change its configs",
        id="broker-configs-client-metrics",
    ),
    pytest.param(
        NO_BROKER_CHANGES,
        AlterResource({"log.cleaner.threads": "2"}, principal="User:admin"),
        f"{CLUSTER_DEFAULT}: no one may change its configs",
        id="broker-configs-no-one",
    ),
]


@pytest.mark.parametrize(("rule", "request_", "expected"), CASES)
def test_rule(rule: Rule, request_: Request, expected: str | None) -> None:
    decision = decide(rule, request_)
    if expected is None:
        assert decision.allowed, decision.message
        assert decision.message is None
    else:
        assert not decision.allowed
        assert decision.message is not None
        assert expected in decision.message
        assert decision.message.endswith(f"(rule {rule.name})")


def every_operation() -> Iterator[tuple[str, Request]]:
    yield "create_topic", create()
    yield "alter_configs", Alter({"retention.ms": "1"})
    yield "create_partitions", CreatePartitions(total=3)
    yield "delete_topic", Delete()
    yield "alter_broker_configs", AlterResource({"log.retention.ms": "1"})
    for resource_type in (ConfigResourceType.BROKER_LOGGER, ConfigResourceType.CLIENT_METRICS):
        operation = f"alter_{resource_type.name.lower()}_configs"
        yield operation, AlterResource({"a": "1"}, resource_type=resource_type, name="1")


@pytest.mark.parametrize(
    "rule",
    [PARTITIONS, REPLICATION, MIN_ISR, REQUIRED, FORBIDDEN, NAMING, PROTECTED, BROKER_ADMINS],
    ids=lambda r: r.name,
)
def test_a_rule_gives_a_verdict_only_for_the_operations_it_judges(rule: Rule) -> None:
    for operation, request in every_operation():
        verdicts = decide(rule, request).verdicts
        judged = operation in {o.value for o in rule.operations}
        assert [v.policy for v in verdicts] == ([rule.name] if judged else []), operation


@pytest.mark.parametrize(
    ("principal", "allowed"),
    [(None, False), ("User:bob", False), ("User:admin", True)],
)
def test_protected_topics_are_created_only_by_the_allowed_principals(
    principal: str | None, allowed: bool
) -> None:
    with PolicyChain(rules=[PROTECTED]) as chain:
        decision = chain.check_create_topic(create(topic="__evil"), principal=principal)
    assert decision.allowed is allowed
    if not allowed:
        who = principal or "an unauthenticated client"
        assert decision.message == (
            f"topic __evil is protected: {who} may not create it (rule platform)"
        )


def test_a_protected_topics_denial_never_names_the_allowed_principals() -> None:
    requests: list[Request] = [
        create(topic="__x"),
        Alter({"retention.ms": "1"}, topic="__x", principal=None),
        CreatePartitions(total=3, topic="__x", principal=None),
        Delete(topic="__x", principal=None),
        Delete(topic="__x"),
    ]
    for request in requests:
        decision = decide(PROTECTED, request)
        assert decision.message is not None and "is protected" in decision.message
        assert "User:admin" not in decision.message


@pytest.mark.parametrize(
    "resource_type", [ConfigResourceType.GROUP, ConfigResourceType.USER_CLIENT], ids=str
)
def test_no_rule_judges_group_or_dynamic_client_configs(
    resource_type: ConfigResourceType,
) -> None:
    """Left to the plug-ins: no topic config is their default, and Kafka authorizes a
    group's configs on the group, not the cluster."""
    rules = [PROTECTED, FORBIDDEN, RETENTION, REQUIRED, BROKER_ADMINS]
    request = AlterResource(
        {"retention.ms": "1", "unclean.leader.election.enable": "true"},
        resource_type=resource_type,
        name="1",
        principal=None,
    )
    with PolicyChain(rules=rules) as chain:
        decision = chain.check_alter_config(
            ConfigResource(type=resource_type, name=request.name),
            altered=request.altered,
            before=request.before,
            after=request.after,
            principal=None,
        )
    assert decision.allowed
    assert decision.verdicts == ()


def test_the_synonym_table_is_kafkas() -> None:
    """Spot checks against ServerTopicConfigSynonyms.ALL_TOPIC_CONFIG_SYNONYMS: the order of
    precedence and the conversions."""
    names = {
        topic: [(s.name, s.to_ms) for s in synonyms] for topic, synonyms in BROKER_SYNONYMS.items()
    }
    assert names["retention.ms"] == [
        ("log.retention.ms", None),
        ("log.retention.minutes", 60_000),
        ("log.retention.hours", 3_600_000),
    ]
    assert names["segment.ms"] == [("log.roll.ms", None), ("log.roll.hours", 3_600_000)]
    assert names["max.message.bytes"] == [("message.max.bytes", None)]
    assert names["min.cleanable.dirty.ratio"] == [("log.cleaner.min.cleanable.ratio", None)]
    assert names["min.insync.replicas"] == [("min.insync.replicas", None)]
    broker_names = [s.name for synonyms in BROKER_SYNONYMS.values() for s in synonyms]
    assert len(broker_names) == len(set(broker_names))


def test_a_dry_run_rule_records_would_deny_and_allows() -> None:
    rule = PartitionsRule(name="partition-count", mode=Mode.DRY_RUN, max=1)
    decision = decide(rule, create(partitions=2))
    assert decision.allowed
    assert decision.message == (
        "would deny (dry-run): topic orders: 2 partitions is above the maximum of 1 "
        "(rule partition-count)"
    )
    [verdict] = decision.verdicts
    assert (verdict.outcome, verdict.mode) == ("would_deny", Mode.DRY_RUN)
    assert verdict.message is not None and "above the maximum of 1" in verdict.message


def test_topic_change_of_an_alter_sees_the_after_value_of_altered_keys_only() -> None:
    change = TopicChange.alter_configs(
        "orders",
        altered={"retention.ms": "5", "segment.ms": None},
        after={"retention.ms": "5", "cleanup.policy": "delete"},
        principal=None,
    )
    assert change.set_configs == {"retention.ms": "5"}
    assert change.configs_after == {"retention.ms": "5", "cleanup.policy": "delete"}


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        pytest.param(
            ConfigRule(
                name="clean", config="unclean.leader.election.enable", allowed=frozenset({"false"})
            ),
            "topic orders: unclean.leader.election.enable=true: 'true' is not one of false "
            "(rule clean)",
            id="config",
        ),
        pytest.param(
            FORBIDDEN,
            "topic orders: config unclean.leader.election.enable may not be set (rule no-unclean)",
            id="forbidden",
        ),
    ],
)
def test_an_unclean_election_is_judged_as_setting_the_config_that_permits_it(
    rule: Rule, expected: str
) -> None:
    """Whether the topic's own value is false or unset, the election is the change to true:
    a rule that allows only false refuses it, as one that forbids the config does."""
    for configs in ({"unclean.leader.election.enable": "false"}, {}):
        with PolicyChain(rules=[rule]) as chain:
            decision = chain.run(
                chain.plan_unclean_election("orders", configs=configs, principal="User:bob")
            )
        assert (decision.allowed, decision.message) == (False, expected)
