"""Routes around ``record.validation.policy`` through batches the rules read differently from
the broker. Each case produces to a validated topic (required header ``trace-id``) through the
real gateway in front of the tapped real broker, and checks what reached it.

A control batch (attributes bit 5) holds COMMIT and ABORT markers, which only a transaction
coordinator writes; Kafka refuses one from a client ("Clients are not allowed to write control
records", INVALID_RECORD). The gateway read its records as data and, when they passed the
rules, forwarded it: the test broker (Tansu) stored it, a marker no coordinator wrote.

Routes found closed, each with a test elsewhere: several batches in one partition (every batch
is read: tests/unit/test_record_policies.py), a record_count that disagrees with the records
(CORRUPT_MESSAGE: tests/unit/test_records.py), magic 0 and 1 message sets (CORRUPT_MESSAGE,
never forwarded: tests/unit/test_records.py), transactional batches (read like any other).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.batches import produce_v9, record, reframe, uncompressed_batch
from tests.inproc.test_record_validation import create_validated_topic
from tests.support import BrokerTap, GatewayThread, RawClient, gateway_config, policy_message

pytestmark = pytest.mark.adversarial

PRODUCE = 0
INVALID_RECORD = 87
CONTROL, TRANSACTIONAL = 0x20, 0x10
TRACED = ((b"trace-id", b"t"),)


@pytest.fixture(params=["enforce", "dry-run"])
def gw(tap: BrokerTap, request: pytest.FixtureRequest) -> Iterator[GatewayThread]:
    """The gateway in front of the tapped broker, record validation in the mode given."""
    policies = {"record.validation.policy.mode": request.param}
    running = GatewayThread(gateway_config(tap.address, policies=policies)).start()
    try:
        yield running
    finally:
        running.stop()


def control_batch(attributes: int) -> bytes:
    """A control batch of one record that passes the topic's rules (a data record's fields)."""
    idempotent = bool(attributes & TRANSACTIONAL)
    plain = uncompressed_batch((record(0, b"k", b"v", TRACED),), idempotent=idempotent)
    return reframe(plain, attributes=attributes)


@pytest.mark.parametrize(
    "records",
    [
        pytest.param(control_batch(CONTROL), id="control"),
        pytest.param(control_batch(CONTROL | TRANSACTIONAL), id="transactional-control"),
        pytest.param(
            uncompressed_batch((record(0, b"k", b"v", TRACED),), idempotent=False)
            + control_batch(CONTROL),
            id="control-after-a-data-batch",
        ),
    ],
)
def test_a_control_batch_from_a_client_never_reaches_the_broker(
    gw: GatewayThread, tap: BrokerTap, records: bytes
) -> None:
    """Refused in dry-run mode too: Kafka refuses it whatever the rules say."""
    topic = create_validated_topic(gw.bootstrap)
    tap.requests.clear()
    answer: Any = RawClient(gw.bootstrap).request(PRODUCE, 9, produce_v9({topic: {0: records}}))
    (partition,) = answer.responses[0].partition_responses
    assert (int(partition.error_code), policy_message(partition.error_message)) == (
        INVALID_RECORD,
        f"Clients are not allowed to write control records in topic partition {topic}-0.",
    )
    assert PRODUCE not in tap.api_keys()
