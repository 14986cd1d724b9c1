"""CreateTopics, every version a client may send (v0-v7): each topic through the policy chain.

Per topic: allowed topics go to the broker, denied ones get POLICY_VIOLATION (44) with the
policy's message. All allowed (and a version the broker takes): the client's bytes are
forwarded untouched. All denied: answered here. Mixed: only the allowed topics are forwarded
and the denials are merged into the broker's answer, in request order. v0 and v1 are sent to
the broker as v2 and the answer translated back (Kafka 4 takes nothing older than v2).

validate_only: the policies run and nothing is created. In front of a broker that ignores
validate_only (``upstream.ignores_validate_only``) the gateway answers the dry run itself,
with TOPIC_ALREADY_EXISTS for topics that exist, instead of forwarding it.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from policies.api import CreateTopicRequestMetadata
from protocol import admin
from protocol import create_topics as ct
from protocol.errors import INVALID_REQUEST, POLICY_VIOLATION
from protocol.framing import RequestHeader

from ..record_validation import STATE_NAMESPACE, VALIDATION_POLICY_KEY
from . import Answer, Forward, Outcome

if TYPE_CHECKING:
    from gateway.connection import ConnectionContext

API_KEY = ct.CREATE_TOPICS
VERSIONS = ct.VERSIONS

TOPIC_ALREADY_EXISTS = 36
# Kafka's defaults for num.partitions and default.replication.factor, used when the broker
# does not report its own (Tansu reports no broker configs).
_KAFKA_DEFAULTS = {"num.partitions": 1, "default.replication.factor": 1}


async def handle(ctx: ConnectionContext, header: RequestHeader, frame: bytes) -> Outcome:
    request = ct.read_request(header, frame)
    local: dict[str, ct.TopicResult] = {}
    names = [t.name for t in request.topics]
    defaults: dict[str, int] | None = None
    for spec in request.topics:
        if spec.name in local:
            continue
        if names.count(spec.name) > 1:
            local[spec.name] = ct.TopicResult(
                name=spec.name,
                error_code=INVALID_REQUEST,
                error_message=f"Topic '{spec.name}' appears more than once in the request.",
            )
            continue
        if (
            defaults is None
            and not spec.assignments
            and -1 in (spec.num_partitions, spec.replication_factor)
        ):
            defaults = await _broker_defaults(ctx)
        metadata = _metadata(spec, defaults or {})
        decision = await ctx.decide(
            partial(ctx.policies.check_create_topic, metadata, principal=ctx.principal)
        )
        await ctx.record_policy_decision(
            header,
            decision,
            resource_type="topic",
            resource_name=spec.name,
            action="create",
            validate_only=request.validate_only,
        )
        if not decision.allowed:
            local[spec.name] = ct.TopicResult(
                name=spec.name, error_code=int(POLICY_VIOLATION), error_message=decision.message
            )

    allowed = [n for n in dict.fromkeys(names) if n not in local]
    if request.validate_only and ctx.upstream_config.ignores_validate_only and allowed:
        existing = admin.read_topics(await ctx.send_internal(admin.describe_topics(allowed)))
        for name in allowed:
            exists = existing.get(name)
            local[name] = ct.TopicResult(
                name=name,
                error_code=TOPIC_ALREADY_EXISTS if exists and exists.exists else 0,
                error_message=f"Topic '{name}' already exists."
                if exists and exists.exists
                else None,
            )
        allowed = []
    if not allowed and names:
        return Answer(frame=ct.answer(request, header.correlation_id, local, None))
    # record.validation.policy is the gateway's own topic config: kept in its state store,
    # taken out of what the broker sees (a broker refuses config names it does not know).
    for_broker, kept = ct.without_config(request, VALIDATION_POLICY_KEY)
    if not local and not kept and not ct.needs_translation(request):
        return Forward(frame=frame)
    reduced = ct.request_for_broker(for_broker, header, allowed)

    async def merge(response: bytes) -> bytes:
        broker = ct.read_broker_response(request, response)
        if not request.validate_only:
            for result in broker.topics:
                if result.name in kept and int(result.error_code) == 0:
                    await ctx.state_put(STATE_NAMESPACE, result.name, kept[result.name])
        return ct.answer(request, header.correlation_id, local, broker)

    return Forward(frame=reduced, on_response=merge)


def _metadata(spec: ct.TopicSpec, defaults: dict[str, int]) -> CreateTopicRequestMetadata:
    if spec.assignments:
        return CreateTopicRequestMetadata(
            topic=spec.name,
            num_partitions=None,
            replication_factor=None,
            replicas_assignments=dict(spec.assignments),
            configs={k: v for k, v in spec.configs if v is not None},
        )
    partitions = spec.num_partitions
    if partitions == -1:
        partitions = defaults.get("num.partitions", _KAFKA_DEFAULTS["num.partitions"])
    replication = spec.replication_factor
    if replication == -1:
        replication = defaults.get(
            "default.replication.factor", _KAFKA_DEFAULTS["default.replication.factor"]
        )
    return CreateTopicRequestMetadata(
        topic=spec.name,
        num_partitions=partitions,
        replication_factor=replication,
        replicas_assignments=None,
        configs={k: v for k, v in spec.configs if v is not None},
    )


async def _broker_defaults(ctx: ConnectionContext) -> dict[str, int]:
    """num.partitions and default.replication.factor as the cluster has them (KIP-464: the
    broker resolves -1 before the policy sees the request, and so does the gateway)."""
    brokers = admin.broker_ids(await ctx.send_internal(admin.describe_topics([])))
    if not brokers:
        return {}
    configs = admin.read_configs(
        await ctx.send_internal(admin.describe_configs([(4, str(brokers[0]))]))
    )
    found: dict[str, int] = {}
    for resource in configs.values():
        for key, value in resource.effective().items():
            if key in _KAFKA_DEFAULTS and value.lstrip("-").isdigit():
                found[key] = int(value)
    return found
