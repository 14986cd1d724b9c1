"""JoinGroup (v0-v9): forwarded as the client sent it, except for one opt-in rewrite.

Opt-in (``client_configs.enforce.session_timeout``): when ``session.timeout.ms`` is a
dynamic client config (seed 003) of the connection's user and the request header's
client-id, the request goes to the broker with that ``session_timeout_ms``, written in place
(counted in ``kpg_client_config_enforced_total{config="session.timeout.ms"}``). The broker
still checks it against group.min/max.session.timeout.ms. Only the classic group protocol
has it in a request: KIP-848 consumer groups (ConsumerGroupHeartbeat) take the session
timeout from the broker's group config, so such a client's heartbeats are refused instead
(:mod:`.consumer_group_heartbeat`). A request that already
carries the configured value is not counted.
"""

from __future__ import annotations

import logging

from protocol import join_group as jg
from protocol.framing import FrameRejected

from ..engine import ClusterView, RequestContext
from ..outcomes import Close, Forward, Outcome
from ..services import Services
from ._session_timeout import CONFIG, configured_session_timeout
from .base import Handler

log = logging.getLogger(__name__)

API_KEY = jg.JOIN_GROUP
VERSIONS = jg.VERSIONS


def handler(services: Services) -> Handler:
    async def handle(ctx: RequestContext, cluster: ClusterView, frame: bytes) -> Outcome:
        configured = configured_session_timeout(services, ctx)
        if configured is None:
            return Forward(frame=frame)
        try:
            timeout_ms = int(configured)
        except ValueError:  # stored values are checked when written; this one was not
            log.warning("ignoring %s=%r: not a number", CONFIG, configured)
            return Forward(frame=frame)
        try:
            if jg.session_timeout_ms(ctx.header, frame) != timeout_ms:
                frame = jg.with_session_timeout(ctx.header, frame, timeout_ms)
                services.client_config_enforced.labels(CONFIG).inc()
        except FrameRejected as exc:
            return Close(reason=str(exc), metric_reason=exc.reason)
        return Forward(frame=frame)

    return handle
