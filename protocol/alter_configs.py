"""IncrementalAlterConfigs (API key 44, v0-v1) and the legacy AlterConfigs (33, v0-v2).

Both requests are a list of config resources, each with its configs, and both answers are
one result per resource: error code, error message, resource type and name. So one set of
functions serves both APIs: :func:`read_request` decodes either to plain values,
:func:`request_for_broker` re-encodes it with only the resources the gateway lets through,
and :func:`answer` merges the gateway's own per-resource results with the broker's answer to
that reduced request, in request order and in the layout of the version the client used.
kio ships every version of both APIs, so nothing is translated: the broker is asked in the
client's own version.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Final, TypeAlias, get_args

from kio.schema.alter_configs import v0 as legacy_v0
from kio.schema.alter_configs import v1 as legacy_v1
from kio.schema.alter_configs import v2 as legacy_v2
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs import v0 as incremental_v0
from kio.schema.incremental_alter_configs import v1 as incremental_v1
from kio.static.primitive import i8, i32Timedelta

from .codec import (
    built,
    decode_request_as,
    decode_response_as,
    encode_body,
    encode_request,
    replaced,
    schema_of,
)
from .framing import RequestHeader, response_header
from .results import ItemError
from .versions import VersionRange

ALTER_CONFIGS: Final = 33
INCREMENTAL_ALTER_CONFIGS: Final = 44
LEGACY_VERSIONS: Final = VersionRange(min_version=0, max_version=2)
INCREMENTAL_VERSIONS: Final = VersionRange(min_version=0, max_version=1)

# IncrementalAlterConfigs operations (Kafka's AlterConfigOp.OpType ids).
SET: Final = 0
DELETE: Final = 1
APPEND: Final = 2
SUBTRACT: Final = 3

AlterConfigsRequest: TypeAlias = (
    legacy_v0.AlterConfigsRequest
    | legacy_v1.AlterConfigsRequest
    | legacy_v2.AlterConfigsRequest
    | incremental_v0.IncrementalAlterConfigsRequest
    | incremental_v1.IncrementalAlterConfigsRequest
)
"""kio's request entity of either API, any version."""
AlterConfigsResponse: TypeAlias = (
    legacy_v0.AlterConfigsResponse
    | legacy_v1.AlterConfigsResponse
    | legacy_v2.AlterConfigsResponse
    | incremental_v0.IncrementalAlterConfigsResponse
    | incremental_v1.IncrementalAlterConfigsResponse
)
"""kio's response entity of either API, any version."""
AlterConfigsResourceResponse: TypeAlias = (
    legacy_v0.response.AlterConfigsResourceResponse
    | legacy_v1.response.AlterConfigsResourceResponse
    | legacy_v2.response.AlterConfigsResourceResponse
    | incremental_v0.response.AlterConfigsResourceResponse
    | incremental_v1.response.AlterConfigsResourceResponse
)
IncrementalAlterableConfig: TypeAlias = (
    incremental_v0.request.AlterableConfig | incremental_v1.request.AlterableConfig
)

_REQUESTS: Final[tuple[type[AlterConfigsRequest], ...]] = get_args(AlterConfigsRequest)
_RESPONSES: Final[tuple[type[AlterConfigsResponse], ...]] = get_args(AlterConfigsResponse)
_INCREMENTAL_CONFIGS: Final[tuple[type[IncrementalAlterableConfig], ...]] = get_args(
    IncrementalAlterableConfig
)
_RESULTS: Final[tuple[type[AlterConfigsResourceResponse], ...]] = get_args(
    AlterConfigsResourceResponse
)

ResourceKey = tuple[int, str]
"""(resource type, resource name): how Kafka matches a result to its resource."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigAlteration:
    """One config of a resource in the request. ``operation`` is the IncrementalAlterConfigs
    operation; for the legacy AlterConfigs, which only sets, it is always :data:`SET`."""

    name: str
    operation: int
    value: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceAlteration:
    resource_type: int
    resource_name: str
    configs: tuple[ConfigAlteration, ...]

    @property
    def key(self) -> ResourceKey:
        return (self.resource_type, self.resource_name)


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterConfigs:
    """A decoded AlterConfigs or IncrementalAlterConfigs request (``api_key`` says which)."""

    api_key: int
    version: int
    resources: tuple[ResourceAlteration, ...]
    validate_only: bool
    payload: AlterConfigsRequest

    @property
    def incremental(self) -> bool:
        return self.api_key == INCREMENTAL_ALTER_CONFIGS


def read_request(header: RequestHeader, frame: bytes) -> AlterConfigs:
    """:raises Undecodable: for a malformed body or a version kio does not ship."""
    payload = decode_request_as(_REQUESTS, header, frame)
    return AlterConfigs(
        api_key=header.api_key,
        version=header.api_version,
        resources=tuple(
            ResourceAlteration(
                resource_type=int(r.resource_type),
                resource_name=r.resource_name,
                configs=tuple(
                    ConfigAlteration(
                        name=c.name,
                        operation=int(c.config_operation)
                        if isinstance(c, _INCREMENTAL_CONFIGS)
                        else SET,
                        value=c.value,
                    )
                    for c in r.configs
                ),
            )
            for r in payload.resources
        ),
        validate_only=bool(payload.validate_only),
        payload=payload,
    )


def request_for_broker(
    request: AlterConfigs, header: RequestHeader, keep: Collection[ResourceKey]
) -> bytes:
    """The request frame (no size prefix) carrying only the resources in ``keep``, in the
    client's version, with the client's correlation id, client id and validate_only."""
    wanted = set(keep)
    payload = replaced(
        request.payload,
        resources=tuple(
            r
            for r in request.payload.resources
            if (int(r.resource_type), r.resource_name) in wanted
        ),
    )
    return encode_request(
        request.api_key, request.version, header.correlation_id, header.client_id, payload
    )[4:]


def without_config(request: AlterConfigs, name: str, resource_type: int) -> AlterConfigs:
    """The request with config ``name`` taken out of every resource of ``resource_type``.

    For configs the gateway keeps itself, which a broker would refuse as unknown. Resources
    keep their place (and their key), even when no config is left in them.
    """

    def keeps(resource_type_code: int, config_name: str) -> bool:
        return resource_type_code != resource_type or config_name != name

    payload = replaced(
        request.payload,
        resources=tuple(
            replaced(
                r,
                configs=tuple(c for c in r.configs if keeps(int(r.resource_type), c.name)),
            )
            for r in request.payload.resources
        ),
    )
    resources = tuple(
        dataclasses.replace(
            r, configs=tuple(c for c in r.configs if keeps(r.resource_type, c.name))
        )
        for r in request.resources
    )
    return dataclasses.replace(request, resources=resources, payload=payload)


def read_broker_response(request: AlterConfigs, frame: bytes) -> AlterConfigsResponse:
    """:raises Undecodable: when the broker's answer does not decode."""
    return decode_response_as(_RESPONSES, request.api_key, request.version, frame)


def succeeded(broker: AlterConfigsResponse) -> frozenset[ResourceKey]:
    """The resources the broker's answer (:func:`read_broker_response`) reports as changed."""
    return frozenset(
        (int(r.resource_type), r.resource_name) for r in broker.responses if int(r.error_code) == 0
    )


def answer(
    request: AlterConfigs,
    correlation_id: int,
    local: Mapping[ResourceKey, ItemError],
    broker: AlterConfigsResponse | None,
) -> bytes:
    """The response frame (no size prefix) for the client, in its version's layout.

    One result per resource of the request, in request order: from ``local`` if decided
    here, else the broker's. A resource the broker left out gets UNKNOWN_SERVER_ERROR, as a
    Kafka broker answers when its controller returns fewer results than asked for.
    """
    result_cls = schema_of(_RESULTS, request.version, request.api_key)
    from_broker: dict[ResourceKey, AlterConfigsResourceResponse] = {}
    if broker is not None:
        for r in broker.responses:
            from_broker.setdefault((int(r.resource_type), r.resource_name), r)
    results: list[AlterConfigsResourceResponse] = []
    for resource in request.resources:
        decided = local.get(resource.key)
        found = from_broker.get(resource.key)
        if decided is None and found is not None:
            results.append(found)
            continue
        if decided is None:
            decided = ItemError(
                error_code=int(ErrorCode.unknown_server_error),
                error_message=f"the broker returned no result for resource {resource.key}",
            )
        results.append(
            result_cls(
                error_code=ErrorCode(decided.error_code),
                error_message=decided.error_message,
                resource_type=i8(resource.resource_type),
                resource_name=resource.resource_name,
            )
        )
    throttle = broker.throttle_time if broker is not None else i32Timedelta.parse(timedelta(0))
    schema = schema_of(_RESPONSES, request.version, request.api_key)
    payload = built(schema, {"throttle_time": throttle, "responses": tuple(results)})
    return response_header(correlation_id, request.api_key, request.version) + encode_body(payload)
