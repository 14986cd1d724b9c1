"""Transaction bookkeeping sent in the brokers' own form: AddPartitionsToTxn v4 and later
(KIP-890) batch transactions, each naming a transactional id, producer id and epoch, and is
what a partition leader sends the transaction coordinator. Kafka allows it to brokers alone
(CLUSTER_ACTION, granted to anyone by a broker without an authorizer); carried, it lets a client
add partitions of any topic, the gateway's own included, to any producer's transaction, whose
markers the coordinator then writes into them. The gateway carries the clients' form (v0-v3)
only: it advertises no more, and a v4 request closes the connection unforwarded.

Against the tapped real broker (Tansu takes AddPartitionsToTxn to v5).

A transactional Produce to a validated topic is validated as any other: a batch the rules
refuse never reaches the broker, so committing its transaction (EndTxn, which the gateway
carries as sent) has nothing of it to make visible.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from kio.records.schema import NewRecordBatch
from kio.records.writers import write_new_batch
from kio.schema.add_partitions_to_txn.v3 import request as v3
from kio.schema.add_partitions_to_txn.v4 import request as v4
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_offsets.v7 import request as lo
from kio.schema.types import BrokerId, ProducerId, TopicName, TransactionalId
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from tests.batches import produce_v9, record
from tests.inproc.test_record_validation import create_validated_topic
from tests.support import BrokerTap, GatewayThread, RawClient, TapRecord, gateway_config

pytestmark = pytest.mark.adversarial

ADD_PARTITIONS_TO_TXN, INIT_PRODUCER_ID, API_VERSIONS = 24, 22, 18
PRODUCE, END_TXN, LIST_OFFSETS = 0, 26, 2
INVALID_RECORD = 87
TRANSACTIONAL = 0x10
READ_COMMITTED = 1


@pytest.fixture
def gw(tap: BrokerTap) -> Iterator[tuple[GatewayThread, str]]:
    own = f"kpg-audit-{uuid.uuid4().hex[:8]}"
    running = GatewayThread(gateway_config(tap.address, audit={"topic": own})).start()
    tap.requests.clear()
    try:
        yield running, own
    finally:
        running.stop()


def _producer(client: RawClient, transactional_id: str) -> tuple[ProducerId, i16]:
    answer = client.request(
        INIT_PRODUCER_ID,
        4,
        InitProducerIdRequest(
            transactional_id=TransactionalId(transactional_id),
            transaction_timeout=i32Timedelta.parse(timedelta(seconds=60)),
            producer_id=ProducerId(-1),
            producer_epoch=i16(-1),
        ),
    )
    assert int(answer.error_code) == 0
    return answer.producer_id, answer.producer_epoch


def _add_in_the_clients_form(client: RawClient, partitions: dict[str, tuple[int, ...]]) -> Any:
    """AddPartitionsToTxn v3 of ``partitions`` (topic -> indexes) for a new producer."""
    transactional_id = f"tx-{uuid.uuid4().hex[:8]}"
    producer_id, epoch = _producer(client, transactional_id)
    return client.request(
        ADD_PARTITIONS_TO_TXN,
        3,
        v3.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=TransactionalId(transactional_id),
            v3_and_below_producer_id=producer_id,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=tuple(
                v3.AddPartitionsToTxnTopic(
                    name=TopicName(topic), partitions=tuple(i32(i) for i in indexes)
                )
                for topic, indexes in partitions.items()
            ),
        ),
    )


def test_the_brokers_batched_form_never_reaches_the_broker(
    gw: tuple[GatewayThread, str], tap: BrokerTap
) -> None:
    gateway, own = gw
    client = RawClient(gateway.bootstrap, timeout=5)
    transactional_id = f"tx-{uuid.uuid4().hex[:8]}"
    producer_id, epoch = _producer(client, transactional_id)
    request = v4.AddPartitionsToTxnRequest(
        transactions=(
            v4.AddPartitionsToTxnTransaction(
                transactional_id=TransactionalId(transactional_id),
                producer_id=producer_id,
                producer_epoch=epoch,
                verify_only=False,
                topics=(v4.AddPartitionsToTxnTopic(name=TopicName(own), partitions=(i32(0),)),),
            ),
        )
    )
    client.send(ADD_PARTITIONS_TO_TXN, 4, request)
    with pytest.raises((ConnectionError, OSError)):
        client.recv_frame()
    assert ADD_PARTITIONS_TO_TXN not in tap.api_keys()


def test_the_clients_form_is_carried_and_advertised_alone(
    gw: tuple[GatewayThread, str], tap: BrokerTap
) -> None:
    gateway, _ = gw
    client = RawClient(gateway.bootstrap)
    versions = client.request(
        API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1")
    )
    advertised = {
        int(k.api_key): (int(k.min_version), int(k.max_version)) for k in versions.api_keys
    }
    assert advertised[ADD_PARTITIONS_TO_TXN] == (0, 3)
    topic = f"t-{uuid.uuid4().hex[:8]}"
    answer = _add_in_the_clients_form(client, {topic: (0,)})
    assert [str(t.name) for t in answer.results_by_topic_v3_and_below] == [topic]
    assert len(tap.forwarded(ADD_PARTITIONS_TO_TXN)) == 1


def test_the_gateways_own_topic_is_added_to_no_transaction(
    gw: tuple[GatewayThread, str], tap: BrokerTap
) -> None:
    """The clients' form naming the gateway's audit topic beside a plain one: the coordinator
    would write the transaction's markers into the audit topic. Refused as Kafka refuses an
    unauthorized partition: that partition TOPIC_AUTHORIZATION_FAILED, the other
    OPERATION_NOT_ATTEMPTED, and nothing reaches the broker (Kafka adds all or none)."""
    gateway, own = gw
    client = RawClient(gateway.bootstrap)
    plain = f"t-{uuid.uuid4().hex[:8]}"
    answer = _add_in_the_clients_form(client, {plain: (0,), own: (0, 1)})
    errors = {
        (str(t.name), int(p.partition_index)): int(p.partition_error_code)
        for t in answer.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }
    assert errors == {(plain, 0): 55, (own, 0): 29, (own, 1): 29}
    assert ADD_PARTITIONS_TO_TXN not in tap.api_keys()


def _transactional_batch(producer_id: ProducerId, epoch: i16) -> bytes:
    """One record, without the ``trace-id`` header the validated topic requires, written in
    the producer's transaction."""
    buffer = io.BytesIO()
    write_new_batch(
        buffer,
        NewRecordBatch(
            producer_id=i64(producer_id),
            producer_epoch=epoch,
            base_sequence=i32(0),
            records=(record(0, b"k", b"untraced"),),
            attributes=i16(TRANSACTIONAL),
        ),
    )
    return buffer.getvalue()


def _clients_produce(tap: BrokerTap) -> list[TapRecord]:
    """The Produce requests that reached the broker, but the audit sink's (client id
    kpg-audit, writing the decisions into the audit topic)."""
    return [r for r in tap.requests if r.api_key == PRODUCE and r.client_id != "kpg-audit"]


def _visible_end(client: RawClient, topic: str) -> int:
    """The end of what a read_committed consumer of partition 0 sees."""
    partition = lo.ListOffsetsPartition(
        partition_index=i32(0), current_leader_epoch=i32(-1), timestamp=i64(-1)
    )
    answer = client.request(
        LIST_OFFSETS,
        7,
        lo.ListOffsetsRequest(
            replica_id=BrokerId(-1),
            isolation_level=i8(READ_COMMITTED),
            topics=(lo.ListOffsetsTopic(name=TopicName(topic), partitions=(partition,)),),
        ),
    )
    ((offset,),) = [[int(p.offset) for p in t.partitions] for t in answer.topics]
    return offset


def test_a_refused_transactional_batch_is_not_made_visible_by_a_commit(
    gw: tuple[GatewayThread, str], tap: BrokerTap
) -> None:
    gateway, _ = gw
    topic = create_validated_topic(gateway.bootstrap)
    client = RawClient(gateway.bootstrap)
    transactional_id = f"tx-{uuid.uuid4().hex[:8]}"
    producer_id, epoch = _producer(client, transactional_id)
    added = client.request(
        ADD_PARTITIONS_TO_TXN,
        3,
        v3.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=TransactionalId(transactional_id),
            v3_and_below_producer_id=producer_id,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=(
                v3.AddPartitionsToTxnTopic(name=TopicName(topic), partitions=(i32(0),)),
            ),
        ),
    )
    assert [
        int(p.partition_error_code)
        for t in added.results_by_topic_v3_and_below
        for p in t.results_by_partition
    ] == [0]
    tap.requests.clear()
    produced = client.request(
        PRODUCE,
        9,
        produce_v9(
            {topic: {0: _transactional_batch(producer_id, epoch)}},
            acks=-1,
            transactional_id=transactional_id,
        ),
    )
    codes = [int(p.error_code) for r in produced.responses for p in r.partition_responses]
    assert codes == [INVALID_RECORD]
    assert not _clients_produce(tap)
    ended = client.request(
        END_TXN,
        3,
        EndTxnRequest(
            transactional_id=TransactionalId(transactional_id),
            producer_id=producer_id,
            producer_epoch=epoch,
            committed=True,
        ),
    )
    assert len(tap.forwarded(END_TXN)) == 1, ended
    assert not _clients_produce(tap)
    assert _visible_end(client, topic) == 0
