"""What the APIs that name topic partitions share (:mod:`protocol.partitioned`): items are
(topic, partition), judged a topic at a time.

Before any policy: a topic name that is not a legal Kafka topic name gets
INVALID_TOPIC_EXCEPTION, and the gateway's own topics (state and audit) get
TOPIC_AUTHORIZATION_FAILED: no client reads, writes, deletes or lists offsets of them, by
any name. Then each API's :meth:`judge_topics` decides the rest.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
import weakref
from collections.abc import Mapping, Sequence
from typing import Final

from policies.chain import Decision, Mode, Verdict
from policies.rules import TopicOperation
from protocol import partitioned as pt
from protocol.errors import TOPIC_AUTHORIZATION_FAILED
from protocol.framing import RequestHeader
from protocol.results import ItemError
from protocol.topic_names import illegal_topic
from protocol.versions import VersionRange, api_name

from ..engine import BaseEnforcement, ClusterView, Judged, RequestContext, Ruling
from ..outcomes import Close, Forward, Outcome
from ..services import Services
from .base import Handler

Item = pt.Item
_IDS_TTL_S = 60.0
_ASK_INTERVAL_S = 1.0
"""How often one connection may have the gateway ask the cluster for every topic's id."""
_GATEWAY_ASK_INTERVAL_S = 0.1
"""How often any connection may (one handler's asks, over every connection)."""


class OwnTopicIds:
    """The topic ids of the gateway's own topics, learned from the cluster and kept a while
    (for requests that name topics by id: Produce v13, Fetch v13 and later, ShareFetch).

    They are learned from a Metadata answer on the asking client's link. An answer naming
    every own topic is kept for everyone; one that lacks some (the broker's ACLs hide them
    from that client, or one is missing at that moment) is kept for that principal alone,
    whose requests the broker would not let reach what it cannot see. Kept for everyone, it
    would let another client's request by the id of the topic that answer lacked pass every
    shortcut for a minute.
    """

    def __init__(self, own_topics: frozenset[str]) -> None:
        self._own = own_topics
        self._complete: tuple[frozenset[uuid.UUID], float] = (frozenset(), float("-inf"))
        self._partial: dict[str | None, tuple[frozenset[uuid.UUID], float]] = {}
        self._names: dict[str, str] = {}
        """Each own topic id learnt (as text) -> its topic's name (an id names one topic)."""

    def fresh(self, principal: str | None) -> frozenset[uuid.UUID] | None:
        """The ids as ``principal``'s requests are to be judged, or None when they must be
        learned again."""
        now = time.monotonic()
        kept = [self._complete]
        if principal in self._partial:
            kept.append(self._partial[principal])
        for ids, learned_at in kept:
            if now - learned_at <= _IDS_TTL_S:
                return ids
        return None

    async def learn(self, cluster: ClusterView, principal: str | None) -> frozenset[uuid.UUID]:
        """The ids, asked of the cluster now on ``principal``'s link."""
        _, by_id = await cluster.describe_all_topics()
        found = {topic_id: name for topic_id, name in by_id.items() if name in self._own}
        self._names.update((str(topic_id), name) for topic_id, name in found.items())
        ids = frozenset(found)
        now = time.monotonic()
        if set(found.values()) == self._own:
            self._complete = (ids, now)
            self._partial.clear()
        else:
            self._partial = {
                who: kept for who, kept in self._partial.items() if now - kept[1] <= _IDS_TTL_S
            }
            self._partial[principal] = (ids, now)
        return ids

    def name_of(self, topic_id: str) -> str:
        """The name of the own topic of ``topic_id`` (text) as learnt; the id when unknown."""
        return self._names.get(topic_id, topic_id)


class TopicNamesById:
    """Topic id -> name, as the cluster last answered (for requests that name topics by id,
    Produce v13 and later).

    A topic's id never names another topic, so a known id is resolved from what was learned;
    a request naming an id not known asks the cluster again, and every id of that request is
    resolved from the new answer (one snapshot: no two ids of it share a name). An id the
    cluster does not know is None.

    Asking means a Metadata request for every topic of the cluster, its whole answer decoded
    by the gateway, so asks are bounded three ways: one connection asks at most once a second
    (:data:`_ASK_INTERVAL_S`), the gateway at most ten times a second over all connections
    (:data:`_GATEWAY_ASK_INTERVAL_S`), and a request that finds an ask under way waits for
    its answer instead of asking again. Otherwise a client naming a made-up id in every small
    request, over one connection or thousands, had the gateway decode the cluster's whole
    metadata for each. An id not known meanwhile is None: UNKNOWN_TOPIC_ID, which clients
    retry after refreshing their metadata, as they do when a broker has not yet learnt a new
    topic. A shared ask that fails (its client's link closed, say) leaves the other waiters
    with what was known.
    """

    def __init__(self) -> None:
        self._names: Mapping[uuid.UUID, str] = {}
        self._asked_at: weakref.WeakKeyDictionary[ClusterView, float] = weakref.WeakKeyDictionary()
        """When each live link last asked (an entry goes with its link)."""
        self._last_ask = float("-inf")
        self._asking: asyncio.Future[Mapping[uuid.UUID, str]] | None = None

    async def resolve(
        self, cluster: ClusterView, ids: Sequence[uuid.UUID]
    ) -> dict[uuid.UUID, str | None]:
        names = self._names
        if any(topic_id not in names for topic_id in ids):
            if self._asking is not None:
                names = await self._shared_answer(self._asking)
            elif self._may_ask(cluster):
                self._asking = asking = asyncio.ensure_future(self._ask(cluster))
                asking.add_done_callback(self._asked)
                names = await asyncio.shield(asking)
        return {topic_id: names.get(topic_id) for topic_id in ids}

    async def _ask(self, cluster: ClusterView) -> Mapping[uuid.UUID, str]:
        _, names = await cluster.describe_all_topics()
        self._names = names
        return names

    def _asked(self, asking: asyncio.Future[Mapping[uuid.UUID, str]]) -> None:
        if self._asking is asking:
            self._asking = None
        if not asking.cancelled():
            asking.exception()  # retrieved here; the asker's own await raises it

    async def _shared_answer(
        self, asking: asyncio.Future[Mapping[uuid.UUID, str]]
    ) -> Mapping[uuid.UUID, str]:
        """The answer of another request's ask; what was known if that ask fails."""
        try:
            return await asyncio.shield(asking)
        except asyncio.CancelledError:
            if asking.cancelled():
                return self._names
            raise  # this request's own task was cancelled
        except Exception:  # noqa: BLE001 - the asker's failure is the asker's to report
            return self._names

    def _may_ask(self, cluster: ClusterView) -> bool:
        """Whether ``cluster`` (one client's link) may ask now; if so, the clocks restart."""
        now = time.monotonic()
        if now - self._last_ask < _GATEWAY_ASK_INTERVAL_S:
            return False
        if now - self._asked_at.get(cluster, float("-inf")) < _ASK_INTERVAL_S:
            return False
        self._asked_at[cluster] = self._last_ask = now
        return True


class TopicPartitions(BaseEnforcement[pt.Partitioned, Item]):
    """The shared enforcement; subclasses judge what is left with :meth:`judge_topics`."""

    def __init__(self, services: Services, api_key: int, versions: VersionRange) -> None:
        self._services = services
        self.api_key = api_key
        self.versions = versions
        self._own_ids = OwnTopicIds(services.own_topics)

    def read(self, header: RequestHeader, frame: bytes) -> pt.Partitioned:
        return pt.read(header, frame)

    def keys(self, request: pt.Partitioned) -> Sequence[Item]:
        return request.items

    def duplicate(self, key: Item) -> ItemError | None:
        return None

    def decided_items(self, request: pt.Partitioned, keys: Sequence[Item]) -> int:
        """None: these APIs name partitions the policies do not decide (their topics' names
        and the gateway's own topics are checked); subclasses that judge topics say so."""
        return 0

    async def judge(
        self,
        ctx: RequestContext,
        cluster: ClusterView,
        request: pt.Partitioned,
        keys: Sequence[Item],
    ) -> Mapping[Item, Ruling]:
        refused = await self._refused_topics(cluster, request, ctx.principal)
        rest = [t for t in pt.topics(request) if t not in refused]
        by_topic: dict[str, Ruling] = dict(refused)
        if rest:
            by_topic.update(await self.judge_topics(ctx, cluster, request, rest))
        return {key: by_topic[key[0]] for key in keys if key[0] in by_topic}

    async def _refused_topics(
        self, cluster: ClusterView, request: pt.Partitioned, principal: str | None
    ) -> dict[str, Ruling]:
        refused: dict[str, Ruling] = {}
        own_ids: frozenset[str] = frozenset()
        if request.by_id and self._services.own_topics:
            # learnt at most once a minute (per principal, for a partial answer): learnt
            # anew for each request read, a Fetch naming an own topic's id cost the gateway
            # the cluster's whole Metadata, asked and decoded, for 60 bytes sent
            ids = self._own_ids.fresh(principal)
            if ids is None:
                ids = await self._own_ids.learn(cluster, principal)
            own_ids = frozenset(map(str, ids))
        for topic in pt.topics(request):
            illegal = None if request.by_id else illegal_topic(topic)
            if illegal is not None:
                refused[topic] = illegal
            elif topic in self._services.own_topics or topic in own_ids:
                refused[topic] = own_topic_refusal(
                    "This topic is the policy gateway's own; clients may not read, write or "
                    "change it.",
                    resource_name=self._own_ids.name_of(topic) if request.by_id else topic,
                    action=self.own_topic_action,
                )
        return refused

    @property
    def own_topic_action(self) -> str:
        """The audited ``action`` of a refusal of one of the gateway's own topics: the
        API's name in Kafka's snake case (``fetch``, ``list_offsets``)."""
        return _snake_case(api_name(self.api_key))

    async def judge_topics(
        self,
        ctx: RequestContext,
        cluster: ClusterView,
        request: pt.Partitioned,
        topics: Sequence[str],
    ) -> Mapping[str, Ruling]:
        """Topic -> its ruling, for the legal topics that are not the gateway's; a topic left
        out is allowed."""
        return {}

    def for_broker(
        self, request: pt.Partitioned, header: RequestHeader, allowed: Sequence[Item]
    ) -> bytes:
        return pt.keeping(request, header, set(allowed))

    def answer(
        self,
        request: pt.Partitioned,
        correlation_id: int,
        local: Mapping[Item, ItemError],
        broker: bytes | None,
    ) -> bytes:
        return pt.answer(request, correlation_id, local, broker)


OWN_TOPICS_POLICY: Final = "own_topics"
"""The audit's ``policy`` of a refusal of one of the gateway's own topics (state and audit),
as for the gateway's other own-topic refusals (ACLs, a request naming one by id closed)."""


def own_topic_refusal(message: str, *, resource_name: str, action: str) -> Judged:
    """A refusal of one of the gateway's own topics, audited: a client reading the audit topic,
    truncating it or writing into it is refused TOPIC_AUTHORIZATION_FAILED before any policy,
    and the attempt is a decision like any other (it was answered here with no event)."""
    verdict = Verdict(
        policy=OWN_TOPICS_POLICY, mode=Mode.ENFORCE, outcome="denied", message=message
    )
    return Judged(
        decision=Decision(allowed=False, verdicts=(verdict,)),
        resource_type="topic",
        resource_name=resource_name,
        action=action,
        denial=ItemError(error_code=int(TOPIC_AUTHORIZATION_FAILED), error_message=message),
    )


def _snake_case(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class RulesPerTopic(TopicPartitions):
    """Each topic through the rules alone, as ``operation`` (recorded as ``action``): no Kafka
    policy interface is asked about these APIs."""

    def __init__(
        self,
        services: Services,
        api_key: int,
        versions: VersionRange,
        *,
        operation: TopicOperation,
        action: str,
    ) -> None:
        super().__init__(services, api_key, versions)
        self._operation = operation
        self._action = action

    def decided_items(self, request: pt.Partitioned, keys: Sequence[Item]) -> int:
        return len({topic for topic, _ in keys})

    @property
    def own_topic_action(self) -> str:
        return self._action

    async def judge_topics(
        self,
        ctx: RequestContext,
        cluster: ClusterView,
        request: pt.Partitioned,
        topics: Sequence[str],
    ) -> Mapping[str, Ruling]:
        policies = self._services.policies
        rulings: dict[str, Ruling] = {}
        for topic in topics:
            check = policies.chain.plan_data_operation(
                self._operation, topic, principal=ctx.principal
            )
            rulings[topic] = Judged(
                decision=await policies.decide(ctx, check),
                resource_type="topic",
                resource_name=topic,
                action=self._action,
            )
        return rulings


def refusing_own_topic_ids(services: Services) -> Handler:
    """The handler of an API naming topics by id that the gateway otherwise forwards as sent
    (ShareFetch, ShareAcknowledge): a request holding the bytes of one of the gateway's own
    topics' ids (learnt from the cluster when a minute old) is refused, the connection closed,
    as no client reads those topics; any other request is forwarded unread."""
    own_ids = OwnTopicIds(services.own_topics)

    async def handle(ctx: RequestContext, cluster: ClusterView, frame: bytes) -> Outcome:
        if services.own_topics:
            ids = own_ids.fresh(ctx.principal)
            if ids is None:
                ids = await own_ids.learn(cluster, ctx.principal)
            if any(topic_id.bytes in frame for topic_id in ids):
                return Close(
                    reason=f"{api_name(ctx.api_key)} names one of the gateway's own topics",
                    metric_reason="own_topic",
                )
        return Forward(frame=frame)

    return handle
