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
from typing import Any, Final

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.serial import entity_reader
from kio.static.primitive import i16, i32, i32Timedelta

from .addresses import METADATA
from .admin import InternalRequest
from .codec import Payload, Undecodable, encode_body, encode_request
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
    payload: Payload

    @property
    def may_create(self) -> bool:
        """Whether the broker would create the topics it lacks among those named."""
        return self.allow_auto_topic_creation and not self.all_topics and bool(self.names)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientRequest(InternalRequest):
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
    try:
        payload, _ = _request_reader(header.api_version)(frame, header.size)
    except Exception as exc:  # noqa: BLE001 - kio raises many types for malformed input
        raise Undecodable(f"request body does not decode: {exc}") from None
    topics = payload.topics
    all_topics = topics is None or (header.api_version == 0 and not topics)
    names = tuple(t.name for t in topics or () if t.name is not None)
    allow = header.api_version < AUTO_CREATION_FLAG_VERSION or bool(
        payload.allow_auto_topic_creation
    )
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
) -> ClientRequest:
    """The client's request naming only the topics in ``keep`` (topics asked for by id stay),
    with auto-creation as given, in :func:`broker_version`."""
    version = broker_version(request.version)
    kept = tuple(t for t in request.payload.topics or () if t.name is None or t.name in keep)
    if request.version >= AUTO_CREATION_FLAG_VERSION:
        payload = dataclasses.replace(
            request.payload,
            topics=None if request.all_topics else kept,
            allow_auto_topic_creation=allow_auto_topic_creation,
        )
    else:
        module = _request_module(version)
        payload = module.MetadataRequest(
            topics=None
            if request.all_topics
            else tuple(module.MetadataRequestTopic(name=TopicName(t.name)) for t in kept),
            allow_auto_topic_creation=allow_auto_topic_creation,
        )
    return ClientRequest(
        api_key=METADATA, api_version=version, payload=payload, client_id=client_id
    )


def topic_errors(answer: Payload) -> dict[str, int]:
    """Topic name -> its error code, for every topic of a Metadata answer that has a name."""
    return {t.name: int(t.error_code) for t in answer.topics if t.name is not None}


def answer(
    request: MetadataRequest,
    correlation_id: int,
    broker: Payload,
    local: Mapping[str, ItemError],
) -> bytes:
    """The response frame (no size prefix) for the client, in its version's layout.

    ``broker`` is the answer to :func:`reissued` (addresses already the gateway's); each topic
    in ``local`` gets the gateway's entry instead of the broker's, in the broker's place, or
    after the broker's topics when the broker was not asked about it.
    """
    version = broker_version(request.version)
    module = _response_module(version)
    topics = []
    answered: set[str] = set()
    for entry in broker.topics:
        if not _asked_for(request, entry):
            continue  # Tansu answers an empty topic list with every topic
        if entry.name not in local:
            topics.append(entry)
        elif entry.name not in answered:
            topics.append(_local_topic(module, entry.name, local[entry.name]))
        answered.add(entry.name)
    for name in dict.fromkeys(request.names):
        if name in local and name not in answered:
            topics.append(_local_topic(module, name, local[name]))
    payload = dataclasses.replace(broker, topics=tuple(topics))
    if request.version != version:
        payload = _as_version(payload, _response_module(request.version))
    return response_header(correlation_id, METADATA, request.version) + encode_body(payload)


def _asked_for(request: MetadataRequest, entry: Payload) -> bool:
    if request.all_topics or entry.name in request.names:
        return True
    ids = {t.topic_id for t in request.payload.topics or () if getattr(t, "topic_id", None)}
    return getattr(entry, "topic_id", None) in ids


def _local_topic(module: ModuleType, name: str, result: ItemError) -> Payload:
    """Kafka's entry for a topic it does not describe (no error message: Metadata has none)."""
    cls = module.MetadataResponseTopic
    fields: dict[str, Any] = {
        "error_code": ErrorCode(result.error_code),
        "name": TopicName(name),
        "partitions": (),
    }
    if "topic_id" in {f.name for f in dataclasses.fields(cls)}:
        fields["topic_id"] = ZERO_TOPIC_ID
    return cls(**fields)


def _as_version(entity: Payload, module: ModuleType) -> Payload:
    """``entity`` (of a later version) as the same entity of ``module``'s version: the fields
    that version has, nested entities converted alike. Only for older versions whose fields
    the later one all has (v0-v3 from v4)."""
    cls = getattr(module, type(entity).__name__)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        value = getattr(entity, field.name)
        if isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
            value = tuple(_as_version(item, module) for item in value)
        values[field.name] = value
    return cls(**values)


@cache
def _request_reader(version: int) -> Any:
    return entity_reader(load_request_schema(METADATA, version))


@cache
def _request_module(version: int) -> ModuleType:
    return importlib.import_module(f"kio.schema.metadata.v{version}.request")


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
) -> ClientRequest:
    """A CreateTopics request for ``names``, each with these counts and no configs: what the
    broker's own auto-creation asks its controller for, with the counts the policies judged."""
    module = importlib.import_module(f"kio.schema.create_topics.v{CREATE_TOPICS_VERSION}.request")
    payload = module.CreateTopicsRequest(
        topics=tuple(
            module.CreatableTopic(
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
        client_id=client_id,
    )


def created(answer: Payload) -> dict[str, ItemError]:
    """Topic -> its result, from the answer to :func:`create_topics`."""
    return {
        t.name: ItemError(error_code=int(t.error_code), error_message=t.error_message)
        for t in answer.topics
    }
