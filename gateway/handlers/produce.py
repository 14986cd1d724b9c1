"""Produce: forwarded as raw bytes; acks=0 requests expect no answer and get none.

Versions: 3 and later (magic 2 record batches; Kafka 4 brokers take nothing older), capped
below v10, whose answers may carry leader endpoints (KIP-951 ``node_endpoints``) that would
leak broker addresses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol.framing import FrameRejected, RequestHeader
from protocol.produce import produce_acks
from protocol.versions import VersionRange

from . import Close, Forward, Outcome

if TYPE_CHECKING:
    from gateway.connection import ConnectionContext

API_KEY = 0
VERSIONS = VersionRange(min_version=3, max_version=9)


async def handle(ctx: ConnectionContext, header: RequestHeader, frame: bytes) -> Outcome:
    try:
        acks = produce_acks(header, frame)
    except FrameRejected as exc:
        return Close(reason=str(exc), metric_reason=exc.reason)
    return Forward(frame=frame, expect_response=acks != 0)
