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
the gateway looks up in Metadata (for a ``TopicActionPolicy``, or to answer a dry run
itself) and does not find (UNKNOWN_TOPIC_OR_PARTITION), before any policy runs, as Kafka
checks that a topic exists first. Requests Kafka refuses before any policy (a resource or
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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING

from policies.api import ConfigResource, ConfigResourceType, TopicState
from protocol import admin
from protocol import alter_configs as ac
from protocol.errors import INVALID_REQUEST, POLICY_VIOLATION, ErrorCode
from protocol.framing import RequestHeader

from .. import config_changes
from ..decisions import Subject
from . import Answer, Forward, Outcome

if TYPE_CHECKING:
    from gateway.connection import ConnectionContext

API_KEY = ac.ALTER_CONFIGS
VERSIONS = ac.LEGACY_VERSIONS

_TOPIC = int(ConfigResourceType.TOPIC)


async def handle(ctx: ConnectionContext, header: RequestHeader, frame: bytes) -> Outcome:
    return await config_change(ctx, header, frame)


async def config_change(ctx: ConnectionContext, header: RequestHeader, frame: bytes) -> Outcome:
    """The flow for both AlterConfigs and IncrementalAlterConfigs (``header.api_key``)."""
    request = ac.read_request(header, frame)
    local: dict[ac.ResourceKey, ac.ResourceResult] = {}
    keys = [r.key for r in request.resources]
    for resource in request.resources:
        if keys.count(resource.key) > 1:
            local[resource.key] = _invalid("Each resource must appear at most once.")
        elif _resource_type(resource.resource_type) is None:
            local[resource.key] = _invalid(f"Unknown resource type {resource.resource_type}")
    pending = [r for r in request.resources if r.key not in local]

    dry_run_here = request.validate_only and ctx.upstream_config.ignores_validate_only
    check_topics = ctx.policies.needs_topic_state or dry_run_here
    described: dict[ac.ResourceKey, admin.ResourceConfigs] = {}
    if pending:
        described = admin.read_configs(
            await ctx.send_internal(admin.describe_configs([r.key for r in pending]))
        )
    topic_names = [r.resource_name for r in pending if r.resource_type == _TOPIC]
    topics: dict[str, admin.TopicDescription] = {}
    if check_topics and topic_names:
        topics = admin.read_topics(await ctx.send_internal(admin.describe_topics(topic_names)))

    for resource in pending:
        current = described.get(resource.key)
        if current is None or current.error_code != 0:
            local[resource.key] = _unreadable(resource, current)
            continue
        before, defaults = _before(current, ctx.upstream_config.topic_config_source_unreliable)
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
        error = None if decision.allowed else int(POLICY_VIOLATION)
        await ctx.record(
            Subject(
                client_address=ctx.client_address,
                principal=ctx.principal,
                client_id=header.client_id,
                api_key=header.api_key,
                api_version=header.api_version,
                resource_type=resource_type.name.lower(),
                resource_name=resource.resource_name,
                action="alter_config",
                validate_only=request.validate_only,
            ),
            decision,
            error,
        )
        if not decision.allowed:
            local[resource.key] = ac.ResourceResult(
                error_code=int(POLICY_VIOLATION), error_message=decision.message
            )

    allowed = [key for key in dict.fromkeys(keys) if key not in local]
    if dry_run_here:
        for key in allowed:
            local[key] = ac.ResourceResult(error_code=0, error_message=None)
        allowed = []
    if not allowed and request.resources:
        return Answer(frame=ac.answer(request, header.correlation_id, local, None))
    if not local:
        return Forward(frame=frame)
    reduced = ac.request_for_broker(request, header, allowed)

    async def merge(response: bytes) -> bytes:
        broker = ac.read_broker_response(request, response)
        return ac.answer(request, header.correlation_id, local, broker)

    return Forward(frame=reduced, on_response=merge)


def _resource_type(code: int) -> ConfigResourceType | None:
    try:
        resource_type = ConfigResourceType(code)
    except ValueError:
        return None
    return None if resource_type is ConfigResourceType.UNKNOWN else resource_type


def _before(
    current: admin.ResourceConfigs, topic_source_unreliable: bool
) -> tuple[dict[str, str], dict[str, str]]:
    """The configs set on the resource, and the defaults known for the others."""
    if topic_source_unreliable and current.resource_type == _TOPIC:
        return current.effective(), {}
    defaults = {
        e.name: e.value
        for e in current.entries
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
    code = topic.error_code if topic is not None else admin.UNKNOWN_TOPIC_OR_PARTITION
    if code == admin.UNKNOWN_TOPIC_OR_PARTITION:
        message = f"The topic '{name}' does not exist."
    else:
        message = f"Cannot read the state of topic '{name}': Metadata answered error {code}."
    return ac.ResourceResult(error_code=code, error_message=message)
