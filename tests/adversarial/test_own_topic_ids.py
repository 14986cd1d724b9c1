"""The ids of the gateway's own topics, as the shortcuts by id use them: Fetch v13+,
ShareFetch and ShareAcknowledge forwarded a request unread unless its bytes held one of the own
topics' ids, learnt from a Metadata answer and trusted for a minute. An own topic deleted at
the broker and made again has a new id, which passed for that minute; an answer lacking an own
topic (hidden from the asking client by the broker's ACLs) let that topic's id pass for other
clients. A request now passes unread only when every id it names was learnt to name another
topic (an id names one topic forever); any other is read, and an id not known is never
forwarded.

Against the tapped real broker, the clients named by TLS certificates. Tansu has no ACLs to
hide the own topic (the audit topic) from one client, so it is deleted straight at the broker
while the first client's request is read, and created again before the second client's
request. Tansu takes Produce only to v11: what the gateway forwards of a v13 request is seen
at the tap, whatever Tansu then answers.
"""

from __future__ import annotations

import contextlib
import importlib
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.static.primitive import i32, i32Timedelta

from protocol.addresses import METADATA
from protocol.codec import decode_response, encode_request
from protocol.errors import TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_ID
from protocol.node_endpoints import SHARE_FETCH
from tests.adversarial.test_produce_by_topic_id import GOOD, PRODUCE, produce, topic_ids
from tests.adversarial.test_replica_fetch import FETCH
from tests.adversarial.test_replica_fetch import _fetch as replica_fetch
from tests.support import (
    BrokerTap,
    GatewayThread,
    RawClient,
    gateway_config,
    make_pki,
    outcome,
    tls_context,
    tls_listener,
    wait_for,
)

pytestmark = pytest.mark.adversarial


@pytest.fixture
def unvalidated(tap: BrokerTap, tmp_path: Path) -> Iterator[tuple[GatewayThread, str, Path]]:
    """A gateway with an audit topic and no validated topic (the unread shortcut is on), its
    listener requiring client certificates: ``carol`` and ``dave``."""
    own = f"kpg-audit-{uuid.uuid4().hex[:8]}"
    pki = make_pki(tmp_path, {"carol": "/CN=carol", "dave": "/CN=dave"})
    config = gateway_config(tap.address, audit={"topic": own}, tls=tls_listener(pki))
    gw = GatewayThread(config).start()
    assert wait_for(lambda: topic_ids(tap, [own])[own] is not None)
    try:
        yield gw, own, pki
    finally:
        gw.stop()


def send_v13(gw: GatewayThread, pki: Path, who: str, topic_id: uuid.UUID) -> None:
    """A v13 Produce of one good batch to ``topic_id`` as ``who``; the answer (if any) is
    not read."""
    client = RawClient(gw.bootstrap, tls=tls_context(pki, who))
    try:
        client.send(PRODUCE, 13, produce(13, [(topic_id, 0, GOOD)]))
        with contextlib.suppress(ConnectionError, OSError):
            client.recv_frame()
    finally:
        client.close()


def reached_broker(tap: BrokerTap, topic_id: uuid.UUID) -> bool:
    return any(
        getattr(t, "topic_id", None) == topic_id
        for r in tap.forwarded(PRODUCE)
        for t in r.topic_data
    )


def test_an_own_topic_one_client_could_not_see_is_refused_by_id_to_another(
    tap: BrokerTap, unvalidated: tuple[GatewayThread, str, Path]
) -> None:
    gw, own, pki = unvalidated
    direct = AdminClient({"bootstrap.servers": str(tap.broker)})
    assert outcome(direct.delete_topics([own])[own]) is None
    assert wait_for(lambda: topic_ids(tap, [own])[own] is None)
    # carol's v13 request is read (its id not known yet): the ids are learnt on her link
    send_v13(gw, pki, "carol", uuid.uuid4())
    assert outcome(direct.create_topics([NewTopic(own, 1, 1)])[own]) is None
    assert wait_for(lambda: topic_ids(tap, [own])[own] is not None)
    own_id = topic_ids(tap, [own])[own]
    assert own_id is not None
    tap.requests.clear()
    send_v13(gw, pki, "dave", own_id)
    assert not reached_broker(tap, own_id)


def test_fetches_by_an_own_topics_id_do_not_each_ask_for_every_topic(
    tap: BrokerTap, unvalidated: tuple[GatewayThread, str, Path]
) -> None:
    """A Fetch naming an own topic's id is read, and its partitions refused; each such read
    learnt the own ids anew: a Metadata request for every topic of the cluster, its whole
    answer decoded, for some 60 bytes sent (20 fetches, 20 asks). The ids are learnt once a
    minute, as Produce v13 learns them. Counted at the tap, not timed."""
    gw, own, pki = unvalidated
    own_id = topic_ids(tap, [own])[own]
    assert own_id is not None
    tap.requests.clear()
    for _ in range(20):
        fetch_v13(gw, pki, "carol", own_id)
    assert not any(t.topic_id == own_id for r in tap.forwarded(FETCH) for t in r.topics)
    assert len([r for r in tap.requests if r.api_key == METADATA]) == 1


def test_an_own_topic_made_again_is_refused_by_its_new_id(
    tap: BrokerTap, unvalidated: tuple[GatewayThread, str, Path]
) -> None:
    """Produce v13 is read whole wherever the gateway has own topics (the audit summaries
    count it by name), so it finds the new id; Fetch took the shortcut, its ids unread."""
    gw, own, pki = unvalidated
    # carol's Fetch is read (no id known yet): every own topic's id is learnt, complete
    fetch_v13(gw, pki, "carol", uuid.uuid4())
    direct = AdminClient({"bootstrap.servers": str(tap.broker)})
    assert outcome(direct.delete_topics([own])[own]) is None
    assert wait_for(lambda: topic_ids(tap, [own])[own] is None)
    assert outcome(direct.create_topics([NewTopic(own, 1, 1)])[own]) is None
    assert wait_for(lambda: topic_ids(tap, [own])[own] is not None)
    own_id = topic_ids(tap, [own])[own]
    assert own_id is not None
    tap.requests.clear()
    fetch_v13(gw, pki, "dave", own_id)
    assert not any(t.topic_id == own_id for r in tap.forwarded(FETCH) for t in r.topics), (
        "the own topic's new id reached the broker unread"
    )


def fetch_v13(gw: GatewayThread, pki: Path, who: str, topic_id: uuid.UUID) -> None:
    """A consumer's Fetch v13 of partition 0 of ``topic_id`` as ``who``; the answer (if any)
    is not read."""
    client = RawClient(gw.bootstrap, tls=tls_context(pki, who))
    try:
        client.send(FETCH, 13, replica_fetch(13, "", topic_id, None))
        with contextlib.suppress(ConnectionError, OSError):
            client.recv_frame()
    finally:
        client.close()


def remake(tap: BrokerTap, own: str) -> uuid.UUID:
    """The own topic deleted straight at the broker and made again: its new id."""
    direct = AdminClient({"bootstrap.servers": str(tap.broker)})
    assert outcome(direct.delete_topics([own])[own]) is None
    assert wait_for(lambda: topic_ids(tap, [own])[own] is None)
    assert outcome(direct.create_topics([NewTopic(own, 1, 1)])[own]) is None
    assert wait_for(lambda: topic_ids(tap, [own])[own] is not None)
    own_id = topic_ids(tap, [own])[own]
    assert own_id is not None
    return own_id


def fetched_errors(answer: Any) -> list[int]:
    return [int(p.error_code) for t in answer.responses for p in t.partitions]


def test_an_id_not_known_is_answered_unknown_and_not_forwarded_on_the_same_link(
    tap: BrokerTap, unvalidated: tuple[GatewayThread, str, Path]
) -> None:
    """One connection: its first Fetch names an id no topic has (the gateway asks, and
    answers UNKNOWN_TOPIC_ID itself); the own topic is made again, and the same connection
    fetches by the new id, maybe within the second in which that link may not ask again.
    Whether asked or not, the new id must not reach the broker: asked, it is the own topic's
    (TOPIC_AUTHORIZATION_FAILED); not asked, it is not known (UNKNOWN_TOPIC_ID)."""
    gw, own, pki = unvalidated
    client = RawClient(gw.bootstrap, tls=tls_context(pki, "carol"))
    try:
        made_up = uuid.uuid4()
        answer = client.request(FETCH, 13, replica_fetch(13, "", made_up, None))
        assert fetched_errors(answer) == [int(UNKNOWN_TOPIC_ID)]
        assert not any(t.topic_id == made_up for r in tap.forwarded(FETCH) for t in r.topics)
        own_id = remake(tap, own)
        tap.requests.clear()
        answer = client.request(FETCH, 13, replica_fetch(13, "", own_id, None))
        assert fetched_errors(answer)[0] in (
            int(UNKNOWN_TOPIC_ID),
            int(TOPIC_AUTHORIZATION_FAILED),
        )
        assert not any(t.topic_id == own_id for r in tap.forwarded(FETCH) for t in r.topics)
    finally:
        client.close()


def test_a_fetch_of_known_topics_is_forwarded_as_sent(
    tap: BrokerTap, unvalidated: tuple[GatewayThread, str, Path]
) -> None:
    """The shortcut stands: once the ids are learnt, a Fetch naming only other topics' ids
    reaches the broker byte for byte as the client wrote it (read, it would be written
    again, partition by partition)."""
    gw, own, pki = unvalidated
    topic = f"plain-{uuid.uuid4().hex[:8]}"
    direct = AdminClient({"bootstrap.servers": str(tap.broker)})
    assert outcome(direct.create_topics([NewTopic(topic, 1, 1)])[topic]) is None
    assert wait_for(lambda: topic_ids(tap, [topic])[topic] is not None)
    plain_id = topic_ids(tap, [topic])[topic]
    assert plain_id is not None
    client = RawClient(gw.bootstrap, tls=tls_context(pki, "carol"))
    try:
        first = client.request(FETCH, 13, replica_fetch(13, "", plain_id, None))
        assert fetched_errors(first) == [0]
        tap.requests.clear()
        payload = replica_fetch(13, "", plain_id, None)
        sent = encode_request(FETCH, 13, 77, "raw-test", payload)[4:]
        client.send(FETCH, 13, payload, correlation_id=77)
        assert fetched_errors(decode_response(FETCH, 13, client.recv_frame())) == [0]
        assert [r.frame[8:] for r in tap.requests if r.api_key == FETCH] == [sent[8:]]
        assert not [r for r in tap.requests if r.api_key == METADATA]
    finally:
        client.close()


def share_fetch(topic_id: uuid.UUID) -> Any:
    m = importlib.import_module("kio.schema.share_fetch.v1.request")
    return m.ShareFetchRequest(
        group_id="share-group",
        member_id="member-1",
        share_session_epoch=i32(0),
        max_wait=i32Timedelta.parse(timedelta(milliseconds=10)),
        min_bytes=i32(1),
        max_bytes=i32(1 << 20),
        max_records=i32(500),
        batch_size=i32(500),
        topics=(
            m.FetchTopic(
                topic_id=topic_id,
                partitions=(m.FetchPartition(partition_index=i32(0), acknowledgement_batches=()),),
            ),
        ),
        forgotten_topics_data=(),
    )


def share_fetch_reached(tap: BrokerTap, topic_id: uuid.UUID) -> bool:
    return any(t.topic_id == topic_id for r in tap.forwarded(SHARE_FETCH) for t in r.topics)


def test_a_share_fetch_by_an_own_topics_new_id_is_refused(
    tap: BrokerTap, unvalidated: tuple[GatewayThread, str, Path]
) -> None:
    """ShareFetch went on unread unless it held an own id learnt within the minute: the own
    topic made again passed by its new id. Tansu has no share groups: what the gateway
    forwards is seen at the tap, whatever Tansu then answers."""
    gw, own, pki = unvalidated
    old_id = topic_ids(tap, [own])[own]
    assert old_id is not None
    with contextlib.suppress(ConnectionError, OSError):
        RawClient(gw.bootstrap, tls=tls_context(pki, "carol")).request(
            SHARE_FETCH, 1, share_fetch(old_id)
        )
    assert not share_fetch_reached(tap, old_id)
    own_id = remake(tap, own)
    tap.requests.clear()
    client = RawClient(gw.bootstrap, tls=tls_context(pki, "dave"))
    try:
        client.send(SHARE_FETCH, 1, share_fetch(own_id))
        with pytest.raises((ConnectionError, OSError)):
            client.recv_frame()
    finally:
        client.close()
    assert not share_fetch_reached(tap, own_id)
