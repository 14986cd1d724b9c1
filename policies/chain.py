"""The policy chain: the one object the gateway asks whether a topic or config change may go on.

Each ``check_*`` method returns a :class:`Decision`; a denial is an ordinary value. For one
topic (or config resource) the chain consults, in this order:

1. the built-in rules (:mod:`policies.rules`), inline;
2. the old policies, run in the topic-action flow the way KIP-201's adapter does:
   ``CreateTopicPolicy`` on a create with the request's own metadata, ``AlterConfigPolicy`` on
   a config change with the altered keys only (any resource type); neither is asked about
   partition increases or deletes, as Kafka never asked them;
3. ``AlterConfigV2Policy`` on a config change, with the configs before and after;
4. ``TopicActionPolicy`` on a create, a topic config change, a partition increase and a
   delete.

Everything that applies is consulted, even after a denial, so the verdicts show every rule and
plug-in that objects (dry-run ones included). The decision's message lists them all
(:mod:`policies.violations`), enforced denials and dry-run ones, so a client sees every reason.

Each ``plan_*`` method runs the built-in rules at once and returns a :class:`Check`: their
verdicts and the plug-in calls still to make, in order. The gateway makes those calls through
its asynchronous runner (``gateway.policy_runner``), never blocking its event loop, and a
check without plug-ins never leaves the caller's thread; :meth:`PolicyChain.run` makes them
synchronously, and each ``check_*`` method is ``run(plan_*(...))`` for tools and tests.

Every plug-in call, topic, config or record policy alike, runs on the one
:class:`WorkerPool` and is waited for at most ``timeout_s``. A call that does not return in
time denies; its thread stays busy until the call returns, so the pool (``max_workers``)
bounds how many hung calls there can be. Called synchronously (:meth:`PolicyChain.run`), a call
that finds every worker busy denies at once without calling the plug-in; the gateway's runner
has such a call wait its turn instead (fairly between clients, and within ``timeout_s``). The
threads are daemons: a hung policy does not keep the process alive.

A denial names the plug-in (or rule) and, for a failure, the exception; the fail-closed
contract itself is :mod:`policies`'.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Literal, TypeVar, cast

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
from policies.rules import (
    Mode,
    ResourceConfigChange,
    Rule,
    TopicChange,
    TopicOperation,
    UnknownDefaults,
)
from policies.violations import Violation, client_message, violations_of

__all__ = [
    "Decision",
    "Mode",
    "Outcome",
    "Policy",
    "PolicyChain",
    "Check",
    "PluginCall",
    "PolicyPlugin",
    "Verdict",
    "WorkerPool",
]

Outcome = Literal["allowed", "denied", "would_deny"]
Policy = CreateTopicPolicy | AlterConfigPolicy | AlterConfigV2Policy | TopicActionPolicy


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """What one rule or plug-in said. ``policy`` is a rule's name or a plug-in's class name."""

    policy: str
    mode: Mode
    outcome: Outcome
    message: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """The chain's answer for one topic or resource."""

    allowed: bool
    verdicts: tuple[Verdict, ...]

    @property
    def violations(self) -> tuple[Violation, ...]:
        """Every verdict that objects, enforced or dry-run, in the chain's order."""
        return violations_of(self.verdicts)

    @property
    def message(self) -> str | None:
        """The message for the client (Kafka's error_message): every violation, enforced and
        dry-run, in one (:func:`policies.violations.client_message`); None when none."""
        return client_message(self.violations)


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyPlugin:
    """A configured plug-in instance; ``name`` defaults to its class's dotted name."""

    policy: Policy
    mode: Mode = Mode.ENFORCE
    name: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            cls = type(self.policy)
            object.__setattr__(self, "name", f"{cls.__module__}.{cls.__qualname__}")


CLUSTER_SETTINGS: Final[Mapping[str, tuple[TopicOperation, str]]] = {
    # the audited action -> what the rules see, and how a denial names it
    "alter_client_quotas": (TopicOperation.ALTER_CLIENT_QUOTAS, "the client quotas of {}"),
    "alter_scram_credentials": (
        TopicOperation.ALTER_USER_SCRAM_CREDENTIALS,
        "the SCRAM credentials of user {}",
    ),
}
"""The cluster-wide settings judged by who asks (:meth:`PolicyChain.plan_cluster_setting`)."""

_Call = Callable[[], None]
T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class PluginCall:
    """A plug-in's ``validate()`` still to be made; its verdict takes this step's place."""

    plugin: PolicyPlugin
    call: _Call


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    """One topic's or resource's check, planned: the rules' verdicts (already known) and the
    plug-in calls still to make, in the order their verdicts count."""

    steps: tuple[Verdict | PluginCall, ...]

    @property
    def calls(self) -> tuple[PluginCall, ...]:
        return tuple(step for step in self.steps if isinstance(step, PluginCall))

    def decide(self, verdicts: Mapping[int, Verdict]) -> Decision:
        """The decision, given the verdict of each plug-in call (by its index in ``steps``)."""
        return _decide(
            [
                verdicts[i] if isinstance(step, PluginCall) else step
                for i, step in enumerate(self.steps)
            ]
        )


class WorkerPool:
    """At most ``max_workers`` daemon threads running plug-in calls; refuses when all are busy.

    Not ``concurrent.futures.ThreadPoolExecutor``: its threads are joined at interpreter exit,
    so one hung policy would keep the gateway from exiting. Whoever queues calls of its own
    for a busy pool learns of each freed worker from :meth:`on_free`.
    """

    def __init__(self, max_workers: int) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self._max_workers = max_workers
        self._lock = threading.Lock()
        self._busy = 0
        self._threads: list[threading.Thread] = []
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = (
            queue.SimpleQueue()
        )
        self._on_free: Callable[[], None] | None = None

    def on_free(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (on the worker's thread) each time a worker finishes a call."""
        self._on_free = listener

    @property
    def max_workers(self) -> int:
        return self._max_workers

    def try_submit(self, call: Callable[[], T]) -> Future[T] | None:
        """Start ``call`` on a free worker; None when every worker is busy."""
        with self._lock:
            if self._busy >= self._max_workers:
                return None
            self._busy += 1
            if len(self._threads) < self._busy:
                thread = threading.Thread(
                    target=self._work, name=f"policy-worker-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
        future: Future[T] = Future()
        self._queue.put((future, call))
        return future

    def shutdown(self) -> None:
        """Let idle workers end; a worker stuck in a call ends when the call returns."""
        for _ in self._threads:
            self._queue.put(None)

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            future, call = item
            try:
                if future.set_running_or_notify_cancel():
                    try:
                        result = call()
                    except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
                        future.set_exception(exc)
                    else:
                        future.set_result(result)
            finally:
                with self._lock:
                    self._busy -= 1
                if (listener := self._on_free) is not None:
                    listener()


def _verdict(policy: str, mode: Mode, denial: str | None) -> Verdict:
    if denial is None:
        return Verdict(policy=policy, mode=mode, outcome="allowed", message=None)
    outcome: Outcome = "denied" if mode is Mode.ENFORCE else "would_deny"
    return Verdict(policy=policy, mode=mode, outcome=outcome, message=denial)


def _decide(verdicts: Sequence[Verdict]) -> Decision:
    return Decision(allowed=all(v.outcome != "denied" for v in verdicts), verdicts=tuple(verdicts))


class PolicyChain:
    """Built-in rules and plug-ins, asked in order for each action (see :mod:`policies.chain`).

    Configuring ``create_topic_policy`` or ``alter_config_policy`` together with
    ``topic_action_policy`` is an error (KIP-201). Plug-ins must already be configured;
    :meth:`close` closes them.

    :raises ValueError: on such a conflict, duplicate rule names or a bad pool size.
    :raises TypeError: if a plug-in is not of the kind its argument names.
    """

    def __init__(
        self,
        *,
        rules: Sequence[Rule] = (),
        create_topic_policy: PolicyPlugin | None = None,
        alter_config_policy: PolicyPlugin | None = None,
        alter_config_v2_policy: PolicyPlugin | None = None,
        topic_action_policy: PolicyPlugin | None = None,
        timeout_s: float = 5.0,
        max_workers: int = 8,
    ) -> None:
        if topic_action_policy is not None:
            for old, name in (
                (create_topic_policy, "create_topic_policy"),
                (alter_config_policy, "alter_config_policy"),
            ):
                if old is not None:
                    raise ValueError(f"{name} cannot be used together with topic_action_policy")
        names = [rule.name for rule in rules]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate rule names: {', '.join(duplicates)}")
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self._rules = tuple(rules)
        for plugin, kind, argument in (
            (create_topic_policy, CreateTopicPolicy, "create_topic_policy"),
            (alter_config_policy, AlterConfigPolicy, "alter_config_policy"),
            (alter_config_v2_policy, AlterConfigV2Policy, "alter_config_v2_policy"),
            (topic_action_policy, TopicActionPolicy, "topic_action_policy"),
        ):
            if plugin is not None and not isinstance(plugin.policy, kind):
                raise TypeError(f"{argument}: {plugin.name} is not a {kind.__name__}")
        self._create_topic = create_topic_policy
        self._alter_config = alter_config_policy
        self._alter_config_v2 = alter_config_v2_policy
        self._topic_action = topic_action_policy
        self._plugins = tuple(
            p
            for p in (
                create_topic_policy,
                alter_config_policy,
                alter_config_v2_policy,
                topic_action_policy,
            )
            if p is not None
        )
        self._timeout_s = timeout_s
        self._pool = WorkerPool(max_workers)
        self._closed = False

    @property
    def rules(self) -> tuple[Rule, ...]:
        return self._rules

    @property
    def plugins(self) -> tuple[PolicyPlugin, ...]:
        return self._plugins

    @property
    def timeout_s(self) -> float:
        return self._timeout_s

    @property
    def needs_topic_state(self) -> bool:
        """Whether the states passed in must be complete, configs included.

        Only a ``TopicActionPolicy`` reads them; without one the gateway may pass states whose
        configs are empty and need not fetch a topic's state for a config change.
        """
        return self._topic_action is not None

    # --- the checks ---------------------------------------------------------------------------

    def plan_create_topic(
        self, request: CreateTopicRequestMetadata, *, principal: str | None
    ) -> Check:
        """One topic of a CreateTopics request."""
        steps: list[Verdict | PluginCall] = list(
            self._run_rules(TopicChange.create_topic(request, principal))
        )
        if self._create_topic is not None:
            create_policy = cast(CreateTopicPolicy, self._create_topic.policy)
            steps.append(
                PluginCall(plugin=self._create_topic, call=lambda: create_policy.validate(request))
            )
        steps.extend(
            self._topic_action_steps(
                TopicAction.CREATE, request.topic, principal, None, TopicState.requested_by(request)
            )
        )
        return Check(steps=tuple(steps))

    def plan_create_topic_of_unknown_defaults(
        self, topic: UnknownDefaults, *, principal: str | None
    ) -> Check:
        """One topic of a CreateTopics request that leaves a count to the broker's default,
        which could not be read. The rules judge it, and one that bounds an unknown count
        denies it with the reason; a CreateTopicPolicy or TopicActionPolicy, which Kafka
        always gives both counts, is not called and denies it (in its own mode). A topic no
        policy needs the counts of is judged as any other.

        :raises ValueError: when neither count is unknown (use :meth:`plan_create_topic`).
        """
        unknown = topic.partitions_unknown or topic.replication_factor_unknown
        if unknown is None:
            raise ValueError("no count is unknown: plan_create_topic judges this topic")
        change = TopicChange.create_topic_of_unknown_defaults(topic, principal)
        steps: list[Verdict | PluginCall] = list(self._run_rules(change))
        for plugin in (self._create_topic, self._topic_action):
            if plugin is not None:
                steps.append(plugin_verdict(plugin, unknown))
        return Check(steps=tuple(steps))

    def plan_alter_config(
        self,
        resource: ConfigResource,
        *,
        altered: Mapping[str, str | None],
        before: Mapping[str, str],
        after: Mapping[str, str],
        principal: str | None,
        topic_state: TopicState | None = None,
    ) -> Check:
        """A config change on one resource (AlterConfigs or IncrementalAlterConfigs).

        ``altered``: the keys the request alters, None for a deleted key (for the legacy
        AlterConfigs: every key it sends). ``before``/``after``: the configs set on the
        resource before and after the change, without defaults. ``topic_state``: for a topic,
        its current partitions and replicas; a ``TopicActionPolicy`` needs it (see
        :attr:`needs_topic_state`), and denies when it is missing.
        """
        is_topic = resource.type is ConfigResourceType.TOPIC
        # The rules judge topic configs, and broker-side resources (BROKER: the topics'
        # defaults and who asks; BROKER_LOGGER, CLIENT_METRICS: who asks); the plug-ins see
        # every resource type, as Kafka's AlterConfigPolicy does.
        change: TopicChange | ResourceConfigChange | None = (
            TopicChange.alter_configs(resource.name, altered, after, principal)
            if is_topic
            else ResourceConfigChange.alter_configs(
                resource, altered=altered, before=before, after=after, principal=principal
            )
        )
        steps: list[Verdict | PluginCall] = list(self._run_rules(change))
        if self._alter_config is not None:
            alter_policy = cast(AlterConfigPolicy, self._alter_config.policy)
            v1 = AlterConfigRequestMetadata(resource=resource, configs=altered)
            steps.append(
                PluginCall(plugin=self._alter_config, call=lambda: alter_policy.validate(v1))
            )
        if self._alter_config_v2 is not None:
            v2_policy = cast(AlterConfigV2Policy, self._alter_config_v2.policy)
            v2 = AlterConfigV2RequestMetadata(
                resource=resource, configs_before=before, configs_after=after
            )
            steps.append(
                PluginCall(plugin=self._alter_config_v2, call=lambda: v2_policy.validate(v2))
            )
        if is_topic and self._topic_action is not None:
            if topic_state is None:
                plugin = self._topic_action
                missing = (
                    f"policy {plugin.name} needs the state of topic {resource.name}: not known"
                )
                steps.append(_verdict(plugin.name, plugin.mode, missing))
            else:
                metadata = TopicActionRequestMetadata(
                    action=TopicAction.MODIFY,
                    topic=resource.name,
                    principal=principal,
                    pre_request_state=_with_configs(topic_state, before),
                    post_request_state=_with_configs(topic_state, after),
                )
                steps.append(self._topic_action_call(metadata))
        return Check(steps=tuple(steps))

    def plan_create_partitions(
        self,
        topic: str,
        *,
        pre_state: TopicState,
        post_state: TopicState,
        principal: str | None,
    ) -> Check:
        """One topic of a CreatePartitions request: ``post_state`` has the new count."""
        change = TopicChange.create_partitions(topic, post_state.num_partitions, principal)
        steps: list[Verdict | PluginCall] = list(self._run_rules(change))
        steps.extend(
            self._topic_action_steps(TopicAction.MODIFY, topic, principal, pre_state, post_state)
        )
        return Check(steps=tuple(steps))

    def plan_delete_topic(
        self, topic: str, *, pre_state: TopicState, principal: str | None
    ) -> Check:
        """One topic of a DeleteTopics request."""
        steps: list[Verdict | PluginCall] = list(
            self._run_rules(TopicChange.delete_topic(topic, principal))
        )
        steps.extend(
            self._topic_action_steps(TopicAction.DELETE, topic, principal, pre_state, None)
        )
        return Check(steps=tuple(steps))

    def plan_data_operation(
        self, operation: TopicOperation, topic: str, *, principal: str | None
    ) -> Check:
        """DeleteRecords or OffsetDelete on one topic: the rules (protected topics) decide;
        no Kafka policy interface is asked about them."""
        return Check(steps=tuple(self._run_rules(TopicChange.on_data(operation, topic, principal))))

    def plan_cluster_setting(self, action: str, name: str, *, principal: str | None) -> Check:
        """AlterClientQuotas of one entity or AlterUserScramCredentials of one user (``action``
        one of :data:`CLUSTER_SETTINGS`, as audited; ``name`` the entity or user): the rules
        (``broker.configs``) decide who may; no Kafka policy interface is asked about them."""
        operation, label = CLUSTER_SETTINGS[action]
        change = ResourceConfigChange.cluster_setting(
            operation, label.format(name), principal=principal
        )
        return Check(steps=tuple(self._run_rules(change)))

    def plan_reassign_partitions(
        self,
        topic: str,
        *,
        pre_state: TopicState,
        post_state: TopicState,
        principal: str | None,
    ) -> Check:
        """AlterPartitionReassignments on one topic: a KIP-201 MODIFY whose state after has
        the new replicas of the partitions it moves."""
        assignments = post_state.replicas_assignments or {}
        moved = tuple(
            len(replicas)
            for partition, replicas in assignments.items()
            if (pre_state.replicas_assignments or {}).get(partition) != replicas
        )
        change = TopicChange.reassign_partitions(topic, moved, principal)
        steps: list[Verdict | PluginCall] = list(self._run_rules(change))
        steps.extend(
            self._topic_action_steps(TopicAction.MODIFY, topic, principal, pre_state, post_state)
        )
        return Check(steps=tuple(steps))

    def plan_unclean_election(
        self, topic: str, *, configs: Mapping[str, str], principal: str | None
    ) -> Check:
        """An unclean leader election on one topic (``configs``: the topic's own), judged as
        setting unclean.leader.election.enable=true."""
        change = TopicChange.unclean_election(topic, configs, principal)
        return Check(steps=tuple(self._run_rules(change)))

    def check_create_topic(
        self, request: CreateTopicRequestMetadata, *, principal: str | None
    ) -> Decision:
        """:meth:`plan_create_topic`, run here (blocks up to ``timeout_s`` per plug-in)."""
        return self.run(self.plan_create_topic(request, principal=principal))

    def check_alter_config(
        self,
        resource: ConfigResource,
        *,
        altered: Mapping[str, str | None],
        before: Mapping[str, str],
        after: Mapping[str, str],
        principal: str | None,
        topic_state: TopicState | None = None,
    ) -> Decision:
        """:meth:`plan_alter_config`, run here (blocks up to ``timeout_s`` per plug-in)."""
        return self.run(
            self.plan_alter_config(
                resource,
                altered=altered,
                before=before,
                after=after,
                principal=principal,
                topic_state=topic_state,
            )
        )

    def check_create_partitions(
        self,
        topic: str,
        *,
        pre_state: TopicState,
        post_state: TopicState,
        principal: str | None,
    ) -> Decision:
        """:meth:`plan_create_partitions`, run here (blocks up to ``timeout_s`` per plug-in)."""
        return self.run(
            self.plan_create_partitions(
                topic, pre_state=pre_state, post_state=post_state, principal=principal
            )
        )

    def check_delete_topic(
        self, topic: str, *, pre_state: TopicState, principal: str | None
    ) -> Decision:
        """:meth:`plan_delete_topic`, run here (blocks up to ``timeout_s`` per plug-in)."""
        return self.run(self.plan_delete_topic(topic, pre_state=pre_state, principal=principal))

    def run(self, check: Check) -> Decision:
        """Make the plug-in calls of ``check`` one after the other, on the pool."""
        return check.decide(
            {
                index: _verdict(
                    step.plugin.name,
                    step.plugin.mode,
                    self._call(step.plugin.name, step.call, what="validate()"),
                )
                for index, step in enumerate(check.steps)
                if isinstance(step, PluginCall)
            }
        )

    # --- shutdown -----------------------------------------------------------------------------

    def close(self) -> tuple[str, ...]:
        """Close every plug-in (each within ``timeout_s``) and stop the workers.

        :returns: one message per plug-in whose ``close()`` failed or did not return, for the
            caller to log; nothing is dropped silently.
        """
        if self._closed:
            return ()
        self._closed = True
        problems = []
        for plugin in self._plugins:
            problem = self._call(plugin.name, plugin.policy.close, what="close()")
            if problem is not None:
                problems.append(problem)
        self._pool.shutdown()
        return tuple(problems)

    def __enter__(self) -> PolicyChain:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # --- running ------------------------------------------------------------------------------

    def _run_rules(self, change: TopicChange | ResourceConfigChange | None) -> list[Verdict]:
        """Run the rules; every check starts here, so this also refuses a closed chain."""
        if self._closed:
            raise RuntimeError("the policy chain is closed")
        verdicts: list[Verdict] = []
        if change is None:
            return verdicts
        for rule in self._rules:
            if change.operation not in rule.operations:
                continue
            try:
                if isinstance(change, TopicChange):
                    denial = rule.check(change)
                else:
                    denial = rule.check_resource(change)
            except Exception as exc:  # noqa: BLE001 - a rule that fails denies, named
                denial = f"rule {rule.name} failed: {type(exc).__name__}: {exc}"
            verdicts.append(_verdict(rule.name, rule.mode, denial))
        return verdicts

    def _topic_action_steps(
        self,
        action: TopicAction,
        topic: str,
        principal: str | None,
        pre: TopicState | None,
        post: TopicState | None,
    ) -> tuple[PluginCall, ...]:
        """The TopicActionPolicy's call for this action, when one is configured."""
        if self._topic_action is None:
            return ()
        metadata = TopicActionRequestMetadata(
            action=action,
            topic=topic,
            principal=principal,
            pre_request_state=pre,
            post_request_state=post,
        )
        return (self._topic_action_call(metadata),)

    def _topic_action_call(self, metadata: TopicActionRequestMetadata) -> PluginCall:
        assert self._topic_action is not None
        policy = cast(TopicActionPolicy, self._topic_action.policy)
        return PluginCall(plugin=self._topic_action, call=lambda: policy.validate(metadata))

    @property
    def pool(self) -> WorkerPool:
        """The one pool every plug-in call runs on (record validation plug-ins too)."""
        return self._pool

    def _call(self, name: str, call: _Call, *, what: str) -> str | None:
        """Run ``call`` on a worker; the denial message, or None if it returned normally."""
        future = self._pool.try_submit(call)
        if future is None:
            return busy_message(name, self._pool)
        try:
            exc = future.exception(timeout=self._timeout_s)
        except TimeoutError:
            return timeout_message(name, what, self._timeout_s)
        return failure_message(name, what, exc)


def busy_message(name: str, pool: WorkerPool) -> str:
    return (
        f"policy {name} was not called: all {pool.max_workers} policy threads "
        "are busy with earlier calls that have not returned"
    )


def timeout_message(name: str, what: str, timeout_s: float) -> str:
    return f"policy {name} did not return from {what} within {timeout_s:g} s"


def failure_message(name: str, what: str, exc: BaseException | None) -> str | None:
    """The denial for a call that ended with ``exc`` (None: it returned, and allows)."""
    if exc is None:
        return None
    if isinstance(exc, PolicyViolation):
        return exc.message or f"denied by policy {name}"
    return f"policy {name} failed in {what}: {type(exc).__name__}: {exc}"


def plugin_verdict(plugin: PolicyPlugin, denial: str | None) -> Verdict:
    """A plug-in's verdict from its denial message (None: it allowed)."""
    return _verdict(plugin.name, plugin.mode, denial)


def _with_configs(state: TopicState, configs: Mapping[str, str]) -> TopicState:
    return TopicState(
        num_partitions=state.num_partitions,
        replication_factor=state.replication_factor,
        replicas_assignments=state.replicas_assignments,
        configs=configs,
    )
