"""Shared fixtures: one real Tansu broker for the session, the real gateway in front of it."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.config import HostPort
from gateway.embedded import EmbeddedBroker, free_port
from tests.scripted import ScriptedCluster
from tests.support import BrokerTap, GatewayThread, gateway_config


@pytest.fixture(scope="session")
def broker() -> Iterator[HostPort]:
    """A real Tansu broker (memory storage) for the whole session; gone with the test process
    even when it is killed (a CI timeout) and its teardown never runs."""
    with EmbeddedBroker(with_parent=True) as embedded:
        yield embedded.address


@pytest.fixture
def gateway(broker: HostPort) -> Iterator[GatewayThread]:
    """The real gateway on free loopback ports, in front of the session broker."""
    running = GatewayThread(gateway_config(broker)).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local SparkSession for every test that needs one (``local[1]``: the machine is
    shared). Created only when a test asks for it."""
    from pyspark.sql import SparkSession

    # Python workers in this interpreter, with the project's packages (google-re2 for the
    # policies a replay loads), as kpg audit has them in local mode.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    session = (
        SparkSession.builder.master("local[1]")
        .appName("kpg-audit-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.default.parallelism", "1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def tapped_broker() -> Iterator[BrokerTap]:
    """A second real broker that advertises a recording relay (the tap) as its address, so
    every connection to it, node connections included, is recorded."""
    tap_port = free_port()
    with EmbeddedBroker(advertised_port=tap_port, with_parent=True) as embedded:
        tap = BrokerTap(embedded.address, port=tap_port)
        tap.start()
        try:
            yield tap
        finally:
            tap.stop()


@pytest.fixture
def tap(tapped_broker: BrokerTap) -> BrokerTap:
    """The tapped broker, with what earlier tests sent through it forgotten."""
    tapped_broker.requests.clear()
    return tapped_broker


@pytest.fixture
def scripted_cluster() -> Iterator[ScriptedCluster]:
    """An empty scripted cluster (``tests/scripted.py``), closed after the test."""
    cluster = ScriptedCluster()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def two_gateways(broker: HostPort) -> Iterator[tuple[GatewayThread, GatewayThread]]:
    """Two gateways sharing one Kafka state topic: A reads it every 0.2 s, B every 5 s."""
    state_topic = f"kpg-state-{uuid.uuid4().hex[:10]}"

    def shared(refresh_interval_s: float) -> GatewayThread:
        state = {"store": "kafka", "topic": state_topic, "refresh_interval_s": refresh_interval_s}
        return GatewayThread(gateway_config(broker, state=state)).start()

    a = shared(0.2)
    try:
        b = shared(5.0)
        try:
            yield a, b
        finally:
            b.stop()
    finally:
        a.stop()
