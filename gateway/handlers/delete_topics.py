"""DeleteTopics, v0-v6 (v0 sent to the broker as v1, answered in v0's layout): each topic's
deletion through the policy chain as a KIP-201 DELETE, with the topic's current state from the
cluster.

Items are the request's entries (by name, or by topic id from v6). An entry given twice ->
INVALID_REQUEST; so is a v6 entry naming both a topic and a topic id, as Kafka answers it
(which of the two a broker would delete is the broker's, and the gateway judged one). A v6
entry naming a topic id is resolved to its name through Metadata and judged by that name; an
id the cluster does not know -> UNKNOWN_TOPIC_ID. A topic the cluster
does not describe (absent, not authorized) is answered here with the Metadata error, never
forwarded blind: no policy can judge it, and a topic created a moment ago that the broker
answering Metadata has not seen yet must not be deleted unjudged (the client's retry finds
it). Denied -> POLICY_VIOLATION (44), with the policy's message from v5 on.

A deleted topic's ``record.validation.policy`` (kept by the gateway) is forgotten once the
broker reports the deletion, so a topic created later under the same name starts unvalidated,
as its broker configs start from the defaults. The request claims the policy before it is
forwarded and forgets it only while its claim stands: a topic created again with a policy
between the deletion and the broker's answer reaching the gateway keeps its new policy (it
lost it to the late forgetting). A claim the store cannot write refuses the deletion.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from protocol import topic_admin as ta
from protocol.errors import INVALID_REQUEST, UNKNOWN_SERVER_ERROR, UNKNOWN_TOPIC_ID
from protocol.framing import RequestHeader
from protocol.results import ItemError
from protocol.topic_names import illegal_topic

from ..cluster import current_topics
from ..engine import (
    STATE_STORE,
    BaseEnforcement,
    ClusterView,
    Judged,
    RequestContext,
    Ruling,
    Settlement,
)
from ..outcomes import Close
from ..record_validation import VALIDATION_POLICY_KEY
from ..services import Services
from ..state import StateStoreError
from ._partitioned import TopicNamesById
from .base import Handler, enforced

log = logging.getLogger(__name__)

API_KEY = ta.DELETE_TOPICS
VERSIONS = ta.DELETE_TOPICS_VERSIONS


@dataclass(slots=True)
class Deletion:
    """One DeleteTopics request and the topic name each entry resolves to."""

    request: ta.DeleteTopics
    names: dict[ta.DeleteTarget, str] = field(default_factory=dict)


class DeleteTopics(BaseEnforcement[Deletion, ta.DeleteTarget]):
    api_key = API_KEY
    versions = VERSIONS

    def __init__(self, services: Services) -> None:
        self._services = services
        self._names = TopicNamesById()

    def read(self, header: RequestHeader, frame: bytes) -> Deletion:
        return Deletion(request=ta.read_delete_topics(header, frame))

    def keys(self, request: Deletion) -> Sequence[ta.DeleteTarget]:
        return request.request.targets

    def duplicate(self, key: ta.DeleteTarget) -> ItemError:
        return ItemError(
            error_code=int(INVALID_REQUEST),
            error_message="Duplicate topic id." if key.topic_id else "Duplicate topic name.",
        )

    async def judge(
        self,
        ctx: RequestContext,
        cluster: ClusterView,
        request: Deletion,
        keys: Sequence[ta.DeleteTarget],
    ) -> Mapping[ta.DeleteTarget, Ruling]:
        services = self._services
        chain = services.policies.chain
        rulings = await self._resolve(cluster, request, keys)
        known = await current_topics(
            cluster,
            list(request.names.values()),
            with_configs=chain.needs_topic_state,
            configs_unreliable=services.upstream.topic_config_source_unreliable,
        )
        for target, name in request.names.items():
            if name in known.errors:
                rulings[target] = known.errors[name]
                continue
            pre = known.states.get(name)
            if pre is None:
                decision = services.policies.state_unreadable(name, known.unreadable[name])
            else:
                check = chain.plan_delete_topic(name, pre_state=pre, principal=ctx.principal)
                decision = await services.policies.decide(ctx, check)
            rulings[target] = Judged(
                decision=decision, resource_type="topic", resource_name=name, action="delete"
            )
        return rulings

    async def _resolve(
        self, cluster: ClusterView, request: Deletion, keys: Sequence[ta.DeleteTarget]
    ) -> dict[ta.DeleteTarget, Ruling]:
        """The name each entry stands for (into ``request.names``), and the entries refused
        before any policy: an unknown topic id, an illegal name. Ids are resolved as Produce
        v13's are (:class:`._partitioned.TopicNamesById`): from what the cluster last said,
        asking it for every topic at most once a second per connection."""
        rulings: dict[ta.DeleteTarget, Ruling] = {
            target: _NAMED_TWICE for target in keys if target.named_twice
        }
        keys = [target for target in keys if target not in rulings]
        ids = [t.topic_id for t in keys if t.topic_id is not None]
        if ids:
            by_id = await self._names.resolve(cluster, ids)
            for target in keys:
                if target.topic_id is None:
                    continue
                name = by_id.get(target.topic_id)
                if name is None:
                    rulings[target] = ItemError(
                        error_code=int(UNKNOWN_TOPIC_ID),
                        error_message="This server does not host this topic ID.",
                    )
                else:
                    request.names[target] = name
        for target in keys:
            if target.name is None:
                continue
            illegal = illegal_topic(target.name)
            if illegal is None:
                request.names[target] = target.name
            else:
                rulings[target] = illegal
        return rulings

    async def settle(
        self,
        ctx: RequestContext,
        cluster: ClusterView,
        request: Deletion,
        allowed: Sequence[ta.DeleteTarget],
    ) -> Settlement[ta.DeleteTarget] | Close:
        services = self._services
        validated = {
            target: request.names[target]
            for target in allowed
            if target in request.names
            and services.validation_policy_of(request.names[target]) is not None
        }
        legacy = ta.is_legacy_delete_topics(request.request)
        if not validated:
            return Settlement(reencode_request=legacy, reencode_answer=legacy)
        claim = uuid.uuid4().hex
        try:
            await services.claim_validation_policy_keys(set(validated.values()), claim)
        except StateStoreError as exc:
            refused = ItemError(
                error_code=int(UNKNOWN_SERVER_ERROR),
                error_message=f"The gateway could not prepare to forget the topic's "
                f"{VALIDATION_POLICY_KEY}, so the topic was not deleted: {exc}",
            )
            # each topic was audited as allowed: the refusal the client gets is audited too
            engine = services.engine
            local = {
                target: await engine.refused(
                    ctx,
                    refused,
                    policy=STATE_STORE,
                    resource_type="topic",
                    resource_name=name,
                    action="delete",
                )
                for target, name in validated.items()
            }
            return Settlement(local=local, reencode_request=legacy, reencode_answer=legacy)

        async def forget_policies(response: bytes) -> Mapping[ta.DeleteTarget, ItemError]:
            """Forget the record.validation.policy of each topic the broker reports deleted,
            unless a create of the topic has stored one since this request claimed it (the
            topic was created again between the deletion and this answer); drop the claim of
            the others.

            A store that cannot forget it is logged as an error and the broker's answer still
            goes to the client: the topic is gone either way, and a retry would not get here.
            """
            names, ids = ta.deleted(ta.read_delete_topics_response(request.request, response))
            for target, name in validated.items():
                gone = name in names or (target.topic_id is not None and target.topic_id in ids)
                try:
                    await services.release_validation_policy(name, claim, restore=gone)
                except StateStoreError as exc:
                    log.error(
                        "topic %r was deleted, but its %s stays in the state store: %s",
                        name,
                        VALIDATION_POLICY_KEY,
                        exc,
                    )
            return {}

        return Settlement(after=forget_policies, reencode_request=legacy, reencode_answer=legacy)

    def for_broker(
        self, request: Deletion, header: RequestHeader, allowed: Sequence[ta.DeleteTarget]
    ) -> bytes:
        return ta.delete_topics_for_broker(request.request, header, set(allowed))

    def answer(
        self,
        request: Deletion,
        correlation_id: int,
        local: Mapping[ta.DeleteTarget, ItemError],
        broker: bytes | None,
    ) -> bytes:
        payload = (
            None if broker is None else ta.read_delete_topics_response(request.request, broker)
        )
        return ta.delete_topics_answer(
            request.request, correlation_id, local, payload, request.names
        )


_NAMED_TWICE = ItemError(
    error_code=int(INVALID_REQUEST),
    error_message="You may not specify both topic name and topic id.",
)
"""Kafka's answer to an entry naming a topic and a topic id: the gateway would judge one of
the two topics, and a broker that takes such an entry may delete the other."""


def handler(services: Services) -> Handler:
    return enforced(services, DeleteTopics(services))
