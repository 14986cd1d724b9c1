"""AlterPartitionReassignments: each topic's reassignment as a KIP-201 MODIFY, with the
topic's state before (Metadata, and its configs when a ``TopicActionPolicy`` reads them) and
after (the new replicas of the partitions it moves; a partition whose replicas are null
cancels a reassignment and changes nothing). The replication-factor rule bounds the replica
counts of the moved partitions; protected topics refuse it. A topic the cluster does not
describe gets its Metadata error. Denied -> POLICY_VIOLATION for each partition of the topic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from policies.api import TopicState
from protocol import partitioned as pt
from protocol.versions import DECODABLE

from ..cluster import current_topics
from ..engine import ClusterView, Judged, RequestContext, Ruling
from ..services import Services
from ._partitioned import TopicPartitions
from .base import Handler, enforced

API_KEY = 45
VERSIONS = DECODABLE[API_KEY]


class AlterPartitionReassignments(TopicPartitions):
    own_topic_action = "reassign_partitions"  # as its judged topics' events say

    def decided_items(self, request: pt.Partitioned, keys: Sequence[pt.Item]) -> int:
        return len({topic for topic, _ in keys})

    async def judge_topics(
        self,
        ctx: RequestContext,
        cluster: ClusterView,
        request: pt.Partitioned,
        topics: Sequence[str],
    ) -> Mapping[str, Ruling]:
        services = self._services
        policies = services.policies
        known = await current_topics(
            cluster,
            topics,
            with_configs=policies.chain.needs_topic_state,
            configs_unreliable=services.upstream.topic_config_source_unreliable,
        )
        moves = pt.reassignments(request)
        rulings: dict[str, Ruling] = dict(known.errors)
        for topic in topics:
            if topic in known.errors:
                continue
            pre = known.states.get(topic)
            if pre is None:
                decision = policies.state_unreadable(topic, known.unreadable[topic])
            else:
                check = policies.chain.plan_reassign_partitions(
                    topic,
                    pre_state=pre,
                    post_state=_after(pre, moves.get(topic, {})),
                    principal=ctx.principal,
                )
                decision = await policies.decide(ctx, check)
            rulings[topic] = Judged(
                decision=decision,
                resource_type="topic",
                resource_name=topic,
                action="reassign_partitions",
            )
        return rulings


def _after(pre: TopicState, moves: Mapping[int, tuple[int, ...]]) -> TopicState:
    assignments = {**(pre.replicas_assignments or {}), **moves}
    return TopicState(
        num_partitions=pre.num_partitions,
        replication_factor=max((len(r) for r in assignments.values()), default=0),
        replicas_assignments=assignments,
        configs=pre.configs,
    )


def handler(services: Services) -> Handler:
    return enforced(services, AlterPartitionReassignments(services, API_KEY, VERSIONS))
