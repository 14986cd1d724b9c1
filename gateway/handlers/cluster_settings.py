"""AlterClientQuotas and AlterUserScramCredentials: cluster-wide settings, judged by who asks.

Kafka guards both on the CLUSTER resource, as it guards broker configs: client quotas with
ALTER_CONFIGS, SCRAM credentials with ALTER. Behind a broker that does not authorize them (no
authorizer, or ACLs that allow them), a client could otherwise throttle every other client
(a ``producer_byte_rate`` on the default user, or a connection quota on the gateway's own
address, which is every client's at the broker), or set the password of a principal a rule
allows (``User:platform-admin``) and then sign in as it. Each quota entry and each user's
credentials go through the rules as :attr:`policies.rules.TopicOperation.ALTER_CLIENT_QUOTAS`
and ``ALTER_USER_SCRAM_CREDENTIALS``: the ``broker.configs`` rule lets only its
``allowed.principals`` make them; without such a rule they go on as before, for the broker to
authorize. Denied -> POLICY_VIOLATION (44) for that entry or user, never forwarded.

The SCRAM credentials of the user the gateway's own clients sign in as (``upstream.sasl``,
SCRAM) are refused to everyone, whatever the rules: changed or deleted, they would stop the
gateway's audit writes and its state store at their next sign-in; so are quotas naming that
user (PLAIN or SCRAM), which would throttle them (policy ``own_principal``). A quota on the
default user reaches the gateway's user too when it has none of its own: the rules judge it
as any other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from policies.chain import Decision, Mode, Verdict
from protocol import cluster_settings as cs
from protocol.framing import RequestHeader
from protocol.results import ItemError
from protocol.versions import DECODABLE

from ..engine import BaseEnforcement, ClusterView, Judged, RequestContext, Ruling
from ..services import Services
from .base import Handler, enforced

QUOTAS_API_KEY = cs.ALTER_CLIENT_QUOTAS
QUOTAS_VERSIONS = DECODABLE[QUOTAS_API_KEY]
SCRAM_API_KEY = cs.ALTER_USER_SCRAM_CREDENTIALS
SCRAM_VERSIONS = DECODABLE[SCRAM_API_KEY]
_QUOTAS, _SCRAM = "alter_client_quotas", "alter_scram_credentials"
"""The audited actions (:data:`policies.chain.CLUSTER_SETTINGS`)."""


class AlterClientQuotas(BaseEnforcement[cs.ClientQuotas, int]):
    api_key = QUOTAS_API_KEY
    versions = QUOTAS_VERSIONS

    def __init__(self, services: Services) -> None:
        self._services = services

    def read(self, header: RequestHeader, frame: bytes) -> cs.ClientQuotas:
        return cs.read_client_quotas(header, frame)

    def keys(self, request: cs.ClientQuotas) -> Sequence[int]:
        return range(len(request.entities))

    def duplicate(self, key: int) -> ItemError | None:
        return None  # positions never repeat; the broker judges entities named twice

    async def judge(
        self,
        ctx: RequestContext,
        cluster: ClusterView,
        request: cs.ClientQuotas,
        keys: Sequence[int],
    ) -> Mapping[int, Ruling]:
        policies = self._services.policies
        own = _own_user(self._services)
        rulings: dict[int, Ruling] = {}
        for index in keys:
            entity = request.entities[index]
            if own is not None and request.users[index] == own:
                decision = _OWN_QUOTAS
            else:
                check = policies.chain.plan_cluster_setting(
                    _QUOTAS, entity, principal=ctx.principal
                )
                decision = await policies.decide(ctx, check)
            rulings[index] = Judged(
                decision=decision,
                resource_type="client_quotas",
                resource_name=entity,
                action=_QUOTAS,
                validate_only=bool(request.payload.validate_only),
            )
        return rulings

    def for_broker(
        self, request: cs.ClientQuotas, header: RequestHeader, allowed: Sequence[int]
    ) -> bytes:
        return cs.client_quotas_keeping(request, header, set(allowed))

    def answer(
        self,
        request: cs.ClientQuotas,
        correlation_id: int,
        local: Mapping[int, ItemError],
        broker: bytes | None,
    ) -> bytes:
        return cs.client_quotas_answer(request, correlation_id, local, broker)


class AlterUserScramCredentials(BaseEnforcement[cs.ScramCredentials, str]):
    api_key = SCRAM_API_KEY
    versions = SCRAM_VERSIONS

    def __init__(self, services: Services) -> None:
        self._services = services

    def read(self, header: RequestHeader, frame: bytes) -> cs.ScramCredentials:
        return cs.read_scram_credentials(header, frame)

    def keys(self, request: cs.ScramCredentials) -> Sequence[str]:
        return request.users

    def duplicate(self, key: str) -> ItemError | None:
        return None  # a user named twice is answered once, by the broker (DUPLICATE_RESOURCE)

    async def judge(
        self,
        ctx: RequestContext,
        cluster: ClusterView,
        request: cs.ScramCredentials,
        keys: Sequence[str],
    ) -> Mapping[str, Ruling]:
        policies = self._services.policies
        own = _own_scram_user(self._services)
        rulings: dict[str, Ruling] = {}
        for user in keys:
            if user == own:
                decision = _OWN_CREDENTIALS
            else:
                check = policies.chain.plan_cluster_setting(_SCRAM, user, principal=ctx.principal)
                decision = await policies.decide(ctx, check)
            rulings[user] = Judged(
                decision=decision, resource_type="user", resource_name=user, action=_SCRAM
            )
        return rulings

    def for_broker(
        self, request: cs.ScramCredentials, header: RequestHeader, allowed: Sequence[str]
    ) -> bytes:
        return cs.scram_credentials_keeping(request, header, set(allowed))

    def answer(
        self,
        request: cs.ScramCredentials,
        correlation_id: int,
        local: Mapping[str, ItemError],
        broker: bytes | None,
    ) -> bytes:
        return cs.scram_credentials_answer(request, correlation_id, local, broker)


def _own_user(services: Services) -> str | None:
    """The user the gateway's own clients (state store, audit sink) sign in as with PLAIN or
    SCRAM (an OAUTHBEARER principal is the token's, unknown here)."""
    sasl = services.upstream.sasl
    return None if sasl is None else sasl.username


def _own_scram_user(services: Services) -> str | None:
    """The user the gateway's own clients sign in as with SCRAM."""
    sasl = services.upstream.sasl
    if sasl is None or not sasl.mechanism.startswith("SCRAM"):
        return None
    return sasl.username


def _own(message: str) -> Decision:
    verdict = Verdict(policy="own_principal", mode=Mode.ENFORCE, outcome="denied", message=message)
    return Decision(allowed=False, verdicts=(verdict,))


_OWN_QUOTAS = _own(
    "This user is the one the policy gateway signs in with to keep its state and audit; a "
    "quota on it would throttle them. Set it on the brokers directly."
)


_OWN_CREDENTIALS = _own(
    "These are the SCRAM credentials the policy gateway signs in with to keep its state and "
    "audit; change them on the brokers directly (and in the gateway's upstream.sasl)."
)
"""Whatever the rules say: a client that changed or deleted them would stop the gateway's
audit writes and state store at their next sign-in."""


def quotas_handler(services: Services) -> Handler:
    return enforced(services, AlterClientQuotas(services))


def scram_handler(services: Services) -> Handler:
    return enforced(services, AlterUserScramCredentials(services))
