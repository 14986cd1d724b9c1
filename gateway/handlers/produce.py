"""Produce: records of validated topics go through the RecordValidationPolicy (seed 002).

Versions: 3 and later (magic 2 record batches; Kafka 4 brokers take nothing older), capped
below v10, whose answers may carry leader endpoints (KIP-951 ``node_endpoints``) that would
leak broker addresses.

Items are partitions. No topic of the request validated and none of the gateway's own: the
client's bytes are forwarded, records unread. Per partition, one rejected record fails the
whole batch: INVALID_RECORD (87) with ``record_errors`` and ``error_message`` (v8 and later;
the bare code before). A batch that does not parse gets CORRUPT_MESSAGE (2), in dry-run mode
too: the gateway cannot say what it would carry, so it never forwards it. A partition of the
gateway's own topics gets TOPIC_AUTHORIZATION_FAILED. Transactional requests: one rejection
fails every partition, so a transaction is never half written. acks=0: no answer is due; a
rejection writes nothing of the request and closes the connection, as Kafka does.

Opt-in (``client_configs.enforce.acks``): a request with acks=1 from a user and client-id
whose dynamic client config (seed 003) says ``acks=-1`` or ``all`` goes to the broker with
acks=-1, written in place (counted in ``kpg_client_config_enforced_total{config="acks"}``).
acks=0 requests are never changed: their client reads no answer, so an error in it (the one
thing acks=-1 adds) would reach nobody; a configured acks=0 or 1 never lowers a request's acks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial

from policies.chain import Decision, Mode, Verdict
from protocol.errors import (
    INVALID_RECORD,
    TOPIC_AUTHORIZATION_FAILED,
)
from protocol.framing import FrameRejected, RequestHeader
from protocol.produce import (
    VERSIONS,
    PartitionRecords,
    ProduceView,
    produce_acks,
    produce_answer,
    produce_request_keeping,
    read_produce,
    with_acks,
)
from protocol.results import ItemError
from protocol.topic_names import illegal_topic

from .. import client_configs
from ..engine import BaseEnforcement, ClusterView, Judged, RequestContext, Ruling, Settlement
from ..outcomes import Close, Forward, Outcome
from ..policy_runner import PolicyUnavailable
from ..record_validation import PartitionOutcome
from ..services import Services
from .base import Handler, enforced

API_KEY = 0
Key = tuple[str, int]
_ALL_REPLICAS = frozenset({"-1", "all"})


class Produce(BaseEnforcement[ProduceView, Key]):
    api_key = API_KEY
    versions = VERSIONS

    def __init__(self, services: Services) -> None:
        self._services = services

    def prepare(self, ctx: RequestContext, frame: bytes) -> bytes | Outcome:
        services = self._services
        header = ctx.header
        try:
            acks = produce_acks(header, frame)
            if acks == 1 and services.client_configs.enforce_acks:
                configured = client_configs.config_of(
                    services.state.items(client_configs.STATE_NAMESPACE),
                    ctx.principal,
                    header.client_id,
                    "acks",
                )
                if configured in _ALL_REPLICAS:
                    frame = with_acks(header, frame, -1)
                    acks = -1
                    services.client_config_enforced.labels("acks").inc()
        except FrameRejected as exc:
            return Close(reason=str(exc), metric_reason=exc.reason)
        # A topic name stands verbatim in the request: no match, no write to the gateway's
        # topics under any name (an alias such as "state/" holds the name too). A request
        # to unvalidated topics is not read, so an illegal alias of one goes to the broker:
        # it reaches nothing a policy guards that the plain name would not.
        writes_own = any(topic.encode() in frame for topic in services.own_topics)
        if not writes_own and not services.validated_topics():
            return Forward(frame=frame, expect_response=acks != 0)
        return frame

    def read(self, header: RequestHeader, frame: bytes) -> ProduceView:
        return read_produce(header, frame)

    def keys(self, request: ProduceView) -> Sequence[Key]:
        return [(p.topic, p.partition) for p in request.partitions]

    def duplicate(self, key: Key) -> ItemError | None:
        return None

    def expects_response(self, request: ProduceView) -> bool:
        return request.acks != 0

    async def judge(
        self, ctx: RequestContext, cluster: ClusterView, request: ProduceView, keys: Sequence[Key]
    ) -> Mapping[Key, Ruling]:
        services = self._services
        rulings: dict[Key, Ruling] = {}
        for p in request.partitions:
            refused = _refused_topic(p.topic, services.own_topics)
            if refused is not None:
                rulings[(p.topic, p.partition)] = refused
        checks = [
            (p, policy)
            for p in request.partitions
            if (p.topic, p.partition) not in rulings
            and (policy := services.validation_policy_of(p.topic)) is not None
        ]
        for outcome in await self._validate(checks) if checks else ():
            ruling = self._ruling(ctx, outcome)
            if ruling is not None:
                rulings[(outcome.topic, outcome.partition)] = ruling
        return rulings

    async def _validate(
        self, checks: Sequence[tuple[PartitionRecords, str]]
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
                validator.name, partial(validator.validate, partitions), what="validate()"
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

    def _ruling(self, ctx: RequestContext, outcome: PartitionOutcome) -> Judged | None:
        """None for a partition whose records pass (counted in the produce summary)."""
        services = self._services
        name = services.records.name
        services.metrics.count_validation(outcome, name)
        if outcome.error is None:
            if services.audit is not None:
                services.audit.record_allowed_produce(
                    topic=outcome.topic,
                    principal=ctx.principal,
                    client_id=ctx.client_id,
                    api_version=ctx.api_version,
                    records_examined=outcome.records,
                    bytes_examined=outcome.bytes,
                    policy_version=services.engine.decisions.policy_version,
                )
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


def _refused_topic(topic: str, own_topics: frozenset[str]) -> ItemError | None:
    """An illegal name (``T/`` would land in ``T`` on some brokers, unvalidated) or one of the
    gateway's own topics."""
    illegal = illegal_topic(topic)
    if illegal is not None:
        return illegal
    if topic in own_topics:
        return ItemError(
            error_code=int(TOPIC_AUTHORIZATION_FAILED),
            error_message=f"Topic '{topic}' is written by the gateway only.",
        )
    return None


def handler(services: Services) -> Handler:
    return enforced(services, Produce(services))
