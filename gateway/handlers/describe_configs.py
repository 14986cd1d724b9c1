"""DescribeConfigs: the broker's answer, plus what the gateway keeps itself.

Items are the request's resources, by position.

- A topic's ``record.validation.policy`` lives in the gateway's state store (a broker would
  refuse it); it is shown with the source DYNAMIC_TOPIC_CONFIG, as the broker shows a topic's
  own configs.
- Dynamic client configs (seed 003, :mod:`gateway.client_configs`): resources of the
  gateway's CLIENT and USER_CLIENT types (``client_configs`` codes) are answered here from
  the state store, never forwarded. CLIENT names a client-id of the connection's own user
  (``User:alice`` -> ``alice``; a TLS certificate's principal -> its whole DN; no principal
  -> ``ANONYMOUS``); USER_CLIENT names ``user:client-id``. A malformed name gets
  INVALID_REQUEST with the reason.

- A BROKER resource's configs holding addresses (``listeners``, ``advertised.listeners``,
  ``controller.quorum.voters``, ``*bootstrap.servers``...; ``dc.names_addresses``) are shown
  as Kafka shows a sensitive config, without their value: the gateway hands clients no
  broker or controller address but its own.

A request holding both kinds is split: the broker is asked about its resources only, and one
answer goes back with every resource in request order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from protocol import describe_configs as dc
from protocol.errors import CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST
from protocol.framing import RequestHeader
from protocol.results import OK, ItemError
from protocol.topic_names import illegal_topic

from .. import client_configs
from ..engine import BaseEnforcement, ClusterView, RequestContext, Ruling, Settlement
from ..outcomes import Close
from ..record_validation import VALIDATION_POLICY_KEY
from ..services import Services
from .base import Handler, enforced

API_KEY = dc.DESCRIBE_CONFIGS
VERSIONS = dc.VERSIONS
_TOPIC = 2


@dataclass(slots=True)
class Description:
    """One request, and what the gateway reports itself."""

    request: dc.DescribeConfigs
    configs: dict[int, tuple[dc.LocalConfig, ...]] = field(default_factory=dict)
    """Request index -> the configs of a resource the gateway answers."""
    extra: dict[tuple[int, str], list[dc.LocalConfig]] = field(default_factory=dict)
    """Configs the gateway adds to a resource the broker answers."""
    client_entities: dict[str, dict[str, str]] | None = None
    """The dynamic client configs by entity, read once for the request's resources."""


class DescribeConfigs(BaseEnforcement[Description, int]):
    api_key = API_KEY
    versions = VERSIONS

    def __init__(self, services: Services) -> None:
        self._services = services

    def read(self, header: RequestHeader, frame: bytes) -> Description:
        return Description(request=dc.read_request(header, frame))

    def keys(self, request: Description) -> Sequence[int]:
        return range(len(request.request.resources))

    def decided_items(self, request: Description, keys: Sequence[int]) -> int:
        return 0  # read, not judged: no policy decides a description

    def duplicate(self, key: int) -> ItemError | None:
        return None

    async def judge(
        self, ctx: RequestContext, cluster: ClusterView, request: Description, keys: Sequence[int]
    ) -> Mapping[int, Ruling]:
        codes = self._services.client_configs.codes
        rulings: dict[int, Ruling] = {}
        # one read of the store for the request: a request may name hundreds of thousands
        # of topics, and each read of the SQLite store first asks the file for changes
        validated = self._services.validated_topics()
        for index, resource in enumerate(request.request.resources):
            if resource.resource_type in codes.resource_types:
                rulings[index] = self._client_configs(ctx, request, index, resource)
            elif resource.resource_type == _TOPIC:
                # only a topic name: the store keeps creates' claims beside the values
                value = validated.get(resource.resource_name)
                if value is not None and illegal_topic(resource.resource_name) is None:
                    request.extra[(_TOPIC, resource.resource_name)] = [_policy_config(value)]
        return rulings

    def _client_configs(
        self, ctx: RequestContext, request: Description, index: int, resource: dc.ResourceRequest
    ) -> ItemError:
        settings = self._services.client_configs
        try:
            entity = client_configs.entity_of(
                resource.resource_type, resource.resource_name, ctx.principal, settings.codes
            )
        except ValueError as exc:
            return ItemError(error_code=int(INVALID_REQUEST), error_message=str(exc))
        assert entity is not None  # one of the gateway's types
        admins = settings.admin_principals
        own = entity.user == client_configs.user_of(ctx.principal)
        if admins is not None and not own and ctx.principal not in admins:
            return ItemError(
                error_code=int(CLUSTER_AUTHORIZATION_FAILED),
                error_message=f"{ctx.principal or 'User:ANONYMOUS'} may not describe another "
                "user's dynamic client configs (client_configs.admin_principals)",
            )
        if request.client_entities is None:  # one read of the store for the whole request
            items = self._services.state.items(client_configs.STATE_NAMESPACE)
            request.client_entities = client_configs.configs_by_entity(items)
        request.configs[index] = client_configs.describe(
            {}, entity.user, entity.client_id, settings.codes, grouped=request.client_entities
        )
        return OK

    async def settle(
        self,
        ctx: RequestContext,
        cluster: ClusterView,
        request: Description,
        allowed: Sequence[int],
    ) -> Settlement[int] | Close:
        brokers = any(r.resource_type == dc.BROKER for r in request.request.resources)
        return Settlement(reencode_answer=bool(request.extra) or brokers)

    def for_broker(
        self, request: Description, header: RequestHeader, allowed: Sequence[int]
    ) -> bytes:
        return dc.request_keeping(request.request, header, allowed)

    def answer(
        self,
        request: Description,
        correlation_id: int,
        local: Mapping[int, ItemError],
        broker: bytes | None,
    ) -> bytes:
        return dc.answer(
            request.request, correlation_id, local, broker, request.extra, request.configs
        )


def handler(services: Services) -> Handler:
    return enforced(services, DescribeConfigs(services))


def _policy_config(value: str) -> dc.LocalConfig:
    source = dc.SOURCE_DYNAMIC_TOPIC
    return dc.LocalConfig(
        name=VALIDATION_POLICY_KEY,
        value=value,
        source=source,
        synonyms=(dc.Synonym(name=VALIDATION_POLICY_KEY, value=value, source=source),),
    )
