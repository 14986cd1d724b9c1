"""Built-in rules: the common policies a platform team sets in YAML instead of writing code.

Each rule looks at a :class:`TopicChange` (one topic of one request) and returns a message
when the change breaks it, None otherwise. What each operation shows the rules:

* create: the partition count and replication factor, and only the configs in the request
  (broker defaults are unknown here), so bounds, allowed values and forbidden configs apply
  to what is given, and a required config must be given;
* config change on a topic: the value each altered key has after the change (a deleted key
  falls back to its default and is not checked against bounds), and the full set after the
  change for required configs. Values the request does not touch are not judged, so an
  existing topic that predates a rule can still be changed in other ways;
* partition increase: the new partition count against the maximum;
* delete: nothing but protected topics.

A denial says what was refused and why, never who would have been allowed.

Rules see topic configs only; config changes on other resources (brokers, groups, ...) are
left to the plug-ins.
"""

from __future__ import annotations

import enum
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Final

from policies.api import CreateTopicRequestMetadata, FrozenMap

__all__ = [
    "LIST_CONFIGS",
    "ConfigRule",
    "ForbiddenConfigsRule",
    "Mode",
    "PartitionsRule",
    "ProtectedTopicsRule",
    "ReplicationFactorRule",
    "RequiredConfigsRule",
    "Rule",
    "TopicChange",
    "TopicNameRule",
    "TopicOperation",
]

# Kafka's LIST-typed topic configs: a comma-separated value whose items are checked one by one
# against a rule's allowed values (so ``allowed: [compact, delete]`` accepts "compact,delete").
LIST_CONFIGS = frozenset(
    {
        "cleanup.policy",
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
    }
)


class Mode(enum.StrEnum):
    """ENFORCE denies; DRY_RUN only records that it would have denied."""

    ENFORCE = "enforce"
    DRY_RUN = "dry-run"


UNCLEAN_LEADER_ELECTION: Final = "unclean.leader.election.enable"


class TopicOperation(enum.Enum):
    CREATE_TOPIC = "create_topic"
    ALTER_CONFIGS = "alter_configs"
    CREATE_PARTITIONS = "create_partitions"
    DELETE_TOPIC = "delete_topic"
    DELETE_RECORDS = "delete_records"
    DELETE_OFFSETS = "delete_offsets"
    """OffsetDelete: a consumer group's committed offsets of the topic."""
    REASSIGN_PARTITIONS = "reassign_partitions"
    ELECT_LEADERS = "elect_leaders"
    """An unclean leader election: judged as setting unclean.leader.election.enable=true."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicChange:
    """What the rules see of one topic in one request; build it with the class methods."""

    operation: TopicOperation
    topic: str
    principal: str | None
    num_partitions: int | None = None
    """The partition count after a create or a partition increase."""
    replication_factors: tuple[int, ...] = ()
    """A create's replica count per partition (one entry when given as a count)."""
    set_configs: Mapping[str, str] = FrozenMap()
    """The values the request sets: a create's configs, an alter's new values."""
    configs_after: Mapping[str, str] = FrozenMap()
    """The topic's configs once the request is done (a create's: those in the request)."""

    @classmethod
    def create_topic(
        cls, request: CreateTopicRequestMetadata, principal: str | None
    ) -> TopicChange:
        if request.replicas_assignments is None:
            assert request.num_partitions is not None
            assert request.replication_factor is not None
            num_partitions = request.num_partitions
            factors: tuple[int, ...] = (request.replication_factor,)
        else:
            num_partitions = len(request.replicas_assignments)
            factors = tuple(len(r) for r in request.replicas_assignments.values())
        return cls(
            operation=TopicOperation.CREATE_TOPIC,
            topic=request.topic,
            principal=principal,
            num_partitions=num_partitions,
            replication_factors=factors,
            set_configs=request.configs,
            configs_after=request.configs,
        )

    @classmethod
    def alter_configs(
        cls,
        topic: str,
        altered: Mapping[str, str | None],
        after: Mapping[str, str],
        principal: str | None,
    ) -> TopicChange:
        return cls(
            operation=TopicOperation.ALTER_CONFIGS,
            topic=topic,
            principal=principal,
            set_configs=FrozenMap((k, after[k]) for k in altered if k in after),
            configs_after=FrozenMap(after),
        )

    @classmethod
    def create_partitions(
        cls, topic: str, num_partitions: int, principal: str | None
    ) -> TopicChange:
        return cls(
            operation=TopicOperation.CREATE_PARTITIONS,
            topic=topic,
            principal=principal,
            num_partitions=num_partitions,
        )

    @classmethod
    def delete_topic(cls, topic: str, principal: str | None) -> TopicChange:
        return cls(operation=TopicOperation.DELETE_TOPIC, topic=topic, principal=principal)

    @classmethod
    def on_data(cls, operation: TopicOperation, topic: str, principal: str | None) -> TopicChange:
        """DeleteRecords or OffsetDelete on the topic: who may, is all the rules ask."""
        return cls(operation=operation, topic=topic, principal=principal)

    @classmethod
    def reassign_partitions(
        cls, topic: str, replication_factors: tuple[int, ...], principal: str | None
    ) -> TopicChange:
        """The replica counts the reassigned partitions will have."""
        return cls(
            operation=TopicOperation.REASSIGN_PARTITIONS,
            topic=topic,
            principal=principal,
            replication_factors=replication_factors,
        )

    @classmethod
    def unclean_election(
        cls, topic: str, configs: Mapping[str, str], principal: str | None
    ) -> TopicChange:
        """An unclean leader election, as the config that permits one: a rule that forbids
        ``unclean.leader.election.enable=true`` forbids the election too."""
        permits = {UNCLEAN_LEADER_ELECTION: "true"}
        return cls(
            operation=TopicOperation.ELECT_LEADERS,
            topic=topic,
            principal=principal,
            set_configs=FrozenMap(permits),
            configs_after=FrozenMap({**configs, **permits}),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule(ABC):
    """A built-in rule. ``operations`` are those it has something to say about."""

    name: str
    mode: Mode = Mode.ENFORCE

    operations: ClassVar[frozenset[TopicOperation]]

    @abstractmethod
    def check(self, change: TopicChange) -> str | None:
        """The message for the client if ``change`` breaks the rule, else None."""

    def _deny(self, problem: str) -> str:
        return f"{problem} (rule {self.name})"


def _bounds_problem(
    what: str, value: float, minimum: float | None, maximum: float | None
) -> str | None:
    if minimum is not None and value < minimum:
        return f"{what} is below the minimum of {minimum}"
    if maximum is not None and value > maximum:
        return f"{what} is above the maximum of {maximum}"
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionsRule(Rule):
    """Bounds on the partition count; a partition increase is held to the maximum only."""

    min: int | None = None
    max: int | None = None

    operations = frozenset({TopicOperation.CREATE_TOPIC, TopicOperation.CREATE_PARTITIONS})

    def check(self, change: TopicChange) -> str | None:
        if change.num_partitions is None:
            return None
        minimum = self.min if change.operation is TopicOperation.CREATE_TOPIC else None
        problem = _bounds_problem(
            f"topic {change.topic}: {change.num_partitions} partitions",
            change.num_partitions,
            minimum,
            self.max,
        )
        return None if problem is None else self._deny(problem)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicationFactorRule(Rule):
    """Bounds on the replication factor of a new topic (every partition's replica count), and
    of the partitions a reassignment moves."""

    min: int | None = None
    max: int | None = None

    operations = frozenset({TopicOperation.CREATE_TOPIC, TopicOperation.REASSIGN_PARTITIONS})

    def check(self, change: TopicChange) -> str | None:
        for factor in sorted(set(change.replication_factors)):
            problem = _bounds_problem(
                f"topic {change.topic}: replication factor {factor}", factor, self.min, self.max
            )
            if problem is not None:
                return self._deny(problem)
        return None


def _as_number(value: str) -> float | None:
    text = value.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigRule(Rule):
    """One topic config: numeric bounds (``min``/``max``) or a set of ``allowed`` values.

    Only a value the request sets is checked. For a LIST-typed config (``cleanup.policy``)
    each comma-separated item must be allowed.
    """

    config: str
    min: float | None = None
    max: float | None = None
    allowed: frozenset[str] | None = None

    operations = frozenset(
        {TopicOperation.CREATE_TOPIC, TopicOperation.ALTER_CONFIGS, TopicOperation.ELECT_LEADERS}
    )

    def check(self, change: TopicChange) -> str | None:
        value = change.set_configs.get(self.config)
        if value is None:
            return None
        what = f"topic {change.topic}: {self.config}={value}"
        if self.allowed is not None:
            items = value.split(",") if self.config in LIST_CONFIGS else [value]
            for item in items:
                if item.strip() not in self.allowed:
                    choices = ", ".join(sorted(self.allowed))
                    return self._deny(f"{what}: {item.strip()!r} is not one of {choices}")
        if self.min is not None or self.max is not None:
            number = _as_number(value)
            if number is None:
                return self._deny(f"{what} is not a number")
            problem = _bounds_problem(what, number, self.min, self.max)
            if problem is not None:
                return self._deny(problem)
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class RequiredConfigsRule(Rule):
    """Configs a topic must set: given on create, and not deleted later."""

    configs: tuple[str, ...]

    operations = frozenset({TopicOperation.CREATE_TOPIC, TopicOperation.ALTER_CONFIGS})

    def check(self, change: TopicChange) -> str | None:
        missing = [key for key in self.configs if key not in change.configs_after]
        if not missing:
            return None
        return self._deny(f"topic {change.topic}: config {', '.join(missing)} must be set")


@dataclass(frozen=True, slots=True, kw_only=True)
class ForbiddenConfigsRule(Rule):
    """Configs a request may not set (deleting one, back to the default, is allowed)."""

    configs: tuple[str, ...]

    operations = frozenset(
        {TopicOperation.CREATE_TOPIC, TopicOperation.ALTER_CONFIGS, TopicOperation.ELECT_LEADERS}
    )

    def check(self, change: TopicChange) -> str | None:
        present = [key for key in self.configs if key in change.set_configs]
        if not present:
            return None
        return self._deny(f"topic {change.topic}: config {', '.join(present)} may not be set")


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicNameRule(Rule):
    """New topic names must match ``pattern`` as a whole."""

    pattern: re.Pattern[str]

    operations = frozenset({TopicOperation.CREATE_TOPIC})

    def check(self, change: TopicChange) -> str | None:
        if self.pattern.fullmatch(change.topic):
            return None
        return self._deny(
            f"topic name {change.topic!r} does not match the pattern {self.pattern.pattern!r}"
        )


_PROTECTED_VERBS = {
    TopicOperation.CREATE_TOPIC: "create it",
    TopicOperation.ALTER_CONFIGS: "change its configs",
    TopicOperation.CREATE_PARTITIONS: "add partitions to it",
    TopicOperation.DELETE_TOPIC: "delete it",
    TopicOperation.DELETE_RECORDS: "delete records from it",
    TopicOperation.DELETE_OFFSETS: "delete a consumer group's offsets of it",
    TopicOperation.REASSIGN_PARTITIONS: "move its replicas",
    TopicOperation.ELECT_LEADERS: "elect an unclean leader for it",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ProtectedTopicsRule(Rule):
    """Topics matching one of ``topics`` (whole-name patterns) can be created, deleted,
    modified or reconfigured only by the principals in ``allowed_principals``
    (``"User:alice"``); an unauthenticated client never.

    The denial names the operation and who asked, never who is allowed."""

    topics: tuple[re.Pattern[str], ...]
    allowed_principals: frozenset[str] = frozenset()

    operations = frozenset(_PROTECTED_VERBS)

    def check(self, change: TopicChange) -> str | None:
        if not any(p.fullmatch(change.topic) for p in self.topics):
            return None
        if change.principal is not None and change.principal in self.allowed_principals:
            return None
        refusal = _refusal(
            change.principal, self.allowed_principals, _PROTECTED_VERBS[change.operation]
        )
        return self._deny(f"topic {change.topic} is protected: {refusal}")


def _refusal(principal: str | None, allowed_principals: frozenset[str], verb: str) -> str:
    """Who may not do what, for a denial: the one who asked (or no one at all, when nobody
    is allowed); never the principals who are allowed."""
    if not allowed_principals:
        return f"no one may {verb}"
    who = principal if principal is not None else "an unauthenticated client"
    return f"{who} may not {verb}"
