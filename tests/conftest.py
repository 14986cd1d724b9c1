"""Shared fixtures: one real Tansu broker for the session, the real gateway in front of it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from gateway.config import HostPort
from gateway.embedded import EmbeddedBroker, free_port
from tests.support import BrokerTap, GatewayThread, gateway_config


@pytest.fixture(scope="session")
def broker() -> Iterator[HostPort]:
    """A real Tansu broker (memory storage) for the whole session."""
    with EmbeddedBroker() as embedded:
        yield embedded.address


@pytest.fixture
def gateway(broker: HostPort) -> Iterator[GatewayThread]:
    """The real gateway on free loopback ports, in front of the session broker."""
    running = GatewayThread(gateway_config(broker)).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def tapped_broker() -> Iterator[BrokerTap]:
    """A second real broker that advertises a recording relay (the tap) as its address, so
    every connection to it, node connections included, is recorded."""
    tap_port = free_port()
    with EmbeddedBroker(advertised_port=tap_port) as embedded:
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
