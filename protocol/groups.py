"""DeleteGroups, and the committed offsets of groups (OffsetFetch) the gateway asks for to
judge a deletion."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kio.schema.errors import ErrorCode
from kio.schema.offset_fetch.v8.request import OffsetFetchRequest, OffsetFetchRequestGroup
from kio.schema.types import GroupId

from .admin import InternalRequest
from .codec import (
    Payload,
    decode_request,
    decode_response,
    encode_body,
    encode_request,
    filled,
)
from .framing import RequestHeader, response_header
from .results import ItemError

DELETE_GROUPS: Final = 42
OFFSET_FETCH: Final = 9
_OFFSET_FETCH_VERSION: Final = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteGroups:
    version: int
    groups: tuple[str, ...]
    """In request order, repeats included."""
    payload: Payload


def read_delete_groups(header: RequestHeader, frame: bytes) -> DeleteGroups:
    """:raises Undecodable: for a malformed body or a version kio lacks."""
    payload = decode_request(header, frame)
    return DeleteGroups(
        version=header.api_version,
        groups=tuple(str(g) for g in payload.groups_names),
        payload=payload,
    )


def delete_groups_keeping(
    request: DeleteGroups, header: RequestHeader, keep: Collection[str]
) -> bytes:
    """The request frame (no size prefix) naming only the ``keep`` groups."""
    payload = dataclasses.replace(
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
    module: Any = importlib.import_module(f"kio.schema.delete_groups.v{request.version}.response")
    broker = (
        None
        if broker_frame is None
        else decode_response(DELETE_GROUPS, request.version, broker_frame)
    )
    from_broker = {str(r.group_id): r for r in broker.results} if broker is not None else {}
    results = []
    for group in dict.fromkeys(request.groups):
        mine = local.get(group)
        if mine is None:
            results.append(from_broker[group])
        else:
            results.append(
                module.DeletableGroupResult(
                    group_id=GroupId(group), error_code=ErrorCode(mine.error_code)
                )
            )
    top: dict[str, Any] = {"results": tuple(results)}
    if broker is not None:
        top["throttle_time"] = broker.throttle_time
    payload = filled(module.DeleteGroupsResponse, top)
    return response_header(correlation_id, DELETE_GROUPS, request.version) + encode_body(payload)


def committed_topics(groups: Collection[str]) -> InternalRequest:
    """OffsetFetch v8 of every topic each group has committed offsets for."""
    payload = OffsetFetchRequest(
        groups=tuple(OffsetFetchRequestGroup(group_id=GroupId(g), topics=None) for g in groups),
        require_stable=False,
    )
    return InternalRequest(api_key=OFFSET_FETCH, api_version=_OFFSET_FETCH_VERSION, payload=payload)


def read_committed_topics(payload: Payload) -> dict[str, tuple[int, tuple[str, ...]]]:
    """group -> (its error code, the topics it has committed offsets for)."""
    return {
        str(g.group_id): (int(g.error_code), tuple(str(t.name) for t in g.topics))
        for g in payload.groups
    }
