"""CreatePartitions, v0-v3: each topic's partition increase through the policy chain as a
KIP-201 MODIFY.

The topic's state before comes from the cluster (Metadata: partitions, replicas, replication
factor; DescribeConfigs for its configs, only when a ``TopicActionPolicy`` reads them). The
state after has the new count, and the new partitions' replicas when the client places them
(else no assignments: the controller will place them). The built-in rules (partitions max,
protected topics) run inside the chain.

Per topic: denied -> POLICY_VIOLATION (44) with the policy's message; a topic the cluster
does not describe (absent, not authorized) is answered here with the Metadata error, since no
policy can judge it; a topic named twice -> INVALID_REQUEST. All allowed: the client's bytes
go to the broker untouched. None allowed: answered here. Mixed: the allowed topics are
forwarded and the local results merged into the broker's answer, in request order.
validate_only: the policies run and the request is forwarded with validate_only, as sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from policies.api import ConfigResourceType, TopicState
from policies.chain import Decision, Mode, Verdict
from protocol import admin
from protocol import topic_admin as ta
from protocol.errors import INVALID_REQUEST, UNKNOWN_TOPIC_OR_PARTITION
from protocol.framing import RequestHeader

from . import Answer, Forward, Outcome

if TYPE_CHECKING:
    from gateway.connection import ConnectionContext

API_KEY = ta.CREATE_PARTITIONS
VERSIONS = ta.CREATE_PARTITIONS_VERSIONS


async def handle(ctx: ConnectionContext, header: RequestHeader, frame: bytes) -> Outcome:
    request = ta.read_create_partitions(header, frame)
    names = [t.name for t in request.topics]
    local: dict[str, ta.TopicResult] = {
        name: ta.TopicResult(
            name=name,
            error_code=int(INVALID_REQUEST),
            error_message=f"Topic '{name}' appears more than once in the request.",
        )
        for name in names
        if names.count(name) > 1
    }
    judged = [t for t in request.topics if t.name not in local]
    known = await current_topics(ctx, [t.name for t in judged])
    for increase in judged:
        if increase.name in known.errors:
            local[increase.name] = undescribed_topic(increase.name, known.errors[increase.name])
            continue
        pre = known.states.get(increase.name)
        if pre is None:
            decision = state_unreadable(increase.name, known.unreadable[increase.name])
        else:
            decision = await ctx.decide(
                partial(
                    ctx.policies.check_create_partitions,
                    increase.name,
                    pre_state=pre,
                    post_state=_post_state(pre, increase),
                    principal=ctx.principal,
                )
            )
        error = await ctx.record_policy_decision(
            header,
            decision,
            resource_type="topic",
            resource_name=increase.name,
            action="create_partitions",
            validate_only=request.validate_only,
        )
        if error is not None:
            local[increase.name] = ta.TopicResult(
                name=increase.name, error_code=error, error_message=decision.message
            )

    allowed = [n for n in dict.fromkeys(names) if n not in local]
    if not allowed and names:
        return Answer(
            frame=ta.create_partitions_answer(request, header.correlation_id, local, None)
        )
    if not local:
        return Forward(frame=frame)

    async def merge(response: bytes) -> bytes:
        broker = ta.read_create_partitions_response(request, response)
        return ta.create_partitions_answer(request, header.correlation_id, local, broker)

    return Forward(
        frame=ta.create_partitions_for_broker(request, header, set(allowed)), on_response=merge
    )


def undescribed_topic(name: str, code: int) -> ta.TopicResult:
    """The answer for a topic Metadata does not describe: its error, in words."""
    if code == int(UNKNOWN_TOPIC_OR_PARTITION):
        message = f"The topic '{name}' does not exist."
    else:
        message = (
            f"Cannot read the state of topic '{name}': Metadata answered {ta.error_name(code)}."
        )
    return ta.TopicResult(name=name, error_code=code, error_message=message)


def _post_state(pre: TopicState, increase: ta.PartitionsIncrease) -> TopicState:
    assignments: dict[int, tuple[int, ...]] | None = None
    if increase.assignments and pre.replicas_assignments is not None:
        assignments = dict(pre.replicas_assignments)
        for offset, replicas in enumerate(increase.assignments):
            assignments[pre.num_partitions + offset] = replicas
    return TopicState(
        num_partitions=increase.count,
        replication_factor=pre.replication_factor,
        replicas_assignments=assignments,
        configs=pre.configs,
    )


# --- the current state of topics, shared with DeleteTopics -------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CurrentTopics:
    """What the cluster says about some topics, as the policies need it."""

    states: Mapping[str, TopicState]
    """The topics that exist and whose state could be read whole."""
    errors: Mapping[str, int]
    """Topics Metadata does not describe: name -> its error (UNKNOWN_TOPIC_OR_PARTITION for
    a topic that does not exist, TOPIC_AUTHORIZATION_FAILED, ...)."""
    unreadable: Mapping[str, str]
    """Existing topics whose configs a ``TopicActionPolicy`` needs but DescribeConfigs did not
    give: name -> the problem."""


async def current_topics(
    ctx: ConnectionContext,
    names: Sequence[str],
    described: Mapping[str, admin.TopicDescription] | None = None,
) -> CurrentTopics:
    """The state of ``names`` before the request: partitions, replicas and replication factor
    from Metadata (``described``, when the caller has it already), configs from DescribeConfigs
    when a ``TopicActionPolicy`` is configured.

    The configs are those set on the topic; with ``upstream.topic_config_source_unreliable``
    every config the broker reports counts as set on the topic.

    :raises UpstreamClosed: when the broker does not answer.
    """
    wanted = list(dict.fromkeys(names))
    if not wanted:
        return CurrentTopics(states={}, errors={}, unreadable={})
    if described is None:
        described = admin.read_topics(await ctx.send_internal(admin.describe_topics(wanted)))
    errors: dict[str, int] = {}
    existing: dict[str, admin.TopicDescription] = {}
    for name in wanted:
        found = described.get(name)
        if found is None:
            errors[name] = int(UNKNOWN_TOPIC_OR_PARTITION)
        elif not found.exists:
            errors[name] = found.error_code
        else:
            existing[name] = found
    configs: dict[str, dict[str, str]] = {name: {} for name in existing}
    unreadable: dict[str, str] = {}
    if ctx.policies.needs_topic_state and existing:
        topic = int(ConfigResourceType.TOPIC)
        answer = admin.read_configs(
            await ctx.send_internal(admin.describe_configs([(topic, n) for n in existing]))
        )
        for name in existing:
            resource = answer.get((topic, name))
            if resource is None:
                unreadable[name] = "DescribeConfigs did not return it"
            elif resource.error_code != 0:
                unreadable[name] = (
                    f"DescribeConfigs answered {ta.error_name(resource.error_code)}"
                    + (f": {resource.error_message}" if resource.error_message else "")
                )
            elif ctx.upstream_config.topic_config_source_unreliable:
                configs[name] = resource.effective()
            else:
                configs[name] = resource.set_on_resource()
    states = {
        name: TopicState(
            num_partitions=len(description.partitions),
            replication_factor=description.replication_factor,
            replicas_assignments=description.partitions,
            configs=configs[name],
        )
        for name, description in existing.items()
        if name not in unreadable
    }
    return CurrentTopics(states=states, errors=errors, unreadable=unreadable)


def state_unreadable(topic: str, problem: str) -> Decision:
    """Fail closed: the gateway's own denial when a policy needs a topic state it cannot read."""
    message = (
        f"the gateway cannot read the state of topic {topic} that its policies need: {problem}"
    )
    return Decision(
        allowed=False,
        verdicts=(Verdict(policy="gateway", mode=Mode.ENFORCE, outcome="denied", message=message),),
    )
