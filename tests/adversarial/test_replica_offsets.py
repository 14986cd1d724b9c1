"""A client listing offsets as a replica: ListOffsets names a replica id as the body's first
field in every version. Kafka bounds the answer by the high watermark (or, read_committed,
the last stable offset) for -1 alone; any other id, a broker's or the debug id -2, is answered
up to the log end (``ReplicaManager.fetchOffset`` passes no isolation level for it): the
latest offset, and timestamp lookups over records not yet committed or in open
transactions. Only DESCRIBE on the
topic is asked. Brokers send their own id; Kafka's clients send -1. The gateway must refuse it
as it refuses a follower's Fetch: the connection closed, nothing forwarded.

Against the tapped real broker; the same request as a consumer sends it still reaches it.
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from tests.support import BrokerTap, GatewayThread, RawClient, gateway_config, outcome

pytestmark = pytest.mark.adversarial

LIST_OFFSETS = 2
TANSU_NODE = 111
LATEST = -1


@pytest.fixture
def setup(tap: BrokerTap) -> Iterator[tuple[GatewayThread, str]]:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    direct = AdminClient({"bootstrap.servers": str(tap.address)})
    assert outcome(direct.create_topics([NewTopic(topic, 1, 1)])[topic]) is None
    gw = GatewayThread(gateway_config(tap.address)).start()
    tap.requests.clear()
    try:
        yield gw, topic
    finally:
        gw.stop()


def _list_offsets(version: int, topic: str, replica: int) -> Any:
    """The latest offset of partition 0, asked as ``replica``."""
    m = importlib.import_module(f"kio.schema.list_offsets.v{version}.request")
    fields = m.ListOffsetsPartition.__dataclass_fields__
    partition = m.ListOffsetsPartition(
        partition_index=i32(0),
        timestamp=i64(LATEST),
        **({"current_leader_epoch": i32(-1)} if "current_leader_epoch" in fields else {}),
    )
    request: dict[str, Any] = {
        "replica_id": BrokerId(replica),
        "topics": (m.ListOffsetsTopic(name=TopicName(topic), partitions=(partition,)),),
    }
    fields = m.ListOffsetsRequest.__dataclass_fields__
    if "isolation_level" in fields:
        request["isolation_level"] = i8(0)
    if "timeout" in fields:
        request["timeout"] = i32Timedelta.parse(timedelta(seconds=5))
    return m.ListOffsetsRequest(**request)


VERSIONS = [pytest.param(v, id=f"v{v}") for v in (1, 4, 7)]


@pytest.mark.parametrize("replica", [TANSU_NODE, 0, -2, -3])
@pytest.mark.parametrize("version", VERSIONS)
def test_listing_offsets_as_a_replica_never_reaches_the_broker(
    setup: tuple[GatewayThread, str], tap: BrokerTap, version: int, replica: int
) -> None:
    gw, topic = setup
    client = RawClient(gw.bootstrap, timeout=5)
    client.send(LIST_OFFSETS, version, _list_offsets(version, topic, replica))
    with pytest.raises((ConnectionError, OSError)):
        client.recv_frame()
    assert LIST_OFFSETS not in tap.api_keys()
    # refused as a replica's request, not for a body the gateway misread
    assert gw.metric("kpg_rejected_frames_total", reason="refused_api") == 1


@pytest.mark.parametrize("version", VERSIONS)
def test_a_consumers_list_offsets_still_reaches_the_broker(
    setup: tuple[GatewayThread, str], tap: BrokerTap, version: int
) -> None:
    gw, topic = setup
    answer = RawClient(gw.bootstrap).request(
        LIST_OFFSETS, version, _list_offsets(version, topic, -1)
    )
    assert [int(p.error_code) for t in answer.topics for p in t.partitions] == [0]
    assert len(tap.forwarded(LIST_OFFSETS)) == 1
