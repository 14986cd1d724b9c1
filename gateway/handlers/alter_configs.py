"""AlterConfigs (legacy, v0-v2), and the flow it shares with IncrementalAlterConfigs
(:mod:`.incremental_alter_configs`): each config resource through the policy chain.

Per resource, all or nothing: the gateway reads the resource's current configs with
DescribeConfigs on the client's own upstream connection (``before``), applies the request to
them (:mod:`gateway.config_changes`: ``altered`` and ``after``) and asks the policy chain.
Allowed resources go to the broker; denied ones get POLICY_VIOLATION (44) with the
decision's message, and the other resources of the request go on. All allowed: the client's
bytes are forwarded untouched. All decided here: answered here. Mixed: a reduced request
goes to the broker and the local results are merged into its answer, in request order, in
the client's version.

Never forwarded blind: a resource whose current configs the broker does not report
(DescribeConfigs error) is refused with the broker's error code and message; so is a topic
the gateway looks up in Metadata (for a ``TopicActionPolicy``, to answer a dry run itself,
or for a change of ``record.validation.policy``) and does not find
(UNKNOWN_TOPIC_OR_PARTITION), before any policy runs, as Kafka checks that a topic exists
first. Requests Kafka refuses before any policy (a resource or
key given twice, a missing value, an unknown operation or resource type) get INVALID_REQUEST
here, without asking the policies.

The dry run answered here (below) knows less than a broker: it reports a resource the
policies allow as changed without checking config names, values or list types.

``before`` is what DescribeConfigs reports as set on the resource
(``ResourceConfigs.set_on_resource``). In front of a broker whose topic config sources are
wrong (``upstream.topic_config_source_unreliable``: Tansu reports every topic config as
DEFAULT and lists only those set), every reported topic config counts as set.

validate_only: the policies run and nothing changes. It is forwarded as the client sent it,
since Kafka honours it for config changes; in front of a broker that ignores it
(``upstream.ignores_validate_only``: Tansu applies a validate_only IncrementalAlterConfigs)
the gateway answers the dry run itself and sends nothing to the broker.

The gateway's own topic config ``record.validation.policy`` (seed 002) lives in its state
store, never at the broker (which refuses config names it does not know). Its stored value
is part of ``before``, so the policies see it like any other topic config; the request's
entries for it are taken out of what the broker is sent, and once the broker reports the
resource changed (and not validate_only) the new value is stored, or removed (DELETE, or
the legacy API's implicit delete). A resource whose change touches nothing else is not
sent to the broker at all: stored and answered here, once Metadata shows the topic exists.
APPEND and SUBTRACT on it get INVALID_CONFIG, as Kafka answers for a key that is no list.

Dynamic client configs (seed 003, :mod:`gateway.client_configs`): resources of the gateway's
CLIENT and USER_CLIENT types are the gateway's alone and never reach the broker.
IncrementalAlterConfigs applies SET, DELETE, APPEND and SUBTRACT to the stored entity
(:func:`gateway.client_configs.apply_incremental`: an unknown or quota key, an invalid value
such as ``acks=2``, an APPEND on a key that is no list -> INVALID_REQUEST naming the key),
then asks the policy chain about the resource as USER_CLIENT ``user:client-id`` (a CLIENT
resource is its connection's user, as the seed has the broker rewrite it), and stores the
change unless validate_only. The legacy AlterConfigs on these types gets INVALID_REQUEST.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING

from policies.api import ConfigResource, ConfigResourceType, TopicState
from protocol import admin
from protocol import alter_configs as ac
from protocol.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    INVALID_REQUEST,
    POLICY_VIOLATION,
    UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode,
)
from protocol.framing import RequestHeader

from .. import client_configs, config_changes
from ..record_validation import STATE_NAMESPACE, VALIDATION_POLICY_KEY
from ..state import StateStoreError
from . import Answer, Forward, Outcome

if TYPE_CHECKING:
    from gateway.connection import ConnectionContext

API_KEY = ac.ALTER_CONFIGS
VERSIONS = ac.LEGACY_VERSIONS

_TOPIC = int(ConfigResourceType.TOPIC)
_OK = ac.ResourceResult(error_code=0, error_message=None)


async def handle(ctx: ConnectionContext, header: RequestHeader, frame: bytes) -> Outcome:
    return await config_change(ctx, header, frame)


async def config_change(ctx: ConnectionContext, header: RequestHeader, frame: bytes) -> Outcome:
    """The flow for both AlterConfigs and IncrementalAlterConfigs (``header.api_key``)."""
    request = ac.read_request(header, frame)
    codes = ctx.client_configs.codes
    local: dict[ac.ResourceKey, ac.ResourceResult] = {}
    keys = [r.key for r in request.resources]
    for resource in request.resources:
        if keys.count(resource.key) > 1:
            local[resource.key] = _invalid("Each resource must appear at most once.")
        elif resource.resource_type in codes.resource_types:
            local[resource.key] = (
                await _client_config_change(ctx, header, request, resource)
                if request.incremental
                else _invalid(client_configs.LEGACY_ALTER_MESSAGE)
            )
        elif _resource_type(resource.resource_type) is None:
            local[resource.key] = _invalid(f"Unknown resource type {resource.resource_type}")
    pending = [r for r in request.resources if r.key not in local]

    stored = {
        r.key: value
        for r in pending
        if r.resource_type == _TOPIC
        and (value := ctx.validation_policy_of(r.resource_name)) is not None
    }
    names_policy_key = {
        r.key
        for r in pending
        if r.resource_type == _TOPIC and any(c.name == VALIDATION_POLICY_KEY for c in r.configs)
    }
    dry_run_here = request.validate_only and ctx.upstream_config.ignores_validate_only
    # A change of record.validation.policy alone (named, or the legacy API's implicit
    # delete) is answered here: Metadata must show the topic exists.
    check_topics = (
        ctx.policies.needs_topic_state
        or dry_run_here
        or bool(names_policy_key)
        or (not request.incremental and bool(stored))
    )
    described: dict[ac.ResourceKey, admin.ResourceConfigs] = {}
    if pending:
        described = admin.read_configs(
            await ctx.send_internal(admin.describe_configs([r.key for r in pending]))
        )
    topic_names = [r.resource_name for r in pending if r.resource_type == _TOPIC]
    topics: dict[str, admin.TopicDescription] = {}
    if check_topics and topic_names:
        topics = admin.read_topics(await ctx.send_internal(admin.describe_topics(topic_names)))

    policy_writes: dict[ac.ResourceKey, str | None] = {}
    """Topic -> its new record.validation.policy (None: removed), once the change is made."""
    gateway_only: set[ac.ResourceKey] = set()
    """Topics whose change touches record.validation.policy alone."""
    for resource in pending:
        current = described.get(resource.key)
        if current is None or current.error_code != 0:
            local[resource.key] = _unreadable(resource, current)
            continue
        before, defaults = _before(current, ctx.upstream_config.topic_config_source_unreliable)
        if resource.key in stored:
            before[VALIDATION_POLICY_KEY] = stored[resource.key]
        if resource.key in names_policy_key:
            refused = _policy_key_operation(resource)
            if refused is not None:
                local[resource.key] = refused
                continue
        change = _apply(request, resource, before, defaults)
        if isinstance(change, config_changes.InvalidAlteration):
            local[resource.key] = _invalid(change.message)
            continue
        topic_state = None
        if check_topics and resource.resource_type == _TOPIC:
            topic = topics.get(resource.resource_name)
            if topic is None or not topic.exists:
                local[resource.key] = _missing_topic(resource.resource_name, topic)
                continue
            topic_state = TopicState(
                num_partitions=len(topic.partitions),
                replication_factor=topic.replication_factor,
                replicas_assignments=topic.partitions,
                configs=before,
            )
        resource_type = ConfigResourceType(resource.resource_type)
        decision = await ctx.decide(
            partial(
                ctx.policies.check_alter_config,
                ConfigResource(type=resource_type, name=resource.resource_name),
                altered=change.altered,
                before=before,
                after=change.after,
                principal=ctx.principal,
                topic_state=topic_state,
            )
        )
        await ctx.record_policy_decision(
            header,
            decision,
            resource_type=resource_type.name.lower(),
            resource_name=resource.resource_name,
            action="alter_config",
            validate_only=request.validate_only,
        )
        if not decision.allowed:
            local[resource.key] = ac.ResourceResult(
                error_code=int(POLICY_VIOLATION), error_message=decision.message
            )
            continue
        if resource.resource_type == _TOPIC:
            new_value = change.after.get(VALIDATION_POLICY_KEY)
            if new_value != before.get(VALIDATION_POLICY_KEY):
                policy_writes[resource.key] = new_value
            if set(change.altered) == {VALIDATION_POLICY_KEY}:
                gateway_only.add(resource.key)

    allowed = [key for key in dict.fromkeys(keys) if key not in local]
    if dry_run_here:
        for key in allowed:
            local[key] = ac.ResourceResult(error_code=0, error_message=None)
        allowed = []
    for key in [k for k in allowed if k in gateway_only]:
        failed = None
        if key in policy_writes and not request.validate_only:
            failed = await _store_policy(ctx, key, policy_writes[key])
        local[key] = failed or _OK
    allowed = [key for key in allowed if key not in local]
    if not allowed and request.resources:
        return Answer(frame=ac.answer(request, header.correlation_id, local, None))
    later = {
        key: value
        for key, value in policy_writes.items()
        if key in allowed and not request.validate_only
    }
    strip = bool(names_policy_key.intersection(allowed))
    if not local and not later and not strip:
        return Forward(frame=frame)
    for_broker = ac.without_config(request, VALIDATION_POLICY_KEY, _TOPIC) if strip else request
    reduced = ac.request_for_broker(for_broker, header, allowed)

    async def merge(response: bytes) -> bytes:
        broker = ac.read_broker_response(request, response)
        results = dict(local)
        changed = ac.succeeded(broker) if later else frozenset()
        for key, value in later.items():
            if key in changed and (failed := await _store_policy(ctx, key, value)) is not None:
                results[key] = failed
        return ac.answer(request, header.correlation_id, results, broker)

    return Forward(frame=reduced, on_response=merge)


async def _store_policy(
    ctx: ConnectionContext, key: ac.ResourceKey, value: str | None
) -> ac.ResourceResult | None:
    """Store a topic's record.validation.policy (None removes it); None when stored, else
    the resource's error."""
    try:
        await ctx.state_put(STATE_NAMESPACE, key[1], value)
    except StateStoreError as exc:
        return ac.ResourceResult(
            error_code=int(ErrorCode.unknown_server_error),
            error_message=f"The gateway could not store {VALIDATION_POLICY_KEY}: {exc}",
        )
    return None


def _policy_key_operation(resource: ac.ResourceAlteration) -> ac.ResourceResult | None:
    """INVALID_CONFIG for APPEND or SUBTRACT on record.validation.policy (a string)."""
    for c in resource.configs:
        if c.name == VALIDATION_POLICY_KEY and c.operation in (ac.APPEND, ac.SUBTRACT):
            op = "APPEND" if c.operation == ac.APPEND else "SUBTRACT"
            return ac.ResourceResult(
                error_code=int(ErrorCode.invalid_config),
                error_message=f"Can't {op} to key {VALIDATION_POLICY_KEY} because its type is "
                "not LIST.",
            )
    return None


async def _client_config_change(
    ctx: ConnectionContext,
    header: RequestHeader,
    request: ac.AlterConfigs,
    resource: ac.ResourceAlteration,
) -> ac.ResourceResult:
    """One CLIENT or USER_CLIENT resource of an IncrementalAlterConfigs, decided and (unless
    validate_only) stored here."""
    codes = ctx.client_configs.codes
    try:
        entity = client_configs.entity_of(
            resource.resource_type, resource.resource_name, ctx.principal, codes
        )
    except ValueError as exc:
        return _invalid(str(exc))
    assert entity is not None  # one of the gateway's types
    admins = ctx.client_configs.admin_principals
    if admins is not None and ctx.principal not in admins:
        return ac.ResourceResult(
            error_code=int(CLUSTER_AUTHORIZATION_FAILED),
            error_message=f"{ctx.principal or 'User:ANONYMOUS'} may not alter dynamic client "
            "configs (client_configs.admin_principals)",
        )
    items = ctx.client_config_items()
    operations = [(c.name, c.operation, c.value) for c in resource.configs]
    writes, refused = client_configs.apply_incremental(
        items, entity.user, entity.client_id, operations
    )
    if refused is not None:
        return ac.ResourceResult(error_code=refused[0], error_message=refused[1])
    before = client_configs.entity_configs(items, entity.user, entity.client_id)
    after = dict(before)
    for store_key, value in writes.items():
        name = client_configs.parse_store_key(store_key)[2]
        if value is None:
            after.pop(name, None)
        else:
            after[name] = value
    altered = {name: after.get(name) for name, _, _ in operations}
    decision = await ctx.decide(
        partial(
            ctx.policies.check_alter_config,
            _gateway_resource(entity.resource_name),
            altered=altered,
            before=before,
            after=after,
            principal=ctx.principal,
        )
    )
    await ctx.record_policy_decision(
        header,
        decision,
        resource_type="user_client",
        resource_name=entity.resource_name,
        action="alter_config",
        validate_only=request.validate_only,
    )
    if not decision.allowed:
        return ac.ResourceResult(error_code=int(POLICY_VIOLATION), error_message=decision.message)
    if request.validate_only:
        return _OK
    try:
        await ctx.state_put_all(client_configs.STATE_NAMESPACE, writes)
    except StateStoreError as exc:
        return ac.ResourceResult(
            error_code=int(ErrorCode.unknown_server_error),
            error_message=f"The gateway could not store the dynamic client configs of "
            f"{entity.resource_name!r}: {exc}",
        )
    return _OK


def _gateway_resource(name: str) -> ConfigResource:
    """The policies' view of a user's client configs: always ``USER_CLIENT``, whatever wire
    code the gateway is configured to use for it."""
    return ConfigResource(type=ConfigResourceType.USER_CLIENT, name=name)


def _resource_type(code: int) -> ConfigResourceType | None:
    try:
        resource_type = ConfigResourceType(code)
    except ValueError:
        return None
    # CLIENT and USER_CLIENT are the gateway's own and reach the policies only through the
    # configured codes (see _gateway_resource); a broker resource never maps to them.
    gateway_owned = (ConfigResourceType.CLIENT, ConfigResourceType.USER_CLIENT)
    if resource_type is ConfigResourceType.UNKNOWN or resource_type in gateway_owned:
        return None
    return resource_type


def _before(
    current: admin.ResourceConfigs, topic_source_unreliable: bool
) -> tuple[dict[str, str], dict[str, str]]:
    """The configs set on the resource, and the defaults known for the others."""
    if topic_source_unreliable and current.resource_type == _TOPIC:
        return current.effective(), {}
    defaults = {
        e.name: e.value
        for e in current.configs
        if e.source == admin.SOURCE_DEFAULT and e.value is not None
    }
    return current.set_on_resource(), defaults


def _apply(
    request: ac.AlterConfigs,
    resource: ac.ResourceAlteration,
    before: Mapping[str, str],
    defaults: Mapping[str, str],
) -> config_changes.ConfigChange | config_changes.InvalidAlteration:
    if request.incremental:
        operations: Sequence[tuple[str, int, str | None]] = [
            (c.name, c.operation, c.value) for c in resource.configs
        ]
        return config_changes.incremental(before, operations, defaults)
    return config_changes.legacy(before, [(c.name, c.value) for c in resource.configs])


def _invalid(message: str) -> ac.ResourceResult:
    return ac.ResourceResult(error_code=int(INVALID_REQUEST), error_message=message)


def _unreadable(
    resource: ac.ResourceAlteration, current: admin.ResourceConfigs | None
) -> ac.ResourceResult:
    if current is None:
        return ac.ResourceResult(
            error_code=int(ErrorCode.unknown_server_error),
            error_message=f"The broker did not describe the configs of resource "
            f"{resource.resource_name!r} (type {resource.resource_type}).",
        )
    return ac.ResourceResult(error_code=current.error_code, error_message=current.error_message)


def _missing_topic(name: str, topic: admin.TopicDescription | None) -> ac.ResourceResult:
    code = topic.error_code if topic is not None else int(UNKNOWN_TOPIC_OR_PARTITION)
    if code == int(UNKNOWN_TOPIC_OR_PARTITION):
        message = f"The topic '{name}' does not exist."
    else:
        message = f"Cannot read the state of topic '{name}': Metadata answered error {code}."
    return ac.ResourceResult(error_code=code, error_message=message)
