"""Produce: records of validated topics go through the RecordValidationPolicy (seed 002).

Versions: 3 to 13 (magic 2 record batches; Kafka 4 brokers take nothing older). From v10
answers may carry leader endpoints (KIP-951 ``node_endpoints``): each is swapped for the
gateway's listener of that node before the answer leaves (:mod:`._addresses`). From v13
(KIP-516) topics are named by id: the ids are resolved to names through the cluster (Metadata,
on the client's link; :class:`._partitioned.TopicNamesById`) and each partition is judged and
validated as the same partition named by name in v9 would be. An id the cluster does not know
gets UNKNOWN_TOPIC_ID (100), as Kafka answers it, and is never forwarded.

Items are partitions. No topic of the request validated and none of the gateway's own: the
client's bytes are forwarded, records unread (only the topic names are read, for the audit
summaries: every Produce is counted, validated or not). Per partition, one rejected record fails the
whole batch: INVALID_RECORD (87) with ``record_errors`` and ``error_message`` (v8 and later;
the bare code before). A batch that does not parse gets CORRUPT_MESSAGE (2), in dry-run mode
too: the gateway cannot say what it would carry, so it never forwards it. A partition of the
gateway's own topics gets TOPIC_AUTHORIZATION_FAILED. Transactional requests: one rejection
fails every partition, so a transaction is never half written. acks=0: no answer is due; a
rejection writes nothing of the request and closes the connection, as Kafka does.

With a state store shared by several gateway instances (``state.store: kafka``), a policy
written through another instance reaches this one when its tail of the state topic next
fetches it (up to ``state.refresh_interval_s`` on a broker that holds fetches, as Tansu does).
The creating instance writes a topic's policy before it creates the topic, so every Produce
first catches up with the store, as far as the state topic's end when the request was read
(:meth:`gateway.state.StateStore.settle`; requests at the same time share one end-offset query,
and with no new write there is nothing to wait for): a topic created with a policy through
another instance is never written to unvalidated, nor one deleted and created again with a
policy. Remembering a topic once caught up for it was not enough: a Produce naming a topic
before it existed, or before it was deleted and created again, counted as meeting it, and the
next records to the new topic passed unvalidated for as long as this instance's view lagged.

Opt-in (``client_configs.enforce.acks``): a request with acks=1 or acks=0 from a user and
client-id whose dynamic client config (seed 003) says ``acks=-1`` or ``all`` goes to the broker
with acks=-1, written in place (counted in ``kpg_client_config_enforced_total{config="acks"}``).
An acks=0 client reads no answer, so the broker's is read by the gateway and not passed on:
a partition it reports an error for (NOT_ENOUGH_REPLICAS, where too few replicas are in sync
to write with acks=all) closes the connection, as Kafka closes an acks=0 producer's on an
error; left at acks=0 its records were written to the leader alone, past the config. A
configured acks=0 or 1 never lowers a request's acks.
In front of a broker that takes a Produce to a topic or partition it does not have and keeps
its records for a topic of that name created later
(``upstream.accepts_produce_to_missing_topics``: Tansu), every Produce is read and its topics
asked of Metadata: a partition the cluster lacks gets UNKNOWN_TOPIC_OR_PARTITION, as Kafka
answers it, and is never forwarded.
Any acks but -1, 0 and 1 gets INVALID_REQUIRED_ACKS for every partition, as Kafka answers it,
and is never forwarded: a broker that takes it (Tansu writes acks=2 as 1) would otherwise
carry records past an acks config of all, since only acks=1 is raised.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import lru_cache, partial

from policies.chain import Decision, Mode, Verdict
from protocol.codec import Undecodable
from protocol.errors import (
    INVALID_RECORD,
    INVALID_REQUIRED_ACKS,
    KAFKA_STORAGE_ERROR,
    NOT_ENOUGH_REPLICAS,
    REQUEST_TIMED_OUT,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from protocol.framing import FrameRejected, RequestHeader
from protocol.produce import (
    TOPIC_IDS_SINCE,
    VERSIONS,
    PartitionRecords,
    ProduceView,
    failed_partitions,
    produce_acks,
    produce_answer,
    produce_partition_count,
    produce_request_keeping,
    produce_topics,
    read_produce,
    with_acks,
)
from protocol.results import ItemError
from protocol.topic_names import illegal_topic

from .. import client_configs
from ..config import UNLIMITED
from ..engine import BaseEnforcement, ClusterView, Judged, RequestContext, Ruling, Settlement
from ..outcomes import Answer, Close, Forward, Outcome
from ..policy_runner import PolicyUnavailable
from ..record_validation import PartitionOutcome
from ..services import Services
from ..state import StateStoreError
from ._addresses import with_leader_endpoints
from ._partitioned import UNKNOWN_ID, TopicNamesById, own_topic_refusal
from .base import Handler, enforced

log = logging.getLogger(__name__)

API_KEY = 0
Key = tuple[str, int]
_ONE_OR_NONE = frozenset({"0", "1"})
"""The stored acks values that do not ask for every replica. Every other value asks for all:
``all`` and ``-1``, and one this version cannot read (another program's or another version's;
this one checks what it stores), which is taken at its strictest, never as unset."""
_VALID_ACKS = frozenset({-1, 0, 1})


class Produce(BaseEnforcement[ProduceView, Key]):
    api_key = API_KEY
    versions = VERSIONS
    # a partition a dry-run record policy objects to, its event unwritten: retriable, as
    # the disk error it is, so the producer tries again rather than drop the records
    unaudited_error = int(KAFKA_STORAGE_ERROR)
    # its records are read by the record validation budget, not decoded whole
    decodes_whole = False

    def __init__(self, services: Services) -> None:
        self._services = services
        self._names = TopicNamesById(services.own_topics)

    def prepare(self, ctx: RequestContext, frame: bytes) -> bytes | Outcome:
        services = self._services
        header = ctx.header
        try:
            acks = produce_acks(header, frame)
            if acks in (0, 1) and services.client_configs.enforce_acks:
                configured = client_configs.config_of(
                    services.state.items(client_configs.STATE_NAMESPACE),
                    ctx.principal,
                    header.client_id,
                    "acks",
                )
                if _asks_all(configured):
                    frame = with_acks(header, frame, -1)
                    acks = -1
                    services.client_config_enforced.labels("acks").inc()
        except FrameRejected as exc:
            return Close(reason=str(exc), metric_reason=exc.reason)
        if acks not in _VALID_ACKS:
            return frame  # read whole: every partition is answered INVALID_REQUIRED_ACKS
        # A topic name stands verbatim in the request: no match, no write to the gateway's
        # topics under any name (an alias such as "state/" holds the name too). A request
        # to unvalidated topics is not read, so an illegal alias of one goes to the broker:
        # it reaches nothing a policy guards that the plain name would not.
        unread = (
            not services.any_validated_topic()
            and not self._may_write_own(ctx, frame)
            and not services.state.settles
            and not services.upstream.accepts_produce_to_missing_topics
        )
        if unread and services.audit is None:
            return Forward(frame=frame, expect_response=acks != 0)
        too_many = _too_many_partitions(ctx, frame, services.engine.limits.produce_max_partitions)
        if too_many is not None:
            return too_many
        if unread and ctx.api_version < TOPIC_IDS_SINCE:
            self._count_unread(ctx, header, frame)
            return Forward(frame=frame, expect_response=acks != 0)
        # read whole: to validate, to catch up with a shared state store first, or (v13
        # names topics by id) for the summaries to count them by name
        return frame

    def _may_write_own(self, ctx: RequestContext, frame: bytes) -> bool:
        """Whether the request may name one of the gateway's own topics: by name (v12 and
        earlier); from v13, by id, whenever the gateway has own topics (each id is then
        resolved through the cluster, :class:`._partitioned.TopicNamesById`)."""
        own = self._services.own_topics
        if ctx.api_version < TOPIC_IDS_SINCE:
            return any(topic.encode() in frame for topic in own)
        return bool(own)

    def _count_unread(self, ctx: RequestContext, header: RequestHeader, frame: bytes) -> None:
        """Count a request forwarded unread in the produce summaries, by its topic names. A
        body whose names do not read goes on uncounted: the broker refuses it."""
        try:
            topics = produce_topics(header, frame)
        except Undecodable as exc:
            log.debug("produce request forwarded uncounted: %s", exc)
            return
        for topic in topics:
            self._summarize(ctx, topic, 0, 0)

    def _summarize(self, ctx: RequestContext, topic: str, records: int, size: int) -> None:
        services = self._services
        assert services.audit is not None
        services.audit.record_allowed_produce(
            topic=topic,
            principal=ctx.principal,
            client_id=ctx.client_id,
            api_version=ctx.api_version,
            records_examined=records,
            bytes_examined=size,
            policy_version=services.engine.decisions.policy_version,
        )

    def read(self, header: RequestHeader, frame: bytes) -> ProduceView:
        return read_produce(header, frame)

    def keys(self, request: ProduceView) -> Sequence[Key]:
        return [(p.topic, p.partition) for p in request.partitions]

    def duplicate(self, key: Key) -> ItemError | None:
        return None

    def expects_response(self, request: ProduceView) -> bool:
        return request.acks != 0

    def decided_items(self, request: ProduceView, keys: Sequence[Key]) -> int:
        """Bounded by ``produce.max.partitions`` and the record validation budget instead."""
        return 0

    async def judge(
        self, ctx: RequestContext, cluster: ClusterView, request: ProduceView, keys: Sequence[Key]
    ) -> Mapping[Key, Ruling]:
        services = self._services
        names = await self._topic_names(ctx, cluster, request)
        unsettled = await self._settle() or self._acks_learnt(ctx, request)
        if unsettled is not None:
            return dict.fromkeys(keys, unsettled)
        rulings = _refused_partitions(request, names, services.own_topics)
        if request.acks not in _VALID_ACKS:
            # Kafka's answer (ReplicaManager.appendRecords), which not every broker gives:
            # Tansu writes acks=2 as acks=1, past a client's acks config of all
            return {key: rulings.get(key, _INVALID_ACKS) for key in keys}
        if services.upstream.accepts_produce_to_missing_topics:
            rulings.update(await _missing_partitions(cluster, request, names, rulings))
        # validated under their names (the audit and the policy see names), keyed back
        keys_of = {
            (names.get(p.topic, p.topic), p.partition): (p.topic, p.partition)
            for p in request.partitions
        }
        # one read of the state store for the request (a SQLite read first asks the file for
        # changes, and a request may name tens of thousands of topics)
        validated = services.validated_topics()
        policies = {
            name: validated.get(name)
            for name in dict.fromkeys(names.get(p.topic, p.topic) for p in request.partitions)
            if name is not None
        }
        checks = [
            (replace(p, topic=name), policy)
            for p in request.partitions
            if (p.topic, p.partition) not in rulings
            and (name := names.get(p.topic, p.topic)) is not None
            and (policy := policies[name]) is not None
        ]
        examined: dict[Key, tuple[int, int]] = {}
        for outcome in await self._validate(ctx, checks) if checks else ():
            ruling = self._ruling(outcome)
            key = keys_of[(outcome.topic, outcome.partition)]
            if ruling is None:
                examined[key] = (outcome.records, outcome.bytes)
            else:
                rulings[key] = ruling
        if services.audit is not None:
            self._summarize_passed(ctx, request, rulings, examined, names)
        return rulings

    async def _settle(self) -> ItemError | None:
        """With a state store shared by several instances, catch up with every write made
        before this request was read (see the module's docstring); the refusal of every
        partition when the store cannot say in time (fail closed)."""
        state = self._services.state
        if not state.settles:
            return None
        try:
            await state.settle()
        except StateStoreError as exc:
            return ItemError(
                error_code=int(REQUEST_TIMED_OUT),
                error_message=f"The gateway could not learn the topic's record.validation."
                f"policy from its state store in time: {exc}",
            )
        return None

    def _acks_learnt(self, ctx: RequestContext, request: ProduceView) -> ItemError | None:
        """A request left at acks=1 by :meth:`prepare` whose client's acks config, as the
        store says once caught up, is all: a change made through another instance that this
        one had not read yet. Refused (retriable), so that the retry is written to -1 rather
        than the records go with acks=1 for up to ``state.refresh_interval_s``."""
        services = self._services
        if not (services.state.settles and services.client_configs.enforce_acks):
            return None
        if request.acks != 1:
            return None
        configured = client_configs.config_of(
            services.state.items(client_configs.STATE_NAMESPACE),
            ctx.principal,
            ctx.client_id,
            "acks",
        )
        if not _asks_all(configured):
            return None
        return ItemError(
            error_code=int(NOT_ENOUGH_REPLICAS),
            error_message="Not written: this client's acks config has just become all "
            "(set through another gateway instance); send the request again.",
        )

    async def _topic_names(
        self, ctx: RequestContext, cluster: ClusterView, request: ProduceView
    ) -> Mapping[str, str | None]:
        """v13 and later: each id string of the request -> the topic's name, None for an id
        the cluster does not know. Before v13 topics are named by name: empty."""
        if not request.by_id:
            return {}
        ids = list(dict.fromkeys(p.topic_id for p in request.partitions if p.topic_id))
        resolved = await self._names.resolve(cluster, ids)
        names: dict[str, str | None] = {str(i): name for i, name in resolved.items()}
        for p in request.partitions:
            names.setdefault(p.topic, None)  # a null id names no topic
        return names

    def _summarize_passed(
        self,
        ctx: RequestContext,
        request: ProduceView,
        rulings: Mapping[Key, Ruling],
        examined: Mapping[Key, tuple[int, int]],
        names: Mapping[str, str | None],
    ) -> None:
        """Count the partitions with no ruling (records that passed, or a topic nobody
        validates) in the produce summaries: once per topic of the request, when they will be
        written. A transactional or acks=0 request with a refused partition writes nothing."""
        refused = any(isinstance(r, ItemError) or not r.decision.allowed for r in rulings.values())
        if refused and (request.acks == 0 or request.transactional_id is not None):
            return
        per_topic: dict[str, list[int]] = {}
        for p in request.partitions:
            key = (p.topic, p.partition)
            if key in rulings:
                continue
            tally = per_topic.setdefault(names.get(p.topic) or p.topic, [0, 0])
            records, size = examined.get(key, (0, 0))
            tally[0] += records
            tally[1] += size
        for topic, (records, size) in per_topic.items():
            self._summarize(ctx, topic, records, size)

    async def _validate(
        self, ctx: RequestContext, checks: Sequence[tuple[PartitionRecords, str]]
    ) -> Sequence[PartitionOutcome]:
        """Validate the partitions, under one budget for the request (``limits:``). The
        built-in policies run right here, in slices of a quarter of a millisecond with the
        loop's other work between them; a plug-in runs on the policy pool, and one that does not
        finish in time (or finds no free worker) rejects every partition (fail closed)."""
        validator = self._services.records
        partitions = [(p.topic, p.partition, policy, p.records) for p, policy in checks]
        if validator.inline:
            return await validator.validate_sliced(partitions)
        try:
            return await self._services.policies.call(
                ctx, validator.name, partial(validator.validate, partitions), what="validate()"
            )
        except PolicyUnavailable as exc:
            message = str(exc)
            error = ItemError(
                error_code=int(INVALID_RECORD), error_message=message, record_errors=((0, message),)
            )
            return [
                PartitionOutcome(
                    topic=p.topic, partition=p.partition, records=0, bytes=0, batches=0, error=error
                )
                for p, _ in checks
            ]

    def _ruling(self, outcome: PartitionOutcome) -> Judged | None:
        """None for a partition whose records pass (counted in the produce summary)."""
        services = self._services
        name = services.records.name
        services.metrics.count_validation(outcome, name)
        if outcome.error is None:
            return None
        # dry-run passes what the policy rejects, never what was not read through (a corrupt
        # batch, or one over the request's budget): fail closed
        dry_run = services.records.dry_run and not outcome.fail_closed
        verdict = Verdict(
            policy=name,
            mode=Mode.DRY_RUN if dry_run else Mode.ENFORCE,
            outcome="would_deny" if dry_run else "denied",
            message=outcome.error.error_message,
        )
        return Judged(
            decision=Decision(allowed=dry_run, verdicts=(verdict,)),
            resource_type="topic",
            resource_name=f"{outcome.topic}-{outcome.partition}",
            action="produce",
            denial=outcome.error,
            records_examined=outcome.records,
            bytes_examined=outcome.bytes,
        )

    async def settle(
        self,
        ctx: RequestContext,
        cluster: ClusterView,
        request: ProduceView,
        allowed: Sequence[Key],
    ) -> Settlement[Key] | Close:
        kept = set(allowed)
        refused = [key for key in self.keys(request) if key not in kept]
        if not refused:
            return Settlement()
        if request.acks == 0:
            rejected = ", ".join(f"{t}-{p}" for t, p in dict.fromkeys(refused))
            return Close(
                reason=f"acks=0 produce with rejected records ({rejected}): nothing written, "
                "closing the connection as Kafka does",
                metric_reason="rejected_acks0_produce",
            )
        if request.transactional_id is None:
            return Settlement()
        not_written = ItemError(
            error_code=int(INVALID_RECORD),
            error_message="Not written: another partition of this transactional produce "
            "request has rejected records, so none of it is written.",
        )
        return Settlement(local=dict.fromkeys(allowed, not_written))

    def for_broker(
        self, request: ProduceView, header: RequestHeader, allowed: Sequence[Key]
    ) -> bytes:
        return produce_request_keeping(request, header, allowed)

    def answer(
        self,
        request: ProduceView,
        correlation_id: int,
        local: Mapping[Key, ItemError],
        broker: bytes | None,
    ) -> bytes:
        return produce_answer(request, correlation_id, local, broker)


_INVALID_ACKS = ItemError(error_code=int(INVALID_REQUIRED_ACKS), error_message=None)
_UNKNOWN_PARTITION = ItemError(
    error_code=int(UNKNOWN_TOPIC_OR_PARTITION),
    error_message="This server does not host this topic-partition.",
)


async def _missing_partitions(
    cluster: ClusterView,
    request: ProduceView,
    names: Mapping[str, str | None],
    rulings: Mapping[Key, Ruling],
) -> dict[Key, ItemError]:
    """UNKNOWN_TOPIC_OR_PARTITION (or the error Metadata gives the topic) for each partition
    of the request that the cluster does not have, as Kafka answers it, for a broker that
    would take its records (``upstream.accepts_produce_to_missing_topics``): kept there, they
    were in a topic of that name created later, record.validation.policy or not, so a client
    could write a validated topic's first records unvalidated before it was created (or after
    it was deleted, before it was created again)."""
    named = {
        (p.topic, p.partition): name
        for p in request.partitions
        if (p.topic, p.partition) not in rulings and (name := names.get(p.topic, p.topic))
    }
    if not named:
        return {}
    found = await cluster.describe_topics(list(dict.fromkeys(named.values())))
    missing: dict[Key, ItemError] = {}
    for key, name in named.items():
        topic = found.get(name)
        if topic is not None and topic.exists and key[1] in topic.partitions:
            continue
        code = topic.error_code if topic is not None and topic.error_code else None
        missing[key] = (
            _UNKNOWN_PARTITION
            if code in (None, int(UNKNOWN_TOPIC_OR_PARTITION))
            else ItemError(error_code=int(code), error_message=None)
        )
    return missing


def _too_many_partitions(ctx: RequestContext, frame: bytes, limit: int) -> Close | None:
    """The refusal of a request with more partition entries than ``produce.max.partitions``,
    counted before any is decoded: each costs the gateway 10 to 17 us to decode and judge
    whatever it holds, so a frame of empty ones held the event loop for every client."""
    if limit == UNLIMITED:
        return None
    count = produce_partition_count(ctx.header, frame, limit)
    if count <= limit:
        return None
    return Close(
        reason=f"Produce v{ctx.api_version} holds more than {limit} partitions "
        "(limits: produce.max.partitions), more than the gateway reads in one request",
        metric_reason="oversized",
    )


def _refused_partitions(
    request: ProduceView, names: Mapping[str, str | None], own_topics: frozenset[str]
) -> dict[Key, Ruling]:
    """The partitions refused before any policy: of a topic id the cluster does not know, of
    an illegal name, of the gateway's own topics (one ruling per topic, so one event for all
    its partitions)."""
    rulings: dict[Key, Ruling] = {}
    refusals: dict[str, Ruling | None] = {}
    for p in request.partitions:
        name = names.get(p.topic, p.topic)
        if name is None:
            refused: Ruling | None = UNKNOWN_ID
        elif name in refusals:
            refused = refusals[name]
        else:
            refused = refusals[name] = _refused_topic(name, own_topics)
        if refused is not None:
            rulings[(p.topic, p.partition)] = refused
    return rulings


def _refused_topic(topic: str, own_topics: frozenset[str]) -> Ruling | None:
    """An illegal name (``T/`` would land in ``T`` on some brokers, unvalidated) or one of the
    gateway's own topics (audited: a client writing into the audit topic is forging events;
    one event for the topic, not one per partition: 20,000 made-up partitions of it in one
    request would be 20,000 events)."""
    illegal = illegal_topic(topic)
    if illegal is not None:
        return illegal
    if topic in own_topics:
        return own_topic_refusal(
            f"Topic '{topic}' is written by the gateway only.",
            resource_name=topic,
            action="produce",
        )
    return None


def handler(services: Services) -> Handler:
    judge = with_leader_endpoints(API_KEY, services, enforced(services, Produce(services)))

    async def handle(ctx: RequestContext, cluster: ClusterView, frame: bytes) -> Outcome:
        try:
            unanswered = produce_acks(ctx.header, frame) == 0
        except FrameRejected:
            unanswered = False  # the judge closes the connection for it
        outcome = await judge(ctx, cluster, frame)
        if not unanswered:
            return outcome
        # An acks=0 request the acks config sent on with acks=-1 (see the module docstring):
        # its client reads no answer, so an answer with errors closes the connection.
        if isinstance(outcome, Answer):
            return Close(
                reason="acks=0 produce refused (its acks config is all): nothing written, "
                "closing the connection as Kafka does",
                metric_reason="rejected_acks0_produce",
            )
        if isinstance(outcome, Forward) and outcome.expect_response:
            return replace(outcome, unanswered=partial(_unanswered_failure, ctx.api_version))
        return outcome

    return handle


def _unanswered_failure(version: int, response: bytes) -> str | None:
    failed = failed_partitions(version, response)
    if not failed:
        return None
    return (
        f"acks=0 produce written with acks=all (its acks config) failed for "
        f"{', '.join(failed)}; closing the connection as Kafka does"
    )


def _asks_all(configured: str | None) -> bool:
    """Whether a client's stored acks config asks for every replica (see _ONE_OR_NONE)."""
    if configured is None or configured in _ONE_OR_NONE:
        return False
    if configured not in ("all", "-1"):
        _unreadable_acks(configured)
    return True


@lru_cache(maxsize=64)
def _unreadable_acks(configured: str) -> None:
    """Log, once per value (not once per Produce), an acks config taken as all."""
    log.warning(
        "a stored acks config %r is no value this gateway stores (another program's or "
        "version's): taken as all; set it again (kpg configs --alter)",
        configured,
    )
