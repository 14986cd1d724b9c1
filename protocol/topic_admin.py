"""CreatePartitions (v0-v3) and DeleteTopics (v1-v6): requests read into plain values,
reduced requests for the broker, and answers in the client's version.

Both are decoded and encoded with kio's schema for the version the client sent, and forwarded
in that same version, so no translation is needed. What changes with the version:

- CreatePartitions: v2 and v3 are flexible; every version has ``error_message``.
- DeleteTopics: v4 and later are flexible; v5 adds ``error_message`` to each result; v6 names
  each topic by name or by topic id (an id wins when both are set, as in Kafka) and returns
  both in each result.

Answers list one result per distinct topic, in request order: each either decided locally or
taken from the broker's answer.
"""

from __future__ import annotations

import dataclasses
import importlib
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest as MetadataV12
from kio.static.primitive import i32Timedelta

from .addresses import METADATA
from .admin import InternalRequest
from .codec import (
    Payload,
    Undecodable,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from .framing import RequestHeader
from .results import ItemError
from .versions import DECODABLE, VersionRange

CREATE_PARTITIONS: Final = 37
DELETE_TOPICS: Final = 20
CREATE_PARTITIONS_VERSIONS: Final[VersionRange] = DECODABLE[CREATE_PARTITIONS]
DELETE_TOPICS_VERSIONS: Final[VersionRange] = DECODABLE[DELETE_TOPICS]
DELETE_TOPICS_ERROR_MESSAGE_VERSION: Final = 5
DELETE_TOPICS_TOPIC_ID_VERSION: Final = 6


# --- CreatePartitions -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionsIncrease:
    """One topic of a CreatePartitions request: the new total ``count`` and, when the client
    places them, the replicas of each new partition (in partition order)."""

    name: str
    count: int
    assignments: tuple[tuple[int, ...], ...] | None


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatePartitions:
    version: int
    topics: tuple[PartitionsIncrease, ...]
    validate_only: bool
    payload: Payload


def read_create_partitions(header: RequestHeader, frame: bytes) -> CreatePartitions:
    """:raises Undecodable: for a malformed body or a version kio lacks."""
    payload = decode_request(header, frame)
    return CreatePartitions(
        version=header.api_version,
        topics=tuple(
            PartitionsIncrease(
                name=t.name,
                count=int(t.count),
                assignments=None
                if t.assignments is None
                else tuple(tuple(int(b) for b in a.broker_ids) for a in t.assignments),
            )
            for t in payload.topics
        ),
        validate_only=bool(payload.validate_only),
        payload=payload,
    )


def create_partitions_for_broker(
    request: CreatePartitions, header: RequestHeader, keep: Collection[str]
) -> bytes:
    """The request frame (no size prefix) with only the topics named in ``keep``."""
    payload = dataclasses.replace(
        request.payload, topics=tuple(t for t in request.payload.topics if t.name in keep)
    )
    return _request_frame(CREATE_PARTITIONS, header, payload)


def read_create_partitions_response(request: CreatePartitions, frame: bytes) -> Payload:
    """:raises Undecodable: when the broker's answer does not decode."""
    return decode_response(CREATE_PARTITIONS, request.version, frame)


def create_partitions_answer(
    request: CreatePartitions,
    correlation_id: int,
    local: Mapping[str, ItemError],
    broker: Payload | None,
) -> bytes:
    """The response frame (no size prefix) for the client, in its version's layout.

    :raises KeyError: when a topic is neither in ``local`` nor in the broker's answer.
    """
    version = request.version
    result_cls = _nested("create_partitions", version, "CreatePartitionsTopicResult")
    from_broker = {r.name: r for r in broker.results} if broker is not None else {}
    results = []
    for name in dict.fromkeys(t.name for t in request.topics):
        if name in local:
            mine = local[name]
            results.append(
                result_cls(
                    name=name,
                    error_code=ErrorCode(mine.error_code),
                    error_message=mine.error_message,
                )
            )
        else:
            results.append(from_broker[name])
    schema: Any = load_response_schema(CREATE_PARTITIONS, version)
    payload = schema(throttle_time=_throttle(broker), results=tuple(results))
    return encode_response(correlation_id, CREATE_PARTITIONS, version, payload)


# --- DeleteTopics -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteTarget:
    """A topic a DeleteTopics request names: by ``topic_id`` (v6) or else by ``name``.

    Equal targets are the same entry of the request; the answer has one result for each.
    """

    name: str | None
    topic_id: uuid.UUID | None


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteTopics:
    version: int
    targets: tuple[DeleteTarget, ...]
    payload: Payload


def read_delete_topics(header: RequestHeader, frame: bytes) -> DeleteTopics:
    """:raises Undecodable: for a malformed body, a version kio lacks, or a v6 entry with
    neither a name nor a topic id."""
    payload = decode_request(header, frame)
    return DeleteTopics(
        version=header.api_version,
        targets=tuple(_target(entry) for entry in _entries(header.api_version, payload)),
        payload=payload,
    )


def delete_topics_for_broker(
    request: DeleteTopics, header: RequestHeader, keep: Collection[DeleteTarget]
) -> bytes:
    """The request frame (no size prefix) with only the entries whose targets are in ``keep``,
    each as the client wrote it (an id stays an id)."""
    entries = tuple(e for e in _entries(request.version, request.payload) if _target(e) in keep)
    field = "topics" if request.version >= DELETE_TOPICS_TOPIC_ID_VERSION else "topic_names"
    payload = dataclasses.replace(request.payload, **{field: entries})
    return _request_frame(DELETE_TOPICS, header, payload)


def read_delete_topics_response(request: DeleteTopics, frame: bytes) -> Payload:
    """:raises Undecodable: when the broker's answer does not decode."""
    return decode_response(DELETE_TOPICS, request.version, frame)


def deleted(broker: Payload) -> tuple[frozenset[str], frozenset[uuid.UUID]]:
    """The names and topic ids the broker's DeleteTopics answer (from
    :func:`read_delete_topics_response`) reports as deleted."""
    ok = [r for r in broker.responses if int(r.error_code) == 0]
    return (
        frozenset(r.name for r in ok if r.name is not None),
        frozenset(t for r in ok if (t := getattr(r, "topic_id", None)) is not None),
    )


def delete_topics_answer(
    request: DeleteTopics,
    correlation_id: int,
    local: Mapping[DeleteTarget, ItemError],
    broker: Payload | None,
    names: Mapping[DeleteTarget, str] = {},  # noqa: B006 - read only
) -> bytes:
    """The response frame (no size prefix) for the client, in its version's layout: before v5
    a local result carries only its error code, before v6 no topic id. ``names``: the topic
    name each target given by id was resolved to, for the local results.

    :raises KeyError: when a target is neither in ``local`` nor in the broker's answer.
    """
    version = request.version
    result_cls = _nested("delete_topics", version, "DeletableTopicResult")
    by_id: dict[uuid.UUID, Payload] = {}
    by_name: dict[str, Payload] = {}
    for r in broker.responses if broker is not None else ():
        topic_id = getattr(r, "topic_id", None)
        if topic_id is not None:
            by_id.setdefault(topic_id, r)
        if r.name is not None:
            by_name.setdefault(r.name, r)
    results = []
    for target in dict.fromkeys(request.targets):
        if target in local:
            name = target.name if target.name is not None else names.get(target)
            results.append(_local_delete_result(result_cls, version, target, name, local[target]))
        elif target.topic_id is not None:
            results.append(by_id[target.topic_id])
        else:
            assert target.name is not None
            results.append(by_name[target.name])
    schema: Any = load_response_schema(DELETE_TOPICS, version)
    payload = schema(throttle_time=_throttle(broker), responses=tuple(results))
    return encode_response(correlation_id, DELETE_TOPICS, version, payload)


def _entries(version: int, payload: Payload) -> tuple[Any, ...]:
    if version >= DELETE_TOPICS_TOPIC_ID_VERSION:
        return tuple(payload.topics)
    return tuple(payload.topic_names)


def _target(entry: Any) -> DeleteTarget:
    if isinstance(entry, str):
        return DeleteTarget(name=entry, topic_id=None)
    if entry.topic_id is not None:  # kio reads Kafka's zero UUID as None
        return DeleteTarget(name=None, topic_id=entry.topic_id)
    if entry.name is None:
        raise Undecodable("DeleteTopics entry has neither a topic name nor a topic id")
    return DeleteTarget(name=entry.name, topic_id=None)


def _local_delete_result(
    cls: type, version: int, target: DeleteTarget, name: str | None, result: ItemError
) -> Payload:
    fields: dict[str, object] = {"name": name, "error_code": ErrorCode(result.error_code)}
    if version >= DELETE_TOPICS_ERROR_MESSAGE_VERSION:
        fields["error_message"] = result.error_message
    if version >= DELETE_TOPICS_TOPIC_ID_VERSION:
        fields["topic_id"] = target.topic_id
    elif name is None:
        raise ValueError("DeleteTopics before v6 needs a topic name in every result")
    return cls(**fields)


# --- Metadata, to resolve topic ids ---------------------------------------------------------


def describe_all_topics() -> InternalRequest:
    """Metadata v12 for every topic, with topic ids.

    Kafka does not look topics up by id in Metadata, so ids are resolved from the full list.
    """
    payload = MetadataV12(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    return InternalRequest(api_key=METADATA, api_version=12, payload=payload)


def read_topic_ids(payload: Payload) -> dict[uuid.UUID, str]:
    """topic id -> name, for the topics of a Metadata v10+ answer that have both."""
    return {
        t.topic_id: t.name
        for t in payload.topics
        if t.topic_id is not None and t.name is not None and int(t.error_code) == 0
    }


# --- shared -----------------------------------------------------------------------------------


def _request_frame(api_key: int, header: RequestHeader, payload: Payload) -> bytes:
    return encode_request(
        api_key, header.api_version, header.correlation_id, header.client_id, payload
    )[4:]


def _nested(module: str, version: int, name: str) -> type:
    response = importlib.import_module(f"kio.schema.{module}.v{version}.response")
    cls: type = getattr(response, name)
    return cls


def _throttle(broker: Payload | None) -> Any:
    if broker is not None:
        return broker.throttle_time
    return i32Timedelta.parse(timedelta(0))


def error_name(code: int) -> str:
    """Kafka's name for an error code (``UNKNOWN_TOPIC_OR_PARTITION``), for messages."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error {code}"


__all__ = [
    "CREATE_PARTITIONS",
    "CREATE_PARTITIONS_VERSIONS",
    "DELETE_TOPICS",
    "DELETE_TOPICS_VERSIONS",
    "CreatePartitions",
    "DeleteTarget",
    "DeleteTopics",
    "PartitionsIncrease",
    "create_partitions_answer",
    "create_partitions_for_broker",
    "delete_topics_answer",
    "delete_topics_for_broker",
    "describe_all_topics",
    "error_name",
    "read_create_partitions",
    "read_create_partitions_response",
    "read_delete_topics",
    "read_delete_topics_response",
    "read_topic_ids",
]
