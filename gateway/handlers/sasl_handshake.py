"""SaslHandshake: forwarded; the gateway notes the mechanism to read the user name later.

Only v1 is carried: after a v0 handshake the client sends bare SASL tokens without Kafka
framing, which the gateway could not inspect.
"""

from __future__ import annotations

from protocol.sasl import SASL_HANDSHAKE, read_mechanism
from protocol.versions import VersionRange

from ..engine import ClusterView, RequestContext
from ..outcomes import Forward, Outcome
from ..services import Services
from .base import Handler

API_KEY = SASL_HANDSHAKE
VERSIONS = VersionRange(min_version=1, max_version=1)


def handler(services: Services) -> Handler:
    async def handle(ctx: RequestContext, cluster: ClusterView, frame: bytes) -> Outcome:
        ctx.session.sasl.start(read_mechanism(ctx.header, frame))
        return Forward(frame=frame)

    return handle
