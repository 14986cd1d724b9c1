"""DeleteGroups: a group's deletion takes its committed offsets with it, so it is judged as
OffsetDelete of every topic the group has offsets for (protected topics refuse it). The
topics come from an OffsetFetch of the groups on the client's own connection (the group
coordinator's); a group the coordinator will not describe gets that error here, never a
blind forward. Denied -> POLICY_VIOLATION for that group (the answer carries no message)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from policies.chain import Decision, Verdict
from policies.rules import TopicOperation
from protocol import groups as gr
from protocol.errors import COORDINATOR_NOT_AVAILABLE
from protocol.framing import RequestHeader
from protocol.results import ItemError
from protocol.versions import DECODABLE

from ..engine import BaseEnforcement, ClusterView, Judged, RequestContext, Ruling
from ..services import Services
from .base import Handler, enforced

API_KEY = gr.DELETE_GROUPS
VERSIONS = DECODABLE[API_KEY]


class DeleteGroups(BaseEnforcement[gr.DeleteGroups, str]):
    api_key = API_KEY
    versions = VERSIONS

    def __init__(self, services: Services) -> None:
        self._services = services

    def read(self, header: RequestHeader, frame: bytes) -> gr.DeleteGroups:
        return gr.read_delete_groups(header, frame)

    def keys(self, request: gr.DeleteGroups) -> Sequence[str]:
        return request.groups

    def duplicate(self, key: str) -> ItemError | None:
        return None  # Kafka answers a group named twice once, as the gateway does

    async def judge(
        self,
        ctx: RequestContext,
        cluster: ClusterView,
        request: gr.DeleteGroups,
        keys: Sequence[str],
    ) -> Mapping[str, Ruling]:
        committed = gr.read_committed_topics(await cluster.send(gr.committed_topics(keys)))
        rulings: dict[str, Ruling] = {}
        for group in keys:
            code, topics = committed.get(group, (-1, ()))
            if code != 0:
                rulings[group] = ItemError(
                    error_code=code if code > 0 else int(COORDINATOR_NOT_AVAILABLE),
                    error_message=f"The offsets of group {group} could not be read.",
                )
                continue
            rulings[group] = Judged(
                decision=await self._decide(ctx, topics),
                resource_type="group",
                resource_name=group,
                action="delete_group",
            )
        return rulings

    async def _decide(self, ctx: RequestContext, topics: Sequence[str]) -> Decision:
        policies = self._services.policies
        verdicts: list[Verdict] = []
        for topic in topics:
            check = policies.chain.plan_data_operation(
                TopicOperation.DELETE_OFFSETS, topic, principal=ctx.principal
            )
            verdicts.extend((await policies.decide(ctx, check)).verdicts)
        return Decision(
            allowed=all(v.outcome != "denied" for v in verdicts), verdicts=tuple(verdicts)
        )

    def for_broker(
        self, request: gr.DeleteGroups, header: RequestHeader, allowed: Sequence[str]
    ) -> bytes:
        return gr.delete_groups_keeping(request, header, set(allowed))

    def answer(
        self,
        request: gr.DeleteGroups,
        correlation_id: int,
        local: Mapping[str, ItemError],
        broker: bytes | None,
    ) -> bytes:
        return gr.delete_groups_answer(request, correlation_id, local, broker)


def handler(services: Services) -> Handler:
    return enforced(services, DeleteGroups(services))
