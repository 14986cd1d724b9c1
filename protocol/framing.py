"""Frames and headers: the length prefix, request headers of every version, response headers.

A frame on the wire is ``int32 size`` + ``size`` bytes. The functions here work on the bytes
after the size prefix (the *frame*), except :func:`frame_bytes`, which adds it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader
from kio.serial.errors import SerialError

from .versions import is_flexible, is_known_api, response_header_version

SIZE: Final = struct.Struct(">i")
_KEY_VERSION_CORRELATION: Final = struct.Struct(">hhi")
_CORRELATION: Final = struct.Struct(">i")

DECODE_ERRORS: Final = (SerialError, ValueError)
"""What kio's readers raise for short or malformed input: its own errors, and ValueError for
a varint longer than five bytes."""

DEFAULT_MAX_FRAME_BYTES: Final = 104_857_600
"""Kafka's ``socket.request.max.bytes`` default (100 MiB)."""
PRE_AUTH_MAX_FRAME_BYTES: Final = 524_288
"""Kafka's ``sasl.server.max.receive.size`` default (512 KiB): the largest frame a SASL
listener reads from a connection that has not authenticated."""

_read_header_v1 = entity_reader(RequestHeaderV1)
_read_header_v2 = entity_reader(RequestHeaderV2)


class FrameRejected(Exception):
    """A frame the gateway will not handle. ``reason`` is a short metric label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestHeader:
    """A parsed request header. ``size`` is where the request body starts in the frame."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int

    @property
    def flexible(self) -> bool:
        return is_flexible(self.api_key, self.api_version)


def check_frame_size(size: int, max_frame_bytes: int) -> None:
    """:raises FrameRejected: for a negative size or one above the cap."""
    if size < 0:
        raise FrameRejected("negative_size", f"frame size {size} is negative")
    if size > max_frame_bytes:
        raise FrameRejected(
            "oversized", f"frame size {size} exceeds the limit of {max_frame_bytes} bytes"
        )


def parse_request_header(frame: bytes | memoryview) -> RequestHeader:
    """Parse the request header at the start of ``frame``.

    :raises FrameRejected: when the header is short or malformed ("bad_header"), or names an
        API key the gateway does not know ("unknown_api_key").
    """
    if len(frame) < _KEY_VERSION_CORRELATION.size:
        raise FrameRejected("bad_header", f"request of {len(frame)} bytes has no header")
    api_key, api_version, correlation_id = _KEY_VERSION_CORRELATION.unpack_from(frame, 0)
    if not is_known_api(api_key):
        raise FrameRejected("unknown_api_key", f"API key {api_key} is not a known Kafka API")
    if api_version < 0:
        raise FrameRejected("bad_header", f"API version {api_version} is negative")
    reader = _read_header_v2 if is_flexible(api_key, api_version) else _read_header_v1
    try:
        header, size = reader(frame, 0)
    except DECODE_ERRORS as exc:
        raise FrameRejected("bad_header", f"request header does not parse: {exc}") from None
    return RequestHeader(
        api_key=api_key,
        api_version=api_version,
        correlation_id=correlation_id,
        client_id=header.client_id,
        size=size,
    )


def response_correlation_id(frame: bytes | memoryview) -> int:
    """The correlation id that starts every response frame.

    :raises FrameRejected: when the frame is too short to hold one.
    """
    if len(frame) < _CORRELATION.size:
        raise FrameRejected("bad_response", "response frame shorter than its correlation id")
    return int(_CORRELATION.unpack_from(frame, 0)[0])


def response_header_size(api_key: int, api_version: int) -> int:
    """Bytes the response header takes before the body (tagged fields assumed empty).

    Brokers send no tagged fields in response headers; :func:`split_response` checks it.
    """
    return 5 if response_header_version(api_key, api_version) == 1 else 4


def split_response(api_key: int, api_version: int, frame: bytes) -> tuple[int, int]:
    """Return (correlation_id, body offset) of a response frame.

    :raises FrameRejected: for a short frame or a header with tagged fields, which no broker
        sends and the gateway does not carry.
    """
    correlation_id = response_correlation_id(frame)
    offset = response_header_size(api_key, api_version)
    if offset == 5 and (len(frame) < 5 or frame[4] != 0):
        raise FrameRejected("bad_response", "response header carries tagged fields")
    return correlation_id, offset


def response_header(correlation_id: int, api_key: int, api_version: int) -> bytes:
    """Encoded response header for the given request, without the size prefix."""
    encoded = _CORRELATION.pack(correlation_id)
    if response_header_version(api_key, api_version) == 1:
        encoded += b"\x00"
    return encoded


def frame_bytes(*parts: bytes) -> bytes:
    """Join ``parts`` and put the size prefix in front."""
    body = b"".join(parts)
    return SIZE.pack(len(body)) + body


def uvarint(frame: bytes, offset: int) -> tuple[int, int]:
    """The unsigned varint at ``offset``: its value and the offset behind it.

    Kafka reads one into an int, dropping whatever the fifth byte holds past bit 32
    (``ByteUtils.readUnsignedVarint``: ``81 80 80 80 10`` is 1 to Kafka); such a varint is
    refused here, so that no value is read one way here and another by the broker.

    :raises IndexError: when the frame ends inside it, it runs past five bytes, or its value
        does not fit 32 bits.
    """
    value = shift = 0
    while True:
        byte = frame[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if value >> 32:
                raise IndexError("varint wider than 32 bits")
            return value, offset
        shift += 7
        if shift > 28:
            raise IndexError("varint longer than 5 bytes")


def skip_tags(frame: bytes, offset: int) -> int:
    """The offset behind the tagged fields of a flexible-version struct at ``offset``.

    :raises IndexError: when the frame ends inside their count or a tag's header.
    """
    if frame[offset] == 0:  # no tagged fields: nearly always
        return offset + 1
    count, offset = uvarint(frame, offset)
    for _ in range(count):
        _, offset = uvarint(frame, offset)
        size, offset = uvarint(frame, offset)
        offset += size
    return offset
