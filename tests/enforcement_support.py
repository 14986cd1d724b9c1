"""What the enforcement unit tests are built from: the gateway's real services around a
stand-in cluster view, request frames written with kio, and readers for the answers.

No sockets. :class:`StandInCluster` implements :class:`gateway.engine.ClusterView` from dicts:
the protocol is the seam between the enforcements and the broker connection, so a stand-in
there is what the enforcements see of any cluster. Everything else is real: the policy chain
(built-in rules and a test plug-in), a SQLite state store on a temp path, the record
validator, the decision recorder with an audit emitter writing to a list, and the engine.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import re
import struct
import uuid
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode
from kio.schema.offset_fetch.v8 import response as offset_fetch_v8
from kio.schema.types import BrokerId, GroupId, TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64
from prometheus_client import CollectorRegistry, Counter

from gateway.audit import AuditEmitter, EventLine, ProduceSummarizer
from gateway.config import ClientConfigsConfig, HostPort, UpstreamConfig
from gateway.decisions import DecisionRecorder
from gateway.engine import Engine, RequestContext, Session
from gateway.handlers import build_table
from gateway.handlers.base import Registration
from gateway.metrics import GatewayMetrics
from gateway.outcomes import Answer, Forward, Outcome
from gateway.policy_runner import PolicyRunner
from gateway.record_validation import load_record_validator
from gateway.services import Services
from gateway.state import SqliteStore
from policies.chain import PolicyChain
from policies.loader import flatten_configs, load_policy_chain
from protocol.admin import SOURCE_DEFAULT, InternalRequest, TopicDescription
from protocol.codec import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from protocol.describe_configs import SOURCE_DYNAMIC_TOPIC, DescribedConfig, DescribedResource
from protocol.framing import RequestHeader, parse_request_header, response_correlation_id
from protocol.results import OK, ItemError
from spark_audit.event import AuditEvent

T = TypeVar("T")

PLUGINS = str(Path(__file__).parent / "plugins")
CORRELATION_ID = 4242
CLIENT_ID = "unit-client"
CLIENT_ADDRESS = "192.0.2.7:50123"
TIMEOUT = i32Timedelta.parse(timedelta(seconds=30))

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CONFIGS, PRODUCE = 33, 44, 32, 0
FETCH, LIST_OFFSETS, DELETE_RECORDS, OFFSET_FOR_LEADER_EPOCH = 1, 2, 21, 23
DELETE_GROUPS, ELECT_LEADERS, ALTER_PARTITION_REASSIGNMENTS, OFFSET_DELETE = 42, 43, 45, 47
DESCRIBE_PRODUCERS, OFFSET_FETCH = 61, 9
TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
PREFERRED, UNCLEAN = 0, 1

_API_MODULES = {
    CREATE_TOPICS: "create_topics",
    DELETE_TOPICS: "delete_topics",
    CREATE_PARTITIONS: "create_partitions",
    ALTER_CONFIGS: "alter_configs",
    INCREMENTAL_ALTER_CONFIGS: "incremental_alter_configs",
    DESCRIBE_CONFIGS: "describe_configs",
    PRODUCE: "produce",
    FETCH: "fetch",
    LIST_OFFSETS: "list_offsets",
    DELETE_RECORDS: "delete_records",
    OFFSET_FOR_LEADER_EPOCH: "offset_for_leader_epoch",
    DELETE_GROUPS: "delete_groups",
    ELECT_LEADERS: "elect_leaders",
    ALTER_PARTITION_REASSIGNMENTS: "alter_partition_reassignments",
    OFFSET_DELETE: "offset_delete",
    DESCRIBE_PRODUCERS: "describe_producers",
}


# --- the stand-in cluster --------------------------------------------------------------------


def described(
    resource_type: int,
    name: str,
    own: Mapping[str, str] = {},  # noqa: B006 - read only
    defaults: Mapping[str, str] = {},  # noqa: B006 - read only
    *,
    error_code: int = 0,
    error_message: str | None = None,
) -> DescribedResource:
    """A resource as DescribeConfigs reports it: ``own`` set on it, ``defaults`` not."""
    own_source = SOURCE_DYNAMIC_TOPIC if resource_type == TOPIC else 2  # DYNAMIC_BROKER

    def entry(key: str, value: str, source: int) -> DescribedConfig:
        return DescribedConfig(
            name=key,
            value=value,
            source=source,
            read_only=False,
            is_sensitive=False,
            synonyms=(),
            config_type=0,
            documentation=None,
        )

    return DescribedResource(
        resource_type=resource_type,
        resource_name=name,
        error_code=error_code,
        error_message=error_message,
        configs=tuple(entry(k, v, own_source) for k, v in own.items())
        + tuple(entry(k, v, SOURCE_DEFAULT) for k, v in defaults.items() if k not in own),
    )


@dataclass(eq=False)  # one per connection, told apart by identity as links are
class StandInCluster:
    """A :class:`gateway.engine.ClusterView` answering from dicts, recording what it is asked.

    A topic it does not hold is answered as a broker answers it: Metadata with
    UNKNOWN_TOPIC_OR_PARTITION (or the code set in ``metadata_errors``), DescribeConfigs
    with UNKNOWN_TOPIC_OR_PARTITION. Every client is authorized to alter configs, unless
    ``alter_refusals`` says otherwise. Of the requests the gateway writes itself (``send``)
    it answers OffsetFetch, from ``committed`` and ``group_errors``, as a group coordinator
    does; anything else fails the test.
    """

    topics: dict[str, TopicDescription] = field(default_factory=dict)
    topic_ids: dict[uuid.UUID, str] = field(default_factory=dict)
    brokers: list[int] = field(default_factory=lambda: [1])
    configs: dict[tuple[int, str], DescribedResource] = field(default_factory=dict)
    metadata_errors: dict[str, int] = field(default_factory=dict)
    left_out_topics: set[str] = field(default_factory=set)
    """Topics Metadata leaves out of its answer altogether (no Kafka broker does; the gateway
    must not take a topic it was told nothing of for one that does not exist)."""
    alter_refusals: dict[tuple[int, str], ItemError] = field(default_factory=dict)
    """What the broker answers an empty validate_only IncrementalAlterConfigs for a resource
    (its authorization check); OK for any other."""
    alter_unanswered: set[tuple[int, str]] = field(default_factory=set)
    """Resources that answer leaves out altogether (no Kafka broker does)."""
    committed: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """group -> the topics it has committed offsets for (partition 0 of each); a group not
    here has none, which is how a coordinator answers a group it does not know."""
    group_errors: dict[str, int] = field(default_factory=dict)
    """group -> the error its coordinator answers OffsetFetch with."""
    left_out_groups: set[str] = field(default_factory=set)
    """Groups the OffsetFetch answer leaves out altogether."""
    asked: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)

    def add_topic(
        self,
        name: str,
        *,
        partitions: int = 3,
        replication_factor: int = 1,
        configs: Mapping[str, str] = {},  # noqa: B006 - read only
        defaults: Mapping[str, str] = {},  # noqa: B006 - read only
    ) -> uuid.UUID:
        """Make ``name`` exist; returns its topic id."""
        replicas = tuple(range(1, replication_factor + 1))
        self.topics[name] = TopicDescription(
            name=name, error_code=0, partitions=dict.fromkeys(range(partitions), replicas)
        )
        topic_id = uuid.uuid4()
        self.topic_ids[topic_id] = name
        self.configs[(TOPIC, name)] = described(TOPIC, name, configs, defaults)
        return topic_id

    def id_of(self, name: str) -> uuid.UUID:
        return next(i for i, n in self.topic_ids.items() if n == name)

    def set_broker_configs(self, broker_id: int, configs: Mapping[str, str]) -> None:
        """What DescribeConfigs reports for broker ``broker_id`` (its static configs)."""
        self.configs[(BROKER, str(broker_id))] = described(BROKER, str(broker_id), configs)

    async def describe_topics(self, names: Sequence[str]) -> Mapping[str, TopicDescription]:
        self.asked.append(("describe_topics", tuple(names)))
        return {name: self._topic(name) for name in names if name not in self.left_out_topics}

    async def broker_ids(self) -> Sequence[int]:
        self.asked.append(("broker_ids", ()))
        return list(self.brokers)

    async def describe_all_topics(
        self,
    ) -> tuple[Mapping[str, TopicDescription], Mapping[uuid.UUID, str]]:
        self.asked.append(("describe_all_topics", ()))
        return dict(self.topics), dict(self.topic_ids)

    async def describe_configs(
        self, resources: Sequence[tuple[int, str]], *, include_synonyms: bool = False
    ) -> Mapping[tuple[int, str], DescribedResource]:
        self.asked.append(("describe_configs", tuple(resources)))
        unknown = ErrorCode.unknown_topic_or_partition.value
        return {
            key: self.configs.get(key)
            or described(*key, error_code=unknown, error_message=f"{key[1]} does not exist")
            for key in resources
        }

    async def authorize_alter_configs(
        self, resources: Sequence[tuple[int, str]]
    ) -> Mapping[tuple[int, str], ItemError]:
        self.asked.append(("authorize_alter_configs", tuple(resources)))
        return {
            key: self.alter_refusals.get(key, OK)
            for key in resources
            if key not in self.alter_unanswered
        }

    async def send(self, request: InternalRequest[Any]) -> Any:
        assert request.api_key == OFFSET_FETCH, f"the stand-in cannot answer {request}"
        groups = [str(g.group_id) for g in request.payload.groups]
        assert all(g.topics is None for g in request.payload.groups), "every topic is asked"
        self.asked.append(("offset_fetch", (request.api_version, *groups)))
        m = offset_fetch_v8
        answer = m.OffsetFetchResponse(
            throttle_time=TIMEOUT,
            groups=tuple(
                m.OffsetFetchResponseGroup(
                    group_id=GroupId(group),
                    topics=tuple(
                        m.OffsetFetchResponseTopics(
                            name=TopicName(topic),
                            partitions=(
                                m.OffsetFetchResponsePartitions(
                                    partition_index=i32(0),
                                    committed_offset=i64(12),
                                    committed_leader_epoch=i32(-1),
                                    metadata=None,
                                    error_code=ErrorCode.none,
                                ),
                            ),
                        )
                        for topic in self.committed.get(group, ())
                    ),
                    error_code=ErrorCode(self.group_errors.get(group, 0)),
                )
                for group in groups
                if group not in self.left_out_groups
            ),
        )
        # what the gateway reads is what the wire carries: the answer goes through kio both ways
        encoded = encode_response(CORRELATION_ID, OFFSET_FETCH, request.api_version, answer)
        return request.read(encoded)

    def _topic(self, name: str) -> TopicDescription:
        found = self.topics.get(name)
        if found is not None:
            return found
        code = self.metadata_errors.get(name, ErrorCode.unknown_topic_or_partition.value)
        return TopicDescription(name=name, error_code=code, partitions={})


# --- the gateway's services around it --------------------------------------------------------


class ListSink:
    """An audit sink that keeps the events in a list."""

    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    def open(self) -> None:
        pass

    def write(self, lines: Sequence[EventLine]) -> None:
        self.events.extend(line.event for line in lines)

    def maintain(self) -> None:
        pass

    def close(self) -> None:
        pass


class NoNodes:
    """The enforcements never rewrite broker addresses."""

    async def gateway_addresses(
        self, endpoints: object, *, complete: bool = False
    ) -> dict[int, tuple[str, int]]:
        raise AssertionError("an enforcement asked for gateway node addresses")


@dataclass
class Harness:
    """The real services and handler table, one event loop, and a stand-in cluster.

    Synchronous on the outside, so that tests read as plain steps.
    """

    loop: asyncio.AbstractEventLoop
    services: Services
    chain: PolicyChain
    store: SqliteStore
    emitter: AuditEmitter
    sink: ListSink
    summarizer: ProduceSummarizer
    metrics: GatewayMetrics
    table: Mapping[int, Registration]
    cluster: StandInCluster = field(default_factory=StandInCluster)

    @classmethod
    def build(
        cls,
        directory: Path,
        policies: Mapping[str, object],
        *,
        upstream: UpstreamConfig,
        own_topics: Sequence[str] = (),
    ) -> Harness:
        loop = asyncio.new_event_loop()
        metrics = GatewayMetrics(CollectorRegistry())
        chain = load_policy_chain(policies, source="unit-test")
        store = SqliteStore(directory / "state.db")
        sink = ListSink()
        summarizer = ProduceSummarizer(
            gateway_instance="unit", mode="enforce", interval_ms=60_000, start_ms=0
        )
        emitter = AuditEmitter([sink], summarizer=summarizer, tick_s=0.05)
        loop.run_until_complete(store.start())
        loop.run_until_complete(emitter.start())
        services = Services(
            engine=Engine(DecisionRecorder(metrics, emitter, "unit")),
            policies=PolicyRunner(chain),
            state=store,
            records=load_record_validator(policies, flatten_configs(policies), "unit-test"),
            audit=emitter,
            metrics=metrics,
            client_config_enforced=Counter(
                "kpg_client_config_enforced", "", ["config"], registry=metrics.registry
            ),
            nodes=NoNodes(),
            upstream=upstream,
            client_configs=ClientConfigsConfig(),
            own_topics=frozenset(own_topics),
        )
        return cls(
            loop=loop,
            services=services,
            chain=chain,
            store=store,
            emitter=emitter,
            sink=sink,
            summarizer=summarizer,
            metrics=metrics,
            table=build_table(services),
        )

    def close(self) -> None:
        self.loop.run_until_complete(self.emitter.close())
        self.loop.run_until_complete(self.store.close())
        self.chain.close()
        self.loop.run_until_complete(self.loop.shutdown_default_executor())
        self.loop.close()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coroutine)

    def send(self, frame: bytes, *, principal: str | None = None) -> Outcome:
        """What the API's handler decides about ``frame`` (a request frame, no size prefix)."""
        ctx = context(frame, principal)
        handler = self.table[ctx.api_key].handler
        return self.run(handler(ctx, self.cluster, frame))

    def broker_answers(self, outcome: Outcome, response: bytes) -> bytes:
        """What the client gets when the broker answers a forwarded request with ``response``."""
        assert isinstance(outcome, Forward), outcome
        if outcome.on_response is None:
            return response
        return self.run(outcome.on_response(response))

    def set_validation_policy(self, topic: str, value: str | None) -> None:
        self.run(self.services.store_validation_policies({topic: value}))

    def validation_policy(self, topic: str) -> str | None:
        return self.services.validation_policy_of(topic)

    def decisions(self, api: str, policy: str, outcome: str) -> float:
        """``kpg_policy_decisions_total{api, policy, outcome}``."""
        value = self.metrics.registry.get_sample_value(
            "kpg_policy_decisions_total", {"api": api, "policy": policy, "outcome": outcome}
        )
        return value or 0.0


def context(frame: bytes, principal: str | None = None) -> RequestContext:
    return RequestContext(
        header=parse_request_header(frame),
        client_address=CLIENT_ADDRESS,
        session=Session(principal=principal),
    )


# --- request frames --------------------------------------------------------------------------


def kio_module(api_key: int, version: int, kind: str = "request") -> Any:
    return importlib.import_module(f"kio.schema.{_API_MODULES[api_key]}.v{version}.{kind}")


def make(cls: type, **values: object) -> Any:
    """A kio entity from ``values``, ignoring those its version does not have."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def request(api_key: int, version: int, payload: Any) -> bytes:
    """A request frame, no size prefix (what the handlers are given)."""
    return encode_request(api_key, version, CORRELATION_ID, CLIENT_ID, payload)[4:]


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int = 3
    replication_factor: int = 1
    configs: Mapping[str, str] = field(default_factory=dict)
    assignments: tuple[tuple[int, tuple[int, ...]], ...] = ()
    """Manual replica assignments: (partition, broker ids) each; give counts of -1 with them."""


def create_topics(version: int, *topics: NewTopic, validate_only: bool = False) -> bytes:
    """CreateTopics; v0 and v1 are written as kio's v2 less what they lack (kio has no
    schema for them)."""
    m = kio_module(CREATE_TOPICS, max(version, 2))
    payload = m.CreateTopicsRequest(
        topics=tuple(
            m.CreatableTopic(
                name=t.name,
                num_partitions=i32(t.num_partitions),
                replication_factor=i16(t.replication_factor),
                assignments=tuple(
                    m.CreatableReplicaAssignment(
                        partition_index=i32(p), broker_ids=tuple(i32(b) for b in brokers)
                    )
                    for p, brokers in t.assignments
                ),
                configs=tuple(
                    m.CreatableTopicConfig(name=k, value=v) for k, v in t.configs.items()
                ),
            )
            for t in topics
        ),
        timeout=TIMEOUT,
        validate_only=validate_only,
    )
    frame = request(CREATE_TOPICS, max(version, 2), payload)
    if version >= 2:
        return frame
    frame = frame[:2] + struct.pack(">h", version) + frame[4:]
    return frame[:-1] if version == 0 else frame  # v0 has no validate_only


def create_partitions(version: int, *increases: tuple[str, int]) -> bytes:
    """CreatePartitions: (topic, new partition count) each, in this order."""
    m = kio_module(CREATE_PARTITIONS, version)
    payload = m.CreatePartitionsRequest(
        topics=tuple(
            m.CreatePartitionsTopic(name=name, count=i32(count), assignments=None)
            for name, count in increases
        ),
        timeout=TIMEOUT,
        validate_only=False,
    )
    return request(CREATE_PARTITIONS, version, payload)


def delete_topics(version: int, *targets: str | uuid.UUID) -> bytes:
    """DeleteTopics naming topics (or, from v6, topic ids) in this order."""
    m = kio_module(DELETE_TOPICS, version)
    if version < 6:
        assert all(isinstance(t, str) for t in targets)
        return request(
            DELETE_TOPICS, version, m.DeleteTopicsRequest(topic_names=targets, timeout=TIMEOUT)
        )
    states = tuple(
        m.DeleteTopicState(name=None, topic_id=t)
        if isinstance(t, uuid.UUID)
        else m.DeleteTopicState(name=t, topic_id=None)
        for t in targets
    )
    return request(DELETE_TOPICS, version, m.DeleteTopicsRequest(topics=states, timeout=TIMEOUT))


Alteration = tuple[str, int, str | None]
"""(config name, operation, value); the legacy API takes SET only."""


def alter_configs(
    api_key: int,
    version: int,
    resources: Sequence[tuple[int, str, Sequence[Alteration]]],
    *,
    validate_only: bool = False,
) -> bytes:
    """AlterConfigs or IncrementalAlterConfigs, by ``api_key``."""
    m = kio_module(api_key, version)
    incremental = api_key == INCREMENTAL_ALTER_CONFIGS
    request_cls = m.IncrementalAlterConfigsRequest if incremental else m.AlterConfigsRequest
    payload = request_cls(
        resources=tuple(
            m.AlterConfigsResource(
                resource_type=i8(resource_type),
                resource_name=name,
                configs=tuple(
                    make(m.AlterableConfig, name=key, config_operation=i8(op), value=value)
                    for key, op, value in configs
                ),
            )
            for resource_type, name, configs in resources
        ),
        validate_only=validate_only,
    )
    return request(api_key, version, payload)


def describe_configs(version: int, resources: Sequence[tuple[int, str]]) -> bytes:
    m = kio_module(DESCRIBE_CONFIGS, version)
    payload = make(
        m.DescribeConfigsRequest,
        resources=tuple(
            m.DescribeConfigsResource(resource_type=i8(t), resource_name=n, configuration_keys=None)
            for t, n in resources
        ),
        include_synonyms=False,
        include_documentation=False,
    )
    return request(DESCRIBE_CONFIGS, version, payload)


def produce(
    version: int,
    partitions: Mapping[tuple[str | uuid.UUID, int], bytes],
    *,
    acks: int = -1,
    transactional_id: str | None = None,
) -> bytes:
    """Produce with one records field per (topic, partition), topics in first-seen order;
    from v13 topics are ids."""
    m = kio_module(PRODUCE, version)
    by_topic: dict[str | uuid.UUID, list[Any]] = {}
    for (topic, partition), records in partitions.items():
        by_topic.setdefault(topic, []).append(
            m.PartitionProduceData(index=i32(partition), records=records)
        )
    payload = m.ProduceRequest(
        transactional_id=transactional_id,
        acks=i16(acks),
        timeout=TIMEOUT,
        topic_data=tuple(
            m.TopicProduceData(**_produce_topic(version, topic), partition_data=tuple(data))
            for topic, data in by_topic.items()
        ),
    )
    return request(PRODUCE, version, payload)


Partition = tuple[str | uuid.UUID, int]
"""(topic name, or from Fetch v13 a topic id; partition index)."""


def _by_topic(partitions: Sequence[Partition]) -> dict[str | uuid.UUID, list[int]]:
    """Partition indexes per topic, topics in first-seen order."""
    grouped: dict[str | uuid.UUID, list[int]] = {}
    for topic, index in partitions:
        grouped.setdefault(topic, []).append(index)
    return grouped


def fetch(version: int, *partitions: Partition) -> bytes:
    """Fetch (v4 and later: kio's) from offset 0 of each partition; topics by id from v13."""
    return request(FETCH, version, fetch_payload(version, *partitions))


def fetch_payload(version: int, *partitions: Partition) -> Any:
    """The kio FetchRequest of :func:`fetch`."""
    m = kio_module(FETCH, version)
    by_id = version >= 13
    topics = []
    for topic, indexes in _by_topic(partitions).items():
        assert isinstance(topic, uuid.UUID) == by_id, (topic, version)
        fetched = tuple(
            make(
                m.FetchPartition,
                partition=i32(index),
                current_leader_epoch=i32(-1),
                fetch_offset=i64(0),
                last_fetched_epoch=i32(-1),
                log_start_offset=i64(-1),
                partition_max_bytes=i32(1 << 20),
            )
            for index in indexes
        )
        named = {"topic_id": topic} if by_id else {"topic": topic}
        topics.append(m.FetchTopic(**named, partitions=fetched))
    return make(
        m.FetchRequest,
        replica_id=BrokerId(-1),
        max_wait=i32Timedelta.parse(timedelta(milliseconds=500)),
        min_bytes=i32(1),
        max_bytes=i32(1 << 24),
        isolation_level=i8(0),
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=tuple(topics),
        forgotten_topics_data=(),
        rack_id="",
    )


def legacy_fetch(version: int, *partitions: tuple[str, int]) -> bytes:
    """Fetch v0 to v3, which kio lacks, written here: replica id, max wait, min bytes, (v3)
    max bytes, then per topic its name and per partition index, offset and max bytes."""
    assert 0 <= version <= 3

    def string(value: str) -> bytes:
        return struct.pack(">h", len(value)) + value.encode()

    body = struct.pack(">iii", -1, 500, 1) + (struct.pack(">i", 1 << 24) if version == 3 else b"")
    grouped = _by_topic(partitions)
    body += struct.pack(">i", len(grouped))
    for topic, indexes in grouped.items():
        assert isinstance(topic, str)
        body += string(topic) + struct.pack(">i", len(indexes))
        body += b"".join(struct.pack(">iqi", index, 0, 1 << 20) for index in indexes)
    header = struct.pack(">hhi", FETCH, version, CORRELATION_ID) + string(CLIENT_ID)
    return header + body


def list_offsets(version: int, *partitions: Partition) -> bytes:
    """ListOffsets of each partition's latest offset."""
    m = kio_module(LIST_OFFSETS, version)
    payload = make(
        m.ListOffsetsRequest,
        replica_id=BrokerId(-1),
        isolation_level=i8(0),
        timeout=TIMEOUT,
        topics=tuple(
            m.ListOffsetsTopic(
                name=topic,
                partitions=tuple(
                    make(
                        m.ListOffsetsPartition,
                        partition_index=i32(index),
                        current_leader_epoch=i32(-1),
                        timestamp=i64(-1),
                    )
                    for index in indexes
                ),
            )
            for topic, indexes in _by_topic(partitions).items()
        ),
    )
    return request(LIST_OFFSETS, version, payload)


def offset_for_leader_epoch(version: int, *partitions: Partition) -> bytes:
    m = kio_module(OFFSET_FOR_LEADER_EPOCH, version)
    payload = make(
        m.OffsetForLeaderEpochRequest,
        replica_id=BrokerId(-1),
        topics=tuple(
            m.OffsetForLeaderTopic(
                topic=topic,
                partitions=tuple(
                    m.OffsetForLeaderPartition(
                        partition=i32(index), current_leader_epoch=i32(-1), leader_epoch=i32(0)
                    )
                    for index in indexes
                ),
            )
            for topic, indexes in _by_topic(partitions).items()
        ),
    )
    return request(OFFSET_FOR_LEADER_EPOCH, version, payload)


def describe_producers(version: int, *partitions: Partition) -> bytes:
    m = kio_module(DESCRIBE_PRODUCERS, version)
    payload = m.DescribeProducersRequest(
        topics=tuple(
            m.TopicRequest(name=topic, partition_indexes=tuple(i32(i) for i in indexes))
            for topic, indexes in _by_topic(partitions).items()
        )
    )
    return request(DESCRIBE_PRODUCERS, version, payload)


def delete_records(version: int, *partitions: Partition) -> bytes:
    """DeleteRecords of each partition's records before offset 5."""
    m = kio_module(DELETE_RECORDS, version)
    payload = m.DeleteRecordsRequest(
        topics=tuple(
            m.DeleteRecordsTopic(
                name=topic,
                partitions=tuple(
                    m.DeleteRecordsPartition(partition_index=i32(index), offset=i64(5))
                    for index in indexes
                ),
            )
            for topic, indexes in _by_topic(partitions).items()
        ),
        timeout=TIMEOUT,
    )
    return request(DELETE_RECORDS, version, payload)


def offset_delete(version: int, group: str, *partitions: Partition) -> bytes:
    """OffsetDelete of ``group``'s offsets of each partition."""
    m = kio_module(OFFSET_DELETE, version)
    payload = m.OffsetDeleteRequest(
        group_id=GroupId(group),
        topics=tuple(
            m.OffsetDeleteRequestTopic(
                name=topic,
                partitions=tuple(
                    m.OffsetDeleteRequestPartition(partition_index=i32(index)) for index in indexes
                ),
            )
            for topic, indexes in _by_topic(partitions).items()
        ),
    )
    return request(OFFSET_DELETE, version, payload)


def elect_leaders(
    version: int, partitions: Sequence[Partition] | None, *, election_type: int = PREFERRED
) -> bytes:
    """ElectLeaders of ``partitions`` (None: every partition); v0 has no election type and
    elects preferred leaders."""
    m = kio_module(ELECT_LEADERS, version)
    topic_partitions = (
        None
        if partitions is None
        else tuple(
            m.TopicPartitions(topic=topic, partitions=tuple(i32(i) for i in indexes))
            for topic, indexes in _by_topic(partitions).items()
        )
    )
    assert version >= 1 or election_type == PREFERRED
    payload = make(
        m.ElectLeadersRequest,
        election_type=i8(election_type),
        topic_partitions=topic_partitions,
        timeout=TIMEOUT,
    )
    return request(ELECT_LEADERS, version, payload)


Move = tuple[str, int, tuple[int, ...] | None]
"""(topic, partition, its new replicas; None cancels a reassignment)."""


def alter_partition_reassignments(
    version: int, *moves: Move, allow_replication_factor_change: bool = True
) -> bytes:
    m = kio_module(ALTER_PARTITION_REASSIGNMENTS, version)
    by_topic: dict[str, list[Any]] = {}
    for topic, index, replicas in moves:
        by_topic.setdefault(topic, []).append(
            m.ReassignablePartition(
                partition_index=i32(index),
                replicas=None if replicas is None else tuple(BrokerId(r) for r in replicas),
            )
        )
    payload = make(
        m.AlterPartitionReassignmentsRequest,
        timeout=TIMEOUT,
        allow_replication_factor_change=allow_replication_factor_change,
        topics=tuple(
            m.ReassignableTopic(name=topic, partitions=tuple(partitions))
            for topic, partitions in by_topic.items()
        ),
    )
    return request(ALTER_PARTITION_REASSIGNMENTS, version, payload)


def delete_groups(version: int, *groups: str) -> bytes:
    m = kio_module(DELETE_GROUPS, version)
    payload = m.DeleteGroupsRequest(groups_names=tuple(GroupId(g) for g in groups))
    return request(DELETE_GROUPS, version, payload)


def forwarded(outcome: Outcome) -> tuple[RequestHeader, Any]:
    """The header and decoded body of what an outcome sends the broker."""
    assert isinstance(outcome, Forward), outcome
    header = parse_request_header(outcome.frame)
    return header, decode_request(header, outcome.frame)


_REQUEST_LAYOUTS: dict[int, tuple[str, str, str, str | None]] = {
    FETCH: ("topics", "topic", "partitions", "partition"),
    LIST_OFFSETS: ("topics", "name", "partitions", "partition_index"),
    DELETE_RECORDS: ("topics", "name", "partitions", "partition_index"),
    OFFSET_FOR_LEADER_EPOCH: ("topics", "topic", "partitions", "partition"),
    ELECT_LEADERS: ("topic_partitions", "topic", "partitions", None),
    ALTER_PARTITION_REASSIGNMENTS: ("topics", "name", "partitions", "partition_index"),
    OFFSET_DELETE: ("topics", "name", "partitions", "partition_index"),
    DESCRIBE_PRODUCERS: ("topics", "name", "partition_indexes", None),
}
"""Per partitioned API: the request's topics, a topic's name, its partitions, a partition's
index (None: the partitions are bare indexes)."""


def forwarded_partitions(outcome: Outcome) -> list[Partition]:
    """The (topic or topic id, partition) items of what an outcome sends the broker, in
    order, read with kio."""
    header, body = forwarded(outcome)
    topics_field, topic_field, partitions_field, index_field = _REQUEST_LAYOUTS[header.api_key]
    found: list[Partition] = []
    for topic in getattr(body, topics_field) or ():
        name = getattr(topic, "topic_id", None) or getattr(topic, topic_field)
        for partition in getattr(topic, partitions_field):
            index = partition if index_field is None else getattr(partition, index_field)
            found.append((name, int(index)))
    return found


# --- broker answers (encoded here, as a broker would) ---------------------------------------


def _response(api_key: int, version: int, payload: Any) -> bytes:
    return encode_response(CORRELATION_ID, api_key, version, payload)


def create_topics_response(version: int, codes: Mapping[str, int]) -> bytes:
    m = kio_module(CREATE_TOPICS, version, "response")
    topics = tuple(
        make(
            m.CreatableTopicResult,
            name=name,
            topic_id=uuid.uuid4() if code == 0 else None,
            error_code=ErrorCode(code),
            error_message=None if code == 0 else f"broker error {code}",
            topic_config_error_code=i16(0),
            num_partitions=i32(3),
            replication_factor=i16(1),
            configs=(),
        )
        for name, code in codes.items()
    )
    return _response(
        CREATE_TOPICS, version, m.CreateTopicsResponse(throttle_time=TIMEOUT, topics=topics)
    )


def create_partitions_response(version: int, codes: Mapping[str, int]) -> bytes:
    m = kio_module(CREATE_PARTITIONS, version, "response")
    results = tuple(
        m.CreatePartitionsTopicResult(name=name, error_code=ErrorCode(code), error_message=None)
        for name, code in codes.items()
    )
    return _response(
        CREATE_PARTITIONS,
        version,
        m.CreatePartitionsResponse(throttle_time=TIMEOUT, results=results),
    )


def delete_topics_response(
    version: int, results: Sequence[tuple[str, uuid.UUID | None, int]]
) -> bytes:
    """(name, topic id, error code) per topic."""
    m = kio_module(DELETE_TOPICS, version, "response")
    responses = tuple(
        make(
            m.DeletableTopicResult,
            name=name,
            topic_id=topic_id,
            error_code=ErrorCode(code),
            error_message=None,
        )
        for name, topic_id, code in results
    )
    return _response(
        DELETE_TOPICS, version, m.DeleteTopicsResponse(throttle_time=TIMEOUT, responses=responses)
    )


def alter_configs_response(
    api_key: int, version: int, codes: Mapping[tuple[int, str], int]
) -> bytes:
    m = kio_module(api_key, version, "response")
    responses = tuple(
        m.AlterConfigsResourceResponse(
            error_code=ErrorCode(code),
            error_message=None,
            resource_type=i8(resource_type),
            resource_name=name,
        )
        for (resource_type, name), code in codes.items()
    )
    response_cls = (
        m.IncrementalAlterConfigsResponse
        if api_key == INCREMENTAL_ALTER_CONFIGS
        else m.AlterConfigsResponse
    )
    return _response(api_key, version, response_cls(throttle_time=TIMEOUT, responses=responses))


def _produce_topic(version: int, topic: str | uuid.UUID) -> dict[str, Any]:
    return {"topic_id": topic} if version >= 13 else {"name": topic}


def produce_response(
    version: int,
    codes: Mapping[tuple[str | uuid.UUID, int], int],
    node_endpoints: Sequence[tuple[int, str, int]] = (),
) -> bytes:
    """A broker's Produce answer; from v10 with ``node_endpoints`` (node id, host, port)."""
    m = kio_module(PRODUCE, version, "response")
    by_topic: dict[str | uuid.UUID, list[Any]] = {}
    for (topic, partition), code in codes.items():
        by_topic.setdefault(topic, []).append(
            make(
                m.PartitionProduceResponse,
                index=i32(partition),
                error_code=ErrorCode(code),
                base_offset=i64(100),
                log_append_time=None,
                log_start_offset=i64(0),
                record_errors=(),
                error_message=None,
            )
        )
    payload = m.ProduceResponse(
        responses=tuple(
            m.TopicProduceResponse(
                **_produce_topic(version, topic), partition_responses=tuple(parts)
            )
            for topic, parts in by_topic.items()
        ),
        throttle_time=TIMEOUT,
        **(
            {
                "node_endpoints": tuple(
                    m.NodeEndpoint(node_id=i32(n), host=h, port=i32(port))
                    for n, h, port in node_endpoints
                )
            }
            if node_endpoints
            else {}
        ),
    )
    return _response(PRODUCE, version, payload)


def describe_configs_response(
    version: int, resources: Sequence[tuple[int, str, Mapping[str, str]]]
) -> bytes:
    """Each resource with its configs, as set on it."""
    m = kio_module(DESCRIBE_CONFIGS, version, "response")
    results = tuple(
        m.DescribeConfigsResult(
            error_code=ErrorCode(0),
            error_message=None,
            resource_type=i8(resource_type),
            resource_name=name,
            configs=tuple(
                make(
                    m.DescribeConfigsResourceResult,
                    name=key,
                    value=value,
                    read_only=False,
                    config_source=i8(SOURCE_DYNAMIC_TOPIC),
                    is_sensitive=False,
                    synonyms=(),
                    config_type=i8(2),
                    documentation=None,
                )
                for key, value in configs.items()
            ),
        )
        for resource_type, name, configs in resources
    )
    return _response(
        DESCRIBE_CONFIGS, version, m.DescribeConfigsResponse(throttle_time=TIMEOUT, results=results)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _Layout:
    """Where a partitioned API's answer keeps its topics and partitions (kio's names), and
    what a broker puts in a partition's other fields."""

    response: str
    topics: str
    topic_entity: str
    topic: str
    partitions: str
    partition_entity: str
    index: str
    values: Mapping[str, object]


_LAYOUTS: dict[int, _Layout] = {
    FETCH: _Layout(
        response="FetchResponse",
        topics="responses",
        topic_entity="FetchableTopicResponse",
        topic="topic",
        partitions="partitions",
        partition_entity="PartitionData",
        index="partition_index",
        values={
            "high_watermark": i64(10),
            "last_stable_offset": i64(10),
            "log_start_offset": i64(0),
            "aborted_transactions": (),
            "preferred_read_replica": BrokerId(-1),
            "records": None,
        },
    ),
    LIST_OFFSETS: _Layout(
        response="ListOffsetsResponse",
        topics="topics",
        topic_entity="ListOffsetsTopicResponse",
        topic="name",
        partitions="partitions",
        partition_entity="ListOffsetsPartitionResponse",
        index="partition_index",
        values={"timestamp": i64(-1), "offset": i64(10), "leader_epoch": i32(0)},
    ),
    DELETE_RECORDS: _Layout(
        response="DeleteRecordsResponse",
        topics="topics",
        topic_entity="DeleteRecordsTopicResult",
        topic="name",
        partitions="partitions",
        partition_entity="DeleteRecordsPartitionResult",
        index="partition_index",
        values={"low_watermark": i64(10)},
    ),
    OFFSET_FOR_LEADER_EPOCH: _Layout(
        response="OffsetForLeaderEpochResponse",
        topics="topics",
        topic_entity="OffsetForLeaderTopicResult",
        topic="topic",
        partitions="partitions",
        partition_entity="EpochEndOffset",
        index="partition",
        values={"leader_epoch": i32(0), "end_offset": i64(10)},
    ),
    ELECT_LEADERS: _Layout(
        response="ElectLeadersResponse",
        topics="replica_election_results",
        topic_entity="ReplicaElectionResult",
        topic="topic",
        partitions="partition_result",
        partition_entity="PartitionResult",
        index="partition_id",
        values={"error_message": None},
    ),
    ALTER_PARTITION_REASSIGNMENTS: _Layout(
        response="AlterPartitionReassignmentsResponse",
        topics="responses",
        topic_entity="ReassignableTopicResponse",
        topic="name",
        partitions="partitions",
        partition_entity="ReassignablePartitionResponse",
        index="partition_index",
        values={"error_message": None},
    ),
    OFFSET_DELETE: _Layout(
        response="OffsetDeleteResponse",
        topics="topics",
        topic_entity="OffsetDeleteResponseTopic",
        topic="name",
        partitions="partitions",
        partition_entity="OffsetDeleteResponsePartition",
        index="partition_index",
        values={},
    ),
    DESCRIBE_PRODUCERS: _Layout(
        response="DescribeProducersResponse",
        topics="topics",
        topic_entity="TopicResponse",
        topic="name",
        partitions="partitions",
        partition_entity="PartitionResponse",
        index="partition_index",
        values={"error_message": None, "active_producers": ()},
    ),
}
PARTITIONED_APIS = frozenset(_LAYOUTS)


def partitioned_response(api_key: int, version: int, codes: Mapping[Partition, int]) -> bytes:
    """A broker's answer to a partitioned API: each (topic, partition) with its error code,
    topics in first-seen order, the other numbers as in :data:`_LAYOUTS` (10 where a
    partition has an offset)."""
    layout = _LAYOUTS[api_key]
    m = kio_module(api_key, version, "response")
    grouped: dict[str | uuid.UUID, list[Any]] = {}
    for (topic, index), code in codes.items():
        grouped.setdefault(topic, []).append(
            make(
                getattr(m, layout.partition_entity),
                **{layout.index: i32(index), "error_code": ErrorCode(code)},
                **layout.values,
            )
        )
    topics = tuple(
        getattr(m, layout.topic_entity)(
            **{
                "topic_id" if isinstance(topic, uuid.UUID) else layout.topic: topic,
                layout.partitions: tuple(partitions),
            }
        )
        for topic, partitions in grouped.items()
    )
    payload = make(
        getattr(m, layout.response),
        **{layout.topics: topics},
        throttle_time=TIMEOUT,
        error_code=ErrorCode.none,
        error_message=None,
        session_id=i32(0),
        allow_replication_factor_change=True,
    )
    return _response(api_key, version, payload)


def delete_groups_response(version: int, codes: Mapping[str, int]) -> bytes:
    m = kio_module(DELETE_GROUPS, version, "response")
    results = tuple(
        m.DeletableGroupResult(group_id=GroupId(group), error_code=ErrorCode(code))
        for group, code in codes.items()
    )
    return _response(
        DELETE_GROUPS, version, m.DeleteGroupsResponse(throttle_time=TIMEOUT, results=results)
    )


def _partitions_of(api_key: int, payload: Any) -> list[tuple[Partition, Any]]:
    """((topic or topic id, index), the partition entity) of a partitioned answer, in order."""
    layout = _LAYOUTS[api_key]
    found: list[tuple[Partition, Any]] = []
    for topic in getattr(payload, layout.topics):
        name = getattr(topic, "topic_id", None) or getattr(topic, layout.topic)
        for partition in getattr(topic, layout.partitions):
            found.append(((name, int(getattr(partition, layout.index))), partition))
    return found


def partition_values(api_key: int, version: int, frame: bytes, field_name: str) -> list[Any]:
    """One field of every partition of a partitioned answer, in order (-1 where the gateway
    answered the partition itself)."""
    payload = decode_response(api_key, version, frame)
    return [getattr(partition, field_name) for _, partition in _partitions_of(api_key, payload)]


def top_level(api_key: int, version: int, frame: bytes) -> dict[str, Any]:
    """An answer's fields other than its list of results."""
    payload = decode_response(api_key, version, frame)
    skip = _LAYOUTS[api_key].topics if api_key in _LAYOUTS else "results"
    return {f.name: getattr(payload, f.name) for f in dataclasses.fields(payload) if f.name != skip}


# --- reading the client's answer ------------------------------------------------------------


Item = tuple[Any, int, str | None]
"""(the item: topic, resource key or partition; error code; error message)."""


def answer_of(outcome: Outcome) -> bytes:
    assert isinstance(outcome, Answer), outcome
    return outcome.frame


def items(api_key: int, version: int, frame: bytes) -> list[Item]:
    """The per-item results of an answer (no size prefix), in the order it lists them.

    A version without ``error_message`` reads as None. DeleteTopics items are topic names
    (in a v6 answer the topic id where the name is null), config resources are
    (resource type, name), Produce items and those of the other partitioned APIs (topic,
    partition), Fetch's from v13 (topic id, partition); DeleteGroups items are groups.
    """
    found = tagged_items(api_key, version, frame)
    assert len({request_id for _, request_id in found if request_id is not None}) <= 1, (
        "one request, one audit request id"
    )
    return [item for item, _ in found]


REQUEST_ID_NOTE = re.compile(r"(?:^| \()audit request id ([0-9a-f]{32})\)?$")


def tagged_items(api_key: int, version: int, frame: bytes) -> list[tuple[Item, str | None]]:
    """:func:`items`, each with the audit request id its message ends with (the note taken
    off the message), or None."""
    assert response_correlation_id(frame) == CORRELATION_ID
    if api_key == CREATE_TOPICS and version < 2:
        raw = _legacy_create_topics_items(version, frame)
    else:
        raw = _READERS[api_key](decode_response(api_key, version, frame))
    found: list[tuple[Item, str | None]] = []
    for key, code, message in raw:
        match = REQUEST_ID_NOTE.search(message) if message is not None else None
        if match is None:
            found.append(((key, code, message), None))
        else:
            found.append(((key, code, message[: match.start()] or None), match.group(1)))
    return found


def request_ids(api_key: int, version: int, frame: bytes) -> list[str | None]:
    """The audit request id in each item's message, in answer order (None: no note)."""
    return [request_id for _, request_id in tagged_items(api_key, version, frame)]


def _message(entity: Any) -> str | None:
    return getattr(entity, "error_message", None)


def _resource_items(results: Sequence[Any]) -> list[Item]:
    return [
        ((int(r.resource_type), r.resource_name), int(r.error_code), r.error_message)
        for r in results
    ]


_READERS: dict[int, Callable[[Any], list[Item]]] = {
    CREATE_TOPICS: lambda p: [(t.name, int(t.error_code), t.error_message) for t in p.topics],
    CREATE_PARTITIONS: lambda p: [(r.name, int(r.error_code), r.error_message) for r in p.results],
    DELETE_TOPICS: lambda p: [
        (r.name if r.name is not None else r.topic_id, int(r.error_code), _message(r))
        for r in p.responses
    ],
    ALTER_CONFIGS: lambda p: _resource_items(p.responses),
    INCREMENTAL_ALTER_CONFIGS: lambda p: _resource_items(p.responses),
    DESCRIBE_CONFIGS: lambda p: _resource_items(p.results),
    PRODUCE: lambda p: [
        (
            (getattr(t, "topic_id", None) or getattr(t, "name", None), int(r.index)),
            int(r.error_code),
            _message(r),
        )
        for t in p.responses
        for r in t.partition_responses
    ],
    DELETE_GROUPS: lambda p: [(r.group_id, int(r.error_code), None) for r in p.results],
}
for _api_key in PARTITIONED_APIS:
    _READERS[_api_key] = lambda p, key=_api_key: [
        (item, int(partition.error_code), _message(partition))
        for item, partition in _partitions_of(key, p)
    ]


def codes(api_key: int, version: int, frame: bytes) -> list[tuple[Any, int]]:
    """(item, error code) per item of an answer."""
    return [(item, code) for item, code, _ in items(api_key, version, frame)]


def record_errors(
    version: int, frame: bytes
) -> dict[tuple[str | uuid.UUID, int], list[tuple[int, str | None]]]:
    """Produce answer: (topic, or from v13 its id; partition) -> its (batch_index, message)
    record errors."""
    payload = decode_response(PRODUCE, version, frame)
    return {
        (getattr(t, "topic_id", None) or t.name, int(p.index)): [
            (int(e.batch_index), e.batch_index_error_message) for e in p.record_errors
        ]
        for t in payload.responses
        for p in t.partition_responses
    }


def configs_of(version: int, frame: bytes) -> list[dict[str, tuple[str | None, int]]]:
    """DescribeConfigs answer: per resource, config name -> (value, source)."""
    payload = decode_response(DESCRIBE_CONFIGS, version, frame)
    return [{c.name: (c.value, int(c.config_source)) for c in r.configs} for r in payload.results]


def _legacy_create_topics_items(version: int, frame: bytes) -> list[Item]:
    """CreateTopics v0 (name, code) and v1 (name, code, message) answers, read by hand."""
    offset = 4  # correlation id
    (count,) = struct.unpack_from(">i", frame, offset)
    offset += 4
    found: list[Item] = []
    for _ in range(count):
        name, offset = _string(frame, offset)
        (code,) = struct.unpack_from(">h", frame, offset)
        offset += 2
        message = None
        if version == 1:
            message, offset = _string(frame, offset)
        found.append((name, code, message))
    assert offset == len(frame), "trailing bytes in the answer"
    return found


def _string(frame: bytes, offset: int) -> tuple[Any, int]:
    (size,) = struct.unpack_from(">h", frame, offset)
    offset += 2
    if size < 0:
        return None, offset
    return frame[offset : offset + size].decode(), offset + size


def upstream(**options: Any) -> UpstreamConfig:
    return UpstreamConfig(bootstrap_servers=(HostPort(host="127.0.0.1", port=9092),), **options)
