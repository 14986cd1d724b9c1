"""SaslHandshake: forwarded; the gateway notes the mechanism to read the user name later.

v0 and v1 are advertised, v1 is carried. librdkafka before 2.x's newest releases (Debian's
kcat among them) will not start a SASL exchange unless the broker lists SaslHandshake v0,
then sends v1. A v0 handshake itself is answered by the gateway with UNSUPPORTED_VERSION:
after one the client sends bare SASL tokens without Kafka framing, which the gateway could
neither read nor tell apart from requests.
"""

from __future__ import annotations

from protocol.sasl import SASL_HANDSHAKE, handshake_v0_refusal, read_mechanism
from protocol.versions import VersionRange

from ..engine import ClusterView, RequestContext
from ..outcomes import Answer, Forward, Outcome
from ..services import Services
from .base import Handler

API_KEY = SASL_HANDSHAKE
VERSIONS = VersionRange(min_version=0, max_version=1)


def handler(services: Services) -> Handler:
    async def handle(ctx: RequestContext, cluster: ClusterView, frame: bytes) -> Outcome:
        if ctx.api_version == 0:
            return Answer(frame=handshake_v0_refusal(ctx.correlation_id))
        ctx.session.sasl.start(read_mechanism(ctx.header, frame))
        return Forward(frame=frame)

    return handle
