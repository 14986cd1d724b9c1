"""ConsumerGroupHeartbeat (KIP-848 consumer groups): forwarded as the client sent it, except
where a dynamic client config would be escaped.

Opt-in (``client_configs.enforce.session_timeout``): a KIP-848 member's session timeout is
the broker's group config (``group.consumer.session.timeout.ms``, or the group's
``consumer.session.timeout.ms``); no request carries one the gateway could set, as JoinGroup
does. A consumer whose ``session.timeout.ms`` is a dynamic client config (seed 003) of the
connection's user and the header's client-id would escape it by choosing
``group.protocol=consumer``, so its heartbeats are answered here with UNSUPPORTED_VERSION,
Kafka's answer where the consumer protocol is off (the Java consumer then says to set
``group.protocol=classic``, where the timeout is enforced), counted in
``kpg_client_config_enforced_total{config="session.timeout.ms"}``. A heartbeat that leaves the
group (member epoch -1 or -2) still goes, so that a member whose config was set while it was
in the group leaves it at once, not at its session timeout.
"""

from __future__ import annotations

import logging

from protocol import consumer_group_heartbeat as cgh
from protocol.errors import UNSUPPORTED_VERSION

from ..engine import ClusterView, RequestContext
from ..limits import ThrottledWarning
from ..outcomes import Answer, Forward, Outcome
from ..services import Services
from ._session_timeout import CONFIG, configured_session_timeout
from .base import Handler

log = logging.getLogger(__name__)

API_KEY = cgh.CONSUMER_GROUP_HEARTBEAT
VERSIONS = cgh.VERSIONS


def handler(services: Services) -> Handler:
    # At most a line every 10 s: answered here, with no audit event, a heartbeat refused
    # had a line of its own, its client id (up to 32 KiB) in it, as fast as a client sent
    # them on one connection (kpg_client_config_enforced_total counts each).
    refusals = ThrottledWarning(log, logging.INFO)

    async def handle(ctx: RequestContext, cluster: ClusterView, frame: bytes) -> Outcome:
        configured = configured_session_timeout(services, ctx)
        if configured is None or cgh.leaves_group(ctx.header, frame):
            return Forward(frame=frame)
        services.client_config_enforced.labels(CONFIG).inc()
        message = (
            f"This client's {CONFIG} is {configured}, set as a dynamic client config, and "
            "the consumer group protocol takes the session timeout from the broker: set "
            "group.protocol=classic on the consumer configs."
        )
        refusals.warn(f"{ctx.client_id}: ConsumerGroupHeartbeat refused: {message}")
        return Answer(
            frame=cgh.refusal(
                ctx.correlation_id, ctx.api_version, int(UNSUPPORTED_VERSION), message
            )
        )

    return handle
