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
* delete: nothing but protected topics;
* config change on a BROKER resource (a broker id, or ``""`` for the cluster default): the
  ``config`` and ``forbidden.configs`` rules judge the broker configs that are the topics'
  defaults, found through Kafka's synonym table (:data:`BROKER_SYNONYMS`): a ``config`` rule
  on ``retention.ms`` judges the value ``log.retention.ms``, ``.minutes`` or ``.hours`` gives
  it after the change, in milliseconds; ``broker.configs`` judges who asks;
* config change on a BROKER_LOGGER or CLIENT_METRICS resource: ``broker.configs`` only.

GROUP resources and the gateway's own dynamic client configs are left to the plug-ins, which
see every resource type.

A denial says what was refused and why, never who would have been allowed.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Final, Protocol

from policies.api import (
    ConfigResource,
    ConfigResourceType,
    CreateTopicRequestMetadata,
    FrozenMap,
)

__all__ = [
    "BROKER_SYNONYMS",
    "LIST_CONFIGS",
    "NO_LIMIT_WHEN_NEGATIVE",
    "NamePattern",
    "BrokerConfigsRule",
    "BrokerSetting",
    "ConfigRule",
    "ConfigSynonym",
    "ForbiddenConfigsRule",
    "Mode",
    "PartitionsRule",
    "ProtectedTopicsRule",
    "ReplicationFactorRule",
    "RequiredConfigsRule",
    "ResourceConfigChange",
    "SHOWN_VALUE_CHARS",
    "Rule",
    "TOPIC_CONFIGS",
    "TopicChange",
    "TopicNameRule",
    "TopicOperation",
    "shown_value",
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
    ALTER_BROKER_CONFIGS = "alter_broker_configs"
    """A config change on a BROKER resource: a broker id, or "" for the cluster default."""
    ALTER_BROKER_LOGGER_CONFIGS = "alter_broker_logger_configs"
    ALTER_CLIENT_METRICS_CONFIGS = "alter_client_metrics_configs"
    ALTER_CLIENT_QUOTAS = "alter_client_quotas"
    """AlterClientQuotas: the quotas of one entity (a user, a client id, an IP, a default)."""
    ALTER_USER_SCRAM_CREDENTIALS = "alter_user_scram_credentials"
    """AlterUserScramCredentials: one user's SCRAM credentials (who the broker will then
    authenticate as that user)."""


def unknown_default(topic: str, config: str) -> str:
    """Why a topic that leaves ``config`` (``num.partitions`` or
    ``default.replication.factor``) to a broker default nobody could read is denied by a
    policy that needs the count: the gateway's words, and a replay's of the event."""
    return (
        f"Topic '{topic}' leaves {config} to the broker's default (-1), which the gateway "
        "cannot read, so its policies cannot judge the topic; give the count, or state the "
        f"broker's default in the gateway's upstream.broker_defaults.{config}"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class UnknownDefaults:
    """A topic of a CreateTopics that leaves a count to the broker's default, which could not
    be read (none stated in ``upstream.broker_defaults``, none reported to the client): None
    for that count. Judged by the policies that do not need it; one that does denies it,
    saying why (:func:`unknown_default`)."""

    topic: str
    configs: Mapping[str, str]
    num_partitions: int | None
    replication_factor: int | None

    @property
    def partitions_unknown(self) -> str | None:
        if self.num_partitions is not None:
            return None
        return unknown_default(self.topic, "num.partitions")

    @property
    def replication_factor_unknown(self) -> str | None:
        if self.replication_factor is not None:
            return None
        return unknown_default(self.topic, "default.replication.factor")


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
    partitions_unknown: str | None = None
    """A create that leaves its partition count to a broker default nobody could read: why
    (``num_partitions`` is then None). A rule that bounds the count denies it with this."""
    replication_factor_unknown: str | None = None
    """The same for the replication factor (``replication_factors`` is then empty)."""

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
    def create_topic_of_unknown_defaults(
        cls, topic: UnknownDefaults, principal: str | None
    ) -> TopicChange:
        """A create that leaves a count to the broker's default, which could not be read."""
        return cls(
            operation=TopicOperation.CREATE_TOPIC,
            topic=topic.topic,
            principal=principal,
            num_partitions=topic.num_partitions,
            replication_factors=()
            if topic.replication_factor is None
            else (topic.replication_factor,),
            set_configs=FrozenMap(topic.configs),
            configs_after=FrozenMap(topic.configs),
            partitions_unknown=topic.partitions_unknown,
            replication_factor_unknown=topic.replication_factor_unknown,
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


# --- broker configs: the topics' defaults -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    """A broker config that gives topics their default for a topic config (Kafka's
    ``ConfigSynonym``). ``to_ms``: the factor that turns its value, in hours or minutes, into
    the topic config's milliseconds; None when the value is the topic config's as it is."""

    name: str
    to_ms: int | None = None


_HOUR_MS: Final = 3_600_000
_MINUTE_MS: Final = 60_000


def _log(*names: str) -> tuple[ConfigSynonym, ...]:
    return tuple(ConfigSynonym(f"log.{name}") for name in names)


BROKER_SYNONYMS: Final[Mapping[str, tuple[ConfigSynonym, ...]]] = FrozenMap(
    {
        "segment.bytes": _log("segment.bytes"),
        "segment.ms": (ConfigSynonym("log.roll.ms"), ConfigSynonym("log.roll.hours", _HOUR_MS)),
        "segment.jitter.ms": (
            ConfigSynonym("log.roll.jitter.ms"),
            ConfigSynonym("log.roll.jitter.hours", _HOUR_MS),
        ),
        "segment.index.bytes": _log("index.size.max.bytes"),
        "flush.messages": _log("flush.interval.messages"),
        "flush.ms": _log("flush.interval.ms", "flush.scheduler.interval.ms"),
        "retention.bytes": _log("retention.bytes"),
        "retention.ms": (
            ConfigSynonym("log.retention.ms"),
            ConfigSynonym("log.retention.minutes", _MINUTE_MS),
            ConfigSynonym("log.retention.hours", _HOUR_MS),
        ),
        "max.message.bytes": (ConfigSynonym("message.max.bytes"),),
        "index.interval.bytes": _log("index.interval.bytes"),
        "delete.retention.ms": _log("cleaner.delete.retention.ms"),
        "min.compaction.lag.ms": _log("cleaner.min.compaction.lag.ms"),
        "max.compaction.lag.ms": _log("cleaner.max.compaction.lag.ms"),
        "file.delete.delay.ms": _log("segment.delete.delay.ms"),
        "min.cleanable.dirty.ratio": _log("cleaner.min.cleanable.ratio"),
        "cleanup.policy": _log("cleanup.policy"),
        "unclean.leader.election.enable": (ConfigSynonym("unclean.leader.election.enable"),),
        "min.insync.replicas": (ConfigSynonym("min.insync.replicas"),),
        "compression.type": (ConfigSynonym("compression.type"),),
        "compression.gzip.level": (ConfigSynonym("compression.gzip.level"),),
        "compression.lz4.level": (ConfigSynonym("compression.lz4.level"),),
        "compression.zstd.level": (ConfigSynonym("compression.zstd.level"),),
        "preallocate": _log("preallocate"),
        "message.format.version": _log("message.format.version"),
        "message.timestamp.type": _log("message.timestamp.type"),
        "message.timestamp.before.max.ms": _log("message.timestamp.before.max.ms"),
        "message.timestamp.after.max.ms": _log("message.timestamp.after.max.ms"),
        "local.retention.ms": _log("local.retention.ms"),
        "local.retention.bytes": _log("local.retention.bytes"),
        # Removed in Kafka 4.0; brokers before it still take them.
        "message.timestamp.difference.max.ms": _log("message.timestamp.difference.max.ms"),
        "message.downconversion.enable": _log("message.downconversion.enable"),
    }
)
"""Topic config -> the broker configs that are its default for topics that do not set it.

Kafka's table (``ServerTopicConfigSynonyms.ALL_TOPIC_CONFIG_SYNONYMS``, apache/kafka
``server-common``), in its order: where several synonyms of one topic config are set, the
broker uses the first (``log.retention.ms`` over ``.minutes`` over ``.hours``), with the same
conversions (a whole number of hours or minutes, times 3,600,000 or 60,000), plus the two
entries brokers before 4.0 have."""

TOPIC_CONFIGS: Final = frozenset(
    {
        *BROKER_SYNONYMS,
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
        "remote.storage.enable",
        "remote.log.copy.disable",
        "remote.log.delete.on.disable",
    }
)
"""Kafka's topic config names (``TopicConfig``, and the throttled replica lists): the topic
configs with a broker default, and those without one. A broker refuses any other name on a
topic ("Unknown topic config name"), so a rule on another name can never apply there."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerSetting:
    """The default a broker config gives topics for one topic config."""

    topic_config: str
    broker_config: str
    broker_value: str
    value: str
    """In the topic config's terms: hours and minutes converted to milliseconds."""

    def describe(self) -> str:
        """``log.retention.hours=1 (retention.ms=3600000)``; the name alone when it is the
        topic config's and nothing was converted."""
        shown = f"{self.broker_config}={shown_value(self.broker_value)}"
        if (self.broker_config, self.broker_value) == (self.topic_config, self.value):
            return shown
        return f"{shown} ({self.topic_config}={shown_value(self.value)})"


SHOWN_VALUE_CHARS: Final = 200
"""The most of a client's config value a denial quotes: the message goes back to the client,
into the log and into the audit event (which keeps the whole value in its config changes
anyway), and a 1 MB value was quoted twice in each."""


def shown_value(value: str) -> str:
    """``value`` as a denial quotes it: whole when short, else its start and its length."""
    if len(value) <= SHOWN_VALUE_CHARS:
        return value
    return f"{value[:SHOWN_VALUE_CHARS]}... ({len(value)} characters)"


def _in_ms(synonym: ConfigSynonym, value: str) -> str:
    """A synonym's value in the topic config's terms. A value that is not a whole number is
    left as it is (a bounds rule then calls it no number; Kafka refuses it anyway)."""
    if synonym.to_ms is None:
        return value
    try:
        count = int(value.strip())
    except ValueError:
        return value
    return str(count * synonym.to_ms)


def _broker_setting(topic_config: str, configs: Mapping[str, str]) -> BrokerSetting | None:
    """What ``configs`` (a broker resource's) give topics for ``topic_config``: the first of
    its synonyms that is set, as Kafka picks it; None when none is."""
    for synonym in BROKER_SYNONYMS[topic_config]:
        value = configs.get(synonym.name)
        if value is not None:
            return BrokerSetting(
                topic_config=topic_config,
                broker_config=synonym.name,
                broker_value=value,
                value=_in_ms(synonym, value),
            )
    return None


def broker_settings(
    altered: Mapping[str, str | None], before: Mapping[str, str], after: Mapping[str, str]
) -> FrozenMap[str, BrokerSetting]:
    """The topic defaults a change on a BROKER resource sets or changes, by topic config.

    A topic config counts when the request alters one of its synonyms and, after the change,
    the synonym the broker uses is one the request sets, or gives another value than before
    (deleting ``log.retention.ms`` hands the default to ``log.retention.hours``). A synonym
    set under one that wins (``log.retention.hours`` while ``log.retention.ms`` is set) is
    not used yet; it is judged when it would be. When no synonym is left set, the default
    goes back to the broker's static or built-in one and is not judged, as a deleted topic
    config is not.
    """
    settings: dict[str, BrokerSetting] = {}
    for topic_config, synonyms in BROKER_SYNONYMS.items():
        if not any(s.name in altered for s in synonyms):
            continue
        now = _broker_setting(topic_config, after)
        if now is None:
            continue
        if now.broker_config in altered or now != _broker_setting(topic_config, before):
            settings[topic_config] = now
    return FrozenMap(settings)


_RESOURCE_OPERATIONS: Final = {
    ConfigResourceType.BROKER: TopicOperation.ALTER_BROKER_CONFIGS,
    ConfigResourceType.BROKER_LOGGER: TopicOperation.ALTER_BROKER_LOGGER_CONFIGS,
    ConfigResourceType.CLIENT_METRICS: TopicOperation.ALTER_CLIENT_METRICS_CONFIGS,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceConfigChange:
    """What the rules see of a config change on a BROKER, BROKER_LOGGER or CLIENT_METRICS
    resource; build it with :meth:`alter_configs`."""

    operation: TopicOperation
    resource: ConfigResource
    principal: str | None
    set_configs: Mapping[str, str] = FrozenMap()
    """The values the request sets, by the resource's own config names."""
    topic_settings: Mapping[str, BrokerSetting] = FrozenMap()
    """BROKER only: the topic defaults the change sets (:func:`broker_settings`)."""
    described_as: str | None = None
    """How a denial names a cluster setting that is no config resource (client quotas, SCRAM
    credentials); build it with :meth:`cluster_setting`."""

    @classmethod
    def cluster_setting(
        cls, operation: TopicOperation, described_as: str, *, principal: str | None
    ) -> ResourceConfigChange:
        """A change of client quotas or SCRAM credentials: what it is named, and who asks."""
        return cls(
            operation=operation,
            resource=ConfigResource(type=ConfigResourceType.UNKNOWN, name=described_as),
            principal=principal,
            described_as=described_as,
        )

    @classmethod
    def alter_configs(
        cls,
        resource: ConfigResource,
        *,
        altered: Mapping[str, str | None],
        before: Mapping[str, str],
        after: Mapping[str, str],
        principal: str | None,
    ) -> ResourceConfigChange | None:
        """The change, or None for a resource type no built-in rule judges (GROUP, and the
        gateway's own dynamic client config types)."""
        operation = _RESOURCE_OPERATIONS.get(resource.type)
        if operation is None:
            return None
        is_broker = resource.type is ConfigResourceType.BROKER
        return cls(
            operation=operation,
            resource=resource,
            principal=principal,
            set_configs=FrozenMap((k, after[k]) for k in altered if k in after),
            topic_settings=broker_settings(altered, before, after) if is_broker else FrozenMap(),
        )

    @property
    def label(self) -> str:
        """The resource, as a denial names it."""
        if self.described_as is not None:
            return self.described_as
        name = self.resource.name
        if self.resource.type is ConfigResourceType.BROKER_LOGGER:
            return f"the loggers of broker {name}"
        if self.resource.type is ConfigResourceType.CLIENT_METRICS:
            return f"client metrics subscription {name}"
        return f"broker {name}" if name else "the cluster-wide broker default"


# --- the rules --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """A built-in rule. ``operations`` are those it has something to say about; it overrides
    :meth:`check` for topic operations and :meth:`check_resource` for config changes on other
    resources."""

    name: str
    mode: Mode = Mode.ENFORCE

    operations: ClassVar[frozenset[TopicOperation]]

    def check(self, change: TopicChange) -> str | None:
        """The message for the client if ``change`` breaks the rule, else None."""
        return None

    def check_resource(self, change: ResourceConfigChange) -> str | None:
        """The message for the client if ``change`` breaks the rule, else None."""
        return None

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
            unknown = change.partitions_unknown
            return None if unknown is None else self._deny(unknown)
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
        if not change.replication_factors and change.replication_factor_unknown is not None:
            return self._deny(change.replication_factor_unknown)
        for factor in sorted(set(change.replication_factors)):
            problem = _bounds_problem(
                f"topic {change.topic}: replication factor {factor}", factor, self.min, self.max
            )
            if problem is not None:
                return self._deny(problem)
        return None


NO_LIMIT_WHEN_NEGATIVE: Final = frozenset(
    {"retention.ms", "retention.bytes", "local.retention.ms", "local.retention.bytes"}
)
"""Configs whose negative value means no limit at all (Kafka deletes nothing by time or size
when the value is below 0; ``-1`` is how it is written), so such a value is above any
maximum: ``max: 604800000`` on ``retention.ms`` must refuse ``-1``, keep forever. (-2 on the
``local.`` ones means "as retention.ms/bytes" and is not judged as a number.)"""


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
    each comma-separated item must be allowed. A negative ``retention.ms`` or
    ``retention.bytes`` (no limit, :data:`NO_LIMIT_WHEN_NEGATIVE`) is above any ``max``, and
    below any ``min`` as a number. On a BROKER resource, the default its broker
    synonyms give topics is checked, in the topic config's units.
    """

    config: str
    min: float | None = None
    max: float | None = None
    allowed: frozenset[str] | None = None

    operations = frozenset(
        {
            TopicOperation.CREATE_TOPIC,
            TopicOperation.ALTER_CONFIGS,
            TopicOperation.ELECT_LEADERS,
            TopicOperation.ALTER_BROKER_CONFIGS,
        }
    )

    def check(self, change: TopicChange) -> str | None:
        value = change.set_configs.get(self.config)
        if value is None:
            return None
        return self._judge(f"topic {change.topic}: {self.config}={shown_value(value)}", value)

    def check_resource(self, change: ResourceConfigChange) -> str | None:
        setting = change.topic_settings.get(self.config)
        if setting is None:
            return None
        return self._judge(f"{change.label}: {setting.describe()}", setting.value)

    def _judge(self, what: str, value: str) -> str | None:
        if self.allowed is not None:
            items = value.split(",") if self.config in LIST_CONFIGS else [value]
            for item in items:
                if item.strip() not in self.allowed:
                    choices = ", ".join(sorted(self.allowed))
                    shown = shown_value(item.strip())
                    return self._deny(f"{what}: {shown!r} is not one of {choices}")
        if self.min is not None or self.max is not None:
            number = _as_number(value)
            if number is None:
                return self._deny(f"{what} is not a number")
            if (
                self.max is not None
                and number < 0
                and self.config in NO_LIMIT_WHEN_NEGATIVE
                and not (number == -2 and self.config.startswith("local."))
            ):
                return self._deny(f"{what} means no limit, above the maximum of {self.max}")
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
    """Configs a request may not set (deleting one, back to the default, is allowed); on a
    BROKER resource, their broker synonyms."""

    configs: tuple[str, ...]

    operations = frozenset(
        {
            TopicOperation.CREATE_TOPIC,
            TopicOperation.ALTER_CONFIGS,
            TopicOperation.ELECT_LEADERS,
            TopicOperation.ALTER_BROKER_CONFIGS,
        }
    )

    def check(self, change: TopicChange) -> str | None:
        present = [key for key in self.configs if key in change.set_configs]
        if not present:
            return None
        return self._deny(f"topic {change.topic}: config {', '.join(present)} may not be set")

    def check_resource(self, change: ResourceConfigChange) -> str | None:
        present = [
            synonym.name if synonym.name == key else f"{synonym.name} (the default of {key})"
            for key in self.configs
            for synonym in BROKER_SYNONYMS.get(key, ())
            if synonym.name in change.set_configs
        ]
        if not present:
            return None
        return self._deny(f"{change.label}: config {', '.join(present)} may not be set")


class NamePattern(Protocol):
    """A compiled whole-name pattern: ``re.Pattern``, or, as the loader compiles the rules'
    patterns, RE2's, whose matching time is linear in the name whatever the pattern (Python's
    ``re`` backtracks: ``([a-z]+-?)+`` took it 0.8 s for a 25-character name that does not
    match, doubling with each character more)."""

    @property
    def pattern(self) -> str: ...

    def fullmatch(self, text: str, /) -> object | None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicNameRule(Rule):
    """New topic names must match ``pattern`` as a whole."""

    pattern: NamePattern

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

    topics: tuple[NamePattern, ...]
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


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfigsRule(Rule):
    """Who may change the configs Kafka guards with ALTER_CONFIGS on the CLUSTER: BROKER
    resources (a broker id, or the cluster-wide default), BROKER_LOGGER and CLIENT_METRICS,
    and client quotas; and SCRAM credentials (ALTER on the CLUSTER), whose change decides who
    the broker authenticates as a principal this or any other rule allows. Only the principals
    in ``allowed_principals``; an unauthenticated client never; with none listed, no one.
    The denial names who asked, never who is allowed."""

    allowed_principals: frozenset[str] = frozenset()

    operations = frozenset(
        {
            TopicOperation.ALTER_BROKER_CONFIGS,
            TopicOperation.ALTER_BROKER_LOGGER_CONFIGS,
            TopicOperation.ALTER_CLIENT_METRICS_CONFIGS,
            TopicOperation.ALTER_CLIENT_QUOTAS,
            TopicOperation.ALTER_USER_SCRAM_CREDENTIALS,
        }
    )

    def check_resource(self, change: ResourceConfigChange) -> str | None:
        if change.principal is not None and change.principal in self.allowed_principals:
            return None
        refusal = _refusal(change.principal, self.allowed_principals, "change its configs")
        return self._deny(f"{change.label}: {refusal}")


def _refusal(principal: str | None, allowed_principals: frozenset[str], verb: str) -> str:
    """Who may not do what, for a denial: the one who asked (or no one at all, when nobody
    is allowed); never the principals who are allowed."""
    if not allowed_principals:
        return f"no one may {verb}"
    who = principal if principal is not None else "an unauthenticated client"
    return f"{who} may not {verb}"
