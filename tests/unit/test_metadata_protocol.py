"""protocol.metadata: Metadata requests read as Kafka reads them, reissued with auto-creation
off, and answers written in every version kio ships, gateway entries in their place."""

from __future__ import annotations

import dataclasses
import importlib
import uuid
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32, i32Timedelta

from protocol import metadata as md
from protocol.addresses import METADATA
from protocol.codec import Undecodable, decode_request, decode_response, encode_request
from protocol.framing import parse_request_header
from protocol.results import ItemError

pytestmark = pytest.mark.unit

VERSIONS = range(md.VERSIONS.min_version, md.VERSIONS.max_version + 1)


def module(version: int, kind: str) -> Any:
    return importlib.import_module(f"kio.schema.metadata.v{version}.{kind}")


def make(cls: type, **values: Any) -> Any:
    """``cls`` from the ``values`` it has fields for."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def request_frame(version: int, names: list[str] | None, allow_auto: bool = True) -> bytes:
    m = module(version, "request")
    topics = (
        None
        if names is None
        else tuple(make(m.MetadataRequestTopic, name=TopicName(n), topic_id=None) for n in names)
    )
    payload = make(
        m.MetadataRequest,
        topics=topics,
        allow_auto_topic_creation=allow_auto,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    return encode_request(METADATA, version, 7, "unit", payload)[4:]


def read(frame: bytes) -> md.MetadataRequest:
    return md.read_request(parse_request_header(frame), frame)


def broker_answer(version: int, topics: dict[str, int]) -> Any:
    """A broker's answer of ``version``: one broker, each topic with its error code (and one
    partition when the code is 0)."""
    m = module(version, "response")
    partition = make(
        m.MetadataResponsePartition,
        error_code=ErrorCode.none,
        partition_index=i32(0),
        leader_id=BrokerId(1),
        leader_epoch=i32(0),
        replica_nodes=(BrokerId(1),),
        isr_nodes=(BrokerId(1),),
        offline_replicas=(),
    )
    return make(
        m.MetadataResponse,
        throttle_time=i32Timedelta.parse(timedelta(0)),
        brokers=(make(m.MetadataResponseBroker, node_id=BrokerId(1), host="gw", port=i32(9101)),),
        cluster_id="c",
        controller_id=BrokerId(1),
        topics=tuple(
            make(
                m.MetadataResponseTopic,
                error_code=ErrorCode(code),
                name=TopicName(name),
                topic_id=uuid.uuid4(),
                is_internal=False,
                partitions=(partition,) if code == 0 else (),
            )
            for name, code in topics.items()
        ),
        cluster_authorized_operations=i32(-2147483648),
        error_code=ErrorCode.none,
    )


# --- reading ------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_a_request_naming_topics_asks_for_auto_creation_as_its_version_says(version: int) -> None:
    asked = read(request_frame(version, ["a", "b", "a"], allow_auto=False))
    assert asked.names == ("a", "b", "a")
    assert not asked.all_topics
    assert asked.allow_auto_topic_creation is (version < 4)
    assert asked.may_create is (version < 4)
    assert read(request_frame(version, ["a"], allow_auto=True)).may_create


@pytest.mark.parametrize("version", VERSIONS)
def test_a_request_for_every_topic_creates_nothing(version: int) -> None:
    every = read(request_frame(version, [] if version == 0 else None))
    assert every.all_topics and not every.may_create
    if version > 0:
        none = read(request_frame(version, []))
        assert not none.all_topics and not none.may_create


def test_bytes_after_the_body_are_ignored_as_kafka_ignores_them() -> None:
    """librdkafka 2.x sends three after a v12 request for every topic; Kafka's parser reads
    the body and stops. A request with auto-creation asked for stays one that asks."""
    frame = request_frame(12, ["t"]) + b"\x01\x00\x00"
    asked = read(frame)
    assert asked.names == ("t",) and asked.may_create


def test_a_malformed_body_is_undecodable() -> None:
    frame = request_frame(12, ["topic"])
    with pytest.raises(Undecodable):
        read(frame[:-6])


# --- reissuing ----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_reissued_with_auto_creation_off_naming_only_what_is_kept(version: int) -> None:
    request = read(request_frame(version, ["keep", "drop", "keep"]))
    reissued = md.reissued(request, "client-7", keep={"keep"}, allow_auto_topic_creation=False)
    frame = reissued.frame(99)
    header = parse_request_header(frame)
    payload = decode_request(header, frame)

    assert header.api_version == max(version, 4) == reissued.api_version
    assert header.client_id == "client-7" and header.correlation_id == 99
    assert [t.name for t in payload.topics] == ["keep", "keep"]
    assert payload.allow_auto_topic_creation is False


def test_reissued_keeps_topics_asked_for_by_id() -> None:
    m = module(12, "request")
    topic_id = uuid.uuid4()
    payload = m.MetadataRequest(
        topics=(
            m.MetadataRequestTopic(name=None, topic_id=topic_id),
            m.MetadataRequestTopic(name=TopicName("x/"), topic_id=None),
        ),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    request = read(encode_request(METADATA, 12, 1, "unit", payload)[4:])
    assert request.names == ("x/",)
    reissued = md.reissued(request, None, keep=(), allow_auto_topic_creation=False)
    assert [t.topic_id for t in reissued.payload.topics] == [topic_id]


# --- answering ----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_the_answer_has_the_clients_layout_and_the_gateways_entries(version: int) -> None:
    request = read(request_frame(version, ["bad/", "denied", "there", "denied"]))
    broker = broker_answer(md.broker_version(version), {"denied": 3, "there": 0, "other": 0})
    local = {
        "bad/": ItemError(error_code=17, error_message="illegal"),
        "denied": ItemError(error_code=29, error_message="policy"),
    }
    frame = md.answer(request, 4242, broker, local)
    answer = decode_response(METADATA, version, frame)

    assert int.from_bytes(frame[:4], "big") == 4242
    assert [(t.name, int(t.error_code), len(t.partitions)) for t in answer.topics] == [
        ("denied", 29, 0),
        ("there", 0, 1),
        ("bad/", 17, 0),
    ]
    assert [(b.node_id, b.host, b.port) for b in answer.brokers] == [(1, "gw", 9101)]
    for entry in answer.topics[::2]:
        if hasattr(entry, "topic_id"):
            assert entry.topic_id is None  # the zero id on the wire, which kio reads as None


def test_an_answer_for_every_topic_keeps_every_topic() -> None:
    request = read(request_frame(12, None))
    broker = broker_answer(12, {"a": 0, "b": 0})
    answer = decode_response(METADATA, 12, md.answer(request, 1, broker, {}))
    assert [t.name for t in answer.topics] == ["a", "b"]


# --- creating -----------------------------------------------------------------------------------


def test_the_creation_asks_for_the_judged_counts_under_the_clients_id() -> None:
    request = md.create_topics(
        ["a", "b"], num_partitions=6, replication_factor=2, timeout_ms=5000, client_id="app"
    )
    frame = request.frame(5)
    header = parse_request_header(frame)
    payload = decode_request(header, frame)

    assert (header.api_key, header.api_version, header.client_id) == (19, 4, "app")
    assert [(t.name, t.num_partitions, t.replication_factor) for t in payload.topics] == [
        ("a", 6, 2),
        ("b", 6, 2),
    ]
    assert not payload.validate_only and all(not t.configs for t in payload.topics)


def test_created_reads_each_topics_result() -> None:
    m = importlib.import_module("kio.schema.create_topics.v4.response")
    answer = m.CreateTopicsResponse(
        throttle_time=i32Timedelta.parse(timedelta(0)),
        topics=(
            m.CreatableTopicResult(name="a", error_code=ErrorCode.none, error_message=None),
            m.CreatableTopicResult(
                name="b", error_code=ErrorCode.topic_authorization_failed, error_message="no"
            ),
        ),
    )
    assert md.created(answer) == {
        "a": ItemError(error_code=0),
        "b": ItemError(error_code=29, error_message="no"),
    }
