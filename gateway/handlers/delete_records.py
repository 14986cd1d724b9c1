"""DeleteRecords: each topic's deletion of records through the rules (protected topics), after
the checks every partitioned API gets (:mod:`._partitioned`: legal names, the gateway's own
topics). Denied -> POLICY_VIOLATION for each partition of the topic."""

from __future__ import annotations

from policies.rules import TopicOperation
from protocol.versions import DECODABLE

from ..services import Services
from ._partitioned import RulesPerTopic
from .base import Handler, enforced

API_KEY = 21
VERSIONS = DECODABLE[API_KEY]


def handler(services: Services) -> Handler:
    enforcement = RulesPerTopic(
        services,
        API_KEY,
        VERSIONS,
        operation=TopicOperation.DELETE_RECORDS,
        action="delete_records",
    )
    return enforced(services, enforcement)
