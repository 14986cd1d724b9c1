"""Routes around the topic policies through Metadata (issue 11, item 2, and the Metadata part
of the topic-names item): a topic the cluster lacks, named in a Metadata request that allows
auto-creation, is created by the broker unless the gateway judges it; a name that is not a
legal Kafka topic name reaches the broker unless the gateway stops it.

Every case runs the real gateway in front of the tapped real broker (Tansu, which creates
topics on Metadata, 4 partitions each, and reports no broker configs; the gateways here state
its CreateTopics defaults, 3 partitions of 1 replica, in ``upstream.broker_defaults``). The
tap shows what reached the broker; the broker itself, asked directly, shows what exists.
"""

from __future__ import annotations

import importlib
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient
from kio.schema.types import TopicName

from protocol.addresses import METADATA
from protocol.codec import decode_request
from protocol.framing import parse_request_header
from protocol.metadata import read_request as read_metadata_request
from spark_audit.event import AuditEvent
from tests.inproc.test_clients import create_topic
from tests.support import (
    BrokerTap,
    GatewayThread,
    RawClient,
    gateway_config,
    spool_events,
    unique_name,
)

pytestmark = pytest.mark.adversarial

CREATE_TOPICS = 19
TOPIC_AUTHORIZATION_FAILED, INVALID_TOPIC, UNKNOWN_TOPIC = 29, 17, 3
JUDGED_PARTITIONS = 3
"""The partitions the gateways here judge and create (the stated broker default)."""
NAMING = {"name": "naming", "type": "topic.name", "pattern": "[a-z0-9.-]+"}
"""Lowercase names only: ``Evil_Name-...`` is denied."""
RULES: dict[str, Any] = {"rules": [NAMING]}


@contextmanager
def gateway_with(
    tap: BrokerTap, spool: Path, policies: dict[str, Any] = RULES, **upstream: Any
) -> Iterator[GatewayThread]:
    """The real gateway in front of the tapped broker, auditing to ``spool``."""
    config = gateway_config(
        tap.address,
        policies=policies,
        upstream=upstream,
        audit={"spool_dir": str(spool), "fsync": "always"},
    )
    gw = GatewayThread(config).start()
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture
def spool(tmp_path: Path) -> Path:
    return tmp_path / "spool"


def audit_events(spool: Path, topic: str) -> list[AuditEvent]:
    """The audit events about ``topic``, written so far (open segment included)."""
    return spool_events(spool, lambda event: event.resource_name == topic, count=0)


def broker_partitions(tap: BrokerTap, topic: str) -> int | None:
    """The topic's partition count as the broker itself says (not through the gateway or
    the tap); None when it does not exist."""
    topics = AdminClient({"bootstrap.servers": str(tap.broker)}).list_topics(timeout=10).topics
    found = topics.get(topic)
    if found is None or found.error is not None:
        return None
    return len(found.partitions)


def reached_broker(tap: BrokerTap, topic: str) -> list[tuple[int, bool | None]]:
    """(API key, allow_auto_topic_creation) of each Metadata or CreateTopics request that
    reached the broker naming ``topic``."""
    seen = []
    for record in tap.requests:
        if record.api_key not in (METADATA, CREATE_TOPICS):
            continue
        header = parse_request_header(record.frame)
        if record.api_key == METADATA:
            metadata = read_metadata_request(header, record.frame)
            if topic in metadata.names:
                seen.append((METADATA, metadata.allow_auto_topic_creation))
        elif topic in [t.name for t in decode_request(header, record.frame).topics]:
            seen.append((CREATE_TOPICS, None))
    return seen


def metadata_request(version: int, names: list[str], allow_auto: bool = True) -> Any:
    """A Metadata request of ``version`` naming ``names`` (v0-v3 always allow auto-creation)."""
    module = importlib.import_module(f"kio.schema.metadata.v{version}.request")
    fields = {f.name for f in module.MetadataRequestTopic.__dataclass_fields__.values()}
    topics = tuple(
        module.MetadataRequestTopic(
            name=TopicName(n), **({"topic_id": None} if "topic_id" in fields else {})
        )
        for n in names
    )
    extra: dict[str, Any] = {}
    request_fields = module.MetadataRequest.__dataclass_fields__
    if "allow_auto_topic_creation" in request_fields:
        extra["allow_auto_topic_creation"] = allow_auto
    for flag in ("include_cluster_authorized_operations", "include_topic_authorized_operations"):
        if flag in request_fields:
            extra[flag] = False
    return module.MetadataRequest(topics=topics, **extra)


def topic_entries(answer: Any) -> dict[str, tuple[int, int]]:
    """name -> (error code, partitions) of a Metadata answer."""
    return {t.name: (int(t.error_code), len(t.partitions)) for t in answer.topics}


# --- real clients that create topics by producing to them ---------------------------------------


def kcat_produce(bootstrap: str, topic: str) -> tuple[bool, str]:
    done = subprocess.run(
        ["kcat", "-P", "-b", bootstrap, "-t", topic, "-X", "message.timeout.ms=20000"],
        input=b"hello\n",
        capture_output=True,
        timeout=60,
    )
    return done.returncode == 0, done.stderr.decode()


def confluent_produce(bootstrap: str, topic: str) -> tuple[bool, str]:
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 20000})
    producer.produce(topic, b"hello", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(30)
    error = errors[0] if errors else None
    return error is None, "" if error is None else f"{error.code()} {error.str()}"


PRODUCERS = {"kcat": kcat_produce, "confluent-kafka": confluent_produce}


@pytest.mark.parametrize("client", PRODUCERS)
def test_a_producer_cannot_auto_create_a_topic_the_policies_deny(
    tap: BrokerTap, spool: Path, client: str
) -> None:
    """``kcat -P -t Evil_Name`` and a confluent-kafka producer: the topic is judged as a
    CreateTopics, denied by the naming rule, never created, audited; the client is told
    TOPIC_AUTHORIZATION_FAILED at once."""
    topic = f"Evil_Name-{uuid.uuid4().hex[:8]}"
    with gateway_with(tap, spool) as gw:
        delivered, error = PRODUCERS[client](gw.bootstrap, topic)
        events = audit_events(spool, topic)

    assert not delivered
    assert "Topic authorization failed" in error
    assert broker_partitions(tap, topic) is None
    reached = reached_broker(tap, topic)
    assert reached and all(request == (METADATA, False) for request in reached)
    assert {
        (e.api, e.action, e.resource_type, e.policy, e.verdict, e.error_code) for e in events
    } == {("Metadata", "create", "topic", "naming", "denied", TOPIC_AUTHORIZATION_FAILED)}


@pytest.mark.parametrize("client", PRODUCERS)
def test_a_producer_auto_creates_an_allowed_topic_with_the_judged_counts(
    tap: BrokerTap, spool: Path, client: str
) -> None:
    """The allowed topic is created with the partitions the policies judged (the broker's
    stated default, 3; left to itself the test broker auto-creates 4), audited as allowed,
    and the record is delivered."""
    topic = unique_name("auto-allowed")
    with gateway_with(tap, spool) as gw:
        delivered, error = PRODUCERS[client](gw.bootstrap, topic)
        events = audit_events(spool, topic)

    assert delivered, error
    assert broker_partitions(tap, topic) == JUDGED_PARTITIONS
    assert events and {(e.api, e.action, e.verdict) for e in events} == {
        ("Metadata", "create", "allowed")
    }
    assert (CREATE_TOPICS, None) in reached_broker(tap, topic)
    assert (METADATA, True) not in reached_broker(tap, topic)


def test_the_broker_default_partition_count_is_what_the_rules_judge(
    tap: BrokerTap, spool: Path
) -> None:
    """A partition-count rule (max 2) denies the auto-creation of a topic the broker would
    give its default of 3 partitions."""
    topic = unique_name("auto-counted")
    policies = {"rules": [{"name": "partition-count", "type": "partitions", "max": 2}]}
    with gateway_with(tap, spool, policies) as gw:
        delivered, error = kcat_produce(gw.bootstrap, topic)
        events = audit_events(spool, topic)

    assert not delivered and "Topic authorization failed" in error
    assert broker_partitions(tap, topic) is None
    assert [(e.policy, e.verdict) for e in events] == [("partition-count", "denied")]


# --- Metadata in every version ----------------------------------------------------------------


@pytest.mark.parametrize("version", range(13))
def test_metadata_with_auto_creation_is_judged_in_every_version(
    tap: BrokerTap, spool: Path, version: int
) -> None:
    """A Metadata request (v0-v3: auto-creation implied; v4-v12: allow_auto_topic_creation
    set) naming a denied new topic, an allowed new topic and an existing one: the denied one
    is answered TOPIC_AUTHORIZATION_FAILED and not created, the allowed one is created with
    the judged counts and answered UNKNOWN_TOPIC_OR_PARTITION (asked again, it is there), the
    existing one as the broker describes it; no request that could create a topic reaches the
    broker; every broker address in the answer is the gateway's."""
    denied = f"Evil_Name-{uuid.uuid4().hex[:8]}"
    allowed = unique_name("auto-v")
    existing = unique_name("auto-existing")
    create_topic(str(tap.broker), existing, partitions=2)
    with gateway_with(tap, spool) as gw:
        client = RawClient(gw.bootstrap)
        answer = client.request(
            METADATA, version, metadata_request(version, [denied, allowed, existing])
        )
        again = client.request(METADATA, version, metadata_request(version, [allowed]))
        client.close()
        gateway_addresses = set(gw.gateway.nodes.gateway_addresses_snapshot())

    entries = topic_entries(answer)
    assert entries[denied] == (TOPIC_AUTHORIZATION_FAILED, 0)
    assert entries[allowed] == (UNKNOWN_TOPIC, 0)
    assert entries[existing] == (0, 2)
    assert topic_entries(again)[allowed] == (0, JUDGED_PARTITIONS)
    assert broker_partitions(tap, denied) is None
    assert broker_partitions(tap, allowed) == JUDGED_PARTITIONS
    assert all(allow is not True for _, allow in reached_broker(tap, denied))
    assert reached_broker(tap, denied) and all(
        k == METADATA for k, _ in reached_broker(tap, denied)
    )
    assert answer.brokers
    assert {(b.host, b.port) for b in answer.brokers} <= gateway_addresses
    assert [e.verdict for e in audit_events(spool, denied)] == ["denied"]
    assert [e.verdict for e in audit_events(spool, allowed)] == ["allowed"]


# --- illegal names ------------------------------------------------------------------------------

ILLEGAL = ["T/", "/T", "..", ".", "", "a" * 250, "Evil Name", "caf\u00e9"]


@pytest.mark.parametrize("name", ILLEGAL, ids=repr)
@pytest.mark.parametrize("auto_create", [True, False], ids=["auto-on", "auto-off"])
def test_an_illegal_topic_name_never_reaches_the_broker(
    tap: BrokerTap, spool: Path, name: str, auto_create: bool
) -> None:
    """INVALID_TOPIC_EXCEPTION for the illegal name, answered by the gateway; the legal name
    beside it is answered by the broker."""
    legal = unique_name("legal")
    create_topic(str(tap.broker), legal, partitions=1)
    with gateway_with(tap, spool) as gw:
        client = RawClient(gw.bootstrap)
        answer = client.request(METADATA, 12, metadata_request(12, [name, legal], auto_create))
        client.close()

    assert topic_entries(answer) == {name: (INVALID_TOPIC, 0), legal: (0, 1)}
    assert reached_broker(tap, name) == []


@pytest.mark.parametrize("version", [0, 1, 3, 4, 9, 11])
def test_illegal_names_are_refused_in_every_version(
    tap: BrokerTap, spool: Path, version: int
) -> None:
    with gateway_with(tap, spool) as gw:
        client = RawClient(gw.bootstrap)
        answer = client.request(METADATA, version, metadata_request(version, ["T/", "/T", ".."]))
        client.close()

    assert topic_entries(answer) == {n: (INVALID_TOPIC, 0) for n in ("T/", "/T", "..")}
    assert answer.brokers
    assert all(reached_broker(tap, n) == [] for n in ("T/", "/T", ".."))


# --- the switch ---------------------------------------------------------------------------------


def test_auto_create_deny_refuses_every_auto_creation(tap: BrokerTap, spool: Path) -> None:
    """``upstream.auto_create: deny``: a name every rule allows is not created either."""
    topic = unique_name("auto-deny")
    with gateway_with(tap, spool, auto_create="deny") as gw:
        delivered, error = kcat_produce(gw.bootstrap, topic)
        events = audit_events(spool, topic)

    assert not delivered and "Topic authorization failed" in error
    assert broker_partitions(tap, topic) is None
    assert [(e.policy, e.verdict, e.error_code) for e in events] == [
        ("gateway", "denied", TOPIC_AUTHORIZATION_FAILED)
    ]
    assert "upstream.auto_create: deny" in (events[0].message or "")


def test_auto_create_pass_leaves_creation_to_the_broker(tap: BrokerTap, spool: Path) -> None:
    """``upstream.auto_create: pass`` (unsafe): the broker creates what the rules would deny,
    unjudged, with its own count; illegal names are still refused."""
    topic = f"Evil_Name-{uuid.uuid4().hex[:8]}"
    with gateway_with(tap, spool, auto_create="pass") as gw:
        delivered, error = kcat_produce(gw.bootstrap, topic)
        client = RawClient(gw.bootstrap)
        answer = client.request(METADATA, 12, metadata_request(12, ["T/"]))
        client.close()
        events = audit_events(spool, topic)

    assert delivered, error
    assert broker_partitions(tap, topic) is not None
    assert events == []
    assert topic_entries(answer) == {"T/": (INVALID_TOPIC, 0)}
    assert reached_broker(tap, "T/") == []


def test_unknown_broker_defaults_deny_and_say_why(tap: BrokerTap, spool: Path) -> None:
    """Broker defaults neither stated nor reported (the test broker reports none): the gateway
    does not guess a count; the creation is denied and the audit event says why."""
    topic = unique_name("auto-unknown")
    with gateway_with(tap, spool, broker_defaults={}) as gw:
        delivered, error = kcat_produce(gw.bootstrap, topic)
        events = audit_events(spool, topic)

    assert not delivered and "Topic authorization failed" in error
    assert broker_partitions(tap, topic) is None
    assert [(e.policy, e.verdict) for e in events] == [("gateway", "denied")]
    assert "upstream.broker_defaults" in (events[0].message or "")
    assert "does not report num.partitions" in (events[0].message or "")
