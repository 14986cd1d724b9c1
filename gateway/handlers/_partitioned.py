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
from protocol.codec import Undecodable
from protocol.errors import TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_ID
from protocol.framing import RequestHeader
from protocol.results import ItemError
from protocol.share_topics import share_topic_ids
from protocol.topic_names import illegal_topic
from protocol.versions import VersionRange, api_name

from ..engine import BaseEnforcement, ClusterView, Judged, RequestContext, Ruling
from ..outcomes import Close, Forward, Outcome
from ..services import Services
from .base import Handler

Item = pt.Item
_ASK_INTERVAL_S = 1.0
"""How often one connection may have the gateway ask the cluster for every topic's id."""
_GATEWAY_ASK_INTERVAL_S = 0.1
"""How often any connection may (one handler's asks, over every connection)."""
_MAX_KNOWN_IDS = 100_000
"""Topic ids one handler keeps learnt over several answers (about 30 MB); past it, only the
last answer's."""


class TopicNamesById:
    """Topic id -> name, as the cluster last answered (for requests that name topics by id:
    Produce v13, Fetch v13 and later, ShareFetch, ShareAcknowledge).

    A topic's id never names another topic (Kafka makes a new one for a topic deleted and
    made again), so a known id is resolved from what was learned, with no expiry: an id
    learnt as some other topic's is never one of the gateway's own (``own_topics``), and the
    id of an own topic made again is not known until learnt. A request naming an id not
    known asks the cluster again, and every id of that request is resolved from the new
    answer (one snapshot: no two ids of it share a name). An id the cluster does not know is
    None. Each answer is added to what was known: the asking client's view of the cluster,
    which a broker's ACLs may narrow. Had each answer replaced the last, two principals seeing
    different topics would each make the other's ids unknown again, and under the ask limits
    their consumers would take turns at UNKNOWN_TOPIC_ID for as long as both fetch. What is
    known grows only with the topics of the cluster and those deleted since; past
    :data:`_MAX_KNOWN_IDS` (or twice the new answer, if more) the map starts again from the
    new answer.

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

    def __init__(self, own_topics: frozenset[str] = frozenset()) -> None:
        self._own_topics = own_topics
        self._names: Mapping[uuid.UUID, str] = {}
        self._others: frozenset[bytes] = frozenset()
        """The ids (16 bytes each) known to name a topic not the gateway's own."""
        self._own: tuple[bytes, ...] = ()
        """The ids known to name one of the gateway's own topics."""
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

    def all_others(self, ids: Sequence[bytes], frame: bytes) -> bool:
        """Whether every one of ``ids`` (16 bytes each, as a request holds them) is known to
        name a topic not the gateway's own, and ``frame`` (the request they were read from)
        holds no known own topic's id anywhere (a second guard, against a walk that read the
        ids elsewhere than the broker reads them). False asks for the request to be read."""
        others = self._others
        return all(topic_id in others for topic_id in ids) and not any(
            own in frame for own in self._own
        )

    def is_own(self, topic_id: str) -> bool:
        """Whether ``topic_id`` (a UUID's string form; anything else is not) was learnt to
        name one of the gateway's own topics."""
        try:
            return uuid.UUID(topic_id).bytes in self._own
        except ValueError:
            return False

    async def _ask(self, cluster: ClusterView) -> Mapping[uuid.UUID, str]:
        _, answer = await cluster.describe_all_topics()
        own = self._own_topics
        # an id names one topic forever: what another link's view held stays true
        names: Mapping[uuid.UUID, str] = {**self._names, **answer}
        if len(names) > max(_MAX_KNOWN_IDS, 2 * len(answer)):
            names = answer
        self._names = names
        self._others = frozenset(i.bytes for i, name in names.items() if name not in own)
        self._own = tuple(i.bytes for i, name in names.items() if name in own)
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


UNKNOWN_ID = ItemError(
    error_code=int(UNKNOWN_TOPIC_ID),
    error_message="This server does not host this topic ID.",
)
"""A topic id the cluster does not know, or not yet in the gateway's view: as Kafka answers
an id a broker has not learnt yet, and clients retry after refreshing their metadata."""


_OWN_TOPIC = ItemError(
    error_code=int(TOPIC_AUTHORIZATION_FAILED),
    error_message="This topic is the policy gateway's own; clients may not read, write or "
    "change it.",
)


class TopicPartitions(BaseEnforcement[pt.Partitioned, Item]):
    """The shared enforcement; subclasses judge what is left with :meth:`judge_topics`."""

    def __init__(self, services: Services, api_key: int, versions: VersionRange) -> None:
        self._services = services
        self.api_key = api_key
        self.versions = versions
        self._names = TopicNamesById(services.own_topics)

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
        names: Mapping[str, str | None] = {}
        if request.by_id and self._services.own_topics:
            # resolved from what was learnt; an id not known asks the cluster (within the
            # ask limits of TopicNamesById), and one still not known is UNKNOWN_TOPIC_ID:
            # it may be an own topic made again, never passed on a stale view
            ids = [uuid.UUID(topic) for topic in pt.topics(request)]
            names = {str(i): name for i, name in (await self._names.resolve(cluster, ids)).items()}
        for topic in pt.topics(request):
            illegal = None if request.by_id else illegal_topic(topic)
            name = names.get(topic, topic) if request.by_id else topic
            if illegal is not None:
                refused[topic] = illegal
            elif name is None:
                refused[topic] = UNKNOWN_ID
            elif name in self._services.own_topics:
                refused[topic] = own_topic_refusal(
                    _OWN_TOPIC.error_message or "",
                    resource_name=name,
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
        """The broker's answer whole, with the gateway's refusals merged in; a partition it
        holds that the request did not name (a Fetch's incremental session carries them) is
        kept, unless its topic is one of the gateway's own (never sent to the broker by this
        gateway, but refused wherever it comes from)."""
        return pt.answer(request, correlation_id, local, broker, self._refused_unnamed)

    def _refused_unnamed(self, topic: str) -> ItemError | None:
        if topic in self._services.own_topics or self._names.is_own(topic):
            return _OWN_TOPIC
        return None


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
    (ShareFetch, ShareAcknowledge). Where the gateway has own topics, each request is decoded
    (over ``judged.request.max.bytes`` the connection is closed unread) and its topic ids
    resolved (:class:`TopicNamesById`): one naming an own topic is refused, the connection
    closed, as no client reads those topics; so is one naming an id still not known once
    learnt (or not asked, within the ask limits), which may be an own topic made again: the
    client connects again and asks anew. Any other request is forwarded as sent."""
    names = TopicNamesById(services.own_topics)

    async def handle(ctx: RequestContext, cluster: ClusterView, frame: bytes) -> Outcome:
        if not services.own_topics:
            return Forward(frame=frame)
        oversized = services.engine.oversized(ctx, frame)
        if oversized is not None:
            return oversized
        try:
            ids = share_topic_ids(ctx.header, frame)
        except Undecodable as exc:
            return Close(reason=str(exc), metric_reason="undecodable")
        id_bytes = [i.bytes for i in ids]
        if names.all_others(id_bytes, frame):
            return Forward(frame=frame)
        resolved = await names.resolve(cluster, ids)
        if names.all_others(id_bytes, frame):
            return Forward(frame=frame)
        if any(name is None for name in resolved.values()):
            return Close(
                reason=f"{api_name(ctx.api_key)} names a topic id the gateway's view of the "
                "cluster lacks (it may be one of the gateway's own topics, made again)",
                metric_reason="own_topic",
            )
        return Close(
            reason=f"{api_name(ctx.api_key)} names one of the gateway's own topics",
            metric_reason="own_topic",
        )

    return handle
