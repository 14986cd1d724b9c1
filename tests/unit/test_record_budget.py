"""Record validation under a per-request budget, in turns on the event loop (issue 11 item
10): the records a request declares, what its batches inflate to, one record's size; and the
reader's bounded steps that let validation give way to other connections."""

from __future__ import annotations

import asyncio
import struct
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from unittest import mock

import pytest
import uvloop
import zstandard
from crc32c import crc32c

import gateway.record_validation as validation_module
import protocol.records as records_module
from gateway.record_validation import (
    PartitionData,
    PartitionOutcome,
    RecordValidator,
    ValidationBudget,
)
from policies.records import BuiltinRecordValidationPolicy
from protocol.errors import CORRUPT_MESSAGE, INVALID_RECORD
from protocol.records import CorruptBatch, OverLimit, RecordReading, read_batches, read_records
from tests.batches import CODECS, HEADER_SIZE, batch_with, record, reframe, uncompressed_batch

pytestmark = pytest.mark.unit

TINY = uncompressed_batch((record(0, None, None),))[HEADER_SIZE:]
"""The smallest record there is: 7 bytes, null key and value, no headers (so it lacks any
header a rule requires)."""
assert len(TINY) == 7


def records_section(*records: tuple[bytes | None, bytes | None]) -> bytes:
    """The records section of a batch of (key, value) records, no headers."""
    built = tuple(record(i, key, value) for i, (key, value) in enumerate(records))
    return uncompressed_batch(built)[HEADER_SIZE:]


def batch_of(section: bytes, count: int, codec: str = "zstd") -> bytes:
    """A batch whose records section is ``section`` (compressed with ``codec``) and whose
    record_count and last_offset_delta say ``count``: a bomb when the section is many small
    records or much of one byte."""
    compression, compress = CODECS[codec]
    plain = uncompressed_batch((record(0, None, None),))
    batch = bytearray(
        reframe(
            plain,
            records_section=compress(section),
            attributes=int(compression),
            record_count=count,
        )
    )
    struct.pack_into(">i", batch, 23, count - 1)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def the_issues_bomb() -> bytes:
    """Issue 11 item 10: a few KB of zstd declaring (and holding) 6,000,000 records."""
    return batch_of(TINY * 6_000_000, 6_000_000)


@pytest.fixture
def validator() -> RecordValidator:
    return RecordValidator(BuiltinRecordValidationPolicy(), dry_run=False)


def with_budget(**budget: int) -> RecordValidator:
    return RecordValidator(
        BuiltinRecordValidationPolicy(), dry_run=False, budget=ValidationBudget(**budget)
    )


@contextmanager
def full_reader_alone() -> Iterator[None]:
    with mock.patch.object(records_module, "_native", None):
        yield


# --- the budget: declared records ---------------------------------------------------------


def test_the_issues_bomb_is_refused_from_its_header_without_reading_a_record(
    validator: RecordValidator, monkeypatch: pytest.MonkeyPatch
) -> None:
    bomb = the_issues_bomb()
    assert len(bomb) < 10_000

    def no_reading(*args: object, **kwargs: object) -> object:
        raise AssertionError("a record was read")

    monkeypatch.setattr(validation_module, "read_records", no_reading)
    outcome = validator.validate_partition("orders", 3, "trace-id", bomb)

    assert outcome.error is not None
    assert outcome.error.error_code == INVALID_RECORD
    assert outcome.error.error_message == (
        "Record batches for orders-3 declare 6000000 records, 5000000 over the record "
        "validation budget of 1000000 records per produce request (limits: "
        "record.validation.max.records); none was read or written."
    )
    assert outcome.error.record_errors == ()
    assert (outcome.records, outcome.fail_closed) == (0, True)


def test_the_records_budget_is_the_requests_not_each_partitions() -> None:
    """Partitions draw on one budget in request order; one refused unread costs nothing, so
    a later one that fits is still checked."""
    validator = with_budget(max_records=10)
    six = batch_with("none", tuple(record(i, b"k", b"v") for i in range(6)))
    three = batch_with("none", tuple(record(i, b"k", b"v") for i in range(3)))

    first, second, third = validator.validate(
        [("t", 0, "key-required", six), ("t", 1, "key-required", six), ("t", 2, "json", three)]
    )

    assert (first.error, first.records) == (None, 6)
    assert second.error is not None and second.error.error_message == (
        "Record batches for t-1 declare 6 records, 2 over the 4 left of the record validation "
        "budget of 10 records per produce request (limits: record.validation.max.records); "
        "none was read or written."
    )
    assert third.error is not None and third.error.error_code == INVALID_RECORD
    assert third.records == 3 and third.error.record_errors  # read: b"v" is not JSON


def test_the_records_budget_takes_its_count_and_not_one_more() -> None:
    def records(count: int) -> bytes:
        return batch_with("none", tuple(record(i, b"k", b"v") for i in range(count)))

    (exact,) = with_budget(max_records=6).validate([("t", 0, "key-required", records(6))])
    (over,) = with_budget(max_records=6).validate([("t", 0, "key-required", records(7))])

    assert (exact.error, exact.records) == (None, 6)
    assert over.error is not None and over.error.error_message is not None
    assert "declare 7 records, 1 over the record validation budget of 6" in (
        over.error.error_message
    )


# --- the budget: inflated bytes ------------------------------------------------------------


def test_inflation_past_the_budget_is_refused_and_spends_it() -> None:
    """What compressed batches inflate to is counted over the request; past it the partition
    is refused as soon as the reader gets there, and the budget is spent: a later compressed
    partition is refused too, an uncompressed one is still read."""
    validator = with_budget(max_inflated_bytes=1024 * 1024)
    kib = records_section(*[(b"k", bytes(1000))] * 600)  # about 600 KiB each
    small = batch_with("none", (record(0, b"k", b"v"),))

    first, second, third, fourth = validator.validate(
        [
            ("t", 0, "key-required", batch_of(kib, 600)),
            ("t", 1, "key-required", batch_of(kib, 600, "gzip")),
            ("t", 2, "key-required", small),
            ("t", 3, "key-required", batch_of(kib, 600, "lz4")),
        ]
    )

    assert first.error is None
    left = 1024 * 1024 - len(kib)
    assert second.error is not None and second.error.error_code == INVALID_RECORD
    assert second.error.error_message.startswith("Record batch for t-1 decompresses to at least ")
    assert second.error.error_message.endswith(
        f" over the {left} bytes left of the record validation budget of 1048576 inflated "
        "bytes per produce request (limits: record.validation.max.inflated.bytes); none was "
        "written."
    )
    assert second.fail_closed and second.error.record_errors == ()
    assert third.error is None and third.records == 1
    assert fourth.error is not None
    assert "over the 0 bytes left of the record validation budget" in (
        fourth.error.error_message or ""
    )


@pytest.mark.parametrize("codec", ["snappy-raw", "snappy-xerial"])
def test_a_snappy_block_over_the_budget_is_refused_before_it_is_inflated(
    codec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snappy block declares its size: the message says by how much it is over, and no
    block past the budget is inflated (a raw block may declare up to 4 GiB)."""
    validator = with_budget(max_inflated_bytes=64 * 1024)
    section = records_section((b"k", bytes(100_000)))
    uncompress = records_module.snappy.uncompress
    inflated: list[int] = []

    def counted(block: object) -> bytes:
        output: bytes = uncompress(block)
        inflated.append(len(output))
        return output

    monkeypatch.setattr(records_module.snappy, "uncompress", counted)
    (outcome,) = validator.validate([("t", 0, "key-required", batch_of(section, 1, codec))])
    assert sum(inflated) <= 64 * 1024

    assert outcome.error is not None
    block = len(section) if codec == "snappy-raw" else 32 * 1024 * 2  # the xerial blocks so far
    message = outcome.error.error_message or ""
    assert message.startswith("Record batch for t-0 decompresses to at least ")
    size = int(message.split("at least ")[1].split(" ")[0])
    assert size > 64 * 1024 and (codec == "snappy-xerial" or size == block)
    assert f"{size - 64 * 1024} over the record validation budget of 65536 inflated" in message


# --- the budget: one record ---------------------------------------------------------------


@pytest.mark.parametrize("full", [False, True], ids=["fast path", "full reader"])
@pytest.mark.parametrize("codec", ["none", "gzip", "zstd", "snappy-raw"])
def test_a_record_over_max_record_bytes_is_refused_before_it_is_read(
    codec: str, full: bool
) -> None:
    """Both readers stop at the same record with the same words, having read those before."""
    plain = uncompressed_batch(
        (record(0, b"a", b"x"), record(1, b"b", bytes(5000)), record(2, b"c", b"y"))
    )
    buffer = batch_with(
        codec, (record(0, b"a", b"x"), record(1, b"b", bytes(5000)), record(2, b"c", b"y"))
    )
    (batch,) = read_batches(buffer)
    second_size = len(plain) - HEADER_SIZE - 2 * len(records_section((b"a", b"x")))

    with full_reader_alone() if full else nullcontext():
        records = read_records(batch, RecordReading(key_bytes=-1), max_record_bytes=4096)
        with pytest.raises(OverLimit) as refused:
            list(records)

    assert str(refused.value) == (
        f"record 1 is {second_size} bytes long, more than max_record_bytes (4096)"
    )
    assert (refused.value.limit, refused.value.maximum) == ("max_record_bytes", 4096)
    assert (refused.value.record, refused.value.size) == (1, second_size)
    assert records.records_read == 1


@pytest.mark.parametrize("full", [False, True], ids=["fast path", "full reader"])
@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_max_record_bytes_counts_the_length_varint_too(codec: str, full: bool) -> None:
    """A record's size is its size_in_bytes, length varint included: exactly the limit is
    read, one byte less refuses it, in both readers."""
    buffer = batch_with(codec, (record(0, b"k", bytes(5000)),))
    (batch,) = read_batches(buffer)
    size = len(records_section((b"k", bytes(5000))))

    with full_reader_alone() if full else nullcontext():
        assert len(list(read_records(batch, RecordReading(), max_record_bytes=size))) == 1
        with pytest.raises(OverLimit) as refused:
            list(read_records(batch, RecordReading(), max_record_bytes=size - 1))
    assert refused.value.size == size


@pytest.mark.parametrize("codec", ["zstd", "none"])
def test_a_record_over_the_limit_refuses_its_partition(
    validator: RecordValidator, codec: str
) -> None:
    """Compressed or not: an uncompressed record is bounded by the frame, not by this limit."""
    big = batch_with(codec, (record(0, b"k", b"v"), record(1, b"k", bytes(2 * 1024 * 1024))))

    outcome = validator.validate_partition("t", 0, "json", big)

    assert outcome.error is not None and outcome.error.error_code == INVALID_RECORD
    assert outcome.error.error_message == (
        "Record 1 of the batches for t-0 is 2097166 bytes, 1048578 over the record validation "
        "limit of 1048588 bytes per record (limits: record.validation.max.record.bytes); none "
        "was written."
    )
    assert outcome.fail_closed and outcome.records == 1


# --- record_errors: listed up to a bound, all counted -------------------------------------


def test_record_errors_list_at_most_a_thousand_per_request_and_count_them_all(
    validator: RecordValidator,
) -> None:
    """Listing a million cost 5 s of encoding on the event loop and a 50 MB answer."""
    bad = batch_of(TINY * 5000, 5000)

    first, second = validator.validate([("t", 0, "trace-id", bad), ("t", 1, "trace-id", bad)])

    assert first.error is not None and second.error is not None
    assert [i for i, _ in first.error.record_errors] == list(range(1000))
    assert [i for i, _ in second.error.record_errors] == [0]  # each partition's first
    assert (first.rejected, second.rejected) == (5000, 5000)
    assert (first.error.error_message or "").startswith(
        "One or more records have been rejected due to 5000 record errors in total"
    )


# --- turns on the event loop ----------------------------------------------------------------


def sliced(
    validator: RecordValidator, partitions: list[PartitionData]
) -> tuple[list[PartitionOutcome], int]:
    """validate_sliced's answer, and how many turns another task got meanwhile."""

    async def main() -> tuple[list[PartitionOutcome], int]:
        turns = 0
        done = False

        async def other_connection() -> None:
            nonlocal turns
            while not done:
                await asyncio.sleep(0)
                turns += 1

        other = asyncio.ensure_future(other_connection())
        await asyncio.sleep(0)
        try:
            outcomes = await validator.validate_sliced(partitions)
        finally:
            done = True
            await other
        return outcomes, turns

    return uvloop.run(main())


def mixed_request() -> list[PartitionData]:
    """Partitions of every kind of outcome: passing, rejected records in several codecs,
    corrupt, over a budget, no records."""
    good = tuple(record(i, b"k", b'{"n": 1}', ((b"trace-id", b"t"),)) for i in range(300))
    bad = tuple(
        record(
            i,
            None if i % 7 else b"k",
            b"{" if i % 5 else b"[]",
            () if i % 3 else ((b"trace-id", b"t"),),
        )
        for i in range(3000)
    )
    corrupt = bytearray(batch_with("none", good))
    corrupt[-3] ^= 0xFF
    partitions: list[PartitionData] = [("t", 0, "trace-id", batch_with("none", good))]
    for n, codec in enumerate(CODECS):
        for policy in ("trace-id", "json", "key-required;trace-id"):
            partitions.append((f"t-{codec}", n, policy, batch_with(codec, bad)))
    partitions += [
        ("t", 1, "json", bytes(corrupt)),
        ("t", 2, "json", batch_with("zstd", (record(0, b"k", bytes(2 * 1024 * 1024)),))),
        ("t", 3, "json", None),
        ("t", 4, "trace-id", the_issues_bomb()),
    ]
    return partitions


def test_in_turns_the_answers_are_those_of_one_go(
    validator: RecordValidator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slices of no time at all: the validation gives way at every chance it has, and every
    answer (codes, messages, record_errors, counts) is as in one go."""
    partitions = mixed_request()
    in_one_go = validator.validate(partitions)
    monkeypatch.setattr(validation_module, "_SLICE_SECONDS", 0.0)

    in_turns, turns = sliced(validator, partitions)

    assert in_turns == in_one_go
    assert turns > 100
    codes = {o.error.error_code if o.error else 0 for o in in_turns}
    assert codes == {0, INVALID_RECORD, CORRUPT_MESSAGE}


def test_a_long_validation_gives_way_to_other_connections(validator: RecordValidator) -> None:
    """A million records that all fail (within the budget) take seconds of work; the loop
    runs other work many times meanwhile, not once at the end."""
    (outcome,), turns = sliced(
        validator, [("t", 0, "trace-id", batch_of(TINY * 1_000_000, 1_000_000))]
    )

    assert outcome.error is not None and outcome.rejected == 1_000_000
    assert turns >= 20


def test_records_that_all_pass_a_header_rule_give_way_too(validator: RecordValidator) -> None:
    """Where the reader looks for the header itself it hands over no record that has it:
    the empty windows of a million records that all pass still end their slices."""
    traced = uncompressed_batch((record(0, None, None, ((b"trace-id", b"x"),)),))[HEADER_SIZE:]
    (outcome,), turns = sliced(
        validator, [("t", 0, "trace-id", batch_of(traced * 1_000_000, 1_000_000))]
    )

    assert (outcome.error, outcome.records) == (None, 1_000_000)
    assert turns >= 10


@pytest.mark.parametrize("full", [False, True], ids=["fast path", "full reader"])
@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_a_record_past_the_declared_count_is_found_beyond_the_first_window(
    codec: str, full: bool
) -> None:
    """The declared records end exactly where the first window of inflated bytes does: the
    one after them, still in the stream, makes the batch corrupt (Kafka: records still
    remaining), not a batch of one record that a broker may keep whole, the other unread."""
    window = records_module._SCAN_WINDOW
    size = next(
        n for n in range(window - 16, window) if len(records_section((None, bytes(n)))) == window
    )
    section = records_section((None, bytes(size))) + TINY
    (batch,) = read_batches(batch_of(section, 1, codec))

    with full_reader_alone() if full else nullcontext():
        records = read_records(batch, RecordReading(), max_record_bytes=2 * window)
        with pytest.raises(CorruptBatch, match="bytes left after the 1 records"):
            list(records)


# --- the reader's bounded steps ---------------------------------------------------------------


@pytest.mark.parametrize("full", [False, True], ids=["fast path", "full reader"])
@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_records_come_in_windows_of_a_bounded_size(codec: str, full: bool) -> None:
    (batch,) = read_batches(batch_of(TINY * 20_000, 20_000, codec))

    with full_reader_alone() if full else nullcontext():
        records = read_records(batch, RecordReading())
        windows = [len(window) for window in records.windows()]

    assert sum(windows) == 20_000 == records.records_read
    assert max(windows) == (128 if full else 1024)


ZSTD_LAYOUTS = {
    "one frame": zstandard.ZstdCompressor().compress,
    "checksum, level 19": zstandard.ZstdCompressor(level=19, write_checksum=True).compress,
    "no content size": zstandard.ZstdCompressor(write_content_size=False).compress,
    "two frames": lambda data: zstandard.compress(data[:1000]) + zstandard.compress(data[1000:]),
}


@pytest.mark.parametrize("layout", list(ZSTD_LAYOUTS))
def test_zstd_is_fed_so_that_one_step_inflates_a_bounded_size(layout: str) -> None:
    """zstd's decompressor cannot bound its output: 3 KB of a 64 MiB run of zeros came out in
    one call. The reader now feeds it whole blocks adding up to at most 256 KiB (plus one
    block), in every layout of frames, and reads every record back."""
    section = records_section((b"k", bytes(range(256)) * 4)) * 65_536
    plain = uncompressed_batch((record(0, None, None),))
    compressed = ZSTD_LAYOUTS[layout](section)
    buffer = reframe(plain, records_section=compressed, attributes=4, record_count=65_536)
    (batch,) = read_batches(buffer)
    made: list[int] = []
    real_next = records_module._ZstdInflater._next

    def next_output(self: records_module._ZstdInflater, wanted: int) -> bytes | None:
        output = real_next(self, wanted)
        made.append(len(output or b""))
        return output

    with mock.patch.object(records_module._ZstdInflater, "_next", next_output):
        records = read_records(batch, RecordReading(value_bytes=-1))
        values = [value for window in records.windows() for _, _, value, *_ in window]

    assert values == [bytes(range(256)) * 4] * 65_536
    assert sum(made) == records.size_in_bytes == len(section) > 64_000_000
    assert max(made) <= 384 * 1024


# --- what the validator keeps per record.validation.policy value --------------------------


def test_values_no_topic_holds_any_more_are_forgotten(validator: RecordValidator) -> None:
    """A client that may alter its topic's record.validation.policy can give it a new value
    before each Produce; the validator learnt each value (hints, a plan: 24 KB for a value
    of 4 KB) and kept it for good, so a worker grew by some 10 MB a second until the kernel
    killed it. It keeps the values last learnt (so a second run of 2,000 new values holds
    no more than the first), and one forgotten is learnt again."""
    pad = ";".join(f"header:h{i:03d}" for i in range(300))  # a value of 4 KB, as stored
    good = batch_of(records_section((b"k", b"v")), 1, "none")

    def new_values(start: int) -> None:
        for i in range(start, start + 2000):
            (outcome,) = validator.validate([("t", 0, f"header:x{i};{pad}", good)])
            assert outcome.error is not None  # no header x<i>: rejected, as every time

    tracemalloc.start()
    try:
        new_values(0)
        first = tracemalloc.get_traced_memory()[0]
        new_values(2000)
        grown = tracemalloc.get_traced_memory()[0] - first
    finally:
        tracemalloc.stop()
    assert grown < 5_000_000, f"{grown / 1e6:.0f} MB more for 2,000 more values"
    (again,) = validator.validate([("t", 0, f"header:x0;{pad}", good)])
    assert again.error is not None
    (passes,) = validator.validate([("t", 0, "key-required", good)])
    assert passes.error is None
