"""What the gateway records and shows about its decisions, with client-chosen text in it: the
client id, names, config values. A client must not be able to make the audit much larger than
what it sent, nor keep its decision out of the audit topic, nor forge or disguise a line of
the log, nor drive the terminal of an operator who reads the log or ``kpg configs``.

Each case runs the real gateway in front of the (tapped) real broker; the report's side of
this family is in tests/spark/test_job.py (``test_report_*``) and test_requests.py.
"""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from gateway.audit import EVENT_MAX_BYTES, recorded_client_id
from gateway.logs import TEXT_FORMAT, JsonFormatter, TextFormatter
from protocol import client_configs as wire
from protocol.codec import decode_response, encode_request
from spark_audit.event import SENSITIVE_TOPIC_CONFIG, AuditEvent
from tests.adversarial.test_partitioned_routes import (
    _delete_records,
    _fetch,
    _list_offsets,
)
from tests.adversarial.test_request_cost import CREATE_TOPICS, POLICY_VIOLATION, create_topics
from tests.batches import produce_v9
from tests.e2e.test_gateway_process import KPG
from tests.support import (
    BrokerTap,
    GatewayThread,
    RawClient,
    create_topic_request,
    gateway_config,
    spool_events,
)

pytestmark = pytest.mark.adversarial

PRODUCE = 0
LONGEST_CLIENT_ID = "c" * 32_767
"""The longest client id a request header carries (an int16-sized string)."""
RECORDED_CLIENT_ID_MAX = 250
"""More than any recorded client id may take: 200 characters and a note of its length."""


def test_a_long_client_id_is_not_copied_into_every_event_of_a_request(
    tap: BrokerTap, tmp_path: Path
) -> None:
    """Every event of a request carried the request header's client id whole: a CreateTopics
    of 500 refused topics with a 32,767-character client id (a 40 KB frame) wrote 16.8 MB of
    audit, and a client paced at ``client.audit.events.per.sec`` events wrote 16 MB a second
    instead of some 450 KB. An event now records the client id's first 200 characters and
    its length."""
    rule = {"name": "naming", "type": "topic.name", "pattern": r"[a-z]+\.v[0-9]+"}
    spool = tmp_path / "audit"
    config = gateway_config(
        tap.address, policies={"rules": [rule]}, audit={"spool_dir": str(spool)}
    )
    gw = GatewayThread(config).start()
    try:
        names = [f"t{index:x}" for index in range(500)]
        frame = encode_request(CREATE_TOPICS, 7, 1, LONGEST_CLIENT_ID, create_topics(names))
        client = RawClient(gw.bootstrap, timeout=30)
        client.send_bytes(frame)
        answer = decode_response(CREATE_TOPICS, 7, client.recv_frame())
        assert {t.error_code for t in answer.topics} == {POLICY_VIOLATION}

        events = spool_events(spool, lambda e: e.api == "CreateTopics", count=len(names))
        assert len(events) == len(names)
        for event in events:
            assert event.client_id is not None
            assert len(event.client_id) < RECORDED_CLIENT_ID_MAX, "the whole client id"
            assert event.client_id.startswith("c" * 200)
            assert "32767 characters" in event.client_id
        written = sum(p.stat().st_size for p in spool.iterdir() if "events-" in p.name)
        assert written < 20 * len(frame), f"{written:,} bytes of audit for a {len(frame):,}"
    finally:
        gw.stop()


def test_a_long_client_id_is_not_copied_into_every_produce_summary(
    tap: BrokerTap, tmp_path: Path
) -> None:
    """The produce summaries keep one tally per (topic, principal, client id) and write one
    event each, the client id whole in its key and its event: one Produce request naming 200
    topics with a 32,767-character client id wrote 6.5 MB of summaries (and, at the default
    10,000 keys an interval, could write 320 MB). Summaries key and record the client id as
    the decision events do."""
    names = [f"s{index:x}" for index in range(200)]
    request = produce_v9({name: {0: None} for name in names})
    spool = tmp_path / "audit"
    audit = {"spool_dir": str(spool), "produce_summary_interval_s": 0.5}
    gw = GatewayThread(gateway_config(tap.address, audit=audit)).start()
    try:
        client = RawClient(gw.bootstrap, timeout=30)
        client.send_bytes(encode_request(PRODUCE, 9, 1, LONGEST_CLIENT_ID, request))

        def summary(event: AuditEvent) -> bool:
            return event.event_kind == "summary"

        summaries = spool_events(spool, summary, count=len(names), timeout=15)
        assert len(summaries) == len(names)
        assert {e.client_id for e in summaries} == {recorded_client_id(LONGEST_CLIENT_ID)}
        assert all(len(e.client_id or "") < RECORDED_CLIENT_ID_MAX for e in summaries)
    finally:
        gw.stop()


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def decision_log() -> Iterator[list[logging.LogRecord]]:
    """The records the gateway's decision log writes meanwhile (denials are at INFO)."""
    logger = logging.getLogger("gateway.decisions")
    handler, level = _Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


FORGED = "2026-11-24 09:00:00,000 INFO gateway.server: configuration reloaded"
TERMINAL = "\x9b2J\x9b1;1H"
"""Clear the screen and go home, with CSI as the one character U+009B (ESC [ in 8 bits)."""


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(f"7\u2028{FORGED}", id="line-separator"),
        pytest.param(f"7\x85{FORGED}", id="next-line"),
        pytest.param(f"7{TERMINAL}denied? no", id="c1-csi"),
        pytest.param("7\u202e)dewolla( ecilA:resU yb", id="bidi-override"),
    ],
)
def test_a_refusal_quoting_a_client_s_value_is_one_plain_log_line(
    tap: BrokerTap, decision_log: list[logging.LogRecord], value: str
) -> None:
    """A denial's log line quotes the value the client sent. The text format escaped only the
    C0 controls and DEL, and the JSON format only the C0 controls: a line separator (U+2028)
    or NEL started a second line for every tool that splits lines as Python does, CSI
    (U+009B) drove the operator's terminal as ESC [ does, and a right-to-left override showed
    the rest of the line reversed. Both formats now escape every character that is not
    printable, and the JSON line still reads back as the message."""
    rule = {"name": "retention", "type": "config", "config": "retention.ms", "min": 3_600_000}
    gw = GatewayThread(gateway_config(tap.address, policies={"rules": [rule]})).start()
    try:
        request = create_topic_request("logged", configs=(("retention.ms", value),))
        answer = RawClient(gw.bootstrap).request(CREATE_TOPICS, 7, request)
        assert [t.error_code for t in answer.topics] == [POLICY_VIOLATION]
    finally:
        gw.stop()

    [denial] = [r for r in decision_log if value in r.getMessage()]
    text = TextFormatter(TEXT_FORMAT).format(denial)
    as_json = JsonFormatter().format(denial)
    for line in (text, as_json):
        assert len(line.splitlines()) == 1, line
        assert line.isprintable(), line
    assert json.loads(as_json)["message"] == denial.getMessage()


CLIENT = 120
"""The gateway's CLIENT config resource type (an application's own client-id entity)."""
SET = 0
OWN_CLIENT_ID = f"app\x1b[2J{TERMINAL}\nCompleted updating config for user root.\u202e"
"""A client-id entity name that clears the screen, adds a line and reverses the rest."""


def test_kpg_configs_prints_a_client_s_entity_name_escaped(gateway: GatewayThread) -> None:
    """Any client names its own client-id entity (CLIENT, with its user in front), and
    ``kpg configs --describe --entity-type clients`` printed every entity's name as the
    gateway answered it: the operator's terminal was cleared, a line that never came from
    the gateway added, and the rest of the heading reversed. Every line is now printed with
    what is not printable escaped."""
    client = RawClient(gateway.bootstrap)
    client.send_bytes(
        wire.incremental_alter_request(
            [(CLIENT, OWN_CLIENT_ID, [("acks", SET, "1")])],
            validate_only=False,
            correlation_id=1,
            client_id="app",
        )
    )
    [altered] = wire.read_incremental_alter_response(client.recv_frame())
    assert altered.error_code == 0, altered.error_message

    for entities in (
        ["--entity-type", "clients"],
        ["--entity-type", "users", "--entity-name", "ANONYMOUS", "--entity-type", "clients"],
    ):
        result = subprocess.run(
            [KPG, "configs", "--bootstrap-server", gateway.bootstrap, "--describe", *entities],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        headings = [line for line in lines if line.startswith("Dynamic configs for ")]
        assert len(headings) == 1 and lines[0] == headings[0], result.stdout
        assert "app\\x1b[2J\\x9b2J" in headings[0], headings[0]
        assert all(line.isprintable() for line in lines), result.stdout
        assert not [line for line in lines if line.startswith("Completed")], result.stdout


def audit_topic_events(bootstrap: str, topic: str, count: int) -> list[AuditEvent]:
    """The first ``count`` events of ``topic`` (fewer if they do not come in 20 s)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex})
    consumer.assign([TopicPartition(topic, 0, 0)])
    events: list[AuditEvent] = []
    deadline = time.monotonic() + 20
    try:
        while len(events) < count and time.monotonic() < deadline:
            message = consumer.poll(0.3)
            if message is not None and message.error() is None:
                events.append(AuditEvent.from_json(message.value()))
    finally:
        consumer.close()
    return events


def test_an_event_too_large_for_the_audit_topic_is_recorded_shortened(
    tap: BrokerTap, tmp_path: Path
) -> None:
    """A topic creation's event records its configs, whole: a CreateTopics with a 1.2 MB
    config value made a 1.2 MB event, which the audit topic sink refused (records of at most
    1 MB), so the decision was in the spool but not in the audit topic the stream reads, and
    the topic's chain had a gap where it had been (a batch of other clients' events with it
    went the same way). 600 configs of 2 KB each did the same. An event over 512 KiB keeps
    the start, length and SHA-256 of each long text, and then as many configs as fit."""
    rule = {"name": "retention", "type": "config", "config": "retention.ms", "min": 3_600_000}
    topic, spool = f"kpg-audit-{uuid.uuid4().hex[:6]}", tmp_path / "audit"
    config = gateway_config(
        tap.address,
        policies={"rules": [rule]},
        audit={"spool_dir": str(spool), "topic": topic},
    )
    long_value = "9" * 1_200_000
    many = tuple((f"x.config.{index}", "v" * 2_000) for index in range(600))
    gw = GatewayThread(config).start()
    try:
        client = RawClient(gw.bootstrap, timeout=30)
        for name, configs in (
            ("long", (("retention.ms", "1"), ("segment.ms", long_value))),
            ("many", (("retention.ms", "1"), *many)),
        ):
            answer = client.request(CREATE_TOPICS, 7, create_topic_request(name, configs=configs))
            assert [t.error_code for t in answer.topics] == [POLICY_VIOLATION]
        spooled = spool_events(spool, lambda e: e.api == "CreateTopics", count=2)
        assert [e.resource_name for e in spooled] == ["long", "many"]
        failed = gw.metric("kpg_audit_events_failed_total")
    finally:
        gw.stop()

    assert failed == 0, "the audit topic refused an event"
    in_topic = audit_topic_events(str(tap.address), topic, count=4)  # start, 2 decisions, stop
    assert [e.seq for e in in_topic] == [0, 1, 2, 3], "a gap in the topic's chain"
    long, many_configs = in_topic[1], in_topic[2]
    assert (long.resource_name, many_configs.resource_name) == ("long", "many")
    for event in (long, many_configs):
        assert len(event.to_json_line()) <= EVENT_MAX_BYTES
    assert long.topic_spec is not None
    digest = hashlib.sha256(long_value.encode()).hexdigest()
    assert long.topic_spec.configs["segment.ms"] == (
        f"{long_value[:1000]}... (1200000 characters, sha256 {digest})"
    )
    assert long.topic_spec.configs["retention.ms"] == "1"
    assert many_configs.topic_spec is not None
    kept = many_configs.topic_spec.configs
    assert 0 < len(kept) < len(many) + 1
    assert f"{len(kept)} of {len(many) + 1} topic configs recorded" in (many_configs.message or "")


SECRETS = (
    ("ssl.keystore.password", "hunter2-keystore"),
    ("sasl.jaas.config", 'PlainLoginModule required username="a" password="hunter2-jaas";'),
    ("listener.name.internal.ssl.key.password", "hunter2-listener"),
    ("Some.Plugin.SECRET", "hunter2-plugin"),
)


def test_a_creation_s_secret_configs_keep_their_key_and_never_their_value(
    tap: BrokerTap, tmp_path: Path
) -> None:
    """A CreateTopics may carry any config a client pastes into it, its own client's secrets
    too (``ssl.keystore.password``, ``sasl.jaas.config``): the broker refuses the key, but the
    event's ``topic_spec.configs`` recorded every value whole, in the spool, the audit topic
    and the report's events CSV. Config changes never recorded a secret's value; a creation's
    configs now keep the key with :data:`SENSITIVE_TOPIC_CONFIG` for its value, in a dry run
    and a real one, allowed or denied."""
    rule = {"name": "naming", "type": "topic.name", "pattern": r"[a-z]+\.v[0-9]+"}
    spool = tmp_path / "audit"
    config = gateway_config(
        tap.address, policies={"rules": [rule]}, audit={"spool_dir": str(spool)}
    )
    gw = GatewayThread(config).start()
    try:
        client = RawClient(gw.bootstrap, timeout=30)
        configs = (("retention.ms", "60000"), *SECRETS)
        asked = [  # (name, validate_only): denied by the rule, allowed dry run, allowed
            (f"denied-{uuid.uuid4().hex[:8]}", False),
            (f"dry.v{uuid.uuid4().int % 10**6}", True),
            (f"real.v{uuid.uuid4().int % 10**6}", False),
        ]
        for name, validate_only in asked:
            request = create_topic_request(name, configs=configs, validate_only=validate_only)
            answer = client.request(CREATE_TOPICS, 7, request)
            for topic in answer.topics:
                assert "hunter2" not in (topic.error_message or "")
        names = {name for name, _ in asked}
        events = spool_events(spool, lambda e: e.resource_name in names, count=len(asked))
    finally:
        gw.stop()
    assert {e.resource_name for e in events} == names
    assert {e.verdict for e in events} == {"denied", "allowed"}
    for event in events:
        assert event.topic_spec is not None
        assert event.topic_spec.configs == {
            "retention.ms": "60000",
            **{key: SENSITIVE_TOPIC_CONFIG for key, _ in SECRETS},
        }
    for path in spool.iterdir():
        if path.is_file():
            assert b"hunter2" not in path.read_bytes(), path.name


def test_a_client_reading_writing_or_truncating_the_audit_topic_is_audited(
    tap: BrokerTap, tmp_path: Path
) -> None:
    """The gateway's own topics are refused to every client (TOPIC_AUTHORIZATION_FAILED), but
    the refusal was an answer made here with no audit event: a client that fetched the audit
    topic (every principal's decisions and config values), produced made-up events into it or
    truncated it with DeleteRecords left no trace in the audit it went for. Each attempt is
    now one denied event of policy ``own_topics``, as the gateway's other own-topic refusals
    are, its request id ending the client's message where the API carries one; one per topic
    however many partitions of it the request names."""
    own = f"_kpg_audit_{uuid.uuid4().hex[:8]}"
    spool = tmp_path / "audit"
    config = gateway_config(tap.address, audit={"topic": own, "spool_dir": str(spool)})
    gw = GatewayThread(config).start()
    try:
        client = RawClient(gw.bootstrap, timeout=10)
        attempts = [  # (API, version, request, action, resource, topics and partitions fields)
            ("Fetch", 1, 12, _fetch(own), "fetch", own, ("responses", "partitions")),
            ("ListOffsets", 2, 7, _list_offsets(own), "list_offsets", own,
             ("topics", "partitions")),
            ("Produce", 0, 9, produce_v9({own: dict.fromkeys(range(50))}), "produce", own,
             ("responses", "partition_responses")),
            ("DeleteRecords", 21, 2, _delete_records(own), "delete_records", own,
             ("topics", "partitions")),
        ]  # fmt: skip
        answers = {}
        for api, api_key, version, request, *_ in attempts:
            answers[api] = client.request(api_key, version, request)
        events = spool_events(spool, lambda e: e.event_kind == "decision", count=len(attempts))
    finally:
        gw.stop()
    assert [(e.api, e.action, e.resource_name) for e in events] == [
        (api, action, resource) for api, _, _, _, action, resource, _ in attempts
    ]
    for event, (api, *_, fields) in zip(events, attempts, strict=True):
        assert (event.verdict, event.policy, event.error_code) == ("denied", "own_topics", 29)
        assert event.client_id == "raw-test" and event.request_id is not None
        partitions = [p for t in getattr(answers[api], fields[0]) for p in getattr(t, fields[1])]
        assert {int(p.error_code) for p in partitions} == {29}, api  # one event, however many
        message = getattr(partitions[0], "error_message", None)
        if message is not None:
            assert message.endswith(f"(audit request id {event.request_id})"), message
