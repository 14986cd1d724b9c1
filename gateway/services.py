"""What the handlers are built with: the gateway's shared services, handed to the handler
table once, when the gateway starts (as a Kroxylicious FilterFactory builds a filter)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import Counter

from protocol.addresses import BrokerEndpoint

from .audit import AuditEmitter
from .config import ClientConfigsConfig, UpstreamConfig
from .engine import Engine
from .metrics import GatewayMetrics
from .policy_runner import PolicyRunner
from .record_validation import STATE_NAMESPACE, RecordValidator
from .state import StateStore


class NodeAddresses(Protocol):
    """Gateway addresses for broker nodes (:class:`gateway.nodes.NodeListeners`)."""

    async def gateway_addresses(
        self, endpoints: Iterable[BrokerEndpoint], *, complete: bool = False
    ) -> dict[int, tuple[str, int]]:
        """``complete``: the endpoints are every broker of the cluster."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Services:
    engine: Engine
    policies: PolicyRunner
    state: StateStore
    records: RecordValidator
    audit: AuditEmitter | None
    metrics: GatewayMetrics
    client_config_enforced: Counter
    """Requests rewritten to a dynamic client config (opt-in enforcement), by config."""
    nodes: NodeAddresses
    upstream: UpstreamConfig
    client_configs: ClientConfigsConfig
    own_topics: frozenset[str]
    """The topics the gateway itself writes (state and audit): no client writes them."""

    def validation_policy_of(self, topic: str) -> str | None:
        """The topic's record.validation.policy, if it has one."""
        return self.state.get(STATE_NAMESPACE, topic)

    async def store_validation_policies(self, changes: Mapping[str, str | None]) -> None:
        """Write topics' record.validation.policy (None removes it), all or none. A claim of
        a create or a delete under way on one of the topics (:meth:`claim_validation_policies`,
        :meth:`claim_validation_policy_keys`) is dropped with it: the value is no longer the
        one it claimed.

        :raises StateStoreError: when the store cannot write them.
        """
        writes: dict[str, str | None] = dict(changes)
        writes.update(dict.fromkeys(map(_claim_key, changes)))
        await self.state.put_all(STATE_NAMESPACE, writes)

    async def claim_validation_policies(
        self, values: Mapping[str, str | None], claim: str, *, keys_only: Iterable[str] = ()
    ) -> None:
        """Write the record.validation.policy of topics a CreateTopics is about to create
        (None removes an earlier topic's), each with ``claim`` (unique to the request) beside
        it, all or none (``keys_only``: topics claimed with their values unchanged, as
        :meth:`claim_validation_policy_keys` claims them): the create puts back a topic's
        previous value (:meth:`release_validation_policy`) only while its claim stands, that
        is while no one has written the topic's value since.

        :raises StateStoreError: when the store cannot write them.
        """
        writes: dict[str, str | None] = dict(values)
        writes.update(dict.fromkeys(map(_claim_key, [*values, *keys_only]), claim))
        await self.state.put_all(STATE_NAMESPACE, writes)

    async def claim_validation_policy_keys(self, topics: Iterable[str], claim: str) -> None:
        """Put ``claim`` beside topics' record.validation.policy, their values unchanged (a
        DeleteTopics, which forgets them once the broker has deleted the topics, and only
        while its claim stands: a create of the topic meanwhile stores a value of its own).

        :raises StateStoreError: when the store cannot write them.
        """
        await self.state.put_all(STATE_NAMESPACE, dict.fromkeys(map(_claim_key, topics), claim))

    async def release_validation_policy(
        self, topic: str, claim: str, *, restore: bool, previous: str | None = None
    ) -> bool:
        """Drop ``claim`` on ``topic`` and, with ``restore``, put back ``previous`` (None: no
        value), in one write made only if the claim still stands; whether it did.

        :raises StateStoreError: when the store cannot write it.
        """
        key = _claim_key(topic)
        writes: dict[str, str | None] = {key: None}
        if restore:
            writes[topic] = previous
        return await self.state.put_all_if(
            STATE_NAMESPACE, writes, prefix=key, expected={key: claim}
        )

    def validated_topics(self) -> Mapping[str, str]:
        """topic -> its record.validation.policy, for every topic that has one; with them the
        claims of creates and deletes under way (keys ``<topic>/claim``, which no topic name
        can be, so a look-up by a topic's name never finds one)."""
        return self.state.items(STATE_NAMESPACE)

    def any_validated_topic(self) -> bool:
        """Whether any topic has a record.validation.policy: claims alone do not count (one a
        gateway killed mid-create left behind would otherwise make every Produce read)."""
        return any(not key.endswith(_CLAIM_SUFFIX) for key in self.validated_topics())


def _claim_key(topic: str) -> str:
    """Where a create's or a delete's claim on ``topic`` is kept, beside its value: ``/`` is
    in no topic name, so no topic's value is ever read from it."""
    return f"{topic}{_CLAIM_SUFFIX}"


_CLAIM_SUFFIX = "/claim"
