"""Who a Fetch or ListOffsets request says it comes from: a consumer, or a replica.

A broker's follower fetches with its broker id as ``replica_id`` (v0-v14: the first field of the
body; v15 and later: the ``replica_state`` tagged field, tag 1 of the request, KIP-903). Kafka
treats such a request as replication: it reads up to the log end (past the high watermark,
uncommitted and aborted records included) and takes the fetch offset as that replica's
progress, which moves the high watermark and the ISR. Only the ``CLUSTER_ACTION`` ACL stands in
the way, and a broker without an authorizer allows it. -3 (``FUTURE_LOCAL_REPLICA_ID``, a
broker's own move of a replica between its disks, never sent over the network) is no consumer
either: Kafka reads it to the log end too, and asks only for READ on the topic. Consumers send
-1 (-2 for Kafka's debug consumer): :func:`is_consumer` is Kafka's
``FetchRequest.isConsumer``.

Reading the id costs one int32 before v15; from v15 the request is walked to its tagged fields
(every partition's fixed 32 bytes skipped, nothing decoded or copied).

ListOffsets carries a replica id too, as the body's first field in every version. Kafka
(``ReplicaManager.fetchOffset``) gives the isolation level's bound, the high watermark or the
last stable offset, to -1 alone: any other id, -2 (the debug id) included, is answered up to
the log end (the latest offset, and timestamp lookups over records not yet committed), with
only DESCRIBE on the topic asked. Brokers send their id (a follower's
``RemoteLeaderEndPoint``); Kafka's clients send -1.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Final

from .codec import Undecodable
from .framing import RequestHeader, uvarint

FETCH: Final = 1
REPLICA_STATE_SINCE: Final = 15
_CLUSTER_ID_TAG: Final = 0
_REPLICA_STATE_TAG: Final = 1
_REPLICA_STATE: Final = 4 + 8
"""replica_id, replica_epoch: the fixed part of ``replica_state``."""
_INT32: Final = struct.Struct(">i")
_FIXED_HEAD: Final = 4 + 4 + 4 + 1 + 4 + 4
"""max_wait_ms, min_bytes, max_bytes, isolation_level, session_id, session_epoch."""
_PARTITION: Final = 4 + 4 + 8 + 4 + 8 + 4
"""partition, current_leader_epoch, fetch_offset, last_fetched_epoch, log_start_offset,
partition_max_bytes (v12 and later)."""
TOPIC_IDS_SINCE: Final = 13
"""From v13 (KIP-516) a Fetch names its topics by id."""
_TOPIC_ID: Final = 16
_CONSUMER: Final = -1
FUTURE_LOCAL_REPLICA_ID: Final = -3


LIST_OFFSETS: Final = 2
LIST_OFFSETS_CONSUMER: Final = -1
"""The one replica id Kafka answers ListOffsets for as a consumer's."""


def list_offsets_replica_id(header: RequestHeader, frame: bytes) -> int:
    """The replica id a ListOffsets request names.

    :raises Undecodable: when the body is too short to hold it.
    """
    try:
        return int(_INT32.unpack_from(frame, header.size)[0])
    except struct.error as exc:
        raise Undecodable(f"ListOffsets v{header.api_version} body ends early: {exc}") from None


def is_consumer(replica_id: int) -> bool:
    """Whether Kafka serves a fetch with this replica id as a consumer's (up to the high
    watermark, or the last stable offset), as ``FetchRequest.isConsumer`` decides."""
    return replica_id < 0 and replica_id != FUTURE_LOCAL_REPLICA_ID


def fetch_replica_ids(header: RequestHeader, frame: bytes) -> tuple[int, ...]:
    """Every replica id the request names (a consumer's: -1 or another negative id).

    :raises Undecodable: when the body ends before it is read through.
    """
    return read_fetch(header, frame, topic_ids=False)[0]


def fetch_topic_ids(header: RequestHeader, frame: bytes) -> tuple[bytes, ...]:
    """The topic id (16 bytes) of each topic a v13+ request fetches (:func:`read_fetch`).

    :raises Undecodable: as :func:`read_fetch`, and for a version before v13.
    """
    if header.api_version < TOPIC_IDS_SINCE:
        raise Undecodable(f"Fetch v{header.api_version} names topics by name, not by id")
    return read_fetch(header, frame, topic_ids=True)[1]


def read_fetch(
    header: RequestHeader, frame: bytes, *, topic_ids: bool
) -> tuple[tuple[int, ...], tuple[bytes, ...]]:
    """Every replica id the request names (as :func:`fetch_replica_ids`) and, with
    ``topic_ids`` from v13, the topic id (16 bytes) of each topic it fetches, in order,
    repeats included (the forgotten topics, which only leave the fetch session, left out),
    in one walk.

    The ids are read where Kafka reads them: the request is walked to its tagged fields
    (every partition's fixed 32 bytes skipped, each tagged field Kafka knows held to its
    type's size), so an id is never taken from bytes Kafka reads as something else. Before
    v15 with ``topic_ids`` false, only the replica id (the first int32) is read.

    :raises Undecodable: when the body ends before it is read through.
    """
    version = header.api_version
    ids: list[bytes] = []
    try:
        if version < REPLICA_STATE_SINCE:
            replica_ids: tuple[int, ...] = (int(_INT32.unpack_from(frame, header.size)[0]),)
            if topic_ids and version >= TOPIC_IDS_SINCE:
                _skip_body(frame, header.size + 4, version, ids)
            return replica_ids, tuple(ids)
        end = _skip_body(frame, header.size, version, ids if topic_ids else None)
        return _replica_state_ids(frame, end), tuple(ids)
    except (IndexError, struct.error) as exc:
        raise Undecodable(f"Fetch v{version} body ends early: {exc}") from None


def _count(frame: bytes, offset: int) -> tuple[int, int]:
    """A compact array's length (a null one: 0) and the offset behind it."""
    encoded, offset = uvarint(frame, offset)
    return max(encoded - 1, 0), offset


_PARTITION_TAGS: Final = ((17, 0, 16), (18, 1, 8))
"""(since version, tag, size): the tagged fields of a fetched partition Kafka knows
(``replica_directory_id``, ``high_watermark``), which it reads by their type."""


def _tags(frame: bytes, offset: int, known: Mapping[int, int]) -> int:
    """The offset behind the tagged fields at ``offset``, whose ``known`` tags (tag -> size)
    must be as long as their type.

    Kafka's generated readers read a tag they know by its type and step over only the others
    by their size: a known tag declared longer than its value would hide from the gateway
    what Kafka reads next.

    :raises IndexError: for a known tag of another size, or one that runs past the frame.
    """
    count, offset = uvarint(frame, offset)
    for _ in range(count):
        tag, offset = uvarint(frame, offset)
        size, offset = uvarint(frame, offset)
        if tag in known and size != known[tag]:
            raise IndexError(f"tagged field {tag} of {size} bytes, not {known[tag]}")
        offset += size
    if offset > len(frame):
        raise IndexError("tagged fields run past the frame")
    return offset


def _skip_body(
    frame: bytes, offset: int, version: int, topic_ids: list[bytes] | None = None
) -> int:
    """The offset of the request's own tagged fields, behind its last field (rack_id), from
    ``offset``, where max_wait_ms is; each fetched topic's id appended to ``topic_ids``."""
    partition_tags = {tag: size for since, tag, size in _PARTITION_TAGS if version >= since}
    offset += _FIXED_HEAD
    topics, offset = _count(frame, offset)
    for _ in range(topics):
        if topic_ids is not None:
            topic_ids.append(frame[offset : offset + _TOPIC_ID])
        partitions, offset = _count(frame, offset + _TOPIC_ID)
        for _ in range(partitions):
            offset = _tags(frame, offset + _PARTITION, partition_tags)
        offset = _tags(frame, offset, {})
    forgotten, offset = _count(frame, offset)
    for _ in range(forgotten):
        partitions, offset = _count(frame, offset + _TOPIC_ID)
        offset = _tags(frame, offset + 4 * partitions, {})
    rack_id, offset = _count(frame, offset)
    return offset + rack_id


def _replica_state_ids(frame: bytes, offset: int) -> tuple[int, ...]:
    """The replica id of each ``replica_state`` among the tagged fields at ``offset``; a
    consumer's when there is none.

    Kafka reads the two tags it knows here, ``cluster_id`` (0) and ``replica_state`` (1), by
    their type, not by the size in front of them: each must end where its size says, or the
    bytes behind its value would be Kafka's next tag and not the gateway's.
    """
    count, offset = uvarint(frame, offset)
    ids: list[int] = []
    for _ in range(count):
        tag, offset = uvarint(frame, offset)
        size, offset = uvarint(frame, offset)
        end = offset + size
        if end > len(frame):
            raise IndexError(f"tagged field {tag} of {size} bytes runs past the frame")
        if tag == _CLUSTER_ID_TAG:
            length, value = uvarint(frame, offset)
            read = value + max(length - 1, 0)  # a compact nullable string
        elif tag == _REPLICA_STATE_TAG:
            read = _tags(frame, offset + _REPLICA_STATE, {})
            ids.append(int(_INT32.unpack_from(frame, offset)[0]))
        else:
            read = end
        if read != end:
            raise IndexError(f"tagged field {tag} holds {read - offset} bytes, not {size}")
        offset = end
    return tuple(ids) or (_CONSUMER,)
