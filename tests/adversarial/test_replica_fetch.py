"""A client fetching as a follower replica: a Fetch naming a broker id as its replica id
(v0-v14 in the body, v15 and later in the ``replica_state`` tagged field). Kafka serves such a
fetch up to the log end, uncommitted and aborted records included, and takes its offset as that
replica's progress, moving the high watermark and the ISR; only the CLUSTER_ACTION ACL stands
in the way, and a broker without an authorizer grants it to anyone. Likewise -3, the id a broker
uses for its own replica moves between disks, which Kafka reads to the log end with only READ
on the topic. The gateway must refuse them as it refuses the other inter-broker APIs: the
connection closed, nothing forwarded.

Against the tapped real broker (Tansu takes Fetch to v17); the same requests as a consumer
sends them (replica id -1, no ``replica_state``) still reach it and are answered.
"""

from __future__ import annotations

import importlib
import uuid
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from tests.support import BrokerTap, GatewayThread, RawClient

pytestmark = pytest.mark.adversarial

FETCH = 1
TANSU_NODE = 111


def _fetch(version: int, topic: str, topic_id: uuid.UUID, replica: int | None) -> Any:
    """A Fetch of partition 0 from offset 0; ``replica``: the replica id it names (None: a
    consumer's request, as clients write it)."""
    m = importlib.import_module(f"kio.schema.fetch.v{version}.request")
    partition = m.FetchPartition(
        partition=i32(0),
        current_leader_epoch=i32(-1),
        fetch_offset=i64(0),
        last_fetched_epoch=i32(-1),
        log_start_offset=i64(-1),
        partition_max_bytes=i32(1 << 20),
    )
    by = {"topic": TopicName(topic)} if version < 13 else {"topic_id": topic_id}
    fields: dict[str, Any] = {
        "max_wait": i32Timedelta.parse(timedelta(milliseconds=10)),
        "min_bytes": i32(0),
        "max_bytes": i32(1 << 20),
        "isolation_level": i8(0),
        "session_id": i32(0),
        "session_epoch": i32(-1),
        "topics": (m.FetchTopic(partitions=(partition,), **by),),
        "forgotten_topics_data": (),
        "rack_id": "",
    }
    if version < 15:
        fields["replica_id"] = BrokerId(-1 if replica is None else replica)
    elif replica is not None:
        fields["replica_state"] = m.ReplicaState(replica_id=BrokerId(replica), replica_epoch=i64(1))
    return m.FetchRequest(**fields)


VERSIONS = [pytest.param(v, id=f"v{v}") for v in (12, 13, 15, 17)]


FUTURE_LOCAL_REPLICA = -3
"""A broker's own replica move between disks: Kafka reads it to the log end as well, and asks
only READ on the topic (``FetchRequest.isConsumer`` is false for it)."""


@pytest.mark.parametrize("replica", [TANSU_NODE, 0, FUTURE_LOCAL_REPLICA])
@pytest.mark.parametrize("version", VERSIONS)
def test_a_fetch_as_a_replica_never_reaches_the_broker(
    fetch_setup: tuple[GatewayThread, str, uuid.UUID], tap: BrokerTap, version: int, replica: int
) -> None:
    gw, topic, topic_id = fetch_setup
    client = RawClient(gw.bootstrap, timeout=5)
    client.send(FETCH, version, _fetch(version, topic, topic_id, replica))
    with pytest.raises((ConnectionError, OSError)):
        client.recv_frame()
    assert FETCH not in tap.api_keys()
    # refused as an inter-broker request, not for a body the gateway misread
    assert gw.metric("kpg_rejected_frames_total", reason="refused_api") == 1


@pytest.mark.parametrize("replica", [None, -1, -2], ids=["unset", "consumer", "debug"])
@pytest.mark.parametrize("version", VERSIONS)
def test_a_consumers_fetch_still_reaches_the_broker(
    fetch_setup: tuple[GatewayThread, str, uuid.UUID],
    tap: BrokerTap,
    version: int,
    replica: int | None,
) -> None:
    gw, topic, topic_id = fetch_setup
    request = _fetch(version, topic, topic_id, replica)
    answer = RawClient(gw.bootstrap).request(FETCH, version, request)
    assert [int(p.error_code) for r in answer.responses for p in r.partitions] == [0]
    assert len(tap.forwarded(FETCH)) == 1
