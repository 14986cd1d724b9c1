"""CreateAcls and DeleteAcls: a binding that can apply to one of the gateway's own topics (its
state and audit topics), created or deleted, is refused; every other item goes to the broker,
which authorizes ALTER on the cluster as ever. No other gateway policy governs ACLs.

The gateway's principal needs its own topics: a DENY for it, or (on brokers with
``allow.everyone.if.no.acl.found``) any binding on a topic that had none, takes them from it,
and deleting the bindings that grant them does the same. Its audit writes then fail (decisions
go unaudited under ``audit.on_failure: continue``, every change is refused under ``deny``)
and its state store stops. So a creation on a topic resource whose pattern covers an own topic
(the literal name, the wildcard ``*``, a prefix of it) and a delete filter that can match such
a binding (any name, those patterns, or MATCH, which takes the wildcard binding with it) are
answered CLUSTER_AUTHORIZATION_FAILED with the reason, whatever their principal or permission:
those bindings are set on the brokers directly. Each item is audited (resource type ``acl``),
so every ACL change made through the gateway is on record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from policies.chain import Decision, Mode, Verdict
from protocol import acls
from protocol.errors import CLUSTER_AUTHORIZATION_FAILED
from protocol.framing import RequestHeader
from protocol.results import ItemError
from protocol.versions import DECODABLE

from ..engine import BaseEnforcement, ClusterView, Judged, RequestContext, Ruling
from ..services import Services
from .base import Handler, enforced

CREATE_API_KEY = acls.CREATE_ACLS
DELETE_API_KEY = acls.DELETE_ACLS
CREATE_VERSIONS = DECODABLE[CREATE_API_KEY]
DELETE_VERSIONS = DECODABLE[DELETE_API_KEY]
POLICY = "own_topics"
"""The audit's policy name for these refusals, as for the gateway's other own-topic refusals."""


class AclChanges(BaseEnforcement[acls.AclRequest, int]):
    def __init__(self, services: Services, api_key: int) -> None:
        self._services = services
        self.api_key = api_key
        self.versions = DECODABLE[api_key]
        self._action = "create_acl" if api_key == acls.CREATE_ACLS else "delete_acl"

    def read(self, header: RequestHeader, frame: bytes) -> acls.AclRequest:
        return acls.read_acl_request(header, frame)

    def keys(self, request: acls.AclRequest) -> Sequence[int]:
        return range(len(request.patterns))

    def duplicate(self, key: int) -> ItemError | None:
        return None  # indexes are unique

    async def judge(
        self,
        ctx: RequestContext,
        cluster: ClusterView,
        request: acls.AclRequest,
        keys: Sequence[int],
    ) -> Mapping[int, Ruling]:
        own = sorted(self._services.own_topics)
        rulings: dict[int, Ruling] = {}
        for index in keys:
            pattern = request.patterns[index]
            covered = [topic for topic in own if pattern.covers_topic(topic)]
            verdicts: tuple[Verdict, ...] = ()
            denial = None
            if covered:
                message = (
                    f"This ACL {'filter' if pattern.deletes else 'binding'} "
                    f"({pattern.describe()}) can apply to the policy gateway's own topic "
                    f"{covered[0]!r}, which the gateway needs to keep its state and audit; "
                    "set such ACLs on the brokers directly."
                )
                verdicts = (
                    Verdict(policy=POLICY, mode=Mode.ENFORCE, outcome="denied", message=message),
                )
                denial = ItemError(
                    error_code=int(CLUSTER_AUTHORIZATION_FAILED), error_message=message
                )
            rulings[index] = Judged(
                decision=Decision(allowed=not covered, verdicts=verdicts),
                resource_type="acl",
                resource_name=pattern.describe(),
                action=self._action,
                denial=denial,
            )
        return rulings

    def for_broker(
        self, request: acls.AclRequest, header: RequestHeader, allowed: Sequence[int]
    ) -> bytes:
        return acls.acl_request_keeping(request, header, set(allowed))

    def answer(
        self,
        request: acls.AclRequest,
        correlation_id: int,
        local: Mapping[int, ItemError],
        broker: bytes | None,
    ) -> bytes:
        return acls.acl_answer(request, correlation_id, local, broker)


def create_acls_handler(services: Services) -> Handler:
    return enforced(services, AclChanges(services, acls.CREATE_ACLS))


def delete_acls_handler(services: Services) -> Handler:
    return enforced(services, AclChanges(services, acls.DELETE_ACLS))
