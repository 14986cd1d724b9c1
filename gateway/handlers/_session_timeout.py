"""The ``session.timeout.ms`` a dynamic client config (seed 003) sets for a request's client,
for the handlers of the group protocols that carry or take one (JoinGroup,
ConsumerGroupHeartbeat)."""

from __future__ import annotations

from typing import Final

from .. import client_configs
from ..engine import RequestContext
from ..services import Services

CONFIG: Final = "session.timeout.ms"


def configured_session_timeout(services: Services, ctx: RequestContext) -> str | None:
    """The value set for the client's user and client-id, when the gateway enforces it
    (``client_configs.enforce.session_timeout``); None otherwise."""
    if not services.client_configs.enforce_session_timeout:
        return None
    return client_configs.config_of(
        services.state.items(client_configs.STATE_NAMESPACE),
        ctx.principal,
        ctx.client_id,
        CONFIG,
    )
