"""DeleteRecords: each topic's deletion of records through the rules (protected topics), after
the checks every partitioned API gets (:mod:`._partitioned`: legal names, the gateway's own
topics). Denied -> POLICY_VIOLATION for each partition of the topic."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from policies.rules import TopicOperation
from protocol import partitioned as pt
from protocol.versions import DECODABLE

from ..engine import ClusterView, Judged, RequestContext, Ruling
from ..services import Services
from ._partitioned import TopicPartitions
from .base import Handler, enforced

API_KEY = 21
VERSIONS = DECODABLE[API_KEY]


class DeleteRecords(TopicPartitions):
    async def judge_topics(
        self,
        ctx: RequestContext,
        cluster: ClusterView,
        request: pt.Partitioned,
        topics: Sequence[str],
    ) -> Mapping[str, Ruling]:
        policies = self._services.policies
        rulings: dict[str, Ruling] = {}
        for topic in topics:
            check = policies.chain.plan_data_operation(
                TopicOperation.DELETE_RECORDS, topic, principal=ctx.principal
            )
            rulings[topic] = Judged(
                decision=await policies.decide(check),
                resource_type="topic",
                resource_name=topic,
                action="delete_records",
            )
        return rulings


def handler(services: Services) -> Handler:
    return enforced(services, DeleteRecords(services, API_KEY, VERSIONS))
