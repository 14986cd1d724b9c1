"""Fixtures shared by the adversarial modules."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.support import BrokerTap, GatewayThread, gateway_config, topic_with_id


@pytest.fixture
def fetch_setup(tap: BrokerTap) -> Iterator[tuple[GatewayThread, str, uuid.UUID]]:
    """A gateway in front of the tap, and a topic (name and id) created behind it; the tap's
    record starts empty."""
    topic, topic_id = topic_with_id(tap.address)
    gw = GatewayThread(gateway_config(tap.address)).start()
    tap.requests.clear()
    try:
        yield gw, topic, topic_id
    finally:
        gw.stop()
