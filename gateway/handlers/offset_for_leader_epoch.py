"""OffsetForLeaderEpoch: reads a partition's end offsets; it changes nothing, but every topic it
names gets the checks every partitioned API gets (:mod:`._partitioned`: a legal name, not one of
the gateway's own topics).

Its replica id (v3 and later) is carried as sent: unlike ListOffsets's (:mod:`.list_offsets`),
Kafka does not read it (``ReplicaManager.lastOffsetForLeaderEpoch`` answers every asker alike,
from the leader only), so naming a broker's id gets a client nothing a consumer's -1 does not."""

from __future__ import annotations

from protocol.versions import DECODABLE

from ..services import Services
from ._partitioned import TopicPartitions
from .base import Handler, enforced

API_KEY = 23
VERSIONS = DECODABLE[API_KEY]


def handler(services: Services) -> Handler:
    return enforced(services, TopicPartitions(services, API_KEY, VERSIONS))
