"""CreateTopics, every version a client may send (v0-v7): each topic through the policy chain.

Items are topics. A topic named twice -> INVALID_REQUEST. Denied -> POLICY_VIOLATION (44) with
the policy's message. v0 and v1 are sent to the broker as v2 and the answer translated back
(Kafka 4 takes nothing older than v2).

num_partitions or replication_factor -1 (the broker's default): the policies judge the value the
broker will use, read from a broker's configs (KIP-464: the broker resolves -1 before its
policy sees the request, and so does the gateway).

validate_only: the policies run and nothing is created. In front of a broker that ignores
validate_only (``upstream.ignores_validate_only``) the gateway answers the dry run itself,
with TOPIC_ALREADY_EXISTS for topics that exist, instead of forwarding it.

``record.validation.policy`` is the gateway's own topic config: taken out of what the broker
sees (a broker refuses config names it does not know) and written to the state store before
the request is forwarded, so that no record reaches a new topic unvalidated. A topic whose
policy cannot be stored is not created; a topic the broker does not create gets its previous
policy (or none) back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from policies.api import ConfigResourceType, CreateTopicRequestMetadata
from protocol import create_topics as ct
from protocol.errors import INVALID_REQUEST, TOPIC_ALREADY_EXISTS, ErrorCode
from protocol.framing import RequestHeader
from protocol.results import OK, ItemError

from ..engine import BaseEnforcement, ClusterView, Judged, RequestContext, Ruling, Settlement
from ..outcomes import Close
from ..record_validation import VALIDATION_POLICY_KEY
from ..services import Services
from ..state import StateStoreError
from .base import Handler, enforced

API_KEY = ct.CREATE_TOPICS
VERSIONS = ct.VERSIONS

# Kafka's defaults for num.partitions and default.replication.factor, used when the broker
# does not report its own (Tansu reports no broker configs).
_KAFKA_DEFAULTS = {"num.partitions": 1, "default.replication.factor": 1}


class CreateTopics(BaseEnforcement[ct.CreateTopics, str]):
    api_key = API_KEY
    versions = VERSIONS

    def __init__(self, services: Services) -> None:
        self._services = services

    def read(self, header: RequestHeader, frame: bytes) -> ct.CreateTopics:
        return ct.read_request(header, frame)

    def keys(self, request: ct.CreateTopics) -> Sequence[str]:
        return [t.name for t in request.topics]

    def duplicate(self, key: str) -> ItemError:
        return ItemError(
            error_code=int(INVALID_REQUEST),
            error_message=f"Topic '{key}' appears more than once in the request.",
        )

    async def judge(
        self,
        ctx: RequestContext,
        cluster: ClusterView,
        request: ct.CreateTopics,
        keys: Sequence[str],
    ) -> Mapping[str, Ruling]:
        wanted = set(keys)
        specs = [spec for spec in request.topics if spec.name in wanted]
        defaults: Mapping[str, int] = {}
        if any(not s.assignments and -1 in (s.num_partitions, s.replication_factor) for s in specs):
            defaults = await _broker_defaults(cluster)
        rulings: dict[str, Ruling] = {}
        for spec in specs:
            check = self._services.policies.chain.plan_create_topic(
                _metadata(spec, defaults), principal=ctx.principal
            )
            rulings[spec.name] = Judged(
                decision=await self._services.policies.decide(check),
                resource_type="topic",
                resource_name=spec.name,
                action="create",
                validate_only=request.validate_only,
            )
        return rulings

    async def settle(
        self,
        ctx: RequestContext,
        cluster: ClusterView,
        request: ct.CreateTopics,
        allowed: Sequence[str],
    ) -> Settlement[str] | Close:
        translate = ct.needs_translation(request)
        if request.validate_only and self._services.upstream.ignores_validate_only and allowed:
            existing = await cluster.describe_topics(allowed)
            local: dict[str, ItemError] = {}
            for name in allowed:
                found = existing.get(name)
                local[name] = (
                    ItemError(
                        error_code=int(TOPIC_ALREADY_EXISTS),
                        error_message=f"Topic '{name}' already exists.",
                    )
                    if found is not None and found.exists
                    else OK
                )
            return Settlement(local=local, reencode_answer=translate)
        names_key = any(k == VALIDATION_POLICY_KEY for t in request.topics for k, _ in t.configs)
        kept = _validation_policies(request, allowed)
        if not kept or request.validate_only:
            return Settlement(reencode_request=translate or names_key, reencode_answer=translate)
        services = self._services
        previous = {name: services.validation_policy_of(name) for name in kept}
        try:
            await services.store_validation_policies(dict(kept))
        except StateStoreError as exc:
            refused = ItemError(
                error_code=int(ErrorCode.unknown_server_error),
                error_message=f"The gateway could not store {VALIDATION_POLICY_KEY}, so the "
                f"topic was not created: {exc}",
            )
            return Settlement(local=dict.fromkeys(kept, refused), reencode_request=True)

        async def restore_uncreated(response: bytes) -> Mapping[str, ItemError]:
            broker = ct.read_broker_response(request, response)
            failed = {
                t.name: previous[t.name]
                for t in broker.topics
                if t.name in previous and int(t.error_code) != 0
            }
            if failed:
                await services.store_validation_policies(failed)
            return {}

        return Settlement(reencode_request=True, reencode_answer=True, after=restore_uncreated)

    def for_broker(
        self, request: ct.CreateTopics, header: RequestHeader, allowed: Sequence[str]
    ) -> bytes:
        stripped, _ = ct.without_config(request, VALIDATION_POLICY_KEY)
        return ct.request_for_broker(stripped, header, allowed)

    def answer(
        self,
        request: ct.CreateTopics,
        correlation_id: int,
        local: Mapping[str, ItemError],
        broker: bytes | None,
    ) -> bytes:
        payload = None if broker is None else ct.read_broker_response(request, broker)
        return ct.answer(request, correlation_id, local, payload)


def handler(services: Services) -> Handler:
    return enforced(services, CreateTopics(services))


def _validation_policies(request: ct.CreateTopics, allowed: Sequence[str]) -> dict[str, str]:
    """Allowed topic -> the record.validation.policy its request sets."""
    wanted = set(allowed)
    return {
        t.name: value
        for t in request.topics
        if t.name in wanted
        for key, value in t.configs
        if key == VALIDATION_POLICY_KEY and value is not None
    }


def _metadata(spec: ct.TopicSpec, defaults: Mapping[str, int]) -> CreateTopicRequestMetadata:
    configs = {k: v for k, v in spec.configs if v is not None}
    if spec.assignments:
        return CreateTopicRequestMetadata(
            topic=spec.name,
            num_partitions=None,
            replication_factor=None,
            replicas_assignments=dict(spec.assignments),
            configs=configs,
        )
    partitions = spec.num_partitions
    if partitions == -1:
        partitions = defaults.get("num.partitions", _KAFKA_DEFAULTS["num.partitions"])
    replication = spec.replication_factor
    if replication == -1:
        replication = defaults.get(
            "default.replication.factor", _KAFKA_DEFAULTS["default.replication.factor"]
        )
    return CreateTopicRequestMetadata(
        topic=spec.name,
        num_partitions=partitions,
        replication_factor=replication,
        replicas_assignments=None,
        configs=configs,
    )


async def _broker_defaults(cluster: ClusterView) -> dict[str, int]:
    """num.partitions and default.replication.factor as a broker of the cluster has them."""
    brokers = await cluster.broker_ids()
    if not brokers:
        return {}
    broker = (int(ConfigResourceType.BROKER), str(brokers[0]))
    configs = await cluster.describe_configs([broker])
    found: dict[str, int] = {}
    for resource in configs.values():
        for key, value in resource.effective().items():
            if key in _KAFKA_DEFAULTS and value.lstrip("-").isdigit():
                found[key] = int(value)
    return found
