"""OffsetDelete: a consumer group's committed offsets of each topic, through the rules
(protected topics), after the checks every partitioned API gets (:mod:`._partitioned`).
Denied -> POLICY_VIOLATION for each partition of the topic."""

from __future__ import annotations

from policies.rules import TopicOperation
from protocol.versions import DECODABLE

from ..services import Services
from ._partitioned import RulesPerTopic
from .base import Handler, enforced

API_KEY = 47
VERSIONS = DECODABLE[API_KEY]


def handler(services: Services) -> Handler:
    enforcement = RulesPerTopic(
        services,
        API_KEY,
        VERSIONS,
        operation=TopicOperation.DELETE_OFFSETS,
        action="delete_offsets",
    )
    return enforced(services, enforcement)
