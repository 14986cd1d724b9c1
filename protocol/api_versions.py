"""ApiVersions: decode the broker's answer in any version and narrow what it advertises."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16

from .codec import Payload, Undecodable, can_decode, decode_response, encode_response
from .versions import API_VERSIONS_KEY, DECODABLE, VersionRange


def decode_api_versions(request_version: int, frame: bytes) -> Payload:
    """Decode an ApiVersions response to a request of ``request_version``.

    A broker that does not support the requested version answers in v0 with
    UNSUPPORTED_VERSION, so that is tried when the requested layout does not fit.

    :raises Undecodable: when neither layout fits.
    """
    if can_decode(API_VERSIONS_KEY, request_version):
        try:
            payload = decode_response(API_VERSIONS_KEY, request_version, frame)
        except Undecodable:
            pass
        else:
            if payload.error_code != ErrorCode.unsupported_version:
                return payload
    return decode_response(API_VERSIONS_KEY, 0, frame)


def narrow(payload: Payload, caps: Mapping[int, VersionRange | None]) -> Payload:
    """The response with each API's range narrowed to what the gateway can carry.

    An API key the gateway does not know is removed. ``caps[key]`` is None for an API the
    gateway never forwards; a key absent from ``caps`` keeps the broker's range.
    """
    kept = []
    for entry in payload.api_keys:
        key = int(entry.api_key)
        if key not in DECODABLE:
            continue
        broker = VersionRange(min_version=entry.min_version, max_version=entry.max_version)
        if key in caps:
            cap = caps[key]
            narrowed = broker.intersect(cap) if cap is not None else None
            if narrowed is None:
                continue
            entry = dataclasses.replace(
                entry, min_version=i16(narrowed.min_version), max_version=i16(narrowed.max_version)
            )
        kept.append(entry)
    return dataclasses.replace(payload, api_keys=tuple(kept))


def unsupported_version_answer(correlation_id: int) -> bytes:
    """What a broker answers to an ApiVersions version it does not know: v0 with
    UNSUPPORTED_VERSION and the ApiVersions range, so the client retries with one it shares."""
    supported = DECODABLE[API_VERSIONS_KEY]
    payload = ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=(
            ApiVersionV0(
                api_key=i16(API_VERSIONS_KEY),
                min_version=i16(supported.min_version),
                max_version=i16(supported.max_version),
            ),
        ),
    )
    return encode_response(correlation_id, API_VERSIONS_KEY, 0, payload)
