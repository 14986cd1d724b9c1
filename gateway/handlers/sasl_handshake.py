"""SaslHandshake: forwarded; the gateway notes the mechanism to read the user name later.

Only v1 is carried: after a v0 handshake the client sends bare SASL tokens without Kafka
framing, which the gateway could not inspect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol.framing import RequestHeader
from protocol.sasl import SASL_HANDSHAKE, read_mechanism
from protocol.versions import VersionRange

from . import Forward, Outcome

if TYPE_CHECKING:
    from gateway.connection import ConnectionContext

API_KEY = SASL_HANDSHAKE
VERSIONS = VersionRange(min_version=1, max_version=1)


async def handle(ctx: ConnectionContext, header: RequestHeader, frame: bytes) -> Outcome:
    ctx.sasl.start(read_mechanism(header, frame))
    return Forward(frame=frame)
