"""CreateAcls (API key 30) and DeleteAcls (31): the resource patterns their items name, the
request carrying only some items, and an answer merged from the gateway's and the broker's.

An item is a creation (one ACL binding) or a delete filter, keyed by its index in the request.
Kafka's codes: resource types ANY 1, TOPIC 2; pattern types ANY 1, MATCH 2, LITERAL 3,
PREFIXED 4 (a MATCH filter deletes every binding that applies to its name: the literal one,
the wildcard ``*`` and every prefix of it)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias, get_args

from kio.schema.create_acls import v1 as create_v1
from kio.schema.create_acls import v2 as create_v2
from kio.schema.create_acls import v3 as create_v3
from kio.schema.delete_acls import v1 as delete_v1
from kio.schema.delete_acls import v2 as delete_v2
from kio.schema.delete_acls import v3 as delete_v3
from kio.schema.errors import ErrorCode
from kio.static.protocol import Entity

from .codec import (
    decode_request_as,
    decode_response_as,
    encode_body,
    encode_request,
    filled,
    replaced,
    schema_of,
)
from .framing import RequestHeader, response_header
from .results import ItemError

CREATE_ACLS: Final = 30
DELETE_ACLS: Final = 31

RESOURCE_ANY: Final = 1
RESOURCE_TOPIC: Final = 2
PATTERN_ANY: Final = 1
PATTERN_MATCH: Final = 2
PATTERN_LITERAL: Final = 3
PATTERN_PREFIXED: Final = 4
WILDCARD: Final = "*"

_PATTERN_NAMES: Final = {
    PATTERN_ANY: "any",
    PATTERN_MATCH: "match",
    PATTERN_LITERAL: "literal",
    PATTERN_PREFIXED: "prefixed",
}

CreateAclsRequest: TypeAlias = (
    create_v1.CreateAclsRequest | create_v2.CreateAclsRequest | create_v3.CreateAclsRequest
)
CreateAclsResponse: TypeAlias = (
    create_v1.CreateAclsResponse | create_v2.CreateAclsResponse | create_v3.CreateAclsResponse
)
AclCreationResult: TypeAlias = (
    create_v1.response.AclCreationResult
    | create_v2.response.AclCreationResult
    | create_v3.response.AclCreationResult
)
DeleteAclsRequest: TypeAlias = (
    delete_v1.DeleteAclsRequest | delete_v2.DeleteAclsRequest | delete_v3.DeleteAclsRequest
)
DeleteAclsResponse: TypeAlias = (
    delete_v1.DeleteAclsResponse | delete_v2.DeleteAclsResponse | delete_v3.DeleteAclsResponse
)
DeleteAclsFilterResult: TypeAlias = (
    delete_v1.response.DeleteAclsFilterResult
    | delete_v2.response.DeleteAclsFilterResult
    | delete_v3.response.DeleteAclsFilterResult
)

_CREATE_REQUESTS: Final[tuple[type[CreateAclsRequest], ...]] = get_args(CreateAclsRequest)
_CREATE_RESPONSES: Final[tuple[type[CreateAclsResponse], ...]] = get_args(CreateAclsResponse)
_CREATE_RESULTS: Final[tuple[type[AclCreationResult], ...]] = get_args(AclCreationResult)
_DELETE_REQUESTS: Final[tuple[type[DeleteAclsRequest], ...]] = get_args(DeleteAclsRequest)
_DELETE_RESPONSES: Final[tuple[type[DeleteAclsResponse], ...]] = get_args(DeleteAclsResponse)
_DELETE_RESULTS: Final[tuple[type[DeleteAclsFilterResult], ...]] = get_args(DeleteAclsFilterResult)


@dataclass(frozen=True, slots=True)
class AclPattern:
    """What one item names: a binding's resource (a creation) or what a filter matches (a
    deletion; ``name`` None matches any name)."""

    resource_type: int
    name: str | None
    pattern_type: int
    deletes: bool

    def covers_topic(self, topic: str) -> bool:
        """Whether a binding it creates, or one it deletes, can apply to ``topic``."""
        types = (RESOURCE_TOPIC, RESOURCE_ANY) if self.deletes else (RESOURCE_TOPIC,)
        if self.resource_type not in types:
            return False
        name, pattern = self.name, self.pattern_type
        if name is None:
            return True
        literal = name in (topic, WILDCARD)
        prefixed = topic.startswith(name)
        if pattern == PATTERN_LITERAL:
            return literal
        if pattern == PATTERN_PREFIXED:
            return prefixed
        if self.deletes and pattern == PATTERN_ANY:
            return literal or prefixed
        # a MATCH filter deletes the wildcard binding, whatever its name; a creation of
        # another pattern type is invalid, and the broker refuses it
        return self.deletes and pattern == PATTERN_MATCH

    def describe(self) -> str:
        """``topic literal 'orders'``, as an audit event's resource name and in messages."""
        kind = {RESOURCE_ANY: "any", RESOURCE_TOPIC: "topic"}.get(
            self.resource_type, f"type {self.resource_type}"
        )
        pattern = _PATTERN_NAMES.get(self.pattern_type, f"pattern {self.pattern_type}")
        return f"{kind} {pattern} {'any name' if self.name is None else repr(self.name)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class AclRequest:
    api_key: int
    version: int
    patterns: tuple[AclPattern, ...]
    """One per item, in request order."""
    items: tuple[Entity, ...]
    """The request's creations or filters, as kio reads them."""
    payload: CreateAclsRequest | DeleteAclsRequest


def read_acl_request(header: RequestHeader, frame: bytes) -> AclRequest:
    """:raises Undecodable: for a malformed body or a version kio lacks."""
    if header.api_key == CREATE_ACLS:
        creates = decode_request_as(_CREATE_REQUESTS, header, frame)
        patterns = tuple(
            AclPattern(
                int(c.resource_type), str(c.resource_name), int(c.resource_pattern_type), False
            )
            for c in creates.creations
        )
        return AclRequest(
            api_key=CREATE_ACLS,
            version=header.api_version,
            patterns=patterns,
            items=tuple(creates.creations),
            payload=creates,
        )
    deletes = decode_request_as(_DELETE_REQUESTS, header, frame)
    patterns = tuple(
        AclPattern(
            int(f.resource_type_filter),
            None if f.resource_name_filter is None else str(f.resource_name_filter),
            int(f.pattern_type_filter),
            True,
        )
        for f in deletes.filters
    )
    return AclRequest(
        api_key=DELETE_ACLS,
        version=header.api_version,
        patterns=patterns,
        items=tuple(deletes.filters),
        payload=deletes,
    )


def acl_request_keeping(request: AclRequest, header: RequestHeader, keep: Collection[int]) -> bytes:
    """The request frame (no size prefix) with only the items at the ``keep`` indexes."""
    items = tuple(item for index, item in enumerate(request.items) if index in keep)
    field = "creations" if request.api_key == CREATE_ACLS else "filters"
    kept: Entity = replaced(request.payload, **{field: items})
    return encode_request(
        request.api_key, request.version, header.correlation_id, header.client_id, kept
    )[4:]


def acl_answer(
    request: AclRequest,
    correlation_id: int,
    local: Mapping[int, ItemError],
    broker_frame: bytes | None,
) -> bytes:
    """The response frame (no size prefix): one result per item, in request order, from
    ``local`` where given, else the broker's next (it answers the items it got in order)."""
    version = request.version
    broker_results: Sequence[Entity] = ()
    throttle: object = None
    top: dict[str, object] = {}
    if request.api_key == CREATE_ACLS:
        if broker_frame is not None:
            created = decode_response_as(_CREATE_RESPONSES, CREATE_ACLS, version, broker_frame)
            broker_results, throttle = created.results, created.throttle_time
        results = _merged(
            local, len(request.patterns), broker_results, schema_of(_CREATE_RESULTS, version), {}
        )
        top["results"] = results
        response_cls: type[Entity] = schema_of(_CREATE_RESPONSES, version)
    else:
        if broker_frame is not None:
            deleted = decode_response_as(_DELETE_RESPONSES, DELETE_ACLS, version, broker_frame)
            broker_results, throttle = deleted.filter_results, deleted.throttle_time
        results = _merged(
            local,
            len(request.patterns),
            broker_results,
            schema_of(_DELETE_RESULTS, version),
            {"matching_acls": ()},
        )
        top["filter_results"] = results
        response_cls = schema_of(_DELETE_RESPONSES, version)
    if throttle is not None:
        top["throttle_time"] = throttle
    payload = filled(response_cls, top)
    return response_header(correlation_id, request.api_key, version) + encode_body(payload)


def _merged(
    local: Mapping[int, ItemError],
    count: int,
    broker: Sequence[Entity],
    result_cls: type[Entity],
    extra: Mapping[str, object],
) -> tuple[Entity, ...]:
    from_broker = iter(broker)
    results: list[Entity] = []
    for index in range(count):
        mine = local.get(index)
        if mine is None:
            results.append(next(from_broker))
            continue
        fields = {
            "error_code": ErrorCode(mine.error_code),
            "error_message": mine.error_message,
            **extra,
        }
        results.append(filled(result_cls, fields))
    return tuple(results)
