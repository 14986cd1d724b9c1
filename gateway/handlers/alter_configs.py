"""AlterConfigs (legacy, v0-v2) and IncrementalAlterConfigs (v0-v1): each config resource
through the policy chain, all or nothing per resource.

Items are resources ``(resource type, resource name)``. The gateway reads each resource's
current configs with DescribeConfigs (``before``), applies the request to them
(:mod:`gateway.config_changes`: ``altered`` and ``after``) and asks the policy chain. Denied ->
POLICY_VIOLATION (44).

Never forwarded blind: a resource whose current configs the broker does not report
(DescribeConfigs error) is refused with the broker's error code and message; so is a topic the
gateway looks up in Metadata (for a ``TopicActionPolicy``, to answer a dry run itself, or for
a change of ``record.validation.policy``) and does not find, before any policy runs, as Kafka
checks that a topic exists first. Requests Kafka refuses before any policy (a resource or key
given twice, a missing value, an unknown operation or resource type) get INVALID_REQUEST here.

``before`` is what DescribeConfigs reports as set on the resource. In front of a broker whose
topic config sources are wrong (``upstream.topic_config_source_unreliable``: Tansu reports
every topic config as DEFAULT and lists only those set), every reported topic config counts as
set.

validate_only: the policies run and nothing changes. It is forwarded as the client sent it,
since Kafka honours it for config changes; in front of a broker that ignores it
(``upstream.ignores_validate_only``) the gateway answers the dry run itself. That dry run
knows less than a broker: it reports a resource the policies allow as changed without
checking config names, values or list types.

The gateway's own topic config ``record.validation.policy`` (seed 002) lives in its state
store, never at the broker. Its stored value is part of ``before``; the request's entries for
it are taken out of what the broker is sent, and once the broker reports the resource changed
(and not validate_only) the new value is stored, or removed (DELETE, or the legacy API's
implicit delete). A resource whose change touches nothing else is not sent to the broker at
all: stored and answered here, once Metadata shows the topic exists. Either way the broker
authorizes the change first, as it would an ALTER_CONFIGS of that topic: every topic resource
whose change may write the policy is sent, on the client's own link, in a validate_only
IncrementalAlterConfigs with no entries (it changes nothing; Kafka authorizes before it
validates), and the broker's error for it (TOPIC_AUTHORIZATION_FAILED, ...) is the client's
answer. A value the record validator could not apply, or too large to store, gets
INVALID_CONFIG naming the problem (:mod:`._validation_policy`); APPEND and SUBTRACT on it get
INVALID_CONFIG, as Kafka answers for a key that is no list.

Dynamic client configs (seed 003, :mod:`gateway.client_configs`): resources of the gateway's
CLIENT and USER_CLIENT types are the gateway's alone and never reach the broker.
IncrementalAlterConfigs applies SET, DELETE, APPEND and SUBTRACT to the stored entity (an
unknown or quota key, an invalid value such as ``acks=2``, an APPEND on a key that is no list
-> INVALID_REQUEST naming the key), then asks the policy chain about the resource as
USER_CLIENT ``user:client-id`` (a CLIENT resource is its connection's user, as the seed has
the broker rewrite it), and stores the change unless validate_only. A CLIENT and a
USER_CLIENT resource naming one entity in the same request are a resource named twice:
INVALID_REQUEST for both. The legacy AlterConfigs on these types gets INVALID_REQUEST.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from policies.api import ConfigResource, ConfigResourceType, RecordValidationPolicy, TopicState
from protocol import admin
from protocol import alter_configs as ac
from protocol.describe_configs import (
    SOURCE_DYNAMIC_BROKER,
    SOURCE_DYNAMIC_DEFAULT_BROKER,
    SOURCE_DYNAMIC_TOPIC,
    DescribedConfig,
)
from protocol.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    INVALID_CONFIG,
    INVALID_REQUEST,
    POLICY_VIOLATION,
    REQUEST_TIMED_OUT,
    UNKNOWN_SERVER_ERROR,
)
from protocol.framing import RequestHeader
from protocol.results import OK, ItemError
from protocol.topic_names import illegal_topic
from spark_audit.event import ConfigChange as AuditedConfigChange

from .. import client_configs, config_changes
from ..cluster import state_of, undescribed_topic
from ..config import UNLIMITED
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
from ..policy_runner import PolicyRunner
from ..record_validation import VALIDATION_POLICY_KEY
from ..services import Services
from ..state import StateStoreError
from ._validation_policy import invalid_value
from .base import Handler, enforced

log = logging.getLogger(__name__)

LEGACY_API_KEY = ac.ALTER_CONFIGS
LEGACY_VERSIONS = ac.LEGACY_VERSIONS
INCREMENTAL_API_KEY = ac.INCREMENTAL_ALTER_CONFIGS
INCREMENTAL_VERSIONS = ac.INCREMENTAL_VERSIONS

_TOPIC = int(ConfigResourceType.TOPIC)
Key = ac.ResourceKey


@dataclass(frozen=True, slots=True, kw_only=True)
class _Current:
    """What the broker and the state store say of a request's broker resources."""

    stored: Mapping[Key, str]
    """Topic -> its stored record.validation.policy."""
    names_policy_key: frozenset[Key]
    """Topics whose entries name record.validation.policy."""
    touching: frozenset[Key]
    """Topics whose change may write record.validation.policy: the broker authorized these."""
    authorized: Mapping[Key, ItemError]
    """The broker's answer to an empty validate_only IncrementalAlterConfigs of ``touching``."""
    described: Mapping[Key, admin.ResourceConfigs]
    check_topics: bool
    """Whether Metadata was asked about the topics (``topics``)."""
    topics: Mapping[str, admin.TopicDescription]

    def unauthorized(self, key: Key) -> ItemError | None:
        """The broker's error for a change of ``key`` it does not authorize (as it answered
        the empty change), or None."""
        if key not in self.touching:
            return None
        answer = self.authorized.get(key)
        if answer is None:
            return ItemError(
                error_code=int(UNKNOWN_SERVER_ERROR),
                error_message=f"The broker did not say whether {key[1]!r} may be altered.",
            )
        return None if answer.ok else answer


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientWrite:
    """A dynamic client config change, and the entity as it was judged: the write is made
    only if the store still holds that, or a change written meanwhile (by another request,
    another worker) would be combined with this one unjudged."""

    writes: Mapping[str, str | None]
    prefix: str
    judged: Mapping[str, str]
    """The entity's store keys (under ``prefix``) and values the policies saw."""
    resource_name: str
    """The entity as USER_CLIENT names it (``user:client-id``)."""
    new_entity: bool
    """Whether the write makes an entity the store did not hold: held to
    ``limits."client.configs.max.entities"`` again as it is written."""


@dataclass(slots=True)
class Alteration:
    """One request, and what the gateway learns of it while judging."""

    request: ac.AlterConfigs
    policy_writes: dict[Key, str | None] = field(default_factory=dict)
    """Topic -> its new record.validation.policy (None: removed), once the change is made."""
    gateway_only: set[Key] = field(default_factory=set)
    """Resources whose change only the gateway keeps (record.validation.policy alone, and
    every dynamic client config resource)."""
    client_writes: dict[Key, ClientWrite] = field(default_factory=dict)
    """Dynamic client config resource -> its store writes, made once it is allowed."""
    client_entities: int | None = None
    """The dynamic client config entities stored, and those this request adds (counted once
    the first client config resource is judged)."""
    dry_run_here: bool = False


class AlterConfigs(BaseEnforcement[Alteration, Key]):
    """Both APIs: the legacy one replaces a resource's configs, the incremental one edits."""

    def __init__(self, services: Services, api_key: int) -> None:
        self._services = services
        self.api_key = api_key
        self.versions = INCREMENTAL_VERSIONS if api_key == INCREMENTAL_API_KEY else LEGACY_VERSIONS

    def read(self, header: RequestHeader, frame: bytes) -> Alteration:
        request = ac.read_request(header, frame)
        return Alteration(
            request=request,
            dry_run_here=request.validate_only and self._services.upstream.ignores_validate_only,
        )

    def keys(self, request: Alteration) -> Sequence[Key]:
        return [r.key for r in request.request.resources]

    def duplicate(self, key: Key) -> ItemError:
        return _invalid("Each resource must appear at most once.")

    async def judge(
        self, ctx: RequestContext, cluster: ClusterView, request: Alteration, keys: Sequence[Key]
    ) -> Mapping[Key, Ruling]:
        wanted = set(keys)
        codes = self._services.client_configs.codes
        rulings: dict[Key, Ruling] = _aliased_client_resources(
            request.request, wanted, ctx.principal, codes
        )
        broker_resources = []
        for resource in request.request.resources:
            if resource.key not in wanted or resource.key in rulings:
                continue
            if resource.resource_type in codes.resource_types:
                rulings[resource.key] = await self._client_config_change(ctx, request, resource)
            elif _resource_type(resource.resource_type) is None:
                rulings[resource.key] = _invalid(f"Unknown resource type {resource.resource_type}")
            elif (
                resource.resource_type == _TOPIC
                and (illegal := illegal_topic(resource.resource_name)) is not None
            ):
                rulings[resource.key] = illegal
            else:
                broker_resources.append(resource)
        if broker_resources:
            rulings.update(
                await self._judge_broker_resources(ctx, cluster, request, broker_resources)
            )
        return rulings

    async def _judge_broker_resources(
        self,
        ctx: RequestContext,
        cluster: ClusterView,
        request: Alteration,
        resources: Sequence[ac.ResourceAlteration],
    ) -> dict[Key, Ruling]:
        services = self._services
        if services.state.settles and any(r.resource_type == _TOPIC for r in resources):
            # a topic's record.validation.policy is judged as the store holds it now, not as
            # this instance last read another's write of it (a SET of the value it had read,
            # since deleted through another instance, was a change of nothing: never stored)
            try:
                await services.state.settle()
            except StateStoreError as exc:
                unread = ItemError(
                    error_code=int(UNKNOWN_SERVER_ERROR),
                    error_message=f"The gateway could not read {VALIDATION_POLICY_KEY} from "
                    f"its state store in time: {exc}",
                )
                return dict.fromkeys((r.key for r in resources), unread)
        current = await self._look_up(cluster, request, resources)
        rulings: dict[Key, Ruling] = {}
        for resource in resources:
            described = current.described.get(resource.key)
            refused = current.unauthorized(resource.key)
            if refused is None and (described is None or described.error_code != 0):
                refused = _unreadable(resource, described)
            if refused is not None:
                rulings[resource.key] = refused
                continue
            assert described is not None
            unreliable = services.upstream.topic_config_source_unreliable
            before, defaults, inherited = _before(described, unreliable)
            secret = config_changes.sensitive_keys(
                [(c.name, c.is_sensitive, c.config_type) for c in described.configs]
            )
            if resource.key in current.stored:
                before[VALIDATION_POLICY_KEY] = current.stored[resource.key]
            change = _apply(request.request, resource, before, defaults, inherited)
            topic_state = None
            refused = self._refusal(resource, current, change)
            if refused is None and current.check_topics and resource.resource_type == _TOPIC:
                topic = current.topics.get(resource.resource_name)
                if topic is None or not topic.exists:
                    refused = undescribed_topic(resource.resource_name, topic)
                else:
                    topic_state = state_of(topic, before)
            if refused is not None:
                rulings[resource.key] = refused
                continue
            assert isinstance(change, config_changes.ConfigChange)
            rulings[resource.key] = await self._decide(
                ctx, request, resource, before, change, topic_state, secret
            )
        return rulings

    async def _look_up(
        self,
        cluster: ClusterView,
        request: Alteration,
        resources: Sequence[ac.ResourceAlteration],
    ) -> _Current:
        """What the broker and the state store say of ``resources`` before the change."""
        services = self._services
        stored = {
            r.key: value
            for r in resources
            if r.resource_type == _TOPIC
            and (value := services.validation_policy_of(r.resource_name)) is not None
        }
        names_policy_key = frozenset(
            r.key
            for r in resources
            if r.resource_type == _TOPIC and any(c.name == VALIDATION_POLICY_KEY for c in r.configs)
        )
        # A change that may touch record.validation.policy (named, or the legacy API's
        # implicit delete) is authorized by the broker first, as an ALTER_CONFIGS of the topic.
        legacy = not request.request.incremental
        touching = [
            r.key for r in resources if r.key in names_policy_key or (legacy and r.key in stored)
        ]
        # A change of record.validation.policy alone is answered here: Metadata must show the
        # topic exists.
        check_topics = (
            services.policies.chain.needs_topic_state or request.dry_run_here or bool(touching)
        )
        authorized = await cluster.authorize_alter_configs(touching) if touching else {}
        # with synonyms: an APPEND or SUBTRACT on a key the resource does not set starts from
        # the config's own default (the DEFAULT_CONFIG synonym), whatever the brokers set
        described = await cluster.describe_configs(
            [r.key for r in resources], include_synonyms=True
        )
        topic_names = [r.resource_name for r in resources if r.resource_type == _TOPIC]
        topics: Mapping[str, admin.TopicDescription] = {}
        if check_topics and topic_names:
            topics = await cluster.describe_topics(topic_names)
        return _Current(
            stored=stored,
            names_policy_key=names_policy_key,
            touching=frozenset(touching),
            authorized=authorized,
            described=described,
            check_topics=check_topics,
            topics=topics,
        )

    def _refusal(
        self,
        resource: ac.ResourceAlteration,
        current: _Current,
        change: config_changes.ConfigChange | config_changes.InvalidAlteration,
    ) -> ItemError | None:
        """The answer for a change Kafka refuses before its policy runs; None when none."""
        if resource.key in current.names_policy_key:
            refused = _policy_key_refusal(resource, self._services.records.policy)
            if refused is not None:
                return refused
        if isinstance(change, config_changes.InvalidAlteration):
            return _invalid(change.message)
        return None

    async def _decide(
        self,
        ctx: RequestContext,
        request: Alteration,
        resource: ac.ResourceAlteration,
        before: Mapping[str, str],
        change: config_changes.ConfigChange,
        topic_state: TopicState | None,
        secret: frozenset[str],
    ) -> Judged:
        resource_type = ConfigResourceType(resource.resource_type)
        policies = self._services.policies
        check = policies.chain.plan_alter_config(
            ConfigResource(type=resource_type, name=resource.resource_name),
            altered=change.altered,
            before=before,
            after=change.after,
            principal=ctx.principal,
            topic_state=topic_state,
        )
        judged = Judged(
            decision=await policies.decide(ctx, check),
            resource_type=resource_type.name.lower(),
            resource_name=resource.resource_name,
            action="alter_config",
            validate_only=request.request.validate_only,
            config_changes=config_changes.audited(
                change,
                before,
                lambda name: name in secret or config_changes.looks_sensitive(name),
            ),
        )
        if resource.resource_type == _TOPIC:
            new_value = change.after.get(VALIDATION_POLICY_KEY)
            if new_value != before.get(VALIDATION_POLICY_KEY):
                request.policy_writes[resource.key] = new_value
            if set(change.altered) == {VALIDATION_POLICY_KEY}:
                request.gateway_only.add(resource.key)
        return judged

    async def _client_config_change(
        self, ctx: RequestContext, request: Alteration, resource: ac.ResourceAlteration
    ) -> Ruling:
        """One CLIENT or USER_CLIENT resource: refused, or decided (and stored once allowed).
        A refusal is a decision too (policy ``client_configs``, or
        ``client_configs.admin_principals`` for a client not allowed), so it is audited."""
        validate_only = request.request.validate_only
        if not request.request.incremental:
            error = _invalid(client_configs.LEGACY_ALTER_MESSAGE)
            return _client_config_refusal(resource.resource_name, error, validate_only)
        settings = self._services.client_configs
        try:
            entity = client_configs.entity_of(
                resource.resource_type, resource.resource_name, ctx.principal, settings.codes
            )
        except ValueError as exc:
            return _client_config_refusal(resource.resource_name, _invalid(str(exc)), validate_only)
        assert entity is not None  # one of the gateway's types
        admins = settings.admin_principals
        items = self._services.state.items(client_configs.STATE_NAMESPACE)
        before = client_configs.entity_configs(items, entity.user, entity.client_id)
        if admins is not None and ctx.principal not in admins:
            unauthorized = ItemError(
                error_code=int(CLUSTER_AUTHORIZATION_FAILED),
                error_message=f"{ctx.principal or 'User:ANONYMOUS'} may not alter dynamic "
                "client configs (client_configs.admin_principals)",
            )
            return _client_config_refusal(
                entity.resource_name,
                unauthorized,
                validate_only,
                "client_configs.admin_principals",
                _attempted(resource, before),
            )
        writes, refused = client_configs.apply_incremental(
            items, entity.user, entity.client_id, resource.configs
        )
        if refused is not None:
            return _client_config_refusal(
                entity.resource_name,
                ItemError(error_code=refused[0], error_message=refused[1]),
                validate_only,
                attempted=_attempted(resource, before),
            )
        after = dict(before)
        for store_key, value in writes.items():
            name = client_configs.parse_store_key(store_key)[2]
            if value is None:
                after.pop(name, None)
            else:
                after[name] = value
        bound = self._client_config_bound(request, items, entity.resource_name, before, after)
        if bound is not None:
            return _client_config_refusal(
                entity.resource_name, bound, validate_only, "limits", _attempted(resource, before)
            )
        prefix = client_configs.entity_prefix(entity.user, entity.client_id)
        request.client_writes[resource.key] = ClientWrite(
            writes=writes,
            prefix=prefix,
            judged={k: v for k, v in items.items() if k.startswith(prefix)},
            resource_name=entity.resource_name,
            new_entity=not before and bool(after),
        )
        request.gateway_only.add(resource.key)
        policies = self._services.policies
        change = config_changes.ConfigChange(
            altered={c.name: after.get(c.name) for c in resource.configs}, after=after
        )
        check = policies.chain.plan_alter_config(
            # The policies see a user's client configs as USER_CLIENT, whatever wire code the
            # gateway is configured to use for it.
            ConfigResource(type=ConfigResourceType.USER_CLIENT, name=entity.resource_name),
            altered=change.altered,
            before=before,
            after=after,
            principal=ctx.principal,
        )
        return Judged(
            decision=await policies.decide(ctx, check),
            resource_type="user_client",
            resource_name=entity.resource_name,
            action="alter_config",
            validate_only=validate_only,
            config_changes=config_changes.audited(change, before, config_changes.looks_sensitive),
        )

    def _client_config_bound(
        self,
        request: Alteration,
        items: Mapping[str, str],
        resource_name: str,
        before: Mapping[str, str],
        after: Mapping[str, str],
    ) -> ItemError | None:
        """The refusal of a change that would grow the store past its bounds: an entity over
        :data:`_CLIENT_ENTITY_MAX_BYTES`, or a new entity past
        ``limits."client.configs.max.entities"``. Every gateway instance holds the whole store
        and reads all of it again after each change, so with ``admin_principals`` unset (anyone
        may write) nothing else bounded what a client could make every instance hold and
        re-read."""
        size = _entity_size(resource_name, after)
        if size > _CLIENT_ENTITY_MAX_BYTES:
            return _invalid(
                f"Dynamic client configs of {resource_name} would take {size} bytes; the "
                f"gateway stores at most {_CLIENT_ENTITY_MAX_BYTES} per entity (its name and "
                "its configs)."
            )
        limit = self._services.engine.limits.client_configs_max_entities
        if before or not after or limit == UNLIMITED:
            return None
        if request.client_entities is None:
            request.client_entities = len(client_configs.entities(items))
        if request.client_entities >= limit:
            return _entity_limit(limit)
        request.client_entities += 1
        return None

    async def settle(
        self, ctx: RequestContext, cluster: ClusterView, request: Alteration, allowed: Sequence[Key]
    ) -> Settlement[Key] | Close:
        validate_only = request.request.validate_only
        if request.dry_run_here:
            return Settlement(local=dict.fromkeys(allowed, OK))
        local: dict[Key, ItemError] = {}
        for key in allowed:
            if key not in request.gateway_only:
                continue
            local[key] = OK if validate_only else await self._store_gateway_only(ctx, request, key)
        forwarded = [key for key in allowed if key not in local]
        later = (
            {}
            if validate_only
            else {k: v for k, v in request.policy_writes.items() if k in forwarded}
        )
        strip = any(_names_policy_key(request.request, key) for key in forwarded)
        if not later:
            return Settlement(local=local, reencode_request=strip)
        services = self._services

        async def store_changed(response: bytes) -> Mapping[Key, ItemError]:
            changed = ac.succeeded(ac.read_broker_response(request.request, response))
            failures: dict[Key, ItemError] = {}
            for key, value in later.items():
                if key in changed:
                    failed = await _store_policy(services, ctx, key, value, forwarded=True)
                    if failed is not None:
                        failures[key] = failed
            return failures

        return Settlement(local=local, reencode_request=strip, after=store_changed)

    async def _store_gateway_only(
        self, ctx: RequestContext, request: Alteration, key: Key
    ) -> ItemError:
        if key in request.client_writes:
            change = request.client_writes[key]
            limit = self._services.engine.limits.client_configs_max_entities
            full: list[int] = []

            def admit(items: Mapping[str, str]) -> bool:
                # Judged against the store as it was then: requests judged at the same time
                # each saw room for their new entity. Checked again with the write.
                held = len(client_configs.entities(items))
                if held >= limit:
                    full.append(held)
                return not full

            try:
                written = await self._services.state.put_all_if(
                    client_configs.STATE_NAMESPACE,
                    change.writes,
                    prefix=change.prefix,
                    expected=change.judged,
                    admit=admit if change.new_entity and limit != UNLIMITED else None,
                )
            except StateStoreError as exc:
                if exc.maybe_written:
                    return _maybe_stored(f"the dynamic client configs of {key[1]!r}", exc)
                # audited as allowed: the refusal the client gets is audited too
                return await self._services.engine.refused(
                    ctx,
                    ItemError(
                        error_code=int(UNKNOWN_SERVER_ERROR),
                        error_message=f"The gateway could not store the dynamic client "
                        f"configs of {key[1]!r}: {exc}",
                    ),
                    policy=STATE_STORE,
                    resource_type="user_client",
                    resource_name=change.resource_name,
                    action="alter_config",
                )
            if full:
                return await self._services.engine.refused(
                    ctx,
                    _entity_limit(limit),
                    policy="limits",
                    resource_type="user_client",
                    resource_name=change.resource_name,
                    action="alter_config",
                )
            if not written:
                return await self._services.engine.refused(
                    ctx,
                    ItemError(
                        error_code=int(UNKNOWN_SERVER_ERROR),
                        error_message=f"The dynamic client configs of {key[1]!r} changed "
                        "while this change was judged (another request wrote them); nothing "
                        "was written. Send it again to have it judged against them.",
                    ),
                    policy=STATE_STORE,
                    resource_type="user_client",
                    resource_name=change.resource_name,
                    action="alter_config",
                )
            return OK
        if key in request.policy_writes:
            return await _store_policy(self._services, ctx, key, request.policy_writes[key]) or OK
        return OK

    def for_broker(
        self, request: Alteration, header: RequestHeader, allowed: Sequence[Key]
    ) -> bytes:
        wire = request.request
        if any(_names_policy_key(wire, key) for key in allowed):
            wire = ac.without_config(wire, VALIDATION_POLICY_KEY, _TOPIC)
        return ac.request_for_broker(wire, header, allowed)

    def answer(
        self,
        request: Alteration,
        correlation_id: int,
        local: Mapping[Key, ItemError],
        broker: bytes | None,
    ) -> bytes:
        payload = None if broker is None else ac.read_broker_response(request.request, broker)
        return ac.answer(request.request, correlation_id, local, payload)


def legacy_handler(services: Services) -> Handler:
    return enforced(services, AlterConfigs(services, LEGACY_API_KEY))


def incremental_handler(services: Services) -> Handler:
    return enforced(services, AlterConfigs(services, INCREMENTAL_API_KEY))


def _aliased_client_resources(
    request: ac.AlterConfigs,
    wanted: set[Key],
    principal: str | None,
    codes: client_configs.ClientConfigCodes,
) -> dict[Key, Ruling]:
    """INVALID_REQUEST for every CLIENT and USER_CLIENT resource that names the same entity
    as another in the request (``app`` on an unauthenticated connection and
    ``ANONYMOUS:app``), as Kafka answers a resource named twice: judged one by one, each was
    held to the policies against the entity as stored, never against both changes together."""
    named: dict[client_configs.ClientEntity, list[ac.ResourceAlteration]] = {}
    for resource in request.resources:
        if resource.key not in wanted or resource.resource_type not in codes.resource_types:
            continue
        try:
            entity = client_configs.entity_of(
                resource.resource_type, resource.resource_name, principal, codes
            )
        except ValueError:
            continue  # refused on its own
        if entity is not None:
            named.setdefault(entity, []).append(resource)
    rulings: dict[Key, Ruling] = {}
    for entity, resources in named.items():
        if len(resources) < 2:
            continue
        entity_name = entity.resource_name
        error = _invalid(
            "Each resource must appear at most once: "
            + " and ".join(repr(r.resource_name) for r in resources)
            + f" both name the dynamic client configs of {entity_name}."
        )
        refusal = _client_config_refusal(entity_name, error, request.validate_only)
        rulings.update(dict.fromkeys((r.key for r in resources), refusal))
    return rulings


def _names_policy_key(request: ac.AlterConfigs, key: Key) -> bool:
    return key[0] == _TOPIC and any(
        c.name == VALIDATION_POLICY_KEY
        for r in request.resources
        if r.key == key
        for c in r.configs
    )


async def _store_policy(
    services: Services,
    ctx: RequestContext,
    key: Key,
    value: str | None,
    *,
    forwarded: bool = False,
) -> ItemError | None:
    """Store a topic's record.validation.policy (None removes it); None when stored, else the
    resource's error, audited as a refusal of its own (the change was audited as allowed).
    ``forwarded``: the rest of the change was sent to the broker, which applied it."""
    try:
        await services.store_validation_policies({key[1]: value})
    except StateStoreError as exc:
        if exc.maybe_written:
            return _maybe_stored(VALIDATION_POLICY_KEY, exc)
        applied = (
            " (the broker applied the other configs of this change; send it again)"
            if forwarded
            else ""
        )
        error = ItemError(
            error_code=int(UNKNOWN_SERVER_ERROR),
            error_message=f"The gateway could not store {VALIDATION_POLICY_KEY}{applied}: {exc}",
        )
        return await services.engine.refused(
            ctx,
            error,
            policy=STATE_STORE,
            resource_type="topic",
            resource_name=key[1],
            action="alter_config",
        )
    return None


def _maybe_stored(what: str, exc: StateStoreError) -> ItemError:
    """The answer to a change the state store may yet take (its write was not acknowledged in
    time, or not read back): REQUEST_TIMED_OUT, as Kafka answers a change whose outcome it
    does not know, and no refusal audited (the change may be in force: its "allowed" event
    stands)."""
    return ItemError(
        error_code=int(REQUEST_TIMED_OUT),
        error_message=f"The gateway does not know whether its state store took {what}: it "
        f"may yet take effect; describe the configs to see which. {exc}",
    )


def _policy_key_refusal(
    resource: ac.ResourceAlteration, policy: RecordValidationPolicy
) -> ItemError | None:
    """INVALID_CONFIG for APPEND or SUBTRACT on record.validation.policy (a string), or for a
    value the gateway does not store (:mod:`._validation_policy`)."""
    for c in resource.configs:
        if c.name != VALIDATION_POLICY_KEY:
            continue
        if c.operation in (ac.APPEND, ac.SUBTRACT):
            op = "APPEND" if c.operation == ac.APPEND else "SUBTRACT"
            return ItemError(
                error_code=int(INVALID_CONFIG),
                error_message=f"Can't {op} to key {VALIDATION_POLICY_KEY} because its type is "
                "not LIST.",
            )
        if c.operation == ac.SET and c.value is not None:
            refused = invalid_value(c.value, policy)
            if refused is not None:
                return refused
    return None


def _resource_type(code: int) -> ConfigResourceType | None:
    try:
        resource_type = ConfigResourceType(code)
    except ValueError:
        return None
    # CLIENT and USER_CLIENT are the gateway's own and reach the policies only through the
    # configured codes; a broker resource never maps to them.
    gateway_owned = (ConfigResourceType.CLIENT, ConfigResourceType.USER_CLIENT)
    if resource_type is ConfigResourceType.UNKNOWN or resource_type in gateway_owned:
        return None
    return resource_type


# The config source DescribeConfigs gives what is set on these resources (Kafka's
# DYNAMIC_BROKER_LOGGER_CONFIG, CLIENT_METRICS_CONFIG, GROUP_CONFIG); topics and brokers have
# theirs in ResourceConfigs.set_on_resource.
_CONTROLLER_SOURCE = {
    _TOPIC: SOURCE_DYNAMIC_TOPIC,
    int(ConfigResourceType.BROKER): SOURCE_DYNAMIC_BROKER,
}
"""The config source of what Kafka's controller keeps for the resource itself (a broker's
cluster-wide default ``""``: SOURCE_DYNAMIC_DEFAULT_BROKER)."""
_OWN_SOURCE = {
    int(ConfigResourceType.BROKER_LOGGER): 6,
    int(ConfigResourceType.CLIENT_METRICS): 7,
    int(ConfigResourceType.GROUP): 8,
}


Before = tuple[dict[str, str], dict[str, str], frozenset[str]]


def _before(current: admin.ResourceConfigs, topic_source_unreliable: bool) -> Before:
    """The configs set on the resource; the defaults known, each config's own (Kafka's
    ConfigDef default, source DEFAULT_CONFIG); and the keys of the first whose value the
    resource inherits from a dynamic broker config rather than sets itself (a topic's from
    the brokers', a broker's from the cluster default).

    Kafka starts an APPEND or SUBTRACT on a key the resource does not set itself from that
    default (ConfigurationControlManager.getParts reads the resource's own configs), whatever
    a broker config gives the resource: behind ``log.cleanup.policy=compact``, APPEND
    ``compact`` to a topic's cleanup.policy that it does not set makes it ``delete,compact``.
    """
    if topic_source_unreliable and current.resource_type == _TOPIC:
        return current.effective(), {}, frozenset()
    defaults = {
        e.name: default for e in current.configs if (default := _own_default(e)) is not None
    }
    own = _OWN_SOURCE.get(current.resource_type)
    if own is not None:
        entries = [e for e in current.configs if e.source == own]
        return {e.name: e.value for e in entries if e.value is not None}, defaults, frozenset()
    before = current.set_on_resource()
    own = _CONTROLLER_SOURCE.get(current.resource_type)
    if current.resource_type == int(ConfigResourceType.BROKER) and current.resource_name == "":
        own = SOURCE_DYNAMIC_DEFAULT_BROKER
    inherited = frozenset(
        e.name for e in current.configs if e.name in before and own is not None and e.source != own
    )
    return before, defaults, inherited


def _own_default(entry: DescribedConfig) -> str | None:
    """The config's own default: its value when that is where it comes from, else its
    DEFAULT_CONFIG synonym's (DescribeConfigs with synonyms); None when not reported."""
    if entry.source == admin.SOURCE_DEFAULT:
        return entry.value
    return next((s.value for s in entry.synonyms if s.source == admin.SOURCE_DEFAULT), None)


def _apply(
    request: ac.AlterConfigs,
    resource: ac.ResourceAlteration,
    before: Mapping[str, str],
    defaults: Mapping[str, str],
    inherited: frozenset[str],
) -> config_changes.ConfigChange | config_changes.InvalidAlteration:
    """``defaults`` and ``inherited``: of :func:`_before`, where an APPEND or SUBTRACT
    starts."""
    if request.incremental:
        return config_changes.incremental(before, resource.configs, defaults, inherited)
    return config_changes.legacy(before, resource.configs)


_CLIENT_ENTITY_MAX_BYTES = 4096
"""The most one dynamic client config entity may take in the store: its name and its
configs' names and values, in UTF-8 (a user, a client-id and eight configs fit in a few
hundred bytes). As a record.validation.policy value, so that every write fits the state
store's."""


def _entity_limit(limit: int) -> ItemError:
    return ItemError(
        error_code=int(POLICY_VIOLATION),
        error_message=f"The gateway keeps dynamic client configs for at most {limit} "
        "entities (limits: client.configs.max.entities); delete some first.",
    )


def _entity_size(resource_name: str, configs: Mapping[str, str]) -> int:
    return len(resource_name.encode()) + sum(
        len(k.encode()) + len(v.encode()) for k, v in configs.items()
    )


def _client_config_refusal(
    name: str,
    error: ItemError,
    validate_only: bool,
    policy: str = "client_configs",
    attempted: tuple[AuditedConfigChange, ...] | None = None,
) -> Judged:
    """A client config change refused before the policies run: audited as ``policy``'s
    denial (with the change ``attempted``, where the entity is known), answered with
    ``error``."""
    return Judged(
        decision=PolicyRunner.gateway_denial(error.error_message or "", policy),
        resource_type="user_client",
        resource_name=name,
        action="alter_config",
        validate_only=validate_only,
        denial=error,
        config_changes=attempted,
    )


def _attempted(
    resource: ac.ResourceAlteration, before: Mapping[str, str]
) -> tuple[AuditedConfigChange, ...]:
    """What a refused client config change asked for: each key's value before, and the
    value the request gave it (null for a DELETE), as sent (not applied: it was refused)."""
    return tuple(
        AuditedConfigChange(name=c.name, before=None, after=None, sensitive=True)
        if config_changes.looks_sensitive(c.name)
        else AuditedConfigChange(
            name=c.name,
            before=before.get(c.name),
            after=None if c.operation == ac.DELETE else c.value,
        )
        for c in resource.configs
    )


def _invalid(message: str) -> ItemError:
    return ItemError(error_code=int(INVALID_REQUEST), error_message=message)


def _unreadable(
    resource: ac.ResourceAlteration, current: admin.ResourceConfigs | None
) -> ItemError:
    if current is None:
        return ItemError(
            error_code=int(UNKNOWN_SERVER_ERROR),
            error_message=f"The broker did not describe the configs of resource "
            f"{resource.resource_name!r} (type {resource.resource_type}).",
        )
    return ItemError(error_code=current.error_code, error_message=current.error_message)
