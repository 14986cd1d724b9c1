"""AddPartitionsToTxn: carried in v0-v3, the clients' form; v4 and later are the brokers' own.

From v4 (KIP-890) the request is batched over transactions, each naming its transactional id,
producer id and epoch: a partition leader asks the transaction coordinator to add (or, with
``verify_only``, to check) partitions for producers that wrote to it. Kafka lets only brokers
send it (CLUSTER_ACTION, which a broker without an authorizer grants anyone) and its clients
never do (the Java producer caps it at v3). Carried, it would let a client add partitions of
any topic, the gateway's own included, to any producer's transaction it can describe, and the
coordinator would then write that transaction's markers into them. The gateway advertises v0-v3
and, like every API version it does not advertise, closes a connection that sends a later one.
The transaction bookkeeping itself is the broker's; the records are judged at Produce.
"""

from __future__ import annotations

from protocol.versions import VersionRange

from ..engine import ClusterView, RequestContext
from ..outcomes import Forward, Outcome
from ..services import Services
from .base import Handler

API_KEY = 24
VERSIONS = VersionRange(min_version=0, max_version=3)


def handler(services: Services) -> Handler:
    async def handle(ctx: RequestContext, cluster: ClusterView, frame: bytes) -> Outcome:
        return Forward(frame=frame)

    return handle
