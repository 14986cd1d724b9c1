"""Fetch: passed through as raw bytes, capped below v16.

Fetch v16 and later answers may carry leader endpoints (KIP-951 ``node_endpoints``) when
leadership moved; decoding every fetch answer to rewrite them would cost the gateway its
throughput, so the gateway does not advertise those versions and refuses them.
"""

from protocol.versions import VersionRange

from ..engine import ClusterView, RequestContext
from ..outcomes import Forward, Outcome
from ..services import Services
from .base import Handler

API_KEY = 1
VERSIONS = VersionRange(min_version=0, max_version=15)


def handler(services: Services) -> Handler:
    async def handle(ctx: RequestContext, cluster: ClusterView, frame: bytes) -> Outcome:
        return Forward(frame=frame)

    return handle
