"""JoinGroup (v0-v9): forwarded as the client sent it, except for one opt-in rewrite.

Opt-in (``client_configs.enforce.session_timeout``): when ``session.timeout.ms`` is a
dynamic client config (seed 003) of the connection's user and the request header's
client-id, the request goes to the broker with that ``session_timeout_ms``, written in place
(counted in ``kpg_client_config_enforced_total{config="session.timeout.ms"}``). The broker
still checks it against group.min/max.session.timeout.ms. Only the classic group protocol
has it in a request: KIP-848 consumer groups (ConsumerGroupHeartbeat) take the session
timeout from the broker's group config, so such a client's heartbeats are refused instead
(:mod:`.consumer_group_heartbeat`). A request that already
carries the configured value is not counted. A stored value that is not a number (written
by another program or version: this one checks what it stores) is not taken as unset: the
request is answered INVALID_SESSION_TIMEOUT, as a broker answers a timeout it does not allow.
"""

from __future__ import annotations

import logging

from protocol import join_group as jg
from protocol.errors import INVALID_SESSION_TIMEOUT
from protocol.framing import FrameRejected

from ..engine import ClusterView, RequestContext
from ..outcomes import Answer, Close, Forward, Outcome
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
        except ValueError:
            # Stored values are checked when written; this one was not (another program's,
            # another version's): unknown, it is not taken as unset, and the consumer is not
            # let into its group on a session timeout of its own choosing.
            log.warning(
                "%s: JoinGroup refused (INVALID_SESSION_TIMEOUT): the stored %s=%r is not a "
                "number; set it again (kpg configs --alter)",
                ctx.client_id,
                CONFIG,
                configured,
            )
            return Answer(
                frame=jg.refusal(ctx.correlation_id, ctx.api_version, int(INVALID_SESSION_TIMEOUT))
            )
        try:
            if jg.session_timeout_ms(ctx.header, frame) != timeout_ms:
                frame = jg.with_session_timeout(ctx.header, frame, timeout_ms)
                services.client_config_enforced.labels(CONFIG).inc()
        except FrameRejected as exc:
            return Close(reason=str(exc), metric_reason=exc.reason)
        return Forward(frame=frame)

    return handle
