"""ListConfigResources: the gateway lists the entities of its own dynamic client config types.

A v1 request for the gateway's types only (``client_configs`` codes) is answered here from
the state store: USER_CLIENT lists every ``user:client-id`` with configs (``user:`` for a
user's default), CLIENT the client-ids of the connection's own user. With
``client_configs.admin_principals`` set, a principal not in it sees its own user's entities
only (as DescribeConfigs lets it describe only those). A request mixing the gateway's types
with the broker's is refused with INVALID_REQUEST (ask for them apart); every other request
(v0, the broker's types, or none named) goes to the broker as sent.
"""

from __future__ import annotations

from protocol import list_config_resources as lcr
from protocol.errors import INVALID_REQUEST

from .. import client_configs
from ..engine import ClusterView, RequestContext
from ..outcomes import Answer, Forward, Outcome
from ..services import Services
from .base import Handler

API_KEY = lcr.LIST_CONFIG_RESOURCES
VERSIONS = lcr.VERSIONS


def handler(services: Services) -> Handler:
    settings = services.client_configs
    codes = settings.codes

    async def handle(ctx: RequestContext, cluster: ClusterView, frame: bytes) -> Outcome:
        oversized = services.engine.oversized(ctx, frame)
        if oversized is not None:
            return oversized
        asked = lcr.requested_types(ctx.header, frame)
        mine = [t for t in asked or () if t in codes.resource_types]
        if not mine:
            return Forward(frame=frame)
        if len(mine) != len(asked or ()):
            return Answer(frame=lcr.answer(ctx.correlation_id, (), int(INVALID_REQUEST)))
        own_user = client_configs.user_of(ctx.principal)
        admins = settings.admin_principals
        sees_all = admins is None or ctx.principal in admins
        items = services.state.items(client_configs.STATE_NAMESPACE)
        listed: list[tuple[int, str]] = []
        for entity in client_configs.entities(items):
            if entity.user != own_user and not sees_all:
                continue
            if codes.user_client_type in mine:
                listed.append((codes.user_client_type, entity.resource_name))
            if codes.client_type in mine and entity.user == own_user and entity.client_id:
                listed.append((codes.client_type, entity.client_id))
        return Answer(frame=lcr.answer(ctx.correlation_id, listed))

    return handle
