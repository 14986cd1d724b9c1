"""kio-backed decode and encode of request and response bodies.

The gateway calls these only for the APIs it inspects or rewrites. Payloads are kio entities
and stay inside ``protocol/``: the handlers in ``gateway/`` receive them through the typed
helpers of the modules next to this one, and ``policies/`` never sees them.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Mapping
from datetime import timedelta
from functools import cache
from typing import Any, Final

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from .framing import FrameRejected, RequestHeader, frame_bytes, response_header, split_response
from .versions import DECODABLE, is_flexible

Payload = Any
"""A kio request or response entity. Kept opaque outside ``protocol/``."""


class Undecodable(Exception):
    """A body the gateway must inspect but cannot decode: the caller refuses the request."""


def can_decode(api_key: int, api_version: int) -> bool:
    supported = DECODABLE.get(api_key)
    return supported is not None and api_version in supported


@cache
def _request_reader(api_key: int, api_version: int) -> Any:
    return entity_reader(load_request_schema(api_key, api_version))


@cache
def _response_reader(api_key: int, api_version: int) -> Any:
    return entity_reader(load_response_schema(api_key, api_version))


_writers: dict[type, Any] = {}


def _writer(entity_type: type) -> Any:
    writer = _writers.get(entity_type)
    if writer is None:
        writer = _writers[entity_type] = entity_writer(entity_type)
    return writer


def _decode(reader: Any, frame: bytes, offset: int, what: str) -> Payload:
    try:
        payload, size = reader(frame, offset)
    except Exception as exc:  # noqa: BLE001 - kio raises many types for malformed input
        raise Undecodable(f"{what} does not decode: {exc}") from None
    if offset + size != len(frame):
        raise Undecodable(f"{what} has {len(frame) - offset - size} trailing bytes")
    return payload


def decode_request(header: RequestHeader, frame: bytes) -> Payload:
    """Decode the body of a request frame whose header is already parsed.

    :raises Undecodable: when kio has no schema for the version or the body is malformed.
    """
    if not can_decode(header.api_key, header.api_version):
        raise Undecodable(f"API key {header.api_key} version {header.api_version} is not decodable")
    reader = _request_reader(header.api_key, header.api_version)
    return _decode(reader, frame, header.size, "request body")


def decode_response(api_key: int, api_version: int, frame: bytes) -> Payload:
    """Decode a response frame (without size prefix) to its body entity.

    :raises Undecodable: for a version kio lacks or a malformed body.
    """
    if not can_decode(api_key, api_version):
        raise Undecodable(f"API key {api_key} version {api_version} is not decodable")
    try:
        _, offset = split_response(api_key, api_version, frame)
    except FrameRejected as exc:
        raise Undecodable(str(exc)) from None
    return _decode(_response_reader(api_key, api_version), frame, offset, "response body")


def encode_body(payload: Payload) -> bytes:
    buffer = io.BytesIO()
    _writer(type(payload))(buffer, payload)
    return buffer.getvalue()


def encode_response(correlation_id: int, api_key: int, api_version: int, payload: Payload) -> bytes:
    """A response frame (header and body, no size prefix) in the layout of ``api_version``."""
    return response_header(correlation_id, api_key, api_version) + encode_body(payload)


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, payload: Payload
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


def filled(cls: type, given: Mapping[str, Any]) -> Any:
    """An entity of ``cls`` with the ``given`` fields it has, and for every other field
    without a default Kafka's "unknown": -1, null, empty."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if field.name in given:
            values[field.name] = given[field.name]
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            values[field.name] = _unknown(field)
    return cls(**values)


def _unknown(field: dataclasses.Field[Any]) -> Any:
    kafka_type = field.metadata.get("kafka_type")
    if kafka_type in _NUMBERS:
        return _NUMBERS[kafka_type](-1)
    if kafka_type == "timedelta_i32":
        return i32Timedelta.parse(timedelta(0))
    if kafka_type == "error_code":
        return ErrorCode.none
    if kafka_type == "bool":
        return False
    if "None" in str(field.type):
        return None
    if kafka_type == "string":
        return ""
    return ()
