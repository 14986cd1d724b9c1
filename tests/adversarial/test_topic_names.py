"""Illegal topic names in the admin APIs: each refused with INVALID_TOPIC_EXCEPTION (17) before
the broker, which (the test broker, Tansu) would otherwise create, delete or reconfigure a
topic by a name no Kafka topic can have, or an alias of a real one (``T/`` lands in ``T``)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.types import TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta

from tests.support import BrokerTap, GatewayThread, RawClient, gateway_config

pytestmark = pytest.mark.adversarial

INVALID_TOPIC_EXCEPTION = 17
TIMEOUT = i32Timedelta.parse(timedelta(seconds=5))
NAMES = ["T/", "/T", "..", "Evil Name", "x" * 250]


def _module(api: str, version: int) -> Any:
    return importlib.import_module(f"kio.schema.{api}.v{version}.request")


def _create_topics(name: str) -> Any:
    m = _module("create_topics", 7)
    topic = m.CreatableTopic(
        name=TopicName(name),
        num_partitions=i32(1),
        replication_factor=i16(1),
        assignments=(),
        configs=(),
    )
    return m.CreateTopicsRequest(topics=(topic,), timeout=TIMEOUT, validate_only=False)


def _delete_topics(name: str) -> Any:
    m = _module("delete_topics", 6)
    return m.DeleteTopicsRequest(
        topics=(m.DeleteTopicState(name=TopicName(name), topic_id=None),), timeout=TIMEOUT
    )


def _create_partitions(name: str) -> Any:
    m = _module("create_partitions", 3)
    topic = m.CreatePartitionsTopic(name=TopicName(name), count=i32(4), assignments=None)
    return m.CreatePartitionsRequest(topics=(topic,), timeout=TIMEOUT, validate_only=False)


def _alter_configs(name: str) -> Any:
    m = _module("incremental_alter_configs", 1)
    config = m.AlterableConfig(name="retention.ms", config_operation=i8(0), value="1")
    resource = m.AlterConfigsResource(resource_type=i8(2), resource_name=name, configs=(config,))
    return m.IncrementalAlterConfigsRequest(resources=(resource,), validate_only=False)


def _codes(answer: Any, field: str) -> list[int]:
    return [int(r.error_code) for r in getattr(answer, field)]


ROUTES: list[tuple[str, int, int, Callable[[str], Any], str]] = [
    ("create-topics", 19, 7, _create_topics, "topics"),
    ("delete-topics", 20, 6, _delete_topics, "responses"),
    ("create-partitions", 37, 3, _create_partitions, "results"),
    ("incremental-alter-configs", 44, 1, _alter_configs, "responses"),
]


@pytest.fixture
def gw(tap: BrokerTap) -> Iterator[GatewayThread]:
    running = GatewayThread(gateway_config(tap.address)).start()
    tap.requests.clear()
    try:
        yield running
    finally:
        running.stop()


@pytest.mark.parametrize("name", NAMES, ids=["suffix", "prefix", "dotdot", "space", "long"])
@pytest.mark.parametrize(
    ("api_key", "version", "build", "field"),
    [r[1:] for r in ROUTES],
    ids=[r[0] for r in ROUTES],
)
def test_an_illegal_topic_name_never_reaches_the_broker(
    gw: GatewayThread,
    tap: BrokerTap,
    name: str,
    api_key: int,
    version: int,
    build: Callable[[str], Any],
    field: str,
) -> None:
    answer = RawClient(gw.bootstrap).request(api_key, version, build(name))
    assert _codes(answer, field) == [INVALID_TOPIC_EXCEPTION]
    assert api_key not in tap.api_keys()
