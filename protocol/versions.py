"""Which API keys and versions exist, which the gateway can decode, and which are flexible.

Everything here is read from the schemas kio ships, so upgrading kio widens the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Final

from kio.index import load_request_schema
from kio.schema.index import api_key_map, schema_name_map


@dataclass(frozen=True, slots=True, kw_only=True)
class VersionRange:
    """An inclusive range of API versions."""

    min_version: int
    max_version: int

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.min_version <= version <= self.max_version

    def intersect(self, other: VersionRange) -> VersionRange | None:
        """The versions both ranges hold, or None when they share none."""
        low = max(self.min_version, other.min_version)
        high = min(self.max_version, other.max_version)
        return VersionRange(min_version=low, max_version=high) if low <= high else None


def _build_decodable() -> dict[int, VersionRange]:
    table: dict[int, VersionRange] = {}
    for api_key, name in api_key_map.items():
        versions = sorted(schema_name_map[name])
        if versions:
            table[api_key] = VersionRange(min_version=versions[0], max_version=versions[-1])
    return table


DECODABLE: dict[int, VersionRange] = _build_decodable()
"""API key -> the versions kio can decode and encode. Also the set of API keys the gateway
knows: a key missing here is never forwarded."""

OLDEST_TAKEN: Final[dict[int, int]] = {1: 0, 8: 1, 19: 0, 20: 0}
"""API key -> the oldest version the gateway takes where that is older than kio's oldest
(Kafka 4 dropped them; older Kafka and clients such as Sarama 1.22 still speak them):
CreateTopics v0 and v1, read and sent to the broker as v2; DeleteTopics v0, as v1;
OffsetCommit v1, as v2 (:mod:`protocol.offset_commit`); Fetch v0-v3, passed as bytes
(:mod:`gateway.handlers.fetch`)."""

TAKEN: dict[int, VersionRange] = {
    key: VersionRange(min_version=OLDEST_TAKEN.get(key, r.min_version), max_version=r.max_version)
    for key, r in DECODABLE.items()
}
"""API key -> the versions the gateway can take: :data:`DECODABLE` and :data:`OLDEST_TAKEN`."""

API_NAMES: dict[int, str] = {
    key: "".join(part.capitalize() for part in name.split("_")) for key, name in api_key_map.items()
}
"""API key -> Kafka's name for it (``CreateTopics``)."""

API_VERSIONS_KEY = 18


UNREAD_API_KEY: Final = -1
"""Stands for the API of a frame refused before its header was read (its size, say)."""


def api_name(api_key: int) -> str:
    if api_key == UNREAD_API_KEY:
        return "Unread"
    return API_NAMES.get(api_key, f"Unknown({api_key})")


def is_known_api(api_key: int) -> bool:
    return api_key in DECODABLE


def is_flexible(api_key: int, api_version: int) -> bool:
    """Whether this request version uses the flexible (tagged-field) encoding.

    Versions below what kio ships predate flexible versions (KIP-482 came later than every
    version Kafka has removed); versions above it are newer than kio and flexible, as every
    version Kafka has added since 2.4 is.

    Only the versions kio ships are remembered: every request header is read with this, its
    version the client's to choose, and a cache of every pair asked kept one entry per
    (API key, version) a client ever sent, up to some 90 keys times 32,768 versions (one
    connection each, 2,000 a second: some 700 MB in half an hour, never given back).
    """
    decodable = DECODABLE.get(api_key)
    if decodable is None:
        return True
    if api_version < decodable.min_version:
        return False
    if api_version > decodable.max_version:
        return True
    return _schema_is_flexible(api_key, api_version)


@cache
def _schema_is_flexible(api_key: int, api_version: int) -> bool:
    """For a version kio ships (so at most one entry per such version)."""
    return bool(load_request_schema(api_key, api_version).__flexible__)


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if is_flexible(api_key, api_version) else 0
