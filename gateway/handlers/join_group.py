"""JoinGroup (v0-v9): forwarded as the client sent it, except for one opt-in rewrite.

Opt-in (``client_configs.enforce.session_timeout``): when ``session.timeout.ms`` is a
dynamic client config (seed 003) of the connection's user and the request header's
client-id, the request goes to the broker with that ``session_timeout_ms``, written in place
(counted in ``kpg_client_config_enforced_total{config="session.timeout.ms"}``). The broker
still checks it against group.min/max.session.timeout.ms. Only the classic group protocol
has it in a request: KIP-848 consumer groups (ConsumerGroupHeartbeat) take the session
timeout from the broker's group config, and are not touched. A request that already
carries the configured value is not counted.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from protocol import join_group as jg
from protocol.framing import FrameRejected, RequestHeader

from . import Close, Forward, Outcome

if TYPE_CHECKING:
    from gateway.connection import ConnectionContext

log = logging.getLogger(__name__)

API_KEY = jg.JOIN_GROUP
VERSIONS = jg.VERSIONS
_CONFIG = "session.timeout.ms"


async def handle(ctx: ConnectionContext, header: RequestHeader, frame: bytes) -> Outcome:
    if not ctx.client_configs.enforce_session_timeout:
        return Forward(frame=frame)
    configured = ctx.client_config_of(header.client_id, _CONFIG)
    if configured is None:
        return Forward(frame=frame)
    try:
        timeout_ms = int(configured)
    except ValueError:  # stored values are checked when written; this one was not
        log.warning("ignoring %s=%r: not a number", _CONFIG, configured)
        return Forward(frame=frame)
    try:
        if jg.session_timeout_ms(header, frame) != timeout_ms:
            frame = jg.with_session_timeout(header, frame, timeout_ms)
            ctx.count_enforced(_CONFIG)
    except FrameRejected as exc:
        return Close(reason=str(exc), metric_reason=exc.reason)
    return Forward(frame=frame)
