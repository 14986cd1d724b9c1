"""DescribeConfigs: the broker's answer, plus what the gateway keeps itself.

- A topic's ``record.validation.policy`` lives in the gateway's state store (a broker would
  refuse it); it is shown with the source DYNAMIC_TOPIC_CONFIG, as the broker shows a topic's
  own configs.
- Dynamic client configs (seed 003, :mod:`gateway.client_configs`): resources of the
  gateway's CLIENT and USER_CLIENT types (``client_configs`` codes) are answered here from
  the state store, never forwarded. CLIENT names a client-id of the connection's own user
  (``User:alice`` -> ``alice``; a TLS certificate's principal -> its whole DN; no principal
  -> ``ANONYMOUS``); USER_CLIENT names ``user:client-id``. A malformed name gets
  INVALID_REQUEST with the reason.

A request holding both kinds is split: the broker is asked about its resources only, and
one answer goes back with every resource in request order. Only the gateway's resources:
answered here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol import describe_configs as dc
from protocol.errors import CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST
from protocol.framing import RequestHeader

from .. import client_configs
from ..record_validation import VALIDATION_POLICY_KEY
from . import Answer, Forward, Outcome

if TYPE_CHECKING:
    from gateway.connection import ConnectionContext

API_KEY = dc.DESCRIBE_CONFIGS
VERSIONS = dc.VERSIONS
TOPIC = 2
DYNAMIC_TOPIC_CONFIG = 1


async def handle(ctx: ConnectionContext, header: RequestHeader, frame: bytes) -> Outcome:
    request = dc.read_request(header, frame)
    local = _client_configs(ctx, request)
    extra: dict[tuple[int, str], list[dc.LocalConfig]] = {}
    for index, resource in enumerate(request.resources):
        if resource.resource_type != TOPIC or index in local:
            continue
        value = ctx.validation_policy_of(resource.resource_name)
        if value is not None:
            extra[(TOPIC, resource.resource_name)] = [
                dc.LocalConfig(
                    name=VALIDATION_POLICY_KEY,
                    value=value,
                    source=DYNAMIC_TOPIC_CONFIG,
                    synonyms=(
                        dc.Synonym(
                            name=VALIDATION_POLICY_KEY, value=value, source=DYNAMIC_TOPIC_CONFIG
                        ),
                    ),
                )
            ]
    if len(local) == len(request.resources) and request.resources:
        return Answer(frame=dc.answer(request, header.correlation_id, local, None))
    if not extra and not local:
        return Forward(frame=frame)
    for_broker = frame
    if local:
        keep = [i for i in range(len(request.resources)) if i not in local]
        for_broker = dc.request_keeping(request, header, keep)

    async def merge(response: bytes) -> bytes:
        return dc.answer(request, header.correlation_id, local, response, extra)

    return Forward(frame=for_broker, on_response=merge)


def _client_configs(
    ctx: ConnectionContext, request: dc.DescribeConfigs
) -> dict[int, dc.LocalResult]:
    """Request index -> the gateway's answer, for every CLIENT and USER_CLIENT resource."""
    codes = ctx.client_configs.codes
    local: dict[int, dc.LocalResult] = {}
    items = None
    for index, resource in enumerate(request.resources):
        if resource.resource_type not in codes.resource_types:
            continue
        try:
            entity = client_configs.entity_of(
                resource.resource_type, resource.resource_name, ctx.principal, codes
            )
        except ValueError as exc:
            local[index] = dc.LocalResult(error_code=int(INVALID_REQUEST), error_message=str(exc))
            continue
        assert entity is not None  # one of the gateway's types
        admins = ctx.client_configs.admin_principals
        own = entity.user == client_configs.user_of(ctx.principal)
        if admins is not None and not own and ctx.principal not in admins:
            local[index] = dc.LocalResult(
                error_code=int(CLUSTER_AUTHORIZATION_FAILED),
                error_message=f"{ctx.principal or 'User:ANONYMOUS'} may not describe another "
                "user's dynamic client configs (client_configs.admin_principals)",
            )
            continue
        if items is None:
            items = ctx.client_config_items()
        local[index] = dc.LocalResult(
            error_code=0,
            error_message=None,
            configs=client_configs.describe(items, entity.user, entity.client_id, codes),
        )
    return local
