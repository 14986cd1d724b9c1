"""Equivalence: a request the policies allow gets the same answer through the gateway as
straight from the broker, for every judged API in every version the gateway takes.

Each case sends one request twice, straight to the test broker and through the gateway in
front of it, each path with topics of its own (creating, deleting and producing change
state). Both answers are decoded and normalised, then compared whole: topic names become
placeholders (inside messages too), throttle times and topic ids are blanked. Where a case
changes state, what the broker then reports about each path's topics (Metadata, configs, the
records of partition 0) is compared as well, so a gateway that answered "done" without
forwarding would fail. Each case also states the error codes the broker's own answer holds,
so a table of requests the broker refuses cannot pass by accident.

What the test broker (Tansu 0.6.0, TEST_BROKER.md) cannot show, and what is done instead:

- AlterConfigs (33) v0-v2 and CreatePartitions (37) v0-v3: Tansu lacks both and closes the
  connection on either. The gateway does not advertise them in front of it; a client that
  sends one anyway has it judged, forwarded as sent (a tap shows it) and gets the same end,
  the connection closed with no answer: :func:`test_an_api_the_broker_lacks`. Answers of a
  broker that has them are covered with a scripted upstream in test_alter_configs.py and
  test_delete_and_partitions.py, not here.
- CreateTopics v0 and v1: kio has no schema for them, the gateway sends them to the broker
  as v2. Tansu takes v0 and v1 itself, so they are compared like every other version: the
  request is v2's bytes less what v0/v1 lack, the answers are read by a small decoder here.
- DescribeConfigs v0: the gateway takes v1-v4 only (kio has no v0) and advertises no more,
  so there is no gateway answer to compare.
- validate_only: Tansu applies a validate_only CreateTopics or IncrementalAlterConfigs, so
  the gateway (``upstream.ignores_validate_only``) answers dry runs itself; comparing them
  would compare a dry run with a real change. Every request here has validate_only false.
- Produce to a topic with ``record.validation.policy``: the policy lives in the gateway, so
  only the gateway's topic has it; the broker's answer for the same records to a plain topic
  is the reference.
- DeleteTopics v6 naming a topic id the cluster does not know: the gateway answers
  UNKNOWN_TOPIC_ID, as Kafka does; Tansu answers UNKNOWN_TOPIC_OR_PARTITION. Left out.
- DescribeConfigs naming keys: Tansu closes the connection on a non-empty
  ``configuration_keys``, so the cases ask for every key (a null list and an empty one).
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import io
import struct
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta

from gateway.config import HostPort
from protocol.codec import encode_request
from protocol.versions import DECODABLE
from tests.batches import batch_with, record
from tests.support import (
    BrokerTap,
    GatewayThread,
    RawClient,
    fetch_request,
    gateway_config,
    legacy_alter_configs_request,
    unique_name,
)

pytestmark = pytest.mark.inproc

PRODUCE, METADATA, API_VERSIONS, CREATE_TOPICS, DELETE_TOPICS = 0, 3, 18, 19, 20
DESCRIBE_CONFIGS, ALTER_CONFIGS, CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS = 32, 33, 37, 44
FETCH = 1
TOPIC_RESOURCE = 2
SET, DELETE = 0, 1
NONE, TOPIC_ALREADY_EXISTS, UNKNOWN_TOPIC_OR_PARTITION = 0, 36, 3
TIMEOUT = i32Timedelta.parse(timedelta(seconds=10))
POLICY_KEY = "record.validation.policy"
NO_TOPIC_ID = uuid.UUID(int=0)
CREATED_CONFIGS = {"cleanup.policy": "compact", "retention.ms": "3600000"}

Path = Literal["direct", "gateway"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Topics:
    """One path's topics: their names, and the ids the broker gave those that exist."""

    names: tuple[str, ...]
    ids: tuple[uuid.UUID | None, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Paths:
    broker: HostPort
    gateway: GatewayThread


Build = Callable[[int, Topics], Any]
Prepare = Callable[[Paths, Path, tuple[str, ...]], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """One allowed request: ``build(version, topics)`` makes it for a path's two topics
    after ``prepare`` made them. ``shared``: it changes nothing, so both paths use the same
    topics. ``error_codes``: every error code the broker's own answer holds."""

    api: str
    api_key: int
    version: int
    variant: str
    build: Build
    prepare: Prepare
    shared: bool = False
    error_codes: frozenset[int] = frozenset({NONE})

    @property
    def id(self) -> str:
        return f"{self.api}-v{self.version}-{self.variant}"


def request_module(api: str, version: int) -> Any:
    return importlib.import_module(f"kio.schema.{api}.v{version}.request")


# --- preparing each path's topics ----------------------------------------------------------------


def create_topics_at(address: str, names: Sequence[str], configs: dict[str, str]) -> None:
    """Creates ``names`` (one partition each) through ``address`` (CreateTopics v7) and
    checks each was created."""
    m = request_module("create_topics", 7)
    request = m.CreateTopicsRequest(
        topics=tuple(
            m.CreatableTopic(
                name=TopicName(name),
                num_partitions=i32(1),
                replication_factor=i16(1),
                assignments=(),
                configs=tuple(m.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()),
            )
            for name in names
        ),
        timeout=TIMEOUT,
        validate_only=False,
    )
    client = RawClient(address)
    try:
        answer = client.request(CREATE_TOPICS, 7, request)
    finally:
        client.close()
    assert [(t.name, t.error_code, t.error_message) for t in answer.topics] == [
        (name, NONE, None) for name in names
    ]


def nothing(paths: Paths, path: Path, names: tuple[str, ...]) -> None:
    pass


def at_broker(**configs: str) -> Prepare:
    """Each path's topics created straight at the broker (one partition), with ``configs``."""

    def prepare(paths: Paths, path: Path, names: tuple[str, ...]) -> None:
        create_topics_at(str(paths.broker), names, configs)

    return prepare


def validated(policy: str) -> Prepare:
    """The gateway's topics created through it with ``record.validation.policy`` (and shown
    with it when described through it); the broker's topics plain, as the broker has no
    such config."""

    def prepare(paths: Paths, path: Path, names: tuple[str, ...]) -> None:
        if path == "direct":
            create_topics_at(str(paths.broker), names, {})
            return
        create_topics_at(paths.gateway.bootstrap, names, {POLICY_KEY: policy})
        described = described_configs(paths.gateway.bootstrap, names)
        assert [configs.get(POLICY_KEY) for configs in described] == [policy] * len(names)

    return prepare


# --- the requests ------------------------------------------------------------------------------


def create_topics(version: int, topics: Topics) -> Any:
    """Two topics: two partitions and a retention, one partition and compaction. v0 and v1
    are built as v2, which has their layout (:func:`legacy_create_topics`)."""
    m = request_module("create_topics", max(version, 2))
    shapes = [(2, {"retention.ms": "3600000"}), (1, {"cleanup.policy": "compact"})]
    return m.CreateTopicsRequest(
        topics=tuple(
            m.CreatableTopic(
                name=TopicName(name),
                num_partitions=i32(partitions),
                replication_factor=i16(1),
                assignments=(),
                configs=tuple(m.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()),
            )
            for name, (partitions, configs) in zip(topics.names, shapes, strict=True)
        ),
        timeout=TIMEOUT,
        validate_only=False,
    )


def delete_topics(version: int, topics: Topics) -> Any:
    m = request_module("delete_topics", version)
    if version < 6:
        return m.DeleteTopicsRequest(topic_names=tuple(topics.names), timeout=TIMEOUT)
    return m.DeleteTopicsRequest(
        topics=tuple(m.DeleteTopicState(name=TopicName(n), topic_id=None) for n in topics.names),
        timeout=TIMEOUT,
    )


def delete_topics_by_id(version: int, topics: Topics) -> Any:
    m = request_module("delete_topics", version)
    assert all(topics.ids), "the topics to delete by id must exist"
    return m.DeleteTopicsRequest(
        topics=tuple(m.DeleteTopicState(name=None, topic_id=i) for i in topics.ids),
        timeout=TIMEOUT,
    )


def create_with_defaults(version: int, topics: Topics) -> Any:
    """Partitions and replication factor left to the broker (-1, v4 and later)."""
    m = request_module("create_topics", version)
    return m.CreateTopicsRequest(
        topics=tuple(
            m.CreatableTopic(
                name=TopicName(name),
                num_partitions=i32(-1),
                replication_factor=i16(-1),
                assignments=(),
                configs=(),
            )
            for name in topics.names
        ),
        timeout=TIMEOUT,
        validate_only=False,
    )


def alter_incrementally(version: int, topics: Topics) -> Any:
    """Per topic: SET one config, DELETE another (both set when it was created)."""
    m = request_module("incremental_alter_configs", version)
    return m.IncrementalAlterConfigsRequest(
        resources=tuple(
            m.AlterConfigsResource(
                resource_type=i8(TOPIC_RESOURCE),
                resource_name=name,
                configs=(
                    m.AlterableConfig(
                        name="retention.ms", config_operation=i8(SET), value="7200000"
                    ),
                    m.AlterableConfig(
                        name="cleanup.policy", config_operation=i8(DELETE), value=None
                    ),
                ),
            )
            for name in topics.names
        ),
        validate_only=False,
    )


def describe_configs(version: int, topics: Topics) -> Any:
    """Both topics whole: the first with no key list (null), the second with an empty one,
    which Kafka reads as every key too. Tansu cannot read a list that names keys (it closes
    the connection), so no case names any."""
    m = request_module("describe_configs", version)
    keys: list[tuple[str, ...] | None] = [None, ()]
    fields: dict[str, Any] = {"include_synonyms": True}
    if version >= 3:
        fields["include_documentation"] = True
    return m.DescribeConfigsRequest(
        resources=tuple(
            m.DescribeConfigsResource(
                resource_type=i8(TOPIC_RESOURCE), resource_name=name, configuration_keys=k
            )
            for name, k in zip(topics.names, keys, strict=True)
        ),
        **fields,
    )


def produce(codec: str) -> Build:
    """Three records that pass every policy used here (a ``trace-id`` header, a key, a JSON
    value) to partition 0 of each topic, compressed with ``codec``, acks=all."""

    def build(version: int, topics: Topics) -> Any:
        m = request_module("produce", version)
        records = tuple(
            record(i, f"k{i}".encode(), b'{"n": %d}' % i, ((b"trace-id", b"t%d" % i),))
            for i in range(3)
        )
        batch = batch_with(codec, records, idempotent=False)
        return m.ProduceRequest(
            transactional_id=None,
            acks=i16(-1),
            timeout=TIMEOUT,
            topic_data=tuple(
                m.TopicProduceData(
                    name=TopicName(name),
                    partition_data=(m.PartitionProduceData(index=i32(0), records=batch),),
                )
                for name in topics.names
            ),
        )

    return build


def alter_configs(version: int, name: str) -> Any:
    return legacy_alter_configs_request(version, [(TOPIC_RESOURCE, name, {"retention.ms": "5"})])


def create_partitions(version: int, name: str) -> Any:
    m = request_module("create_partitions", version)
    return m.CreatePartitionsRequest(
        topics=(m.CreatePartitionsTopic(name=TopicName(name), count=i32(3), assignments=None),),
        timeout=TIMEOUT,
        validate_only=False,
    )


# --- the table ---------------------------------------------------------------------------------

API_KEYS = {
    "Produce": PRODUCE,
    "CreateTopics": CREATE_TOPICS,
    "DeleteTopics": DELETE_TOPICS,
    "DescribeConfigs": DESCRIBE_CONFIGS,
    "IncrementalAlterConfigs": INCREMENTAL_ALTER_CONFIGS,
}
READ_ONLY = {"DescribeConfigs"}
"""APIs that change nothing: both paths ask about the same topics."""

OK = frozenset({NONE})
EXISTS = frozenset({TOPIC_ALREADY_EXISTS})
MISSING = frozenset({UNKNOWN_TOPIC_OR_PARTITION})
existing = at_broker()
configured = at_broker(**CREATED_CONFIGS)
FULL_POLICY = "header:trace-id;key-required;json"

# Produce: no policy; header rules alone (the header scan); value rules alone (the value
# check); both and the key (the full reader). Each with its own codec.
# IncrementalAlterConfigs of a missing topic: Tansu answers NONE (Kafka would not).
# fmt: off
TABLE: list[tuple[str, range, str, Build, Prepare, frozenset[int]]] = [
    # API, versions, variant, request, topics before, error codes the broker answers with
    ("CreateTopics", range(0, 8), "new", create_topics, nothing, OK),
    ("CreateTopics", range(0, 8), "existing", create_topics, existing, EXISTS),
    ("CreateTopics", range(4, 8), "defaults", create_with_defaults, nothing, OK),
    ("DeleteTopics", range(1, 7), "by-name", delete_topics, existing, OK),
    ("DeleteTopics", range(1, 7), "missing", delete_topics, nothing, MISSING),
    ("DeleteTopics", range(6, 7), "by-id", delete_topics_by_id, existing, OK),
    ("IncrementalAlterConfigs", range(0, 2), "set-delete", alter_incrementally, configured, OK),
    ("IncrementalAlterConfigs", range(0, 2), "missing", alter_incrementally, nothing, OK),
    ("Produce", range(3, 10), "no-policy", produce("none"), existing, OK),
    ("Produce", range(3, 10), "header-policy", produce("none"), validated("trace-id"), OK),
    ("Produce", range(3, 10), "value-policy", produce("lz4"), validated("json"), OK),
    ("Produce", range(3, 10), "full-policy", produce("zstd"), validated(FULL_POLICY), OK),
    ("DescribeConfigs", range(1, 5), "topics", describe_configs, configured, OK),
]
# fmt: on

KNOWN_DIFFERENCES = {
    f"DeleteTopics-v{v}-missing": (
        "the gateway answers a topic Metadata does not find itself, with the message "
        "\"The topic '<name>' does not exist.\"; the broker (Tansu, and Kafka: the default "
        'message of UNKNOWN_TOPIC_OR_PARTITION) says "This server does not host this '
        'topic-partition." Same error code; v5 and later carry the message.'
    )
    for v in (5, 6)
}
"""Cases where the gateway's answer differs today: case id -> why. Strict, so the case
fails once the difference is gone and the entry can go."""

CASES = [
    Case(
        api=api,
        api_key=API_KEYS[api],
        version=version,
        variant=variant,
        build=build,
        prepare=prepare,
        shared=api in READ_ONLY,
        error_codes=codes,
    )
    for api, versions, variant, build, prepare, codes in TABLE
    for version in versions
]

LACKING = [(ALTER_CONFIGS, v) for v in range(0, 3)] + [(CREATE_PARTITIONS, v) for v in range(0, 4)]
"""The judged APIs the test broker lacks, in each version the gateway takes."""


# --- asking and normalising --------------------------------------------------------------------


def plain(value: Any, names: Sequence[str]) -> Any:
    """``value`` (a kio entity, or what :func:`read_legacy_create_topics` returns) as dicts
    and tuples, with what differs between the two paths by design made equal: each of
    ``names`` becomes ``<topic-N>`` wherever it appears, throttle times and topic ids are
    blanked (a zero id, meaning none, is kept)."""
    if isinstance(value, dict):
        return {k: plain(v, names) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if f.name == "throttle_time":
                fields[f.name] = "<throttle>"
            elif f.name == "topic_id" and item not in (None, NO_TOPIC_ID):
                fields[f.name] = "<topic-id>"
            else:
                fields[f.name] = plain(item, names)
        return fields
    if isinstance(value, tuple | list):
        return tuple(plain(v, names) for v in value)
    if isinstance(value, enum.Enum):
        return value
    if isinstance(value, str):
        for index, name in sorted(enumerate(names), key=lambda p: -len(p[1])):
            value = value.replace(name, f"<topic-{index}>")
        return value
    return value


def flat(tree: Any, path: str = "") -> list[str]:
    """A :func:`plain` tree as ``path = value`` lines, for comparisons whose failures show
    the fields that differ."""
    if isinstance(tree, dict):
        return [line for k, v in tree.items() for line in flat(v, f"{path}.{k}" if path else k)]
    if isinstance(tree, tuple) and tree:
        return [line for i, v in enumerate(tree) for line in flat(v, f"{path}[{i}]")]
    return [f"{path} = {tree!r}"]


def error_codes(tree: Any) -> set[int]:
    """Every ``error_code`` in a :func:`plain` tree."""
    if isinstance(tree, dict):
        found = {int(v) for k, v in tree.items() if k == "error_code"}
        return found.union(*(error_codes(v) for v in tree.values()))
    if isinstance(tree, tuple):
        return set().union(*(error_codes(v) for v in tree))
    return set()


def legacy_create_topics(client: RawClient, version: int, payload: Any) -> dict[str, Any]:
    """CreateTopics v0 or v1, which kio lacks: v2's request less what they lack (v1 has v2's
    layout; v0 has no validate_only), and the answer read here."""
    correlation_id = 7
    frame = encode_request(CREATE_TOPICS, 2, correlation_id, "raw-test", payload)[4:]
    frame = frame[:2] + struct.pack(">h", version) + frame[4:]
    if version == 0:
        assert frame[-1:] == b"\x00"
        frame = frame[:-1]
    client.send_bytes(struct.pack(">i", len(frame)) + frame)
    return read_legacy_create_topics(version, client.recv_frame(), correlation_id)


def read_legacy_create_topics(version: int, frame: bytes, correlation_id: int) -> dict[str, Any]:
    """A CreateTopics v0/v1 answer: per topic the name, error code and (v1) error message."""
    body = io.BytesIO(frame)

    def take(fmt: str) -> Any:
        return struct.unpack(fmt, body.read(struct.calcsize(fmt)))[0]

    def string() -> str | None:
        size = take(">h")
        return None if size < 0 else body.read(size).decode()

    assert take(">i") == correlation_id
    topics = []
    for _ in range(take(">i")):
        topic: dict[str, Any] = {"name": string(), "error_code": take(">h")}
        if version == 1:
            topic["error_message"] = string()
        topics.append(topic)
    assert body.read() == b"", "trailing bytes after the answer"
    return {"topics": tuple(topics)}


def ask(address: str, case: Case, topics: Topics) -> Any:
    """``case``'s request for ``topics`` through ``address``; the answer, :func:`plain`."""
    client = RawClient(address)
    try:
        request = case.build(case.version, topics)
        if case.api_key == CREATE_TOPICS and case.version < 2:
            answer = legacy_create_topics(client, case.version, request)
        else:
            answer = client.request(case.api_key, case.version, request)
    finally:
        client.close()
    return plain(answer, topics.names)


def metadata(broker: HostPort, names: Sequence[str]) -> Any:
    client = RawClient(broker)
    try:
        return client.request(
            METADATA,
            12,
            MetadataRequest(
                topics=tuple(MetadataRequestTopic(topic_id=None, name=n) for n in names),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
        )
    finally:
        client.close()


def topics_of(broker: HostPort, names: tuple[str, ...]) -> Topics:
    found = {t.name: t.topic_id for t in metadata(broker, names).topics if t.error_code == NONE}
    return Topics(names=names, ids=tuple(found.get(n) for n in names))


def described_configs(address: str | HostPort, names: Sequence[str]) -> list[dict[str, str | None]]:
    """Each topic's configs as ``address`` describes them (DescribeConfigs v4, every key)."""
    m = request_module("describe_configs", 4)
    client = RawClient(address)
    try:
        answer = client.request(
            DESCRIBE_CONFIGS,
            4,
            m.DescribeConfigsRequest(
                resources=tuple(
                    m.DescribeConfigsResource(
                        resource_type=i8(TOPIC_RESOURCE), resource_name=n, configuration_keys=None
                    )
                    for n in names
                ),
            ),
        )
    finally:
        client.close()
    return [{c.name: c.value for c in r.configs} for r in answer.results]


def broker_view(broker: HostPort, names: tuple[str, ...]) -> Any:
    """What the broker reports about ``names``: Metadata, configs, and the records of
    partition 0 of those that exist; :func:`plain`."""
    topics = metadata(broker, names).topics
    existing = [t.name for t in topics if t.error_code == NONE]
    client = RawClient(broker)
    try:
        fetched = [
            # Tansu answers a Fetch with no wait at all with no topics, data or not.
            client.request(FETCH, 12, fetch_request(n, max_wait=timedelta(milliseconds=50)))
            for n in existing
        ]
    finally:
        client.close()
    view = {
        "metadata": sorted(topics, key=lambda t: names.index(t.name)),
        "configs": described_configs(broker, existing),
        "fetched from partition 0": [r.responses for r in fetched],
    }
    return plain(view, names)


# --- the tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            c,
            id=c.id,
            marks=[pytest.mark.xfail(strict=True, reason=KNOWN_DIFFERENCES[c.id])]
            if c.id in KNOWN_DIFFERENCES
            else [],
        )
        for c in CASES
    ],
)
def test_same_answer_through_the_gateway(
    broker: HostPort, gateway: GatewayThread, case: Case
) -> None:
    paths = Paths(broker=broker, gateway=gateway)
    direct_names = (unique_name("eq"), unique_name("eq"))
    through_names = direct_names if case.shared else (unique_name("eq"), unique_name("eq"))
    case.prepare(paths, "direct", direct_names)
    if not case.shared:
        case.prepare(paths, "gateway", through_names)

    direct = ask(str(broker), case, topics_of(broker, direct_names))
    through = ask(gateway.bootstrap, case, topics_of(broker, through_names))

    assert error_codes(direct) == case.error_codes, f"the broker's own answer: {direct}"
    assert flat(through) == flat(direct)
    if not case.shared:
        assert flat(broker_view(broker, through_names)) == flat(broker_view(broker, direct_names))


def test_the_table_holds_every_version_the_gateway_takes(gateway: GatewayThread) -> None:
    """The table's versions per API are those the gateway advertises in front of the test
    broker; for the APIs the broker lacks (so the gateway does not advertise them), those the
    gateway can read (kio's)."""
    client = RawClient(gateway.bootstrap)
    try:
        answer = client.request(
            API_VERSIONS,
            3,
            ApiVersionsRequest(client_software_name="equivalence", client_software_version="1"),
        )
    finally:
        client.close()
    judged = {c.api_key for c in CASES} | {key for key, _ in LACKING}
    advertised = {
        int(k.api_key): set(range(k.min_version, k.max_version + 1))
        for k in answer.api_keys
        if k.api_key in judged
    }
    lacking = {key for key, _ in LACKING}
    for key in lacking:
        assert key not in advertised
        decodable = DECODABLE[key]
        advertised[key] = set(range(decodable.min_version, decodable.max_version + 1))
    covered: dict[int, set[int]] = {}
    for c in CASES:
        covered.setdefault(c.api_key, set()).add(c.version)
    for key, version in LACKING:
        covered.setdefault(key, set()).add(version)
    assert covered == advertised


@pytest.fixture
def tapped_gateway(tap: BrokerTap) -> Iterator[GatewayThread]:
    gw = GatewayThread(gateway_config(tap.address)).start()
    try:
        yield gw
    finally:
        gw.stop()


def answer_or_close(address: str | HostPort, api_key: int, version: int, request: Any) -> bytes:
    """The answer frame, or b"" when the connection is closed without one."""
    client = RawClient(address)
    try:
        client.send(api_key, version, request)
        return client.recv_frame()
    except ConnectionError:
        return b""
    finally:
        client.close()


@pytest.mark.parametrize(
    ("api_key", "version"),
    LACKING,
    ids=[
        f"{'AlterConfigs' if k == ALTER_CONFIGS else 'CreatePartitions'}-v{v}" for k, v in LACKING
    ],
)
def test_an_api_the_broker_lacks(
    tap: BrokerTap, tapped_gateway: GatewayThread, api_key: int, version: int
) -> None:
    """AlterConfigs and CreatePartitions: the test broker closes the connection on either
    with no answer, so the gateway's answer can only be compared with that: the gateway
    forwards the allowed request as the client sent it, and the client sees the same end."""
    name = unique_name("eq")
    create_topics_at(str(tap.broker), [name], {})
    build = alter_configs if api_key == ALTER_CONFIGS else create_partitions
    request = build(version, name)

    assert answer_or_close(tap.broker, api_key, version, request) == b""
    assert answer_or_close(tapped_gateway.bootstrap, api_key, version, request) == b""
    assert tap.forwarded(api_key) == [request]
