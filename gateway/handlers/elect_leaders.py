"""ElectLeaders: a preferred election (type 0) changes no data and goes on; an unclean one
(type 1, which may lose committed records) is judged per topic as setting
``unclean.leader.election.enable=true``, so a rule that forbids that config forbids the
election, and protected topics refuse it. Both get the checks every partitioned API gets
(:mod:`._partitioned`). An unclean election of every partition (a null topic list) is refused
with INVALID_REQUEST: the gateway judges unclean elections topic by topic, so it must be told
which. That refusal is audited (policy ``gateway``, resource type ``cluster``): an unclean
election of the whole cluster is the widest one a client can ask for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from protocol import partitioned as pt
from protocol.errors import INVALID_REQUEST
from protocol.results import ItemError
from protocol.versions import DECODABLE

from ..engine import ClusterView, Judged, RequestContext, Ruling
from ..outcomes import Answer, Outcome
from ..services import Services
from ._partitioned import TopicPartitions
from .base import Handler, enforced

API_KEY = 43
VERSIONS = DECODABLE[API_KEY]
UNCLEAN = 1


_EVERY_PARTITION = ItemError(
    error_code=int(INVALID_REQUEST),
    error_message="The policy gateway judges unclean leader elections topic by topic: name "
    "the partitions to elect.",
)


class ElectLeaders(TopicPartitions):
    def prepare(self, ctx: RequestContext, frame: bytes) -> bytes | Outcome:
        oversized = self._services.engine.oversized(ctx, frame)
        if oversized is not None:
            return oversized  # read here, before the engine's own check
        return frame

    def decided_items(self, request: pt.Partitioned, keys: Sequence[pt.Item]) -> int:
        """Unclean elections are judged topic by topic; clean ones pass."""
        return len({topic for topic, _ in keys}) if _unclean(request) else 0

    async def judge_topics(
        self,
        ctx: RequestContext,
        cluster: ClusterView,
        request: pt.Partitioned,
        topics: Sequence[str],
    ) -> Mapping[str, Ruling]:
        if not _unclean(request):
            return {}
        services = self._services
        policies = services.policies
        topic_type = 2
        described = await cluster.describe_configs([(topic_type, t) for t in topics])
        rulings: dict[str, Ruling] = {}
        for topic in topics:
            found = described.get((topic_type, topic))
            configs = found.effective() if found is not None and found.error_code == 0 else {}
            check = policies.chain.plan_unclean_election(
                topic, configs=configs, principal=ctx.principal
            )
            rulings[topic] = Judged(
                decision=await policies.decide(ctx, check),
                resource_type="topic",
                resource_name=topic,
                action="elect_unclean_leader",
            )
        return rulings


def _unclean(request: pt.Partitioned) -> bool:
    return pt.election_type(request) == UNCLEAN


def handler(services: Services) -> Handler:
    judge = enforced(services, ElectLeaders(services, API_KEY, VERSIONS))

    async def handle(ctx: RequestContext, cluster: ClusterView, frame: bytes) -> Outcome:
        engine = services.engine
        if engine.oversized(ctx, frame) is not None:
            return await judge(ctx, cluster, frame)  # refused there, unread
        request = pt.read(ctx.header, frame)
        if not (_unclean(request) and pt.elects_every_partition(request)):
            return await judge(ctx, cluster, frame)
        refused = await engine.refused(
            ctx,
            _EVERY_PARTITION,
            policy="gateway",
            resource_type="cluster",
            resource_name="",
            action="elect_unclean_leader",
        )
        return Answer(frame=pt.refuse_all(request, ctx.correlation_id, refused))

    return handle
