"""Fixtures shared by the adversarial modules."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

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


@contextlib.contextmanager
def gateways_on_one_state(
    tap: BrokerTap, state: dict[str, str]
) -> Iterator[tuple[GatewayThread, GatewayThread]]:
    """Two gateways on one state store: the first reaches the broker through the tap, the
    second straight."""
    first = GatewayThread(gateway_config(tap.address, state=state)).start()
    second = GatewayThread(gateway_config(tap.broker, state=state)).start()
    try:
        yield first, second
    finally:
        tap.release_requests()
        tap.release_answers()
        second.stop()
        first.stop()


@pytest.fixture
def sqlite_gateways(
    tap: BrokerTap, tmp_path: Path
) -> Iterator[tuple[GatewayThread, GatewayThread]]:
    """On a SQLite file: the tap holding every answer would hold the state topic's too."""
    with gateways_on_one_state(tap, {"path": str(tmp_path / "state.db")}) as both:
        yield both
