"""DeleteTopics, v1-v6: each topic's deletion through the policy chain as a KIP-201 DELETE,
with the topic's current state from the cluster (the protected-topics rule runs inside it).

Per topic: denied -> POLICY_VIOLATION (44), with the policy's message from v5 on (older
versions carry only the code). A topic the cluster does not describe (absent, not
authorized) is answered here with the Metadata error, never forwarded blind: no policy can
judge it, and a topic created a moment ago that the broker answering Metadata has not seen
yet must not be deleted unjudged (the client's retry finds it). A v6 entry naming a topic id
is resolved to its name through Metadata and judged by that name; an id the cluster does not
know is answered here with UNKNOWN_TOPIC_ID. An entry given twice -> INVALID_REQUEST.

All allowed: the client's bytes go to the broker untouched. None allowed: answered here.
Mixed: the allowed entries are forwarded as the client wrote them and the local results
merged into the broker's answer, in request order.

A deleted topic's ``record.validation.policy`` (kept by the gateway, see
:mod:`.alter_configs`) is forgotten once the broker reports the deletion, so a topic created
later under the same name starts unvalidated, as its broker configs start from the defaults.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING

from protocol import admin
from protocol import topic_admin as ta
from protocol.errors import INVALID_REQUEST, UNKNOWN_TOPIC_ID
from protocol.framing import RequestHeader

from ..record_validation import STATE_NAMESPACE, VALIDATION_POLICY_KEY
from ..state import StateStoreError
from . import Answer, Forward, Outcome
from .create_partitions import current_topics, state_unreadable, undescribed_topic

if TYPE_CHECKING:
    from gateway.connection import ConnectionContext

log = logging.getLogger(__name__)

API_KEY = ta.DELETE_TOPICS
VERSIONS = ta.DELETE_TOPICS_VERSIONS


async def handle(ctx: ConnectionContext, header: RequestHeader, frame: bytes) -> Outcome:
    request = ta.read_delete_topics(header, frame)
    targets = request.targets
    local: dict[ta.DeleteTarget, ta.TopicResult] = {
        target: ta.TopicResult(
            name=target.name,
            topic_id=target.topic_id,
            error_code=int(INVALID_REQUEST),
            error_message="Duplicate topic id." if target.topic_id else "Duplicate topic name.",
        )
        for target in targets
        if targets.count(target) > 1
    }
    pending = [t for t in dict.fromkeys(targets) if t not in local]

    described: dict[str, admin.TopicDescription] | None = None
    names: dict[ta.DeleteTarget, str] = {}
    if any(t.topic_id is not None for t in pending):
        everything = await ctx.send_internal(ta.describe_all_topics())
        described = admin.read_topics(everything)
        by_id = ta.read_topic_ids(everything)
        for target in pending:
            if target.topic_id is None:
                continue
            name = by_id.get(target.topic_id)
            if name is None:
                local[target] = ta.TopicResult(
                    name=None,
                    topic_id=target.topic_id,
                    error_code=int(UNKNOWN_TOPIC_ID),
                    error_message="This server does not host this topic ID.",
                )
            else:
                names[target] = name
    for target in pending:
        if target.name is not None:
            names[target] = target.name

    known = await current_topics(ctx, list(names.values()), described)
    for target, name in names.items():
        if name in known.errors:
            undescribed = undescribed_topic(name, known.errors[name])
            local[target] = ta.TopicResult(
                name=name,
                topic_id=target.topic_id,
                error_code=undescribed.error_code,
                error_message=undescribed.error_message,
            )
            continue
        pre = known.states.get(name)
        if pre is None:
            decision = state_unreadable(name, known.unreadable[name])
        else:
            decision = await ctx.decide(
                partial(
                    ctx.policies.check_delete_topic, name, pre_state=pre, principal=ctx.principal
                )
            )
        error = await ctx.record_policy_decision(
            header,
            decision,
            resource_type="topic",
            resource_name=name,
            action="delete",
        )
        if error is not None:
            local[target] = ta.TopicResult(
                name=name,
                topic_id=target.topic_id,
                error_code=error,
                error_message=decision.message,
            )

    allowed = [t for t in dict.fromkeys(targets) if t not in local]
    if not allowed and targets:
        return Answer(frame=ta.delete_topics_answer(request, header.correlation_id, local, None))
    validated = {
        target: names[target]
        for target in allowed
        if target in names and ctx.validation_policy_of(names[target]) is not None
    }
    if not local and not validated:
        return Forward(frame=frame)

    async def merge(response: bytes) -> bytes:
        broker = ta.read_delete_topics_response(request, response)
        if validated:
            await _forget_policies(ctx, validated, broker)
        if not local:
            return response
        return ta.delete_topics_answer(request, header.correlation_id, local, broker)

    forwarded = frame if not local else ta.delete_topics_for_broker(request, header, set(allowed))
    return Forward(frame=forwarded, on_response=merge)


async def _forget_policies(
    ctx: ConnectionContext, validated: dict[ta.DeleteTarget, str], broker: object
) -> None:
    """Forget the record.validation.policy of each topic the broker reports deleted.

    A store that cannot forget it is logged as an error and the broker's answer still goes
    to the client: the topic is gone either way, and a retry would not reach this point.
    """
    names, ids = ta.deleted(broker)
    for target, name in validated.items():
        by_id = target.topic_id is not None and target.topic_id in ids
        if name in names or by_id:
            try:
                await ctx.state_put(STATE_NAMESPACE, name, None)
            except StateStoreError as exc:
                log.error(
                    "topic %r was deleted, but its %s stays in the state store: %s",
                    name,
                    VALIDATION_POLICY_KEY,
                    exc,
                )
