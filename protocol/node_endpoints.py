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
answer holding ``node_endpoints`` is decoded and rewritten.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from .codec import Undecodable

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

# A layout is a tuple of steps: an int (that many fixed bytes), or one of the names below, or
# ("array", layout) for a compact array of entries laid out so.
_STRING: Final = "string"  # compact (nullable) string
_BYTES: Final = "bytes"  # compact (nullable) bytes: records
_TAGS: Final = "tags"  # tagged fields

Layout = tuple[object, ...]

_PRODUCE_PARTITION: Final[Layout] = (
    4 + 2 + 8 + 8 + 8,  # index, error_code, base_offset, log_append_time, log_start_offset
    ("array", (4, _STRING, _TAGS)),  # record_errors
    _STRING,  # error_message
    _TAGS,
)
_PRODUCE_BY_NAME: Final[Layout] = (
    ("array", (_STRING, ("array", _PRODUCE_PARTITION), _TAGS)),
    4,  # throttle_time_ms
)
_PRODUCE_BY_ID: Final[Layout] = (
    ("array", (16, ("array", _PRODUCE_PARTITION), _TAGS)),
    4,
)
_FETCH: Final[Layout] = (
    4 + 2 + 4,  # throttle_time_ms, error_code, session_id
    (
        "array",
        (
            16,  # topic_id
            (
                "array",
                (
                    4 + 2 + 8 + 8 + 8,  # index, error, high watermark, LSO, log start offset
                    ("array", (8 + 8, _TAGS)),  # aborted_transactions
                    4,  # preferred_read_replica
                    _BYTES,  # records
                    _TAGS,
                ),
            ),
            _TAGS,
        ),
    ),
)
_PRODUCE_TOPIC_IDS_SINCE: Final = 13


def carries_node_endpoints(api_key: int, api_version: int) -> bool:
    """Whether answers of this API version may hold leader endpoints."""
    since = NODE_ENDPOINTS_SINCE.get(api_key)
    return since is not None and api_version >= since


def has_node_endpoints(api_key: int, api_version: int, frame: bytes) -> bool:
    """Whether the answer ``frame`` (response header included, no size prefix) holds leader
    endpoints the gateway must rewrite. ShareFetch and ShareAcknowledge answers always may
    (their list is a plain field): True.

    :raises Undecodable: for an answer that does not fit its layout.
    """
    if not carries_node_endpoints(api_key, api_version):
        return False
    if api_key == FETCH:
        layout = _FETCH
    elif api_key == PRODUCE:
        layout = _PRODUCE_BY_ID if api_version >= _PRODUCE_TOPIC_IDS_SINCE else _PRODUCE_BY_NAME
    else:
        return True
    try:
        position = _skip_tags(frame, 4)  # correlation id, then the flexible header's tags
        position = _walk(layout, frame, position)
        return _has_tag(frame, position, _NODE_ENDPOINTS_TAG)
    except IndexError:
        raise Undecodable(f"API key {api_key} v{api_version} answer is truncated") from None


def _uvarint(frame: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = frame[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
        if shift > 28:
            raise Undecodable("varint longer than five bytes")


def _skip_tags(frame: bytes, position: int) -> int:
    count, position = _uvarint(frame, position)
    for _ in range(count):
        _, position = _uvarint(frame, position)
        size, position = _uvarint(frame, position)
        position += size
    return position


def _walk(layout: Layout, frame: bytes, position: int) -> int:
    for step in layout:
        if isinstance(step, int):
            position += step
        elif step == _TAGS:
            position = _skip_tags(frame, position)
        elif step in (_STRING, _BYTES):
            length, position = _uvarint(frame, position)
            position += max(length - 1, 0)  # 0 is null, n + 1 is n bytes
        else:
            assert isinstance(step, tuple)
            count, position = _uvarint(frame, position)
            for _ in range(count - 1):
                position = _walk(step[1], frame, position)
    if position > len(frame):
        raise IndexError(position)
    return position


def _has_tag(frame: bytes, position: int, wanted: int) -> bool:
    count, position = _uvarint(frame, position)
    found = False
    for _ in range(count):
        tag, position = _uvarint(frame, position)
        size, position = _uvarint(frame, position)
        found = found or tag == wanted
        position += size
    if position != len(frame):
        raise Undecodable(f"answer has {len(frame) - position} bytes past its end")
    return found
