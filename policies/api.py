"""The plug-in interfaces: what a policy class implements and the values it is given.

These follow Kafka's policy interfaces (KIP-108 ``CreateTopicPolicy``, ``AlterConfigPolicy``,
KIP-201 ``TopicActionPolicy``, the proposed ``AlterConfigV2Policy`` and
``RecordValidationPolicy``), written the Python way:

* A policy class has a no-argument constructor. The gateway calls ``configure(configs)`` once,
  with the ``policies:`` section of its configuration flattened to a string map, then
  ``validate(...)`` for each request, and ``close()`` on shutdown. The base classes give
  no-op ``configure`` and ``close``; ``validate`` is the one method to write.
* ``validate`` raises :class:`PolicyViolation` (or :class:`InvalidRecord` for records) with a
  message for the client; returning normally allows. Anything else it raises, or taking too
  long, also denies (see :mod:`policies`).
* ``validate`` may be called from several threads at once, as Kafka calls its policies from
  several request handler threads.

Each interface's metadata type is reachable both as a nested name, Kafka style
(``CreateTopicPolicy.RequestMetadata``), and at module level (``CreateTopicRequestMetadata``).

Every value here is a frozen, slotted, keyword-only dataclass. Maps are :class:`FrozenMap`:
read-only, hashable, equal to any mapping with the same items; the constructors accept any
mapping (or list) and freeze it, so ``CreateTopicRequestMetadata(..., configs={"a": "1"})``
works in tests.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeAlias, TypeVar

__all__ = [
    "AlterConfigPolicy",
    "AlterConfigRequestMetadata",
    "AlterConfigV2Policy",
    "AlterConfigV2RequestMetadata",
    "ConfigResource",
    "ConfigResourceType",
    "CreateTopicPolicy",
    "CreateTopicRequestMetadata",
    "FrozenMap",
    "InvalidRecord",
    "PolicyViolation",
    "RecordIntrospectionHints",
    "RecordProxy",
    "RecordValidationPolicy",
    "TopicAction",
    "TopicActionPolicy",
    "TopicActionRequestMetadata",
    "TopicMetadata",
    "TopicState",
]

K = TypeVar("K")
V = TypeVar("V")


class PolicyViolation(Exception):
    """A policy denies the request; Kafka answers POLICY_VIOLATION (44) with :attr:`message`."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRecord(Exception):
    """A record validation policy rejects a record; Kafka answers INVALID_RECORD (87)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class FrozenMap(Mapping[K, V]):
    """A read-only, hashable mapping (so the dataclasses holding one stay hashable)."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        self._items: dict[K, V] = dict(items)

    def __getitem__(self, key: K) -> V:
        return self._items[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(frozenset(self._items.items()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return self._items == dict(other.items())
        return NotImplemented

    def __repr__(self) -> str:
        return f"FrozenMap({self._items!r})"


def _freeze_configs(configs: Mapping[str, V]) -> FrozenMap[str, V]:
    return configs if isinstance(configs, FrozenMap) else FrozenMap(configs)


def _freeze_assignments(
    assignments: Mapping[int, Iterable[int]],
) -> FrozenMap[int, tuple[int, ...]]:
    return FrozenMap((partition, tuple(replicas)) for partition, replicas in assignments.items())


class _Plugin(ABC):  # noqa: B024 - an abstract base whose subclasses add the abstract method
    """What every policy class has: configure once, close on shutdown."""

    def configure(self, configs: Mapping[str, str]) -> None:  # noqa: B027 - optional hook
        """Receive the gateway's ``policies:`` section as a flat string map; called once."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources on shutdown."""


# --- KIP-108: create topics -----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTopicRequestMetadata:
    """One topic of a CreateTopics request.

    Either ``num_partitions`` and ``replication_factor`` are set, or
    ``replicas_assignments`` (partition id -> broker ids) is; the other side is None. The
    gateway resolves a request's ``-1`` (broker default) before building this, as Kafka does.
    ``configs`` are the topic configs in the request, without broker defaults.

    :raises ValueError: if both or neither side is set.
    """

    topic: str
    num_partitions: int | None
    replication_factor: int | None
    replicas_assignments: Mapping[int, tuple[int, ...]] | None
    configs: Mapping[str, str]

    def __post_init__(self) -> None:
        counts = (self.num_partitions, self.replication_factor)
        if self.replicas_assignments is None:
            if None in counts:
                raise ValueError(
                    "set num_partitions and replication_factor, or replicas_assignments"
                )
        else:
            if counts != (None, None):
                raise ValueError(
                    "num_partitions and replication_factor must be None "
                    "when replicas_assignments is set"
                )
            object.__setattr__(
                self, "replicas_assignments", _freeze_assignments(self.replicas_assignments)
            )
        object.__setattr__(self, "configs", _freeze_configs(self.configs))


class CreateTopicPolicy(_Plugin):
    """Validates each topic of a CreateTopics request (``create.topic.policy.class.name``)."""

    RequestMetadata: TypeAlias = CreateTopicRequestMetadata

    @abstractmethod
    def validate(self, request_metadata: CreateTopicRequestMetadata) -> None:
        """:raises PolicyViolation: if the topic may not be created as requested."""


# --- AlterConfigPolicy and AlterConfigV2Policy ------------------------------------------------


class ConfigResourceType(enum.IntEnum):
    """Kafka's config resource type codes, and the types the gateway owns.

    ``CLIENT`` and ``USER_CLIENT`` are the dynamic client config types (seed 003). A policy
    always sees a user's client configs as ``USER_CLIENT`` (an application's own ``CLIENT``
    request is judged as its user's entry), whatever wire codes the gateway is configured
    with; the values here are the gateway's default wire codes, chosen clear of Kafka's.
    """

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32
    CLIENT = 120
    USER_CLIENT = 121


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigResource:
    """A resource whose configs are changed: a topic name, a broker id ("" for the cluster
    default), a group id, ..."""

    type: ConfigResourceType
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterConfigRequestMetadata:
    """The configs one AlterConfigs or IncrementalAlterConfigs request sets on a resource.

    Only the keys the request alters; a key deleted by an incremental DELETE maps to None.
    For the legacy AlterConfigs, which replaces the whole set, that is every key it sends.
    """

    resource: ConfigResource
    configs: Mapping[str, str | None]

    def __post_init__(self) -> None:
        object.__setattr__(self, "configs", _freeze_configs(self.configs))


class AlterConfigPolicy(_Plugin):
    """Validates config changes (``alter.config.policy.class.name``)."""

    RequestMetadata: TypeAlias = AlterConfigRequestMetadata

    @abstractmethod
    def validate(self, request_metadata: AlterConfigRequestMetadata) -> None:
        """:raises PolicyViolation: if the change is not allowed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterConfigV2RequestMetadata:
    """A config change seen whole: the resource's configs before and after it.

    Both hold the configs set on the resource itself (no broker defaults). ``configs_after``
    is ``configs_before`` with the request applied (SET, DELETE, APPEND, SUBTRACT; or for the
    legacy AlterConfigs, the request's full set); a deleted key is absent from it.
    """

    resource: ConfigResource
    configs_before: Mapping[str, str]
    configs_after: Mapping[str, str]

    def __post_init__(self) -> None:
        object.__setattr__(self, "configs_before", _freeze_configs(self.configs_before))
        object.__setattr__(self, "configs_after", _freeze_configs(self.configs_after))


class AlterConfigV2Policy(_Plugin):
    """Validates config changes with the state before and after
    (``alter.config.v2.policy.class.name``)."""

    RequestMetadata: TypeAlias = AlterConfigV2RequestMetadata

    @abstractmethod
    def validate(self, request_metadata: AlterConfigV2RequestMetadata) -> None:
        """:raises PolicyViolation: if the change is not allowed."""


# --- KIP-201: topic actions -------------------------------------------------------------------


class TopicAction(enum.Enum):
    """What a request does to a topic."""

    CREATE = "create"
    MODIFY = "modify"
    DELETE = "delete"


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicState:
    """A topic's state before, or as a result of, a request.

    ``replicas_assignments`` (partition id -> broker ids) is None where placement is not
    known yet: a create or partition increase that leaves it to the controller. ``configs``
    are the configs set on the topic (for a create: those in the request), without broker
    defaults.
    """

    num_partitions: int
    replication_factor: int
    replicas_assignments: Mapping[int, tuple[int, ...]] | None
    configs: Mapping[str, str]

    def __post_init__(self) -> None:
        if self.replicas_assignments is not None:
            object.__setattr__(
                self, "replicas_assignments", _freeze_assignments(self.replicas_assignments)
            )
        object.__setattr__(self, "configs", _freeze_configs(self.configs))

    @classmethod
    def requested_by(cls, request: CreateTopicRequestMetadata) -> TopicState:
        """The state a CreateTopics request asks for."""
        assignments = request.replicas_assignments
        if assignments is None:
            assert request.num_partitions is not None
            assert request.replication_factor is not None
            return cls(
                num_partitions=request.num_partitions,
                replication_factor=request.replication_factor,
                replicas_assignments=None,
                configs=request.configs,
            )
        # Kafka requires every partition to have the same number of replicas.
        first = next(iter(assignments.values()), ())
        return cls(
            num_partitions=len(assignments),
            replication_factor=len(first),
            replicas_assignments=assignments,
            configs=request.configs,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicActionRequestMetadata:
    """A request to perform ``action`` on ``topic``.

    ``principal`` is Kafka's form (``"User:alice"``), None when the session is not
    authenticated. ``pre_request_state`` is None for CREATE; ``post_request_state`` is None
    for DELETE; MODIFY has both (config changes and partition increases are modifications).

    :raises ValueError: if the states do not fit the action.
    """

    action: TopicAction
    topic: str
    principal: str | None
    pre_request_state: TopicState | None
    post_request_state: TopicState | None

    def __post_init__(self) -> None:
        has_pre = self.pre_request_state is not None
        has_post = self.post_request_state is not None
        expected = {
            TopicAction.CREATE: (False, True),
            TopicAction.MODIFY: (True, True),
            TopicAction.DELETE: (True, False),
        }[self.action]
        if (has_pre, has_post) != expected:
            raise ValueError(
                f"{self.action.name} needs pre_request_state "
                f"{'set' if expected[0] else 'None'} and post_request_state "
                f"{'set' if expected[1] else 'None'}"
            )


class TopicActionPolicy(_Plugin):
    """Validates creating, modifying and deleting topics (``topic.action.policy.class.name``)."""

    Action: TypeAlias = TopicAction
    TopicState: TypeAlias = TopicState
    RequestMetadata: TypeAlias = TopicActionRequestMetadata

    @abstractmethod
    def validate(self, request_metadata: TopicActionRequestMetadata) -> None:
        """:raises PolicyViolation: if the action is not allowed."""


# --- Record validation ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicMetadata:
    """The topic partition a record is produced to.

    ``validation_policy`` is the topic's ``record.validation.policy`` config; the policy is
    called only for topics where it is set.
    """

    topic: str
    partition: int
    validation_policy: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordIntrospectionHints:
    """The parts of a record a policy reads, so the gateway decodes no more than that.

    For key and value: the number of leading bytes needed, 0 for none, -1 for all.

    :raises ValueError: for a byte count below -1.
    """

    access_headers: bool
    access_key_bytes: int
    access_value_bytes: int

    def __post_init__(self) -> None:
        for name in ("access_key_bytes", "access_value_bytes"):
            if getattr(self, name) < -1:
                raise ValueError(f"{name} must be -1 (all), 0 (none) or a byte count")


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordProxy:
    """A read-only view of one record.

    Only what the policy's hints ask for is guaranteed: headers may be empty when
    ``access_headers`` is false, and key and value may be cut to the hinted byte counts.
    A header is a ``(key, value)`` pair.
    """

    headers: tuple[tuple[str, bytes | None], ...]
    key: bytes | None
    value: bytes | None


class RecordValidationPolicy(_Plugin):
    """Validates records on Produce (``record.validation.policy.class.name``)."""

    @abstractmethod
    def get_hints(self) -> RecordIntrospectionHints:
        """The parts of a record :meth:`validate` reads."""

    @abstractmethod
    def validate(self, topic: TopicMetadata, record: RecordProxy) -> None:
        """:raises InvalidRecord: if the record may not be appended."""
