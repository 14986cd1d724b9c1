"""Leader endpoints (KIP-951) in Produce v10+, Fetch v16+, ShareFetch and ShareAcknowledge
answers: the quick walk finds them (and only them) in answers kio writes, and the one rewrite
of :mod:`protocol.addresses` swaps them."""

from __future__ import annotations

import datetime
import importlib
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i32Timedelta, i64

from protocol.addresses import (
    broker_endpoints,
    decode_address_bearing,
    replace_endpoints,
)
from protocol.codec import Undecodable, encode_response
from protocol.node_endpoints import carries_node_endpoints, has_node_endpoints

pytestmark = pytest.mark.unit

ZERO = i32Timedelta.parse(datetime.timedelta(0))
TOPIC_ID = uuid.uuid5(uuid.NAMESPACE_DNS, "orders")
RECORDS = bytes(range(256)) * 40  # opaque to the walk: skipped by its length


def response_module(api: str, version: int) -> Any:
    return importlib.import_module(f"kio.schema.{api}.v{version}.response")


def endpoints(schema: Any) -> tuple[Any, ...]:
    return (
        schema.NodeEndpoint(node_id=i32(2), host="broker-2.internal", port=i32(9092), rack="r1"),
        schema.NodeEndpoint(node_id=i32(3), host="broker-3.internal", port=i32(9093)),
    )


def produce_answer(version: int, with_endpoints: bool) -> bytes:
    schema = response_module("produce", version)
    partitions = tuple(
        schema.PartitionProduceResponse(
            index=i32(p),
            error_code=ErrorCode.not_leader_or_follower if p else ErrorCode.invalid_record,
            base_offset=i64(-1),
            record_errors=(
                schema.BatchIndexAndErrorMessage(
                    batch_index=i32(0), batch_index_error_message="no"
                ),
            )
            if p == 0
            else (),
            error_message="bad" if p == 0 else None,
            current_leader=schema.LeaderIdAndEpoch(leader_id=i32(2), leader_epoch=i32(4)),
        )
        for p in range(3)
    )
    topic = (
        schema.TopicProduceResponse(topic_id=TOPIC_ID, partition_responses=partitions)
        if version >= 13
        else schema.TopicProduceResponse(name="orders", partition_responses=partitions)
    )
    payload = schema.ProduceResponse(
        responses=(topic, topic),
        throttle_time=ZERO,
        node_endpoints=endpoints(schema) if with_endpoints else (),
    )
    return encode_response(7, 0, version, payload)


def fetch_answer(version: int, with_endpoints: bool) -> bytes:
    schema = response_module("fetch", version)
    partitions = tuple(
        schema.PartitionData(
            partition_index=i32(p),
            error_code=ErrorCode.none if p else ErrorCode.not_leader_or_follower,
            high_watermark=i64(100),
            aborted_transactions=(
                schema.AbortedTransaction(producer_id=i64(5), first_offset=i64(9)),
            )
            if p == 1
            else None,
            records=RECORDS if p else None,
            current_leader=schema.LeaderIdAndEpoch(leader_id=i32(3), leader_epoch=i32(1)),
        )
        for p in range(3)
    )
    payload = schema.FetchResponse(
        throttle_time=ZERO,
        error_code=ErrorCode.none,
        session_id=i32(11),
        responses=(schema.FetchableTopicResponse(topic_id=TOPIC_ID, partitions=partitions),),
        node_endpoints=endpoints(schema) if with_endpoints else (),
    )
    return encode_response(7, 1, version, payload)


def share_fetch_answer(version: int, with_endpoints: bool) -> bytes:
    schema = response_module("share_fetch", version)
    partitions = tuple(
        schema.PartitionData(
            partition_index=i32(p),
            error_code=ErrorCode.none if p else ErrorCode.not_leader_or_follower,
            error_message=None if p else "moved",
            acknowledge_error_code=i16(0),
            acknowledge_error_message="ack" if p == 2 else None,
            current_leader=schema.LeaderIdAndEpoch(leader_id=i32(3), leader_epoch=i32(1)),
            records=RECORDS if p else b"",
            acquired_records=(
                schema.AcquiredRecords(
                    first_offset=i64(0), last_offset=i64(9), delivery_count=i16(1)
                ),
            )
            if p
            else (),
        )
        for p in range(3)
    )
    payload = schema.ShareFetchResponse(
        throttle_time=ZERO,
        error_code=ErrorCode.none,
        error_message=None,
        acquisition_lock_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        responses=(schema.ShareFetchableTopicResponse(topic_id=TOPIC_ID, partitions=partitions),)
        * 2,
        node_endpoints=endpoints(schema) if with_endpoints else (),
    )
    return encode_response(7, 78, version, payload)


def share_acknowledge_answer(version: int, with_endpoints: bool) -> bytes:
    schema = response_module("share_acknowledge", version)
    partitions = tuple(
        schema.PartitionData(
            partition_index=i32(p),
            error_code=ErrorCode.none if p else ErrorCode.not_leader_or_follower,
            error_message=None if p else "moved",
            current_leader=schema.LeaderIdAndEpoch(leader_id=i32(3), leader_epoch=i32(1)),
        )
        for p in range(3)
    )
    lock = {"acquisition_lock_timeout": ZERO} if version >= 2 else {}
    payload = schema.ShareAcknowledgeResponse(
        throttle_time=ZERO,
        error_code=ErrorCode.none,
        error_message="x",
        **lock,
        responses=(schema.ShareAcknowledgeTopicResponse(topic_id=TOPIC_ID, partitions=partitions),),
        node_endpoints=endpoints(schema) if with_endpoints else (),
    )
    return encode_response(7, 79, version, payload)


TAGGED_ANSWERS = [(0, v, produce_answer) for v in (10, 11, 12, 13)] + [
    (1, v, fetch_answer) for v in (16, 17, 18)
]
"""Answers whose endpoints are a tagged field."""
ANSWERS = TAGGED_ANSWERS + [
    (api_key, v, build)
    for api_key, build in ((78, share_fetch_answer), (79, share_acknowledge_answer))
    for v in (1, 2)
]


@pytest.mark.parametrize(("api_key", "version", "build"), ANSWERS)
def test_the_walk_finds_leader_endpoints_only_where_the_broker_put_them(
    api_key: int, version: int, build: Any
) -> None:
    assert has_node_endpoints(api_key, version, build(version, True))
    assert not has_node_endpoints(api_key, version, build(version, False))


@pytest.mark.parametrize(("api_key", "version", "build"), TAGGED_ANSWERS)
def test_an_empty_list_of_leader_endpoints_is_passed_unread(
    api_key: int, version: int, build: Any
) -> None:
    """Tansu writes the tagged field with no entry in every Fetch answer (kio leaves it out):
    it names no address, so the answer needs no rewrite; any entry still does."""
    plain = build(version, False)
    assert plain.endswith(b"\x00")  # the answer's own tagged fields: none
    # one tagged field: tag 0, one byte long, a compact array of no entries
    empty = plain[:-1] + b"\x01\x00\x01\x01"
    assert decode_address_bearing(api_key, version, empty).node_endpoints == ()
    assert not has_node_endpoints(api_key, version, empty)
    # another tagged field beside it changes nothing; a list with an entry is read
    assert not has_node_endpoints(api_key, version, plain[:-1] + b"\x02\x00\x01\x01\x05\x00")
    assert has_node_endpoints(api_key, version, build(version, True))


@pytest.mark.parametrize(("api_key", "version", "build"), ANSWERS)
def test_the_walk_refuses_a_truncated_or_padded_answer(
    api_key: int, version: int, build: Any
) -> None:
    frame = build(version, True)
    for broken in (frame[:-5], frame + b"\x00", frame[: len(frame) // 2]):
        with pytest.raises(Undecodable):
            has_node_endpoints(api_key, version, broken)


@pytest.mark.parametrize(("api_key", "version", "build"), ANSWERS)
def test_the_rewrite_swaps_every_leader_endpoint(api_key: int, version: int, build: Any) -> None:
    payload = decode_address_bearing(api_key, version, build(version, True))
    assert [(e.node_id, e.host, e.port) for e in broker_endpoints(api_key, payload)] == [
        (2, "broker-2.internal", 9092),
        (3, "broker-3.internal", 9093),
    ]
    gateway = {2: ("gw.example", 19092), 3: ("gw.example", 19093)}
    rewritten = replace_endpoints(api_key, payload, gateway)
    assert [(e.node_id, e.host, int(e.port), e.rack) for e in rewritten.node_endpoints] == [
        (2, "gw.example", 19092, "r1"),
        (3, "gw.example", 19093, None),
    ]
    assert rewritten.responses == payload.responses


@pytest.mark.parametrize(
    ("api_key", "version", "carries"),
    [(0, 9, False), (0, 10, True), (1, 15, False), (1, 16, True), (78, 1, True), (79, 2, True)],
)
def test_which_versions_carry_leader_endpoints(api_key: int, version: int, carries: bool) -> None:
    assert carries_node_endpoints(api_key, version) is carries


def test_a_rewrite_of_a_node_without_a_listener_fails() -> None:
    payload = decode_address_bearing(1, 16, fetch_answer(16, True))
    with pytest.raises(KeyError):
        replace_endpoints(1, payload, {2: ("gw.example", 1)})


@pytest.mark.parametrize("version", [16, 17, 18])
def test_a_fetch_answer_merged_with_local_errors_keeps_the_brokers_leader_endpoints(
    version: int,
) -> None:
    """A Fetch naming one of the gateway's own topics is read and answered partly here; the
    merged answer must keep the leader endpoints for the rewrite that follows the merge."""
    from protocol import partitioned as pt
    from protocol.codec import decode_response, encode_request
    from protocol.framing import parse_request_header
    from protocol.results import ItemError

    own = uuid.uuid5(uuid.NAMESPACE_DNS, "own")
    m = importlib.import_module(f"kio.schema.fetch.v{version}.request")
    payload = m.FetchRequest(
        max_wait=ZERO,
        min_bytes=i32(1),
        max_bytes=i32(1 << 20),
        isolation_level=0,
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=tuple(
            m.FetchTopic(
                topic_id=t,
                partitions=tuple(
                    m.FetchPartition(
                        partition=i32(p),
                        current_leader_epoch=i32(-1),
                        fetch_offset=i64(0),
                        last_fetched_epoch=i32(-1),
                        log_start_offset=i64(-1),
                        partition_max_bytes=i32(1 << 20),
                    )
                    for p in range(3)
                ),
            )
            for t in (own, TOPIC_ID)
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    frame = encode_request(1, version, 7, "c", payload)[4:]
    request = pt.read(parse_request_header(frame), frame)
    local = {(str(own), p): ItemError(error_code=29) for p in range(3)}
    merged = decode_response(1, version, pt.answer(request, 7, local, fetch_answer(version, True)))
    assert [(e.node_id, e.host) for e in merged.node_endpoints] == [
        (2, "broker-2.internal"),
        (3, "broker-3.internal"),
    ]
    assert has_node_endpoints(1, version, pt.answer(request, 7, local, fetch_answer(version, True)))
