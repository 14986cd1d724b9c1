"""Fetch: passed through as raw bytes, capped below v16.

Fetch v16 and later answers may carry leader endpoints (KIP-951 ``node_endpoints``) when
leadership moved; decoding every fetch answer to rewrite them would cost the gateway its
throughput, so the gateway does not advertise those versions and refuses them.
"""

from protocol.framing import RequestHeader
from protocol.versions import VersionRange

from . import Forward, Outcome

API_KEY = 1
VERSIONS = VersionRange(min_version=0, max_version=15)


async def handle(ctx: object, header: RequestHeader, frame: bytes) -> Outcome:
    return Forward(frame=frame)
