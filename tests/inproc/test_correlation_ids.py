"""Correlation ids: the broker sees ids the gateway assigns, never the client's, and every
answer reaches the request it answers (issue 11, item 7).

The attack: over one connection, an acks=0 Produce with correlation id N, then two more
requests reusing N. Matched by the client's ids, a Kafka broker's answer to the second request
(it sends none to the first) was taken for the acks=0 answer and dropped, and the Metadata
answer went to the other request, which the gateway hands back unrewritten: broker addresses
and all.

The test broker (Tansu) answers acks=0 Produce, which Kafka does not; the ``kafka`` cases put
``tests/acks_relay.py`` in front of it, a relay that withholds those answers as Kafka would.
Everything else is the real broker, behind the tap that records what reaches it.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch
from kio.schema.list_groups.v4.request import ListGroupsRequest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from protocol.codec import Undecodable, decode_response
from protocol.versions import api_name
from tests.acks_relay import AcksZeroRelay
from tests.inproc.test_clients import create_topic
from tests.support import BrokerTap, GatewayThread, RawClient, gateway_config, unique_name

pytestmark = pytest.mark.inproc

REUSED = 424_242_424
"""The client's one correlation id, far from the small numbers a fresh link counts from."""

PRODUCE, METADATA, LIST_GROUPS = 0, 3, 16
VERSIONS = {METADATA: 12, LIST_GROUPS: 4}
REQUESTS = {
    METADATA: MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    ),
    LIST_GROUPS: ListGroupsRequest(states_filter=()),
}


def _acks_zero_produce(topic: str) -> ProduceRequest:
    batch = NewRecordBatch(
        producer_id=i64(-1),
        producer_epoch=i16(-1),
        base_sequence=i32(-1),
        attributes=i16(0),
        records=(
            Record(
                attributes=i8(0),
                timestamp=datetime.datetime.now(datetime.UTC),
                offset=i64(0),
                key=None,
                value=b"acks=0",
                headers=(),
            ),
        ),
    )
    buffer = io.BytesIO()
    write_new_batch(buffer, batch)
    return ProduceRequest(
        transactional_id=None,
        acks=i16(0),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
        topic_data=(
            TopicProduceData(
                name=TopicName(topic),
                partition_data=(PartitionProduceData(index=i32(0), records=buffer.getvalue()),),
            ),
        ),
    )


def _answer(api_key: int, frame: bytes) -> Any:
    """``frame`` decoded as the answer to ``api_key``; a failure names what it is instead."""
    try:
        return decode_response(api_key, VERSIONS[api_key], frame)
    except Undecodable:
        for other in VERSIONS.keys() - {api_key}:
            with contextlib.suppress(Undecodable):
                wrong = decode_response(other, VERSIONS[other], frame)
                pytest.fail(
                    f"the {api_name(api_key)} request got a {api_name(other)} answer: {wrong}"
                )
        raise


@pytest.fixture(params=["kafka", "tansu"])
def upstream(request: pytest.FixtureRequest, tap: BrokerTap) -> Iterator[AcksZeroRelay | None]:
    """``kafka``: the relay that withholds acks=0 answers, in front of the tap; ``tansu``:
    the tap itself."""
    if request.param == "tansu":
        yield None
        return
    relay = AcksZeroRelay(tap.address)
    relay.start()
    try:
        yield relay
    finally:
        relay.stop()


@pytest.mark.parametrize(
    "order", [(LIST_GROUPS, METADATA), (METADATA, LIST_GROUPS)], ids=["lg-md", "md-lg"]
)
def test_reused_correlation_ids_get_their_own_answers(
    tap: BrokerTap, upstream: AcksZeroRelay | None, order: tuple[int, int]
) -> None:
    gw = GatewayThread(gateway_config(tap.address if upstream is None else upstream.address))
    gw.start()
    try:
        topic = unique_name("cid")
        create_topic(gw.bootstrap, topic)
        tap.requests.clear()
        client = RawClient(gw.bootstrap, timeout=5)

        client.send(PRODUCE, 9, _acks_zero_produce(topic), correlation_id=REUSED)
        for api_key in order:
            client.send(api_key, VERSIONS[api_key], REQUESTS[api_key], correlation_id=REUSED)

        answers = {}
        for api_key in order:
            frame = client.recv_frame()
            assert struct.unpack_from(">i", frame)[0] == REUSED
            answers[api_key] = _answer(api_key, frame)
        assert answers[LIST_GROUPS].error_code == 0

        # Only gateway addresses, never the broker's (the tap is its advertised address).
        named = {(b.host, b.port) for b in answers[METADATA].brokers}
        assert named and named <= set(gw.gateway.nodes.gateway_addresses_snapshot())
        for address in (tap.address, tap.broker):
            assert (address.host, address.port) not in named

        # Nothing more: the broker's answer to the acks=0 Produce, if any, stays upstream.
        client.sock.settimeout(1)
        with pytest.raises(TimeoutError):
            client.sock.recv(1)
        client.close()

        # The broker saw the three requests, none with the client's correlation id.
        assert topic in {p.topic_data[0].name for p in tap.forwarded(PRODUCE)}
        assert {PRODUCE, METADATA, LIST_GROUPS} <= tap.api_keys()
        assert REUSED not in {r.correlation_id for r in tap.requests}
        if upstream is not None:
            assert upstream.swallowed == 1  # Kafka's behaviour was exercised
    finally:
        gw.stop()
