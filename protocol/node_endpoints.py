"""Leader endpoints (KIP-951) in data-path answers: which answers may carry them, and a quick
look at whether one does.

Produce from v10 and Fetch from v16 answer a partition whose leader moved with the new
leader's id, and list that node's address in ``node_endpoints``, a tagged field at the end of
the answer. ShareFetch and ShareAcknowledge (KIP-932) always have a ``node_endpoints`` list.
The gateway swaps each address for its own listener of that node
(:func:`protocol.addresses.replace_endpoints`), as it does in Metadata.

Most Produce and Fetch answers carry none, and decoding every one (records included) would
cost the data path its throughput, so :func:`has_node_endpoints` walks the answer's layout,
skipping records and strings by their lengths, to the tagged fields at its end: only an
answer holding ``node_endpoints`` with an entry is decoded and rewritten (Tansu puts an empty
list in every Fetch answer; decoding and writing each again took the gateway from 0.17 to
0.30 of a core at 500 records/s with three consumers polling every 10 ms, bench/omb.py).
Measured on this machine (shared, noisy): a 1 MiB Fetch v17 answer of one partition, 2-8 us
walked against 45-230 us decoded; about 1.3 us a partition walked, about what kio's decode
costs a partition, without copying records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from .codec import Undecodable
from .framing import skip_tags, uvarint

PRODUCE: Final = 0
FETCH: Final = 1
SHARE_FETCH: Final = 78
SHARE_ACKNOWLEDGE: Final = 79

NODE_ENDPOINTS_SINCE: Final[Mapping[int, int]] = {
    PRODUCE: 10,
    FETCH: 16,
    SHARE_FETCH: 0,
    SHARE_ACKNOWLEDGE: 0,
}
"""API key -> the first version whose answer may carry leader endpoints."""

_NODE_ENDPOINTS_TAG: Final = 0

_PRODUCE_TOPIC_IDS_SINCE: Final = 13


def carries_node_endpoints(api_key: int, api_version: int) -> bool:
    """Whether answers of this API version may hold leader endpoints."""
    since = NODE_ENDPOINTS_SINCE.get(api_key)
    return since is not None and api_version >= since


def has_node_endpoints(api_key: int, api_version: int, frame: bytes) -> bool:
    """Whether the answer ``frame`` (response header included, no size prefix) holds leader
    endpoints the gateway must rewrite (an empty list holds none). ShareFetch and
    ShareAcknowledge answers hold theirs as a plain field behind the topics, walked to as a
    Fetch answer's tagged fields are.

    :raises Undecodable: for an answer that does not fit its layout.
    """
    if not carries_node_endpoints(api_key, api_version):
        return False
    try:
        position = skip_tags(frame, 4)  # correlation id, then the flexible header's tags
        if api_key in (SHARE_FETCH, SHARE_ACKNOWLEDGE):
            return _has_share_endpoints(frame, position, api_key, api_version)
        if api_key == FETCH:
            position = _fetch_topics_end(frame, position)
        else:
            position = _produce_topics_end(
                frame, position, by_id=api_version >= _PRODUCE_TOPIC_IDS_SINCE
            )
        if position > len(frame):
            raise IndexError(position)
        return _has_tag(frame, position, _NODE_ENDPOINTS_TAG)
    except IndexError as exc:
        raise Undecodable(
            f"API key {api_key} v{api_version} answer is truncated or malformed ({exc})"
        ) from None


def _skip_compact(frame: bytes, position: int) -> int:
    """Past a compact (nullable) string or bytes: its length + 1 (0 for null), then it."""
    length = frame[position]
    if length < 0x80:
        return position + length if length else position + 1
    second = frame[position + 1]
    if second < 0x80:  # up to 16 KiB: two bytes
        return position + 1 + (length & 0x7F | second << 7)
    length, position = uvarint(frame, position)
    return position + length - 1


def _count(frame: bytes, position: int) -> tuple[int, int]:
    """A compact array's length (0 for a null array) and where its entries start."""
    count = frame[position]
    if count < 0x80:
        return (count - 1 if count else 0), position + 1
    count, position = uvarint(frame, position)
    return count - 1, position


def _fetch_topics_end(frame: bytes, position: int) -> int:
    """Past throttle_time_ms, error_code, session_id and the topics of a Fetch v16+ answer;
    each partition's records are skipped by their length."""
    topics, position = _count(frame, position + 4 + 2 + 4)
    for _ in range(topics):
        partitions, position = _count(frame, position + 16)  # topic_id
        for _ in range(partitions):
            # index, error_code, high watermark, last stable offset, log start offset
            aborted, position = _count(frame, position + 4 + 2 + 8 + 8 + 8)
            for _ in range(aborted):
                position = skip_tags(frame, position + 8 + 8)  # producer id, first offset
            position = _skip_compact(frame, position + 4)  # preferred read replica, records
            position = skip_tags(frame, position)
        position = skip_tags(frame, position)
    return position


def _produce_topics_end(frame: bytes, position: int, *, by_id: bool) -> int:
    """Past the topics and throttle_time_ms of a Produce v10+ answer."""
    topics, position = _count(frame, position)
    for _ in range(topics):
        position = position + 16 if by_id else _skip_compact(frame, position)
        partitions, position = _count(frame, position)
        for _ in range(partitions):
            # index, error_code, base offset, log append time, log start offset
            errors, position = _count(frame, position + 4 + 2 + 8 + 8 + 8)
            for _ in range(errors):
                position = skip_tags(frame, _skip_compact(frame, position + 4))
            position = skip_tags(frame, _skip_compact(frame, position))  # error_message
        position = skip_tags(frame, position)
    return position + 4  # throttle_time_ms


_SHARE_LOCK_TIMEOUT_SINCE: Final[Mapping[int, int]] = {SHARE_FETCH: 0, SHARE_ACKNOWLEDGE: 2}
"""The first version whose answer has ``acquisition_lock_timeout_ms`` behind the error."""


def _has_share_endpoints(frame: bytes, position: int, api_key: int, api_version: int) -> bool:
    """Whether a ShareFetch or ShareAcknowledge answer's ``node_endpoints`` has an entry:
    past throttle_time_ms, error_code, error_message (and acquisition_lock_timeout_ms) and
    the topics, each partition's records skipped by their length."""
    position = _skip_compact(frame, position + 4 + 2)
    if api_version >= _SHARE_LOCK_TIMEOUT_SINCE[api_key]:
        position += 4
    topics, position = _count(frame, position)
    for _ in range(topics):
        partitions, position = _count(frame, position + 16)  # topic_id
        for _ in range(partitions):
            position = _skip_compact(frame, position + 4 + 2)  # index, error: error_message
            if api_key == SHARE_FETCH:
                position = _skip_compact(frame, position + 2)  # acknowledge error, message
            position = skip_tags(frame, position + 4 + 4)  # current_leader
            if api_key == SHARE_FETCH:
                position = _skip_compact(frame, position)  # records
                acquired, position = _count(frame, position)
                for _ in range(acquired):
                    position = skip_tags(frame, position + 8 + 8 + 2)
            position = skip_tags(frame, position)
        position = skip_tags(frame, position)
    endpoints, position = _count(frame, position)
    for _ in range(endpoints):
        position = _skip_compact(frame, position + 4)  # node_id, host
        position = skip_tags(frame, _skip_compact(frame, position + 4))  # port, rack
    if skip_tags(frame, position) != len(frame):
        raise IndexError("the answer does not end behind its tagged fields")
    return endpoints > 0


_EMPTY_LIST: Final = 1
"""A compact array of no entries: its length + 1."""


def _has_tag(frame: bytes, position: int, wanted: int) -> bool:
    """Whether the tagged fields at ``position`` hold ``wanted`` with something in it. A list
    of no entries (one byte, as Tansu puts in every Fetch answer) names no address: not
    counted; any other value is, to be decoded."""
    count, position = uvarint(frame, position)
    found = False
    for _ in range(count):
        tag, position = uvarint(frame, position)
        size, position = uvarint(frame, position)
        if tag == wanted and not (size == 1 and frame[position] == _EMPTY_LIST):
            found = True
        position += size
    if position != len(frame):
        raise Undecodable(f"answer has {len(frame) - position} bytes past its end")
    return found
