"""Frames, headers and version tables, table-driven over real encodings."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from kio.schema.api_versions.v3.response import ApiVersion, ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.response import MetadataResponse, MetadataResponseBroker
from kio.static.primitive import i16, i32, i32Timedelta

from protocol.addresses import broker_endpoints, replace_endpoints
from protocol.api_versions import decode_api_versions, narrow
from protocol.codec import Undecodable, decode_response, encode_request, encode_response
from protocol.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    FrameRejected,
    check_frame_size,
    parse_request_header,
    response_header,
)
from protocol.versions import DECODABLE, VersionRange, is_flexible, response_header_version

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("api_key", "version", "flexible"),
    [
        (3, 8, False),
        (3, 9, True),
        (0, 8, False),
        (0, 9, True),
        (19, 4, False),
        (19, 5, True),
        (18, 2, False),
        (18, 3, True),
        (1, 0, False),
        (0, 2, False),
        (3, 99, True),
    ],
)
def test_header_round_trip_for_flexible_and_not(api_key: int, version: int, flexible: bool) -> None:
    assert is_flexible(api_key, version) is flexible
    from kio.schema.metadata.v1.request import MetadataRequest

    frame = encode_request(api_key, version, 42, "client-a", MetadataRequest(topics=None))[4:]
    header = parse_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        api_key,
        version,
        42,
        "client-a",
    )
    # v2 headers carry one more byte: the empty tagged-field count after the client id.
    assert header.size == 10 + len("client-a") + (1 if flexible else 0)


def test_api_versions_response_header_is_always_v0() -> None:
    assert response_header_version(18, 3) == 0
    assert response_header_version(3, 12) == 1
    assert response_header(7, 3, 12) == struct.pack(">i", 7) + b"\x00"


@pytest.mark.parametrize(
    ("size", "reason"), [(-1, "negative_size"), (DEFAULT_MAX_FRAME_BYTES + 1, "oversized")]
)
def test_frame_size_cap(size: int, reason: str) -> None:
    with pytest.raises(FrameRejected) as raised:
        check_frame_size(size, DEFAULT_MAX_FRAME_BYTES)
    assert raised.value.reason == reason
    check_frame_size(DEFAULT_MAX_FRAME_BYTES, DEFAULT_MAX_FRAME_BYTES)


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (b"\x00\x03\x00", "bad_header"),
        (struct.pack(">hhi", 31000, 0, 1) + b"\xff\xff", "unknown_api_key"),
        (struct.pack(">hhih", 3, 12, 1, 50) + b"short", "bad_header"),
        (struct.pack(">hhi", 3, -1, 1) + b"\xff\xff", "bad_header"),
    ],
)
def test_bad_headers_are_refused(frame: bytes, reason: str) -> None:
    with pytest.raises(FrameRejected) as raised:
        parse_request_header(frame)
    assert raised.value.reason == reason


def _metadata(brokers: list[tuple[int, str, int]]) -> MetadataResponse:
    return MetadataResponse(
        throttle_time=i32Timedelta.parse(__import__("datetime").timedelta(0)),
        brokers=tuple(
            MetadataResponseBroker(node_id=i32(n), host=h, port=i32(p), rack=None)
            for n, h, p in brokers
        ),
        cluster_id="c",
        controller_id=i32(1),
        topics=(),
    )


def test_metadata_addresses_replaced_and_reencoded() -> None:
    payload = _metadata([(1, "kafka-1", 9092), (2, "kafka-2", 9092)])
    frame = encode_response(9, 3, 12, payload)
    decoded = decode_response(3, 12, frame)
    assert [(e.node_id, e.host, e.port) for e in broker_endpoints(3, decoded)] == [
        (1, "kafka-1", 9092),
        (2, "kafka-2", 9092),
    ]
    rewritten = replace_endpoints(3, decoded, {1: ("gw", 9101), 2: ("gw", 9102)})
    again = decode_response(3, 12, encode_response(9, 3, 12, rewritten))
    assert [(b.host, b.port) for b in again.brokers] == [("gw", 9101), ("gw", 9102)]
    with pytest.raises(KeyError):
        replace_endpoints(3, decoded, {1: ("gw", 9101)})  # a node with no listener


def test_trailing_bytes_are_undecodable() -> None:
    frame = encode_response(9, 3, 12, _metadata([(1, "h", 1)])) + b"\x00"
    with pytest.raises(Undecodable):
        decode_response(3, 12, frame)


def test_api_versions_narrowing() -> None:
    payload = ApiVersionsResponse(
        error_code=ErrorCode.none,
        throttle_time=i32Timedelta.parse(__import__("datetime").timedelta(0)),
        api_keys=(
            ApiVersion(api_key=i16(0), min_version=i16(0), max_version=i16(11)),
            ApiVersion(api_key=i16(1), min_version=i16(0), max_version=i16(17)),
            ApiVersion(api_key=i16(30000), min_version=i16(0), max_version=i16(1)),
            ApiVersion(api_key=i16(78), min_version=i16(0), max_version=i16(1)),
            ApiVersion(api_key=i16(8), min_version=i16(0), max_version=i16(9)),
        ),
    )
    frame = encode_response(1, 18, 3, payload)
    decoded = decode_api_versions(3, frame)
    caps = {0: VersionRange(min_version=3, max_version=9), 78: None}
    narrowed = {k.api_key: (k.min_version, k.max_version) for k in narrow(decoded, caps).api_keys}
    assert narrowed == {0: (3, 9), 1: (0, 17), 8: (0, 9)}


def test_decodable_table_comes_from_kio() -> None:
    assert DECODABLE[19].min_version == 2  # CreateTopics v0-1 are not in kio
    assert DECODABLE[3] == VersionRange(min_version=0, max_version=DECODABLE[3].max_version)


def test_headers_of_versions_kio_does_not_ship_leave_nothing_behind() -> None:
    """Every request header is read with ``is_flexible``, whose cache kept an entry for each
    (API key, version) a client sent: a client opening a connection per version made the
    gateway keep about 240 bytes for each, up to 32,768 versions of each of some 90 keys
    (measured through the gateway: 2,000 connections in 1.1 s, 2,000 entries kept). Only
    the versions kio ships are remembered now."""
    metadata = 3
    first_unknown = DECODABLE[metadata].max_version + 1
    frames = [
        struct.pack(">hhih", metadata, version, 1, -1) + b"\x00"  # a v2 header, no client id
        for version in range(first_unknown, first_unknown + 20_000)
    ]
    parse_request_header(frames[0])
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for frame in frames:
            assert parse_request_header(frame).flexible
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 100_000, f"{kept:,} bytes kept for 20,000 headers"
