"""AddPartitionsToTxn: carried in v0-v3, the clients' form; v4 and later are the brokers' own.

From v4 (KIP-890) the request is batched over transactions, each naming its transactional id,
producer id and epoch: a partition leader asks the transaction coordinator to add (or, with
``verify_only``, to check) partitions for producers that wrote to it. Kafka lets only brokers
send it (CLUSTER_ACTION, which a broker without an authorizer grants anyone) and its clients
never do (the Java producer caps it at v3). Carried, it would let a client add partitions of
any topic, the gateway's own included, to any producer's transaction it can describe, and the
coordinator would then write that transaction's markers into them. The gateway advertises v0-v3
and, like every API version it does not advertise, closes a connection that sends a later one.

In v0-v3 the partitions get the checks every partitioned API gets (:mod:`._partitioned`): a
topic name that is not legal, or one of the gateway's own topics, whose partitions a
transaction would write its markers into (and, left open, hold back what read_committed
readers see). As Kafka adds all of a request's partitions or none, a request with one refused
is not forwarded: the refused partitions get their error (TOPIC_AUTHORIZATION_FAILED for an
own topic), the others OPERATION_NOT_ATTEMPTED, as Kafka answers a request with an
unauthorized partition. The transaction bookkeeping itself is the broker's; the records are
judged at Produce.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from protocol import partitioned as pt
from protocol.errors import OPERATION_NOT_ATTEMPTED
from protocol.results import ItemError
from protocol.versions import VersionRange

from ..engine import ClusterView, RequestContext, Ruling
from ..services import Services
from ._partitioned import Item, TopicPartitions
from .base import Handler, enforced

API_KEY = 24
VERSIONS = VersionRange(min_version=0, max_version=3)

_NOT_ATTEMPTED = ItemError(
    error_code=int(OPERATION_NOT_ATTEMPTED),
    error_message="Another partition of the request was refused; none was added.",
)


class AddPartitionsToTxn(TopicPartitions):
    async def judge(
        self,
        ctx: RequestContext,
        cluster: ClusterView,
        request: pt.Partitioned,
        keys: Sequence[Item],
    ) -> Mapping[Item, Ruling]:
        rulings = dict(await super().judge(ctx, cluster, request, keys))
        if not rulings:
            return rulings
        return {key: rulings.get(key, _NOT_ATTEMPTED) for key in keys}


def handler(services: Services) -> Handler:
    return enforced(services, AddPartitionsToTxn(services, API_KEY, VERSIONS))
