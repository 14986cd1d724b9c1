"""SaslHandshake: forwarded; the gateway notes the mechanism to read the user name later.

v0 and v1 are advertised, v1 is carried. librdkafka before 2.x's newest releases (Debian's
kcat among them) will not start a SASL exchange unless the broker lists SaslHandshake v0,
then sends v1. A v0 handshake itself is answered by the gateway with UNSUPPORTED_VERSION:
after one the client sends bare SASL tokens without Kafka framing, which the gateway could
neither read nor tell apart from requests.

The mechanism counts once the broker accepts it (its answer's error code is 0); a refusal
fails the exchange and the connection closes after the answer, as Kafka closes it. With
``sasl.client_auth: required`` a mechanism the gateway cannot follow (GSSAPI) is answered
UNSUPPORTED_SASL_MECHANISM with the mechanisms it can follow, and the connection closes after
that answer, as Kafka answers a mechanism it does not enable; a re-authentication with another
mechanism closes the connection unforwarded. With ``none``,
the first handshake a broker accepts is logged as a warning: the brokers require SASL, and
unauthenticated connections can still use what the gateway answers itself.
"""

from __future__ import annotations

import logging

from protocol.sasl import (
    SASL_HANDSHAKE,
    handshake_v0_refusal,
    read_handshake_response,
    read_mechanism,
    unsupported_mechanism_answer,
)
from protocol.versions import VersionRange

from ..engine import ClusterView, RequestContext
from ..outcomes import Answer, Close, Forward, Outcome
from ..services import Services
from .base import Handler

API_KEY = SASL_HANDSHAKE
VERSIONS = VersionRange(min_version=0, max_version=1)

log = logging.getLogger(__name__)


def handler(services: Services) -> Handler:
    warned = False

    async def handle(ctx: RequestContext, cluster: ClusterView, frame: bytes) -> Outcome:
        if ctx.api_version == 0:
            return Answer(frame=handshake_v0_refusal(ctx.correlation_id))
        sasl = ctx.session.sasl
        mechanism = read_mechanism(ctx.header, frame)
        followable = sasl.refuse_unfollowable(mechanism)
        if followable is not None:
            # Answered as a broker that does not enable it; the connection closes after.
            return Answer(frame=unsupported_mechanism_answer(ctx.correlation_id, followable))
        refusal = sasl.handshake_sent(mechanism)
        if refusal is not None:
            return Close(reason=f"SaslHandshake refused: {refusal}", metric_reason="sasl_refused")

        async def on_response(response: bytes) -> bytes:
            nonlocal warned
            code, _ = read_handshake_response(response)
            sasl.handshake_answered(code)
            if code == 0 and not sasl.required and not warned:
                warned = True
                log.warning(
                    "a broker accepted a client's SASL handshake (%s) but sasl.client_auth is "
                    "none: connections that never authenticate can still use what the gateway "
                    "answers itself (dynamic client configs, dry runs); set "
                    "sasl.client_auth: required",
                    mechanism,
                )
            return response

        return Forward(frame=frame, on_response=on_response)

    return handle
