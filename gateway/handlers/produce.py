"""Produce: records of validated topics go through the RecordValidationPolicy (seed 002).

Versions: 3 and later (magic 2 record batches; Kafka 4 brokers take nothing older), capped
below v10, whose answers may carry leader endpoints (KIP-951 ``node_endpoints``) that would
leak broker addresses.

- No topic of the request validated: the client's bytes are forwarded, records unread.
- Per partition, one rejected record fails the whole batch: INVALID_RECORD (87) with
  ``record_errors`` and ``error_message`` (v8 and later; the bare code before). A batch that
  does not parse gets CORRUPT_MESSAGE (2), in dry-run mode too: the gateway cannot say what
  it would carry, so it never forwards it. The other partitions are forwarded and the
  broker's answers merged in request order.
- Transactional requests (transactional_id set): one rejection fails every partition, so a
  transaction is never half written.
- acks=0: no answer is due; a rejection writes nothing of the request and closes the
  connection, as Kafka does.

Opt-in (``client_configs.enforce.acks``): a request with acks=1 from a user and client-id
whose dynamic client config (seed 003) says ``acks=-1`` or ``all`` goes to the broker with
acks=-1, written in place (counted in ``kpg_client_config_enforced_total{config="acks"}``).
The client still gets the answer it waits for, later and with the stronger guarantee.
acks=0 requests are never changed: their client reads no answer, so the gateway would have
to swallow the broker's, and an error in it (the one thing acks=-1 adds) would reach nobody;
a configured acks=0 or 1 never lowers a request's acks either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from policies.chain import Decision, Verdict
from policies.rules import Mode
from protocol.errors import CORRUPT_MESSAGE, INVALID_RECORD, TOPIC_AUTHORIZATION_FAILED
from protocol.framing import FrameRejected, RequestHeader
from protocol.produce import VERSIONS as PRODUCE_VERSIONS
from protocol.produce import (
    PartitionError,
    produce_acks,
    produce_answer,
    produce_request_keeping,
    read_produce,
    with_acks,
)

from ..decisions import Subject
from . import Answer, Close, Forward, Outcome

if TYPE_CHECKING:
    from gateway.connection import ConnectionContext

API_KEY = 0
VERSIONS = PRODUCE_VERSIONS
_ALL_REPLICAS = frozenset({"-1", "all"})


async def handle(ctx: ConnectionContext, header: RequestHeader, frame: bytes) -> Outcome:
    try:
        acks = produce_acks(header, frame)
    except FrameRejected as exc:
        return Close(reason=str(exc), metric_reason=exc.reason)
    if (
        acks == 1
        and ctx.client_configs.enforce_acks
        and ctx.client_config_of(header.client_id, "acks") in _ALL_REPLICAS
    ):
        frame = with_acks(header, frame, -1)
        acks = -1
        ctx.count_enforced("acks")
    validator = ctx.record_validator
    own = ctx.gateway_topics
    # A topic name stands verbatim in the request: no match, no write to the gateway's topics.
    writes_own = any(topic.encode() in frame for topic in own)
    if not writes_own and (validator is None or not ctx.validated_topics()):
        return Forward(frame=frame, expect_response=acks != 0)
    view = read_produce(header, frame)
    local: dict[tuple[str, int], PartitionError] = {
        (p.topic, p.partition): PartitionError(
            error_code=int(TOPIC_AUTHORIZATION_FAILED),
            error_message=f"Topic '{p.topic}' is written by the gateway only.",
        )
        for p in view.partitions
        if p.topic in own
    }
    checks = [
        (p, policy)
        for p in view.partitions
        if (p.topic, p.partition) not in local
        and (policy := ctx.validation_policy_of(p.topic)) is not None
    ]
    if not checks and not local:
        return Forward(frame=frame, expect_response=acks != 0)

    outcomes = await ctx.validate_records(checks) if checks else []
    for outcome in outcomes:
        assert validator is not None
        key = (outcome.topic, outcome.partition)
        ctx.count_validation(outcome, validator.name)
        if outcome.error is None:
            ctx.record_allowed_produce(outcome, header)
            continue
        # dry-run passes what the policy rejects, never what cannot be read (fail closed)
        dry_run = validator.dry_run and outcome.error.error_code != CORRUPT_MESSAGE
        decision = Decision(
            allowed=dry_run,
            verdicts=(
                Verdict(
                    policy=validator.name,
                    mode=Mode.DRY_RUN if dry_run else Mode.ENFORCE,
                    outcome="would_deny" if dry_run else "denied",
                    message=outcome.error.error_message,
                ),
            ),
        )
        await ctx.record(
            Subject(
                client_address=ctx.client_address,
                principal=ctx.principal,
                client_id=header.client_id,
                api_key=API_KEY,
                api_version=header.api_version,
                resource_type="topic",
                resource_name=f"{outcome.topic}-{outcome.partition}",
                action="produce",
                records_examined=outcome.records,
                bytes_examined=outcome.bytes,
            ),
            decision,
            outcome.error.error_code,
        )
        if not dry_run:
            local[key] = outcome.error

    if not local:
        return Forward(frame=frame, expect_response=acks != 0)
    if acks == 0:
        rejected = ", ".join(f"{t}-{p}" for t, p in local)
        return Close(
            reason=f"acks=0 produce with rejected records ({rejected}): nothing written, "
            "closing the connection as Kafka does",
            metric_reason="rejected_acks0_produce",
        )
    if view.transactional_id is not None:
        for p in view.partitions:
            local.setdefault(
                (p.topic, p.partition),
                PartitionError(
                    error_code=int(INVALID_RECORD),
                    error_message="Not written: another partition of this transactional produce "
                    "request has rejected records, so none of it is written.",
                ),
            )
    keep = [(p.topic, p.partition) for p in view.partitions if (p.topic, p.partition) not in local]
    if not keep:
        return Answer(frame=produce_answer(view, header.correlation_id, local, None))
    reduced = produce_request_keeping(view, header, keep)

    async def merge(response: bytes) -> bytes:
        return produce_answer(view, header.correlation_id, local, response)

    return Forward(frame=reduced, on_response=merge)
