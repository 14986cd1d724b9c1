"""Metadata, every version: topic names checked, auto-creation judged, broker addresses
rewritten.

A Metadata request naming a topic the cluster lacks makes the broker create it
(``auto.create.topics.enable``, on by default in Kafka) when it allows auto-creation (v0-v3
always do; v4 and later say so). The gateway judges that creation as a CreateTopics of the
topic with the broker's defaults, as Kafka's controller applies ``create.topic.policy`` to
auto-created topics (``upstream.auto_create``: ``judge``, the default).

Design (one round trip when every topic exists, the usual case; no request that could create
a topic ever reaches the broker unjudged):

1. Names: a name that is not a legal Kafka topic name is answered INVALID_TOPIC_EXCEPTION
   (17) for that topic and never reaches the broker, in every mode.
2. The gateway reissues the request on the client's own link with auto-creation off (v4 or
   later) and reads the answer: the topics it answers UNKNOWN_TOPIC_OR_PARTITION are those
   the broker would have created. A topic deleted meanwhile is not recreated behind the
   policies' back, and a denied topic is never named in a request that could create it.
3. Those topics are judged (and audited by the engine, action ``create``, resource ``topic``)
   as a CreateTopics with ``num.partitions`` and ``default.replication.factor`` as stated in
   ``upstream.broker_defaults``, else as the broker of the client's link reports them to the
   client (DescribeConfigs of its BROKER resource: :func:`gateway.cluster.linked_broker_configs`).
   Unknown: denied, the message says why; the gateway never guesses. A broker reporting
   ``auto.create.topics.enable=false`` creates nothing, and its answer stands.
4. Allowed topics are created with exactly the counts the policies judged, by a CreateTopics
   on the client's link (the broker authorizes CREATE for the client and applies its own
   policy, as for its auto-creation), and answered UNKNOWN_TOPIC_OR_PARTITION as Kafka
   (KRaft) answers a topic whose auto-creation it has just asked for: the client asks again
   and finds it. A CreateTopics error is answered in the topic's entry (TOPIC_ALREADY_EXISTS:
   UNKNOWN_TOPIC_OR_PARTITION, retried).
5. Denied topics are answered TOPIC_AUTHORIZATION_FAILED (29), as Kafka answers a topic the
   client may not create (``KafkaApis.handleTopicMetadataRequest``: a missing topic the
   principal lacks CREATE for). Every client gives up on it at once (Java: a
   TopicAuthorizationException; librdkafka: a permanent topic error; KafkaJS: not
   retriable). POLICY_VIOLATION (44), which a ZooKeeper-mode broker put in the answer when its
   ``create.topic.policy`` refused an auto-creation, is retried by librdkafka 2.x and Java until
   their timeouts, asking again several times a second, each time judged and audited; the
   UNKNOWN_TOPIC_OR_PARTITION of a KRaft broker (the policy's error only logged) likewise.
   Metadata has no error message: the policy's message is in the log and the audit event.

``upstream.auto_create: deny`` refuses every auto-creation the same way; ``pass`` forwards the
request as sent (the broker creates what it likes, unjudged: unsafe). Every answer leaves with
the gateway's addresses in place of the brokers'.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from policies.api import CreateTopicRequestMetadata
from policies.chain import Decision
from protocol import metadata as md
from protocol.addresses import METADATA, MetadataResponse
from protocol.errors import (
    INVALID_TOPIC_EXCEPTION,
    TOPIC_ALREADY_EXISTS,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from protocol.framing import RequestHeader
from protocol.results import ItemError
from protocol.topic_admin import error_name
from protocol.topic_names import topic_name_problem
from spark_audit.event import TopicSpec as AuditedTopicSpec

from ..cluster import linked_broker_configs
from ..engine import (
    STATE_STORE,
    BaseEnforcement,
    ClusterView,
    Judged,
    RequestContext,
    Ruling,
    Settlement,
)
from ..outcomes import Answer, Close, Outcome
from ..policy_runner import PolicyRunner
from ..services import Services
from ..state import StateStoreError
from ._addresses import rewrite_addresses, with_gateway_addresses
from .base import Handler

log = logging.getLogger(__name__)

API_KEY = METADATA
VERSIONS = md.VERSIONS

JUDGE, DENY, PASS = "judge", "deny", "pass"

_PARTITIONS = "num.partitions"
_REPLICATION = "default.replication.factor"
_ENABLED = "auto.create.topics.enable"


@dataclass(frozen=True, slots=True, kw_only=True)
class Creation:
    """How the broker would auto-create a topic, as far as the gateway can tell."""

    num_partitions: int | None = None
    replication_factor: int | None = None
    unknown: str | None = None
    """Why the counts are not known (the topic is then denied)."""
    broker_creates: bool = True
    """False when the broker reports ``auto.create.topics.enable=false``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AutoCreationCall:
    """One Metadata request after the broker's answer: what is left to judge."""

    request: md.MetadataRequest
    answer: MetadataResponse
    """The broker's answer to the reissued request, with the gateway's addresses."""
    illegal: Mapping[str, str]
    """Name -> why it is not a legal topic name."""
    candidates: tuple[str, ...]
    """Topics the broker would have created, in request order."""
    creation: Creation

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(n for n in dict.fromkeys(self.request.names) if n in self.illegal) + (
            self.candidates
        )


class AutoCreation(BaseEnforcement[AutoCreationCall, str]):
    """The judged part of one Metadata request: its illegal names and the topics it would
    have created. Built per request around the broker's answer; the engine dedupes, judges,
    audits and answers."""

    api_key = API_KEY
    versions = VERSIONS

    def __init__(self, services: Services, call: AutoCreationCall) -> None:
        self._services = services
        self._call = call

    def read(self, header: RequestHeader, frame: bytes) -> AutoCreationCall:
        return self._call

    def keys(self, request: AutoCreationCall) -> Sequence[str]:
        return request.keys

    def decided_items(self, request: AutoCreationCall, keys: Sequence[str]) -> int:
        return len(request.candidates)  # illegal names are answered unjudged

    def duplicate(self, key: str) -> ItemError | None:
        return None  # Kafka answers a topic named twice once

    async def judge(
        self,
        ctx: RequestContext,
        cluster: ClusterView,
        request: AutoCreationCall,
        keys: Sequence[str],
    ) -> Mapping[str, Ruling]:
        rulings: dict[str, Ruling] = {}
        for name in keys:
            problem = request.illegal.get(name)
            if problem is not None:
                rulings[name] = ItemError(
                    error_code=int(INVALID_TOPIC_EXCEPTION), error_message=problem
                )
            else:
                decision = await self._decide(ctx, name, request.creation)
                creation = request.creation
                rulings[name] = Judged(
                    decision=decision,
                    resource_type="topic",
                    resource_name=name,
                    action="create",
                    topic_spec=AuditedTopicSpec(
                        partitions=creation.num_partitions,
                        replication_factor=creation.replication_factor,
                    ),
                    denial=ItemError(
                        error_code=int(TOPIC_AUTHORIZATION_FAILED), error_message=decision.message
                    ),
                )
        return rulings

    async def _decide(self, ctx: RequestContext, name: str, creation: Creation) -> Decision:
        if self._services.upstream.auto_create == DENY:
            return PolicyRunner.gateway_denial(
                f"auto-creation of topic {name} refused: the gateway creates no topic on "
                "Metadata (upstream.auto_create: deny)"
            )
        if creation.num_partitions is None or creation.replication_factor is None:
            return PolicyRunner.gateway_denial(
                f"auto-creation of topic {name} refused: the gateway does not know the "
                f"partitions and replication factor the broker would give it ({creation.unknown})"
            )
        metadata = CreateTopicRequestMetadata(
            topic=name,
            num_partitions=creation.num_partitions,
            replication_factor=creation.replication_factor,
            replicas_assignments=None,
            configs={},
        )
        policies = self._services.policies
        return await policies.decide(
            ctx, policies.chain.plan_create_topic(metadata, principal=ctx.principal)
        )

    async def settle(
        self,
        ctx: RequestContext,
        cluster: ClusterView,
        request: AutoCreationCall,
        allowed: Sequence[str],
    ) -> Settlement[str] | Close:
        creation = request.creation
        if not allowed or creation.num_partitions is None or creation.replication_factor is None:
            return Settlement()  # nothing allowed: denied topics are answered already
        services = self._services
        claim = uuid.uuid4().hex
        stale = await _claim_stale_policies(services, allowed, claim)
        if isinstance(stale, ItemError):
            # each topic was audited as allowed: that it was not created is audited too
            for name in allowed:
                await services.engine.refused(
                    ctx,
                    stale,
                    policy=STATE_STORE,
                    resource_type="topic",
                    resource_name=name,
                    action="create",
                )
            return Settlement(local=dict.fromkeys(allowed, stale))
        answer = await cluster.send(
            md.create_topics(
                allowed,
                num_partitions=creation.num_partitions,
                replication_factor=creation.replication_factor,
                timeout_ms=int(services.upstream.request_timeout_s * 1000),
                client_id=ctx.client_id,
            )
        )
        results = md.created(answer)
        for name in stale:
            result = results.get(name)
            created = result is not None and result.ok
            try:
                # only a topic the broker has just created is new: the value is then stale
                await services.release_validation_policy(name, claim, restore=created)
            except StateStoreError as exc:
                log.warning("auto-created topic %r: claim not released: %s", name, exc)
        return Settlement(
            local={name: _after_creation(name, results.get(name)) for name in allowed}
        )

    def for_broker(
        self, request: AutoCreationCall, header: RequestHeader, allowed: Sequence[str]
    ) -> bytes:
        raise AssertionError("settle answers every allowed topic; nothing is forwarded")

    def answer(
        self,
        request: AutoCreationCall,
        correlation_id: int,
        local: Mapping[str, ItemError],
        broker: bytes | None,
    ) -> bytes:
        return md.answer(request.request, correlation_id, request.answer, local)


class MetadataHandler:
    """The registered handler: decides what a request needs, and runs the judged part."""

    def __init__(self, services: Services) -> None:
        self._services = services

    async def __call__(self, ctx: RequestContext, cluster: ClusterView, frame: bytes) -> Outcome:
        oversized = self._services.engine.oversized(ctx, frame)
        if oversized is not None:
            return oversized
        request = md.read_request(ctx.header, frame)
        illegal = {
            name: problem
            for name in dict.fromkeys(request.names)
            if (problem := topic_name_problem(name)) is not None
        }
        mode = self._services.upstream.auto_create
        judged = mode != PASS and request.may_create and len(illegal) < len(set(request.names))
        if not illegal and not judged:
            return rewrite_addresses(API_KEY, self._services, ctx, frame)
        legal = [name for name in dict.fromkeys(request.names) if name not in illegal]
        reissued = md.reissued(
            request,
            ctx.client_id,
            keep=legal,
            allow_auto_topic_creation=request.allow_auto_topic_creation and not judged,
        )
        answer = await with_gateway_addresses(API_KEY, self._services, await cluster.send(reissued))
        candidates: tuple[str, ...] = ()
        creation = Creation()
        if judged:
            errors = md.topic_errors(answer)
            unknown = int(UNKNOWN_TOPIC_OR_PARTITION)
            candidates = tuple(name for name in legal if errors.get(name) == unknown)
        if candidates and mode == JUDGE:
            creation = await self._creation(cluster, answer)
            if not creation.broker_creates:
                candidates = ()
        call = AutoCreationCall(
            request=request,
            answer=answer,
            illegal=illegal,
            candidates=candidates,
            creation=creation,
        )
        if not call.keys:
            return Answer(frame=md.answer(request, ctx.correlation_id, answer, {}))
        enforcement = AutoCreation(self._services, call)
        return await self._services.engine.run(enforcement, ctx, cluster, frame)

    async def _creation(self, cluster: ClusterView, answer: MetadataResponse) -> Creation:
        """The counts a topic would be auto-created with: as stated in
        ``upstream.broker_defaults``, else as the broker of the client's link reports them
        (one of ``answer``'s brokers: :func:`gateway.cluster.linked_broker_configs`)."""
        stated = self._services.upstream.broker_defaults
        brokers = [int(b.node_id) for b in answer.brokers]
        reported: Mapping[str, str] = {}
        unknown = "no broker in the cluster's answer"
        if brokers:
            found = await linked_broker_configs(cluster, brokers)
            if found is None:
                unknown = "DescribeConfigs of the brokers returned none"
            elif found.error_code != 0:
                unknown = (
                    f"DescribeConfigs of broker {found.resource_name} answered "
                    f"{error_name(found.error_code)}"
                )
            else:
                reported = found.effective()
                unknown = (
                    f"broker {found.resource_name} does not report {_PARTITIONS} and {_REPLICATION}"
                )
        partitions = stated.num_partitions or _count(reported.get(_PARTITIONS))
        replication = stated.default_replication_factor or _count(reported.get(_REPLICATION))
        return Creation(
            num_partitions=partitions,
            replication_factor=replication,
            unknown=None
            if partitions and replication
            else f"{unknown}; state them in upstream.broker_defaults",
            broker_creates=reported.get(_ENABLED, "true").strip().lower() != "false",
        )


def handler(services: Services) -> Handler:
    return MetadataHandler(services)


def _count(value: str | None) -> int | None:
    if value is None or not value.strip().isdigit():
        return None
    return int(value) if int(value) >= 1 else None


async def _claim_stale_policies(
    services: Services, topics: Sequence[str], claim: str
) -> set[str] | ItemError:
    """Claim, under ``claim``, the record.validation.policy an earlier topic of each name left
    (deleted without the gateway seeing it: at the broker, or with an embedded broker's
    restart), its value kept for now: an auto-created topic sets none, so the value goes once
    the broker has created the topic, and only while the claim stands. That the topic was
    missing comes from an answer of a moment before, and a topic created meanwhile with a
    policy (another client's CreateTopics, which writes its value and claim first) must keep
    it: removed before the gateway's CreateTopics, its records reached the broker unvalidated
    until that create came back TOPIC_ALREADY_EXISTS, and for good if it never came back.
    Returns the names claimed; an entry to answer when the store cannot write (the client
    asks again)."""
    stale = {n for n in topics if services.validation_policy_of(n) is not None}
    if not stale:
        return set()
    try:
        await services.claim_validation_policy_keys(stale, claim)
    except StateStoreError as exc:
        return ItemError(
            error_code=int(UNKNOWN_TOPIC_OR_PARTITION),
            error_message=f"The gateway could not claim an earlier topic's "
            f"record.validation.policy, so the topic was not created: {exc}",
        )
    return stale


def _after_creation(name: str, result: ItemError | None) -> ItemError:
    """A created topic's entry: UNKNOWN_TOPIC_OR_PARTITION (the client asks again and finds
    it), as Kafka answers a topic whose auto-creation it has sent; else the broker's error."""
    if result is None:
        return ItemError(
            error_code=int(UNKNOWN_TOPIC_OR_PARTITION),
            error_message=f"CreateTopics did not answer for topic {name}",
        )
    if result.ok or result.error_code == int(TOPIC_ALREADY_EXISTS):
        return ItemError(
            error_code=int(UNKNOWN_TOPIC_OR_PARTITION),
            error_message=f"Topic {name} is being created; ask again.",
        )
    return result
