"""ListOffsets: reads a partition's offsets; it changes nothing, but every topic it names gets the
checks every partitioned API gets (:mod:`._partitioned`: a legal name, not one of the gateway's
own topics)."""

from __future__ import annotations

from protocol.versions import DECODABLE

from ..services import Services
from ._partitioned import TopicPartitions
from .base import Handler, enforced

API_KEY = 2
VERSIONS = DECODABLE[API_KEY]


def handler(services: Services) -> Handler:
    return enforced(services, TopicPartitions(services, API_KEY, VERSIONS))
