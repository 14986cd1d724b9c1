"""ApiVersions: decode the broker's answer in any version and narrow what it advertises."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, TypeAlias, TypeVar, get_args

from kio.schema.api_versions import v0, v1, v2, v3, v4
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16

from .codec import (
    Undecodable,
    can_decode,
    decode_response_as,
    encode_request,
    encode_response,
    replaced,
)
from .versions import API_VERSIONS_KEY, DECODABLE, VersionRange

ApiVersionsResponse: TypeAlias = (
    v0.ApiVersionsResponse
    | v1.ApiVersionsResponse
    | v2.ApiVersionsResponse
    | v3.ApiVersionsResponse
    | v4.ApiVersionsResponse
)
"""kio's response entity, any version."""
R = TypeVar("R", bound=ApiVersionsResponse)

_RESPONSES: Final[tuple[type[ApiVersionsResponse], ...]] = get_args(ApiVersionsResponse)


def decode_api_versions(request_version: int, frame: bytes) -> ApiVersionsResponse:
    """Decode an ApiVersions response to a request of ``request_version``.

    A broker that does not support the requested version answers in v0 with
    UNSUPPORTED_VERSION, so that is tried when the requested layout does not fit.

    :raises Undecodable: when neither layout fits.
    """
    if can_decode(API_VERSIONS_KEY, request_version):
        try:
            payload = decode_response_as(_RESPONSES, API_VERSIONS_KEY, request_version, frame)
        except Undecodable:
            pass
        else:
            if payload.error_code != ErrorCode.unsupported_version:
                return payload
    return decode_response_as(_RESPONSES, API_VERSIONS_KEY, 0, frame)


def narrow(payload: R, caps: Mapping[int, VersionRange | None]) -> R:
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
            entry = replaced(
                entry, min_version=i16(narrowed.min_version), max_version=i16(narrowed.max_version)
            )
        kept.append(entry)
    return replaced(payload, api_keys=tuple(kept))


def unsupported_version_answer(correlation_id: int) -> bytes:
    """What a broker answers to an ApiVersions version it does not know: v0 with
    UNSUPPORTED_VERSION and the ApiVersions range, so the client retries with one it shares."""
    supported = DECODABLE[API_VERSIONS_KEY]
    payload = v0.ApiVersionsResponse(
        error_code=ErrorCode.unsupported_version,
        api_keys=(
            v0.response.ApiVersion(
                api_key=i16(API_VERSIONS_KEY),
                min_version=i16(supported.min_version),
                max_version=i16(supported.max_version),
            ),
        ),
    )
    return encode_response(correlation_id, API_VERSIONS_KEY, 0, payload)


def probe_request(correlation_id: int, client_id: str) -> bytes:
    """An ApiVersions v0 request, size prefix included: the cheapest question every Kafka
    broker answers, before authentication too (the gateway's readiness probe asks it)."""
    return encode_request(API_VERSIONS_KEY, 0, correlation_id, client_id, v0.ApiVersionsRequest())


def probe_error(frame: bytes) -> str | None:
    """None when ``frame`` (a response to :func:`probe_request`, no size prefix) says the
    broker is serving; otherwise what is wrong with it."""
    try:
        payload = decode_api_versions(0, frame)
    except Undecodable as exc:
        return f"undecodable ApiVersions answer: {exc}"
    if payload.error_code != ErrorCode.none:
        return f"ApiVersions answered {ErrorCode(payload.error_code).name}"
    return None
