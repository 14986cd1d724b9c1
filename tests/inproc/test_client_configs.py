"""Dynamic client configs (seed 003) served by the gateway, in front of the real broker:
DescribeConfigs and IncrementalAlterConfigs on the gateway's CLIENT and USER_CLIENT types,
mixed with the broker's own resources, the refusals, the policies, a restart, and the opt-in
enforcement on Produce and JoinGroup seen in the traffic that reaches the broker.

The requests are built here (``protocol.client_configs``): no client library knows these
resource types. The round trip through ``kpg configs`` is in
tests/e2e/test_client_configs_cli.py.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import sqlite3
import ssl
import subprocess
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsRequest,
    AlterConfigsResource,
)
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.consumer_group_heartbeat.v0.request import (
    ConsumerGroupHeartbeatRequest as heartbeat_request_v0,
)
from kio.schema.consumer_group_heartbeat.v1.request import (
    ConsumerGroupHeartbeatRequest as heartbeat_request_v1,
)
from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.types import GroupId
from kio.static.primitive import i8, i32, i32Timedelta

from gateway import client_configs as cc
from gateway.client_configs import ClientConfigCodes
from gateway.config import ConfigError, HostPort, from_mapping
from gateway.embedded import broker_binary, free_port
from policies.api import AlterConfigV2Policy, AlterConfigV2RequestMetadata, PolicyViolation
from protocol import client_configs as wire
from protocol import list_config_resources as lcr
from protocol.alter_configs import APPEND, DELETE, SET, SUBTRACT
from protocol.codec import decode_response, encode_request
from protocol.framing import parse_request_header
from protocol.join_group import session_timeout_ms
from protocol.produce import read_produce
from tests.batches import one_record_batch, produce_v9
from tests.support import (
    BrokerTap,
    GatewayThread,
    RawClient,
    gateway_config,
    make_pki,
    noted,
    tls_context,
    tls_listener,
    unique_name,
    wait_for,
)

pytestmark = pytest.mark.inproc

API_VERSIONS = 18

CODES = ClientConfigCodes()
CLIENT, USER_CLIENT = CODES.client_type, CODES.user_client_type
DYNAMIC, DEFAULT = CODES.dynamic_client_source, CODES.dynamic_default_client_source
TOPIC = 2
INVALID_REQUIRED_ACKS, UNSUPPORTED_VERSION, INVALID_REQUEST, POLICY_VIOLATION = 21, 35, 42, 44

Op = tuple[str, int, str | None]


# --- requests the tests build ------------------------------------------------------------------


def exchange(bootstrap: str, frame: bytes, tls: ssl.SSLContext | None = None) -> bytes:
    """One request frame (size prefix included) on a new connection (plain, or over ``tls``);
    the answer frame."""
    client = RawClient(bootstrap, tls=tls)
    try:
        client.send_bytes(frame)
        return client.recv_frame()
    finally:
        client.close()


def describe(
    bootstrap: str,
    resources: Sequence[tuple[int, str]],
    client_id: str = "raw-test",
    tls: ssl.SSLContext | None = None,
) -> tuple[wire.DescribedResource, ...]:
    frame = wire.describe_request(resources, correlation_id=7, client_id=client_id)
    return wire.read_describe_response(exchange(bootstrap, frame, tls))


def alter(
    bootstrap: str,
    resources: Sequence[tuple[int, str, Sequence[Op]]],
    validate_only: bool = False,
    tls: ssl.SSLContext | None = None,
) -> list[tuple[int, str, int, str | None]]:
    frame = wire.incremental_alter_request(
        resources, validate_only=validate_only, correlation_id=9, client_id="raw-test"
    )
    answer = wire.read_incremental_alter_response(exchange(bootstrap, frame, tls))
    return [(r.resource_type, r.resource_name, r.error_code, r.error_message) for r in answer]


def set_configs(bootstrap: str, entries: Mapping[str, Mapping[str, str]]) -> None:
    """SET the configs of each USER_CLIENT name; every resource must succeed."""
    results = alter(
        bootstrap,
        [
            (USER_CLIENT, name, [(k, SET, v) for k, v in configs.items()])
            for name, configs in entries.items()
        ],
    )
    assert [(n, code, message) for _, n, code, message in results] == [
        (n, 0, None) for n in entries
    ]


def values(resource: wire.DescribedResource) -> dict[str, tuple[str | None, int, list[Any]]]:
    """name -> (value, source, synonyms as (source, value))."""
    assert resource.error_code == 0, resource.error_message
    return {
        c.name: (c.value, c.source, [(s.source, s.value) for s in c.synonyms])
        for c in resource.configs
    }


def stored(gw: GatewayThread) -> Mapping[str, str]:
    return gw.gateway.state.items(cc.STATE_NAMESPACE)


def new_topic(bootstrap: str, configs: dict[str, str]) -> str:
    topic = unique_name("cc")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(15)
    return topic


@pytest.fixture
def tapped(tap: BrokerTap) -> Iterator[tuple[GatewayThread, BrokerTap]]:
    """The gateway in front of the tapped broker. Requests sent on the gateway's bootstrap
    connection (all of this module's raw ones) are recorded by the tap."""
    gw = GatewayThread(gateway_config(tap.address)).start()
    try:
        yield gw, tap
    finally:
        gw.stop()


# --- DescribeConfigs --------------------------------------------------------------------------


def test_mixed_describe_returns_both_in_order(tapped: tuple[GatewayThread, BrokerTap]) -> None:
    gw, tap = tapped
    topic = new_topic(gw.bootstrap, {"retention.ms": "1234"})
    assert alter(
        gw.bootstrap,
        [
            (USER_CLIENT, "alice:", [("acks", SET, "-1"), ("session.timeout.ms", SET, "11000")]),
            (USER_CLIENT, "alice:app-1", [("acks", SET, "0")]),
        ],
    ) == [(USER_CLIENT, "alice:", 0, None), (USER_CLIENT, "alice:app-1", 0, None)]
    tap.requests.clear()

    answer = describe(
        gw.bootstrap, [(USER_CLIENT, "alice:app-1"), (TOPIC, topic), (USER_CLIENT, "alice:")]
    )

    assert [(r.resource_type, r.resource_name, r.error_code) for r in answer] == [
        (USER_CLIENT, "alice:app-1", 0),
        (TOPIC, topic, 0),
        (USER_CLIENT, "alice:", 0),
    ]
    assert values(answer[0]) == {
        "acks": ("0", DYNAMIC, [(DYNAMIC, "0"), (DEFAULT, "-1")]),
        "session.timeout.ms": ("11000", DEFAULT, [(DEFAULT, "11000")]),
    }
    assert values(answer[1])["retention.ms"][0] == "1234"  # the broker's answer
    assert values(answer[2]) == {
        "acks": ("-1", DEFAULT, [(DEFAULT, "-1")]),
        "session.timeout.ms": ("11000", DEFAULT, [(DEFAULT, "11000")]),
    }
    # The broker was asked about the topic only.
    assert [
        [(int(r.resource_type), r.resource_name) for r in d.resources] for d in tap.forwarded(32)
    ] == [[(TOPIC, topic)]]


def test_the_gateways_resources_alone_never_reach_the_broker(
    tapped: tuple[GatewayThread, BrokerTap],
) -> None:
    gw, tap = tapped
    answer = describe(gw.bootstrap, [(USER_CLIENT, "nobody:"), (USER_CLIENT, "no-colon")])
    assert [(r.error_code, r.error_message, r.configs) for r in answer] == [
        (0, None, ()),
        (
            INVALID_REQUEST,
            "Invalid resource name 'no-colon': expected user:client-id (user:, with an empty "
            "client-id, for the user's default)",
            (),
        ),
    ]
    assert tap.forwarded(32) == []


def test_client_resource_is_the_connections_own_user(gateway: GatewayThread) -> None:
    """On a plain connection the user is ANONYMOUS; a CLIENT resource names only the
    client-id, so an application sees its own user's configs and no one else's."""
    set_configs(
        gateway.bootstrap,
        {
            "ANONYMOUS:": {"acks": "all"},
            "ANONYMOUS:app-1": {"linger.ms": "5"},
            "bob:app-1": {"acks": "0"},
        },
    )
    (own,) = describe(gateway.bootstrap, [(CLIENT, "app-1")], client_id="app-1")
    assert (own.resource_type, own.resource_name) == (CLIENT, "app-1")
    assert values(own) == {
        "acks": ("all", DEFAULT, [(DEFAULT, "all")]),
        "linger.ms": ("5", DYNAMIC, [(DYNAMIC, "5")]),
    }


# --- IncrementalAlterConfigs and AlterConfigs ----------------------------------------------------


def test_mixed_alter_is_split_and_merged_in_order(
    tapped: tuple[GatewayThread, BrokerTap],
) -> None:
    gw, tap = tapped
    topic = new_topic(gw.bootstrap, {})
    results = alter(
        gw.bootstrap,
        [
            (USER_CLIENT, "carol:", [("acks", SET, "1")]),
            (TOPIC, topic, [("retention.ms", SET, "5000")]),
            (USER_CLIENT, "carol:app", [("acks", SET, "2")]),
        ],
    )
    assert [(t, n, code) for t, n, code, _ in results] == [
        (USER_CLIENT, "carol:", 0),
        (TOPIC, topic, 0),
        (USER_CLIENT, "carol:app", INVALID_REQUEST),
    ]
    assert [
        [(int(r.resource_type), r.resource_name) for r in a.resources] for a in tap.forwarded(44)
    ] == [[(TOPIC, topic)]]
    assert dict(stored(gw)) == {"carol/<default>/acks": "1"}
    (described,) = describe(gw.bootstrap, [(TOPIC, topic)])
    assert values(described)["retention.ms"][0] == "5000"


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        pytest.param(
            [("acks", SET, "2")],
            "Invalid value 2 for configuration acks: String must be one of: all, -1, 0, 1",
            id="acks=2",
        ),
        pytest.param(
            [("retries", SET, "3")],
            "Unknown dynamic client config: retries (supported: acks, batch.size, "
            "compression.type, heartbeat.interval.ms, linger.ms, max.poll.records, "
            "partition.assignment.strategy, session.timeout.ms)",
            id="unknown-key",
        ),
        pytest.param(
            [("producer_byte_rate", SET, "1024")],
            cc.quota_message("producer_byte_rate"),
            id="quota-key",
        ),
        pytest.param(
            [("acks", APPEND, "all")],
            "Config value append is not allowed for config key: acks",
            id="append-to-a-string",
        ),
        pytest.param(
            [("session.timeout.ms", SET, "0")],
            "Invalid value 0 for configuration session.timeout.ms: Value must be at least 1",
            id="below-minimum",
        ),
    ],
)
def test_refusals_name_the_key_and_store_nothing(
    gateway: GatewayThread, ops: list[Op], message: str
) -> None:
    # A valid change in the same resource is refused with it: all or nothing.
    results = alter(gateway.bootstrap, [(USER_CLIENT, "dave:app", [("linger.ms", SET, "1"), *ops])])
    assert results == [(USER_CLIENT, "dave:app", INVALID_REQUEST, noted(message))]
    assert dict(stored(gateway)) == {}


def test_an_entity_larger_than_the_store_keeps_is_refused(gateway: GatewayThread) -> None:
    """Every instance holds the whole store and reads it again after each change, so one
    entity (its name and configs) is bounded; past it, the change is refused, nothing stored."""
    name = "dave:" + "a" * 4096
    results = alter(gateway.bootstrap, [(USER_CLIENT, name, [("linger.ms", SET, "1")])])
    size = len(name) + len("linger.ms") + len("1")
    message = (
        f"Dynamic client configs of {name} would take {size} bytes; the gateway stores at "
        "most 4096 per entity (its name and its configs)."
    )
    assert results == [(USER_CLIENT, name, INVALID_REQUEST, noted(message))]
    assert dict(stored(gateway)) == {}


def test_legacy_alter_configs_is_an_invalid_request(gateway: GatewayThread) -> None:
    """The test broker has no AlterConfigs; the gateway answers these types itself."""
    request = AlterConfigsRequest(
        resources=(
            AlterConfigsResource(
                resource_type=i8(USER_CLIENT),
                resource_name="erin:",
                configs=(AlterableConfig(name="acks", value="-1"),),
            ),
            AlterConfigsResource(
                resource_type=i8(CLIENT),
                resource_name="app",
                configs=(AlterableConfig(name="acks", value="-1"),),
            ),
        ),
        validate_only=False,
    )
    answer = RawClient(gateway.bootstrap).request(33, 1, request)
    assert [
        (int(r.resource_type), r.resource_name, int(r.error_code), r.error_message)
        for r in answer.responses
    ] == [
        (USER_CLIENT, "erin:", INVALID_REQUEST, noted(cc.LEGACY_ALTER_MESSAGE)),
        (CLIENT, "app", INVALID_REQUEST, noted(cc.LEGACY_ALTER_MESSAGE)),
    ]
    assert dict(stored(gateway)) == {}


def test_list_key_append_subtract_and_delete(gateway: GatewayThread) -> None:
    key = "partition.assignment.strategy"

    def change(op: int, value: str | None) -> int:
        (result,) = alter(gateway.bootstrap, [(USER_CLIENT, "frank:app", [(key, op, value)])])
        return result[2]

    assert change(APPEND, "range, roundrobin") == 0
    assert change(SUBTRACT, "range") == 0
    (answer,) = describe(gateway.bootstrap, [(USER_CLIENT, "frank:app")])
    assert values(answer)[key][:2] == ("roundrobin", DYNAMIC)
    assert change(DELETE, None) == 0
    assert dict(stored(gateway)) == {}


class DenyAcksZero(AlterConfigV2Policy):
    """No one may configure acks=0 (a test policy, loaded by its module name)."""

    seen: list[AlterConfigV2RequestMetadata] = []

    def validate(self, request_metadata: AlterConfigV2RequestMetadata) -> None:
        DenyAcksZero.seen.append(request_metadata)
        if request_metadata.configs_after.get("acks") == "0":
            raise PolicyViolation(f"acks=0 is not allowed for {request_metadata.resource.name}")


def test_alter_config_policies_apply(broker: HostPort) -> None:
    policy = {"alter.config.v2.policy.class.name": f"{__name__}.DenyAcksZero"}
    gw = GatewayThread(gateway_config(broker, policies=policy)).start()
    DenyAcksZero.seen.clear()
    try:
        assert alter(gw.bootstrap, [(USER_CLIENT, "gina:app", [("acks", SET, "1")])]) == [
            (USER_CLIENT, "gina:app", 0, None)
        ]
        assert alter(gw.bootstrap, [(USER_CLIENT, "gina:app", [("acks", SET, "0")])]) == [
            (USER_CLIENT, "gina:app", POLICY_VIOLATION, noted("acks=0 is not allowed for gina:app"))
        ]
        # A CLIENT resource is judged as its USER_CLIENT: the connection's user is in the name.
        assert alter(gw.bootstrap, [(CLIENT, "app", [("acks", SET, "0")])]) == [
            (CLIENT, "app", POLICY_VIOLATION, noted("acks=0 is not allowed for ANONYMOUS:app"))
        ]
        # validate_only: the policy runs, nothing is stored.
        assert alter(
            gw.bootstrap, [(USER_CLIENT, "gina:app", [("linger.ms", SET, "7")])], True
        ) == [(USER_CLIENT, "gina:app", 0, None)]
        assert dict(stored(gw)) == {"gina/app/acks": "1"}
        assert [
            (int(m.resource.type), m.resource.name, dict(m.configs_before), dict(m.configs_after))
            for m in DenyAcksZero.seen
        ] == [
            (USER_CLIENT, "gina:app", {}, {"acks": "1"}),
            (USER_CLIENT, "gina:app", {"acks": "1"}, {"acks": "0"}),
            (USER_CLIENT, "ANONYMOUS:app", {}, {"acks": "0"}),
            (USER_CLIENT, "gina:app", {"acks": "1"}, {"acks": "1", "linger.ms": "7"}),
        ]
    finally:
        gw.stop()


class JudgedTogether(AlterConfigV2Policy):
    """Allows every change once four have reached it: requests judged at the same time."""

    barrier = threading.Barrier(4)

    def validate(self, request_metadata: AlterConfigV2RequestMetadata) -> None:
        JudgedTogether.barrier.wait(timeout=15)


def test_the_entity_limit_holds_for_requests_judged_at_the_same_time(broker: HostPort) -> None:
    """``client.configs.max.entities`` was checked when a change was judged, against the store
    as it was then: requests judged at the same time each saw room for their entity, and all
    were written (limit 2, four stored; eight connections of four entities each stored 25). The
    bound is checked again as each entity is written, with the write."""
    JudgedTogether.barrier.reset()
    policies = {
        "alter.config.v2.policy.class.name": f"{__name__}.JudgedTogether",
        "policy.timeout.ms": 20000,
    }
    gw = GatewayThread(
        gateway_config(broker, policies=policies, limits={"client.configs.max.entities": 2})
    ).start()
    try:
        with ThreadPoolExecutor(4) as pool:
            answers = list(
                pool.map(
                    lambda i: alter(
                        gw.bootstrap, [(USER_CLIENT, f"user-{i}:", [("acks", SET, "1")])]
                    ),
                    range(4),
                )
            )
        entities = cc.entities(stored(gw))
        audited = gw.metric(
            "kpg_policy_decisions_total",
            api="IncrementalAlterConfigs",
            policy="limits",
            outcome="denied",
        )
    finally:
        gw.stop()
    codes = sorted(code for [(_, _, code, _)] in answers)
    assert audited == 2
    assert codes == [0, 0, POLICY_VIOLATION, POLICY_VIOLATION]
    assert len(entities) == 2
    refused = [message for [(_, _, code, message)] in answers if code]
    assert all(m is not None and "client.configs.max.entities" in m for m in refused)


def test_configs_survive_a_restart(broker: HostPort, tmp_path: Path) -> None:
    state = {"path": str(tmp_path / "state.db")}
    first = GatewayThread(gateway_config(broker, state=state)).start()
    try:
        set_configs(
            first.bootstrap, {"hank:": {"acks": "-1"}, "hank:app": {"max.poll.records": "10"}}
        )
    finally:
        first.stop()
    restarted = GatewayThread(gateway_config(broker, state=state)).start()
    try:
        (answer,) = describe(restarted.bootstrap, [(USER_CLIENT, "hank:app")])
        assert values(answer) == {
            "acks": ("-1", DEFAULT, [(DEFAULT, "-1")]),
            "max.poll.records": ("10", DYNAMIC, [(DYNAMIC, "10")]),
        }
    finally:
        restarted.stop()


# --- the opt-in enforcement -------------------------------------------------------------------


@pytest.fixture(scope="module")
def relayed() -> Iterator[BrokerTap]:
    """A real broker that names a recording relay as its own address, so every connection the
    gateway opens to it, node connections included, passes the relay.

    Not the shared ``tap`` fixture: its broker names its own address (``EmbeddedBroker``
    ignores ``advertised_port``), so only the gateway's bootstrap connections pass that tap,
    and a producer's requests go out on node connections.
    """
    broker_port, relay_port = free_port(), free_port()
    process = subprocess.Popen(
        [
            broker_binary(),
            "broker",
            "--listener-url",
            f"tcp://127.0.0.1:{broker_port}",
            "--advertised-listener-url",
            f"tcp://127.0.0.1:{relay_port}",
            "--storage-engine",
            "memory://tansu/",
            "--silent",
        ],
        stdin=subprocess.DEVNULL,
    )

    def accepting() -> bool:
        try:
            socket.create_connection(("127.0.0.1", broker_port), timeout=0.5).close()
        except OSError:
            return False
        return True

    try:
        assert wait_for(accepting, timeout=20), "the broker did not start"
        relay = BrokerTap(HostPort(host="127.0.0.1", port=broker_port), port=relay_port)
        relay.start()
        try:
            yield relay
        finally:
            relay.stop()
    finally:
        process.terminate()
        process.wait(10)


def enforcing(relay: BrokerTap, *, acks: bool, session_timeout: bool) -> GatewayThread:
    relay.requests.clear()
    enforce = {"acks": acks, "session_timeout": session_timeout}
    return GatewayThread(gateway_config(relay.address, client_configs={"enforce": enforce})).start()


def produce(bootstrap: str, topic: str, client_id: str, acks: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "client.id": client_id, "acks": acks, "linger.ms": 0}
    )
    failures: list[Any] = []
    for i in range(3):
        producer.produce(topic, f"v{i}".encode(), on_delivery=lambda e, m: failures.append(e))
    assert producer.flush(15) == 0
    assert failures == [None, None, None]


def produce_acks(relay: BrokerTap, topic: str) -> dict[str, list[int]]:
    """client-id -> the acks of each Produce request for ``topic`` that reached the broker."""
    seen: dict[str, list[int]] = {}
    for r in relay.requests:
        if r.api_key != 0:
            continue
        header = parse_request_header(r.frame)
        view = read_produce(header, r.frame)
        if any(p.topic == topic for p in view.partitions):
            seen.setdefault(header.client_id or "", []).append(view.acks)
    return seen


@pytest.mark.parametrize("enforce", [True, False])
def test_acks_enforcement(relayed: BrokerTap, enforce: bool) -> None:
    gw = enforcing(relayed, acks=enforce, session_timeout=False)
    try:
        topic = new_topic(gw.bootstrap, {})
        set_configs(
            gw.bootstrap, {"ANONYMOUS:": {"acks": "all"}, "ANONYMOUS:lenient-app": {"acks": "1"}}
        )
        produce(gw.bootstrap, topic, "durable-app", acks=1)  # the user default: acks=all
        produce(gw.bootstrap, topic, "lenient-app", acks=1)  # its own entry: acks=1
        produce(gw.bootstrap, topic, "fire-and-forget", acks=0)  # the user default: all
        assert wait_for(lambda: len(produce_acks(relayed, topic).get("fire-and-forget", [])) > 0)
        seen = produce_acks(relayed, topic)
        enforced = gw.metric("kpg_client_config_enforced_total", config="acks")
    finally:
        gw.stop()
    assert set(seen["durable-app"]) == ({-1} if enforce else {1})
    assert set(seen["lenient-app"]) == {1}
    assert set(seen["fire-and-forget"]) == ({-1} if enforce else {0})
    raised = len(seen["durable-app"]) + len(seen["fire-and-forget"])
    assert enforced == (raised if enforce else 0)


@pytest.mark.parametrize("acks", [2, -2, 5])
def test_acks_kafka_refuses_never_carry_records_past_an_acks_config(
    relayed: BrokerTap, acks: int
) -> None:
    """Kafka takes acks -1, 0 and 1 and answers any other with INVALID_REQUIRED_ACKS; a
    broker that takes any (Tansu writes acks=2 as 1) let a producer whose acks config is all
    write with one replica's acknowledgement, since only acks=1 was raised. The gateway
    answers as Kafka does, and nothing reaches the broker."""
    gw = enforcing(relayed, acks=True, session_timeout=False)
    try:
        topic = new_topic(gw.bootstrap, {})
        set_configs(gw.bootstrap, {"ANONYMOUS:": {"acks": "all"}})
        relayed.requests.clear()
        client = RawClient(gw.bootstrap)
        try:
            answer = client.request(0, 9, produce_v9({topic: {0: one_record_batch()}}, acks=acks))
        finally:
            client.close()
    finally:
        gw.stop()
    [(name, [partition])] = [(t.name, list(t.partition_responses)) for t in answer.responses]
    assert (name, partition.index, partition.error_code) == (topic, 0, INVALID_REQUIRED_ACKS)
    assert produce_acks(relayed, topic) == {}


def test_acks_zero_cannot_escape_an_acks_config_of_all(relayed: BrokerTap) -> None:
    """An acks=0 request was carried as sent past an acks config of all: its records were
    written with the leader's acknowledgement alone. It goes to the broker with acks=-1 now;
    its client reads no answer, so the gateway reads the broker's and passes nothing on, and
    an error in it (here a partition whose records a policy rejects, beside one written)
    closes the connection, as Kafka closes an acks=0 producer's."""
    gw = enforcing(relayed, acks=True, session_timeout=False)
    try:
        topic = new_topic(gw.bootstrap, {})
        traced = new_topic(gw.bootstrap, {"record.validation.policy": "trace-id"})
        set_configs(gw.bootstrap, {"ANONYMOUS:": {"acks": "all"}})
        relayed.requests.clear()
        client = RawClient(gw.bootstrap)
        versions = ApiVersionsRequest(client_software_name="raw", client_software_version="1")
        try:
            client.send(0, 9, produce_v9({topic: {0: one_record_batch()}}, acks=0))
            # the next frame the client reads is its next request's answer, not the Produce's
            assert client.request(API_VERSIONS, 3, versions).error_code == 0
            assert [r.acks for r in relayed.forwarded(0)] == [-1]
            batches = {topic: {0: one_record_batch()}, traced: {0: one_record_batch()}}
            client.send(0, 9, produce_v9(batches, acks=0))
            assert client.is_closed(10), "an acks=0 produce with a rejection left it open"
            assert [r.acks for r in relayed.forwarded(0)] == [-1, -1]
        finally:
            client.close()
        # every partition refused: answered by the gateway, which its client would not read
        refused = RawClient(gw.bootstrap)
        try:
            refused.send(0, 9, produce_v9({traced: {0: one_record_batch()}}, acks=0))
            assert refused.is_closed(10), "an acks=0 produce refused whole left it open"
            assert [r.acks for r in relayed.forwarded(0)] == [-1, -1]
        finally:
            refused.close()
    finally:
        gw.stop()


def test_an_acks_config_set_through_another_instance_decides_the_next_produce(
    relayed: BrokerTap,
) -> None:
    """Two gateways sharing a Kafka state store: an acks=all set through A reaches B's view
    when B's tail next fetches the state topic (5 s on Tansu here), and B rewrote acks in
    ``prepare`` from that view: records went to the broker with acks=1 meanwhile. B catches
    up with the store before judging every Produce; a request it had left at acks=1 and now
    knows should be all is refused (NOT_ENOUGH_REPLICAS, retriable), so only acks=-1 reaches
    the broker."""
    relayed.requests.clear()
    state_topic = f"kpg-state-{unique_name('cc')}"

    def shared(refresh_interval_s: float) -> GatewayThread:
        state = {"store": "kafka", "topic": state_topic, "refresh_interval_s": refresh_interval_s}
        enforce = {"acks": True, "session_timeout": False}
        config = gateway_config(relayed.address, state=state, client_configs={"enforce": enforce})
        return GatewayThread(config).start()

    a = shared(0.2)
    try:
        b = shared(5.0)
        try:
            topic = new_topic(a.bootstrap, {})
            produce(b.bootstrap, topic, "before", acks=1)  # B has met the topic and the client
            set_configs(a.bootstrap, {"ANONYMOUS:": {"acks": "all"}})
            produce(b.bootstrap, topic, "after", acks=1)
        finally:
            b.stop()
    finally:
        a.stop()
    seen = produce_acks(relayed, topic)
    assert set(seen["before"]) == {1}
    assert set(seen["after"]) == {-1}


def consumer_join() -> JoinGroupRequest:
    """A consumer's first JoinGroup (v5) of a new group, asking a 45 s session timeout."""
    return JoinGroupRequest(
        group_id=unique_name("g"),
        session_timeout=i32Timedelta.parse(timedelta(milliseconds=45000)),
        rebalance_timeout=i32Timedelta.parse(timedelta(milliseconds=60000)),
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01"),),
    )


@pytest.mark.parametrize("enforce", [True, False])
def test_session_timeout_enforcement(relayed: BrokerTap, enforce: bool) -> None:
    gw = enforcing(relayed, acks=False, session_timeout=enforce)
    try:
        set_configs(gw.bootstrap, {"ANONYMOUS:group-app": {"session.timeout.ms": "11000"}})
        request = consumer_join()
        exchange(gw.bootstrap, encode_request(11, 5, 3, "group-app", request))
        joins = [
            session_timeout_ms(parse_request_header(r.frame), r.frame)
            for r in relayed.requests
            if r.api_key == 11
        ]
        enforced = gw.metric("kpg_client_config_enforced_total", config="session.timeout.ms")
    finally:
        gw.stop()
    assert joins == ([11000] if enforce else [45000])
    assert enforced == (1 if enforce else 0)


@pytest.mark.parametrize("version", [0, 1])
def test_a_consumer_group_heartbeat_cannot_escape_a_session_timeout_config(
    relayed: BrokerTap, version: int
) -> None:
    """A KIP-848 consumer (ConsumerGroupHeartbeat) gets its session timeout from the broker's
    group config, which no request carries: the gateway cannot set it, so a consumer whose
    session.timeout.ms is configured escaped the config by choosing group.protocol=consumer.
    Its heartbeats get UNSUPPORTED_VERSION, Kafka's answer where the consumer protocol is
    off (the Java consumer then says to set group.protocol=classic, where JoinGroup carries
    the timeout); one that leaves the group still goes, and other clients are untouched."""
    gw = enforcing(relayed, acks=False, session_timeout=True)
    group = unique_name("g")
    try:
        set_configs(gw.bootstrap, {"ANONYMOUS:bound-app": {"session.timeout.ms": "11000"}})
        relayed.requests.clear()

        def heartbeat(client_id: str, member_epoch: int) -> Any:
            schema = heartbeat_request_v1 if version == 1 else heartbeat_request_v0
            request = schema(
                group_id=GroupId(group),
                member_id="m-1",
                member_epoch=i32(member_epoch),
                instance_id=None,
                rack_id=None,
                rebalance_timeout=i32Timedelta.parse(timedelta(seconds=30)),
                subscribed_topic_names=("t",),
                server_assignor=None,
                topic_partitions=(),
            )
            frame = encode_request(68, version, 4, client_id, request)
            answer = exchange(gw.bootstrap, frame)
            return decode_response(68, version, answer)

        refused = heartbeat("bound-app", 0)
        with contextlib.suppress(ConnectionError):  # the broker may not speak KIP-848
            heartbeat("bound-app", -1)  # leaving
        with contextlib.suppress(ConnectionError):
            heartbeat("free-app", 0)  # no session.timeout.ms configured
        reached = [(r.client_id, r.api_key) for r in relayed.requests if r.api_key == 68]
        enforced = gw.metric("kpg_client_config_enforced_total", config="session.timeout.ms")
    finally:
        gw.stop()
    assert refused.error_code == UNSUPPORTED_VERSION
    assert refused.error_message is not None and "group.protocol=classic" in refused.error_message
    assert reached == [("bound-app", 68), ("free-app", 68)]
    assert enforced == 1


def test_refused_consumer_group_heartbeats_do_not_fill_the_log(
    relayed: BrokerTap, caplog: pytest.LogCaptureFixture
) -> None:
    """Each refused heartbeat was logged, with its client id (up to 32 KiB), and is not an
    audit decision (no client.audit.events.per.sec): a client of a user whose
    session.timeout.ms is configured pipelined heartbeats on one connection, and every one
    wrote a line (200 heartbeats, 200 lines). At most one line every 10 s now, saying how
    many were not logged; the metric still counts each."""
    gw = enforcing(relayed, acks=False, session_timeout=True)
    try:
        # RawClient's client id
        set_configs(gw.bootstrap, {"ANONYMOUS:raw-test": {"session.timeout.ms": "11000"}})
        request = heartbeat_request_v0(
            group_id=GroupId(unique_name("g")),
            member_id="m-1",
            member_epoch=i32(0),
            instance_id=None,
            rack_id=None,
            rebalance_timeout=i32Timedelta.parse(timedelta(seconds=30)),
            subscribed_topic_names=("t",),
            server_assignor=None,
            topic_partitions=(),
        )
        client = RawClient(gw.bootstrap)
        with caplog.at_level(logging.INFO, logger="gateway.handlers"):
            try:
                for _ in range(200):
                    client.send(68, 0, request)
                answers = [decode_response(68, 0, client.recv_frame()) for _ in range(200)]
            finally:
                client.close()
        enforced = gw.metric("kpg_client_config_enforced_total", config="session.timeout.ms")
    finally:
        gw.stop()
    assert {a.error_code for a in answers} == {UNSUPPORTED_VERSION}
    assert enforced == 200
    lines = [r for r in caplog.records if "ConsumerGroupHeartbeat refused" in r.getMessage()]
    assert 1 <= len(lines) <= 2, f"{len(lines)} lines for 200 heartbeats"


# --- configuration ----------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            {"codes": {"client_type": 16}},
            "gw.yaml: client_configs.codes.client_type: 16 is Kafka's resource type CLIENT_METRICS",
        ),
        ({"codes": {"client": 1}}, "gw.yaml: client_configs.codes.client: unknown key"),
        ({"enforce": {"acks": "yes"}}, "gw.yaml: client_configs.enforce.acks: expected true"),
        ({"enforce": {"linger": True}}, "gw.yaml: client_configs.enforce.linger: unknown key"),
        ({"client_type": 100}, "gw.yaml: client_configs.client_type: unknown key"),
    ],
)
def test_bad_client_configs_section_names_the_key(section: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        from_mapping({"client_configs": section}, "gw.yaml")
    assert str(caught.value).startswith(message)


@pytest.mark.unit
def test_client_configs_section_defaults_and_codes() -> None:
    default = from_mapping({}, "gw.yaml").client_configs
    assert default.codes == ClientConfigCodes()
    assert (default.enforce_acks, default.enforce_session_timeout) == (False, False)
    chosen = from_mapping(
        {"client_configs": {"codes": {"client_type": 100}, "enforce": {"acks": True}}}, "gw.yaml"
    ).client_configs
    assert (chosen.codes.client_type, chosen.codes.user_client_type) == (100, 121)
    assert (chosen.enforce_acks, chosen.enforce_session_timeout) == (True, False)


def test_admin_principals_guard_alters_and_other_users(broker: HostPort) -> None:
    """With client_configs.admin_principals set, only those principals alter client configs
    or read another user's; an application still reads its own (CLUSTER authorization, as
    seed 003 asks)."""
    gw = GatewayThread(
        gateway_config(broker, client_configs={"admin_principals": ["User:platform-admin"]})
    ).start()
    try:
        [(_, _, code, message)] = alter(
            gw.bootstrap, [(USER_CLIENT, "alice:", [("acks", SET, "1")])]
        )
        assert code == 31 and message is not None and "admin_principals" in message
        assert not stored(gw)
        other, own_user, own_client = describe(
            gw.bootstrap, [(USER_CLIENT, "alice:"), (USER_CLIENT, "ANONYMOUS:"), (CLIENT, "app")]
        )
        assert other.error_code == 31
        assert own_user.error_code == 0 and own_client.error_code == 0
    finally:
        gw.stop()


@pytest.fixture
def admin_gateway(
    broker: HostPort, tmp_path: Path
) -> Iterator[tuple[GatewayThread, ssl.SSLContext, ssl.SSLContext]]:
    """A gateway whose TLS listener takes client certificates, with User:CN=platform-admin in
    admin_principals; and the TLS contexts of platform-admin and of alice (no admin)."""
    pki = make_pki(tmp_path, {"platform-admin": "/CN=platform-admin", "alice": "/CN=alice"})
    gw = GatewayThread(
        gateway_config(
            broker,
            tls=tls_listener(pki),
            client_configs={"admin_principals": ["User:CN=platform-admin"]},
        )
    ).start()
    try:
        yield gw, tls_context(pki, "platform-admin"), tls_context(pki, "alice")
    finally:
        gw.stop()


def test_an_admin_principal_alters_and_reads_every_users_configs(
    admin_gateway: tuple[GatewayThread, ssl.SSLContext, ssl.SSLContext],
) -> None:
    """The other half: over TLS the client certificate is the principal, and the one named in
    admin_principals alters any user's configs and reads them back; another is refused."""
    gw, admin, alice = admin_gateway
    change = [(USER_CLIENT, "bob:", [("acks", SET, "1")])]
    [(_, _, code, message)] = alter(gw.bootstrap, change, tls=alice)
    assert code == 31 and message is not None and "admin_principals" in message
    assert not stored(gw)

    [(_, _, code, message)] = alter(gw.bootstrap, change, tls=admin)
    assert (code, message) == (0, None)
    assert stored(gw)
    [bob] = describe(gw.bootstrap, [(USER_CLIENT, "bob:")], tls=admin)
    assert values(bob)["acks"][0] == "1"
    [bob_for_alice] = describe(gw.bootstrap, [(USER_CLIENT, "bob:")], tls=alice)
    assert bob_for_alice.error_code == 31


# --- ListConfigResources ---------------------------------------------------------------------


def list_resources(
    bootstrap: str, types: Sequence[int], tls: ssl.SSLContext | None = None
) -> tuple[int, tuple[tuple[int, str], ...]]:
    frame = lcr.list_request(types, correlation_id=5, client_id="raw-test")
    return lcr.read_list_response(exchange(bootstrap, frame, tls))


def test_list_config_resources_lists_the_gateways_entities_and_never_asks_the_broker(
    tapped: tuple[GatewayThread, BrokerTap],
) -> None:
    gw, tap = tapped
    set_configs(
        gw.bootstrap,
        {
            "bob:": {"acks": "1"},
            "alice:app-1": {"linger.ms": "5"},
            "alice:": {"acks": "0"},
            "ANONYMOUS:app-9": {"batch.size": "10"},
        },
    )
    assert list_resources(gw.bootstrap, [USER_CLIENT]) == (
        0,
        (
            (USER_CLIENT, "ANONYMOUS:app-9"),
            (USER_CLIENT, "alice:"),
            (USER_CLIENT, "alice:app-1"),
            (USER_CLIENT, "bob:"),
        ),
    )
    # CLIENT: the connection's own user's client-ids (this connection is ANONYMOUS).
    assert list_resources(gw.bootstrap, [CLIENT, USER_CLIENT]) == (
        0,
        (
            (USER_CLIENT, "ANONYMOUS:app-9"),
            (CLIENT, "app-9"),
            (USER_CLIENT, "alice:"),
            (USER_CLIENT, "alice:app-1"),
            (USER_CLIENT, "bob:"),
        ),
    )
    assert list_resources(gw.bootstrap, [CLIENT]) == (0, ((CLIENT, "app-9"),))
    # Mixed with a broker type: refused, not half answered.
    assert list_resources(gw.bootstrap, [USER_CLIENT, TOPIC]) == (INVALID_REQUEST, ())
    assert tap.forwarded(lcr.LIST_CONFIG_RESOURCES) == []


def test_list_config_resources_shows_only_its_own_user_to_a_non_admin(
    admin_gateway: tuple[GatewayThread, ssl.SSLContext, ssl.SSLContext],
) -> None:
    gw, admin, alice = admin_gateway
    change = [(USER_CLIENT, name, [("acks", SET, "1")]) for name in ("bob:", "CN=alice:app-a")]
    assert [code for _, _, code, _ in alter(gw.bootstrap, change, tls=admin)] == [0, 0]
    assert list_resources(gw.bootstrap, [USER_CLIENT], tls=admin) == (
        0,
        ((USER_CLIENT, "CN=alice:app-a"), (USER_CLIENT, "bob:")),
    )
    assert list_resources(gw.bootstrap, [USER_CLIENT], tls=alice) == (
        0,
        ((USER_CLIENT, "CN=alice:app-a"),),
    )
    assert list_resources(gw.bootstrap, [CLIENT], tls=alice) == (0, ((CLIENT, "app-a"),))


def store_raw(gw: GatewayThread, key: str, value: str) -> None:
    """A client config row written into the gateway's state file by another program (or
    another version of the gateway), past the checks the gateway makes on what it stores."""
    with contextlib.closing(sqlite3.connect(gw.gateway.state.path)) as conn:
        conn.execute(
            "INSERT INTO gateway_state VALUES (?, ?, ?, 0)", (cc.STATE_NAMESPACE, key, value)
        )
        conn.commit()


def test_an_acks_config_it_cannot_read_is_taken_at_its_strictest(relayed: BrokerTap) -> None:
    """Not as unset: 'ALL' (no value this version stores) let acks=1 and acks=0 through."""
    gw = enforcing(relayed, acks=True, session_timeout=False)
    try:
        topic = new_topic(gw.bootstrap, {})
        store_raw(gw, "ANONYMOUS/<default>/acks", "ALL")
        produce(gw.bootstrap, topic, "durable-app", acks=1)
        seen = produce_acks(relayed, topic)
    finally:
        gw.stop()
    assert set(seen["durable-app"]) == {-1}


def test_a_session_timeout_config_it_cannot_read_refuses_the_join(relayed: BrokerTap) -> None:
    """Not as unset: '11s' (no value this version stores) let the consumer join with its own
    45 s session timeout; the join is answered INVALID_SESSION_TIMEOUT and never forwarded."""
    gw = enforcing(relayed, acks=False, session_timeout=True)
    try:
        store_raw(gw, "ANONYMOUS/group-app/session.timeout.ms", "11s")
        request = consumer_join()
        answer = decode_response(
            11, 5, exchange(gw.bootstrap, encode_request(11, 5, 3, "group-app", request))
        )
        joins = [r for r in relayed.requests if r.api_key == 11]
    finally:
        gw.stop()
    assert int(answer.error_code) == 26  # INVALID_SESSION_TIMEOUT
    assert joins == []
