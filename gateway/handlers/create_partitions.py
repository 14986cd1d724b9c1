"""CreatePartitions, v0-v3: each topic's partition increase through the policy chain as a
KIP-201 MODIFY.

Items are topics. The topic's state before comes from the cluster (Metadata: partitions,
replicas, replication factor; DescribeConfigs for its configs, only when a
``TopicActionPolicy`` reads them). The state after has the new count, and the new partitions'
replicas when the client places them (else no assignments: the controller will place them).

A topic the cluster does not describe (absent, not authorized) is answered here with the
Metadata error, since no policy can judge it; a topic named twice -> INVALID_REQUEST; denied ->
POLICY_VIOLATION (44). validate_only: the policies run and the request is forwarded with
validate_only, as sent; in front of a broker that ignores validate_only
(``upstream.ignores_validate_only``) the gateway answers the dry run itself, never forwarding it:
partitions added cannot be taken away, so a dry run the broker carried out could not be undone.
That answer checks what Kafka's controller checks of the counts and the new partitions'
replicas (an increase; as many assignments as new partitions, each not empty, on registered
brokers, none twice, as many replicas as the topic's partitions have), INVALID_PARTITIONS and
INVALID_REPLICA_ASSIGNMENT with Kafka's words.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from policies.api import TopicState
from protocol import topic_admin as ta
from protocol.errors import INVALID_PARTITIONS, INVALID_REPLICA_ASSIGNMENT, INVALID_REQUEST
from protocol.framing import RequestHeader
from protocol.results import OK, ItemError
from protocol.topic_names import illegal_topic

from ..cluster import current_topics
from ..engine import BaseEnforcement, ClusterView, Judged, RequestContext, Ruling, Settlement
from ..services import Services
from .base import Handler, enforced

API_KEY = ta.CREATE_PARTITIONS
VERSIONS = ta.CREATE_PARTITIONS_VERSIONS


class CreatePartitions(BaseEnforcement[ta.CreatePartitions, str]):
    api_key = API_KEY
    versions = VERSIONS

    def __init__(self, services: Services) -> None:
        self._services = services

    def read(self, header: RequestHeader, frame: bytes) -> ta.CreatePartitions:
        return ta.read_create_partitions(header, frame)

    def keys(self, request: ta.CreatePartitions) -> Sequence[str]:
        return [t.name for t in request.topics]

    def duplicate(self, key: str) -> ItemError:
        return ItemError(
            error_code=int(INVALID_REQUEST),
            error_message=f"Topic '{key}' appears more than once in the request.",
        )

    async def judge(
        self,
        ctx: RequestContext,
        cluster: ClusterView,
        request: ta.CreatePartitions,
        keys: Sequence[str],
    ) -> Mapping[str, Ruling]:
        services = self._services
        chain = services.policies.chain
        rulings: dict[str, Ruling] = {}
        for name in keys:
            illegal = illegal_topic(name)
            if illegal is not None:
                rulings[name] = illegal
        keys = [name for name in keys if name not in rulings]
        known = await current_topics(
            cluster,
            keys,
            with_configs=chain.needs_topic_state,
            configs_unreliable=services.upstream.topic_config_source_unreliable,
        )
        rulings.update(known.errors)
        increases = {t.name: t for t in request.topics}
        for name in keys:
            if name in known.errors:
                continue
            pre = known.states.get(name)
            if pre is None:
                decision = services.policies.state_unreadable(name, known.unreadable[name])
            else:
                check = chain.plan_create_partitions(
                    name,
                    pre_state=pre,
                    post_state=_post_state(pre, increases[name]),
                    principal=ctx.principal,
                )
                decision = await services.policies.decide(ctx, check)
            rulings[name] = Judged(
                decision=decision,
                resource_type="topic",
                resource_name=name,
                action="create_partitions",
                validate_only=request.validate_only,
            )
        return rulings

    async def settle(
        self,
        ctx: RequestContext,
        cluster: ClusterView,
        request: ta.CreatePartitions,
        allowed: Sequence[str],
    ) -> Settlement[str]:
        if not (request.validate_only and self._services.upstream.ignores_validate_only):
            return Settlement()
        known = await current_topics(
            cluster,
            allowed,
            with_configs=False,
            configs_unreliable=self._services.upstream.topic_config_source_unreliable,
        )
        increases = {t.name: t for t in request.topics}
        local: dict[str, ItemError] = dict(known.errors)
        registered = set(await cluster.broker_ids()) if known.states else set()
        for name, state in known.states.items():
            local[name] = _dry_run(increases[name], state, registered)
        return Settlement(local=local)

    def for_broker(
        self, request: ta.CreatePartitions, header: RequestHeader, allowed: Sequence[str]
    ) -> bytes:
        return ta.create_partitions_for_broker(request, header, set(allowed))

    def answer(
        self,
        request: ta.CreatePartitions,
        correlation_id: int,
        local: Mapping[str, ItemError],
        broker: bytes | None,
    ) -> bytes:
        payload = None if broker is None else ta.read_create_partitions_response(request, broker)
        return ta.create_partitions_answer(request, correlation_id, local, payload)


def handler(services: Services) -> Handler:
    return enforced(services, CreatePartitions(services))


def _dry_run(increase: ta.PartitionsIncrease, topic: TopicState, registered: set[int]) -> ItemError:
    """What Kafka's controller answers a partition increase of ``topic``, on its counts and
    the new partitions' replicas (``registered``: the brokers there are; empty, unknown)."""
    current = topic.num_partitions
    if increase.count < current:
        return ItemError(
            error_code=int(INVALID_PARTITIONS),
            error_message=(
                f"The topic {increase.name} currently has {current} partition(s); "
                f"{increase.count} would not be an increase."
            ),
        )
    if increase.count == current:
        return ItemError(
            error_code=int(INVALID_PARTITIONS),
            error_message=f"Topic already has {current} partition(s).",
        )
    added = increase.count - current
    if increase.assignments is None:
        return OK
    if len(increase.assignments) != added:
        return _invalid_assignment(
            f"Attempted to add {added} additional partition(s), but only "
            f"{len(increase.assignments)} assignment(s) were specified."
        )
    for replicas in increase.assignments:
        refused = _replicas_refusal(replicas, topic.replication_factor, registered)
        if refused is not None:
            return refused
    return OK


def _replicas_refusal(
    replicas: Sequence[int], replication_factor: int, registered: set[int]
) -> ItemError | None:
    """Kafka's controller on one new partition's replicas, in its order: not empty; walked
    sorted, each broker registered (unless ``registered`` is empty: the brokers could not be
    read) and listed once; as many as the topic's other partitions."""
    if not replicas:
        return _invalid_assignment(
            "The manual partition assignment includes an empty replica list."
        )
    ordered = sorted(replicas)
    for i, broker in enumerate(ordered):
        if registered and broker not in registered:
            return _invalid_assignment(
                f"The manual partition assignment includes broker {broker}, but no such broker "
                "is registered."
            )
        if i and ordered[i - 1] == broker:
            return _invalid_assignment(
                f"The manual partition assignment includes the broker {broker} more than once."
            )
    if len(replicas) != replication_factor:
        return _invalid_assignment(
            f"The manual partition assignment includes a partition with {len(replicas)} "
            "replica(s), but this is not consistent with previous partitions, which have "
            f"{replication_factor} replica(s)."
        )
    return None


def _invalid_assignment(message: str) -> ItemError:
    return ItemError(error_code=int(INVALID_REPLICA_ASSIGNMENT), error_message=message)


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
