"""Routes around the config policies through how a request names what it changes.

Kafka answers a resource named twice in one IncrementalAlterConfigs with INVALID_REQUEST
("Each resource must appear at most once."), and so does the gateway (tests/unit/
test_enforcements.py, tests/inproc/test_alter_configs.py). The gateway's dynamic client
configs have two names for one entity: ``CLIENT app``, which the gateway reads as the
connection's user and ``app``, and ``USER_CLIENT user:app``. Named both ways in one request,
each resource was judged alone against the entity as stored and both were written, so a
policy that holds two keys together (here Kafka's own rule for consumers, a heartbeat
interval below the session timeout) never saw the change it let through.

Two requests on two connections met the same problem in time: each was judged against the
entity as it was read, and both were written. A change is now written only if the entity is
still what was judged.

Against the real gateway in front of the tapped real broker; client configs are the
gateway's own and never reach the broker, so what the store holds afterwards is what counts.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from policies.api import AlterConfigV2Policy, AlterConfigV2RequestMetadata, PolicyViolation
from protocol.alter_configs import SET
from protocol.errors import UNKNOWN_SERVER_ERROR
from tests.inproc.test_client_configs import (
    CLIENT,
    INVALID_REQUEST,
    POLICY_VIOLATION,
    USER_CLIENT,
    alter,
    describe,
    set_configs,
)
from tests.support import BrokerTap, GatewayThread, gateway_config, noted, unique_name

pytestmark = pytest.mark.adversarial

SESSION, HEARTBEAT = "session.timeout.ms", "heartbeat.interval.ms"


class HeartbeatBelowSessionTimeout(AlterConfigV2Policy):
    """A consumer's heartbeat interval must stay below its session timeout (loaded by its
    module name)."""

    def validate(self, request_metadata: AlterConfigV2RequestMetadata) -> None:
        after = request_metadata.configs_after
        if SESSION in after and HEARTBEAT in after and int(after[HEARTBEAT]) >= int(after[SESSION]):
            raise PolicyViolation(f"{HEARTBEAT} must be below {SESSION}")


@pytest.fixture
def gw(tap: BrokerTap) -> Iterator[GatewayThread]:
    policies = {"alter.config.v2.policy.class.name": f"{__name__}.HeartbeatBelowSessionTimeout"}
    running = GatewayThread(gateway_config(tap.address, policies=policies)).start()
    try:
        yield running
    finally:
        running.stop()


def test_one_client_entity_named_two_ways_in_one_request_is_refused(gw: GatewayThread) -> None:
    client_id = unique_name("app")
    entity = f"ANONYMOUS:{client_id}"  # an unauthenticated connection's user
    set_configs(gw.bootstrap, {entity: {SESSION: "45000", HEARTBEAT: "3000"}})
    together = [(USER_CLIENT, entity, [(HEARTBEAT, SET, "40000"), (SESSION, SET, "10000")])]
    assert alter(gw.bootstrap, together) == [
        (USER_CLIENT, entity, POLICY_VIOLATION, noted(f"{HEARTBEAT} must be below {SESSION}"))
    ]

    split = [
        (CLIENT, client_id, [(HEARTBEAT, SET, "40000")]),
        (USER_CLIENT, entity, [(SESSION, SET, "10000")]),
    ]
    message = noted(
        f"Each resource must appear at most once: {client_id!r} and {entity!r} both name the "
        f"dynamic client configs of {entity}."
    )
    assert alter(gw.bootstrap, split) == [
        (CLIENT, client_id, INVALID_REQUEST, message),
        (USER_CLIENT, entity, INVALID_REQUEST, message),
    ]
    (described,) = describe(gw.bootstrap, [(USER_CLIENT, entity)])
    assert {c.name: c.value for c in described.configs} == {SESSION: "45000", HEARTBEAT: "3000"}


class HeldHeartbeatBelowSessionTimeout(HeartbeatBelowSessionTimeout):
    """The same rule; a call judging a heartbeat interval of ``HELD`` waits (on a policy
    thread) while ``gate`` is closed, having set ``holding``: a test decides when it ends."""

    HELD = "40000"
    gate = threading.Event()
    holding = threading.Event()

    def validate(self, request_metadata: AlterConfigV2RequestMetadata) -> None:
        cls = HeldHeartbeatBelowSessionTimeout
        if request_metadata.configs_after.get(HEARTBEAT) == cls.HELD and not cls.gate.is_set():
            cls.holding.set()
            cls.gate.wait(30)
        super().validate(request_metadata)


def test_two_client_config_changes_at_once_are_judged_on_each_other(tap: BrokerTap) -> None:
    """A client config change was judged against the entity read before its policies ran and
    written after, with nothing held between: a second request written meanwhile was not
    seen, so each of two requests passed a policy that their sum broke (Kafka's controller
    judges and applies one change at a time). The write is now made only if the entity is
    still what was judged (one SQLite transaction, so across workers too); the first request
    gets an error saying so and nothing of it is written."""
    held = HeldHeartbeatBelowSessionTimeout
    policies = {
        "alter.config.v2.policy.class.name": f"{__name__}.{held.__name__}",
        "policy.timeout.ms": 60_000,
    }
    gw = GatewayThread(gateway_config(tap.address, policies=policies)).start()
    held.gate.set()
    held.holding.clear()
    try:
        entity = f"alice:{unique_name('app')}"
        set_configs(gw.bootstrap, {entity: {SESSION: "45000", HEARTBEAT: "3000"}})
        held.gate.clear()
        answers: list[Any] = []
        first = threading.Thread(
            target=lambda: answers.extend(
                alter(gw.bootstrap, [(USER_CLIENT, entity, [(HEARTBEAT, SET, held.HELD)])])
            )
        )
        first.start()
        assert held.holding.wait(30)  # the first is being judged, against 45000 / 3000
        second = alter(gw.bootstrap, [(USER_CLIENT, entity, [(SESSION, SET, "10000")])])
        held.gate.set()
        first.join(60)
        (described,) = describe(gw.bootstrap, [(USER_CLIENT, entity)])
    finally:
        held.gate.set()
        gw.stop()
    assert second == [(USER_CLIENT, entity, 0, None)]  # 10000 over 3000: allowed
    [(_, _, code, message)] = answers
    assert code == UNKNOWN_SERVER_ERROR
    assert "changed while this change was judged" in (message or "")
    after = {c.name: int(c.value or 0) for c in described.configs}
    assert after == {SESSION: 10000, HEARTBEAT: 3000}, (answers, after)
