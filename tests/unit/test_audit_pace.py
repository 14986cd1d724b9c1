"""``limits."client.audit.events.per.sec"``: the per-client budget of audit events, on a clock
the test moves (the adversarial case, tests/adversarial/test_audit_volume.py, runs it in the
real gateway)."""

from __future__ import annotations

import asyncio

import pytest

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


def test_clients_back_at_a_full_budget_are_forgotten(clock: Clock) -> None:
    budget = pace(10, clock)
    budget.charge(ALICE, 1000)  # in debt: kept
    for index in range(3):
        budget.charge(("host", f"10.0.0.{index}"), 1)
    clock.now += 1  # the hosts' single events are paid back; alice is still 800 behind
    budget.charge(BOB, 1)
    assert set(budget._balances) == {ALICE, BOB}
    assert budget.delay(ALICE) > 0
    clock.now += 100  # alice's budget is full again (1,000 events at 10 a second, and 100)
    budget.charge(BOB, 1)
    assert set(budget._balances) == {BOB}


class CountingClock(Clock):
    """Counts its readings; past ``most`` the test has failed (it would run for minutes)."""

    def __init__(self, most: int) -> None:
        super().__init__()
        self.readings = 0
        self.most = most

    def __call__(self) -> float:
        self.readings += 1
        assert self.readings <= self.most, "every charge read every client's budget"
        return self.now


def test_many_clients_in_debt_at_once_cost_each_charge_little() -> None:
    """Past 10,000 clients kept, each charge looked at every client's budget to forget the
    full ones, and clients in debt cannot be forgotten: 20,000 addresses in debt at once (an
    IPv6 /64 holds as many as anyone likes) held the event loop for 41 s over their 20,000
    charges. Each charge now reads the clock a few times, however many clients are in debt."""
    clock = CountingClock(most=200_000)
    budget = pace(100, clock)
    for index in range(20_000):
        budget.charge(("host", f"2001:db8::{index:x}"), 2000)  # 20 s in debt each
    assert len(budget._balances) == 20_000  # none forgotten: each still owes
    assert budget.delay(("host", "2001:db8::0")) > 0
    clock.now += 30
    budget.charge(ALICE, 1)
    assert set(budget._balances) == {ALICE}


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
