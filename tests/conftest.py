"""Shared fixtures: one real Tansu broker for the session, the real gateway in front of it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from gateway.config import HostPort
from gateway.embedded import EmbeddedBroker
from tests.support import GatewayThread, gateway_config


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
