"""Produce v3..v13: requests and answers built with kio's schemas, read, reduced and merged
(v13, which names topics by id, in tests of its own at the end)."""

from __future__ import annotations

import datetime
import importlib
import io
import uuid
from types import ModuleType
from typing import Any

import pytest
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch
from kio.schema.errors import ErrorCode
from kio.static.primitive import TZAwareMicros, i8, i16, i32, i32Timedelta, i64

from protocol.codec import Undecodable, decode_response, encode_request, encode_response
from protocol.framing import parse_request_header, response_correlation_id
from protocol.produce import (
    PartitionRecords,
    ProduceView,
    failed_partitions,
    produce_acks,
    produce_answer,
    produce_partition_count,
    produce_request_keeping,
    produce_topics,
    read_produce,
)
from protocol.records import read_batches
from protocol.results import ItemError
from tests.enforcement_support import produce_response

pytestmark = pytest.mark.unit

VERSIONS = range(3, 13)
"""The versions naming topics by name."""
CORRELATION_ID = 4242
CLIENT_ID = "producer-1"
TIMESTAMP = TZAwareMicros.parse(datetime.datetime(2024, 5, 1, tzinfo=datetime.UTC))
# Millisecond precision, as a broker with LogAppendTime sends it (kio's TZAware type takes
# whole seconds only, but its reader and writer carry milliseconds).
APPEND_TIME = datetime.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=datetime.UTC)

Partitions = tuple[tuple[str, tuple[tuple[int, bytes | None], ...]], ...]


def batch(*values: bytes, producer_id: int = -1) -> bytes:
    buffer = io.BytesIO()
    write_new_batch(
        buffer,
        NewRecordBatch(
            producer_id=i64(producer_id),
            producer_epoch=i16(-1),
            base_sequence=i32(-1),
            attributes=i16(0),
            records=tuple(
                Record(
                    attributes=i8(0),
                    timestamp=TIMESTAMP,
                    offset=i64(offset),
                    key=None,
                    value=value,
                    headers=(),
                )
                for offset, value in enumerate(values)
            ),
        ),
    )
    return buffer.getvalue()


ORDERS_0 = batch(b"order-a", b"order-b")
ORDERS_2 = batch(b"order-c") + batch(b"order-d", b"order-e")  # two batches in one partition
PAYMENTS_1 = batch(b"payment-a")
AUDIT_0 = batch(b"audit-a", producer_id=9)

TOPICS: Partitions = (
    ("orders", ((0, ORDERS_0), (2, ORDERS_2))),
    ("payments", ((1, PAYMENTS_1),)),
    ("audit", ((0, AUDIT_0),)),
)


def request_module(version: int) -> ModuleType:
    return importlib.import_module(f"kio.schema.produce.v{version}.request")


def response_module(version: int) -> ModuleType:
    return importlib.import_module(f"kio.schema.produce.v{version}.response")


def request_frame(
    version: int,
    topics: Partitions = TOPICS,
    *,
    transactional_id: str | None = None,
    acks: int = -1,
    timeout_ms: int = 30_000,
) -> bytes:
    """A Produce request frame (no size prefix) encoded by kio."""
    schema = request_module(version)
    payload = schema.ProduceRequest(
        transactional_id=transactional_id,
        acks=i16(acks),
        timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=timeout_ms)),
        topic_data=tuple(
            schema.TopicProduceData(
                name=name,
                partition_data=tuple(
                    schema.PartitionProduceData(index=i32(index), records=records)
                    for index, records in partitions
                ),
            )
            for name, partitions in topics
        ),
    )
    return encode_request(0, version, CORRELATION_ID, CLIENT_ID, payload)[4:]


def read(frame: bytes) -> ProduceView:
    return read_produce(parse_request_header(frame), frame)


def broker_partition(version: int, index: int, base_offset: int) -> Any:
    """A successful partition answer, as a broker writes it."""
    fields: dict[str, Any] = {
        "index": i32(index),
        "error_code": ErrorCode.none,
        "base_offset": i64(base_offset),
        "log_append_time": APPEND_TIME,
    }
    if version >= 5:
        fields["log_start_offset"] = i64(7)
    if version >= 8:
        fields["record_errors"] = ()
        fields["error_message"] = None
    return response_module(version).PartitionProduceResponse(**fields)


def broker_frame(
    version: int, topics: tuple[tuple[str, tuple[Any, ...]], ...], throttle_ms: int = 250
) -> bytes:
    schema = response_module(version)
    payload = schema.ProduceResponse(
        responses=tuple(
            schema.TopicProduceResponse(name=name, partition_responses=partitions)
            for name, partitions in topics
        ),
        throttle_time=i32Timedelta.parse(datetime.timedelta(milliseconds=throttle_ms)),
    )
    return encode_response(CORRELATION_ID, 0, version, payload)


def layout(answer: Any) -> list[tuple[str, list[int]]]:
    return [
        (topic.name, [int(p.index) for p in topic.partition_responses])
        for topic in answer.responses
    ]


def partition_answer(answer: Any, topic: str, index: int) -> Any:
    (found,) = [
        p
        for t in answer.responses
        if t.name == topic
        for p in t.partition_responses
        if p.index == index
    ]
    return found


REJECTED = ItemError(
    error_code=ErrorCode.invalid_record,
    error_message="record policy 'no-pii' denied 2 records",
    record_errors=((0, "value matches a card number"), (1, None)),
)
DENIED = ItemError(error_code=ErrorCode.policy_violation, error_message="topic audit is closed")


# --- read_produce ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    ("transactional_id", "acks", "timeout_ms"),
    [(None, -1, 30_000), ("tx-orders", 1, 1_500), (None, 0, 0)],
)
def test_read_produce_gives_the_request_back(
    version: int, transactional_id: str | None, acks: int, timeout_ms: int
) -> None:
    frame = request_frame(
        version, transactional_id=transactional_id, acks=acks, timeout_ms=timeout_ms
    )
    view = read(frame)
    assert (view.version, view.transactional_id, view.acks, view.timeout_ms) == (
        version,
        transactional_id,
        acks,
        timeout_ms,
    )
    assert view.partitions == (
        PartitionRecords(topic="orders", partition=0, records=ORDERS_0),
        PartitionRecords(topic="orders", partition=2, records=ORDERS_2),
        PartitionRecords(topic="payments", partition=1, records=PAYMENTS_1),
        PartitionRecords(topic="audit", partition=0, records=AUDIT_0),
    )
    assert view.acks == produce_acks(parse_request_header(frame), frame)
    assert [b.record_count for b in read_batches(view.partitions[1].records or b"")] == [1, 2]


@pytest.mark.parametrize("version", VERSIONS)
def test_read_produce_keeps_null_and_empty_records_apart(version: int) -> None:
    view = read(request_frame(version, (("orders", ((0, None), (1, b""))),)))
    assert [p.records for p in view.partitions] == [None, b""]


@pytest.mark.parametrize("version", VERSIONS)
def test_read_produce_refuses_a_truncated_body(version: int) -> None:
    frame = request_frame(version)
    with pytest.raises(Undecodable):
        read(frame[:-3])


@pytest.mark.parametrize("version", [14, 15])
def test_read_produce_refuses_versions_the_gateway_does_not_carry(version: int) -> None:
    frame = bytearray(request_frame(12))
    frame[2:4] = version.to_bytes(2, "big")  # a version newer than kio's
    with pytest.raises(Undecodable, match="not carried"):
        read(bytes(frame))


# --- produce_topics ---------------------------------------------------------------------------


def topics_of(frame: bytes) -> tuple[str, ...]:
    return produce_topics(parse_request_header(frame), frame)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("transactional_id", [None, "tx-orders"])
def test_produce_topics_names_each_topic_once_in_request_order(
    version: int, transactional_id: str | None
) -> None:
    frame = request_frame(version, transactional_id=transactional_id)
    assert topics_of(frame) == ("orders", "payments", "audit")
    assert topics_of(frame) == tuple(dict.fromkeys(p.topic for p in read(frame).partitions))


@pytest.mark.parametrize("version", VERSIONS)
def test_produce_topics_steps_over_null_empty_and_large_records(version: int) -> None:
    large = batch(b"x" * 70_000)  # a records length of several varint bytes in v9
    topics = (
        ("orders", ((0, None), (1, b""))),
        ("big", ((0, large),)),
        ("orders", ((2, ORDERS_2),)),
        ("\u00e9v\u00e9nements", ((0, ORDERS_0),)),
    )
    assert topics_of(request_frame(version, topics)) == ("orders", "big", "\u00e9v\u00e9nements")


@pytest.mark.parametrize("version", VERSIONS)
def test_produce_topics_refuses_a_truncated_body(version: int) -> None:
    frame = request_frame(version)
    with pytest.raises(Undecodable):
        topics_of(frame[:-3])
    with pytest.raises(Undecodable):
        topics_of(frame[: len(frame) // 2])


# --- produce_partition_count ----------------------------------------------------------------


def count_of(frame: bytes, limit: int = 1000) -> int:
    return produce_partition_count(parse_request_header(frame), frame, limit)


MIXED: Partitions = (
    ("orders", ((0, None), (1, b""), (2, ORDERS_2))),
    ("big", ((0, batch(b"x" * 70_000)),)),
    ("orders", ((3, ORDERS_0),)),
)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("transactional_id", [None, "tx-orders"])
def test_partition_count_is_the_readers(version: int, transactional_id: str | None) -> None:
    for topics in (TOPICS, MIXED):
        frame = request_frame(version, topics, transactional_id=transactional_id)
        assert count_of(frame) == len(read(frame).partitions)


def test_partition_count_by_topic_id() -> None:
    frame = request_frame_by_id(
        ((uuid.uuid4(), ((0, ORDERS_0), (1, ORDERS_2))), (uuid.uuid4(), ((4, PAYMENTS_1),)))
    )
    assert count_of(frame) == 3


@pytest.mark.parametrize("version", [3, 9, 13])
def test_partition_count_stops_past_the_limit(version: int) -> None:
    many = tuple((index, None) for index in range(500))
    if version == 13:
        frame = request_frame_by_id(((uuid.uuid4(), many),))  # type: ignore[arg-type]
    else:
        frame = request_frame(version, (("orders", many),))
    assert count_of(frame, limit=500) == 500
    assert count_of(frame, limit=10) == 11


@pytest.mark.parametrize("version", [3, 9, 13])
def test_a_topic_entry_with_no_partitions_counts_as_one(version: int) -> None:
    if version == 13:
        frame = request_frame_by_id(tuple((uuid.uuid4(), ()) for _ in range(50)))
    else:
        frame = request_frame(version, tuple((f"t{index}", ()) for index in range(50)))
    assert count_of(frame) == 50
    assert count_of(frame, limit=10) == 11


@pytest.mark.parametrize("version", VERSIONS)
def test_partition_count_of_a_truncated_body_is_what_it_holds(version: int) -> None:
    frame = request_frame(version)
    assert count_of(frame[:-3]) <= len(read(frame).partitions)
    assert count_of(frame[: len(frame) // 2]) < len(read(frame).partitions)


# --- produce_request_keeping ----------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_keeping_drops_partitions_and_emptied_topics(version: int) -> None:
    frame = request_frame(version, transactional_id="tx-orders", acks=1, timeout_ms=9_000)
    header = parse_request_header(frame)
    view = read_produce(header, frame)

    reduced = produce_request_keeping(view, header, [("orders", 2), ("audit", 0)])

    reduced_header = parse_request_header(reduced)
    assert (
        reduced_header.api_version,
        reduced_header.correlation_id,
        reduced_header.client_id,
    ) == (version, CORRELATION_ID, CLIENT_ID)
    again = read_produce(reduced_header, reduced)
    assert again.partitions == (
        PartitionRecords(topic="orders", partition=2, records=ORDERS_2),
        PartitionRecords(topic="audit", partition=0, records=AUDIT_0),
    )
    assert [t.name for t in again.payload.topic_data] == ["orders", "audit"]
    assert (again.transactional_id, again.acks, again.timeout_ms) == ("tx-orders", 1, 9_000)


@pytest.mark.parametrize("version", VERSIONS)
def test_keeping_everything_gives_the_clients_bytes(version: int) -> None:
    frame = request_frame(version, transactional_id="tx-orders")
    header = parse_request_header(frame)
    view = read_produce(header, frame)
    everything = {(p.topic, p.partition) for p in view.partitions}
    assert produce_request_keeping(view, header, everything) == frame


# --- produce_answer -------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_answer_merges_local_errors_into_the_brokers_answer_in_request_order(
    version: int,
) -> None:
    view = read(request_frame(version))
    local = {("orders", 2): REJECTED, ("audit", 0): DENIED}
    # The broker answers the reduced request (orders-0, payments-1), in its own order.
    from_broker = broker_frame(
        version,
        (
            ("payments", (broker_partition(version, 1, base_offset=500),)),
            ("orders", (broker_partition(version, 0, base_offset=100),)),
        ),
    )

    frame = produce_answer(view, CORRELATION_ID, local, from_broker)

    assert response_correlation_id(frame) == CORRELATION_ID
    answer = decode_response(0, version, frame)
    assert layout(answer) == [("orders", [0, 2]), ("payments", [1]), ("audit", [0])]
    assert answer.throttle_time == datetime.timedelta(milliseconds=250)
    assert partition_answer(answer, "orders", 0) == broker_partition(version, 0, 100)
    assert partition_answer(answer, "payments", 1) == broker_partition(version, 1, 500)

    rejected = partition_answer(answer, "orders", 2)
    assert (rejected.error_code, rejected.base_offset, rejected.log_append_time) == (
        ErrorCode.invalid_record,
        -1,
        None,
    )
    assert partition_answer(answer, "audit", 0).error_code == ErrorCode.policy_violation
    if version >= 5:
        assert rejected.log_start_offset == -1
    if version >= 8:
        assert [(e.batch_index, e.batch_index_error_message) for e in rejected.record_errors] == [
            (0, "value matches a card number"),
            (1, None),
        ]
        assert rejected.error_message == "record policy 'no-pii' denied 2 records"
        assert partition_answer(answer, "audit", 0).error_message == "topic audit is closed"
    else:
        assert not hasattr(rejected, "record_errors")
        assert not hasattr(rejected, "error_message")


@pytest.mark.parametrize("version", VERSIONS)
def test_answer_with_nothing_local_is_the_brokers_bytes(version: int) -> None:
    view = read(request_frame(version))
    from_broker = broker_frame(
        version,
        (
            ("orders", (broker_partition(version, 0, 100), broker_partition(version, 2, 50))),
            ("payments", (broker_partition(version, 1, 500),)),
            ("audit", (broker_partition(version, 0, 9),)),
        ),
    )
    assert produce_answer(view, CORRELATION_ID, {}, from_broker) == from_broker


@pytest.mark.parametrize("version", VERSIONS)
def test_local_error_has_kafkas_layout_byte_for_byte(version: int) -> None:
    """The bytes of a local answer are those of a broker answer with the same fields, so a
    v3..v7 client gets the bare error code and nothing it cannot parse."""
    view = read(request_frame(version, (("orders", ((2, ORDERS_2),)),)))
    fields: dict[str, Any] = {
        "index": i32(2),
        "error_code": ErrorCode.invalid_record,
        "base_offset": i64(-1),
        "log_append_time": None,
    }
    if version >= 8:
        record_error = response_module(version).BatchIndexAndErrorMessage
        fields["record_errors"] = (
            record_error(
                batch_index=i32(0), batch_index_error_message="value matches a card number"
            ),
            record_error(batch_index=i32(1), batch_index_error_message=None),
        )
        fields["error_message"] = "record policy 'no-pii' denied 2 records"
    kafkas = response_module(version).PartitionProduceResponse(**fields)
    expected = broker_frame(version, (("orders", (kafkas,)),), throttle_ms=0)

    assert produce_answer(view, CORRELATION_ID, {("orders", 2): REJECTED}, None) == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_answer_without_a_broker_answer_is_all_local_with_no_throttle(version: int) -> None:
    view = read(request_frame(version))
    local = {(p.topic, p.partition): DENIED for p in view.partitions}

    answer = decode_response(0, version, produce_answer(view, 7, local, None))

    assert layout(answer) == [("orders", [0, 2]), ("payments", [1]), ("audit", [0])]
    assert answer.throttle_time == datetime.timedelta(0)
    codes = {p.error_code for t in answer.responses for p in t.partition_responses}
    assert codes == {ErrorCode.policy_violation}


@pytest.mark.parametrize("version", [3, 9])
def test_answer_names_each_partition_once_when_the_request_repeats_it(version: int) -> None:
    """As Kafka does: one entry per topic and partition, topics where they first appear."""
    topics: Partitions = (
        ("orders", ((0, ORDERS_0),)),
        ("payments", ((1, PAYMENTS_1),)),
        ("orders", ((0, ORDERS_2), (3, ORDERS_0))),
    )
    view = read(request_frame(version, topics))
    assert [(p.topic, p.partition) for p in view.partitions] == [
        ("orders", 0),
        ("payments", 1),
        ("orders", 0),
        ("orders", 3),
    ]
    local = {("orders", 0): DENIED, ("payments", 1): DENIED, ("orders", 3): DENIED}

    answer = decode_response(0, version, produce_answer(view, 7, local, None))

    assert layout(answer) == [("orders", [0, 3]), ("payments", [1])]


@pytest.mark.parametrize("version", VERSIONS)
def test_answer_refuses_a_broker_answer_that_lacks_a_partition(version: int) -> None:
    view = read(request_frame(version))
    local = {("orders", 2): REJECTED, ("audit", 0): DENIED}
    only_orders = broker_frame(version, (("orders", (broker_partition(version, 0, 100),)),))
    with pytest.raises(KeyError, match="payments-1"):
        produce_answer(view, CORRELATION_ID, local, only_orders)
    with pytest.raises(KeyError, match="orders-0"):
        produce_answer(view, CORRELATION_ID, local, None)


@pytest.mark.parametrize("version", VERSIONS)
def test_answer_refuses_a_malformed_broker_answer(version: int) -> None:
    view = read(request_frame(version))
    local = {(p.topic, p.partition): DENIED for p in view.partitions}
    good = broker_frame(version, (("orders", (broker_partition(version, 0, 100),)),))
    with pytest.raises(Undecodable):
        produce_answer(view, CORRELATION_ID, local, good[:-2])


# --- v13: topics named by id (KIP-516); v10+: the broker's leader endpoints kept ------------

ORDERS_ID = uuid.uuid5(uuid.NAMESPACE_DNS, "orders")
AUDIT_ID = uuid.uuid5(uuid.NAMESPACE_DNS, "audit")


def request_frame_by_id(
    topics: tuple[tuple[uuid.UUID, tuple[tuple[int, bytes], ...]], ...],
) -> bytes:
    schema = request_module(13)
    payload = schema.ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=30_000)),
        topic_data=tuple(
            schema.TopicProduceData(
                topic_id=topic_id,
                partition_data=tuple(
                    schema.PartitionProduceData(index=i32(index), records=records)
                    for index, records in partitions
                ),
            )
            for topic_id, partitions in topics
        ),
    )
    return encode_request(0, 13, CORRELATION_ID, CLIENT_ID, payload)[4:]


def test_v13_partitions_are_keyed_by_topic_id() -> None:
    view = read(request_frame_by_id(((ORDERS_ID, ((0, ORDERS_0),)), (AUDIT_ID, ((0, AUDIT_0),)))))
    assert view.by_id
    assert [(p.topic, p.partition, p.topic_id) for p in view.partitions] == [
        (str(ORDERS_ID), 0, ORDERS_ID),
        (str(AUDIT_ID), 0, AUDIT_ID),
    ]


def test_v13_keeping_and_answer_go_by_topic_id() -> None:
    frame = request_frame_by_id(
        ((ORDERS_ID, ((0, ORDERS_0), (2, ORDERS_2))), (AUDIT_ID, ((0, AUDIT_0),)))
    )
    header = parse_request_header(frame)
    view = read_produce(header, frame)

    reduced = read(produce_request_keeping(view, header, [(str(ORDERS_ID), 2)]))
    assert [(p.topic_id, p.partition) for p in reduced.partitions] == [(ORDERS_ID, 2)]

    schema = response_module(13)
    broker = encode_response(
        CORRELATION_ID,
        0,
        13,
        schema.ProduceResponse(
            responses=(
                schema.TopicProduceResponse(
                    topic_id=ORDERS_ID, partition_responses=(broker_partition(13, 2, 40),)
                ),
            ),
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        ),
    )
    local = {(str(ORDERS_ID), 0): REJECTED, (str(AUDIT_ID), 0): DENIED}
    answer = decode_response(0, 13, produce_answer(view, CORRELATION_ID, local, broker))
    assert [
        (t.topic_id, [(int(p.index), p.error_code) for p in t.partition_responses])
        for t in answer.responses
    ] == [
        (ORDERS_ID, [(0, ErrorCode.invalid_record), (2, ErrorCode.none)]),
        (AUDIT_ID, [(0, ErrorCode.policy_violation)]),
    ]


@pytest.mark.parametrize("version", [10, 11, 12])
def test_a_merged_answer_keeps_the_brokers_leader_endpoints(version: int) -> None:
    """The handler rewrites them after the merge; a merge that dropped them would withhold
    the new leader from the client."""
    frame = request_frame(version)
    view = read(frame)
    schema = response_module(version)
    moved = schema.PartitionProduceResponse(
        index=i32(2),
        error_code=ErrorCode.not_leader_or_follower,
        base_offset=i64(-1),
        record_errors=(),
        current_leader=schema.LeaderIdAndEpoch(leader_id=i32(7), leader_epoch=i32(3)),
    )
    endpoint = schema.NodeEndpoint(node_id=i32(7), host="broker-7.internal", port=i32(9092))
    broker = encode_response(
        CORRELATION_ID,
        0,
        version,
        schema.ProduceResponse(
            responses=(
                schema.TopicProduceResponse(
                    name="orders", partition_responses=(broker_partition(version, 0, 1), moved)
                ),
                schema.TopicProduceResponse(
                    name="payments", partition_responses=(broker_partition(version, 1, 5),)
                ),
            ),
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
            node_endpoints=(endpoint,),
        ),
    )
    answer = decode_response(
        0, version, produce_answer(view, CORRELATION_ID, {("audit", 0): DENIED}, broker)
    )
    assert answer.node_endpoints == (endpoint,)
    assert partition_answer(answer, "orders", 2) == moved


def test_failed_partitions_are_those_with_any_error_code_but_none() -> None:
    """What closes an acks=0 client's connection (its acks config made the request acks=all):
    UNKNOWN_SERVER_ERROR is -1, an error as much as a positive code."""
    answer = produce_response(9, {("t", 0): 0, ("t", 1): -1, ("t", 2): 19})
    assert failed_partitions(9, answer) == [
        "t-1 (UNKNOWN_SERVER_ERROR)",
        "t-2 (NOT_ENOUGH_REPLICAS)",
    ]
