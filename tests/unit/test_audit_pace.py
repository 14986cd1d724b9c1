"""``limits."client.audit.events.per.sec"``: the per-client budget of audit events, on a clock
the test moves (the adversarial case, tests/adversarial/test_audit_volume.py, runs it in the
real gateway)."""

from __future__ import annotations

import asyncio

import pytest

from gateway import limits
from gateway.limits import AUDIT_BURST_S, AuditPace, client_key
from gateway.metrics import GatewayMetrics

ALICE = ("principal", "User:alice")
BOB = ("principal", "User:bob")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def pace(rate: int, clock: Clock) -> AuditPace:
    return AuditPace(rate, GatewayMetrics(), clock=clock)


def test_a_client_spends_ten_seconds_of_the_rate_before_it_waits(clock: Clock) -> None:
    budget = pace(100, clock)
    assert budget.balance(ALICE) == 100 * AUDIT_BURST_S
    budget.charge(ALICE, 1000)
    assert budget.delay(ALICE) == 0
    budget.charge(ALICE, 250)
    assert budget.delay(ALICE) == pytest.approx(2.5)
    clock.now += 1
    assert budget.delay(ALICE) == pytest.approx(1.5)
    clock.now += 1.5
    assert budget.delay(ALICE) == 0
    clock.now += 60
    assert budget.balance(ALICE) == 100 * AUDIT_BURST_S  # full again, never more


def test_clients_have_budgets_of_their_own(clock: Clock) -> None:
    budget = pace(10, clock)
    budget.charge(ALICE, 200)
    assert budget.delay(ALICE) == pytest.approx(10)
    assert budget.delay(BOB) == 0


def test_unlimited_never_waits_and_a_reload_to_it_forgets_every_debt(clock: Clock) -> None:
    budget = pace(-1, clock)
    budget.charge(ALICE, 10**9)
    assert budget.delay(ALICE) == 0
    budget.set_rate(10)
    budget.charge(ALICE, 200)
    assert budget.delay(ALICE) > 0
    budget.set_rate(-1)
    assert budget.delay(ALICE) == 0


def test_clients_back_at_a_full_budget_are_forgotten_past_the_cap(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "AUDIT_PACE_KEYS_KEPT", 3)
    budget = pace(10, clock)
    budget.charge(ALICE, 1000)  # in debt: kept
    for index in range(3):
        budget.charge(("host", f"10.0.0.{index}"), 1)
    clock.now += 1  # the hosts' single events are paid back; alice is still 800 behind
    budget.charge(BOB, 1)
    assert len(budget._balances) <= 3
    assert budget.delay(ALICE) > 0


def test_a_waiting_client_waits_out_what_its_other_connections_spend(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wait looks again when it ends: another connection of the client may have been
    charged meanwhile."""
    budget = pace(10, clock)
    budget.charge(ALICE, 110)  # one second of debt
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def fake_sleep(delay: float) -> None:
        slept.append(delay)
        clock.now += delay
        if len(slept) == 1:
            budget.charge(ALICE, 20)  # spent by another connection while this one waited
        await real_sleep(0)

    async def main() -> None:
        monkeypatch.setattr(asyncio, "sleep", fake_sleep)
        await budget.wait(ALICE)

    asyncio.run(main())
    assert slept == [pytest.approx(1), pytest.approx(2)]
    assert budget.delay(ALICE) == 0


@pytest.mark.parametrize(
    ("principal", "address", "key"),
    [
        ("User:alice", "10.0.0.1:5000", ("principal", "User:alice")),
        (None, "10.0.0.1:5000", ("host", "10.0.0.1")),
        (None, "10.0.0.1:6000", ("host", "10.0.0.1")),
        (None, "::1:5000", ("host", "::1")),
        (None, "/run/kpg.sock", ("host", "/run/kpg.sock")),
    ],
)
def test_a_client_is_its_principal_or_else_its_address(
    principal: str | None, address: str, key: tuple[str, str]
) -> None:
    assert client_key(principal, address) == key
