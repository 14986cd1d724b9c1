"""``max.connection.creation.rate`` and its per-address form, on a test clock: new
connections admitted per one-second window, refused ones not counted."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.config import LimitsConfig
from gateway.limits import ConnectionLimits
from gateway.metrics import GatewayMetrics

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def limits_of(clock: Clock, **limits: int) -> tuple[ConnectionLimits, GatewayMetrics]:
    metrics = GatewayMetrics()
    return ConnectionLimits(replace(LimitsConfig(), **limits), metrics, clock), metrics


def refused(metrics: GatewayMetrics, reason: str) -> float:
    value = metrics.registry.get_sample_value("kpg_connections_refused_total", {"reason": reason})
    return value or 0.0


def test_an_address_past_its_rate_is_refused_until_the_next_second() -> None:
    clock = Clock()
    limits, metrics = limits_of(clock, max_connection_creation_rate_per_ip=3)
    assert [limits.admit("10.0.0.1") for _ in range(5)] == [True, True, True, False, False]
    assert refused(metrics, "max.connection.creation.rate.per.ip") == 2
    assert limits.admit("10.0.0.2"), "another address has a rate of its own"
    clock.now += 0.99
    assert not limits.admit("10.0.0.1")
    clock.now += 0.02
    assert limits.admit("10.0.0.1"), "a new second, a new allowance"


def test_the_rate_over_every_address_is_one_allowance() -> None:
    clock = Clock()
    limits, metrics = limits_of(clock, max_connection_creation_rate=2)
    assert limits.admit("10.0.0.1")
    assert limits.admit("10.0.0.2")
    assert not limits.admit("10.0.0.3")
    assert refused(metrics, "max.connection.creation.rate") == 1
    clock.now += 1
    assert limits.admit("10.0.0.3")


def test_closing_a_connection_gives_back_no_creation() -> None:
    """The rate counts connections made, not held: one closed at once still counts."""
    clock = Clock()
    limits, _ = limits_of(clock, max_connection_creation_rate_per_ip=2)
    for _ in range(2):
        assert limits.admit("10.0.0.1")
        limits.release("10.0.0.1")
    assert not limits.admit("10.0.0.1")


def test_refused_connections_do_not_use_the_allowance() -> None:
    """A connection refused for another limit is not counted: a flood from one address that
    max.connections.per.ip refuses leaves the rate over every address to the others."""
    clock = Clock()
    limits, _ = limits_of(clock, max_connections_per_ip=1, max_connection_creation_rate=3)
    assert limits.admit("10.0.0.1")
    assert not any(limits.admit("10.0.0.1") for _ in range(10))
    assert limits.admit("10.0.0.2")
    assert limits.admit("10.0.0.3")


def test_a_reload_sets_the_rates_for_the_next_accept() -> None:
    clock = Clock()
    limits, _ = limits_of(clock)
    assert all(limits.admit("10.0.0.1") for _ in range(50))  # unlimited by default, as Kafka
    limits.update(replace(LimitsConfig(), max_connection_creation_rate_per_ip=1))
    assert not limits.admit("10.0.0.1")
    clock.now += 1
    assert limits.admit("10.0.0.1")
