"""The cluster as the enforcements see it: requests of the gateway's own, sent on the client's
upstream link, and the topic state the policies are given."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from uuid import UUID

from policies.api import ConfigResourceType, TopicState
from protocol import admin
from protocol import topic_admin as ta
from protocol.admin import InternalRequest, ResourceConfigs, ResponseT, TopicDescription
from protocol.errors import UNKNOWN_TOPIC_OR_PARTITION
from protocol.results import ItemError
from protocol.versions import api_name

from .config import BrokerDefaults
from .engine import ClusterView
from .upstream import UpstreamClosed, UpstreamLink


class UpstreamCluster:
    """A :class:`gateway.engine.ClusterView` over one client's upstream link."""

    def __init__(self, link: UpstreamLink, timeout_s: float) -> None:
        self._link = link
        self._timeout_s = timeout_s

    async def send(self, request: InternalRequest[ResponseT]) -> ResponseT:
        """Send a request of the gateway's own and wait for its answer.

        :raises UpstreamClosed: when the link drops or the answer does not come in time.
        :raises Undecodable: for a malformed answer.
        """
        correlation_id = self._link.next_internal_correlation_id()
        future = self._link.send(
            request.api_key, correlation_id, request.frame(correlation_id), expect_response=True
        )
        assert future is not None
        try:
            frame = await asyncio.wait_for(future, self._timeout_s)
        except TimeoutError:
            raise UpstreamClosed(
                f"no answer to the gateway's {api_name(request.api_key)} request in "
                f"{self._timeout_s} s"
            ) from None
        return request.read(frame)

    async def describe_topics(self, names: Sequence[str]) -> Mapping[str, TopicDescription]:
        return admin.read_topics(await self.send(admin.describe_topics(names)))

    async def broker_ids(self) -> Sequence[int]:
        return admin.broker_ids(await self.send(admin.describe_topics([])))

    async def describe_all_topics(
        self,
    ) -> tuple[Mapping[str, TopicDescription], Mapping[UUID, str]]:
        everything = await self.send(ta.describe_all_topics())
        return admin.read_topics(everything), ta.read_topic_ids(everything)

    async def describe_configs(
        self, resources: Sequence[tuple[int, str]], *, include_synonyms: bool = False
    ) -> Mapping[tuple[int, str], ResourceConfigs]:
        request = admin.describe_configs(resources, include_synonyms=include_synonyms)
        return admin.read_configs(await self.send(request))

    async def authorize_alter_configs(
        self, resources: Sequence[tuple[int, str]]
    ) -> Mapping[tuple[int, str], ItemError]:
        return admin.read_alter_results(await self.send(admin.authorize_alter_configs(resources)))


# --- the broker's defaults for a CreateTopics count of -1 ---------------------------------------


async def broker_defaults(cluster: ClusterView, stated: BrokerDefaults) -> BrokerDefaults:
    """``num.partitions`` and ``default.replication.factor``, as the brokers use them for a
    count of -1: as ``stated`` (``upstream.broker_defaults``), else as the broker of the
    client's link reports them to the client (:func:`linked_broker_configs`); None
    where neither says. The gateway never guesses one (KIP-464: the broker resolves -1 before
    its policy sees the request, and the policies must see what the broker will create)."""
    if stated.num_partitions is not None and stated.default_replication_factor is not None:
        return stated
    reported = await _reported_defaults(cluster)
    return BrokerDefaults(
        num_partitions=stated.num_partitions or reported.get("num.partitions"),
        default_replication_factor=(
            stated.default_replication_factor or reported.get("default.replication.factor")
        ),
    )


async def linked_broker_configs(
    cluster: ClusterView, brokers: Sequence[int] | None = None
) -> ResourceConfigs | None:
    """The configs of the broker at the other end of the client's link, as it reports them
    to the client.

    Kafka describes a BROKER resource only on that broker itself: asked on another, it answers
    INVALID_REQUEST for that resource ("Unexpected broker id", ``ConfigHelper``), and the
    gateway does not know which broker a bootstrap link reached. So every broker of the
    cluster (``brokers``, else as Metadata lists them) is named in one request; the one
    entry without an error is the linked broker's. Returns that entry, else the first one
    (its error says why none could be read), or None when there is no broker or no entry.
    """
    if brokers is None:
        brokers = await cluster.broker_ids()
    resources = [(int(ConfigResourceType.BROKER), str(b)) for b in dict.fromkeys(brokers)]
    if not resources:
        return None
    answer = await cluster.describe_configs(resources)
    found = [answer[r] for r in resources if r in answer]
    return next((r for r in found if r.error_code == 0), found[0] if found else None)


async def _reported_defaults(cluster: ClusterView) -> dict[str, int]:
    resource = await linked_broker_configs(cluster)
    if resource is None or resource.error_code != 0:
        return {}
    found: dict[str, int] = {}
    for key, value in resource.effective().items():
        if key in ("num.partitions", "default.replication.factor") and value.isdigit():
            found[key] = int(value)
    return {key: value for key, value in found.items() if value >= 1}


# --- the state of topics before a request, as the policies need it ---------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CurrentTopics:
    """What the cluster says about some topics, as the policies need it."""

    states: Mapping[str, TopicState]
    """The topics that exist and whose state could be read whole."""
    errors: Mapping[str, ItemError]
    """Topics Metadata does not describe (absent, not authorized): the answer for each."""
    unreadable: Mapping[str, str]
    """Existing topics whose configs a ``TopicActionPolicy`` needs but DescribeConfigs did not
    give: name -> the problem."""


async def current_topics(
    cluster: ClusterView,
    names: Sequence[str],
    *,
    with_configs: bool,
    configs_unreliable: bool,
    described: Mapping[str, TopicDescription] | None = None,
) -> CurrentTopics:
    """The state of ``names`` before the request: partitions, replicas and replication factor
    from Metadata (``described``, when the caller has it already), configs from DescribeConfigs
    when ``with_configs`` (a ``TopicActionPolicy`` reads them).

    The configs are those set on the topic; with ``configs_unreliable`` every config the broker
    reports counts as set on the topic.
    """
    wanted = list(dict.fromkeys(names))
    if not wanted:
        return CurrentTopics(states={}, errors={}, unreadable={})
    if described is None:
        described = await cluster.describe_topics(wanted)
    errors: dict[str, ItemError] = {}
    existing: dict[str, TopicDescription] = {}
    for name in wanted:
        found = described.get(name)
        if found is None or not found.exists:
            errors[name] = undescribed_topic(name, found)
        else:
            existing[name] = found
    configs: dict[str, Mapping[str, str]] = {name: {} for name in existing}
    unreadable: dict[str, str] = {}
    if with_configs and existing:
        topic = int(ConfigResourceType.TOPIC)
        answer = await cluster.describe_configs([(topic, n) for n in existing])
        for name in existing:
            resource = answer.get((topic, name))
            if resource is None:
                unreadable[name] = "DescribeConfigs did not return it"
            elif resource.error_code != 0:
                unreadable[name] = (
                    f"DescribeConfigs answered {ta.error_name(resource.error_code)}"
                    + (f": {resource.error_message}" if resource.error_message else "")
                )
            elif configs_unreliable:
                configs[name] = resource.effective()
            else:
                configs[name] = resource.set_on_resource()
    states = {
        name: state_of(description, configs[name])
        for name, description in existing.items()
        if name not in unreadable
    }
    return CurrentTopics(states=states, errors=errors, unreadable=unreadable)


def state_of(description: TopicDescription, configs: Mapping[str, str]) -> TopicState:
    return TopicState(
        num_partitions=len(description.partitions),
        replication_factor=description.replication_factor,
        replicas_assignments=description.partitions,
        configs=configs,
    )


def undescribed_topic(name: str, found: TopicDescription | None) -> ItemError:
    """The answer for a topic Metadata does not describe: its error, in words."""
    code = found.error_code if found is not None else int(UNKNOWN_TOPIC_OR_PARTITION)
    if code == int(UNKNOWN_TOPIC_OR_PARTITION):
        message = f"The topic '{name}' does not exist."
    else:
        message = (
            f"Cannot read the state of topic '{name}': Metadata answered {ta.error_name(code)}."
        )
    return ItemError(error_code=code, error_message=message)
