"""OffsetCommit: forwarded, in v2 and later only, with no retention of the client's own.

A commit moves a group's own offsets and the broker authorizes it (a group's offsets on a
protected topic can be moved: README, coverage 8). What it may not do is delete them, which
the gateway judges as OffsetDelete (and DeleteGroups) on each topic: a ``retention_time_ms``
of the client's (v2-v4) makes the broker expire the offsets at its next offset cleanup, a few
minutes on, when no member consumes the topic (:mod:`protocol.offset_commit`). It is set to -1, the
broker's ``offsets.retention.minutes``, on the way; Kafka's clients send -1 already. v1,
whose per-partition commit timestamp starts the offset's retention wherever the client puts
it, is sent as v2 with -1 and no timestamps (Sarama 1.22's consumer groups commit with v1);
v0 is not carried (Kafka 4.0 dropped v0 and v1). Writing v1 again walks every partition, so
a v1 request over ``judged.request.max.bytes`` closes the connection unread, as the requests
the gateway decodes whole do: 88 MB of one-byte partitions held the event loop 6 s and took
1.2 GB.
"""

from __future__ import annotations

from protocol import offset_commit as oc
from protocol.framing import FrameRejected

from ..engine import ClusterView, RequestContext
from ..outcomes import Close, Forward, Outcome
from ..services import Services
from .base import Handler

API_KEY = oc.OFFSET_COMMIT
VERSIONS = oc.VERSIONS


def handler(services: Services) -> Handler:
    async def handle(ctx: RequestContext, cluster: ClusterView, frame: bytes) -> Outcome:
        try:
            if ctx.header.api_version == oc.V1:
                oversized = services.engine.oversized(ctx, frame)
                if oversized is not None:
                    return oversized
                return Forward(frame=oc.v1_as_v2(ctx.header, frame))
            retention = oc.retention_time_ms(ctx.header, frame)
            if retention is not None and retention != oc.BROKER_RETENTION:
                frame = oc.with_broker_retention(ctx.header, frame)
        except FrameRejected as exc:
            return Close(reason=str(exc), metric_reason=exc.reason)
        return Forward(frame=frame)

    return handle
