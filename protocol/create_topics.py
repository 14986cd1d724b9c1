"""CreateTopics in every version a client may send, v0 and v1 included.

kio ships v2 to v7. The v1 request has exactly v2's layout (v2 changed only the response),
and v0 is v1 without the trailing ``validate_only`` byte, so both are read with the v2
schema and sent to the broker as v2, which every broker since Kafka 0.11 takes (Kafka 4
takes nothing older). The v2 answer is translated back: v1 is v2 without the leading
throttle time; v0 also drops ``error_message``, leaving name and error code per topic.
"""

from __future__ import annotations

import dataclasses
import io
import struct
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Final, TypeAlias, get_args

from kio.schema.create_topics import v2, v3, v4, v5, v6, v7
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, TopicName
from kio.serial.writers import write_int16, write_int32, write_legacy_string
from kio.static.primitive import i8, i16, i32, i32Timedelta

from .codec import (
    built,
    decode_request_as,
    decode_response_as,
    encode_body,
    encode_request,
    replaced,
    schema_of,
)
from .framing import RequestHeader, frame_bytes, response_header
from .results import ItemError, Note
from .versions import DECODABLE, TAKEN, VersionRange

CREATE_TOPICS: Final = 19
VERSIONS: Final[VersionRange] = TAKEN[CREATE_TOPICS]
BROKER_MIN_VERSION: Final = DECODABLE[CREATE_TOPICS].min_version
CONFIGS_IN_ANSWER_SINCE: Final = 5
"""From v5 (KIP-525) an answer carries the topic's partitions, replication factor and configs."""

CreateTopicsRequest: TypeAlias = (
    v2.CreateTopicsRequest
    | v3.CreateTopicsRequest
    | v4.CreateTopicsRequest
    | v5.CreateTopicsRequest
    | v6.CreateTopicsRequest
    | v7.CreateTopicsRequest
)
"""kio's request entity, v2 to v7 (v0 and v1 are read as v2)."""
CreateTopicsResponse: TypeAlias = (
    v2.CreateTopicsResponse
    | v3.CreateTopicsResponse
    | v4.CreateTopicsResponse
    | v5.CreateTopicsResponse
    | v6.CreateTopicsResponse
    | v7.CreateTopicsResponse
)
"""kio's response entity, v2 to v7."""
CreatableTopic: TypeAlias = (
    v2.request.CreatableTopic
    | v3.request.CreatableTopic
    | v4.request.CreatableTopic
    | v5.request.CreatableTopic
    | v6.request.CreatableTopic
    | v7.request.CreatableTopic
)
"""One topic of kio's request entity, v2 to v7."""
CreatableTopicResult: TypeAlias = (
    v2.response.CreatableTopicResult
    | v3.response.CreatableTopicResult
    | v4.response.CreatableTopicResult
    | v5.response.CreatableTopicResult
    | v6.response.CreatableTopicResult
    | v7.response.CreatableTopicResult
)

_REQUESTS: Final[tuple[type[CreateTopicsRequest], ...]] = get_args(CreateTopicsRequest)
_RESPONSES: Final[tuple[type[CreateTopicsResponse], ...]] = get_args(CreateTopicsResponse)
_RESULTS: Final[tuple[type[CreatableTopicResult], ...]] = get_args(CreatableTopicResult)
CreatableTopicConfigs: TypeAlias = (
    v5.response.CreatableTopicConfigs
    | v6.response.CreatableTopicConfigs
    | v7.response.CreatableTopicConfigs
)
"""A config of a topic in a CreateTopics v5+ answer (KIP-525)."""
_CONFIGS: Final[tuple[type[CreatableTopicConfigs], ...]] = get_args(CreatableTopicConfigs)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicSpec:
    """One topic of a CreateTopics request, in Kafka's words; -1 means the broker default."""

    name: str
    num_partitions: int
    replication_factor: int
    assignments: tuple[tuple[int, tuple[int, ...]], ...]
    configs: tuple[tuple[str, str | None], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTopics:
    """A decoded CreateTopics request. ``payload`` is the kio entity (v2 or later)."""

    version: int
    topics: tuple[TopicSpec, ...]
    validate_only: bool
    timeout_ms: int
    payload: CreateTopicsRequest
    counts: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    """Topic -> the partition count and replication factor its -1 (the broker's default)
    was judged as: the broker is asked for those (:func:`request_for_broker`), not for its
    default, which may have changed since it was stated or read."""


def read_request(header: RequestHeader, frame: bytes) -> CreateTopics:
    """:raises Undecodable: for a malformed body or a version beyond v7."""
    wire = header
    body = frame
    if header.api_version < BROKER_MIN_VERSION:
        wire = dataclasses.replace(header, api_version=BROKER_MIN_VERSION)
        if header.api_version == 0:
            body = bytes(frame) + b"\x00"  # v0 has no validate_only: as v1 with false
    payload = decode_request_as(_REQUESTS, wire, body)
    return CreateTopics(
        version=header.api_version,
        topics=tuple(
            TopicSpec(
                name=t.name,
                num_partitions=t.num_partitions,
                replication_factor=t.replication_factor,
                assignments=tuple((a.partition_index, tuple(a.broker_ids)) for a in t.assignments),
                configs=tuple((c.name, c.value) for c in t.configs),
            )
            for t in payload.topics
        ),
        validate_only=bool(payload.validate_only),
        timeout_ms=int(payload.timeout.total_seconds() * 1000),
        payload=payload,
    )


def without_config(request: CreateTopics, key: str) -> tuple[CreateTopics, dict[str, str]]:
    """The request with config ``key`` taken out of every topic, and topic -> its value.

    For configs the gateway keeps itself, which a broker would refuse as unknown.
    """
    taken = {t.name: v for t in request.topics for k, v in t.configs if k == key and v is not None}
    if not any(k == key for t in request.topics for k, _ in t.configs):
        return request, taken
    payload = replaced(
        request.payload,
        topics=tuple(
            replaced(t, configs=tuple(c for c in t.configs if c.name != key))
            for t in request.payload.topics
        ),
    )
    return dataclasses.replace(request, payload=payload), taken


def broker_version(client_version: int) -> int:
    return max(client_version, BROKER_MIN_VERSION)


def needs_translation(request: CreateTopics) -> bool:
    return request.version < BROKER_MIN_VERSION


def request_for_broker(request: CreateTopics, header: RequestHeader, keep: Sequence[str]) -> bytes:
    """The request frame (no size prefix) carrying only the topics named in ``keep``, at the
    version the broker is sent (v2 for v0/v1 clients)."""
    wanted = set(keep)
    payload = replaced(
        request.payload,
        topics=tuple(
            _judged_counts(t, request.counts) for t in request.payload.topics if t.name in wanted
        ),
    )
    return encode_request(
        CREATE_TOPICS,
        broker_version(request.version),
        header.correlation_id,
        header.client_id,
        payload,
    )[4:]


def _judged_counts(topic: CreatableTopic, counts: Mapping[str, tuple[int, int]]) -> CreatableTopic:
    """``topic`` with the counts its -1 was judged as (none for manual assignments)."""
    judged = counts.get(topic.name)
    if judged is None or topic.assignments:
        return topic
    partitions, replication = judged
    fields: dict[str, object] = {}
    if topic.num_partitions == -1:
        fields["num_partitions"] = i32(partitions)
    if topic.replication_factor == -1:
        fields["replication_factor"] = i16(replication)
    return replaced(topic, **fields) if fields else topic


def read_broker_response(request: CreateTopics, frame: bytes) -> CreateTopicsResponse:
    """:raises Undecodable: when the broker's answer does not decode."""
    return decode_response_as(_RESPONSES, CREATE_TOPICS, broker_version(request.version), frame)


def answer(
    request: CreateTopics,
    correlation_id: int,
    local: Mapping[str, ItemError],
    broker: CreateTopicsResponse | None,
) -> bytes:
    """The response frame (no size prefix) for the client, in its version's layout.

    Topics come in request order: each from ``local`` if decided here, else from the
    broker's answer. Every topic of the request must be in one of the two. A :class:`Note`
    in ``local`` for a topic the broker answered puts its message on the broker's success.

    :raises KeyError: when a topic is in neither.
    """
    version = broker_version(request.version)
    from_broker: dict[str, CreatableTopicResult] = (
        {t.name: t for t in broker.topics} if broker is not None else {}
    )
    topic_cls = schema_of(_RESULTS, version)
    results: list[CreatableTopicResult] = []
    seen: set[str] = set()
    for spec in request.topics:
        if spec.name in seen:
            continue
        seen.add(spec.name)
        mine = local.get(spec.name)
        theirs = from_broker.get(spec.name)
        if isinstance(mine, Note) and theirs is not None:
            results.append(_noted(theirs, mine))
        elif mine is not None:
            results.append(_local_result(topic_cls, version, spec.name, mine))
        else:
            results.append(from_broker[spec.name])
    throttle = broker.throttle_time if broker is not None else i32Timedelta.parse(timedelta(0))
    payload = built(
        schema_of(_RESPONSES, version), {"throttle_time": throttle, "topics": tuple(results)}
    )
    if request.version >= BROKER_MIN_VERSION:
        return response_header(correlation_id, CREATE_TOPICS, version) + encode_body(payload)
    return response_header(correlation_id, CREATE_TOPICS, request.version) + _legacy_body(
        request.version, payload
    )


def _noted(result: CreatableTopicResult, note: Note) -> CreatableTopicResult:
    """The broker's result, with the note as its message when it is a success."""
    if int(result.error_code) != 0:
        return result
    return dataclasses.replace(result, error_message=note.error_message)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicConfig:
    """One config of a topic as a CreateTopics v5+ answer lists it (KIP-525)."""

    name: str
    value: str | None
    config_source: int
    read_only: bool = False
    is_sensitive: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class WouldCreate(ItemError):
    """A dry run (validate_only) the gateway answers itself with success, and what the topic
    would be created as: Kafka's controller answers a validate_only topic with the row it
    would answer the creation with (KIP-525), topic id included, and discards the rest."""

    num_partitions: int
    replication_factor: int
    configs: tuple[TopicConfig, ...]
    """Sorted by name, as Kafka lists them."""


def _local_result(
    cls: type[CreatableTopicResult], version: int, name: str, result: ItemError
) -> CreatableTopicResult:
    fields: dict[str, object] = {
        "name": name,
        "error_code": ErrorCode(result.error_code),
        "error_message": result.error_message,
    }
    if version >= 5:
        fields.update(
            topic_config_error_code=i16(0),
            num_partitions=i32(-1),
            replication_factor=i16(-1),
            configs=None,
        )
        if isinstance(result, WouldCreate):
            config_cls = schema_of(_CONFIGS, version)
            fields.update(
                num_partitions=i32(result.num_partitions),
                replication_factor=i16(result.replication_factor),
                configs=tuple(
                    config_cls(
                        name=c.name,
                        value=None if c.is_sensitive else c.value,
                        read_only=c.read_only,
                        config_source=i8(c.config_source),
                        is_sensitive=c.is_sensitive,
                    )
                    for c in result.configs
                ),
            )
    if version >= 7:
        # Kafka's controller gives a dry-run topic the random id it would have had
        fields["topic_id"] = uuid.uuid4() if isinstance(result, WouldCreate) else None
    return built(cls, fields)


def _legacy_body(version: int, payload: CreateTopicsResponse) -> bytes:
    """v1: v2's body without the leading throttle time. v0: name and error code only."""
    if version == 1:
        return encode_body(payload)[4:]
    buffer = io.BytesIO()
    write_int32(buffer, i32(len(payload.topics)))
    for topic in payload.topics:
        write_legacy_string(buffer, topic.name)
        write_int16(buffer, i16(int(topic.error_code)))
    return buffer.getvalue()


def encode_legacy_request(
    version: int, correlation_id: int, client_id: str | None, payload: v2.CreateTopicsRequest
) -> bytes:
    """A v0 or v1 request frame (size prefix included) from a v2 payload; for tests and
    tools that speak to old brokers."""
    full = encode_request(CREATE_TOPICS, BROKER_MIN_VERSION, correlation_id, client_id, payload)
    body = full[4:]
    body = body[:2] + struct.pack(">h", version) + body[4:]
    if version == 0:
        body = body[:-1]  # drop validate_only
    return frame_bytes(body)


def build_request(
    topics: Sequence[TopicSpec],
    *,
    validate_only: bool,
    timeout_ms: int,
    correlation_id: int,
    client_id: str,
    version: int = 4,
) -> bytes:
    """A CreateTopics request frame (size prefix included), for the gateway's own tools."""
    import importlib

    module = importlib.import_module(f"kio.schema.create_topics.v{version}.request")
    payload = module.CreateTopicsRequest(
        topics=tuple(
            module.CreatableTopic(
                name=TopicName(t.name),
                num_partitions=i32(t.num_partitions),
                replication_factor=i16(t.replication_factor),
                assignments=tuple(
                    module.CreatableReplicaAssignment(
                        partition_index=i32(p), broker_ids=tuple(BrokerId(b) for b in brokers)
                    )
                    for p, brokers in t.assignments
                ),
                configs=tuple(module.CreatableTopicConfig(name=k, value=v) for k, v in t.configs),
            )
            for t in topics
        ),
        timeout=i32Timedelta.parse(timedelta(milliseconds=timeout_ms)),
        validate_only=validate_only,
    )
    return encode_request(CREATE_TOPICS, version, correlation_id, client_id, payload)


def read_answer(version: int, frame: bytes) -> dict[str, ItemError]:
    """Topic -> its result, from a CreateTopics answer (frame without size prefix).

    :raises Undecodable:
    """
    payload = decode_response_as(_RESPONSES, CREATE_TOPICS, version, frame)
    return {
        t.name: ItemError(error_code=int(t.error_code), error_message=t.error_message)
        for t in payload.topics
    }
