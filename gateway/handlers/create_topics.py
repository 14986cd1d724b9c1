"""CreateTopics, every version a client may send (v0-v7): each topic through the policy chain.

Items are topics. A topic named twice -> INVALID_REQUEST. Denied -> POLICY_VIOLATION (44) with
the policy's message. v0 and v1 are sent to the broker as v2 and the answer translated back
(Kafka 4 takes nothing older than v2).

The policies judge what the broker will create, nothing else. So, before any policy, a topic
is answered here (never forwarded) as Kafka's controller answers it (ReplicationControlManager):

- a config with a null value: INVALID_CONFIG, "Null value not supported for topic configs: k";
- a config key given twice: INVALID_REQUEST, "Error due to duplicate config keys" (Kafka's
  words for it in AlterConfigs; Kafka's CreateTopics keeps the last value, Tansu stores both,
  so which one a broker keeps is not known, and the gateway refuses the request);
- a ``record.validation.policy`` the record validator could not apply, or too large to store:
  INVALID_CONFIG naming the problem (:mod:`._validation_policy`);
- assignments together with a count that is not -1: INVALID_REQUEST, "A manual partition
  assignment was specified, but numPartitions was not set to -1." (or "replication factor");
- assignments naming a partition twice, an empty or inconsistent replica list, a broker twice
  in one list, or indexes that are not 0 to n-1: INVALID_REPLICA_ASSIGNMENT with Kafka's
  message (so no policy or audit event sees a topic Kafka would never create);
- without assignments, a count of 0 or below -1: INVALID_REPLICATION_FACTOR or
  INVALID_PARTITIONS.

Manual replica assignments are judged as given (counts of -1 beside them), but in front of a
broker that ignores them (``upstream.ignores_replica_assignments``: Tansu creates its default
counts) as the topic with counts of -1 that the broker creates.

num_partitions or replication_factor -1 (the broker's default): the policies judge the value the
broker will use (KIP-464: the broker resolves -1 before its policy sees the request), as
``upstream.broker_defaults`` states it or else the broker of the client's link reports it, and
the broker is sent that value in place of -1: a default changed since (a cluster's
num.partitions, which no partitions rule judges) made it create what the policies never saw.
When neither says, the gateway never guesses: the topic is judged without that count
(:class:`UnknownDefaults`), a rule that bounds it or a create or topic action plug-in (Kafka
gives them both counts) denies it with a message saying why, and with none of those the broker
is sent -1. KafkaJS sends -1 for both counts unless told them: every such create was refused,
with no policy at all.

validate_only: the policies run and nothing is created. In front of a broker that ignores
validate_only (``upstream.ignores_validate_only``) the gateway answers the dry run itself,
with TOPIC_ALREADY_EXISTS for topics that exist, instead of forwarding it; for the others, from
v5, with what Kafka's controller answers a dry run (KIP-525): the partition count and
replication factor the topic would get (those the policies judged, -1 resolved), a topic id,
and its configs (:mod:`gateway.topic_defaults`: the given ones, and the broker's values for
the rest as a broker reports them to the client). A topic that would be created but that
dry-run rules object to is answered with success (a real create would succeed) carrying their
message (``would deny (dry-run): ...``, :mod:`policies.violations`): what ``kpg dry-run``
reads to list them. A denied topic's message lists every violation, enforced and dry-run.

``record.validation.policy`` is the gateway's own topic config: taken out of what the broker
sees (a broker refuses config names it does not know) and written to the state store before
the request is forwarded, so that no record reaches a new topic unvalidated. First, Metadata
(on the client's link) must show that the topic does not exist: one that exists gets
TOPIC_ALREADY_EXISTS here, and one Metadata does not describe (not authorized) gets Metadata's
error, so no CreateTopics ever replaces an existing topic's policy, even for a moment. A topic
whose policy cannot be stored is not created; a topic the broker does not create gets its
previous policy (or none) back, unless its policy was written again meanwhile: each create
stores its topics' policies with a claim of its own beside them (one write), and puts a
previous policy back only while its claim stands. Of two creates of one topic at once, the
one the broker refuses thus leaves the policy the other stored after it (the broker may have
let that one win) instead of putting back what it read before: that left the created topic
unvalidated. A topic created without the key whose name still has a value (an earlier topic
of the name deleted where the gateway did not see it) has that value removed once the broker
has created it, while the create's claim stands: removed before, a topic created meanwhile
with a policy lost it until the create came back TOPIC_ALREADY_EXISTS.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from policies.api import CreateTopicRequestMetadata
from policies.chain import Decision
from policies.rules import UnknownDefaults
from protocol import admin
from protocol import create_topics as ct
from protocol.describe_configs import DescribedResource
from protocol.errors import (
    INVALID_CONFIG,
    INVALID_REQUEST,
    TOPIC_ALREADY_EXISTS,
    UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode,
)
from protocol.framing import RequestHeader
from protocol.results import OK, ItemError
from protocol.topic_admin import error_name
from protocol.topic_names import illegal_topic
from spark_audit.event import SENSITIVE_TOPIC_CONFIG
from spark_audit.event import TopicSpec as AuditedTopicSpec

from ..cluster import broker_defaults, linked_broker_configs
from ..config import BrokerDefaults
from ..config_changes import looks_sensitive
from ..engine import (
    STATE_STORE,
    BaseEnforcement,
    ClusterView,
    Judged,
    RequestContext,
    Ruling,
    Settlement,
)
from ..outcomes import Close
from ..record_validation import VALIDATION_POLICY_KEY
from ..services import Services
from ..state import StateStoreError
from ..topic_defaults import topic_configs
from ._validation_policy import invalid_value
from .base import Handler, enforced

log = logging.getLogger(__name__)

API_KEY = ct.CREATE_TOPICS
VERSIONS = ct.VERSIONS


class CreateTopics(BaseEnforcement[ct.CreateTopics, str]):
    api_key = API_KEY
    versions = VERSIONS
    dry_run_notes = True

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
        policy = self._services.records.policy
        rulings: dict[str, Ruling] = {}
        specs = []
        for spec in request.topics:
            if spec.name not in wanted:
                continue
            refused = illegal_topic(spec.name) or refusal(
                spec, lambda value: invalid_value(value, policy)
            )
            if refused is None:
                specs.append(self._as_created(spec))
            else:
                rulings[spec.name] = refused
        defaults = BrokerDefaults()
        if any(_uses_defaults(spec) for spec in specs):
            defaults = await broker_defaults(cluster, self._services.upstream.broker_defaults)
        assigned = {spec.name for spec in request.topics if spec.assignments}
        for spec in specs:
            metadata = _metadata(spec, defaults)
            if _uses_defaults(spec) and spec.name not in assigned:
                # what the policies judged is what the broker is asked to create (not its
                # default of the moment, which may have changed since it was stated or read);
                # a default nobody could read stays -1, judged by no policy
                request.counts[spec.name] = (
                    metadata.num_partitions or -1,
                    metadata.replication_factor or -1,
                )
            rulings[spec.name] = Judged(
                decision=await self._decide(ctx, metadata),
                resource_type="topic",
                resource_name=spec.name,
                action="create",
                validate_only=request.validate_only,
                topic_spec=_audited_spec(spec, metadata),
            )
        return rulings

    def _as_created(self, spec: ct.TopicSpec) -> ct.TopicSpec:
        """The topic as the broker will create it: in front of a broker that ignores manual
        replica assignments (``upstream.ignores_replica_assignments``), one with counts of -1
        and no assignments, so that the policies judge the broker's defaults it gets."""
        if spec.assignments and self._services.upstream.ignores_replica_assignments:
            return replace(spec, assignments=())
        return spec

    async def _decide(
        self, ctx: RequestContext, metadata: CreateTopicRequestMetadata | UnknownDefaults
    ) -> Decision:
        policies = self._services.policies
        if isinstance(metadata, UnknownDefaults):
            check = policies.chain.plan_create_topic_of_unknown_defaults(
                metadata, principal=ctx.principal
            )
            return await policies.decide(ctx, check)
        return await policies.decide(
            ctx, policies.chain.plan_create_topic(metadata, principal=ctx.principal)
        )

    async def settle(
        self,
        ctx: RequestContext,
        cluster: ClusterView,
        request: ct.CreateTopics,
        allowed: Sequence[str],
    ) -> Settlement[str] | Close:
        translate = ct.needs_translation(request)
        if request.validate_only and self._services.upstream.ignores_validate_only and allowed:
            return Settlement(
                local=await self._dry_run(cluster, request, allowed), reencode_answer=translate
            )
        names_key = any(k == VALIDATION_POLICY_KEY for t in request.topics for k, _ in t.configs)
        kept: dict[str, str | None] = dict(_validation_policies(request, allowed))
        # A value left by an earlier topic of the name that was deleted without the gateway
        # seeing it (at the broker directly; an embedded broker's topics on its restart):
        # the new topic sets none, so it is removed as a value would be stored.
        services = self._services
        kept |= {n: None for n in allowed if n not in kept and services.validation_policy_of(n)}
        counted = any(name in request.counts for name in allowed)
        if not kept or request.validate_only:
            return Settlement(
                reencode_request=translate or names_key or counted, reencode_answer=translate
            )
        return await self._store_first(ctx, cluster, request, kept)

    async def _dry_run(
        self, cluster: ClusterView, request: ct.CreateTopics, allowed: Sequence[str]
    ) -> dict[str, ItemError]:
        """The answer of each allowed topic of a dry run the gateway answers itself: as Kafka
        fills it (KIP-525) from v5, the bare success before."""
        existing = await cluster.describe_topics(allowed)
        specs = {t.name: self._as_created(t) for t in request.topics}
        fresh = [n for n in allowed if not ((found := existing.get(n)) and found.exists)]
        local: dict[str, ItemError] = {n: _already_exists(n) for n in allowed if n not in fresh}
        if request.version < ct.CONFIGS_IN_ANSWER_SINCE or not fresh:
            return {**local, **dict.fromkeys(fresh, OK)}
        defaults = BrokerDefaults()
        if any(_uses_defaults(specs[n]) for n in fresh):
            defaults = await broker_defaults(cluster, self._services.upstream.broker_defaults)
        reported = await _broker_configs(cluster)
        for name in fresh:
            metadata = _metadata(specs[name], defaults)
            # a count nobody knows (no policy needed it, or one in dry-run mode): bare
            local[name] = (
                OK if isinstance(metadata, UnknownDefaults) else _would_create(metadata, reported)
            )
        return local

    async def _store_first(
        self,
        ctx: RequestContext,
        cluster: ClusterView,
        request: ct.CreateTopics,
        kept: Mapping[str, str | None],
    ) -> Settlement[str]:
        """Store the new topics' record.validation.policy before the broker creates them;
        topics that exist (or may) are answered here and keep theirs."""
        described = await cluster.describe_topics(list(kept))
        local = {
            name: refused
            for name in kept
            if (refused := _not_new(name, described.get(name))) is not None
        }
        new = {name: value for name, value in kept.items() if name not in local}
        if not new:
            return Settlement(local=local)
        services = self._services
        claim = uuid.uuid4().hex
        try:
            if services.state.settles:
                # what another instance stored is what a failed create puts back
                await services.state.settle()
            # A topic created without the key keeps the value an earlier topic of its name
            # left until the broker has created it: that it does not exist was read a moment
            # ago, and a topic created meanwhile with a policy (another client's create) lost
            # it, unvalidated until this create failed, and for good if its answer never came.
            clearing = [name for name, value in new.items() if value is None]
            setting = {name: value for name, value in new.items() if value is not None}
            previous = {name: services.validation_policy_of(name) for name in setting}
            await services.claim_validation_policies(setting, claim, keys_only=clearing)
        except StateStoreError as exc:
            refused = ItemError(
                error_code=int(ErrorCode.unknown_server_error),
                error_message=f"The gateway could not store {VALIDATION_POLICY_KEY}, so the "
                f"topic was not created: {exc}",
            )
            # each topic was audited as allowed: the refusal the client gets is audited too
            for name in new:
                local[name] = await services.engine.refused(
                    ctx,
                    refused,
                    policy=STATE_STORE,
                    resource_type="topic",
                    resource_name=name,
                    action="create",
                )
            return Settlement(local=local, reencode_request=True)

        async def restore_uncreated(response: bytes) -> Mapping[str, ItemError]:
            """Put back the previous value of each topic the broker did not create, unless
            someone wrote the topic's value since this request did (a create of the same
            topic at once, which the broker may have let win: its value stays); drop the
            claim of each topic it created.

            A store that cannot write it is logged as an error and the broker's answer still
            goes to the client: the broker has created the topic or not either way (the
            connection was closed instead, and the client, told nothing of a topic created,
            sent it again and was told it exists)."""
            broker = ct.read_broker_response(request, response)
            for t in broker.topics:
                failed = int(t.error_code) != 0
                try:
                    if t.name in previous:
                        await services.release_validation_policy(
                            t.name, claim, restore=failed, previous=previous[t.name]
                        )
                    elif t.name in clearing:
                        # created: the value is an earlier topic's, gone with it
                        await services.release_validation_policy(t.name, claim, restore=not failed)
                except StateStoreError as exc:
                    log.error(
                        "topic %r was %s by the broker, but the state store could not settle "
                        "its %s (this create's claim on it stands): %s",
                        t.name,
                        "not created" if failed else "created",
                        VALIDATION_POLICY_KEY,
                        exc,
                    )
            return {}

        return Settlement(
            local=local, reencode_request=True, reencode_answer=True, after=restore_uncreated
        )

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


# --- what Kafka refuses before any policy ------------------------------------------------------


def refusal(
    spec: ct.TopicSpec, invalid_policy: Callable[[str], ItemError | None]
) -> ItemError | None:
    """The answer for a topic Kafka's controller refuses before its policy runs, in its order
    (configs first, then the counts); None for a topic the policies may judge.
    ``invalid_policy`` checks a record.validation.policy value."""
    return _config_refusal(spec, invalid_policy) or _count_refusal(spec)


def _config_refusal(
    spec: ct.TopicSpec, invalid_policy: Callable[[str], ItemError | None]
) -> ItemError | None:
    nulls = [key for key, value in spec.configs if value is None]
    if nulls:
        return ItemError(
            error_code=int(INVALID_CONFIG),
            error_message=f"Null value not supported for topic configs: {','.join(nulls)}",
        )
    counts = Counter(key for key, _ in spec.configs)
    if any(count > 1 for count in counts.values()):
        return ItemError(
            error_code=int(INVALID_REQUEST), error_message="Error due to duplicate config keys"
        )
    for key, value in spec.configs:
        if key == VALIDATION_POLICY_KEY and value is not None:
            return invalid_policy(value)
    return None


def _count_refusal(spec: ct.TopicSpec) -> ItemError | None:
    if spec.assignments:
        for count, words in (
            (spec.replication_factor, "replication factor"),
            (spec.num_partitions, "numPartitions"),
        ):
            if count != -1:
                return ItemError(
                    error_code=int(INVALID_REQUEST),
                    error_message="A manual partition assignment was specified, but "
                    f"{words} was not set to -1.",
                )
        return _assignment_refusal(spec.assignments)
    if spec.replication_factor < -1 or spec.replication_factor == 0:
        return ItemError(
            error_code=int(ErrorCode.invalid_replication_factor),
            error_message="Replication factor must be larger than 0, or -1 to use the default "
            "value.",
        )
    if spec.num_partitions < -1 or spec.num_partitions == 0:
        return ItemError(
            error_code=int(ErrorCode.invalid_partitions),
            error_message="Number of partitions was set to an invalid non-positive value.",
        )
    return None


def _assignment_refusal(assignments: Sequence[tuple[int, Sequence[int]]]) -> ItemError | None:
    """Kafka's controller on manual assignments, in its order: a partition given twice, then
    each partition's replicas (not empty, no broker twice, as many as the partitions before),
    then indexes 0 to n-1 with no gap. Whether each broker is registered is left to the
    broker (the gateway does not track registrations)."""
    seen: set[int] = set()
    replicas: int | None = None
    for index, brokers in assignments:
        if index in seen:
            return _bad_assignment(
                f"Found multiple manual partition assignments for partition {index}"
            )
        seen.add(index)
        if not brokers:
            return _bad_assignment(
                "The manual partition assignment includes an empty replica list."
            )
        # Kafka walks the replicas sorted, so the lowest broker listed twice is the one named.
        ordered = sorted(brokers)
        twice = next((a for a, b in zip(ordered, ordered[1:], strict=False) if a == b), None)
        if twice is not None:
            return _bad_assignment(
                f"The manual partition assignment includes the broker {twice} more than once."
            )
        if replicas is not None and len(brokers) != replicas:
            return _bad_assignment(
                f"The manual partition assignment includes a partition with {len(brokers)} "
                "replica(s), but this is not consistent with previous partitions, which have "
                f"{replicas} replica(s)."
            )
        replicas = len(brokers)
    if seen != set(range(len(seen))):
        return _bad_assignment("partitions should be a consecutive 0-based integer sequence")
    return None


def _bad_assignment(message: str) -> ItemError:
    return ItemError(error_code=int(ErrorCode.invalid_replica_assignment), error_message=message)


# --- what the policies judge ---------------------------------------------------------------


def _would_create(
    metadata: CreateTopicRequestMetadata, broker: DescribedResource | None
) -> ct.WouldCreate:
    """What a dry run of the topic the policies judged answers (KIP-525)."""
    assignments = metadata.replicas_assignments
    if assignments:
        partitions = len(assignments)
        replication = len(next(iter(assignments.values())))
    else:
        partitions = metadata.num_partitions or -1
        replication = metadata.replication_factor or -1
    return ct.WouldCreate(
        error_code=0,
        num_partitions=partitions,
        replication_factor=replication,
        configs=topic_configs(metadata.configs, broker),
    )


async def _broker_configs(cluster: ClusterView) -> DescribedResource | None:
    """A broker's configs as it reports them to the client; None when it reports none (no
    broker, an error: the client may not describe the cluster)."""
    found = await linked_broker_configs(cluster)
    return found if found is not None and found.error_code == 0 else None


def _uses_defaults(spec: ct.TopicSpec) -> bool:
    return not spec.assignments and -1 in (spec.num_partitions, spec.replication_factor)


def _audited_spec(
    spec: ct.TopicSpec, metadata: CreateTopicRequestMetadata | UnknownDefaults
) -> AuditedTopicSpec:
    """The topic as judged, for the audit event: broker defaults resolved (null where the
    gateway could not resolve one); from a replica assignment, its partition count and
    largest replica list. A config named like a secret keeps its key, never its value:
    no topic config is one, but a client may send its own ``ssl.keystore.password`` or
    ``sasl.jaas.config`` with a creation (the broker refuses the key; the event stays)."""
    configs = {
        k: SENSITIVE_TOPIC_CONFIG if looks_sensitive(k) else v
        for k, v in spec.configs
        if v is not None
    }
    if isinstance(metadata, UnknownDefaults):
        return AuditedTopicSpec(
            partitions=metadata.num_partitions,
            replication_factor=metadata.replication_factor,
            configs=configs,
        )
    if metadata.replicas_assignments is not None:
        replicas = metadata.replicas_assignments.values()
        return AuditedTopicSpec(
            partitions=len(metadata.replicas_assignments),
            replication_factor=max((len(r) for r in replicas), default=0),
            configs=configs,
        )
    return AuditedTopicSpec(
        partitions=metadata.num_partitions,
        replication_factor=metadata.replication_factor,
        configs=configs,
    )


def _metadata(
    spec: ct.TopicSpec, defaults: BrokerDefaults
) -> CreateTopicRequestMetadata | UnknownDefaults:
    """What the policies are asked about the topic; :class:`UnknownDefaults` when a count is
    a default the gateway does not know."""
    configs = {k: v for k, v in spec.configs if v is not None}
    if spec.assignments:
        return CreateTopicRequestMetadata(
            topic=spec.name,
            num_partitions=None,
            replication_factor=None,
            replicas_assignments=dict(spec.assignments),
            configs=configs,
        )
    partitions: int | None = spec.num_partitions
    if partitions == -1:
        partitions = defaults.num_partitions or None
    replication: int | None = spec.replication_factor
    if replication == -1:
        replication = defaults.default_replication_factor or None
    if partitions is None or replication is None:
        return UnknownDefaults(
            topic=spec.name,
            configs=configs,
            num_partitions=partitions,
            replication_factor=replication,
        )
    return CreateTopicRequestMetadata(
        topic=spec.name,
        num_partitions=partitions,
        replication_factor=replication,
        replicas_assignments=None,
        configs=configs,
    )


# --- record.validation.policy, stored before the topic is created --------------------------


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


def _already_exists(name: str) -> ItemError:
    return ItemError(
        error_code=int(TOPIC_ALREADY_EXISTS), error_message=f"Topic '{name}' already exists."
    )


def _not_new(name: str, found: admin.TopicDescription | None) -> ItemError | None:
    """None when Metadata shows that ``name`` does not exist; else the topic's answer."""
    if found is not None and found.error_code == int(UNKNOWN_TOPIC_OR_PARTITION):
        return None
    if found is not None and found.exists:
        return _already_exists(name)
    what = "did not describe it" if found is None else f"answered {error_name(found.error_code)}"
    return ItemError(
        error_code=int(ErrorCode.unknown_server_error) if found is None else found.error_code,
        error_message=f"The gateway stores {VALIDATION_POLICY_KEY} before creating topic "
        f"'{name}' and must first see that it does not exist; Metadata {what}.",
    )
