"""CreatePartitions (v0-v3) and DeleteTopics (v0-v6): requests read into plain values,
reduced requests for the broker, and answers in the client's version.

Both are decoded and encoded with kio's schema for the version the client sent, and forwarded
in that same version, so no translation is needed, but for DeleteTopics v0 (Kafka 0.10.1's,
which Sarama sends before its 0.11.0.0; Kafka 4 takes v1 on): its request is v1's, its answer
v1's without the throttle time; it is read and sent to the broker as v1, as CreateTopics v0
and v1 are sent as v2, and answered in v0's layout. What changes with the version:

- CreatePartitions: v2 and v3 are flexible; every version has ``error_message``.
- DeleteTopics: v4 and later are flexible; v5 adds ``error_message`` to each result; v6 names
  each topic by name or by topic id (an id wins when both are set, as in Kafka) and returns
  both in each result.

Answers list one result per distinct topic, in request order: each either decided locally or
taken from the broker's answer.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Final, TypeAlias, get_args

from kio.schema.create_partitions import v0 as create_partitions_v0
from kio.schema.create_partitions import v1 as create_partitions_v1
from kio.schema.create_partitions import v2 as create_partitions_v2
from kio.schema.create_partitions import v3 as create_partitions_v3
from kio.schema.delete_topics import v1 as delete_topics_v1
from kio.schema.delete_topics import v2 as delete_topics_v2
from kio.schema.delete_topics import v3 as delete_topics_v3
from kio.schema.delete_topics import v4 as delete_topics_v4
from kio.schema.delete_topics import v5 as delete_topics_v5
from kio.schema.delete_topics import v6 as delete_topics_v6
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest as MetadataV12
from kio.schema.metadata.v12.response import MetadataResponse as MetadataResponseV12
from kio.schema.types import TopicName
from kio.static.primitive import i32Timedelta
from kio.static.protocol import Entity

from .addresses import METADATA
from .admin import InternalRequest
from .codec import (
    Undecodable,
    built,
    decode_request_as,
    decode_response_as,
    encode_body,
    encode_request,
    encode_response,
    replaced,
    schema_of,
)
from .framing import RequestHeader, response_header
from .results import ItemError
from .versions import DECODABLE, TAKEN, VersionRange

CREATE_PARTITIONS: Final = 37
DELETE_TOPICS: Final = 20
CREATE_PARTITIONS_VERSIONS: Final[VersionRange] = DECODABLE[CREATE_PARTITIONS]
DELETE_TOPICS_BROKER_MIN_VERSION: Final = DECODABLE[DELETE_TOPICS].min_version
"""The oldest DeleteTopics kio reads (v1, Kafka 4's oldest); v0 is read and forwarded as it."""
DELETE_TOPICS_VERSIONS: Final[VersionRange] = TAKEN[DELETE_TOPICS]
DELETE_TOPICS_ERROR_MESSAGE_VERSION: Final = 5
DELETE_TOPICS_TOPIC_ID_VERSION: Final = 6

CreatePartitionsRequest: TypeAlias = (
    create_partitions_v0.CreatePartitionsRequest
    | create_partitions_v1.CreatePartitionsRequest
    | create_partitions_v2.CreatePartitionsRequest
    | create_partitions_v3.CreatePartitionsRequest
)
"""kio's CreatePartitions request entity, v0 to v3."""
CreatePartitionsResponse: TypeAlias = (
    create_partitions_v0.CreatePartitionsResponse
    | create_partitions_v1.CreatePartitionsResponse
    | create_partitions_v2.CreatePartitionsResponse
    | create_partitions_v3.CreatePartitionsResponse
)
"""kio's CreatePartitions response entity, v0 to v3."""
CreatePartitionsTopicResult: TypeAlias = (
    create_partitions_v0.response.CreatePartitionsTopicResult
    | create_partitions_v1.response.CreatePartitionsTopicResult
    | create_partitions_v2.response.CreatePartitionsTopicResult
    | create_partitions_v3.response.CreatePartitionsTopicResult
)
DeleteTopicsRequest: TypeAlias = (
    delete_topics_v1.DeleteTopicsRequest
    | delete_topics_v2.DeleteTopicsRequest
    | delete_topics_v3.DeleteTopicsRequest
    | delete_topics_v4.DeleteTopicsRequest
    | delete_topics_v5.DeleteTopicsRequest
    | delete_topics_v6.DeleteTopicsRequest
)
"""kio's DeleteTopics request entity, v1 to v6."""
DeleteTopicsResponse: TypeAlias = (
    delete_topics_v1.DeleteTopicsResponse
    | delete_topics_v2.DeleteTopicsResponse
    | delete_topics_v3.DeleteTopicsResponse
    | delete_topics_v4.DeleteTopicsResponse
    | delete_topics_v5.DeleteTopicsResponse
    | delete_topics_v6.DeleteTopicsResponse
)
"""kio's DeleteTopics response entity, v1 to v6."""
DeletableTopicResult: TypeAlias = (
    delete_topics_v1.response.DeletableTopicResult
    | delete_topics_v2.response.DeletableTopicResult
    | delete_topics_v3.response.DeletableTopicResult
    | delete_topics_v4.response.DeletableTopicResult
    | delete_topics_v5.response.DeletableTopicResult
    | delete_topics_v6.response.DeletableTopicResult
)
DeleteTopicsEntry: TypeAlias = TopicName | delete_topics_v6.request.DeleteTopicState
"""A topic a DeleteTopics request names: by name before v6, a name or an id from v6."""

_CREATE_PARTITIONS_REQUESTS: Final[tuple[type[CreatePartitionsRequest], ...]] = get_args(
    CreatePartitionsRequest
)
_CREATE_PARTITIONS_RESPONSES: Final[tuple[type[CreatePartitionsResponse], ...]] = get_args(
    CreatePartitionsResponse
)
_CREATE_PARTITIONS_RESULTS: Final[tuple[type[CreatePartitionsTopicResult], ...]] = get_args(
    CreatePartitionsTopicResult
)
_DELETE_TOPICS_REQUESTS: Final[tuple[type[DeleteTopicsRequest], ...]] = get_args(
    DeleteTopicsRequest
)
_DELETE_TOPICS_RESPONSES: Final[tuple[type[DeleteTopicsResponse], ...]] = get_args(
    DeleteTopicsResponse
)
_DELETE_TOPICS_RESULTS: Final[tuple[type[DeletableTopicResult], ...]] = get_args(
    DeletableTopicResult
)


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
    payload: CreatePartitionsRequest


def read_create_partitions(header: RequestHeader, frame: bytes) -> CreatePartitions:
    """:raises Undecodable: for a malformed body or a version kio lacks."""
    payload = decode_request_as(_CREATE_PARTITIONS_REQUESTS, header, frame)
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
    payload = replaced(
        request.payload, topics=tuple(t for t in request.payload.topics if t.name in keep)
    )
    return _request_frame(CREATE_PARTITIONS, header, payload)


def read_create_partitions_response(
    request: CreatePartitions, frame: bytes
) -> CreatePartitionsResponse:
    """:raises Undecodable: when the broker's answer does not decode."""
    return decode_response_as(
        _CREATE_PARTITIONS_RESPONSES, CREATE_PARTITIONS, request.version, frame
    )


def create_partitions_answer(
    request: CreatePartitions,
    correlation_id: int,
    local: Mapping[str, ItemError],
    broker: CreatePartitionsResponse | None,
) -> bytes:
    """The response frame (no size prefix) for the client, in its version's layout.

    :raises KeyError: when a topic is neither in ``local`` nor in the broker's answer.
    """
    version = request.version
    result_cls = schema_of(_CREATE_PARTITIONS_RESULTS, version)
    from_broker: dict[str, CreatePartitionsTopicResult] = (
        {r.name: r for r in broker.results} if broker is not None else {}
    )
    results: list[CreatePartitionsTopicResult] = []
    for name in dict.fromkeys(t.name for t in request.topics):
        if name in local:
            mine = local[name]
            results.append(
                result_cls(
                    name=TopicName(name),
                    error_code=ErrorCode(mine.error_code),
                    error_message=mine.error_message,
                )
            )
        else:
            results.append(from_broker[name])
    payload = built(
        schema_of(_CREATE_PARTITIONS_RESPONSES, version),
        {"throttle_time": _throttle(broker), "results": tuple(results)},
    )
    return encode_response(correlation_id, CREATE_PARTITIONS, version, payload)


# --- DeleteTopics -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteTarget:
    """A topic a DeleteTopics request names: by ``topic_id`` (v6) or by ``name``.

    Equal targets are the same entry of the request; the answer has one result for each.
    """

    name: str | None
    topic_id: uuid.UUID | None

    @property
    def named_twice(self) -> bool:
        """A v6 entry with both a name and a topic id: Kafka answers it INVALID_REQUEST ("You
        may not specify both topic name and topic id."), and a broker that takes it may
        delete either topic."""
        return self.name is not None and self.topic_id is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteTopics:
    version: int
    targets: tuple[DeleteTarget, ...]
    payload: DeleteTopicsRequest


def read_delete_topics(header: RequestHeader, frame: bytes) -> DeleteTopics:
    """:raises Undecodable: for a malformed body, a version kio lacks, or a v6 entry with
    neither a name nor a topic id."""
    wire = header
    if header.api_version < DELETE_TOPICS_BROKER_MIN_VERSION:
        wire = dataclasses.replace(header, api_version=DELETE_TOPICS_BROKER_MIN_VERSION)
    payload = decode_request_as(_DELETE_TOPICS_REQUESTS, wire, frame)
    return DeleteTopics(
        version=header.api_version,
        targets=tuple(_target(entry) for entry in _entries(payload)),
        payload=payload,
    )


def delete_topics_for_broker(
    request: DeleteTopics, header: RequestHeader, keep: Collection[DeleteTarget]
) -> bytes:
    """The request frame (no size prefix) with only the entries whose targets are in ``keep``,
    each as the client wrote it (an id stays an id)."""
    entries = tuple(e for e in _entries(request.payload) if _target(e) in keep)
    field = "topics" if request.version >= DELETE_TOPICS_TOPIC_ID_VERSION else "topic_names"
    payload = replaced(request.payload, **{field: entries})
    version = delete_topics_broker_version(request)
    return _request_frame(DELETE_TOPICS, dataclasses.replace(header, api_version=version), payload)


def delete_topics_broker_version(request: DeleteTopics) -> int:
    """The version the broker is sent (v1 for a v0 client)."""
    return max(request.version, DELETE_TOPICS_BROKER_MIN_VERSION)


def is_legacy_delete_topics(request: DeleteTopics) -> bool:
    """A v0 request: sent to the broker as v1, its answer written in v0's layout."""
    return request.version < DELETE_TOPICS_BROKER_MIN_VERSION


def read_delete_topics_response(request: DeleteTopics, frame: bytes) -> DeleteTopicsResponse:
    """:raises Undecodable: when the broker's answer does not decode."""
    version = delete_topics_broker_version(request)
    return decode_response_as(_DELETE_TOPICS_RESPONSES, DELETE_TOPICS, version, frame)


def deleted(broker: DeleteTopicsResponse) -> tuple[frozenset[str], frozenset[uuid.UUID]]:
    """The names and topic ids the broker's DeleteTopics answer (from
    :func:`read_delete_topics_response`) reports as deleted."""
    ok = [r for r in broker.responses if int(r.error_code) == 0]
    return (
        frozenset(r.name for r in ok if r.name is not None),
        frozenset(t for r in ok if (t := _topic_id(r)) is not None),
    )


def _topic_id(result: DeletableTopicResult) -> uuid.UUID | None:
    """A result's topic id: v6 has one (None for Kafka's zero UUID), older versions none."""
    if isinstance(result, delete_topics_v6.response.DeletableTopicResult):
        return result.topic_id
    return None


def delete_topics_answer(
    request: DeleteTopics,
    correlation_id: int,
    local: Mapping[DeleteTarget, ItemError],
    broker: DeleteTopicsResponse | None,
    names: Mapping[DeleteTarget, str] = {},  # noqa: B006 - read only
) -> bytes:
    """The response frame (no size prefix) for the client, in its version's layout: before v5
    a local result carries only its error code, before v6 no topic id. ``names``: the topic
    name each target given by id was resolved to, for the local results.

    :raises KeyError: when a target is neither in ``local`` nor in the broker's answer.
    """
    version = delete_topics_broker_version(request)
    result_cls = schema_of(_DELETE_TOPICS_RESULTS, version)
    by_id: dict[uuid.UUID, DeletableTopicResult] = {}
    by_name: dict[str, DeletableTopicResult] = {}
    for r in broker.responses if broker is not None else ():
        topic_id = _topic_id(r)
        if topic_id is not None:
            by_id.setdefault(topic_id, r)
        if r.name is not None:
            by_name.setdefault(r.name, r)
    results: list[DeletableTopicResult] = []
    for target in dict.fromkeys(request.targets):
        if target in local:
            name = target.name if target.name is not None else names.get(target)
            results.append(_local_delete_result(result_cls, version, target, name, local[target]))
        elif target.topic_id is not None:
            results.append(by_id[target.topic_id])
        else:
            assert target.name is not None
            results.append(by_name[target.name])
    payload = built(
        schema_of(_DELETE_TOPICS_RESPONSES, version),
        {"throttle_time": _throttle(broker), "responses": tuple(results)},
    )
    if is_legacy_delete_topics(request):  # v0: v1's body without the leading throttle time
        body = encode_body(payload)[4:]
        return response_header(correlation_id, DELETE_TOPICS, request.version) + body
    return encode_response(correlation_id, DELETE_TOPICS, version, payload)


def _entries(payload: DeleteTopicsRequest) -> tuple[DeleteTopicsEntry, ...]:
    """The request's topics: ``topics`` from v6 (:data:`DELETE_TOPICS_TOPIC_ID_VERSION`),
    ``topic_names`` before."""
    if isinstance(payload, delete_topics_v6.DeleteTopicsRequest):
        return tuple(payload.topics)
    return tuple(payload.topic_names)


def _target(entry: DeleteTopicsEntry) -> DeleteTarget:
    """The entry's target; a v6 entry naming both a topic and a topic id keeps both (see
    :attr:`DeleteTarget.named_twice`)."""
    if isinstance(entry, str):
        return DeleteTarget(name=entry, topic_id=None)
    if entry.name is None and entry.topic_id is None:  # kio reads Kafka's zero UUID as None
        raise Undecodable("DeleteTopics entry has neither a topic name nor a topic id")
    return DeleteTarget(name=entry.name, topic_id=entry.topic_id)


def _local_delete_result(
    cls: type[DeletableTopicResult],
    version: int,
    target: DeleteTarget,
    name: str | None,
    result: ItemError,
) -> DeletableTopicResult:
    fields: dict[str, object] = {"name": name, "error_code": ErrorCode(result.error_code)}
    if version >= DELETE_TOPICS_ERROR_MESSAGE_VERSION:
        fields["error_message"] = result.error_message
    if version >= DELETE_TOPICS_TOPIC_ID_VERSION:
        fields["topic_id"] = target.topic_id
    elif name is None:
        raise ValueError("DeleteTopics before v6 needs a topic name in every result")
    return built(cls, fields)


# --- Metadata, to resolve topic ids ---------------------------------------------------------


def describe_all_topics() -> InternalRequest[MetadataResponseV12]:
    """Metadata v12 for every topic, with topic ids.

    Kafka does not look topics up by id in Metadata, so ids are resolved from the full list.
    """
    payload = MetadataV12(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    return InternalRequest(
        api_key=METADATA, api_version=12, payload=payload, response=MetadataResponseV12
    )


def read_topic_ids(payload: MetadataResponseV12) -> dict[uuid.UUID, str]:
    """topic id -> name, for the topics of a Metadata v10+ answer that have both."""
    return {
        t.topic_id: t.name
        for t in payload.topics
        if t.topic_id is not None and t.name is not None and int(t.error_code) == 0
    }


# --- shared -----------------------------------------------------------------------------------


def _request_frame(api_key: int, header: RequestHeader, payload: Entity) -> bytes:
    return encode_request(
        api_key, header.api_version, header.correlation_id, header.client_id, payload
    )[4:]


def _throttle(broker: CreatePartitionsResponse | DeleteTopicsResponse | None) -> i32Timedelta:
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
    "DELETE_TOPICS_BROKER_MIN_VERSION",
    "DELETE_TOPICS_VERSIONS",
    "CreatePartitions",
    "CreatePartitionsRequest",
    "CreatePartitionsResponse",
    "DeleteTarget",
    "DeleteTopics",
    "DeleteTopicsRequest",
    "DeleteTopicsResponse",
    "PartitionsIncrease",
    "create_partitions_answer",
    "create_partitions_for_broker",
    "delete_topics_answer",
    "delete_topics_broker_version",
    "delete_topics_for_broker",
    "describe_all_topics",
    "error_name",
    "is_legacy_delete_topics",
    "read_create_partitions",
    "read_create_partitions_response",
    "read_delete_topics",
    "read_delete_topics_response",
    "read_topic_ids",
]
