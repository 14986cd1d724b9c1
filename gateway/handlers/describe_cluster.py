"""DescribeCluster: forwarded as is; each broker address in the answer becomes a gateway one.

Only broker endpoints are carried: a request for another endpoint type (KIP-919: 2, the
controllers) is answered here with UNSUPPORTED_ENDPOINT_TYPE, as a broker answers an endpoint
type it does not serve, so no controller address reaches a client.
"""

from protocol import describe_cluster as dcl
from protocol.errors import UNSUPPORTED_ENDPOINT_TYPE
from protocol.versions import DECODABLE

from ..engine import ClusterView, RequestContext
from ..outcomes import Answer, Outcome
from ..services import Services
from ._addresses import address_rewriter
from .base import Handler

API_KEY = dcl.DESCRIBE_CLUSTER
VERSIONS = DECODABLE[API_KEY]


def handler(services: Services) -> Handler:
    rewrite = address_rewriter(API_KEY, services)

    async def handle(ctx: RequestContext, cluster: ClusterView, frame: bytes) -> Outcome:
        asked = dcl.endpoint_type(ctx.header, frame)
        if asked != dcl.BROKERS:
            return Answer(
                frame=dcl.refusal(
                    ctx.header,
                    int(UNSUPPORTED_ENDPOINT_TYPE),
                    f"The policy gateway serves broker endpoints only, not endpoint type {asked}.",
                )
            )
        return await rewrite(ctx, cluster, frame)

    return handle
