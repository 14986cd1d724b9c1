"""ApiVersions: the broker's answer, narrowed to what the gateway can carry.

For the APIs the gateway inspects or rewrites, the advertised range is the intersection of
the broker's and the handler's; unknown API keys are removed. A version of ApiVersions the
gateway cannot decode gets the broker's own answer to that case: v0, UNSUPPORTED_VERSION.
"""

from __future__ import annotations

from collections.abc import Mapping

from protocol.api_versions import decode_api_versions, narrow, unsupported_version_answer
from protocol.codec import can_decode, encode_response
from protocol.versions import API_VERSIONS_KEY, DECODABLE, VersionRange

from ..engine import ClusterView, RequestContext
from ..outcomes import Answer, Forward, Outcome
from .base import Handler

API_KEY = API_VERSIONS_KEY
VERSIONS = DECODABLE[API_KEY]


def handler(version_caps: Mapping[int, VersionRange | None]) -> Handler:
    """``version_caps``: API key -> the versions the gateway carries (None: refused)."""

    async def handle(ctx: RequestContext, cluster: ClusterView, frame: bytes) -> Outcome:
        if not can_decode(API_KEY, ctx.api_version):
            return Answer(frame=unsupported_version_answer(ctx.correlation_id))
        version = ctx.api_version

        async def on_response(response: bytes) -> bytes:
            payload = decode_api_versions(version, response)
            narrowed = narrow(payload, version_caps)
            return encode_response(ctx.correlation_id, API_KEY, payload.__version__, narrowed)

        return Forward(frame=frame, on_response=on_response)

    return handle
