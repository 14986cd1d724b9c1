"""The chain: which plug-in sees what (KIP-201's adapter), dry-run, fail-closed, timeouts."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from policies.api import (
    AlterConfigPolicy,
    AlterConfigRequestMetadata,
    AlterConfigV2Policy,
    AlterConfigV2RequestMetadata,
    ConfigResource,
    ConfigResourceType,
    CreateTopicPolicy,
    CreateTopicRequestMetadata,
    PolicyViolation,
    TopicAction,
    TopicActionPolicy,
    TopicActionRequestMetadata,
    TopicState,
)
from policies.chain import Decision, PolicyChain, PolicyPlugin
from policies.rules import (
    BrokerConfigsRule,
    Mode,
    PartitionsRule,
    ReplicationFactorRule,
    Rule,
    TopicChange,
    TopicOperation,
    UnknownDefaults,
    unknown_default,
)

pytestmark = pytest.mark.unit

TOPIC = ConfigResource(type=ConfigResourceType.TOPIC, name="orders")
BROKER = ConfigResource(type=ConfigResourceType.BROKER, name="1")
REQUEST = CreateTopicRequestMetadata(
    topic="orders",
    num_partitions=6,
    replication_factor=3,
    replicas_assignments=None,
    configs={"retention.ms": "1000"},
)
STATE = TopicState(
    num_partitions=6,
    replication_factor=3,
    replicas_assignments={p: (1, 2, 3) for p in range(6)},
    configs={"retention.ms": "1000"},
)
GROWN = TopicState(
    num_partitions=8,
    replication_factor=3,
    replicas_assignments=None,
    configs={"retention.ms": "1000"},
)


class Recorder:
    """Remembers what it was asked; denies when ``deny`` is set."""

    def __init__(self) -> None:
        self.seen: list[object] = []
        self.configured: Mapping[str, str] | None = None
        self.closed = False
        self.deny: str | None = None

    def configure(self, configs: Mapping[str, str]) -> None:
        self.configured = configs

    def close(self) -> None:
        self.closed = True

    def validate(self, request_metadata: object) -> None:
        self.seen.append(request_metadata)
        if self.deny is not None:
            raise PolicyViolation(self.deny)


class RecordingCreateTopicPolicy(Recorder, CreateTopicPolicy):
    pass


class RecordingAlterConfigPolicy(Recorder, AlterConfigPolicy):
    pass


class RecordingAlterConfigV2Policy(Recorder, AlterConfigV2Policy):
    pass


class RecordingTopicActionPolicy(Recorder, TopicActionPolicy):
    pass


class FailingTopicActionPolicy(TopicActionPolicy):
    def validate(self, request_metadata: TopicActionRequestMetadata) -> None:
        raise KeyError("retention.ms")


class HangingCreateTopicPolicy(CreateTopicPolicy):
    """Blocks until released; the test releases it so no thread outlives the suite."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.returned = threading.Event()

    def validate(self, request_metadata: CreateTopicRequestMetadata) -> None:
        try:
            self.release.wait(timeout=10)
        finally:
            self.returned.set()


@pytest.fixture
def hanging() -> Iterator[HangingCreateTopicPolicy]:
    policy = HangingCreateTopicPolicy()
    yield policy
    policy.release.set()


def run_everything(chain: PolicyChain, principal: str | None = "User:alice") -> None:
    """One of each check: create, topic and broker config change, partitions, delete."""
    chain.check_create_topic(REQUEST, principal=principal)
    chain.check_alter_config(
        TOPIC,
        altered={"retention.ms": "2000", "segment.ms": None},
        before={"retention.ms": "1000", "segment.ms": "10"},
        after={"retention.ms": "2000"},
        principal=principal,
        topic_state=STATE,
    )
    chain.check_alter_config(
        BROKER,
        altered={"log.cleaner.threads": "2"},
        before={},
        after={"log.cleaner.threads": "2"},
        principal=principal,
    )
    chain.check_create_partitions("orders", pre_state=STATE, post_state=GROWN, principal=principal)
    chain.check_delete_topic("orders", pre_state=STATE, principal=principal)


# --- which plug-in sees what ------------------------------------------------------------------


def test_create_topic_policy_sees_creates_only_with_the_request_as_sent() -> None:
    policy = RecordingCreateTopicPolicy()
    with PolicyChain(create_topic_policy=PolicyPlugin(policy=policy)) as chain:
        run_everything(chain)
    assert policy.seen == [REQUEST]


def test_alter_config_policy_sees_only_the_altered_keys_of_any_resource() -> None:
    policy = RecordingAlterConfigPolicy()
    with PolicyChain(alter_config_policy=PolicyPlugin(policy=policy)) as chain:
        run_everything(chain)
    assert policy.seen == [
        AlterConfigRequestMetadata(
            resource=TOPIC, configs={"retention.ms": "2000", "segment.ms": None}
        ),
        AlterConfigRequestMetadata(resource=BROKER, configs={"log.cleaner.threads": "2"}),
    ]


def test_alter_config_v2_policy_sees_before_and_after() -> None:
    policy = RecordingAlterConfigV2Policy()
    with PolicyChain(alter_config_v2_policy=PolicyPlugin(policy=policy)) as chain:
        run_everything(chain)
    assert policy.seen == [
        AlterConfigV2RequestMetadata(
            resource=TOPIC,
            configs_before={"retention.ms": "1000", "segment.ms": "10"},
            configs_after={"retention.ms": "2000"},
        ),
        AlterConfigV2RequestMetadata(
            resource=BROKER, configs_before={}, configs_after={"log.cleaner.threads": "2"}
        ),
    ]


@pytest.mark.parametrize(
    "resource_type",
    [
        ConfigResourceType.BROKER,
        ConfigResourceType.BROKER_LOGGER,
        ConfigResourceType.CLIENT_METRICS,
        ConfigResourceType.GROUP,
    ],
    ids=lambda t: t.name,
)
def test_config_policies_see_every_broker_side_resource_after_the_rules(
    resource_type: ConfigResourceType,
) -> None:
    """As Kafka's AlterConfigPolicy: every resource type reaches the plug-ins, in Kafka's
    numbering; the broker-config rule is asked first where it applies (not for GROUP, which
    Kafka authorizes on the group)."""
    resource = ConfigResource(type=resource_type, name="1")
    v1, v2 = RecordingAlterConfigPolicy(), RecordingAlterConfigV2Policy()
    admins = BrokerConfigsRule(name="admins", allowed_principals=frozenset({"User:root"}))
    with PolicyChain(
        rules=[admins],
        alter_config_policy=PolicyPlugin(policy=v1, name="acme.V1"),
        alter_config_v2_policy=PolicyPlugin(policy=v2, name="acme.V2"),
    ) as chain:
        decision = chain.check_alter_config(
            resource, altered={"a": "2"}, before={"a": "1"}, after={"a": "2"}, principal=None
        )
    assert v1.seen == [AlterConfigRequestMetadata(resource=resource, configs={"a": "2"})]
    assert v2.seen == [
        AlterConfigV2RequestMetadata(
            resource=resource, configs_before={"a": "1"}, configs_after={"a": "2"}
        )
    ]
    judged_by_rule = resource_type != ConfigResourceType.GROUP
    policies = ["admins"] if judged_by_rule else []
    assert [v.policy for v in decision.verdicts] == [*policies, "acme.V1", "acme.V2"]
    assert decision.allowed is not judged_by_rule


def test_topic_action_policy_sees_the_whole_life_of_a_topic() -> None:
    policy = RecordingTopicActionPolicy()
    with PolicyChain(topic_action_policy=PolicyPlugin(policy=policy)) as chain:
        run_everything(chain, principal="User:alice")
    seen = [m for m in policy.seen if isinstance(m, TopicActionRequestMetadata)]
    assert [(m.action, m.topic, m.principal) for m in seen] == [
        (TopicAction.CREATE, "orders", "User:alice"),
        (TopicAction.MODIFY, "orders", "User:alice"),
        (TopicAction.MODIFY, "orders", "User:alice"),
        (TopicAction.DELETE, "orders", "User:alice"),
    ]
    create, alter, partitions, delete = seen
    assert create.pre_request_state is None
    assert create.post_request_state == TopicState(
        num_partitions=6, replication_factor=3, replicas_assignments=None, configs=REQUEST.configs
    )
    assert alter.pre_request_state is not None and alter.post_request_state is not None
    assert alter.pre_request_state.configs == {"retention.ms": "1000", "segment.ms": "10"}
    assert alter.post_request_state.configs == {"retention.ms": "2000"}
    assert alter.post_request_state.replicas_assignments == STATE.replicas_assignments
    assert (partitions.pre_request_state, partitions.post_request_state) == (STATE, GROWN)
    assert (delete.pre_request_state, delete.post_request_state) == (STATE, None)


def test_topic_action_policy_judges_a_reassignment_as_a_modify() -> None:
    """AlterPartitionReassignments: the policy sees the replicas before and after, and its
    denial denies (the built-in rules alone are not the whole chain)."""
    moved = TopicState(
        num_partitions=6,
        replication_factor=3,
        replicas_assignments={**(STATE.replicas_assignments or {}), 0: (4, 5, 6)},
        configs=STATE.configs,
    )
    policy = RecordingTopicActionPolicy()
    policy.deny = "replicas stay on racks 1-3"
    with PolicyChain(topic_action_policy=PolicyPlugin(policy=policy, name="acme.Racks")) as c:
        decision = c.run(
            c.plan_reassign_partitions(
                "orders", pre_state=STATE, post_state=moved, principal="User:alice"
            )
        )
    assert (decision.allowed, decision.message) == (False, "replicas stay on racks 1-3")
    [metadata] = policy.seen
    assert isinstance(metadata, TopicActionRequestMetadata)
    assert (metadata.action, metadata.topic, metadata.principal) == (
        TopicAction.MODIFY,
        "orders",
        "User:alice",
    )
    assert (metadata.pre_request_state, metadata.post_request_state) == (STATE, moved)


def test_topic_action_policy_without_the_topics_state_denies_a_config_change() -> None:
    policy = RecordingTopicActionPolicy()
    with PolicyChain(topic_action_policy=PolicyPlugin(policy=policy, name="acme.Lifecycle")) as c:
        assert c.needs_topic_state
        decision = c.check_alter_config(
            TOPIC, altered={"a": "1"}, before={}, after={"a": "1"}, principal=None
        )
    assert not decision.allowed
    assert decision.message == "policy acme.Lifecycle needs the state of topic orders: not known"
    assert policy.seen == []


def test_an_unauthenticated_principal_reaches_the_policy_as_none() -> None:
    policy = RecordingTopicActionPolicy()
    with PolicyChain(topic_action_policy=PolicyPlugin(policy=policy)) as chain:
        chain.check_delete_topic("orders", pre_state=STATE, principal=None)
    [metadata] = policy.seen
    assert isinstance(metadata, TopicActionRequestMetadata)
    assert metadata.principal is None


@pytest.mark.parametrize(
    "old",
    [
        {"create_topic_policy": PolicyPlugin(policy=RecordingCreateTopicPolicy())},
        {"alter_config_policy": PolicyPlugin(policy=RecordingAlterConfigPolicy())},
    ],
    ids=["create", "alter"],
)
def test_an_old_policy_and_the_topic_action_policy_cannot_be_combined(
    old: dict[str, Any],
) -> None:
    new = PolicyPlugin(policy=RecordingTopicActionPolicy())
    with pytest.raises(ValueError, match="cannot be used together with topic_action_policy"):
        PolicyChain(topic_action_policy=new, **old)


def test_alter_config_v2_policy_combines_with_the_topic_action_policy() -> None:
    v2, new = RecordingAlterConfigV2Policy(), RecordingTopicActionPolicy()
    with PolicyChain(
        alter_config_v2_policy=PolicyPlugin(policy=v2), topic_action_policy=PolicyPlugin(policy=new)
    ) as chain:
        run_everything(chain)
    assert len(v2.seen) == 2
    assert len(new.seen) == 4


def test_a_plugin_of_the_wrong_kind_is_refused() -> None:
    with pytest.raises(TypeError, match="create_topic_policy"):
        PolicyChain(create_topic_policy=PolicyPlugin(policy=RecordingAlterConfigPolicy()))


# --- decisions, verdicts, dry-run -----------------------------------------------------------


def verdict_table(decision: Decision) -> list[tuple[str, str, str | None]]:
    return [(v.policy, v.outcome, v.message) for v in decision.verdicts]


def test_an_enforced_denial_carries_the_policys_own_message() -> None:
    policy = RecordingCreateTopicPolicy()
    policy.deny = "Topic orders needs min.insync.replicas"
    with PolicyChain(create_topic_policy=PolicyPlugin(policy=policy, name="acme.Create")) as c:
        decision = c.check_create_topic(REQUEST, principal=None)
    assert not decision.allowed
    assert decision.message == "Topic orders needs min.insync.replicas"
    assert verdict_table(decision) == [
        ("acme.Create", "denied", "Topic orders needs min.insync.replicas")
    ]


def test_a_dry_run_plugin_records_would_deny_and_allows() -> None:
    policy = RecordingCreateTopicPolicy()
    policy.deny = "too many partitions"
    plugin = PolicyPlugin(policy=policy, mode=Mode.DRY_RUN, name="acme.Create")
    with PolicyChain(create_topic_policy=plugin) as chain:
        decision = chain.check_create_topic(REQUEST, principal=None)
    assert decision.allowed
    # Allowed, and the message still says what the dry-run plug-in would deny.
    assert decision.message == "would deny (dry-run): too many partitions"
    assert verdict_table(decision) == [("acme.Create", "would_deny", "too many partitions")]
    assert decision.verdicts[0].mode is Mode.DRY_RUN


def test_every_rule_and_plugin_is_asked_and_every_violation_answers() -> None:
    dry = PartitionsRule(name="dry", mode=Mode.DRY_RUN, max=1)
    loose = PartitionsRule(name="loose", max=100)
    strict = PartitionsRule(name="strict", max=2)
    v1 = RecordingCreateTopicPolicy()
    v1.deny = "plug-in says no"
    with PolicyChain(
        rules=[dry, loose, strict], create_topic_policy=PolicyPlugin(policy=v1, name="acme.C")
    ) as chain:
        decision = chain.check_create_topic(REQUEST, principal=None)
    assert not decision.allowed
    assert [(p, o) for p, o, _ in verdict_table(decision)] == [
        ("dry", "would_deny"),
        ("loose", "allowed"),
        ("strict", "denied"),
        ("acme.C", "denied"),
    ]
    assert decision.message == (
        "3 policy violations: "
        "1) would deny (dry-run): topic orders: 6 partitions is above the maximum of 1 "
        "(rule dry); "
        "2) topic orders: 6 partitions is above the maximum of 2 (rule strict); "
        "3) plug-in says no"
    )


def test_nothing_configured_allows_with_no_verdicts() -> None:
    with PolicyChain() as chain:
        decision = chain.check_create_topic(REQUEST, principal=None)
    assert decision == Decision(allowed=True, verdicts=())


# --- fail closed ----------------------------------------------------------------------------


def test_a_policy_that_raises_denies_naming_its_class_and_the_exception() -> None:
    with PolicyChain(topic_action_policy=PolicyPlugin(policy=FailingTopicActionPolicy())) as c:
        decision = c.check_delete_topic("orders", pre_state=STATE, principal=None)
    assert not decision.allowed
    assert decision.message == (
        f"policy {__name__}.FailingTopicActionPolicy failed in validate(): KeyError: 'retention.ms'"
    )


def test_a_dry_run_policy_that_raises_only_would_deny() -> None:
    plugin = PolicyPlugin(policy=FailingTopicActionPolicy(), mode=Mode.DRY_RUN)
    with PolicyChain(topic_action_policy=plugin) as chain:
        decision = chain.check_delete_topic("orders", pre_state=STATE, principal=None)
    assert decision.allowed
    assert [v.outcome for v in decision.verdicts] == ["would_deny"]


def test_a_violation_without_a_message_still_tells_who_denied() -> None:
    policy = RecordingCreateTopicPolicy()
    policy.deny = ""
    with PolicyChain(create_topic_policy=PolicyPlugin(policy=policy, name="acme.C")) as chain:
        decision = chain.check_create_topic(REQUEST, principal=None)
    assert decision.message == "denied by policy acme.C"


class BrokenRule(Rule):
    operations = frozenset(TopicOperation)

    def check(self, change: TopicChange) -> str | None:
        raise ZeroDivisionError("division by zero")


def test_a_failing_rule_denies() -> None:
    with PolicyChain(rules=[BrokenRule(name="broken")]) as chain:
        decision = chain.check_delete_topic("orders", pre_state=STATE, principal=None)
    assert decision.message == "rule broken failed: ZeroDivisionError: division by zero"


def test_a_hanging_policy_times_out_and_denies(hanging: HangingCreateTopicPolicy) -> None:
    with PolicyChain(
        create_topic_policy=PolicyPlugin(policy=hanging, name="acme.Slow"), timeout_s=0.2
    ) as chain:
        started = time.monotonic()
        decision = chain.check_create_topic(REQUEST, principal=None)
        elapsed = time.monotonic() - started
        assert not decision.allowed
        assert decision.message == "policy acme.Slow did not return from validate() within 0.2 s"
        assert 0.2 <= elapsed < 2
        assert not hanging.returned.is_set()


def test_hung_calls_exhaust_the_pool_and_deny_at_once_until_they_return(
    hanging: HangingCreateTopicPolicy,
) -> None:
    plugin = PolicyPlugin(policy=hanging, name="acme.Slow")
    with PolicyChain(create_topic_policy=plugin, timeout_s=0.2, max_workers=1) as chain:
        first = chain.check_create_topic(REQUEST, principal=None)
        assert first.message is not None and "did not return" in first.message

        started = time.monotonic()
        second = chain.check_create_topic(REQUEST, principal=None)
        assert time.monotonic() - started < 0.1
        assert second.message == (
            "policy acme.Slow was not called: all 1 policy threads are busy "
            "with earlier calls that have not returned"
        )

        hanging.release.set()
        assert hanging.returned.wait(timeout=5)
        deadline = time.monotonic() + 5
        while not (third := chain.check_create_topic(REQUEST, principal=None)).allowed:
            assert time.monotonic() < deadline, third.message
            time.sleep(0.01)


def test_policy_threads_are_daemons(hanging: HangingCreateTopicPolicy) -> None:
    with PolicyChain(create_topic_policy=PolicyPlugin(policy=hanging), timeout_s=0.05) as chain:
        chain.check_create_topic(REQUEST, principal=None)
        workers = [t for t in threading.enumerate() if t.name.startswith("policy-worker")]
        assert workers
        assert all(t.daemon for t in workers)


# --- close ----------------------------------------------------------------------------------


class FailingClose(RecordingAlterConfigPolicy):
    def close(self) -> None:
        raise OSError("registry unreachable")


def test_close_closes_every_plugin_and_reports_failures() -> None:
    create, alter = RecordingCreateTopicPolicy(), FailingClose()
    chain = PolicyChain(
        create_topic_policy=PolicyPlugin(policy=create),
        alter_config_policy=PolicyPlugin(policy=alter, name="acme.Alter"),
    )
    problems = chain.close()
    assert create.closed
    assert problems == ("policy acme.Alter failed in close(): OSError: registry unreachable",)
    with pytest.raises(RuntimeError, match="closed"):
        chain.check_create_topic(REQUEST, principal=None)
    assert chain.close() == ()


# --- a create whose broker defaults nobody could read ---------------------------------------

PARTITIONS_UNKNOWN = unknown_default("orders", "num.partitions")


def unknown_partitions(chain: PolicyChain) -> Decision:
    """orders, with a replication factor of 3 and the partition count left to a default the
    gateway could not read."""
    return chain.run(
        chain.plan_create_topic_of_unknown_defaults(
            UnknownDefaults(
                topic="orders",
                configs={"retention.ms": "1000"},
                num_partitions=None,
                replication_factor=3,
            ),
            principal="User:alice",
        )
    )


def test_an_unknown_default_is_judged_by_the_rules_that_do_not_need_it() -> None:
    with PolicyChain() as chain:
        assert unknown_partitions(chain).allowed
    replication = ReplicationFactorRule(name="rf", min=3)
    with PolicyChain(rules=(replication,)) as chain:
        assert unknown_partitions(chain).allowed
    with PolicyChain(rules=(ReplicationFactorRule(name="rf", min=4),)) as chain:
        assert unknown_partitions(chain).message == (
            "topic orders: replication factor 3 is below the minimum of 4 (rule rf)"
        )


def test_an_unknown_default_is_denied_by_a_rule_that_bounds_it() -> None:
    with PolicyChain(rules=(PartitionsRule(name="most", max=8),)) as chain:
        decision = unknown_partitions(chain)
    assert not decision.allowed
    assert decision.message == f"{PARTITIONS_UNKNOWN} (rule most)"
    dry = PartitionsRule(name="most", max=8, mode=Mode.DRY_RUN)
    with PolicyChain(rules=(dry,)) as chain:
        assert unknown_partitions(chain).allowed


def test_an_unknown_replication_factor_is_denied_by_a_rule_that_bounds_it() -> None:
    """The replication factor left to a default nobody could read: a replication-factor rule
    cannot tell it is within bounds, so it denies (an empty list of factors judged nothing)."""
    unknown = unknown_default("orders", "default.replication.factor")
    topic = UnknownDefaults(topic="orders", configs={}, num_partitions=6, replication_factor=None)
    with PolicyChain(rules=(ReplicationFactorRule(name="rf", min=2),)) as chain:
        decision = chain.run(
            chain.plan_create_topic_of_unknown_defaults(topic, principal="User:alice")
        )
    assert (decision.allowed, decision.message) == (False, f"{unknown} (rule rf)")


def test_an_unknown_default_is_denied_for_a_plugin_without_calling_it() -> None:
    """Kafka gives CreateTopicPolicy and TopicActionPolicy both counts, resolved."""
    create, action = RecordingCreateTopicPolicy(), RecordingTopicActionPolicy()
    for plugins in ({"create_topic_policy": create}, {"topic_action_policy": action}):
        configured = {k: PolicyPlugin(policy=p) for k, p in plugins.items()}
        with PolicyChain(**configured) as chain:  # type: ignore[arg-type]
            decision = unknown_partitions(chain)
        assert (decision.allowed, decision.message) == (False, PARTITIONS_UNKNOWN)
    assert create.seen == [] and action.seen == []
    with pytest.raises(ValueError, match="no count is unknown"):
        PolicyChain().plan_create_topic_of_unknown_defaults(
            UnknownDefaults(topic="orders", configs={}, num_partitions=3, replication_factor=3),
            principal=None,
        )
