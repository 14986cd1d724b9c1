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
  the connection closed with no answer: :func:`test_a_request_the_broker_never_answers`.
  Answers of a broker that has them are covered with a scripted upstream in
  test_alter_configs.py and test_delete_and_partitions.py, not here.
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
- OffsetForLeaderEpoch (23) v2-v4, DescribeProducers (61) v0, OffsetDelete (47) v0,
  ElectLeaders (43) v0-v2 and AlterPartitionReassignments (45) v0-v1: Tansu does not
  advertise them and closes the connection on each (its log: ``UnknownServiceFrame``), as
  on AlterConfigs: compared the same way, in :func:`test_a_request_the_broker_never_answers`.
  So is AlterClientQuotas (49) v0-v1, which Tansu lacks too.
  The unclean elections (v1, v2) and the reassignments are judged first (DescribeConfigs,
  Metadata on the client's link), so the tap shows the request forwarded after its judgement.
- AddPartitionsToTxn (24) v0-v3: for a transactional id never initialized, so that each
  path's answer is the broker's TRANSACTIONAL_ID_NOT_FOUND per partition (adding partitions
  for real needs a producer per path, whose ids differ); the refusal of the gateway's own
  topics is in tests/adversarial/test_transaction_routes.py.
- DeleteRecords (21) v0-v2: Tansu advertises it, but its memory storage panics on it
  ("not yet implemented", tansu-storage dynostore.rs) and the connection closes with no
  answer; the broker stays up. Compared the same way.
- Fetch v0-v3: kio has no schema for them; Tansu answers them (with magic 2 batches: it
  does not down-convert). The request is written and the answer read here, as for
  CreateTopics v0/v1. Fetch goes through two gateways: one with no topics of its own, where
  every Fetch passes unread, and one whose own (audit) topic's name begins every case
  topic's name, so that every Fetch's bytes name it and the gateway reads and judges the
  request (v4 and later; from v13, which names topics by id, a gateway's first Fetch is read
  to learn its own topics' ids). Fetch v0-v3 naming an own topic closes the connection
  (test_enforcements.py), so they go through the first gateway only.
- Produce v12 and v13, Fetch v18: Tansu takes Produce to v11 and Fetch to v17, so the gateway
  advertises no more in front of it. Produce v13 (topic ids) is judged through the tap and a
  scripted upstream instead (tests/adversarial/test_produce_by_topic_id.py,
  tests/inproc/test_leader_endpoints.py). Tansu sends no leader endpoints, so the answers
  compared here have none; their rewrite is shown with a scripted upstream
  (test_leader_endpoints.py).
- Metadata: brokers are named with the gateway's address through it, so ``host`` and
  ``port`` are blanked. Every version asks for existing topics with auto-creation off
  (v0-v3 have no such switch: they always allow it, so the gateway reissues them as v4 with
  it off and answers in the client's version).
- DeleteGroups of groups that do not exist: Tansu answers NONE (Kafka: GROUP_ID_NOT_FOUND);
  both paths get Tansu's answer, so the case stays.
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
from kio.schema.offset_commit.v8 import request as offset_commit
from kio.schema.offset_fetch.v8 import request as offset_fetch
from kio.schema.types import BrokerId, GroupId, ProducerId, TopicName, TransactionalId
from kio.static.primitive import f64, i8, i16, i32, i32Timedelta, i64

from gateway.config import HostPort
from gateway.handlers import version_caps
from gateway.handlers.coverage import COVERAGE
from protocol.codec import encode_request
from protocol.versions import API_NAMES
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
FETCH, LIST_OFFSETS, OFFSET_COMMIT, OFFSET_FETCH, DELETE_RECORDS = 1, 2, 8, 9, 21
CREATE_ACLS, DELETE_ACLS = 30, 31
OFFSET_FOR_LEADER_EPOCH, DELETE_GROUPS, ELECT_LEADERS = 23, 42, 43
ALTER_PARTITION_REASSIGNMENTS, OFFSET_DELETE, DESCRIBE_PRODUCERS = 45, 47, 61
ALTER_CLIENT_QUOTAS, ALTER_USER_SCRAM_CREDENTIALS = 49, 51
ADD_PARTITIONS_TO_TXN = 24
TOPIC_RESOURCE = 2
SET, DELETE = 0, 1
NONE, TOPIC_ALREADY_EXISTS, UNKNOWN_TOPIC_OR_PARTITION = 0, 36, 3
TRANSACTIONAL_ID_NOT_FOUND = 105
TIMEOUT = i32Timedelta.parse(timedelta(seconds=10))
POLICY_KEY = "record.validation.policy"
NO_TOPIC_ID = uuid.UUID(int=0)
CREATED_CONFIGS = {"cleanup.policy": "compact", "retention.ms": "3600000"}
OWN_TOPIC = "eq-audit"
"""The audit topic of the guarding gateway: every topic of a case through it is named
``eq-audit-...``, so every request's bytes name the gateway's own topic."""

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
    topics. ``error_codes``: every error code the broker's own answer holds. ``guarding``:
    through a gateway with an audit topic, :data:`OWN_TOPIC`, whose name begins the case's
    topic names."""

    api: str
    api_key: int
    version: int
    variant: str
    build: Build
    prepare: Prepare
    shared: bool = False
    error_codes: frozenset[int] = frozenset({NONE})
    guarding: bool = False

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


def produce_at(address: str, names: Sequence[str]) -> None:
    """Three records to partition 0 of each of ``names``, straight through ``address``."""
    client = RawClient(address)
    try:
        answer = client.request(PRODUCE, 9, produce("none")(9, Topics(names=tuple(names), ids=())))
    finally:
        client.close()
    codes = [int(p.error_code) for t in answer.responses for p in t.partition_responses]
    assert codes == [NONE] * len(names)


def with_records(paths: Paths, path: Path, names: tuple[str, ...]) -> None:
    """Each path's topics created at the broker with three records in partition 0."""
    create_topics_at(str(paths.broker), names, {})
    produce_at(str(paths.broker), names)


def group_of(topic: str) -> str:
    """The consumer group a case names after ``topic`` (so it is normalised with it)."""
    return f"{topic}-group"


def committed(paths: Paths, path: Path, names: tuple[str, ...]) -> None:
    """Each topic created at the broker, and its group's offset 1 of partition 0 committed
    there (a group with no members, as a tool that commits offsets makes one)."""
    create_topics_at(str(paths.broker), names, {})
    client = RawClient(paths.broker)
    try:
        for name in names:
            answer = client.request(
                OFFSET_COMMIT,
                8,
                offset_commit.OffsetCommitRequest(
                    group_id=GroupId(group_of(name)),
                    generation_id_or_member_epoch=i32(-1),
                    member_id="",
                    group_instance_id=None,
                    topics=(
                        offset_commit.OffsetCommitRequestTopic(
                            name=TopicName(name),
                            partitions=(
                                offset_commit.OffsetCommitRequestPartition(
                                    partition_index=i32(0),
                                    committed_offset=i64(1),
                                    committed_leader_epoch=i32(-1),
                                    committed_metadata=None,
                                ),
                            ),
                        ),
                    ),
                ),
            )
            assert [int(p.error_code) for t in answer.topics for p in t.partitions] == [NONE]
    finally:
        client.close()


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
    """v0 is built as v1, which has its layout (:func:`legacy_delete_topics`)."""
    m = request_module("delete_topics", max(version, 1))
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


def entity(cls: type, **values: Any) -> Any:
    """A kio entity of ``values``, less those its version does not have."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def list_offsets(timestamp: int) -> Build:
    """The offset of partition 0 of each topic at ``timestamp`` (-1 latest, -2 earliest)."""

    def build(version: int, topics: Topics) -> Any:
        m = request_module("list_offsets", version)
        return entity(
            m.ListOffsetsRequest,
            replica_id=BrokerId(-1),
            isolation_level=i8(0),
            timeout=TIMEOUT,
            topics=tuple(
                m.ListOffsetsTopic(
                    name=TopicName(name),
                    partitions=(
                        entity(
                            m.ListOffsetsPartition,
                            partition_index=i32(0),
                            current_leader_epoch=i32(-1),
                            timestamp=i64(timestamp),
                        ),
                    ),
                )
                for name in topics.names
            ),
        )

    return build


def fetch(version: int, topics: Topics) -> Any:
    """Partition 0 of each topic from offset 0, up to 1 MiB, waiting at most 50 ms (Tansu
    answers a Fetch with no wait at all with no topics); by topic id from v13. v0-v3 are
    built as v4, which has their fields (:func:`legacy_fetch`)."""
    m = request_module("fetch", max(version, 4))
    by_id = version >= 13
    if by_id:
        assert all(topics.ids), "the topics to fetch by id must exist"
    return entity(
        m.FetchRequest,
        replica_id=BrokerId(-1),
        max_wait=i32Timedelta.parse(timedelta(milliseconds=50)),
        min_bytes=i32(1),
        max_bytes=i32(1 << 20),
        isolation_level=i8(0),
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=tuple(
            m.FetchTopic(
                **({"topic_id": topic_id} if by_id else {"topic": TopicName(name)}),
                partitions=(
                    entity(
                        m.FetchPartition,
                        partition=i32(0),
                        current_leader_epoch=i32(-1),
                        fetch_offset=i64(0),
                        last_fetched_epoch=i32(-1),
                        log_start_offset=i64(-1),
                        partition_max_bytes=i32(1 << 20),
                    ),
                ),
            )
            for name, topic_id in zip(topics.names, topics.ids, strict=True)
        ),
        forgotten_topics_data=(),
        rack_id="",
    )


def delete_groups(version: int, topics: Topics) -> Any:
    m = request_module("delete_groups", version)
    return m.DeleteGroupsRequest(groups_names=tuple(GroupId(group_of(n)) for n in topics.names))


def metadata_of(version: int, topics: Topics) -> Any:
    """Metadata of both topics, auto-creation off (v4 and later; v0-v3 cannot say so)."""
    m = request_module("metadata", version)
    return entity(
        m.MetadataRequest,
        topics=tuple(
            entity(m.MetadataRequestTopic, name=TopicName(n), topic_id=None) for n in topics.names
        ),
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )


def alter_configs(version: int, name: str) -> Any:
    return legacy_alter_configs_request(version, [(TOPIC_RESOURCE, name, {"retention.ms": "5"})])


def partitions_to_txn(version: int, topics: Topics) -> Any:
    """Partition 0 of each of the path's topics for a transactional id never initialized (the
    broker answers TRANSACTIONAL_ID_NOT_FOUND for each: adding them would need a producer)."""
    m = request_module("add_partitions_to_txn", version)
    return m.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=TransactionalId(f"tx-{topics.names[0]}"),
        v3_and_below_producer_id=ProducerId(-1),
        v3_and_below_producer_epoch=i16(-1),
        v3_and_below_topics=tuple(
            m.AddPartitionsToTxnTopic(name=TopicName(name), partitions=(i32(0),))
            for name in topics.names
        ),
    )


def scram_credentials(version: int, topics: Topics) -> Any:
    """A SCRAM-SHA-256 password for a user named as each of the path's topics."""
    m = request_module("alter_user_scram_credentials", version)
    upsertions = tuple(
        m.ScramCredentialUpsertion(
            name=name,
            mechanism=i8(1),
            iterations=i32(4096),
            salt=b"salt",
            salted_password=b"p" * 32,
        )
        for name in topics.names
    )
    return m.AlterUserScramCredentialsRequest(deletions=(), upsertions=upsertions)


def client_quotas(version: int, name: str) -> Any:
    m = request_module("alter_client_quotas", version)
    entry = m.EntryData(
        entity=(m.EntityData(entity_type="user", entity_name=name),),
        ops=(m.OpData(key="producer_byte_rate", value=f64(1048576.0), remove=False),),
    )
    return m.AlterClientQuotasRequest(entries=(entry,), validate_only=False)


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
    "Fetch": FETCH,
    "ListOffsets": LIST_OFFSETS,
    "Metadata": METADATA,
    "CreateTopics": CREATE_TOPICS,
    "DeleteTopics": DELETE_TOPICS,
    "DescribeConfigs": DESCRIBE_CONFIGS,
    "DeleteGroups": DELETE_GROUPS,
    "IncrementalAlterConfigs": INCREMENTAL_ALTER_CONFIGS,
    "AlterUserScramCredentials": ALTER_USER_SCRAM_CREDENTIALS,
    "AddPartitionsToTxn": ADD_PARTITIONS_TO_TXN,
}
READ_ONLY = {"DescribeConfigs", "Fetch", "ListOffsets", "Metadata"}
"""APIs that change nothing: both paths ask about the same topics."""
GUARDING = {("Fetch", "read")}
"""(API, variant) of the cases that go through the gateway with an own topic."""

OK = frozenset({NONE})
EXISTS = frozenset({TOPIC_ALREADY_EXISTS})
MISSING = frozenset({UNKNOWN_TOPIC_OR_PARTITION})
NO_TXN = frozenset({TRANSACTIONAL_ID_NOT_FOUND})
existing = at_broker()
configured = at_broker(**CREATED_CONFIGS)
FULL_POLICY = "header:trace-id;key-required;json"

# Produce: no policy; header rules alone (the header scan); value rules alone (the value
# check); both and the key (the full reader). Each with its own codec.
# IncrementalAlterConfigs of a missing topic: Tansu answers NONE (Kafka would not).
# DeleteGroups of groups that do not exist: Tansu answers NONE (Kafka: GROUP_ID_NOT_FOUND).
# ListOffsets of a missing topic: Tansu answers NONE and offset 0 (Kafka:
# UNKNOWN_TOPIC_OR_PARTITION); the gateway must still ask the broker, not answer itself.
# fmt: off
TABLE: list[tuple[str, range, str, Build, Prepare, frozenset[int]]] = [
    # API, versions, variant, request, topics before, error codes the broker answers with
    ("CreateTopics", range(0, 8), "new", create_topics, nothing, OK),
    ("CreateTopics", range(0, 8), "existing", create_topics, existing, EXISTS),
    ("CreateTopics", range(4, 8), "defaults", create_with_defaults, nothing, OK),
    ("DeleteTopics", range(0, 7), "by-name", delete_topics, existing, OK),
    ("DeleteTopics", range(0, 7), "missing", delete_topics, nothing, MISSING),
    ("DeleteTopics", range(6, 7), "by-id", delete_topics_by_id, existing, OK),
    ("IncrementalAlterConfigs", range(0, 2), "set-delete", alter_incrementally, configured, OK),
    ("IncrementalAlterConfigs", range(0, 2), "missing", alter_incrementally, nothing, OK),
    ("Produce", range(3, 12), "no-policy", produce("none"), existing, OK),
    ("Produce", range(3, 12), "header-policy", produce("none"), validated("trace-id"), OK),
    ("Produce", range(3, 12), "value-policy", produce("lz4"), validated("json"), OK),
    ("Produce", range(3, 12), "full-policy", produce("zstd"), validated(FULL_POLICY), OK),
    ("DescribeConfigs", range(1, 5), "topics", describe_configs, configured, OK),
    ("Fetch", range(0, 18), "unread", fetch, with_records, OK),
    ("Fetch", range(4, 18), "read", fetch, with_records, OK),
    ("ListOffsets", range(1, 10), "latest", list_offsets(-1), with_records, OK),
    ("ListOffsets", range(1, 10), "earliest", list_offsets(-2), with_records, OK),
    ("ListOffsets", range(1, 10), "missing", list_offsets(-1), nothing, OK),
    ("Metadata", range(0, 13), "existing", metadata_of, existing, OK),
    ("DeleteGroups", range(0, 3), "with-offsets", delete_groups, committed, OK),
    ("DeleteGroups", range(0, 3), "missing", delete_groups, nothing, OK),
    ("AlterUserScramCredentials", range(0, 1), "upsert", scram_credentials, nothing, OK),
    ("AddPartitionsToTxn", range(0, 4), "unknown-txn", partitions_to_txn, existing, NO_TXN),
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
        guarding=(api, variant) in GUARDING,
    )
    for api, versions, variant, build, prepare, codes in TABLE
    for version in versions
]

BROKER_LACKS = frozenset(
    {
        ALTER_CONFIGS,
        CREATE_PARTITIONS,
        OFFSET_FOR_LEADER_EPOCH,
        DESCRIBE_PRODUCERS,
        OFFSET_DELETE,
        ELECT_LEADERS,
        ALTER_PARTITION_REASSIGNMENTS,
        ALTER_CLIENT_QUOTAS,
        DELETE_ACLS,
    }
)
"""The judged APIs the test broker does not advertise (it closes the connection on each)."""
NEVER_ANSWERED = BROKER_LACKS | {DELETE_RECORDS}
"""... and DeleteRecords, which it advertises but panics on."""


def taken(api_key: int) -> range:
    """The versions the gateway takes of ``api_key``."""
    caps = version_caps()[api_key]
    assert caps is not None
    return range(caps.min_version, caps.max_version + 1)


LACKING = [(key, version) for key in sorted(NEVER_ANSWERED) for version in taken(key)]
"""The judged APIs the test broker never answers, in each version the gateway takes."""

ANSWERED_CUT_SHORT = frozenset({CREATE_ACLS})
"""The judged APIs the test broker answers with a body cut short (Tansu keeps no ACLs): no
client can decode the answer, so it is compared byte for byte."""
BYTEWISE = [(key, version) for key in sorted(ANSWERED_CUT_SHORT) for version in taken(key)]


def acl_request(api_key: int, version: int, topic: str) -> Any:
    """A CreateAcls of one binding, or a DeleteAcls of one filter, on ``topic`` alone."""
    if api_key == CREATE_ACLS:
        m = importlib.import_module(f"kio.schema.create_acls.v{version}.request")
        creation = m.AclCreation(
            resource_type=i8(2),  # TOPIC
            resource_name=topic,
            resource_pattern_type=i8(3),  # LITERAL
            principal="User:eq",
            host="*",
            operation=i8(3),  # READ
            permission_type=i8(3),  # ALLOW
        )
        return m.CreateAclsRequest(creations=(creation,))
    m = importlib.import_module(f"kio.schema.delete_acls.v{version}.request")
    acl_filter = m.DeleteAclsFilter(
        resource_type_filter=i8(2),
        resource_name_filter=topic,
        pattern_type_filter=i8(3),
        principal_filter="User:eq",
        host_filter=None,
        operation=i8(1),  # ANY
        permission_type=i8(1),  # ANY
    )
    return m.DeleteAclsRequest(filters=(acl_filter,))


# --- asking and normalising --------------------------------------------------------------------


def plain(value: Any, names: Sequence[str]) -> Any:
    """``value`` (a kio entity, or what :func:`read_legacy_create_topics` returns) as dicts
    and tuples, with what differs between the two paths by design made equal: each of
    ``names`` becomes ``<topic-N>`` wherever it appears, throttle times and topic ids are
    blanked (a zero id, meaning none, is kept), and so are brokers' hosts and ports (the
    gateway names itself in their place)."""
    if isinstance(value, dict):
        return {k: plain(v, names) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: blanked(f.name, getattr(value, f.name), names)
            for f in dataclasses.fields(value)
        }
    if isinstance(value, tuple | list):
        return tuple(plain(v, names) for v in value)
    if isinstance(value, enum.Enum):
        return value
    if isinstance(value, str):
        for index, name in sorted(enumerate(names), key=lambda p: -len(p[1])):
            value = value.replace(name, f"<topic-{index}>")
        return value
    return value


def blanked(field: str, value: Any, names: Sequence[str]) -> Any:
    """A field of an entity, :func:`plain`, or its placeholder when it differs by design."""
    if field == "throttle_time":
        return "<throttle>"
    if field == "topic_id" and value not in (None, NO_TOPIC_ID):
        return "<topic-id>"
    if field in ("host", "port"):
        return f"<{field}>"
    return plain(value, names)


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
        found = {int(v) for k, v in tree.items() if k in ("error_code", "partition_error_code")}
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


def legacy_delete_topics(client: RawClient, payload: Any) -> dict[str, Any]:
    """DeleteTopics v0, which kio lacks: v1's request, and the answer read here (v1's
    without the throttle time: per topic the name and error code)."""
    correlation_id = 8
    frame = encode_request(DELETE_TOPICS, 1, correlation_id, "raw-test", payload)[4:]
    frame = frame[:2] + struct.pack(">h", 0) + frame[4:]
    client.send_bytes(struct.pack(">i", len(frame)) + frame)
    body = io.BytesIO(client.recv_frame())

    def take(fmt: str) -> Any:
        return struct.unpack(fmt, body.read(struct.calcsize(fmt)))[0]

    assert take(">i") == correlation_id
    topics = []
    for _ in range(take(">i")):
        name = body.read(take(">h")).decode()
        topics.append({"name": name, "error_code": take(">h")})
    assert body.read() == b"", "trailing bytes after the answer"
    return {"responses": tuple(topics)}


def legacy_fetch(client: RawClient, version: int, payload: Any) -> dict[str, Any]:
    """Fetch v0-v3, which kio lacks, from v4's fields: replica id, max wait, min bytes, (v3)
    max bytes, then per topic its name and per partition its index, offset and max bytes.
    The answer is read here: (v1 and later) throttle time, then per topic its name and per
    partition its index, error code, high watermark and records."""
    correlation_id = 9

    def string(value: str) -> bytes:
        return struct.pack(">h", len(value)) + value.encode()

    max_wait = int(payload.max_wait.total_seconds() * 1000)
    body = struct.pack(">iii", payload.replica_id, max_wait, payload.min_bytes)
    if version == 3:
        body += struct.pack(">i", payload.max_bytes)
    body += struct.pack(">i", len(payload.topics))
    for topic in payload.topics:
        body += string(topic.topic) + struct.pack(">i", len(topic.partitions))
        for p in topic.partitions:
            body += struct.pack(">iqi", p.partition, p.fetch_offset, p.partition_max_bytes)
    frame = struct.pack(">hhi", FETCH, version, correlation_id) + string("raw-test") + body
    client.send_bytes(struct.pack(">i", len(frame)) + frame)
    return read_legacy_fetch(version, client.recv_frame(), correlation_id)


def read_legacy_fetch(version: int, frame: bytes, correlation_id: int) -> dict[str, Any]:
    body = io.BytesIO(frame)

    def take(fmt: str) -> Any:
        return struct.unpack(fmt, body.read(struct.calcsize(fmt)))[0]

    def string() -> str:
        return body.read(take(">h")).decode()

    assert take(">i") == correlation_id
    answer: dict[str, Any] = {}
    if version >= 1:
        take(">i")
        answer["throttle_time"] = "<throttle>"
    topics = []
    for _ in range(take(">i")):
        name = string()
        partitions = []
        for _ in range(take(">i")):
            partition = {"partition_index": take(">i"), "error_code": take(">h")}
            partition["high_watermark"] = take(">q")
            size = take(">i")
            partition["records"] = None if size < 0 else body.read(size)
            partitions.append(partition)
        topics.append({"topic": name, "partitions": tuple(partitions)})
    answer["responses"] = tuple(topics)
    assert body.read() == b"", "trailing bytes after the answer"
    return answer


def ask(address: str, case: Case, topics: Topics) -> Any:
    """``case``'s request for ``topics`` through ``address``; the answer, :func:`plain`."""
    client = RawClient(address)
    try:
        request = case.build(case.version, topics)
        if case.api_key == CREATE_TOPICS and case.version < 2:
            answer = legacy_create_topics(client, case.version, request)
        elif case.api_key == DELETE_TOPICS and case.version == 0:
            answer = legacy_delete_topics(client, request)
        elif case.api_key == FETCH and case.version < 4:
            answer = legacy_fetch(client, case.version, request)
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
    """What the broker reports about ``names``: Metadata, configs, the records of partition 0
    of those that exist, and the offsets committed by the groups named after them
    (:func:`group_of`); :func:`plain`."""
    topics = metadata(broker, names).topics
    existing = [t.name for t in topics if t.error_code == NONE]
    client = RawClient(broker)
    try:
        fetched = [
            # Tansu answers a Fetch with no wait at all with no topics, data or not.
            client.request(FETCH, 12, fetch_request(n, max_wait=timedelta(milliseconds=50)))
            for n in existing
        ]
        offsets = client.request(
            OFFSET_FETCH,
            8,
            offset_fetch.OffsetFetchRequest(
                groups=tuple(
                    offset_fetch.OffsetFetchRequestGroup(group_id=GroupId(group_of(n)), topics=None)
                    for n in names
                ),
                require_stable=False,
            ),
        )
    finally:
        client.close()
    view = {
        "metadata": sorted(topics, key=lambda t: names.index(t.name)),
        "configs": described_configs(broker, existing),
        "fetched from partition 0": [r.responses for r in fetched],
        "committed offsets": offsets.groups,
    }
    return plain(view, names)


# --- the tests ---------------------------------------------------------------------------------


@pytest.fixture
def guarding_gateway(broker: HostPort) -> Iterator[GatewayThread]:
    """The real gateway with an audit topic, :data:`OWN_TOPIC`, on the session broker."""
    running = GatewayThread(gateway_config(broker, audit={"topic": OWN_TOPIC})).start()
    try:
        assert running.gateway.own_topics == {OWN_TOPIC}
        yield running
    finally:
        running.stop()


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
    broker: HostPort, request: pytest.FixtureRequest, case: Case
) -> None:
    gateway: GatewayThread = request.getfixturevalue(
        "guarding_gateway" if case.guarding else "gateway"
    )
    paths = Paths(broker=broker, gateway=gateway)
    prefix = OWN_TOPIC if case.guarding else "eq"
    direct_names = (unique_name(prefix), unique_name(prefix))
    through_names = direct_names if case.shared else (unique_name(prefix), unique_name(prefix))
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
    """Every API the gateway judges (its coverage table) is here, each in the versions the
    gateway advertises in front of the test broker; for the APIs the broker lacks (so the
    gateway does not advertise them), in those the gateway takes."""
    client = RawClient(gateway.bootstrap)
    try:
        answer = client.request(
            API_VERSIONS,
            3,
            ApiVersionsRequest(client_software_name="equivalence", client_software_version="1"),
        )
    finally:
        client.close()
    judged = {key for key, coverage in COVERAGE.items() if coverage.treatment == "judged"}
    assert {c.api_key for c in CASES} | {key for key, _ in LACKING + BYTEWISE} == judged
    advertised = {
        int(k.api_key): set(range(k.min_version, k.max_version + 1))
        for k in answer.api_keys
        if k.api_key in judged
    }
    for key in BROKER_LACKS:
        assert key not in advertised
        advertised[key] = set(taken(key))
    covered: dict[int, set[int]] = {}
    for c in CASES:
        covered.setdefault(c.api_key, set()).add(c.version)
    for key, version in LACKING + BYTEWISE:
        covered.setdefault(key, set()).add(version)
    assert covered == advertised


@pytest.mark.parametrize(
    ("api_key", "version"), BYTEWISE, ids=[f"{API_NAMES[k]}-v{v}" for k, v in BYTEWISE]
)
def test_an_allowed_request_the_broker_answers_cut_short(
    tap: BrokerTap, tapped_gateway: GatewayThread, api_key: int, version: int
) -> None:
    """An allowed ACL change goes to the broker as the client sent it, and its answer comes
    back byte for byte (the test broker's, cut short, is no worse through the gateway)."""
    request = acl_request(api_key, version, unique_name("eq"))
    direct = answer_or_close(tap.broker, api_key, version, request)
    assert direct  # an answer, however short
    assert answer_or_close(tapped_gateway.bootstrap, api_key, version, request) == direct
    assert tap.forwarded(api_key) == [request]


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


def delete_records(version: int, name: str) -> Any:
    m = request_module("delete_records", version)
    partition = m.DeleteRecordsPartition(partition_index=i32(0), offset=i64(0))
    return m.DeleteRecordsRequest(
        topics=(m.DeleteRecordsTopic(name=TopicName(name), partitions=(partition,)),),
        timeout=TIMEOUT,
    )


def offset_for_leader_epoch(version: int, name: str) -> Any:
    m = request_module("offset_for_leader_epoch", version)
    partition = m.OffsetForLeaderPartition(
        partition=i32(0), current_leader_epoch=i32(-1), leader_epoch=i32(0)
    )
    return entity(
        m.OffsetForLeaderEpochRequest,
        replica_id=BrokerId(-1),
        topics=(m.OffsetForLeaderTopic(topic=TopicName(name), partitions=(partition,)),),
    )


def describe_producers(version: int, name: str) -> Any:
    m = request_module("describe_producers", version)
    return m.DescribeProducersRequest(
        topics=(m.TopicRequest(name=TopicName(name), partition_indexes=(i32(0),)),)
    )


def offset_delete(version: int, name: str) -> Any:
    m = request_module("offset_delete", version)
    return m.OffsetDeleteRequest(
        group_id=GroupId(group_of(name)),
        topics=(
            m.OffsetDeleteRequestTopic(
                name=TopicName(name),
                partitions=(m.OffsetDeleteRequestPartition(partition_index=i32(0)),),
            ),
        ),
    )


def elect_leaders(version: int, name: str) -> Any:
    """v0 elects the preferred leader; v1 and later an unclean one, which is judged."""
    m = request_module("elect_leaders", version)
    return entity(
        m.ElectLeadersRequest,
        election_type=i8(1),
        topic_partitions=(m.TopicPartitions(topic=TopicName(name), partitions=(i32(0),)),),
        timeout=TIMEOUT,
    )


def alter_partition_reassignments(version: int, name: str) -> Any:
    m = request_module("alter_partition_reassignments", version)
    partition = m.ReassignablePartition(partition_index=i32(0), replicas=(BrokerId(1),))
    return m.AlterPartitionReassignmentsRequest(
        timeout=TIMEOUT,
        topics=(m.ReassignableTopic(name=TopicName(name), partitions=(partition,)),),
    )


JUDGED_WITH = {ELECT_LEADERS: DESCRIBE_CONFIGS, ALTER_PARTITION_REASSIGNMENTS: METADATA}
"""What the gateway asks the broker, on the client's link, to judge an unclean election (the
topic's configs) and a reassignment (the topic's replicas)."""

NEVER_ANSWERED_REQUESTS: dict[int, Callable[[int, str], Any]] = {
    ALTER_CONFIGS: alter_configs,
    CREATE_PARTITIONS: create_partitions,
    DELETE_RECORDS: delete_records,
    DELETE_ACLS: lambda version, name: acl_request(DELETE_ACLS, version, name),
    OFFSET_FOR_LEADER_EPOCH: offset_for_leader_epoch,
    DESCRIBE_PRODUCERS: describe_producers,
    OFFSET_DELETE: offset_delete,
    ELECT_LEADERS: elect_leaders,
    ALTER_PARTITION_REASSIGNMENTS: alter_partition_reassignments,
    ALTER_CLIENT_QUOTAS: client_quotas,
}


@pytest.mark.parametrize(
    ("api_key", "version"), LACKING, ids=[f"{API_NAMES[k]}-v{v}" for k, v in LACKING]
)
def test_a_request_the_broker_never_answers(
    tap: BrokerTap, tapped_gateway: GatewayThread, api_key: int, version: int
) -> None:
    """The test broker closes the connection with no answer on these (it lacks the API, or
    panics on DeleteRecords), so the gateway's answer can only be compared with that: the
    gateway forwards the allowed request as the client sent it, and the client sees the same
    end."""
    name = unique_name("eq")
    create_topics_at(str(tap.broker), [name], {})
    request = NEVER_ANSWERED_REQUESTS[api_key](version, name)

    assert answer_or_close(tap.broker, api_key, version, request) == b""
    assert answer_or_close(tapped_gateway.bootstrap, api_key, version, request) == b""
    assert tap.forwarded(api_key) == [request]
    sent = [r.api_key for r in tap.requests]
    lookup = JUDGED_WITH.get(api_key) if (api_key, version) != (ELECT_LEADERS, 0) else None
    if lookup is not None:  # judged before it was forwarded
        assert lookup in sent[: sent.index(api_key)], sent
