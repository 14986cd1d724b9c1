"""Routes that open only where two features meet (redteam18).

Auto-creation on Metadata x a topic's ``record.validation.policy``: a Metadata request that
would auto-create a topic the broker does not have is judged, and the gateway then creates the
topic itself; an auto-created topic sets no policy, so a value an earlier topic of the name
left in the state store is stale and was removed before the gateway's CreateTopics. That the
topic was missing was read from the broker's answer to the reissued Metadata, a moment before:
a topic created meanwhile with a policy (another client's CreateTopics, through this gateway or
another on the same state) lost its policy, its records reaching the broker unvalidated until
the gateway's own CreateTopics came back TOPIC_ALREADY_EXISTS and put it back, and for good
when that answer never came (a timeout, a dropped link: nothing put it back). Here the
broker's answer to the reissued Metadata is held in the tap while the topic is created through
a second gateway on the same state file, and the gateway's CreateTopics is held once sent.

The same through a CreateTopics without the key, of a name an earlier topic (deleted at the
broker directly) left a value for: the value was removed once Metadata showed the topic
missing, before the create was forwarded.

Two creates of one topic x a client that does not read its answers: the loser's step after
the broker's answer (putting the winner's policy back) waited behind a Fetch answer the client
left unread, and was lost when the connection was closed idle.

Produce x the embedded broker (Tansu) x creation: records sent to a topic before it exists
were kept by the broker and found in the topic created later with a policy.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from kio.schema.delete_topics.v4.request import DeleteTopicsRequest
from kio.schema.types import TopicName

from gateway.config import with_embedded_upstream
from gateway.record_validation import VALIDATION_POLICY_KEY
from protocol.codec import encode_request
from tests.adversarial.test_auto_creation import metadata_request, reached_broker
from tests.adversarial.test_connection_limits import MiB
from tests.adversarial.test_connection_limits import _fill as fill
from tests.adversarial.test_connection_limits import _large_fetch as large_fetch
from tests.adversarial.test_create_races import (
    CREATE_TOPICS,
    DELETE_TOPICS,
    INVALID_RECORD,
)
from tests.adversarial.test_create_races import TIMEOUT as DELETE_TIMEOUT
from tests.adversarial.test_produce_by_topic_id import NO_HEADER, codes, produce
from tests.inproc.test_clients import create_topic
from tests.inproc.test_record_validation import delete_behind_the_gateway
from tests.support import (
    BrokerTap,
    GatewayThread,
    RawClient,
    create_topic_request,
    gateway_config,
    records_at,
    unique_name,
    wait_for,
)

pytestmark = pytest.mark.adversarial

UNKNOWN_TOPIC_OR_PARTITION = 3

PRODUCE, METADATA, FETCH = 0, 3, 1
IDLE_MS = 2000
"""connections.max.idle.ms of the gateway whose client does not read its answers."""


def _created_with_a_policy_meanwhile(
    tap: BrokerTap,
    gateways: tuple[GatewayThread, GatewayThread],
    topic: str,
    request: tuple[int, int, Any],
) -> None:
    """Send ``request`` (API key, version, kio request) through the tapped gateway, which finds
    ``topic`` missing at the broker and goes on to create it; while the broker's answer to
    the gateway's Metadata waits in the tap, ``topic`` is created with a policy through the
    other gateway. The policy must hold throughout: while the tapped gateway's own
    CreateTopics is held at the tap, and after its answer (TOPIC_ALREADY_EXISTS)."""
    through_tap, straight = gateways
    asker = RawClient(through_tap.bootstrap, timeout=20)
    creator = RawClient(straight.bootstrap, timeout=20)
    with_policy = create_topic_request(topic, configs=((VALIDATION_POLICY_KEY, "trace-id"),))
    try:
        tap.hold_answers()
        tap.hold_requests(CREATE_TOPICS)
        asker.send(*request)
        # the gateway's Metadata of the topic has reached the broker: it answers that the
        # topic is missing, and the answer waits in the tap
        assert wait_for_metadata(tap, topic)
        created = creator.request(CREATE_TOPICS, 7, with_policy)
        assert [int(t.error_code) for t in created.topics] == [0]
        tap.release_answers()
        # the gateway's own CreateTopics is held in the tap: the topic created with a policy
        # keeps it meanwhile, a record without the trace-id header refused
        assert wait_for(lambda: sent_create(tap, topic))
        assert codes(straight, 9, produce(9, [(topic, 0, NO_HEADER)])) == [(0, INVALID_RECORD)]
        tap.release_requests()
        asker.recv_frame()
    finally:
        tap.release_requests()
        tap.release_answers()
        asker.close()
        creator.close()
    assert codes(straight, 9, produce(9, [(topic, 0, NO_HEADER)])) == [(0, INVALID_RECORD)]


def test_an_auto_creation_that_finds_the_topic_created_meanwhile_leaves_its_policy(
    tap: BrokerTap, sqlite_gateways: tuple[GatewayThread, GatewayThread]
) -> None:
    topic = unique_name("auto-race")
    # auto-creation: the reissued Metadata (auto-creation off) finds the topic missing
    _created_with_a_policy_meanwhile(
        tap, sqlite_gateways, topic, (METADATA, 12, metadata_request(12, [topic]))
    )


def test_a_create_without_a_policy_that_finds_the_topic_created_meanwhile_leaves_its_policy(
    tap: BrokerTap, sqlite_gateways: tuple[GatewayThread, GatewayThread]
) -> None:
    topic = unique_name("create-race")
    # an earlier topic of the name, deleted where the gateway did not see it, left its value
    _, straight = sqlite_gateways
    with_policy = create_topic_request(topic, configs=((VALIDATION_POLICY_KEY, "trace-id"),))
    creator = RawClient(straight.bootstrap, timeout=20)
    try:
        created = creator.request(CREATE_TOPICS, 7, with_policy)
    finally:
        creator.close()
    assert [int(t.error_code) for t in created.topics] == [0]
    delete_behind_the_gateway(tap.broker, topic)
    _created_with_a_policy_meanwhile(
        tap, sqlite_gateways, topic, (CREATE_TOPICS, 7, create_topic_request(topic))
    )


def test_a_create_behind_an_answer_the_client_does_not_take_cannot_keep_its_policy(
    tap: BrokerTap, tmp_path: Path
) -> None:
    """Two creates of one topic at once (test_create_races), the loser's policy stored last:
    the loser puts back the winner's once the broker's answer is back. That step ran when the
    loser's connection came to the answer, after the answers before it had been written to
    the client: a client that sent a CreateTopics behind a Fetch whose answer it did not read
    kept its own policy on the winner's topic, for good once its connection was closed idle
    (the answer never read). The CreateTopics waits now until the client has taken the
    answers before it, so it is judged, stored and answered in turn."""
    state = {"path": str(tmp_path / "state.db")}
    idle = {"connections.max.idle.ms": IDLE_MS}
    through_tap = GatewayThread(gateway_config(tap.address, state=state, limits=idle)).start()
    straight = GatewayThread(gateway_config(tap.broker, state=state)).start()
    filled = unique_name("filled")
    create_topic(str(tap.broker), filled)
    fill(str(tap.broker), filled)
    topic = unique_name("loser-last")
    loser = socket.socket()
    loser.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the kernel holds little
    host, _, port = through_tap.bootstrap.rpartition(":")
    loser.connect((host, int(port)))
    winner = RawClient(straight.bootstrap, timeout=20)
    requests = "kpg_requests_total"
    try:
        loser.sendall(encode_request(FETCH, 12, 1, "loser", large_fetch(filled)))
        # the Fetch's answer (some 5 MiB) is written to the loser, which does not read it
        assert wait_for(lambda: through_tap.metric("kpg_bytes_out_total") > MiB)
        # the gateway's Metadata of the topic (before the CreateTopics is stored and
        # forwarded) is answered that the topic is missing, and the answer waits in the tap
        tap.hold_answers()
        loser.sendall(
            encode_request(
                CREATE_TOPICS,
                7,
                2,
                "loser",
                create_topic_request(topic, configs=((VALIDATION_POLICY_KEY, "key-required"),)),
            )
        )
        assert wait_for(lambda: through_tap.metric(requests, api="CreateTopics", version="7") == 1)
        won = winner.request(
            CREATE_TOPICS,
            7,
            create_topic_request(topic, configs=((VALIDATION_POLICY_KEY, "trace-id"),)),
        )
        assert [int(t.error_code) for t in won.topics] == [0]
        tap.release_answers()
        # the loser's connection is closed, its Fetch answer untaken for
        # connections.max.idle.ms: its CreateTopics answer is never read
        assert wait_for(
            lambda: through_tap.metric("kpg_connections_idle_closed_total") == 1, timeout=30
        )
        # the winner's topic keeps the winner's policy (a record with a key and no trace-id
        # header passes the loser's)
        assert codes(straight, 9, produce(9, [(topic, 0, NO_HEADER)])) == [(0, INVALID_RECORD)]
    finally:
        tap.release_answers()
        loser.close()
        winner.close()
        straight.stop()
        through_tap.stop()


def test_no_record_reaches_a_topic_before_it_is_created_with_a_policy(tap: BrokerTap) -> None:
    """The embedded broker (Tansu, what ``make run`` fronts) answers a Produce to a topic or
    partition it does not have with success and keeps the records: a topic of that name
    created later, with a record.validation.policy, held them, so anyone could write a
    validated topic's first records unvalidated before it was created (a guessable name), or
    after a delete before it was created again. The gateway answers such a partition
    UNKNOWN_TOPIC_OR_PARTITION, as Kafka does, and forwards nothing of it."""
    config = with_embedded_upstream(gateway_config(tap.address), tap.address)
    gw = GatewayThread(config).start()
    topic = unique_name("not-yet")
    try:
        early = codes(gw, 9, produce(9, [(topic, 0, NO_HEADER)]))
        assert early == [(0, UNKNOWN_TOPIC_OR_PARTITION)]
        client = RawClient(gw.bootstrap)
        try:
            created = client.request(
                CREATE_TOPICS,
                7,
                create_topic_request(topic, configs=((VALIDATION_POLICY_KEY, "trace-id"),)),
            )
        finally:
            client.close()
        assert [int(t.error_code) for t in created.topics] == [0]
        # a partition the topic does not have, no more than a topic it does not have
        beyond = codes(gw, 9, produce(9, [(topic, 5, NO_HEADER), (topic, 0, NO_HEADER)]))
        assert beyond == [(5, UNKNOWN_TOPIC_OR_PARTITION), (0, INVALID_RECORD)]
    finally:
        gw.stop()
    assert not [r for r in tap.forwarded(PRODUCE) for t in r.topic_data if t.name == topic]
    assert records_at(tap.broker, topic) == 0


def test_a_broker_default_is_created_as_the_policies_judged_it(tap: BrokerTap) -> None:
    """A CreateTopics count of -1 (the broker's default) is judged as the default the gateway
    knows (upstream.broker_defaults, else the broker's report when judged), and was then sent
    as -1: a default changed since (IncrementalAlterConfigs of the cluster's num.partitions,
    which no partitions rule judges, by any client where no broker.configs rule restricts it)
    made the broker create more partitions than the rule's maximum allowed. The broker is
    asked for the counts the policies judged now. (Tansu takes a dynamic num.partitions and
    keeps creating 3, so the test reads the request the broker gets.)"""
    rules = {"rules": [{"name": "few", "type": "partitions", "max": 3}]}
    gw = GatewayThread(gateway_config(tap.address, policies=rules)).start()
    topic = unique_name("defaults")
    client = RawClient(gw.bootstrap)
    try:
        created = client.request(
            CREATE_TOPICS, 7, create_topic_request(topic, partitions=-1, replication_factor=-1)
        )
    finally:
        client.close()
        gw.stop()
    assert [int(t.error_code) for t in created.topics] == [0]
    (sent,) = [t for r in tap.forwarded(CREATE_TOPICS) for t in r.topics if t.name == topic]
    assert (int(sent.num_partitions), int(sent.replication_factor)) == (3, 1)


@pytest.mark.xfail(
    strict=True,
    reason="a Produce found its topic in Metadata a moment before the broker takes it: a "
    "delete of the topic in between (through any gateway) leaves its records at a broker "
    "that keeps records of topics it does not have, for a topic of the name created later "
    "with a record.validation.policy; closing it needs the broker to refuse them, or a "
    "delete under way (its claim) to refuse Produce, which an orphaned claim would turn "
    "into a topic no one can write",
)
def test_no_record_reaches_a_topic_deleted_meanwhile_and_created_again_with_a_policy(
    tap: BrokerTap, tmp_path: Path
) -> None:
    state = {"path": str(tmp_path / "state.db")}
    producing = GatewayThread(
        with_embedded_upstream(gateway_config(tap.address, state=state), tap.address)
    ).start()
    owning = GatewayThread(
        with_embedded_upstream(gateway_config(tap.broker, state=state), tap.broker)
    ).start()
    topic = unique_name("deleted")
    owner = RawClient(owning.bootstrap, timeout=20)
    producer = RawClient(producing.bootstrap, timeout=20)
    try:
        first = owner.request(CREATE_TOPICS, 7, create_topic_request(topic))
        assert [int(t.error_code) for t in first.topics] == [0]
        tap.hold_requests(PRODUCE)
        producer.send(PRODUCE, 9, produce(9, [(topic, 0, NO_HEADER)]))
        assert wait_for(lambda: any(r.api_key == PRODUCE for r in tap.requests))
        deleted = owner.request(
            DELETE_TOPICS,
            4,
            DeleteTopicsRequest(topic_names=(TopicName(topic),), timeout=DELETE_TIMEOUT),
        )
        assert [int(r.error_code) for r in deleted.responses] == [0]
        tap.release_requests()
        producer.recv_frame()
        again = owner.request(
            CREATE_TOPICS,
            7,
            create_topic_request(topic, configs=((VALIDATION_POLICY_KEY, "trace-id"),)),
        )
        assert [int(t.error_code) for t in again.topics] == [0]
    finally:
        tap.release_requests()
        owner.close()
        producer.close()
        owning.stop()
        producing.stop()
    assert records_at(tap.broker, topic) == 0


def wait_for_metadata(tap: BrokerTap, topic: str) -> bool:
    return wait_for(lambda: (METADATA, False) in reached_broker(tap, topic))


def sent_create(tap: BrokerTap, topic: str) -> bool:
    return any(t.name == topic for r in tap.forwarded(CREATE_TOPICS) for t in r.topics)
