"""The replica id of a Fetch request, read without decoding it (protocol/fetch_replica.py): the
walk to the tagged fields must read every request a consumer writes, whatever its shape, or a
consumer's fetch would be refused as undecodable."""

from __future__ import annotations

import importlib
import uuid
from datetime import timedelta

import pytest
from kio.schema.fetch.v17 import request as v17
from kio.schema.types import BrokerId
from kio.static.primitive import i8, i32, i32Timedelta, i64

from protocol.codec import Undecodable, encode_request
from protocol.fetch_replica import fetch_replica_ids, fetch_topic_ids
from protocol.framing import parse_request_header

pytestmark = pytest.mark.unit


def _partition(index: int, directory: uuid.UUID | None = None) -> v17.FetchPartition:
    return v17.FetchPartition(
        partition=i32(index),
        current_leader_epoch=i32(3),
        fetch_offset=i64(100 + index),
        last_fetched_epoch=i32(2),
        log_start_offset=i64(-1),
        partition_max_bytes=i32(1 << 20),
        replica_directory_id=directory,
    )


def _request(replica_state: v17.ReplicaState | None, cluster_id: str | None) -> bytes:
    topics = tuple(
        v17.FetchTopic(
            topic_id=uuid.uuid4(),
            partitions=tuple(_partition(p, uuid.uuid4() if p == 1 else None) for p in range(3)),
        )
        for _ in range(2)
    )
    extra = {} if replica_state is None else {"replica_state": replica_state}
    payload = v17.FetchRequest(
        cluster_id=cluster_id,
        max_wait=i32Timedelta.parse(timedelta(milliseconds=500)),
        min_bytes=i32(1),
        max_bytes=i32(50 << 20),
        isolation_level=i8(1),
        session_id=i32(12),
        session_epoch=i32(4),
        topics=topics,
        forgotten_topics_data=(
            v17.ForgottenTopic(topic_id=uuid.uuid4(), partitions=(i32(0), i32(5))),
        ),
        rack_id="rack-a",
        **extra,
    )
    return encode_request(1, 17, 9, "c", payload)[4:]


@pytest.mark.parametrize("cluster_id", [None, "cluster-x"])
def test_a_consumers_request_names_no_replica(cluster_id: str | None) -> None:
    frame = _request(None, cluster_id)
    assert fetch_replica_ids(parse_request_header(frame), frame) == (-1,)


@pytest.mark.parametrize("cluster_id", [None, "cluster-x"])
def test_a_followers_replica_state_is_found_behind_every_field(cluster_id: str | None) -> None:
    state = v17.ReplicaState(replica_id=BrokerId(2), replica_epoch=i64(40))
    frame = _request(state, cluster_id)
    assert fetch_replica_ids(parse_request_header(frame), frame) == (2,)


def test_a_request_cut_short_is_undecodable() -> None:
    frame = _request(v17.ReplicaState(replica_id=BrokerId(2), replica_epoch=i64(40)), None)
    header = parse_request_header(frame)
    for cut in (header.size + 10, len(frame) - 20, len(frame) - 5):
        with pytest.raises(Undecodable):
            fetch_replica_ids(header, frame[:cut])


def _fields(cls: type, values: dict[str, object]) -> object:
    """``cls`` (one version's kio entity) from the ``values`` it has fields for."""
    return cls(**{k: v for k, v in values.items() if k in cls.__dataclass_fields__})


def _request_of(version: int, topic_ids: list[uuid.UUID], forgotten: uuid.UUID) -> bytes:
    """A consumer's request of ``version``, fetching three partitions of each topic."""
    m = importlib.import_module(f"kio.schema.fetch.v{version}.request")
    partition = {
        "current_leader_epoch": i32(3),
        "fetch_offset": i64(100),
        "last_fetched_epoch": i32(2),
        "log_start_offset": i64(-1),
        "partition_max_bytes": i32(1 << 20),
        "replica_directory_id": uuid.uuid4(),
    }
    topics = tuple(
        _fields(
            m.FetchTopic,
            {
                "topic_id": topic_id,
                "partitions": tuple(
                    _fields(m.FetchPartition, {**partition, "partition": i32(p)}) for p in range(3)
                ),
            },
        )
        for topic_id in topic_ids
    )
    payload = _fields(
        m.FetchRequest,
        {
            "cluster_id": "cluster-x",
            "replica_id": BrokerId(-1),
            "max_wait": i32Timedelta.parse(timedelta(milliseconds=500)),
            "min_bytes": i32(1),
            "max_bytes": i32(50 << 20),
            "isolation_level": i8(1),
            "session_id": i32(12),
            "session_epoch": i32(4),
            "topics": topics,
            "forgotten_topics_data": (
                m.ForgottenTopic(topic_id=forgotten, partitions=(i32(0), i32(5))),
            ),
            "rack_id": "rack-a",
        },
    )
    return encode_request(1, version, 9, "c", payload)[4:]  # type: ignore[arg-type]


@pytest.mark.parametrize("version", [13, 14, 15, 16, 17, 18])
def test_the_fetched_topics_ids_are_read_and_the_forgotten_left_out(version: int) -> None:
    """The ids a consumer's request fetches, in every version naming topics by id: what the
    Fetch shortcut checks against the topics it knows (gateway/handlers/fetch.py)."""
    fetched = [uuid.uuid4(), uuid.uuid4(), uuid.uuid4()]
    frame = _request_of(version, fetched, uuid.uuid4())
    header = parse_request_header(frame)
    assert fetch_topic_ids(header, frame) == tuple(i.bytes for i in fetched)
    assert fetch_replica_ids(header, frame) == (-1,)
    for cut in (header.size + 30, len(frame) - 40):
        with pytest.raises(Undecodable):
            fetch_topic_ids(header, frame[:cut])
