"""kio-backed decode and encode of request and response bodies.

The gateway calls these only for the APIs it inspects or rewrites. Payloads are kio entities,
typed: each module next to this one names its API's entities (a union of kio's class of each
version it takes, such as ``create_topics.CreateTopicsRequest``) and decodes to them with
:func:`decode_request_as` / :func:`decode_response_as`. ``gateway/`` may hold the entities
those modules return but never imports kio, and ``policies/`` never sees them.
"""

from __future__ import annotations

import dataclasses
import io
import struct
from collections.abc import Callable, Mapping
from datetime import timedelta
from functools import cache, partial
from typing import Any, ClassVar, Final, Protocol, TypeVar

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)
from kio.serial.readers import Reader
from kio.serial.writers import Writer
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64
from kio.static.protocol import Entity, RequestPayload, ResponsePayload

from .framing import (
    FrameRejected,
    RequestHeader,
    frame_bytes,
    response_header,
    split_response,
    uvarint,
)
from .versions import DECODABLE, is_flexible


class ApiEntity(Entity, Protocol):
    """A kio entity of an API (a request, a response, or an entity nested in one)."""

    __api_key__: ClassVar[i16]


E = TypeVar("E", bound=Entity)
A = TypeVar("A", bound=ApiEntity)
T = TypeVar("T")


class Undecodable(Exception):
    """A body the gateway must inspect but cannot decode: the caller refuses the request."""


def can_decode(api_key: int, api_version: int) -> bool:
    supported = DECODABLE.get(api_key)
    return supported is not None and api_version in supported


@cache
def _request_reader(api_key: int, api_version: int) -> Reader[RequestPayload]:
    return entity_reader(load_request_schema(api_key, api_version))


@cache
def _response_reader(api_key: int, api_version: int) -> Reader[ResponsePayload]:
    return entity_reader(load_response_schema(api_key, api_version))


# Any: each entity type maps to a writer of that type, which no one dict type can say.
_writers: dict[type[Entity], Writer[Any]] = {}


def _writer(entity_type: type[E]) -> Writer[E]:
    writer = _writers.get(entity_type)
    if writer is None:
        writer = _writers[entity_type] = entity_writer(entity_type)
    return writer


def _decode(reader: Reader[T], frame: bytes, offset: int, what: str) -> T:
    try:
        payload, size = reader(frame, offset)
    except Exception as exc:  # noqa: BLE001 - kio raises many types for malformed input
        raise Undecodable(f"{what} does not decode: {exc}") from None
    if offset + size != len(frame):
        raise Undecodable(f"{what} has {len(frame) - offset - size} trailing bytes")
    return payload


def decode_request(header: RequestHeader, frame: bytes) -> RequestPayload:
    """Decode the body of a request frame whose header is already parsed, for any API: the
    modules of each API narrow it to their own entities (:func:`decode_request_as`).

    :raises Undecodable: when kio has no schema for the version or the body is malformed.
    """
    if not can_decode(header.api_key, header.api_version):
        raise Undecodable(f"API key {header.api_key} version {header.api_version} is not decodable")
    check_array_lengths(header, frame)
    reader = _request_reader(header.api_key, header.api_version)
    return _decode(reader, frame, header.size, "request body")


# --- array lengths, checked before kio reads them ------------------------------------------
#
# kio's reader makes room for a whole array before it reads the first element: a compact
# array length of 2^32 (five bytes) asks for 32 GiB at once, and the failed allocation aborts
# the process, which no exception handler sees. Kafka refuses an array longer than the bytes
# that remain (its generated readers: "Tried to allocate a collection of size ..."), so the
# body is walked first by the same schema, lengths only, and such an array refused.


def check_array_lengths(header: RequestHeader, frame: bytes) -> None:
    """Refuse a request body holding an array longer than the bytes behind its length, before
    kio reads it (see above); call it before any kio reader of a client's request.

    :raises Undecodable: for such an array, or a body too malformed to walk.
    """
    try:
        _request_walker(header.api_key, header.api_version)(frame, header.size)
    except (IndexError, struct.error) as exc:
        raise Undecodable(f"request body does not decode: {exc}") from None


Step = Callable[[bytes, int], int]
"""Steps over one field at an offset of the frame: the offset behind it."""

_FIXED_SIZES: Final = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "float64": 8,
    "uuid": 16,
}
_I8: Final = struct.Struct(">b")
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")


@cache
def _request_walker(api_key: int, api_version: int) -> Step:
    return _walker(load_request_schema(api_key, api_version))


@cache
def _walker(entity: type[Entity]) -> Step:
    """Steps over one ``entity`` (its fields, then its tagged fields when flexible).

    :raises IndexError: for an array longer than the bytes behind its length, or a varint
        that does not read.
    """
    flexible = bool(entity.__flexible__)
    steps: list[Step] = []
    tagged: dict[int, Step] = {}
    fixed = 0  # fixed-size fields in a row are one step
    for entity_field in dataclasses.fields(entity):
        tag = entity_field.metadata.get("tag")
        if tag is not None:
            tagged[int(tag)] = _field_step(entity_field, flexible)
            continue
        size = _fixed_size(entity_field)
        if size is not None:
            fixed += size
            continue
        if fixed:
            steps.append(partial(_fixed, fixed))
            fixed = 0
        steps.append(_field_step(entity_field, flexible))
    if fixed:
        steps.append(partial(_fixed, fixed))

    if flexible:
        steps.append(partial(_tags, tagged))

    def walk(frame: bytes, offset: int) -> int:
        for step in steps:
            offset = step(frame, offset)
        return offset

    return walk


def _tags(tagged: Mapping[int, Step], frame: bytes, offset: int) -> int:
    """Steps over a flexible struct's tagged fields, walking those of ``tagged`` (kio reads
    them) and skipping the others by their size."""
    if frame[offset] == 0:  # no tagged fields: nearly always
        return offset + 1
    count, offset = uvarint(frame, offset)
    for _ in range(count):
        tag, offset = uvarint(frame, offset)
        size, offset = uvarint(frame, offset)
        known = tagged.get(tag)
        if known is not None:
            known(frame, offset)
        offset += size
    return offset


def _fixed_size(entity_field: dataclasses.Field[Any]) -> int | None:
    """The bytes a field of a fixed-size type (not an array of them) always takes."""
    if "kafka_type" not in entity_field.metadata:
        return None
    if classify_field(entity_field).is_array:
        return None
    return _FIXED_SIZES.get(entity_field.metadata["kafka_type"])


def _field_step(entity_field: dataclasses.Field[Any], flexible: bool) -> Step:
    kind = classify_field(entity_field)
    if isinstance(kind, EntityField):
        inner = _walker(kind.type_)
        if not is_optional(entity_field):
            return inner

        def nullable_struct(frame: bytes, offset: int) -> int:
            if _I8.unpack_from(frame, offset)[0] < 0:
                return offset + 1
            return inner(frame, offset + 1)

        return nullable_struct
    if isinstance(kind, EntityTupleField):
        return _array(_walker(kind.type_), None, flexible)
    kafka_type = entity_field.metadata["kafka_type"]
    size = _FIXED_SIZES.get(kafka_type)
    element: Step
    if size is not None:
        element = partial(_fixed, size)
    elif kafka_type == "string":
        element = _compact_sized if flexible else partial(_legacy_sized, _I16)
    elif kafka_type in ("bytes", "records"):
        element = _compact_sized if flexible else partial(_legacy_sized, _I32)
    else:
        raise TypeError(f"no step over a {kafka_type} field ({entity_field.name})")
    if isinstance(kind, PrimitiveTupleField):
        return _array(element, size, flexible)
    return element


def _fixed(size: int, frame: bytes, offset: int) -> int:
    return offset + size


def _compact_sized(frame: bytes, offset: int) -> int:
    length = frame[offset]
    if length < 0x80:  # one byte: shorter than 127
        return offset + max(length, 1)
    length, offset = uvarint(frame, offset)
    return offset + max(length - 1, 0)


def _legacy_sized(prefix: struct.Struct, frame: bytes, offset: int) -> int:
    length: int = prefix.unpack_from(frame, offset)[0]
    return offset + prefix.size + max(length, 0)


def _array(element: Step, size: int | None, flexible: bool) -> Step:
    """Steps over an array of ``element`` (``size`` bytes each, where fixed)."""

    def array(frame: bytes, offset: int) -> int:
        if flexible:
            encoded, offset = uvarint(frame, offset)
            count = encoded - 1
        else:
            count = _I32.unpack_from(frame, offset)[0]
            offset += _I32.size
        if count < 0:
            return offset  # null
        if count > len(frame) - offset:
            raise IndexError(
                f"an array of {count} elements in the {len(frame) - offset} bytes left"
            )
        if size is not None:
            return offset + count * size
        for _ in range(count):
            offset = element(frame, offset)
        return offset

    return array


def decode_response(api_key: int, api_version: int, frame: bytes) -> ResponsePayload:
    """Decode a response frame (without size prefix) to its body entity, for any API (see
    :func:`decode_response_as`).

    :raises Undecodable: for a version kio lacks or a malformed body.
    """
    if not can_decode(api_key, api_version):
        raise Undecodable(f"API key {api_key} version {api_version} is not decodable")
    try:
        _, offset = split_response(api_key, api_version, frame)
    except FrameRejected as exc:
        raise Undecodable(str(exc)) from None
    return _decode(_response_reader(api_key, api_version), frame, offset, "response body")


def decode_request_as(schemas: tuple[type[E], ...], header: RequestHeader, frame: bytes) -> E:
    """:func:`decode_request`, typed as one of ``schemas`` (an API's entities, one per version).

    :raises Undecodable: as :func:`decode_request`, or for an entity not in ``schemas``.
    """
    return _one_of(schemas, decode_request(header, frame))


def decode_response_as(
    schemas: tuple[type[E], ...], api_key: int, api_version: int, frame: bytes
) -> E:
    """:func:`decode_response`, typed as one of ``schemas``.

    :raises Undecodable: as :func:`decode_response`, or for an entity not in ``schemas``.
    """
    return _one_of(schemas, decode_response(api_key, api_version, frame))


def _one_of(schemas: tuple[type[E], ...], payload: Entity) -> E:
    if not isinstance(payload, schemas):
        raise Undecodable(f"{type(payload).__module__}.{type(payload).__name__} is not taken here")
    return payload


def schema_of(schemas: tuple[type[A], ...], version: int, api_key: int | None = None) -> type[A]:
    """The entity of ``version`` among ``schemas`` (one per version of an API), and of
    ``api_key`` where they are of two APIs.

    :raises LookupError: when none is.
    """
    for schema in schemas:
        if schema.__version__ == version and api_key in (None, schema.__api_key__):
            return schema
    raise LookupError(f"no entity of version {version} among {schemas}")


def built(schema: type[E], fields: Mapping[str, object]) -> E:
    """An entity of a version picked at run time. Its fields differ from version to version,
    so the dataclass checks them when it is built, not mypy."""
    return schema(**fields)


def replaced(entity: E, /, **changes: object) -> E:
    """``dataclasses.replace`` for an entity typed as a union of versions, which mypy checks
    ``replace`` against as the intersection of their fields (nothing fits): the dataclass
    checks the fields when it is built."""
    return dataclasses.replace(entity, **changes)


def encode_body(payload: Entity) -> bytes:
    buffer = io.BytesIO()
    _writer(type(payload))(buffer, payload)
    return buffer.getvalue()


def encode_response(correlation_id: int, api_key: int, api_version: int, payload: Entity) -> bytes:
    """A response frame (header and body, no size prefix) in the layout of ``api_version``."""
    return response_header(correlation_id, api_key, api_version) + encode_body(payload)


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, payload: Entity
) -> bytes:
    """A whole request frame, size prefix included."""
    header_type = RequestHeaderV2 if is_flexible(api_key, api_version) else RequestHeaderV1
    header = header_type(
        request_api_key=i16(api_key),
        request_api_version=i16(api_version),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    return frame_bytes(encode_body(header), encode_body(payload))


_NUMBERS: Final = {"int8": i8, "int16": i16, "int32": i32, "int64": i64}


def filled(cls: type[E], given: Mapping[str, object]) -> E:
    """An entity of ``cls`` with the ``given`` fields it has, and for every other field
    without a default Kafka's "unknown": -1, null, empty."""
    values: dict[str, object] = {}
    for field in dataclasses.fields(cls):
        if field.name in given:
            values[field.name] = given[field.name]
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            values[field.name] = _unknown(field)
    return cls(**values)


def _unknown(field: dataclasses.Field[object]) -> object:
    kafka_type = field.metadata.get("kafka_type")
    if kafka_type in _NUMBERS:
        return _NUMBERS[kafka_type](-1)
    if kafka_type == "timedelta_i32":
        return i32Timedelta.parse(timedelta(0))
    if kafka_type == "error_code":
        return ErrorCode.none
    if kafka_type == "bool":
        return False
    if kafka_type == "records":
        # Kafka answers a partition it refuses with empty records (MemoryRecords.EMPTY), not
        # null: Sarama 1.22 reads a null records field as a broken answer and drops it whole.
        return Records(b"")
    if "None" in str(field.type):
        return None
    if kafka_type == "string":
        return ""
    return ()
