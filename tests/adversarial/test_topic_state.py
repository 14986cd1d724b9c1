"""Routes around the gateway's own topic state and around the count and config rules of
CreateTopics (issue 11 items 5, 8 and 9).

``record.validation.policy`` lives in the gateway's state store, never at the broker: a change
of it must still be authorized as the broker authorizes an ALTER_CONFIGS of the topic, and a
value that would fail every produce (``max-bytes:0``, an unknown rule) or that is too large to
store must be refused when it is set. CreateTopics must be judged on what the broker will
create: no guessed default for -1, no counts judged by assignments the broker ignores, no
config value other than the one the broker keeps.

Each case is sent raw through the gateway in front of the real broker, with the tap recording
what reaches it: a refused topic or change never reaches it, and the state store is untouched.
Where the test broker cannot show a case, a scripted Kafka-like upstream answers instead (see
the second table).
"""

from __future__ import annotations

import dataclasses
import importlib
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.create_topics.v7.request import CreateTopicsRequest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i16, i32

from gateway.record_validation import STATE_NAMESPACE
from tests.scripted import (
    ScriptedBroker,
    ScriptedCluster,
    alter_configs_response,
    describe_configs_response,
    describe_configs_result,
    metadata_response,
)
from tests.support import (
    KAFKA_LIKE_UPSTREAM,
    BrokerTap,
    GatewayThread,
    RawClient,
    create_topic_request,
    existing_topics,
    gateway_config,
    legacy_alter_configs_request,
    noted,
    unique_name,
)

pytestmark = pytest.mark.adversarial

CREATE_TOPICS, LEGACY, INCREMENTAL = 19, 33, 44
TOPIC = 2
SET, DELETE = 0, 1
KEY = "record.validation.policy"
TEAM_POLICY = "trace-id"
RETENTION = ("retention.ms", "3600000")
TANSU_NODE = 111
RULES = {
    "rules": [
        {"name": "partition-count", "type": "partitions", "max": 2},
        {"name": "cleanup", "type": "config", "config": "cleanup.policy", "allowed": ["delete"]},
        {"name": "explicit-retention", "type": "required.configs", "configs": ["retention.ms"]},
    ]
}
OVERSIZED = ";".join(f"header:h{i:04d}" for i in range(500))
"""A well-formed value of 6 KB: 500 header rules, more than the gateway stores (4 KiB)."""


# --- requests and what the broker and the state store hold ------------------------------------


def create_request(
    name: str, *, configs: tuple[tuple[str, str | None], ...] = (RETENTION,), **fields: Any
) -> CreateTopicsRequest:
    """One topic's CreateTopics, with a retention config unless ``configs`` says otherwise."""
    return create_topic_request(name, configs=configs, **fields)


def create(bootstrap: str, request: CreateTopicsRequest) -> tuple[int, str | None]:
    client = RawClient(bootstrap)
    try:
        (result,) = client.request(CREATE_TOPICS, 7, request).topics
    finally:
        client.close()
    return int(result.error_code), result.error_message


def alter(bootstrap: str, topic: str, ops: list[tuple[str, int, str | None]]) -> tuple[int, Any]:
    """IncrementalAlterConfigs v1 of one topic: (error code, message)."""
    module = importlib.import_module("kio.schema.incremental_alter_configs.v1.request")
    request = module.IncrementalAlterConfigsRequest(
        resources=(
            module.AlterConfigsResource(
                resource_type=i8(TOPIC),
                resource_name=topic,
                configs=tuple(
                    module.AlterableConfig(name=k, config_operation=i8(o), value=v)
                    for k, o, v in ops
                ),
            ),
        ),
        validate_only=False,
    )
    client = RawClient(bootstrap)
    try:
        (result,) = client.request(INCREMENTAL, 1, request).responses
    finally:
        client.close()
    return int(result.error_code), result.error_message or None


def legacy_alter(bootstrap: str, topic: str, configs: dict[str, str]) -> tuple[int, Any]:
    client = RawClient(bootstrap)
    try:
        request = legacy_alter_configs_request(1, [(TOPIC, topic, configs)])
        (result,) = client.request(LEGACY, 1, request).responses
    finally:
        client.close()
    return int(result.error_code), result.error_message or None


def is_authorization_ask(request: Any) -> bool:
    """The gateway's own ask: validate_only, no entries; it changes nothing."""
    return bool(request.validate_only) and all(not r.configs for r in request.resources)


def changes_reaching(requests: list[Any]) -> list[Any]:
    """The config changes among ``requests`` (decoded 33/44 requests), asks left out."""
    return [r for r in requests if not is_authorization_ask(r)]


def stored_row(gw: GatewayThread, topic: str) -> tuple[str, float] | None:
    """The topic's policy as the SQLite state file holds it: (value, updated_at)."""
    with sqlite3.connect(gw.config.state.path) as db:
        row = db.execute(
            "SELECT value, updated_at FROM gateway_state WHERE namespace = ? AND key = ?",
            (STATE_NAMESPACE, topic),
        ).fetchone()
    return None if row is None else (row[0], row[1])


@pytest.fixture
def start(tap: BrokerTap) -> Iterator[Callable[..., GatewayThread]]:
    """Start a gateway in front of the tapped broker, with ``RULES`` (stopped after the test)."""
    started: list[GatewayThread] = []

    def run(**upstream: Any) -> GatewayThread:
        config = gateway_config(tap.address, policies=RULES, upstream=upstream)
        started.append(GatewayThread(config).start())
        return started[-1]

    try:
        yield run
    finally:
        for gw in started:
            gw.stop()


# --- CreateTopics against the real broker -----------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Create:
    """One CreateTopics route: the topic's fields, and the answer that closes it."""

    id: str
    code: int
    message: str
    """The whole message, or (``partial``) a part of it."""
    partial: bool = False
    fields: dict[str, Any] = field(default_factory=dict)
    upstream: dict[str, Any] = field(default_factory=dict)


def assigned(*assignments: tuple[int, tuple[int, ...]]) -> dict[str, Any]:
    """The fields of a topic with manual assignments and counts of -1."""
    return {"partitions": -1, "replication_factor": -1, "assignments": assignments}


CREATE_CASES = [
    # Item 5: a value that fails every produce, refused when it is set.
    Create(
        id="policy-max-bytes-0",
        code=40,
        message="Invalid value max-bytes:0 for configuration record.validation.policy: rule "
        "'max-bytes:0' needs a whole number of bytes from 1 to 2147483647",
        fields={"configs": (RETENTION, (KEY, "max-bytes:0"))},
    ),
    Create(
        id="policy-unknown-rule",
        code=40,
        message="unknown rule 'jsn-schema'",
        partial=True,
        fields={"configs": (RETENTION, (KEY, "jsn-schema:orders"))},
    ),
    # Item 9: a value too large to store: the topic is not created.
    Create(
        id="policy-oversized",
        code=40,
        message=f"Invalid value of {len(OVERSIZED)} bytes for configuration "
        "record.validation.policy: the gateway stores at most 4096 bytes",
        fields={"configs": (RETENTION, (KEY, OVERSIZED))},
    ),
    # Item 8: -1 with the broker's default unknown (Tansu reports none; nothing stated) was
    # judged as 1 and created as 3, past max 2.
    Create(
        id="default-partitions-unknown",
        code=44,
        message="leaves num.partitions to the broker's default (-1), which the gateway cannot read",
        partial=True,
        fields={"partitions": -1},
        upstream={"broker_defaults": {}},
    ),
    # Item 8: counts and assignments together were judged by the assignments (1 partition);
    # the test broker creates the count (40).
    Create(
        id="count-with-assignments",
        code=42,
        message="A manual partition assignment was specified, but numPartitions was not set to -1.",
        fields={
            "partitions": 40,
            "replication_factor": -1,
            "assignments": ((0, (TANSU_NODE,)),),
        },
    ),
    Create(
        id="replication-factor-with-assignments",
        code=42,
        message="A manual partition assignment was specified, but replication factor was not "
        "set to -1.",
        fields={"partitions": -1, "assignments": ((0, (TANSU_NODE,)),)},
    ),
    # Item 8: a key given twice with a null last value passed required.configs on the first,
    # and the broker stored null.
    Create(
        id="null-after-a-value",
        code=40,
        message="Null value not supported for topic configs: retention.ms",
        fields={"configs": (RETENTION, ("retention.ms", None))},
    ),
    # A key given twice: the rule judged the last value, the test broker stores both.
    Create(
        id="key-twice",
        code=42,
        message="Error due to duplicate config keys",
        fields={
            "configs": (RETENTION, ("cleanup.policy", "compact"), ("cleanup.policy", "delete"))
        },
    ),
    # A count Kafka refuses: a max rule passed it, the test broker made a topic of none.
    Create(
        id="zero-partitions",
        code=37,
        message="Number of partitions was set to an invalid non-positive value.",
        fields={"partitions": 0},
    ),
    # Assignments Kafka's controller refuses before its policy: the test broker ignores them
    # and created a topic, and the audit recorded a spec no Kafka would create (a partition
    # given twice was merged into one).
    Create(
        id="partition-assigned-twice",
        code=39,
        message="Found multiple manual partition assignments for partition 0",
        fields=assigned((0, (TANSU_NODE,)), (0, (TANSU_NODE,))),
    ),
    Create(
        id="assignment-gap",
        code=39,
        message="partitions should be a consecutive 0-based integer sequence",
        fields=assigned((0, (TANSU_NODE,)), (2, (TANSU_NODE,))),
    ),
    Create(
        id="broker-twice-in-a-partition",
        code=39,
        message=f"The manual partition assignment includes the broker {TANSU_NODE} more than once.",
        fields=assigned((0, (TANSU_NODE, TANSU_NODE))),
    ),
]


@pytest.mark.parametrize("case", CREATE_CASES, ids=[c.id for c in CREATE_CASES])
def test_a_refused_create_reaches_no_broker_and_stores_nothing(
    start: Callable[..., GatewayThread], tap: BrokerTap, case: Create
) -> None:
    gw = start(**case.upstream)
    topic = unique_name(f"ts-{case.id}")
    tap.requests.clear()

    code, message = create(gw.bootstrap, create_request(topic, **case.fields))

    assert code == case.code, message
    assert message is not None
    assert case.message in message if case.partial else message == case.message
    assert tap.forwarded(CREATE_TOPICS) == []
    assert topic not in existing_topics(str(tap.broker))
    assert gw.gateway.state.get(STATE_NAMESPACE, topic) is None


def test_the_stated_default_is_what_the_broker_creates(
    start: Callable[..., GatewayThread], tap: BrokerTap
) -> None:
    """The other side of ``default-partitions-unknown``: with the test broker's defaults
    stated (3 partitions), -1 is judged as 3 and denied by max 2, where it was judged as 1."""
    gw = start()
    topic = unique_name("ts-default")
    code, message = create(gw.bootstrap, create_request(topic, partitions=-1))
    assert (code, message) == (
        44,
        noted(f"topic {topic}: 3 partitions is above the maximum of 2 (rule partition-count)"),
    )
    assert tap.forwarded(CREATE_TOPICS) == []


@pytest.mark.parametrize(
    "assignments",
    [
        ((0, (TANSU_NODE,)),),
        ((0, (TANSU_NODE,)), (1, (TANSU_NODE,))),
    ],
    # A partition given several times is refused before any policy, as Kafka refuses it
    # (test_a_refused_create_reaches_no_broker_and_stores_nothing[partition-assigned-twice]).
    ids=["one-partition", "two-partitions"],
)
def test_assignments_the_broker_ignores_are_judged_as_what_it_creates(
    start: Callable[..., GatewayThread],
    tap: BrokerTap,
    assignments: tuple[tuple[int, tuple[int, ...]], ...],
) -> None:
    """Counts of -1 with manual assignments were judged by the assignments (1 or 2 partitions,
    within max 2), but the test broker ignores assignments and creates its defaults: 3
    partitions, past the rule. Judged as what the broker creates, the topic is refused."""
    gw = start()
    topic = unique_name("ts-assigned")
    tap.requests.clear()

    code, message = create(
        gw.bootstrap,
        create_request(topic, partitions=-1, replication_factor=-1, assignments=assignments),
    )

    assert topic not in existing_topics(str(tap.broker))
    assert (code, message) == (
        44,
        noted(f"topic {topic}: 3 partitions is above the maximum of 2 (rule partition-count)"),
    )
    assert tap.forwarded(CREATE_TOPICS) == []


def test_create_of_an_existing_topic_never_replaces_its_policy(
    start: Callable[..., GatewayThread], tap: BrokerTap
) -> None:
    """Item 5 through CreateTopics: naming another team's topic with a new policy stored it
    until the broker answered TOPIC_ALREADY_EXISTS (then put the old one back)."""
    gw = start()
    topic = unique_name("ts-team")
    assert (
        create(gw.bootstrap, create_request(topic, configs=(RETENTION, (KEY, TEAM_POLICY))))[0] == 0
    )
    before = stored_row(gw, topic)
    assert before is not None and before[0] == TEAM_POLICY
    tap.requests.clear()

    answer = create(gw.bootstrap, create_request(topic, configs=(RETENTION, (KEY, "max-bytes:1"))))

    assert tap.forwarded(CREATE_TOPICS) == []
    assert stored_row(gw, topic) == before  # never rewritten, not even for a moment
    assert answer == (36, f"Topic '{topic}' already exists.")


# --- IncrementalAlterConfigs against the real broker -----------------------------------------

ALTER_CASES = [
    pytest.param(
        "max-bytes:0",
        "Invalid value max-bytes:0 for configuration record.validation.policy: rule "
        "'max-bytes:0' needs a whole number of bytes from 1 to 2147483647",
        id="max-bytes-0",
    ),
    pytest.param(
        "key-required;key-required",
        "Invalid value key-required;key-required for configuration record.validation.policy: "
        "rule key-required is given more than once",
        id="rule-twice",
    ),
    pytest.param(
        OVERSIZED,
        f"Invalid value of {len(OVERSIZED)} bytes for configuration record.validation.policy: "
        "the gateway stores at most 4096 bytes",
        id="oversized",
    ),
]


@pytest.mark.parametrize(("value", "message"), ALTER_CASES)
def test_a_bad_policy_value_is_refused_and_the_old_one_kept(
    start: Callable[..., GatewayThread], tap: BrokerTap, value: str, message: str
) -> None:
    gw = start()
    topic = unique_name("ts-alter")
    created = create(gw.bootstrap, create_request(topic, configs=(RETENTION, (KEY, TEAM_POLICY))))
    assert created[0] == 0
    tap.requests.clear()

    assert alter(gw.bootstrap, topic, [(KEY, SET, value)]) == (40, message)
    assert gw.gateway.state.get(STATE_NAMESPACE, topic) == TEAM_POLICY
    assert changes_reaching(tap.forwarded(INCREMENTAL)) == []


# --- authorization: a scripted Kafka-like upstream ---------------------------------------------


class KafkaWithAcls:
    """A Kafka broker whose ACLs let the (anonymous) client describe topics and their configs
    but not alter them, and hide the topics in ``hidden`` from it altogether; it answers as
    Kafka's ControllerApis does: TOPIC_AUTHORIZATION_FAILED with no message for an
    IncrementalAlterConfigs it does not authorize, "Authorization failed." for a CreateTopics.

    Scripted because the test broker has no usable ACLs (and SASL cannot be turned on): it
    authorizes everything, so a refusal of the broker's cannot be shown against it.
    """

    def __init__(self, hidden: frozenset[str] = frozenset()) -> None:
        self.hidden = hidden

    async def respond(self, me: ScriptedBroker, header: Any, request: Any) -> Any:
        if header.api_key == 3:
            answer = metadata_response(me, ((t.name, [(1,)]) for t in request.topics or ()))
            denied = ErrorCode.topic_authorization_failed
            return dataclasses.replace(
                answer,
                topics=tuple(
                    dataclasses.replace(t, error_code=denied, partitions=())
                    if t.name in self.hidden
                    else t
                    for t in answer.topics
                ),
            )
        if header.api_key == 32:
            return describe_configs_response(
                describe_configs_result(r.resource_type, r.resource_name, ())
                for r in request.resources
            )
        if header.api_key in (LEGACY, INCREMENTAL):
            denied = ErrorCode.topic_authorization_failed
            return alter_configs_response(header, ((r, denied, None) for r in request.resources))
        if header.api_key == CREATE_TOPICS:
            return create_topics_response(header, request)
        raise AssertionError(f"unexpected API {header.api_key}")


def create_topics_response(header: Any, request: Any) -> Any:
    module = importlib.import_module(f"kio.schema.create_topics.v{header.api_version}.response")
    return module.CreateTopicsResponse(
        throttle_time=timedelta(0),
        topics=tuple(
            module.CreatableTopicResult(
                name=t.name,
                topic_id=None,
                error_code=ErrorCode.topic_authorization_failed,
                error_message="Authorization failed.",
                topic_config_error_code=i16(0),
                num_partitions=i32(-1),
                replication_factor=i16(-1),
                configs=(),
            )
            for t in request.topics
        ),
    )


def sent(upstream: ScriptedBroker, *api_keys: int) -> list[Any]:
    return [request for header, request in upstream.requests if header.api_key in api_keys]


CHANGES = [
    pytest.param(lambda b, t: alter(b, t, [(KEY, DELETE, None)]), id="delete"),
    pytest.param(lambda b, t: alter(b, t, [(KEY, SET, "max-bytes:1")]), id="set"),
    pytest.param(lambda b, t: legacy_alter(b, t, {}), id="legacy-implicit-delete"),
]


@pytest.mark.parametrize("change", CHANGES)
def test_a_client_the_broker_does_not_authorize_changes_no_policy(
    scripted_cluster: ScriptedCluster, change: Callable[[str, str], tuple[int, Any]]
) -> None:
    """Item 5: an anonymous client deleted another team's policy, or set one that fails every
    produce; the change never reached the broker, so the broker never authorized it."""
    upstream = scripted_cluster.add(KafkaWithAcls().respond, "acls")
    assert upstream.address is not None
    gw = GatewayThread(gateway_config(upstream.address, upstream=KAFKA_LIKE_UPSTREAM)).start()
    try:
        topic = unique_name("ts-acl")
        gw.run(gw.gateway.state.put(STATE_NAMESPACE, topic, TEAM_POLICY))

        assert change(gw.bootstrap, topic) == (29, None)  # TOPIC_AUTHORIZATION_FAILED, as Kafka

        assert gw.gateway.state.get(STATE_NAMESPACE, topic) == TEAM_POLICY
        asked = sent(upstream, LEGACY, INCREMENTAL)
        assert asked and changes_reaching(asked) == []
    finally:
        gw.stop()


def test_a_create_the_gateway_cannot_see_is_new_stores_no_policy(
    scripted_cluster: ScriptedCluster,
) -> None:
    """Item 5 through CreateTopics: a client that may not describe a topic (Metadata answers
    TOPIC_AUTHORIZATION_FAILED, existing or not) had its policy stored until the broker
    refused the create."""
    topic = unique_name("ts-hidden")
    upstream = scripted_cluster.add(KafkaWithAcls(hidden=frozenset({topic})).respond, "acls")
    assert upstream.address is not None
    gw = GatewayThread(gateway_config(upstream.address, upstream=KAFKA_LIKE_UPSTREAM)).start()
    try:
        gw.run(gw.gateway.state.put(STATE_NAMESPACE, topic, TEAM_POLICY))
        before = stored_row(gw, topic)

        code, message = create(
            gw.bootstrap, create_request(topic, configs=(RETENTION, (KEY, "max-bytes:1")))
        )

        assert sent(upstream, CREATE_TOPICS) == []
        assert stored_row(gw, topic) == before
        assert code == 29
        assert message is not None and "Metadata answered TOPIC_AUTHORIZATION_FAILED" in message
    finally:
        gw.stop()
