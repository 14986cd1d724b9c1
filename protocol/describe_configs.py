"""DescribeConfigs (v1-v4): split a request between the broker and the gateway, and put
the gateway's own configs into the answer.

The gateway owns some configs (a topic's ``record.validation.policy``) and some resource
types (dynamic client configs); the broker answers the rest. The answer lists resources in
request order, in the layout of the client's version.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Final, TypeAlias, get_args

from kio.schema.describe_configs import v1, v2, v3, v4
from kio.schema.errors import ErrorCode
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

DESCRIBE_CONFIGS: Final = 32
VERSIONS: Final = VersionRange(min_version=1, max_version=4)
BROKER: Final = 4
"""The BROKER resource type: its configs include the brokers' and controllers' addresses."""

_ADDRESS_CONFIGS: Final = frozenset(
    {
        "controller.quorum.voters",
        "zookeeper.connect",
        "host.name",
        "port",
        "advertised.host.name",
        "advertised.port",
    }
)
"""Broker configs whose value is a host, a port or host:port pairs (besides the names
:func:`names_addresses` matches by their ending)."""

DescribeConfigsRequest: TypeAlias = (
    v1.DescribeConfigsRequest
    | v2.DescribeConfigsRequest
    | v3.DescribeConfigsRequest
    | v4.DescribeConfigsRequest
)
"""kio's request entity, v1 to v4."""
DescribeConfigsResponse: TypeAlias = (
    v1.DescribeConfigsResponse
    | v2.DescribeConfigsResponse
    | v3.DescribeConfigsResponse
    | v4.DescribeConfigsResponse
)
"""kio's response entity, v1 to v4."""
DescribeConfigsResult: TypeAlias = (
    v1.response.DescribeConfigsResult
    | v2.response.DescribeConfigsResult
    | v3.response.DescribeConfigsResult
    | v4.response.DescribeConfigsResult
)
DescribeConfigsResourceResult: TypeAlias = (
    v1.response.DescribeConfigsResourceResult
    | v2.response.DescribeConfigsResourceResult
    | v3.response.DescribeConfigsResourceResult
    | v4.response.DescribeConfigsResourceResult
)
DescribeConfigsSynonym: TypeAlias = (
    v1.response.DescribeConfigsSynonym
    | v2.response.DescribeConfigsSynonym
    | v3.response.DescribeConfigsSynonym
    | v4.response.DescribeConfigsSynonym
)

_REQUESTS: Final[tuple[type[DescribeConfigsRequest], ...]] = get_args(DescribeConfigsRequest)
_RESPONSES: Final[tuple[type[DescribeConfigsResponse], ...]] = get_args(DescribeConfigsResponse)
_RESULTS: Final[tuple[type[DescribeConfigsResult], ...]] = get_args(DescribeConfigsResult)
_CONFIGS: Final[tuple[type[DescribeConfigsResourceResult], ...]] = get_args(
    DescribeConfigsResourceResult
)
_SYNONYMS: Final[tuple[type[DescribeConfigsSynonym], ...]] = get_args(DescribeConfigsSynonym)
_TYPED_CONFIGS: Final = (
    v3.response.DescribeConfigsResourceResult,
    v4.response.DescribeConfigsResourceResult,
)
"""From v3 a config carries its type and documentation."""
_DOCUMENTED_REQUESTS: Final = (v3.DescribeConfigsRequest, v4.DescribeConfigsRequest)
"""From v3 a request may ask for the configs' documentation."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceRequest:
    resource_type: int
    resource_name: str
    configuration_keys: tuple[str, ...] | None
    """None or empty: every config."""

    def wants(self, name: str) -> bool:
        """Kafka reads a null and an empty key list alike: every config."""
        return not self.configuration_keys or name in self.configuration_keys


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigs:
    version: int
    resources: tuple[ResourceRequest, ...]
    include_synonyms: bool
    include_documentation: bool
    payload: DescribeConfigsRequest


@dataclass(frozen=True, slots=True, kw_only=True)
class Synonym:
    name: str
    value: str | None
    source: int


# Config sources (DescribeConfigs v1+) that mean "set on the resource itself".
SOURCE_DYNAMIC_TOPIC: Final = 1
SOURCE_DYNAMIC_BROKER: Final = 2
SOURCE_DYNAMIC_DEFAULT_BROKER: Final = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedConfig:
    """One config of a DescribeConfigs answer."""

    name: str
    value: str | None
    source: int
    read_only: bool
    is_sensitive: bool
    synonyms: tuple[Synonym, ...]
    config_type: int
    documentation: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedResource:
    """One resource of a DescribeConfigs answer."""

    resource_type: int
    resource_name: str
    error_code: int
    error_message: str | None
    configs: tuple[DescribedConfig, ...]

    def set_on_resource(self) -> dict[str, str]:
        """The configs set on the resource itself (dynamic ones), defaults excluded: what a
        config change replaces, and what AlterConfigV2Policy's before/after hold."""
        own = {SOURCE_DYNAMIC_TOPIC, SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT_BROKER}
        if self.resource_type == 4 and self.resource_name == "":
            own = {SOURCE_DYNAMIC_DEFAULT_BROKER}
        return {c.name: c.value for c in self.configs if c.source in own and c.value is not None}

    def effective(self) -> dict[str, str]:
        return {c.name: c.value for c in self.configs if c.value is not None}


def described_resources(payload: DescribeConfigsResponse) -> tuple[DescribedResource, ...]:
    """The resources of a decoded DescribeConfigs answer (v1-v4), in order, as plain values."""
    return tuple(
        DescribedResource(
            resource_type=int(r.resource_type),
            resource_name=r.resource_name,
            error_code=int(r.error_code),
            error_message=r.error_message,
            configs=tuple(
                DescribedConfig(
                    name=c.name,
                    value=c.value,
                    source=int(c.config_source),
                    read_only=bool(c.read_only),
                    is_sensitive=bool(c.is_sensitive),
                    synonyms=tuple(
                        Synonym(name=s.name, value=s.value, source=int(s.source))
                        for s in c.synonyms
                    ),
                    config_type=int(c.config_type) if isinstance(c, _TYPED_CONFIGS) else 0,
                    documentation=c.documentation if isinstance(c, _TYPED_CONFIGS) else None,
                )
                for c in r.configs
            ),
        )
        for r in payload.results
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalConfig:
    """A config the gateway reports itself."""

    name: str
    value: str | None
    source: int
    read_only: bool = False
    is_sensitive: bool = False
    synonyms: tuple[Synonym, ...] = ()
    config_type: int = 2  # STRING
    documentation: str | None = None


def names_addresses(name: str) -> bool:
    """Whether a broker config's value holds broker, controller or other hosts' addresses:
    ``listeners``, ``advertised.listeners``, ``controller.quorum.bootstrap.servers``, a metrics
    reporter's ``bootstrap.servers``, ``controller.quorum.voters``, ``zookeeper.connect``..."""
    return (
        name in _ADDRESS_CONFIGS or name.endswith("listeners") or name.endswith("bootstrap.servers")
    )


def _without_addresses(found: DescribeConfigsResult) -> DescribeConfigsResult:
    """A BROKER resource's configs with each address-bearing value hidden, as Kafka shows a
    sensitive config (no value, ``is_sensitive``, synonyms without values): the gateway
    hands clients its own addresses only."""
    if not any(names_addresses(e.name) for e in found.configs):
        return found
    return replaced(
        found,
        configs=tuple(
            replaced(
                e,
                value=None,
                is_sensitive=True,
                synonyms=tuple(replaced(s, value=None) for s in e.synonyms),
            )
            if names_addresses(e.name)
            else e
            for e in found.configs
        ),
    )


def read_request(header: RequestHeader, frame: bytes) -> DescribeConfigs:
    """:raises Undecodable:"""
    payload = decode_request_as(_REQUESTS, header, frame)
    return DescribeConfigs(
        version=header.api_version,
        resources=tuple(
            ResourceRequest(
                resource_type=int(r.resource_type),
                resource_name=r.resource_name,
                configuration_keys=None
                if r.configuration_keys is None
                else tuple(r.configuration_keys),
            )
            for r in payload.resources
        ),
        include_synonyms=bool(payload.include_synonyms),
        include_documentation=(
            isinstance(payload, _DOCUMENTED_REQUESTS) and payload.include_documentation
        ),
        payload=payload,
    )


def request_keeping(view: DescribeConfigs, header: RequestHeader, keep: Collection[int]) -> bytes:
    """The request frame (no size prefix) with only the resources at the ``keep`` indices."""
    payload = replaced(
        view.payload,
        resources=tuple(r for i, r in enumerate(view.payload.resources) if i in keep),
    )
    return encode_request(
        DESCRIBE_CONFIGS, view.version, header.correlation_id, header.client_id, payload
    )[4:]


def _entry(
    version: int, view: DescribeConfigs, config: LocalConfig
) -> DescribeConfigsResourceResult:
    synonym_cls = schema_of(_SYNONYMS, version)
    fields: dict[str, object] = {
        "name": config.name,
        "value": config.value,
        "read_only": config.read_only,
        "config_source": i8(config.source),
        "is_sensitive": config.is_sensitive,
        "synonyms": tuple(
            synonym_cls(name=s.name, value=s.value, source=i8(s.source)) for s in config.synonyms
        )
        if view.include_synonyms
        else (),
    }
    if version >= 3:
        fields["config_type"] = i8(config.config_type)
        fields["documentation"] = config.documentation if view.include_documentation else None
    return built(schema_of(_CONFIGS, version), fields)


def answer(
    view: DescribeConfigs,
    correlation_id: int,
    local: Mapping[int, ItemError],
    broker_frame: bytes | None,
    extra: Mapping[tuple[int, str], Sequence[LocalConfig]] = {},  # noqa: B006 - read only
    configs: Mapping[int, Sequence[LocalConfig]] = {},  # noqa: B006 - read only
) -> bytes:
    """The response frame (no size prefix) for the client.

    ``local``: request index -> a resource the gateway answers, with ``configs`` (request
    index -> the configs the gateway reports for it); the other resources come from
    ``broker_frame`` (the answer to :func:`request_keeping` of them), in order. ``extra``:
    configs the gateway adds to broker-answered resources (those the request asked for). A
    BROKER resource's address-bearing configs are hidden (:func:`names_addresses`).

    :raises Undecodable: when the broker's answer does not decode.
    :raises ValueError: when it has fewer resources than were forwarded.
    """
    result_cls = schema_of(_RESULTS, view.version)
    broker_results: list[DescribeConfigsResult] = []
    throttle = i32Timedelta.parse(timedelta(0))
    if broker_frame is not None:
        broker = decode_response_as(_RESPONSES, DESCRIBE_CONFIGS, view.version, broker_frame)
        broker_results = list(broker.results)
        throttle = broker.throttle_time
    results: list[DescribeConfigsResult] = []
    for index, resource in enumerate(view.resources):
        if index in local:
            result = local[index]
            results.append(
                built(
                    result_cls,
                    {
                        "error_code": ErrorCode(result.error_code),
                        "error_message": result.error_message,
                        "resource_type": i8(resource.resource_type),
                        "resource_name": resource.resource_name,
                        "configs": tuple(
                            _entry(view.version, view, c)
                            for c in configs.get(index, ())
                            if resource.wants(c.name)
                        ),
                    },
                )
            )
            continue
        if not broker_results:
            raise ValueError("the broker's DescribeConfigs answer lacks a forwarded resource")
        found = broker_results.pop(0)
        if resource.resource_type == BROKER:
            found = _without_addresses(found)
        added = [
            c
            for c in extra.get((resource.resource_type, resource.resource_name), ())
            if resource.wants(c.name)
        ]
        if added and int(found.error_code) == 0:
            kept = tuple(e for e in found.configs if e.name not in {c.name for c in added})
            found = replaced(
                found,
                configs=kept + tuple(_entry(view.version, view, c) for c in added),
            )
        results.append(found)
    payload = built(
        schema_of(_RESPONSES, view.version), {"throttle_time": throttle, "results": tuple(results)}
    )
    return response_header(correlation_id, DESCRIBE_CONFIGS, view.version) + encode_body(payload)
