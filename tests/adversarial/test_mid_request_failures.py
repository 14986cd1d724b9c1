"""What the gateway does when something it depends on fails half-way through a request it has
judged: its state store, the broker. The client must never be told a change succeeded that
was not carried out, and the audit must say what the client was answered: an item the
policies allowed but the gateway then refused has an event saying so, whose request id ends
the client's error message.

Each case runs the real gateway in front of the real broker; a state store that fails is the
gateway's own SQLite file refusing writes (a trigger: SQLite's answer to a full disk or a
locked file, at once), or, with ``state.store: kafka``, the broker holding the store's
writes (the tap). The audit spool's failures are in tests/unit/test_audit_spool.py and
tests/e2e/test_audit_failure.py, the state file's in tests/unit/test_state_sqlite.py, the
workers' in tests/e2e/test_workers.py and tests/unit/test_live_operation.py.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName
from kio.static.primitive import i32Timedelta

from gateway.client_configs import ClientConfigCodes
from gateway.config import HostPort
from protocol import client_configs as wire
from protocol.addresses import METADATA
from protocol.alter_configs import SET
from protocol.codec import decode_response
from tests.support import (
    BrokerTap,
    GatewayThread,
    RawClient,
    create_topic_request,
    existing_topics,
    gateway_config,
    spool_events,
    topic_configs,
    unique_name,
    wait_for,
)

pytestmark = pytest.mark.adversarial

PRODUCE = 0
CREATE_TOPICS = 19
DELETE_TOPICS = 20
UNKNOWN_SERVER_ERROR = -1
REQUEST_TIMED_OUT = 7
UNKNOWN_TOPIC_OR_PARTITION = 3
POLICY = "trace-id"
KEY = "record.validation.policy"
TOPIC = 2
USER_CLIENT = ClientConfigCodes().user_client_type
STATE_STORE = "state_store"
"""The policy of the audit event of a refusal the state store caused."""


class StoreGateway:
    """A gateway writing its audit spool in ``spool``, whose state store can be made to refuse
    every write."""

    def __init__(self, gw: GatewayThread, spool: Path) -> None:
        self.gw = gw
        self.spool = spool
        self.state_path = Path(gw.config.state.path)

    def refuse_writes(self) -> None:
        with closing(sqlite3.connect(self.state_path)) as conn:
            for what in ("INSERT", "UPDATE", "DELETE"):
                conn.execute(
                    f"CREATE TRIGGER refuse_{what.lower()} BEFORE {what} ON gateway_state "
                    "BEGIN SELECT RAISE(ABORT, 'disk full (a test trigger)'); END"
                )
            conn.commit()

    def events(self, request_id: str) -> list[tuple[str, str, str | None, int | None]]:
        """(resource name, verdict, policy, error code) of each event of ``request_id``."""
        found = spool_events(self.spool, lambda e: e.request_id == request_id)
        return [(e.resource_name, e.verdict, e.policy, e.error_code) for e in found]


@pytest.fixture
def store_gateway(broker: HostPort, tmp_path: Path) -> Iterator[StoreGateway]:
    spool = tmp_path / "audit"
    gw = GatewayThread(gateway_config(broker, audit={"spool_dir": str(spool)})).start()
    try:
        yield StoreGateway(gw, spool)
    finally:
        gw.stop()


def request_id_of(message: str | None) -> str:
    assert message is not None
    match = re.search(r"\(audit request id ([0-9a-f]{32})\)$", message)
    assert match is not None, f"no audit request id in {message!r}"
    return match.group(1)


def test_a_create_whose_policy_cannot_be_stored_is_audited_as_refused(
    store_gateway: StoreGateway,
) -> None:
    """A CreateTopics setting record.validation.policy is judged and audited allowed, then the
    gateway stores the policy before the broker creates the topic. When that write fails the
    topic is not created and the client gets UNKNOWN_SERVER_ERROR: its only audit event said
    allowed, and its message led to no event."""
    topic = unique_name("store-down")
    store_gateway.refuse_writes()
    client = RawClient(store_gateway.gw.bootstrap)
    try:
        request = create_topic_request(topic, configs=((KEY, POLICY),))
        (answer,) = client.request(CREATE_TOPICS, 7, request).topics
    finally:
        client.close()
    assert answer.error_code == UNKNOWN_SERVER_ERROR, answer
    assert topic not in existing_topics(store_gateway.gw.bootstrap)
    request_id = request_id_of(answer.error_message)
    assert store_gateway.events(request_id) == [(topic, "denied", STATE_STORE, -1)]


def test_a_delete_whose_policy_cannot_be_forgotten_is_audited_as_refused(
    store_gateway: StoreGateway,
) -> None:
    """DeleteTopics of a validated topic first claims its record.validation.policy in the
    store; when that fails the topic is not deleted and the client is told so."""
    bootstrap = store_gateway.gw.bootstrap
    topic = unique_name("store-down")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={KEY: POLICY})])[topic].result(15)
    store_gateway.refuse_writes()
    client = RawClient(bootstrap)
    try:
        request = DeleteTopicsRequest(
            topics=(DeleteTopicState(name=TopicName(topic), topic_id=None),),
            timeout=i32Timedelta.parse(timedelta(seconds=10)),
        )
        (answer,) = client.request(DELETE_TOPICS, 6, request).responses
    finally:
        client.close()
    assert answer.error_code == UNKNOWN_SERVER_ERROR, answer
    assert topic in existing_topics(bootstrap)
    request_id = request_id_of(answer.error_message)
    assert store_gateway.events(request_id) == [(topic, "denied", STATE_STORE, -1)]


def alter_topic(bootstrap: str, topic: str, ops: list[tuple[str, int, str | None]]) -> Any:
    """IncrementalAlterConfigs v1 of one topic; its result (error code and message)."""
    client = RawClient(bootstrap)
    try:
        client.send_bytes(
            wire.incremental_alter_request(
                [(TOPIC, topic, ops)], validate_only=False, correlation_id=1, client_id="mid"
            )
        )
        (result,) = wire.read_incremental_alter_response(client.recv_frame())
    finally:
        client.close()
    return result


@pytest.mark.parametrize(
    ("ops", "broker_applied"),
    [
        ([(KEY, SET, POLICY)], False),
        ([(KEY, SET, POLICY), ("retention.ms", SET, "3600000")], True),
    ],
    ids=["policy-only", "policy-and-broker-config"],
)
def test_a_config_change_whose_policy_cannot_be_stored_is_audited_as_refused(
    store_gateway: StoreGateway, ops: list[tuple[str, int, str | None]], broker_applied: bool
) -> None:
    """Setting record.validation.policy (alone: the gateway keeps it; with a broker config:
    the broker applies that, then the gateway stores the policy) when the store cannot write:
    UNKNOWN_SERVER_ERROR, an event saying so, and, when the broker applied the rest, a message
    that says it did."""
    bootstrap = store_gateway.gw.bootstrap
    topic = unique_name("store-down")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    store_gateway.refuse_writes()
    result = alter_topic(bootstrap, topic, ops)
    assert result.error_code == UNKNOWN_SERVER_ERROR, result
    assert ("the broker applied the other configs" in result.error_message) == broker_applied
    applied = topic_configs(bootstrap, topic).get("retention.ms") == "3600000"
    assert applied == broker_applied
    request_id = request_id_of(result.error_message)
    assert store_gateway.events(request_id) == [(topic, "denied", STATE_STORE, -1)]


def test_a_policy_the_kafka_store_may_yet_take_is_not_answered_as_refused(
    tap: BrokerTap, tmp_path: Path
) -> None:
    """With ``state.store: kafka``, a write the broker has not acknowledged in time stays with
    the gateway's producer and is appended once the broker takes it. The client was told
    UNKNOWN_SERVER_ERROR "could not store" and the topic was validated from then on all the
    same. It is now told REQUEST_TIMED_OUT, as Kafka answers a change whose outcome it does
    not know, with a message that says the change may yet take effect, and no refusal is
    audited. The broker holds the store's Produce requests here (the tap)."""
    spool = tmp_path / "audit"
    config = gateway_config(
        tap.address,
        upstream={"request_timeout_s": 2},
        state={"store": "kafka", "topic": unique_name("kpg-state"), "refresh_interval_s": 0.2},
        audit={"spool_dir": str(spool)},
    )
    gw = GatewayThread(config).start()
    try:
        topic = unique_name("store-slow")
        admin = AdminClient({"bootstrap.servers": gw.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
        tap.hold_requests(PRODUCE)
        try:
            result = alter_topic(gw.bootstrap, topic, [(KEY, SET, POLICY)])
        finally:
            tap.release_requests()
        assert result.error_code == REQUEST_TIMED_OUT, result
        assert "may yet take effect" in result.error_message
        # ... and it does: the gateway's own store took it once the broker did
        assert wait_for(lambda: topic_configs(gw.bootstrap, topic).get(KEY) == POLICY)
        audited = spool_events(
            spool, lambda e: e.resource_name == topic and e.api != "CreateTopics"
        )
        assert [(e.verdict, e.policy) for e in audited] == [("allowed", None)]
    finally:
        gw.stop()


def test_a_created_topic_is_answered_as_created_when_its_claim_cannot_be_dropped(
    tap: BrokerTap, tmp_path: Path
) -> None:
    """A CreateTopics setting record.validation.policy stores the value (with a claim) before
    the broker creates the topic, and drops the claim once the broker has answered. When the
    store refused that second write, the gateway aborted the client's connection: the topic
    was created and validated, and the client, told nothing, sent it again and got
    TOPIC_ALREADY_EXISTS. The broker's answer now goes to the client, and the failure to the
    log (as a DeleteTopics whose value cannot be forgotten does). The store fails between the
    two writes: its file starts refusing while the broker holds the CreateTopics (the tap)."""
    spool = tmp_path / "audit"
    gw = GatewayThread(gateway_config(tap.address, audit={"spool_dir": str(spool)})).start()
    store = StoreGateway(gw, spool)
    topic = unique_name("claim-stuck")
    client = RawClient(gw.bootstrap, timeout=30)
    try:
        tap.hold_requests(CREATE_TOPICS)
        try:
            client.send(CREATE_TOPICS, 7, create_topic_request(topic, configs=((KEY, POLICY),)))
            assert wait_for(lambda: any(r.api_key == CREATE_TOPICS for r in tap.requests))
            store.refuse_writes()
        finally:
            tap.release_requests()
        answer = decode_response(CREATE_TOPICS, 7, client.recv_frame())
        assert [(t.name, t.error_code) for t in answer.topics] == [(topic, 0)]
        assert topic in existing_topics(gw.bootstrap)
        assert topic_configs(gw.bootstrap, topic).get(KEY) == POLICY
    finally:
        client.close()
        gw.stop()


def test_an_auto_creation_the_store_cannot_prepare_is_audited_as_refused(
    store_gateway: StoreGateway, broker: HostPort
) -> None:
    """A Metadata request that would auto-create a topic whose name an earlier, validated
    topic had (deleted at the broker, where the gateway did not see it) first removes that
    topic's record.validation.policy; when the store cannot, the topic is not created (the
    client asks again), and its only event said the creation was allowed."""
    bootstrap = store_gateway.gw.bootstrap
    topic = unique_name("store-down")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={KEY: POLICY})])[topic].result(15)
    direct = AdminClient({"bootstrap.servers": str(broker)})
    direct.delete_topics([topic])[topic].result(15)
    assert wait_for(lambda: topic not in existing_topics(str(broker)))
    store_gateway.refuse_writes()
    client = RawClient(bootstrap)
    try:
        request = MetadataRequest(
            topics=(MetadataRequestTopic(name=TopicName(topic), topic_id=None),),
            allow_auto_topic_creation=True,
            include_topic_authorized_operations=False,
        )
        (entry,) = client.request(METADATA, 12, request).topics
    finally:
        client.close()
    assert entry.error_code == UNKNOWN_TOPIC_OR_PARTITION
    assert topic not in existing_topics(str(broker))
    events = spool_events(
        store_gateway.spool, lambda e: e.resource_name == topic and e.api == "Metadata", count=2
    )
    assert [(e.verdict, e.policy) for e in events] == [("allowed", None), ("denied", STATE_STORE)]


def test_a_client_config_the_store_cannot_write_is_audited_as_refused(
    store_gateway: StoreGateway,
) -> None:
    """Dynamic client configs live in the state store alone: a change the policies allowed
    and the store could not write is answered UNKNOWN_SERVER_ERROR, and audited so."""
    store_gateway.refuse_writes()
    entity = f"{unique_name('user')}:app"
    client = RawClient(store_gateway.gw.bootstrap)
    try:
        client.send_bytes(
            wire.incremental_alter_request(
                [(USER_CLIENT, entity, [("acks", SET, "all")])],
                validate_only=False,
                correlation_id=1,
                client_id="mid",
            )
        )
        (result,) = wire.read_incremental_alter_response(client.recv_frame())
    finally:
        client.close()
    assert result.error_code == UNKNOWN_SERVER_ERROR, result
    request_id = request_id_of(result.error_message)
    assert store_gateway.events(request_id) == [(entity, "denied", STATE_STORE, -1)]
