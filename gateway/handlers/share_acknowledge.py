"""ShareAcknowledge (KIP-932): forwarded as sent, with the leader endpoints of every answer
swapped for the gateway's listeners (:mod:`._addresses`).

It names topics by id; a request that may name one of the gateway's own topics is never
forwarded (:func:`._partitioned.refusing_own_topic_ids`).
"""

from protocol.node_endpoints import SHARE_ACKNOWLEDGE
from protocol.versions import DECODABLE

from ..services import Services
from ._addresses import with_leader_endpoints
from ._partitioned import refusing_own_topic_ids
from .base import Handler

API_KEY = SHARE_ACKNOWLEDGE
VERSIONS = DECODABLE[API_KEY]


def handler(services: Services) -> Handler:
    return with_leader_endpoints(API_KEY, services, refusing_own_topic_ids(services))
