"""Routes to stall the gateway through record validation (issue 11 item 10): batches that
cost far more to read than to send. A 9 KB zstd batch declaring 6,000,000 records held the
event loop for seconds while every other client waited. Each case runs the real gateway in
front of the tapped real broker: the bomb is refused fast, with a message naming the limit,
audited, never forwarded (in dry-run mode too), and other connections are answered while a
long validation is under way."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import zstandard
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32, i32Timedelta

from protocol.codec import decode_response
from protocol.records import CompressionType
from spark_audit.event import AuditEvent
from tests.batches import HEADER_SIZE, batch_with, record, reframe, uncompressed_batch
from tests.inproc.test_record_validation import create_validated_topic
from tests.support import BrokerTap, GatewayThread, RawClient, gateway_config, wait_for
from tests.unit.test_record_budget import TINY, batch_of

pytestmark = pytest.mark.adversarial

PRODUCE, API_VERSIONS = 0, 18
ANSWERED_WITHIN_S = 5.0
"""Generous: the refusals take milliseconds; the bombs took 7 s and more before."""


def inflation_bomb() -> bytes:
    """About 12 KB of zstd: 120,000 records of 1 KiB of zeros, 120 MiB once inflated,
    within the records budget and past the inflated bytes one (100 MiB)."""
    one = uncompressed_batch((record(0, None, bytes(1024)),))[HEADER_SIZE:]
    compressor = zstandard.ZstdCompressor().compressobj()
    chunk = one * 1000
    section = b"".join([compressor.compress(chunk) for _ in range(120)] + [compressor.flush()])
    return reframe(
        uncompressed_batch((record(0, None, None),)),
        records_section=section,
        attributes=int(CompressionType.ZSTD),
        record_count=120_000,
    )


BOMBS: dict[str, tuple[Callable[[], bytes], str]] = {
    # name: (the partition's records, the limit the refusal names)
    "6,000,000 records declared in a few KB of zstd": (
        lambda: batch_of(TINY * 6_000_000, 6_000_000),
        "declare 6000000 records, 5000000 over the record validation budget of 1000000 "
        "records per produce request (limits: record.validation.max.records)",
    ),
    "120 MiB of records in 12 KB of zstd": (
        inflation_bomb,
        "over the record validation budget of 104857600 inflated bytes per produce request "
        "(limits: record.validation.max.inflated.bytes)",
    ),
    "one record of 64 MiB of zeros in zstd": (
        lambda: batch_with("zstd", (record(0, b"k", bytes(64 * 1024 * 1024)),)),
        "over the record validation limit of 1048588 bytes per record "
        "(limits: record.validation.max.record.bytes)",
    ),
}


@contextmanager
def gateway_with(tap: BrokerTap, spool: Path, **policies: Any) -> Iterator[GatewayThread]:
    """The real gateway in front of the tapped broker, auditing to ``spool``."""
    config = gateway_config(
        tap.address, policies=policies, audit={"spool_dir": str(spool), "fsync": "always"}
    )
    gw = GatewayThread(config).start()
    try:
        yield gw
    finally:
        gw.stop()


def produce(topic: str, records: bytes, acks: int = 1) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None,
        acks=i16(acks),
        timeout=i32Timedelta.parse(timedelta(seconds=10)),
        topic_data=(
            TopicProduceData(
                name=TopicName(topic),
                partition_data=(PartitionProduceData(index=i32(0), records=records),),
            ),
        ),
    )


def audit_events(spool: Path, resource: str) -> list[AuditEvent]:
    events = []
    for path in sorted(spool.glob("events-*.jsonl")) + sorted(spool.glob(".events-*.open")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip() and (event := AuditEvent.from_json(line)).resource_name == resource:
                events.append(event)
    return events


@pytest.mark.parametrize("mode", ["enforce", "dry-run"])
@pytest.mark.parametrize("bomb", list(BOMBS))
def test_a_bomb_is_refused_fast_audited_and_never_forwarded(
    tap: BrokerTap, tmp_path: Path, bomb: str, mode: str
) -> None:
    """Dry-run mode passes what a policy rejects, never what the gateway did not read
    through: a bomb is refused there too."""
    build, limit = BOMBS[bomb]
    records = build()
    assert len(records) < 16 * 1024
    spool = tmp_path / "spool"
    with gateway_with(tap, spool, **{"record.validation.policy.mode": mode}) as gw:
        topic = create_validated_topic(gw.bootstrap)
        tap.requests.clear()

        client = RawClient(gw.bootstrap, timeout=ANSWERED_WITHIN_S)
        answer = client.request(PRODUCE, 9, produce(topic, records))

        (partition,) = answer.responses[0].partition_responses
        assert partition.error_code == 87  # INVALID_RECORD
        assert limit in (partition.error_message or "")
        assert PRODUCE not in tap.api_keys()
        assert wait_for(lambda: audit_events(spool, f"{topic}-0"))
        (event,) = audit_events(spool, f"{topic}-0")
        assert (event.api, event.verdict, event.error_code) == ("Produce", "denied", 87)
        assert limit in (event.message or "")


def test_other_connections_are_answered_while_a_long_validation_runs(
    tap: BrokerTap, tmp_path: Path
) -> None:
    """A million records that all fail, within the budget: seconds of work for the gateway.
    Meanwhile another connection's ApiVersions and Produce are answered, and before the
    bomb's own answer: the validation takes turns with them instead of holding the loop."""
    with gateway_with(tap, tmp_path / "spool") as gw:
        bombed = create_validated_topic(gw.bootstrap)
        other = create_validated_topic(gw.bootstrap)
        bomb = batch_of(TINY * 1_000_000, 1_000_000)
        fine = batch_with(
            "none", (record(0, b"k", b"v", ((b"trace-id", b"t"),)),), idempotent=False
        )
        bomber = RawClient(gw.bootstrap, timeout=120)
        neighbour = RawClient(gw.bootstrap, timeout=ANSWERED_WITHIN_S)
        neighbour.request(
            API_VERSIONS,
            3,
            ApiVersionsRequest(client_software_name="t", client_software_version="1"),
        )  # connected upstream

        bomb_answered: list[float] = []
        bomb_sent = threading.Event()

        def send_bomb() -> None:
            cid = bomber.send(PRODUCE, 9, produce(bombed, bomb))
            bomb_sent.set()
            frame = bomber.recv_frame()
            bomb_answered.append(time.monotonic())
            assert int.from_bytes(frame[:4], "big") == cid
            answer = decode_response(PRODUCE, 9, frame)
            assert answer.responses[0].partition_responses[0].error_code == 87

        bombing = threading.Thread(target=send_bomb)
        bombing.start()
        try:
            # Its 7 MB handed over (the gateway reads the rest at once), the gateway is
            # reading the bomb's records, seconds of work.
            assert bomb_sent.wait(60)
            time.sleep(0.3)
            versions = neighbour.request(
                API_VERSIONS,
                3,
                ApiVersionsRequest(client_software_name="t", client_software_version="1"),
            )
            produced = neighbour.request(PRODUCE, 9, produce(other, fine))
            neighbour_answered = time.monotonic()
        finally:
            bombing.join(120)

        assert versions.error_code == 0
        assert produced.responses[0].partition_responses[0].error_code == 0
        assert bomb_answered and neighbour_answered < bomb_answered[0]
