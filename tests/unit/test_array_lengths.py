"""The array-length walk in front of kio (:func:`protocol.codec.decode_request`): over every
request schema kio ships, a request with one element in every array, every tagged field set
and every nullable field null in turn decodes as before; an array longer than the bytes left
is refused (kio would first ask for room for all of it)."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)
from kio.static.primitive import f64, i8, i16, i32, i32Timedelta, i64, i64Timedelta, u16

from protocol.codec import Undecodable, decode_request, encode_request
from protocol.framing import parse_request_header
from protocol.versions import DECODABLE

pytestmark = pytest.mark.unit

_SAMPLES: dict[str, Any] = {
    "bool": True,
    "int8": i8(1),
    "int16": i16(2),
    "uint16": u16(3),
    "int32": i32(4),
    "int64": i64(5),
    "float64": f64(0.5),
    "uuid": uuid.UUID(int=7),
    "timedelta_i32": i32Timedelta.parse(timedelta(milliseconds=8)),
    "timedelta_i64": i64Timedelta.parse(timedelta(milliseconds=9)),
    "string": "str",
    "bytes": b"bytes",
    "records": b"records",
}


def _sample(entity: type[Any], nulls: bool) -> Any:
    """An ``entity`` with one element in each array, each nullable field null (``nulls``) or
    set."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(entity):
        kind = classify_field(f)
        if nulls and is_optional(f):
            values[f.name] = None
        elif isinstance(kind, EntityTupleField):
            values[f.name] = (_sample(kind.type_, nulls),)
        elif isinstance(kind, EntityField):
            values[f.name] = _sample(kind.type_, nulls)
        elif isinstance(kind, PrimitiveTupleField):
            values[f.name] = (_SAMPLES[f.metadata["kafka_type"]],)
        else:
            values[f.name] = _SAMPLES[f.metadata["kafka_type"]]
    return entity(**values)


SCHEMAS = [
    pytest.param(key, version, id=f"{key}v{version}")
    for key, versions in DECODABLE.items()
    for version in range(versions.min_version, versions.max_version + 1)
]


@pytest.mark.parametrize("nulls", [False, True], ids=["set", "null"])
@pytest.mark.parametrize(("api_key", "version"), SCHEMAS)
def test_every_request_decodes_as_kio_reads_it(api_key: int, version: int, nulls: bool) -> None:
    request = _sample(load_request_schema(api_key, version), nulls)
    frame = encode_request(api_key, version, 1, "c", request)[4:]
    assert decode_request(parse_request_header(frame), frame) == request


@pytest.mark.parametrize(
    ("version", "length"),
    [(12, b"\x7f"), (4, b"\x00\x00\x01\x00")],
    ids=["compact", "legacy"],
)
def test_an_array_longer_than_the_bytes_left_is_refused(version: int, length: bytes) -> None:
    """As Kafka refuses it. (Lengths that would have aborted the process are in
    tests/adversarial/test_parser_differentials.py, against `kpg run`.)"""
    from kio.schema.metadata import v4, v12

    module: Any = {4: v4, 12: v12}[version]
    request = (
        module.MetadataRequest(
            topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
        if version == 12
        else module.MetadataRequest(topics=(), allow_auto_topic_creation=False)
    )
    frame = encode_request(3, version, 1, "c", request)[4:]
    header = parse_request_header(frame)
    empty = b"\x01" if version == 12 else b"\x00\x00\x00\x00"
    assert frame[header.size : header.size + len(empty)] == empty
    bad = frame[: header.size] + length + frame[header.size + len(empty) :]
    with pytest.raises(Undecodable, match="elements in the"):
        decode_request(header, bad)
