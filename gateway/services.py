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
        self, endpoints: Iterable[BrokerEndpoint]
    ) -> dict[int, tuple[str, int]]: ...


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
        """Write topics' record.validation.policy (None removes it), all or none.

        :raises StateStoreError: when the store cannot write them.
        """
        await self.state.put_all(STATE_NAMESPACE, changes)

    def validated_topics(self) -> Mapping[str, str]:
        """topic -> its record.validation.policy, for every topic that has one."""
        return self.state.items(STATE_NAMESPACE)
