"""Produce (API key 0), v3 to v13: what the record-validation handler reads and writes.

- :func:`produce_acks` reads only ``acks``, for the pass-through path; :func:`with_acks`
  writes it in place (the opt-in enforcement of a configured acks=-1).
  :func:`produce_topics` reads only the topic names, stepping over the records unread (the
  pass-through path counts every Produce in the audit summaries).
- :func:`read_produce` decodes the request with kio's schema and lists its partitions, each
  with its records field untouched (magic 2 batches, read with :mod:`protocol.records`).
- :func:`produce_request_keeping` re-encodes the request with only the partitions the
  gateway lets through; :func:`produce_answer` merges the gateway's own per-partition
  errors into the broker's answer to that reduced request, in the client's version.

v3 is where magic 2 batches and the transactional id start (Kafka 4 brokers take nothing
older). From v10 answers may hold leader endpoints (KIP-951 ``node_endpoints``): the merged
answer keeps the broker's, and the handler rewrites them (:mod:`protocol.node_endpoints`).
From v13 (KIP-516) topics are named by id: a partition's ``topic`` is then the id's string
form, and the handler resolves it to a name before judging.

Kafka answers each topic and partition once, whatever the request repeats; so does
:func:`produce_answer`.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from typing import Final, TypeAlias, get_args

from kio.schema.errors import ErrorCode
from kio.schema.produce import v3, v4, v5, v6, v7, v8, v9, v10, v11, v12, v13
from kio.schema.types import TopicName
from kio.serial.readers import read_compact_string_nullable, read_nullable_legacy_string
from kio.static.primitive import i32, i32Timedelta, i64

from .codec import (
    Undecodable,
    built,
    decode_request_as,
    decode_response_as,
    encode_request,
    encode_response,
    replaced,
    schema_of,
)
from .framing import DECODE_ERRORS, FrameRejected, RequestHeader, skip_tags, uvarint
from .results import ItemError
from .topic_admin import error_name
from .versions import VersionRange, is_flexible

PRODUCE: Final = 0
VERSIONS: Final = VersionRange(min_version=3, max_version=13)
"""The Produce versions this module decodes, re-encodes and answers."""

_LOG_START_OFFSET_SINCE: Final = 5
_RECORD_ERRORS_SINCE: Final = 8
"""From v8 (KIP-467) a partition answer carries ``record_errors`` and ``error_message``."""
_NODE_ENDPOINTS_SINCE: Final = 10
TOPIC_IDS_SINCE: Final = 13
"""From v13 (KIP-516) topics are named by ``topic_id``."""
_NO_OFFSET: Final = i64(-1)

_ACKS: Final = struct.Struct(">h")

ProduceRequest: TypeAlias = (
    v3.ProduceRequest
    | v4.ProduceRequest
    | v5.ProduceRequest
    | v6.ProduceRequest
    | v7.ProduceRequest
    | v8.ProduceRequest
    | v9.ProduceRequest
    | v10.ProduceRequest
    | v11.ProduceRequest
    | v12.ProduceRequest
    | v13.ProduceRequest
)
"""kio's request entity, in the versions carried (:data:`VERSIONS`)."""
ProduceResponse: TypeAlias = (
    v3.ProduceResponse
    | v4.ProduceResponse
    | v5.ProduceResponse
    | v6.ProduceResponse
    | v7.ProduceResponse
    | v8.ProduceResponse
    | v9.ProduceResponse
    | v10.ProduceResponse
    | v11.ProduceResponse
    | v12.ProduceResponse
    | v13.ProduceResponse
)
"""kio's response entity, in the versions carried."""
TopicProduceResponse: TypeAlias = (
    v3.response.TopicProduceResponse
    | v4.response.TopicProduceResponse
    | v5.response.TopicProduceResponse
    | v6.response.TopicProduceResponse
    | v7.response.TopicProduceResponse
    | v8.response.TopicProduceResponse
    | v9.response.TopicProduceResponse
    | v10.response.TopicProduceResponse
    | v11.response.TopicProduceResponse
    | v12.response.TopicProduceResponse
    | v13.response.TopicProduceResponse
)
PartitionProduceResponse: TypeAlias = (
    v3.response.PartitionProduceResponse
    | v4.response.PartitionProduceResponse
    | v5.response.PartitionProduceResponse
    | v6.response.PartitionProduceResponse
    | v7.response.PartitionProduceResponse
    | v8.response.PartitionProduceResponse
    | v9.response.PartitionProduceResponse
    | v10.response.PartitionProduceResponse
    | v11.response.PartitionProduceResponse
    | v12.response.PartitionProduceResponse
    | v13.response.PartitionProduceResponse
)
BatchIndexAndErrorMessage: TypeAlias = (
    v8.response.BatchIndexAndErrorMessage
    | v9.response.BatchIndexAndErrorMessage
    | v10.response.BatchIndexAndErrorMessage
    | v11.response.BatchIndexAndErrorMessage
    | v12.response.BatchIndexAndErrorMessage
    | v13.response.BatchIndexAndErrorMessage
)

_REQUESTS: Final[tuple[type[ProduceRequest], ...]] = get_args(ProduceRequest)
_RESPONSES: Final[tuple[type[ProduceResponse], ...]] = get_args(ProduceResponse)
_TOPIC_RESPONSES: Final[tuple[type[TopicProduceResponse], ...]] = get_args(TopicProduceResponse)
_PARTITION_RESPONSES: Final[tuple[type[PartitionProduceResponse], ...]] = get_args(
    PartitionProduceResponse
)
_RECORD_ERRORS: Final[tuple[type[BatchIndexAndErrorMessage], ...]] = get_args(
    BatchIndexAndErrorMessage
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionRecords:
    """One partition of a Produce request and its records field as the client sent it."""

    topic: str
    """The topic's name; from v13 its id's string form (:attr:`topic_id`)."""
    partition: int
    records: bytes | memoryview | None
    topic_id: uuid.UUID | None = None
    """v13 and later: the id the request names the topic by."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceView:
    """A decoded Produce request. ``payload`` is the kio entity."""

    version: int
    transactional_id: str | None
    acks: int
    timeout_ms: int
    partitions: tuple[PartitionRecords, ...]
    """In request order, repeats included."""
    payload: ProduceRequest

    @property
    def by_id(self) -> bool:
        """Whether topics are named by id (v13 and later)."""
        return self.version >= TOPIC_IDS_SINCE


_NULL_ID: Final = uuid.UUID(int=0)


def _topic_key(version: int, topic: object) -> str:
    """How a topic of the request or answer is named in the gateway's keys: its name, or from
    v13 its id's string form (the null id, which kio reads as None, as all zeros). ``topic``
    is a request's or an answer's topic entity of any version, whose field differs by version
    (``name`` or ``topic_id``): read by name."""
    if version >= TOPIC_IDS_SINCE:
        return str(getattr(topic, "topic_id", None) or _NULL_ID)
    return str(getattr(topic, "name", ""))


def produce_acks(header: RequestHeader, frame: bytes) -> int:
    """The ``acks`` of a Produce request (0 means the client expects no response).

    Reads only the transactional id in front of it (v3 and later).

    :raises FrameRejected: when the body is too short to hold it.
    """
    return int(_ACKS.unpack_from(frame, _acks_offset(header, frame))[0])


def with_acks(header: RequestHeader, frame: bytes, acks: int) -> bytes:
    """The request frame (no size prefix) with ``acks`` set, every other byte as it was.

    ``acks`` is a fixed-size field in front of the records, so it is written in place
    rather than re-encoding the request (and copying its records).

    :raises FrameRejected: when the body is too short to hold it.
    """
    offset = _acks_offset(header, frame)
    return frame[:offset] + _ACKS.pack(acks) + frame[offset + _ACKS.size :]


def _acks_offset(header: RequestHeader, frame: bytes) -> int:
    """Where ``acks`` is in the frame: behind the transactional id (v3 and later).

    :raises FrameRejected: when the body is too short to hold it.
    """
    offset = header.size
    try:
        if header.api_version >= 3:
            if is_flexible(PRODUCE, header.api_version):
                _, size = read_compact_string_nullable(frame, offset)
            else:
                _, size = read_nullable_legacy_string(frame, offset)
            offset += size
    except DECODE_ERRORS as exc:
        raise FrameRejected("bad_body", f"produce request has no readable acks: {exc}") from None
    if offset + _ACKS.size > len(frame):
        raise FrameRejected("bad_body", "produce request has no readable acks: too short")
    return offset


_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")


def produce_topics(header: RequestHeader, frame: bytes) -> tuple[str, ...]:
    """The topic names of a Produce request (v3 to v12), each once, in request order.

    Reads lengths and names only: the records of each partition are stepped over, never
    read or copied. Tagged fields (v9 and later) are stepped over too.

    :raises Undecodable: for a version outside :data:`VERSIONS`, one that names topics by id
        (v13: the names need the cluster), or a body that ends early.
    """
    if header.api_version not in VERSIONS or header.api_version >= TOPIC_IDS_SINCE:
        raise Undecodable(
            f"Produce v{header.api_version} names no topics (names are read in v3 to v12)"
        )
    try:
        if is_flexible(PRODUCE, header.api_version):
            return _flexible_topics(frame, _acks_offset(header, frame) + 6)
        return _legacy_topics(frame, _acks_offset(header, frame) + 6)
    except (struct.error, IndexError, UnicodeDecodeError, FrameRejected) as exc:
        raise Undecodable(f"produce request topics unreadable: {exc}") from None


def produce_partition_count(header: RequestHeader, frame: bytes, limit: int) -> int:
    """How many partition entries a Produce request (v3 to v13) holds, a topic entry with no
    partitions counting as one (it costs reading too, and a request of nothing but empty
    topics would otherwise count none), counted up to ``limit + 1`` and no further: a walk
    over lengths alone (records, names and ids stepped over), whose cost ``limit`` bounds
    whatever the frame holds. The count of a body that ends early is what was read before it
    ended (the reader refuses such a body).
    """
    if header.api_version not in VERSIONS:
        return 0
    try:
        offset = _acks_offset(header, frame) + 6
        if is_flexible(PRODUCE, header.api_version):
            by_id = header.api_version >= TOPIC_IDS_SINCE
            return _flexible_count(frame, offset, limit, by_id=by_id)
        return _legacy_count(frame, offset, limit)
    except FrameRejected:
        return 0


def _legacy_count(frame: bytes, offset: int, limit: int) -> int:
    count = 0
    try:
        (topics,) = _I32.unpack_from(frame, offset)
        offset += 4
        for _ in range(topics):
            (size,) = _I16.unpack_from(frame, offset)
            (partitions,) = _I32.unpack_from(frame, offset + 2 + max(size, 0))
            offset += 6 + max(size, 0)
            if partitions <= 0:
                count += 1
                if count > limit:
                    return count
            for _ in range(partitions):
                count += 1
                if count > limit:
                    return count
                (records,) = _I32.unpack_from(frame, offset + 4)
                offset += 8 + max(records, 0)
    except struct.error:
        pass
    return count


def _flexible_count(frame: bytes, offset: int, limit: int, *, by_id: bool) -> int:
    count = 0
    try:
        topics, offset = uvarint(frame, offset)
        for _ in range(topics - 1):
            if by_id:
                offset += 16
            else:
                size, offset = uvarint(frame, offset)
                offset += max(size - 1, 0)
            partitions, offset = uvarint(frame, offset)
            if partitions <= 1:  # compact: 0 null, 1 empty
                count += 1
                if count > limit:
                    return count
            for _ in range(partitions - 1):
                count += 1
                if count > limit:
                    return count
                records, offset = uvarint(frame, offset + 4)
                offset = skip_tags(frame, offset + max(records - 1, 0))
            offset = skip_tags(frame, offset)
    except (IndexError, FrameRejected):
        pass
    return count


def _legacy_topics(frame: bytes, offset: int) -> tuple[str, ...]:
    """v3-v8 from ``topic_data`` (behind acks and timeout_ms)."""
    names: dict[str, None] = {}
    (topics,) = _I32.unpack_from(frame, offset)
    offset += 4
    for _ in range(topics):
        (size,) = _I16.unpack_from(frame, offset)
        offset += 2
        if size < 0 or offset + size > len(frame):
            raise IndexError("topic name beyond the frame")
        names[frame[offset : offset + size].decode()] = None
        offset += size
        (partitions,) = _I32.unpack_from(frame, offset)
        offset += 4
        for _ in range(partitions):
            (records,) = _I32.unpack_from(frame, offset + 4)  # behind the partition index
            offset += 8 + max(records, 0)
    if offset > len(frame):
        raise IndexError("records beyond the frame")
    return tuple(names)


def _flexible_topics(frame: bytes, offset: int) -> tuple[str, ...]:
    """v9 from ``topic_data``: compact arrays and strings, tagged fields."""
    names: dict[str, None] = {}
    topics, offset = uvarint(frame, offset)
    for _ in range(topics - 1):
        size, offset = uvarint(frame, offset)
        if size < 1 or offset + size - 1 > len(frame):
            raise IndexError("topic name beyond the frame")
        names[frame[offset : offset + size - 1].decode()] = None
        offset += size - 1
        partitions, offset = uvarint(frame, offset)
        for _ in range(partitions - 1):
            records, offset = uvarint(frame, offset + 4)  # behind the partition index
            offset = skip_tags(frame, offset + max(records - 1, 0))
        offset = skip_tags(frame, offset)
    if offset > len(frame):
        raise IndexError("records beyond the frame")
    return tuple(names)


def read_produce(header: RequestHeader, frame: bytes) -> ProduceView:
    """Decode a Produce request frame (no size prefix) whose header is already parsed.

    :raises Undecodable: for a version outside :data:`VERSIONS` or a malformed body.
    :raises ValueError: for a header of another API (a caller's mistake).
    """
    if header.api_key != PRODUCE:
        raise ValueError(f"API key {header.api_key} is not Produce")
    if header.api_version not in VERSIONS:
        raise Undecodable(f"Produce v{header.api_version} is not carried (only v3 to v13)")
    payload = decode_request_as(_REQUESTS, header, frame)
    transactional_id = payload.transactional_id
    return ProduceView(
        version=header.api_version,
        transactional_id=None if transactional_id is None else str(transactional_id),
        acks=int(payload.acks),
        timeout_ms=payload.timeout // timedelta(milliseconds=1),
        partitions=tuple(
            PartitionRecords(
                topic=_topic_key(header.api_version, topic),
                partition=int(data.index),
                records=data.records,
                topic_id=getattr(topic, "topic_id", None),
            )
            for topic in payload.topic_data
            for data in topic.partition_data
        ),
        payload=payload,
    )


def produce_request_keeping(
    view: ProduceView, header: RequestHeader, keep: Collection[tuple[str, int]]
) -> bytes:
    """The request frame (no size prefix, the client's correlation id and client id kept)
    with only the partitions in ``keep``, in the client's version. Topics left with no
    partitions are dropped; records are carried byte for byte.

    When every partition is kept, forward the client's frame instead: this re-encodes.
    """
    wanted = frozenset(keep)
    topics = []
    for topic in view.payload.topic_data:
        key = _topic_key(view.version, topic)
        kept = tuple(data for data in topic.partition_data if (key, data.index) in wanted)
        if kept:
            topics.append(replaced(topic, partition_data=kept))
    payload = replaced(view.payload, topic_data=tuple(topics))
    frame = encode_request(PRODUCE, view.version, header.correlation_id, header.client_id, payload)
    return frame[4:]


def failed_partitions(version: int, response: bytes) -> list[str]:
    """Each partition a Produce answer (response frame, header included) reports an error
    for, as ``<topic>-<partition> (<ERROR>)``; the topic is its id's string form from v13.

    :raises Undecodable: when ``response`` does not decode in ``version``.
    """
    answer = decode_response_as(_RESPONSES, PRODUCE, version, response)
    return [
        f"{_topic_key(version, topic)}-{int(partition.index)} "
        f"({error_name(int(partition.error_code))})"
        for topic in answer.responses
        for partition in topic.partition_responses
        if int(partition.error_code) != 0
    ]


def produce_answer(
    view: ProduceView,
    correlation_id: int,
    local: Mapping[tuple[str, int], ItemError],
    broker_frame: bytes | None,
) -> bytes:
    """The response frame for the client (no size prefix, response header included), in the
    layout of the client's version.

    Every partition of the request is answered once, in request order, grouped by topic in
    the order topics first appear: from ``local`` if the gateway decided it, else from the
    broker's answer (``broker_frame``, the response to :func:`produce_request_keeping`'s
    request, or None when nothing was forwarded). A local error has base_offset,
    log_append_time and log_start_offset -1, as Kafka's errors do. The throttle time is the
    broker's, or 0 without a broker answer.

    :raises Undecodable: when ``broker_frame`` does not decode in the client's version.
    :raises KeyError: when a partition is neither in ``local`` nor in the broker's answer.
    :raises ValueError: for a local error code Kafka does not define.
    """
    schema = _response_schema(view.version)
    broker = (
        None
        if broker_frame is None
        else decode_response_as(_RESPONSES, PRODUCE, view.version, broker_frame)
    )
    from_broker: dict[tuple[str, int], PartitionProduceResponse] = {}
    if broker is not None:
        for topic_response in broker.responses:
            for partition_response in topic_response.partition_responses:
                from_broker[
                    (_topic_key(view.version, topic_response), int(partition_response.index))
                ] = partition_response
    answers: dict[str, dict[int, PartitionProduceResponse]] = {}
    for partition in view.partitions:
        topic_answers = answers.setdefault(partition.topic, {})
        if partition.partition in topic_answers:
            continue
        key = (partition.topic, partition.partition)
        if key in local:
            topic_answers[partition.partition] = _local_answer(
                schema, view.version, partition.partition, local[key]
            )
        elif key in from_broker:
            topic_answers[partition.partition] = from_broker[key]
        else:
            source = "no broker answer" if broker is None else "the broker's answer"
            raise KeyError(
                f"{partition.topic}-{partition.partition} is neither decided locally "
                f"nor in {source}"
            )
    throttle = broker.throttle_time if broker is not None else i32Timedelta.parse(timedelta(0))
    fields: dict[str, object] = {
        "responses": tuple(
            built(
                schema.topic,
                {
                    **_topic_field(view.version, name),
                    "partition_responses": tuple(partitions.values()),
                },
            )
            for name, partitions in answers.items()
        ),
        "throttle_time": throttle,
    }
    if broker is not None and view.version >= _NODE_ENDPOINTS_SINCE:
        # the leaders the broker names, rewritten to the gateway's by the handler
        fields["node_endpoints"] = getattr(broker, "node_endpoints", ())
    payload = built(schema.response, fields)
    return encode_response(correlation_id, PRODUCE, view.version, payload)


def _topic_field(version: int, key: str) -> dict[str, object]:
    if version >= TOPIC_IDS_SINCE:
        return {"topic_id": uuid.UUID(key)}
    return {"name": TopicName(key)}


@dataclass(frozen=True, slots=True, kw_only=True)
class _ResponseSchema:
    """kio's response entity classes for one Produce version."""

    response: type[ProduceResponse]
    topic: type[TopicProduceResponse]
    partition: type[PartitionProduceResponse]
    record_error: type[BatchIndexAndErrorMessage] | None
    """None before v8."""


@cache
def _response_schema(version: int) -> _ResponseSchema:
    return _ResponseSchema(
        response=schema_of(_RESPONSES, version),
        topic=schema_of(_TOPIC_RESPONSES, version),
        partition=schema_of(_PARTITION_RESPONSES, version),
        record_error=schema_of(_RECORD_ERRORS, version)
        if version >= _RECORD_ERRORS_SINCE
        else None,
    )


def _local_answer(
    schema: _ResponseSchema, version: int, partition: int, error: ItemError
) -> PartitionProduceResponse:
    fields: dict[str, object] = {
        "index": i32(partition),
        "error_code": ErrorCode(error.error_code),
        "base_offset": _NO_OFFSET,
        "log_append_time": None,  # written as -1
    }
    if version >= _LOG_START_OFFSET_SINCE:
        fields["log_start_offset"] = _NO_OFFSET
    record_error = schema.record_error
    if record_error is not None:  # v8 and later (_RECORD_ERRORS_SINCE)
        fields["record_errors"] = tuple(
            record_error(batch_index=i32(index), batch_index_error_message=message)
            for index, message in error.record_errors
        )
        fields["error_message"] = error.error_message
    return built(schema.partition, fields)
