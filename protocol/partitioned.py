"""Requests that name topic partitions, one shape for many APIs: read the (topic, partition)
items, write the request keeping some of them, and write the answer with the gateway's own
errors for the others merged into the broker's, in the client's version.

Each API's field names are a :class:`Shape`. A topic is named by its name, or from Fetch v13
by its id (the item's topic is then the id's string form). A partition the gateway answers
itself carries the error code (and message, where the version has one) and Kafka's "unknown"
value, -1, in every other number.
"""

from __future__ import annotations

import dataclasses
import importlib
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any, Final

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32
from kio.static.protocol import Entity

from .codec import (
    decode_request,
    decode_response,
    encode_body,
    encode_request,
    filled,
)
from .framing import RequestHeader, response_header
from .results import ItemError

Item = tuple[str, int]
"""(topic name, or a topic id's string form; partition index)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Shape:
    """Where an API keeps its topics and partitions, in the request and in the response."""

    module: str
    request_topics: str
    request_topic: str
    request_partitions: str
    request_index: str | None
    """None: the request's partitions are bare indexes."""
    response_topics: str
    response_topic: str
    response_partitions: str
    response_index: str
    topic_ids_since: int | None = None
    """The version from which topics are named by id (``topic_id`` fields)."""
    response_error: str = "error_code"
    """A response partition's error code field."""


SHAPES: Final[Mapping[int, Shape]] = {
    1: Shape(
        module="fetch",
        request_topics="topics",
        request_topic="topic",
        request_partitions="partitions",
        request_index="partition",
        response_topics="responses",
        response_topic="topic",
        response_partitions="partitions",
        response_index="partition_index",
        topic_ids_since=13,
    ),
    2: Shape(
        module="list_offsets",
        request_topics="topics",
        request_topic="name",
        request_partitions="partitions",
        request_index="partition_index",
        response_topics="topics",
        response_topic="name",
        response_partitions="partitions",
        response_index="partition_index",
    ),
    21: Shape(
        module="delete_records",
        request_topics="topics",
        request_topic="name",
        request_partitions="partitions",
        request_index="partition_index",
        response_topics="topics",
        response_topic="name",
        response_partitions="partitions",
        response_index="partition_index",
    ),
    23: Shape(
        module="offset_for_leader_epoch",
        request_topics="topics",
        request_topic="topic",
        request_partitions="partitions",
        request_index="partition",
        response_topics="topics",
        response_topic="topic",
        response_partitions="partitions",
        response_index="partition",
    ),
    24: Shape(  # v0-v3, the clients' form; the gateway carries no later version
        module="add_partitions_to_txn",
        request_topics="v3_and_below_topics",
        request_topic="name",
        request_partitions="partitions",
        request_index=None,
        response_topics="results_by_topic_v3_and_below",
        response_topic="name",
        response_partitions="results_by_partition",
        response_index="partition_index",
        response_error="partition_error_code",
    ),
    43: Shape(
        module="elect_leaders",
        request_topics="topic_partitions",
        request_topic="topic",
        request_partitions="partitions",
        request_index=None,
        response_topics="replica_election_results",
        response_topic="topic",
        response_partitions="partition_result",
        response_index="partition_id",
    ),
    45: Shape(
        module="alter_partition_reassignments",
        request_topics="topics",
        request_topic="name",
        request_partitions="partitions",
        request_index="partition_index",
        response_topics="responses",
        response_topic="name",
        response_partitions="partitions",
        response_index="partition_index",
    ),
    47: Shape(
        module="offset_delete",
        request_topics="topics",
        request_topic="name",
        request_partitions="partitions",
        request_index="partition_index",
        response_topics="topics",
        response_topic="name",
        response_partitions="partitions",
        response_index="partition_index",
    ),
    61: Shape(
        module="describe_producers",
        request_topics="topics",
        request_topic="name",
        request_partitions="partition_indexes",
        request_index=None,
        response_topics="topics",
        response_topic="name",
        response_partitions="partitions",
        response_index="partition_index",
    ),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Partitioned:
    """A decoded request of one of :data:`SHAPES`. ``payload`` is the kio entity."""

    api_key: int
    version: int
    items: tuple[Item, ...]
    """In request order, repeats included."""
    payload: Any
    """The kio request entity. Any: it is of one of :data:`SHAPES`' APIs in any version, read
    here by the field names of its :class:`Shape`, and the ElectLeaders and
    AlterPartitionReassignments handlers read their own API's fields off it."""

    @property
    def shape(self) -> Shape:
        return SHAPES[self.api_key]

    @property
    def by_id(self) -> bool:
        since = self.shape.topic_ids_since
        return since is not None and self.version >= since


def read(header: RequestHeader, frame: bytes) -> Partitioned:
    """:raises Undecodable: for a malformed body or a version kio lacks."""
    payload = decode_request(header, frame)
    request = Partitioned(
        api_key=header.api_key, version=header.api_version, items=(), payload=payload
    )
    return dataclasses.replace(request, items=tuple(_items(request)))


def _items(request: Partitioned) -> Iterator[Item]:
    shape = request.shape
    for topic in getattr(request.payload, shape.request_topics) or ():
        name = _topic_of(request, topic, shape.request_topic)
        for partition in getattr(topic, shape.request_partitions) or ():
            index = (
                partition
                if shape.request_index is None
                else getattr(partition, shape.request_index)
            )
            yield name, int(index)


def _index(shape: Shape, partition: Any) -> int:
    """A request partition's index (some APIs list bare indexes). Any: a bare index or an
    entity, as the Shape says."""
    return int(
        partition if shape.request_index is None else getattr(partition, shape.request_index)
    )


def _topic_of(request: Partitioned, entity: object, field: str) -> str:
    return str(getattr(entity, "topic_id" if request.by_id else field))


def topics(request: Partitioned) -> tuple[str, ...]:
    """Every topic the request names (names, or id strings), once each, in order."""
    return tuple(dict.fromkeys(topic for topic, _ in request.items))


def keeping(request: Partitioned, header: RequestHeader, keep: Collection[Item]) -> bytes:
    """The request frame (no size prefix) with only the ``keep`` partitions (and topics left
    with none dropped)."""
    shape = request.shape
    kept_topics = []
    for topic in getattr(request.payload, shape.request_topics) or ():
        name = _topic_of(request, topic, shape.request_topic)
        partitions = tuple(
            p
            for p in getattr(topic, shape.request_partitions) or ()
            if (name, _index(shape, p)) in keep
        )
        if partitions:
            kept_topics.append(dataclasses.replace(topic, **{shape.request_partitions: partitions}))
    payload = dataclasses.replace(request.payload, **{shape.request_topics: tuple(kept_topics)})
    if _opens_fetch_session(request) and any(item not in keep for item in request.items):
        # partitions are answered by the gateway, and that answer closes the client's session
        # (:func:`answer`): a sessionless fetch (epoch -1), so that the broker keeps no session
        # no client will use
        payload = dataclasses.replace(payload, session_epoch=i32(-1))
    return encode_request(
        request.api_key, request.version, header.correlation_id, header.client_id, payload
    )[4:]


def _opens_fetch_session(request: Partitioned) -> bool:
    """A Fetch (v7+) asking for a new session: a full fetch, session id 0 and epoch 0."""
    payload = request.payload
    return (
        getattr(payload, "session_id", None) == 0 and getattr(payload, "session_epoch", None) == 0
    )


def answer(
    request: Partitioned,
    correlation_id: int,
    local: Mapping[Item, ItemError],
    broker_frame: bytes | None,
    refused_topics: Callable[[str], ItemError | None] = lambda topic: None,
) -> bytes:
    """The response frame (no size prefix): each partition of the request once, in request
    order, grouped by topic: from ``local`` where given, else from the broker's answer;
    then each partition of the broker's answer the request did not name, in the broker's
    order (under its topic's group), refused as ``refused_topics`` says for its topic where
    it says so. A Fetch in an incremental session (KIP-227, v7+) is answered with every
    partition of the session that has news, named by that request or not: dropped, its
    records were lost to the client (the broker's session has moved past them).

    :raises Undecodable: when the broker's answer does not decode.
    :raises KeyError: when a partition is in neither.
    """
    shape = request.shape
    module = importlib.import_module(f"kio.schema.{shape.module}.v{request.version}.response")
    response_cls = _response_class(module)
    topic_cls, partition_cls = _nested_classes(response_cls, shape)
    broker = (
        None
        if broker_frame is None
        else decode_response(request.api_key, request.version, broker_frame)
    )
    from_broker = {} if broker is None else _partitions_of(request, broker)
    grouped: dict[str, dict[int, object]] = {}

    def refusal(index: int, error: ItemError) -> object:
        return filled(
            partition_cls,
            {
                shape.response_index: i32(index),
                shape.response_error: ErrorCode(error.error_code),
                "error_message": error.error_message,
            },
        )

    for name, index in request.items:
        group = grouped.setdefault(name, {})
        if index in group:
            continue
        error = local.get((name, index))
        group[index] = from_broker[(name, index)] if error is None else refusal(index, error)
    for (name, index), partition in from_broker.items():
        group = grouped.setdefault(name, {})
        if index not in group:
            error = refused_topics(name)
            group[index] = partition if error is None else refusal(index, error)
    topic_entries: tuple[Entity, ...] = tuple(
        filled(
            topic_cls,
            {
                **_topic_field(request, shape, name),
                shape.response_partitions: tuple(parts.values()),
            },
        )
        for name, parts in grouped.items()
    )
    top: dict[str, object] = {shape.response_topics: topic_entries}
    if broker is not None:
        for field in dataclasses.fields(response_cls):
            if field.name != shape.response_topics:
                top[field.name] = getattr(broker, field.name)
    else:
        top["error_code"] = ErrorCode.none
        top["error_message"] = None
    if local and "session_id" in top:
        # a Fetch in a session (KIP-227): the partitions answered here never reached the
        # broker's session, and a client keeps what it sent in its own, fetching a partition
        # again only when its state changes; session id 0 closes the session for the client
        # (Kafka's FetchSessionHandler), whose next fetch is a full one, naming every
        # partition again, for the gateway to look at again
        top["session_id"] = i32(0)
    payload: Entity = filled(response_cls, top)
    return response_header(correlation_id, request.api_key, request.version) + encode_body(payload)


def _partitions_of(request: Partitioned, broker: Any) -> dict[Item, object]:
    """Each partition of the broker's answer (decoded), in its order, by item."""
    shape = request.shape
    found: dict[Item, object] = {}
    for topic in getattr(broker, shape.response_topics):
        name = _topic_of(request, topic, shape.response_topic)
        for partition in getattr(topic, shape.response_partitions):
            found[(name, int(getattr(partition, shape.response_index)))] = partition
    return found


def refuse_all(request: Partitioned, correlation_id: int, error: ItemError) -> bytes:
    """An answer refusing the whole request: the top-level error where the version has one,
    and each named partition's otherwise."""
    shape = request.shape
    module = importlib.import_module(f"kio.schema.{shape.module}.v{request.version}.response")
    response_cls = _response_class(module)
    names = {f.name for f in dataclasses.fields(response_cls)}
    if "error_code" not in names:
        return answer(request, correlation_id, dict.fromkeys(request.items, error), None)
    payload: Entity = filled(
        response_cls,
        {
            "error_code": ErrorCode(error.error_code),
            "error_message": error.error_message,
            shape.response_topics: (),
        },
    )
    return response_header(correlation_id, request.api_key, request.version) + encode_body(payload)


def _topic_field(request: Partitioned, shape: Shape, name: str) -> dict[str, object]:
    if request.by_id:
        return {"topic_id": uuid.UUID(name)}
    return {shape.response_topic: name}


def _response_class(module: ModuleType) -> type:
    for value in vars(module).values():
        kind = str(getattr(value, "__type__", ""))
        if isinstance(value, type) and kind.endswith("response"):
            return value
    raise LookupError(f"no response entity in {module.__name__}")


@cache
def _nested_classes(response_cls: type, shape: Shape) -> tuple[type, type]:
    topic_cls = _element_class(response_cls, shape.response_topics)
    return topic_cls, _element_class(topic_cls, shape.response_partitions)


def _element_class(cls: type, field_name: str) -> type:
    """The entity class of a tuple field's elements, from kio's annotations."""
    import typing

    hints = typing.get_type_hints(cls)
    annotation = hints[field_name]
    for arg in typing.get_args(annotation):
        if isinstance(arg, type) and dataclasses.is_dataclass(arg):
            return arg
        for inner in typing.get_args(arg):
            if isinstance(inner, type) and dataclasses.is_dataclass(inner):
                return inner
    raise LookupError(f"{cls.__name__}.{field_name} holds no entity")


def election_type(request: Partitioned) -> int:
    """ElectLeaders: 0 preferred, 1 unclean (v0 has no field: preferred only)."""
    return int(getattr(request.payload, "election_type", 0))


def elects_every_partition(request: Partitioned) -> bool:
    """ElectLeaders with a null topic list: every partition of the cluster."""
    return request.payload.topic_partitions is None


def reassignments(request: Partitioned) -> dict[str, dict[int, tuple[int, ...]]]:
    """AlterPartitionReassignments: topic -> partition -> its new replicas (a null replica
    list cancels a reassignment and is left out)."""
    moves: dict[str, dict[int, tuple[int, ...]]] = {}
    for topic in request.payload.topics:
        for partition in topic.partitions:
            if partition.replicas is not None:
                moves.setdefault(str(topic.name), {})[int(partition.partition_index)] = tuple(
                    int(r) for r in partition.replicas
                )
    return moves
