"""Audit schema v2 through the real gateway in front of the real broker: request ids (in the
events and in the client's error message), config changes before and after, topic specs,
the policy version, lifecycle events, every Produce in the summaries, ``kpg configs``
refusals, and the chain of the spool the gateway wrote (verified, then broken by an edit).

Each test runs its own gateway writing to a spool in ``tmp_path`` and reads the spool after
the gateway stopped (stopping writes everything queued, and the ``stop`` event last).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from gateway.cli import main as kpg
from gateway.config import HostPort
from spark_audit.chain import read_spool_links, spool_segments, verify_links
from spark_audit.event import AuditEvent, ConfigChange
from tests.batches import batch_with, produce_v9, record
from tests.support import (
    GatewayThread,
    RawClient,
    existing_topics,
    gateway_config,
    outcome,
    unique_name,
)

pytestmark = pytest.mark.inproc

NOTE = re.compile(r" \(audit request id ([0-9a-f]{32})\)$")
RULES = {
    "rules": [
        {"name": "partition-count", "type": "partitions", "min": 3},
        {"name": "topic-naming", "type": "topic.name", "pattern": "audit2-[a-z0-9-]+"},
        {"name": "short-retention", "type": "config", "config": "retention.ms", "max": 10_000,
         "mode": "dry-run"},
        {"name": "min-isr", "type": "config", "config": "min.insync.replicas", "min": 2},
    ]
}  # fmt: skip


class Audited:
    """A gateway auditing to a spool; ``events()`` once it is stopped."""

    def __init__(self, broker: HostPort, spool: Path, **extra: Any) -> None:
        audit = {"spool_dir": str(spool), "fsync": "always", "instance": "kpg-v2"}
        self.config = gateway_config(broker, policies=RULES, audit=audit, **extra)
        self.spool = spool
        self.gw = GatewayThread(self.config).start()
        self.stopped = False

    @property
    def bootstrap(self) -> str:
        return self.gw.bootstrap

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.gw.stop()

    def events(self) -> list[AuditEvent]:
        self.stop()
        return [
            AuditEvent.from_json(line)
            for path in spool_segments(self.spool)
            for line in path.read_bytes().splitlines()
        ]

    def decisions(self, api: str) -> list[AuditEvent]:
        return [e for e in self.events() if e.kind == "decision" and e.api == api]


@pytest.fixture
def audited(broker: HostPort, tmp_path: Path) -> Iterator[Audited]:
    gateway = Audited(broker, tmp_path / "spool")
    try:
        yield gateway
    finally:
        gateway.stop()


def create(admin: AdminClient, topic: NewTopic) -> tuple[int, str] | None:
    """Create one topic: its outcome (the futures' dict must stay whole until they finish:
    confluent-kafka completes them through it)."""
    futures = admin.create_topics([topic])
    return outcome(futures[topic.topic])


def noted_id(message: str | None) -> str:
    """The audit request id at the end of a client's error message."""
    assert message is not None
    match = NOTE.search(message)
    assert match is not None, f"no audit request id in {message!r}"
    return match.group(1)


# --- request ids, topic specs, dry-run outcomes ------------------------------------------------


def test_one_request_one_id_in_every_event_and_in_the_clients_error_messages(
    audited: Audited,
) -> None:
    ok, few = unique_name("audit2-ok"), unique_name("audit2-few")
    bad, dry = unique_name("Audit2_BAD"), unique_name("audit2-dry")
    admin = AdminClient({"bootstrap.servers": audited.bootstrap})
    futures = admin.create_topics(
        [
            NewTopic(ok, 3, 1),
            NewTopic(few, 1, 1),  # breaks partition-count
            NewTopic(bad, 1, 1),  # breaks partition-count and topic-naming
            NewTopic(dry, 3, 1, config={"retention.ms": "99999"}),  # only the dry-run rule
        ]
    )
    results = {name: outcome(future) for name, future in futures.items()}
    again = create(admin, NewTopic(unique_name("audit2-x"), 1, 1))
    created = existing_topics(audited.bootstrap)
    events = audited.decisions("CreateTopics")

    first = [e for e in events if e.resource_name in (ok, few, bad, dry)]
    (request_id,) = {e.request_id for e in first}
    assert sorted((e.resource_name, e.verdict, e.policy) for e in first) == sorted(
        [
            (ok, "allowed", None),
            (few, "denied", "partition-count"),
            (bad, "denied", "partition-count"),
            (bad, "denied", "topic-naming"),
            (dry, "would_deny", "short-retention"),
        ]
    )
    assert results[ok] is None and results[dry] is None
    assert {ok, dry} <= created and not {few, bad} & created  # the dry-run objection let it be
    for name in (few, bad):
        code, message = results[name]  # type: ignore[misc]
        assert code == KafkaError.POLICY_VIOLATION
        assert noted_id(message) == request_id
    assert again is not None and noted_id(again[1]) not in (request_id,)
    assert {e.request_id for e in events} - {request_id} == {noted_id(again[1])}
    # Every event says how many its request wrote (schema v3): 5 for the first, 1 for the next.
    assert [e.request_events for e in first] == [5] * 5
    assert [e.request_events for e in events if e.request_id != request_id] == [1]
    specs = {e.resource_name: e.topic_spec for e in first}
    assert specs[few] is not None and (specs[few].partitions, specs[few].replication_factor) == (
        1,
        1,
    )
    assert specs[dry] is not None and dict(specs[dry].configs) == {"retention.ms": "99999"}


# --- config changes: before and after ---------------------------------------------------------


def alter(bootstrap: str, topic: str, key: str, value: str) -> tuple[int, str] | None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
    futures = admin.incremental_alter_configs(
        [ConfigResource("topic", topic, incremental_configs=[entry])]
    )
    return outcome(next(iter(futures.values())))


def test_config_changes_carry_values_before_and_after(broker: HostPort, audited: Audited) -> None:
    topic = unique_name("audit2-conf")
    direct = AdminClient({"bootstrap.servers": str(broker)})
    configs = {"retention.ms": "1000", "min.insync.replicas": "2"}
    direct.create_topics([NewTopic(topic, 3, 1, config=configs)])[topic].result(15)

    allowed = alter(audited.bootstrap, topic, "retention.ms", "2000")
    denied = alter(audited.bootstrap, topic, "min.insync.replicas", "1")
    events = [e for e in audited.decisions("IncrementalAlterConfigs") if e.resource_name == topic]

    assert allowed is None
    assert denied is not None and denied[0] == KafkaError.POLICY_VIOLATION
    assert [(e.verdict, e.policy, e.config_changes) for e in events] == [
        ("allowed", None, (ConfigChange(name="retention.ms", before="1000", after="2000"),)),
        (
            "denied",
            "min-isr",
            (ConfigChange(name="min.insync.replicas", before="2", after="1"),),
        ),
    ]
    assert events[1].request_id == noted_id(denied[1]) != events[0].request_id


# --- the policy version and lifecycle events --------------------------------------------------


def test_every_event_has_the_policy_version_between_a_start_and_a_stop(
    audited: Audited,
) -> None:
    admin = AdminClient({"bootstrap.servers": audited.bootstrap})
    create(admin, NewTopic(unique_name("audit2-pv"), 1, 1))
    version = audited.config.policy_version

    events = audited.events()

    assert version.startswith("sha256:")
    assert {e.policy_version for e in events} == {version}
    start, stop = events[0], events[-1]
    assert [(e.kind, e.api, e.action, e.resource_name) for e in (start, stop)] == [
        ("lifecycle", "Gateway", "start", "kpg-v2"),
        ("lifecycle", "Gateway", "stop", "kpg-v2"),
    ]
    assert version in (start.message or "") and version in (stop.message or "")
    assert all(e.kind == "decision" for e in events[1:-1])


# --- every Produce is in the summaries ----------------------------------------------------------


def produce(
    client: RawClient, topics: list[str], *, headers: bool = False
) -> list[tuple[str, int]]:
    """One Produce v9 request (acks=1) with one record for partition 0 of each topic: the
    (topic, error code) answers."""
    batch = batch_with(
        "none",
        (record(0, b"k", b"v", ((b"trace-id", b"t"),) if headers else ()),),
        idempotent=False,
    )
    request = produce_v9({t: {0: batch} for t in topics})
    answer = client.request(0, 9, request)
    return [
        (str(t.name), int(p.error_code)) for t in answer.responses for p in t.partition_responses
    ]


def summarized(events: list[AuditEvent], topic: str) -> tuple[int, int]:
    """(requests, records examined) in the produce summaries of ``topic``."""
    summaries = [e for e in events if e.kind == "summary" and e.resource_name == topic]
    return sum(e.event_count for e in summaries), sum(e.records_examined for e in summaries)


def test_every_produce_is_counted_validated_topic_or_not(
    broker: HostPort, audited: Audited
) -> None:
    plain, other = unique_name("audit2-plain"), unique_name("audit2-other")
    direct = AdminClient({"bootstrap.servers": str(broker)})
    for topic in (plain, other):
        direct.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    client = RawClient(audited.bootstrap)
    sent = [
        produce(client, [plain]),
        produce(client, [plain]),
        produce(client, [plain, other]),
    ]  # no topic is validated yet: forwarded unread
    validated = unique_name("audit2-valid")
    admin = AdminClient({"bootstrap.servers": audited.bootstrap})
    admin.create_topics(
        [NewTopic(validated, 3, 1, config={"record.validation.policy": "trace-id"})]
    )[validated].result(15)
    sent += [
        produce(client, [validated, other], headers=True),  # read, judged, passes
        produce(client, [plain], headers=True),  # read: a topic is validated now
    ]

    events = audited.events()

    assert all(code == 0 for answers in sent for _, code in answers)
    assert summarized(events, plain) == (4, 0)
    assert summarized(events, other) == (2, 0)
    assert summarized(events, validated) == (1, 1)
    summary = next(e for e in events if e.kind == "summary" and e.resource_name == plain)
    assert (summary.principal, summary.client_id, summary.request_id) == (None, "raw-test", None)
    assert summary.policy_version == audited.config.policy_version


# --- kpg configs refusals ---------------------------------------------------------------------


def test_kpg_configs_refusals_are_decisions(broker: HostPort, tmp_path: Path) -> None:
    guarded = Audited(
        broker,
        tmp_path / "spool",
        client_configs={"admin_principals": ["User:platform-admin"]},
    )
    open_one = Audited(broker, tmp_path / "spool-open")
    try:
        user = unique_name("dave")

        def configs(gateway: Audited, *change: str) -> int:
            return kpg(
                ["configs", "--bootstrap-server", gateway.bootstrap, "--alter", "--user", user]
                + list(change)
            )

        assert configs(guarded, "--add-config", "acks=1") != 0  # not an admin
        assert configs(open_one, "--add-config", "acks=2") != 0  # not a valid value
        assert configs(open_one, "--add-config", "acks=1") == 0
    finally:
        guarded.stop()
        open_one.stop()

    (refused,) = guarded.decisions("IncrementalAlterConfigs")
    invalid, allowed = open_one.decisions("IncrementalAlterConfigs")

    assert (refused.verdict, refused.policy, refused.error_code) == (
        "denied",
        "client_configs.admin_principals",
        31,
    )
    assert (invalid.verdict, invalid.policy, invalid.error_code) == ("denied", "client_configs", 42)
    assert invalid.message is not None and "acks" in invalid.message
    # what was asked for, though refused
    assert refused.config_changes == (ConfigChange(name="acks", before=None, after="1"),)
    assert invalid.config_changes == (ConfigChange(name="acks", before=None, after="2"),)
    assert all(e.resource_type == "user_client" and e.request_id for e in (refused, invalid))
    assert allowed.verdict == "allowed"
    assert allowed.config_changes == (ConfigChange(name="acks", before=None, after="1"),)


# --- the chain --------------------------------------------------------------------------------


def test_the_spool_chain_verifies_and_an_edited_line_breaks_it(audited: Audited) -> None:
    admin = AdminClient({"bootstrap.servers": audited.bootstrap})
    for _ in range(3):
        create(admin, NewTopic(unique_name("audit2-chain"), 1, 1))
    audited.stop()

    (status,) = verify_links(read_spool_links(audited.spool).links)
    assert status.intact and status.ended_with_stop and status.events >= 5

    segment = spool_segments(audited.spool)[0]
    lines = segment.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b'"denied"', b'"allowed"')
    segment.write_bytes(b"".join(lines))

    (status,) = verify_links(read_spool_links(audited.spool).links)
    assert [(p.kind, p.seq) for p in status.problems] == [("break", 3)]
