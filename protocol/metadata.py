"""Metadata requests and answers in every version kio ships, for the gateway's checks of the
topic names in them and of the topics they would make the broker create.

A Metadata request that names topics asks the broker to create those it lacks
(``auto.create.topics.enable``): v0-v3 always do, v4 and later when
``allow_auto_topic_creation`` is set. The gateway reissues such a request itself, at v4 or later
(v4 is the first version that can turn auto-creation off, and its answer has v3's layout), and
writes the client's answer in the client's version: a v0-v3 answer is the v4 one without the
fields the older version lacks.

Topics the gateway answers itself (an illegal name, a denied creation) get Kafka's entry for a
topic it does not describe: the error code, the name, no partitions, the zero topic id.
"""

from __future__ import annotations

import dataclasses
import importlib
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from types import ModuleType
from typing import Final, TypeAlias, get_args

from kio.schema.create_topics.v4.request import CreatableTopic as CreatableTopicV4
from kio.schema.create_topics.v4.request import CreateTopicsRequest as CreateTopicsRequestV4
from kio.schema.create_topics.v4.response import CreateTopicsResponse as CreateTopicsResponseV4
from kio.schema.errors import ErrorCode
from kio.schema.metadata import v0 as metadata_v0
from kio.schema.metadata import v1 as metadata_v1
from kio.schema.metadata import v2 as metadata_v2
from kio.schema.metadata import v3 as metadata_v3
from kio.schema.metadata import v4 as metadata_v4
from kio.schema.metadata import v5 as metadata_v5
from kio.schema.metadata import v6 as metadata_v6
from kio.schema.metadata import v7 as metadata_v7
from kio.schema.metadata import v8 as metadata_v8
from kio.schema.metadata import v9 as metadata_v9
from kio.schema.metadata import v10 as metadata_v10
from kio.schema.metadata import v11 as metadata_v11
from kio.schema.metadata import v12 as metadata_v12
from kio.schema.metadata import v13 as metadata_v13
from kio.schema.types import TopicName
from kio.serial import entity_reader
from kio.serial.readers import Reader
from kio.static.primitive import i16, i32, i32Timedelta
from kio.static.protocol import Entity

from .addresses import METADATA, MetadataResponse
from .admin import InternalRequest, ResponseT
from .codec import (
    Undecodable,
    built,
    check_array_lengths,
    encode_body,
    encode_request,
    replaced,
    schema_of,
)
from .framing import RequestHeader, response_header
from .results import ItemError
from .versions import DECODABLE, VersionRange

VERSIONS: Final[VersionRange] = DECODABLE[METADATA]
AUTO_CREATION_FLAG_VERSION: Final = 4
"""The first Metadata version with ``allow_auto_topic_creation``; v0-v3 always create."""

CREATE_TOPICS: Final = 19
CREATE_TOPICS_VERSION: Final = 4
"""The CreateTopics version the gateway creates topics with (Kafka 2.0 and later, Tansu)."""

ZERO_TOPIC_ID: Final = uuid.UUID(int=0)

MetadataRequestEntity: TypeAlias = (
    metadata_v0.MetadataRequest
    | metadata_v1.MetadataRequest
    | metadata_v2.MetadataRequest
    | metadata_v3.MetadataRequest
    | metadata_v4.MetadataRequest
    | metadata_v5.MetadataRequest
    | metadata_v6.MetadataRequest
    | metadata_v7.MetadataRequest
    | metadata_v8.MetadataRequest
    | metadata_v9.MetadataRequest
    | metadata_v10.MetadataRequest
    | metadata_v11.MetadataRequest
    | metadata_v12.MetadataRequest
    | metadata_v13.MetadataRequest
)
"""kio's Metadata request entity, any version (``MetadataRequest`` here is the decoded
request)."""
MetadataResponseTopic: TypeAlias = (
    metadata_v0.response.MetadataResponseTopic
    | metadata_v1.response.MetadataResponseTopic
    | metadata_v2.response.MetadataResponseTopic
    | metadata_v3.response.MetadataResponseTopic
    | metadata_v4.response.MetadataResponseTopic
    | metadata_v5.response.MetadataResponseTopic
    | metadata_v6.response.MetadataResponseTopic
    | metadata_v7.response.MetadataResponseTopic
    | metadata_v8.response.MetadataResponseTopic
    | metadata_v9.response.MetadataResponseTopic
    | metadata_v10.response.MetadataResponseTopic
    | metadata_v11.response.MetadataResponseTopic
    | metadata_v12.response.MetadataResponseTopic
    | metadata_v13.response.MetadataResponseTopic
)

_REQUESTS: Final[tuple[type[MetadataRequestEntity], ...]] = get_args(MetadataRequestEntity)
_RESPONSES: Final[tuple[type[MetadataResponse], ...]] = get_args(MetadataResponse)
_RESPONSE_TOPICS: Final[tuple[type[MetadataResponseTopic], ...]] = get_args(MetadataResponseTopic)
_ALWAYS_CREATING: Final = (
    metadata_v0.MetadataRequest,
    metadata_v1.MetadataRequest,
    metadata_v2.MetadataRequest,
    metadata_v3.MetadataRequest,
)
"""The versions before :data:`AUTO_CREATION_FLAG_VERSION`, which always ask for
auto-creation."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataRequest:
    """A decoded Metadata request. ``payload`` is the kio entity of the client's version."""

    version: int
    names: tuple[str, ...]
    """The topics named, in request order, repeats included; topics asked for by id are not
    here."""
    all_topics: bool
    """The request asks for every topic (null topics, or an empty list in v0)."""
    allow_auto_topic_creation: bool
    """What the broker reads: v0-v3 ask for auto-creation always, v4 and later say so."""
    payload: MetadataRequestEntity

    @property
    def may_create(self) -> bool:
        """Whether the broker would create the topics it lacks among those named."""
        return self.allow_auto_topic_creation and not self.all_topics and bool(self.names)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientRequest(InternalRequest[ResponseT]):
    """A client's request as the gateway reissues it: sent under the client's own client id,
    so the broker's logs and quotas see the client."""

    client_id: str | None

    def frame(self, correlation_id: int) -> bytes:
        return encode_request(
            self.api_key, self.api_version, correlation_id, self.client_id, self.payload
        )[4:]


def read_request(header: RequestHeader, frame: bytes) -> MetadataRequest:
    """The request as Kafka reads it: bytes after the body are ignored, as Kafka's parser
    ignores them (librdkafka 2.x sends three after a v12 request for every topic).

    :raises Undecodable: for a malformed body or a version kio lacks.
    """
    if header.api_version not in VERSIONS:
        raise Undecodable(f"Metadata v{header.api_version} is not decodable")
    check_array_lengths(header, frame)
    try:
        payload, _ = _request_reader(header.api_version)(frame, header.size)
    except Exception as exc:  # noqa: BLE001 - kio raises many types for malformed input
        raise Undecodable(f"request body does not decode: {exc}") from None
    topics = payload.topics
    all_topics = topics is None or (header.api_version == 0 and not topics)
    names = tuple(t.name for t in topics or () if t.name is not None)
    allow = isinstance(payload, _ALWAYS_CREATING) or bool(payload.allow_auto_topic_creation)
    return MetadataRequest(
        version=header.api_version,
        names=names,
        all_topics=all_topics,
        allow_auto_topic_creation=allow,
        payload=payload,
    )


def broker_version(client_version: int) -> int:
    """The version the gateway reissues a request in: the client's, v4 at least."""
    return max(client_version, AUTO_CREATION_FLAG_VERSION)


def reissued(
    request: MetadataRequest,
    client_id: str | None,
    *,
    keep: Collection[str],
    allow_auto_topic_creation: bool,
) -> ClientRequest[MetadataResponse]:
    """The client's request naming only the topics in ``keep`` (topics asked for by id stay),
    with auto-creation as given, in :func:`broker_version`."""
    version = broker_version(request.version)
    payload: MetadataRequestEntity
    if isinstance(request.payload, _ALWAYS_CREATING):  # reissued as v4
        payload = metadata_v4.MetadataRequest(
            topics=None
            if request.all_topics
            else tuple(
                metadata_v4.request.MetadataRequestTopic(name=TopicName(t.name))
                for t in request.payload.topics or ()
                if t.name in keep
            ),
            allow_auto_topic_creation=allow_auto_topic_creation,
        )
    else:
        kept = tuple(t for t in request.payload.topics or () if t.name is None or t.name in keep)
        payload = replaced(
            request.payload,
            topics=None if request.all_topics else kept,
            allow_auto_topic_creation=allow_auto_topic_creation,
        )
    return ClientRequest(
        api_key=METADATA,
        api_version=version,
        payload=payload,
        response=schema_of(_RESPONSES, version),
        client_id=client_id,
    )


def topic_errors(answer: MetadataResponse) -> dict[str, int]:
    """Topic name -> its error code, for every topic of a Metadata answer that has a name."""
    return {t.name: int(t.error_code) for t in answer.topics if t.name is not None}


def answer(
    request: MetadataRequest,
    correlation_id: int,
    broker: MetadataResponse,
    local: Mapping[str, ItemError],
) -> bytes:
    """The response frame (no size prefix) for the client, in its version's layout.

    ``broker`` is the answer to :func:`reissued` (addresses already the gateway's); each topic
    in ``local`` gets the gateway's entry instead of the broker's, in the broker's place, or
    after the broker's topics when the broker was not asked about it.
    """
    version = broker_version(request.version)
    topics: list[MetadataResponseTopic] = []
    answered: set[str] = set()
    for entry in broker.topics:
        if not _asked_for(request, entry):
            continue  # Tansu answers an empty topic list with every topic
        named = entry.name  # None for a topic asked for by id that the broker does not know
        if named is None or named not in local:
            topics.append(entry)
        elif named not in answered:
            topics.append(_local_topic(version, named, local[named]))
        if named is not None:
            answered.add(named)
    for name in dict.fromkeys(request.names):
        if name in local and name not in answered:
            topics.append(_local_topic(version, name, local[name]))
    payload: Entity = replaced(broker, topics=tuple(topics))
    if request.version != version:
        payload = _as_version(payload, _response_module(request.version))
    return response_header(correlation_id, METADATA, request.version) + encode_body(payload)


def _asked_for(request: MetadataRequest, entry: MetadataResponseTopic) -> bool:
    if request.all_topics or entry.name in request.names:
        return True
    ids = {i for t in request.payload.topics or () if (i := getattr(t, "topic_id", None))}
    return getattr(entry, "topic_id", None) in ids


def _local_topic(version: int, name: str, result: ItemError) -> MetadataResponseTopic:
    """Kafka's entry for a topic it does not describe (no error message: Metadata has none)."""
    cls = schema_of(_RESPONSE_TOPICS, version)
    fields: dict[str, object] = {
        "error_code": ErrorCode(result.error_code),
        "name": TopicName(name),
        "partitions": (),
    }
    if "topic_id" in {f.name for f in dataclasses.fields(cls)}:
        fields["topic_id"] = ZERO_TOPIC_ID
    return built(cls, fields)


def _as_version(entity: Entity, module: ModuleType) -> Entity:
    """``entity`` (of a later version) as the same entity of ``module``'s version: the fields
    that version has, nested entities converted alike. Only for older versions whose fields
    the later one all has (v0-v3 from v4)."""
    cls: type[Entity] = getattr(module, type(entity).__name__)
    values: dict[str, object] = {}
    for field in dataclasses.fields(cls):
        value = getattr(entity, field.name)  # any field of any entity: read by name
        if isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
            value = tuple(_as_version(item, module) for item in value)
        values[field.name] = value
    return built(cls, values)


@cache
def _request_reader(version: int) -> Reader[MetadataRequestEntity]:
    return entity_reader(schema_of(_REQUESTS, version))


@cache
def _response_module(version: int) -> ModuleType:
    return importlib.import_module(f"kio.schema.metadata.v{version}.response")


# --- the creation the broker would make ---------------------------------------------------------


def create_topics(
    names: Sequence[str],
    *,
    num_partitions: int,
    replication_factor: int,
    timeout_ms: int,
    client_id: str | None,
) -> ClientRequest[CreateTopicsResponseV4]:
    """A CreateTopics request for ``names``, each with these counts and no configs: what the
    broker's own auto-creation asks its controller for, with the counts the policies judged."""
    payload = CreateTopicsRequestV4(
        topics=tuple(
            CreatableTopicV4(
                name=TopicName(name),
                num_partitions=i32(num_partitions),
                replication_factor=i16(replication_factor),
                assignments=(),
                configs=(),
            )
            for name in names
        ),
        timeout=i32Timedelta.parse(timedelta(milliseconds=timeout_ms)),
        validate_only=False,
    )
    return ClientRequest(
        api_key=CREATE_TOPICS,
        api_version=CREATE_TOPICS_VERSION,
        payload=payload,
        response=CreateTopicsResponseV4,
        client_id=client_id,
    )


def created(answer: CreateTopicsResponseV4) -> dict[str, ItemError]:
    """Topic -> its result, from the answer to :func:`create_topics`."""
    return {
        t.name: ItemError(error_code=int(t.error_code), error_message=t.error_message)
        for t in answer.topics
    }
