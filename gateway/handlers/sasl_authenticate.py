"""SaslAuthenticate: forwarded untouched; the connection's principal is set from the user
name of the client's first message once the broker has answered the whole exchange with
success (see :mod:`gateway.principal`). A first message that names its user twice (two
OAUTHBEARER ``auth`` pairs, two SCRAM ``n=``) closes the connection unforwarded: brokers need
not agree which one counts, and the gateway must name whom the broker authenticated.

A SCRAM exchange with a delegation token (the ``tokenauth`` extension) names the token, not
its owner, whom the broker authenticates: it yields no principal (as GSSAPI), and where one is
needed (``sasl.client_auth: required``, or a re-authentication that must name the same
principal) it closes the connection unforwarded.

A refused exchange (or a re-authentication naming someone else) leaves the connection with
no principal, and it closes once the broker's answer has reached the client, as Kafka
closes it."""

from __future__ import annotations

from protocol.sasl import SASL_AUTHENTICATE, authenticate_result, read_auth_bytes
from protocol.versions import DECODABLE

from ..engine import ClusterView, RequestContext
from ..outcomes import Close, Forward, Outcome
from ..principal import AmbiguousSaslMessage, UnnamedSaslPrincipal
from ..services import Services
from .base import Handler

API_KEY = SASL_AUTHENTICATE
VERSIONS = DECODABLE[API_KEY]


def handler(services: Services) -> Handler:
    async def handle(ctx: RequestContext, cluster: ClusterView, frame: bytes) -> Outcome:
        session = ctx.session
        try:
            session.sasl.client_message(read_auth_bytes(ctx.header, frame))
        except AmbiguousSaslMessage as exc:
            return Close(reason=f"SaslAuthenticate refused: {exc}", metric_reason="sasl_ambiguous")
        except UnnamedSaslPrincipal as exc:
            return Close(reason=f"SaslAuthenticate refused: {exc}", metric_reason="sasl_refused")
        version = ctx.api_version

        async def on_response(response: bytes) -> bytes:
            code, _ = authenticate_result(version, response)
            principal = session.sasl.broker_answered(code == 0, code)
            if principal is not None:
                session.principal = principal
            elif session.sasl.failed:
                session.principal = None
            return response

        return Forward(frame=frame, on_response=on_response)

    return handle
