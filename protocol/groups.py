"""DeleteGroups, and the committed offsets of groups (OffsetFetch) the gateway asks for to
judge a deletion."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Final, TypeAlias, get_args

from kio.schema.delete_groups import v0, v1, v2
from kio.schema.errors import ErrorCode
from kio.schema.offset_fetch.v8.request import OffsetFetchRequest, OffsetFetchRequestGroup
from kio.schema.offset_fetch.v8.response import OffsetFetchResponse as OffsetFetchResponseV8
from kio.schema.types import GroupId

from .admin import InternalRequest
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

DELETE_GROUPS: Final = 42
OFFSET_FETCH: Final = 9
_OFFSET_FETCH_VERSION: Final = 8

DeleteGroupsRequest: TypeAlias = (
    v0.DeleteGroupsRequest | v1.DeleteGroupsRequest | v2.DeleteGroupsRequest
)
"""kio's request entity, v0 to v2."""
DeleteGroupsResponse: TypeAlias = (
    v0.DeleteGroupsResponse | v1.DeleteGroupsResponse | v2.DeleteGroupsResponse
)
"""kio's response entity, v0 to v2."""
DeletableGroupResult: TypeAlias = (
    v0.response.DeletableGroupResult
    | v1.response.DeletableGroupResult
    | v2.response.DeletableGroupResult
)

_REQUESTS: Final[tuple[type[DeleteGroupsRequest], ...]] = get_args(DeleteGroupsRequest)
_RESPONSES: Final[tuple[type[DeleteGroupsResponse], ...]] = get_args(DeleteGroupsResponse)
_RESULTS: Final[tuple[type[DeletableGroupResult], ...]] = get_args(DeletableGroupResult)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteGroups:
    version: int
    groups: tuple[str, ...]
    """In request order, repeats included."""
    payload: DeleteGroupsRequest


def read_delete_groups(header: RequestHeader, frame: bytes) -> DeleteGroups:
    """:raises Undecodable: for a malformed body or a version kio lacks."""
    payload = decode_request_as(_REQUESTS, header, frame)
    return DeleteGroups(
        version=header.api_version,
        groups=tuple(str(g) for g in payload.groups_names),
        payload=payload,
    )


def delete_groups_keeping(
    request: DeleteGroups, header: RequestHeader, keep: Collection[str]
) -> bytes:
    """The request frame (no size prefix) naming only the ``keep`` groups."""
    payload = replaced(
        request.payload, groups_names=tuple(g for g in request.payload.groups_names if g in keep)
    )
    return encode_request(
        DELETE_GROUPS, request.version, header.correlation_id, header.client_id, payload
    )[4:]


def delete_groups_answer(
    request: DeleteGroups,
    correlation_id: int,
    local: Mapping[str, ItemError],
    broker_frame: bytes | None,
) -> bytes:
    """The response frame (no size prefix): one result per group, in request order, from
    ``local`` where given, else from the broker's answer.

    :raises KeyError: when a group is in neither.
    """
    result_cls = schema_of(_RESULTS, request.version)
    broker = (
        None
        if broker_frame is None
        else decode_response_as(_RESPONSES, DELETE_GROUPS, request.version, broker_frame)
    )
    from_broker: dict[str, DeletableGroupResult] = (
        {str(r.group_id): r for r in broker.results} if broker is not None else {}
    )
    results: list[DeletableGroupResult] = []
    for group in dict.fromkeys(request.groups):
        mine = local.get(group)
        if mine is None:
            results.append(from_broker[group])
        else:
            results.append(
                result_cls(group_id=GroupId(group), error_code=ErrorCode(mine.error_code))
            )
    top: dict[str, object] = {"results": tuple(results)}
    if broker is not None:
        top["throttle_time"] = broker.throttle_time
    payload = filled(schema_of(_RESPONSES, request.version), top)
    return response_header(correlation_id, DELETE_GROUPS, request.version) + encode_body(payload)


def committed_topics(groups: Collection[str]) -> InternalRequest[OffsetFetchResponseV8]:
    """OffsetFetch v8 of every topic each group has committed offsets for."""
    payload = OffsetFetchRequest(
        groups=tuple(OffsetFetchRequestGroup(group_id=GroupId(g), topics=None) for g in groups),
        require_stable=False,
    )
    return InternalRequest(
        api_key=OFFSET_FETCH,
        api_version=_OFFSET_FETCH_VERSION,
        payload=payload,
        response=OffsetFetchResponseV8,
    )


def read_committed_topics(payload: OffsetFetchResponseV8) -> dict[str, tuple[int, tuple[str, ...]]]:
    """group -> (its error code, the topics it has committed offsets for)."""
    return {
        str(g.group_id): (int(g.error_code), tuple(str(t.name) for t in g.topics))
        for g in payload.groups
    }
