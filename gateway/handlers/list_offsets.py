"""ListOffsets: reads a partition's offsets; it changes nothing, but every topic it names gets the
checks every partitioned API gets (:mod:`._partitioned`: a legal name, not one of the gateway's
own topics).

Only a consumer's request (replica id -1) is carried. Kafka bounds a consumer's answer by its
isolation level (the high watermark, or the last stable offset for read_committed); any other
replica id, a broker's or the debug id -2, is answered up to the log end: the latest offset,
and timestamp lookups (and the max timestamp) over records not yet committed or still in an
open transaction, which tell a client what they hold. Kafka asks only DESCRIBE on the topic.
It is a follower's ask between brokers, as a follower's Fetch is (:mod:`.fetch`): the
connection is closed unforwarded (:mod:`protocol.fetch_replica`). (A consumer's
OffsetForLeaderEpoch of the current epoch is answered with the log end offset by Kafka's design,
KIP-320: that number alone is no secret.)"""

from __future__ import annotations

from protocol.codec import Undecodable
from protocol.fetch_replica import LIST_OFFSETS_CONSUMER, list_offsets_replica_id
from protocol.versions import DECODABLE

from ..engine import RequestContext
from ..outcomes import Close, Outcome
from ..services import Services
from ._partitioned import TopicPartitions
from .base import Handler, enforced

API_KEY = 2
VERSIONS = DECODABLE[API_KEY]


class ListOffsets(TopicPartitions):
    def prepare(self, ctx: RequestContext, frame: bytes) -> bytes | Outcome:
        try:
            replica = list_offsets_replica_id(ctx.header, frame)
        except Undecodable as exc:
            return Close(reason=str(exc), metric_reason="undecodable")
        if replica == LIST_OFFSETS_CONSUMER:
            return frame
        return Close(
            reason=f"ListOffsets v{ctx.api_version} as replica {replica}: only a consumer's "
            f"({LIST_OFFSETS_CONSUMER}) is carried, any other is answered past the high watermark",
            metric_reason="refused_api",
        )


def handler(services: Services) -> Handler:
    return enforced(services, ListOffsets(services, API_KEY, VERSIONS))
