"""Record batch reading: real batches built with kio's writers, compressed with every codec."""

import gzip
import itertools
import random
import struct
import tracemalloc
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import NamedTuple
from unittest import mock

import lz4.frame
import pytest
import zstandard
from kio.records.schema import Record

import protocol.records as records_module
from protocol.records import (
    BatchView,
    CompressionType,
    CorruptBatch,
    RecordFields,
    RecordReading,
    read_batches,
    read_records,
)
from tests import batches
from tests.batches import CODECS, HEADER_SIZE, Compress, record, reframe, varint

pytestmark = pytest.mark.unit

# The C scanner (protocol/_recscan.c) is read_records' fast path: it reads here, and is held
# to the full reader's answers; tests/unit/test_recscan.py checks it is built.
NATIVE = records_module._native


COMPRESSED = [name for name in CODECS if name != "none"]
STREAMING = ["gzip", "snappy-xerial", "lz4", "zstd"]

FIVE_RECORDS = (
    record(0, b"key-0", b"value-0", ((b"trace-id", b"abc"),)),
    record(1, None, b"value-1"),
    record(2, b"key-2", b"value-2", ((b"trace-id", b"def"), (b"empty", None))),
    record(3, b"key-3", None),
    record(4, b"key-4", b""),
)

EVERYTHING = RecordReading(headers=True, key_bytes=-1, value_bytes=-1)
VALUES = RecordReading(value_bytes=-1)
"""What the gateway reads for value rules alone."""


def lacking_reading(keys: tuple[str, ...]) -> RecordReading:
    """What the gateway reads for header rules alone: the records that lack a key."""
    return RecordReading(headers=True, lacking=keys)


class Read(NamedTuple):
    """RecordFields by name, for the asserts."""

    index: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    key_size: int
    value_size: int
    size_in_bytes: int


def uncompressed_batch(records: tuple[Record, ...] = FIVE_RECORDS) -> bytes:
    return batches.uncompressed_batch(records)


def batch_with(codec: str, records: tuple[Record, ...] = FIVE_RECORDS) -> bytes:
    return batches.batch_with(codec, records)


def read_all(
    buffer: bytes, *, headers: bool = True, key_bytes: int = -1, value_bytes: int = -1
) -> list[Read]:
    (batch,) = read_batches(buffer)
    reading = RecordReading(headers=headers, key_bytes=key_bytes, value_bytes=value_bytes)
    return [Read(*fields) for fields in read_records(batch, reading)]


@contextmanager
def full_reader_alone() -> Iterator[None]:
    """read_records without its C fast path, as when protocol._recscan is not built."""
    with mock.patch.object(records_module, "_native", None):
        yield


Answer = tuple[list[RecordFields], int, int] | tuple[str, int]
"""What read_records gives for a batch: (the records taken, size_in_bytes, records_read),
or (the CorruptBatch text, records_read) when it refuses the batch."""


def answer(buffer: bytes, reading: RecordReading, *, full: bool = False) -> Answer:
    """read_records' answer for the batch, from the full reader alone when full."""
    (batch,) = read_batches(buffer)
    with full_reader_alone() if full else nullcontext():
        records = read_records(batch, reading)
        try:
            taken = list(records)
        except CorruptBatch as exc:
            return str(exc), records.records_read
    return taken, records.size_in_bytes, records.records_read


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_reads_back_keys_values_headers_and_indices(codec: str) -> None:
    buffer = batch_with(codec)

    (batch,) = read_batches(buffer)
    read = read_records(batch, EVERYTHING)
    records = [Read(*fields) for fields in read]

    assert (batch.compression, batch.record_count, batch.producer_id) == (
        CODECS[codec][0],
        5,
        7,
    )
    assert [(r.index, r.key, r.value, r.headers) for r in records] == [
        (0, b"key-0", b"value-0", (("trace-id", b"abc"),)),
        (1, None, b"value-1", ()),
        (2, b"key-2", b"value-2", (("trace-id", b"def"), ("empty", None))),
        (3, b"key-3", None, ()),
        (4, b"key-4", b"", ()),
    ]
    assert [(r.key_size, r.value_size) for r in records] == [
        (5, 7),
        (-1, 7),
        (5, 7),
        (5, -1),
        (5, 0),
    ]
    assert sum(r.size_in_bytes for r in records) == len(uncompressed_batch()) - HEADER_SIZE
    assert (read.size_in_bytes, read.records_read) == (len(uncompressed_batch()) - HEADER_SIZE, 5)


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_the_third_of_five_records_is_index_2(codec: str) -> None:
    (batch,) = read_batches(batch_with(codec))

    third = Read(*next(itertools.islice(read_records(batch, EVERYTHING), 2, None)))

    assert (third.index, third.key, third.value) == (2, b"key-2", b"value-2")


@pytest.mark.parametrize("codec", CODECS)
def test_prefix_reads_cut_keys_and_keep_full_sizes(codec: str) -> None:
    records = read_all(batch_with(codec), headers=False, key_bytes=3, value_bytes=0)

    assert [(r.key, r.key_size) for r in records] == [
        (b"key", 5),
        (None, -1),
        (b"key", 5),
        (b"key", 5),
        (b"key", 5),
    ]
    assert [(r.value, r.value_size) for r in records] == [
        (b"", 7),
        (b"", 7),
        (b"", 7),
        (None, -1),
        (b"", 0),
    ]
    assert all(r.headers == () for r in records)


def test_an_uncompressed_payload_is_a_view_of_the_request_buffer() -> None:
    buffer = batch_with("none")

    (batch,) = read_batches(buffer)

    assert batch.payload.obj is buffer
    assert bytes(batch.payload) == buffer[HEADER_SIZE:]


def test_several_batches_in_one_buffer_are_split() -> None:
    second = uncompressed_batch((record(5, b"later", b"v"),))
    buffer = batch_with("gzip") + second

    batches = read_batches(buffer)

    assert [(b.compression, b.record_count) for b in batches] == [(CompressionType.GZIP, 5), (0, 1)]
    assert [key for _, key, *_ in read_records(batches[1], RecordReading(key_bytes=-1))] == [
        b"later"
    ]


@pytest.mark.parametrize("position", [30, HEADER_SIZE + 4, -1], ids=["header", "records", "last"])
def test_a_flipped_byte_is_a_bad_crc(position: int) -> None:
    buffer = bytearray(batch_with("none"))
    buffer[position] ^= 0x01

    with pytest.raises(CorruptBatch, match="bad CRC"):
        read_batches(bytes(buffer))


@pytest.mark.parametrize("length", [10, 40, HEADER_SIZE, -1])
def test_a_truncated_buffer_is_refused(length: int) -> None:
    buffer = batch_with("none")[:length]

    with pytest.raises(CorruptBatch, match="truncated"):
        read_batches(buffer)


def test_bytes_after_the_last_batch_are_refused() -> None:
    with pytest.raises(CorruptBatch, match="truncated: 3 bytes"):
        read_batches(batch_with("none") + b"\x00\x00\x00")


def test_a_batch_length_shorter_than_the_header_is_refused() -> None:
    buffer = bytearray(batch_with("none"))
    struct.pack_into(">i", buffer, 8, 20)

    with pytest.raises(CorruptBatch, match="batch_length 20, shorter than its own header"):
        read_batches(bytes(buffer))


@pytest.mark.parametrize("count", [-1, -2, -(2**31)])
def test_a_negative_record_count_is_refused(count: int) -> None:
    """Kafka refuses any negative count (DefaultRecordBatch); -1 read as "no records" would
    lower the records a request declares against its budget."""
    buffer = reframe(batch_with("none"), records_section=b"", record_count=count)

    with pytest.raises(CorruptBatch, match=f"negative record_count {count}"):
        read_batches(buffer)


@pytest.mark.parametrize("codec", CODECS)
def test_fewer_records_than_record_count_is_refused(codec: str) -> None:
    buffer = reframe(batch_with(codec), record_count=6)

    with pytest.raises(CorruptBatch, match="record_count 6 .* ends after 5 records"):
        read_all(buffer)


@pytest.mark.parametrize("codec", CODECS)
def test_more_records_than_record_count_is_refused(codec: str) -> None:
    buffer = reframe(batch_with(codec), record_count=4)

    with pytest.raises(CorruptBatch, match="bytes left after the 4 records"):
        read_all(buffer)


@pytest.mark.parametrize("full", [False, True], ids=["fast path", "full reader"])
def test_a_negative_header_count_is_refused(full: bool) -> None:
    """Kafka refuses a record whose header count is negative (DefaultRecord.readFrom); -1
    is not read as no headers."""
    plain = uncompressed_batch((record(0, b"k", b"v"),))
    section = plain[HEADER_SIZE:]
    assert section[-1] == 0  # no headers
    minus_one = section[:-1] + b"\x01"  # zigzag varint -1

    with (
        full_reader_alone() if full else nullcontext(),
        pytest.raises(CorruptBatch, match="header count -1 does not fit the record"),
    ):
        read_all(reframe(plain, records_section=minus_one))


def test_a_record_longer_than_its_fields_is_refused() -> None:
    plain = uncompressed_batch((record(0, b"k", b"v"),))
    section = plain[HEADER_SIZE:]
    # One byte record length (zigzag varint: value * 2), one more byte than the fields.
    longer = bytes([section[0] + 2]) + section[1:] + b"\x00"

    with pytest.raises(CorruptBatch, match="record 0: length is .* fields take"):
        read_all(reframe(plain, records_section=longer))


@pytest.mark.parametrize(
    ("key_size", "reason"),
    [(5, "key size 5 does not fit the record"), (4, "fields overrun its length 8")],
)
def test_a_key_longer_than_its_record_is_refused(key_size: int, reason: str) -> None:
    plain = uncompressed_batch((record(0, b"k", b"v"), record(1, b"k", b"v")))
    section = bytearray(plain[HEADER_SIZE:])
    # Record 0: length, attributes, timestamp delta, offset delta, then the key size.
    assert section[:5] == bytes([16, 0, 0, 0, 2])  # zigzag varints: 8 bytes, ..., key size 1
    section[4] = 2 * key_size  # reaches into record 1

    with pytest.raises(CorruptBatch, match=f"record 0: {reason}"):
        read_all(reframe(plain, records_section=bytes(section)))


def test_an_unknown_codec_is_refused() -> None:
    buffer = reframe(batch_with("none"), attributes=5)

    with pytest.raises(CorruptBatch, match="unknown compression codec 5"):
        read_batches(buffer)


def test_magic_1_is_refused() -> None:
    buffer = reframe(batch_with("none"), magic=1)

    with pytest.raises(CorruptBatch, match="magic 1; only magic 2"):
        read_batches(buffer)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_garbage_in_a_compressed_batch_fails_decompression(codec: str) -> None:
    compression, _ = CODECS[codec]
    buffer = reframe(
        batch_with("none"),
        records_section=b"not compressed data at all" * 3,
        attributes=int(compression),
    )

    with pytest.raises(CorruptBatch, match=f"{codec.split('-')[0]} decompression failed"):
        read_all(buffer)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_decompression_is_capped(codec: str) -> None:
    buffer = batch_with(codec, (record(0, b"bomb", bytes(1024 * 1024)),))
    (batch,) = read_batches(buffer)

    with pytest.raises(CorruptBatch, match="more than max_decompressed_bytes"):
        list(read_records(batch, RecordReading(), max_decompressed_bytes=256 * 1024))
    (whole,) = map(Read._make, read_records(batch, RecordReading()))
    assert whole.value_size == 1024 * 1024


def many_records() -> tuple[Record, ...]:
    rng = random.Random(42)
    return tuple(record(i, f"key-{i}".encode(), rng.randbytes(4096)) for i in range(200))


@pytest.mark.parametrize("codec", STREAMING)
def test_streaming_codecs_read_the_first_records_of_a_damaged_stream(codec: str) -> None:
    compression, compress = CODECS[codec]
    plain = uncompressed_batch(many_records())
    damaged = compress(plain[HEADER_SIZE:])[:-5000]
    (batch,) = read_batches(reframe(plain, records_section=damaged, attributes=int(compression)))
    records = read_records(batch, RecordReading(key_bytes=-1, value_bytes=-1))

    assert Read(*next(records)).key == b"key-0"
    with pytest.raises(CorruptBatch, match="truncated"):
        list(records)


@pytest.mark.parametrize(
    ("codec", "compress", "end_marker"),
    [
        ("gzip", gzip.compress, 8),
        ("lz4", lz4.frame.compress, 4),
        ("zstd", zstandard.ZstdCompressor(write_checksum=True).compress, 4),
    ],
)
def test_a_stream_missing_only_its_end_marker_is_refused(
    codec: str, compress: Compress, end_marker: int
) -> None:
    """Every record is still there; only the trailer, end mark or checksum is cut off."""
    plain = uncompressed_batch()
    section = compress(plain[HEADER_SIZE:])[:-end_marker]
    compression, _ = CODECS[codec]
    buffer = reframe(plain, records_section=section, attributes=int(compression))

    with pytest.raises(CorruptBatch, match=f"truncated: {codec} stream ends before its end"):
        read_all(buffer)


@pytest.mark.parametrize(
    ("codec", "compress"),
    [("gzip", gzip.compress), ("lz4", lz4.frame.compress), ("zstd", zstandard.compress)],
)
def test_concatenated_members_or_frames_are_read_in_turn(codec: str, compress: Compress) -> None:
    plain = uncompressed_batch()
    section = plain[HEADER_SIZE:]
    halves = compress(section[:50]) + compress(section[50:])
    compression, _ = CODECS[codec]

    records = read_all(reframe(plain, records_section=halves, attributes=int(compression)))

    assert [r.key for r in records] == [b"key-0", None, b"key-2", b"key-3", b"key-4"]


def test_header_keys_decode_invalid_utf8_as_java_does() -> None:
    buffer = batch_with("none", (record(0, b"k", b"v", ((b"bad-\xff", b"x"),)),))

    (only,) = read_all(buffer)

    assert only.headers == (("bad-\ufffd", b"x"),)


def test_bad_prefix_lengths_are_refused_before_iterating() -> None:
    (batch,) = read_batches(batch_with("none"))

    with pytest.raises(ValueError, match="key_bytes"):
        read_records(batch, RecordReading(key_bytes=-2))
    with pytest.raises(ValueError, match="max_decompressed_bytes"):
        read_records(batch, RecordReading(), max_decompressed_bytes=0)
    with pytest.raises(ValueError, match="needs headers"):
        read_records(batch, RecordReading(lacking=("trace-id",)))


def assert_zstd_bomb_stopped_near_the_cap(scan: Callable[[BatchView, int], object]) -> None:
    """``scan(batch, cap)`` of a zstd batch of one 32 MiB value, cap 1 MiB, refuses the batch
    having used less than 8 MiB of memory."""
    plain = uncompressed_batch((record(0, b"bomb", bytes(32 * 1024 * 1024)),))
    buffer = reframe(
        plain,
        records_section=zstandard.compress(plain[HEADER_SIZE:]),
        attributes=int(CompressionType.ZSTD),
    )
    del plain
    (batch,) = read_batches(buffer)

    tracemalloc.start()
    try:
        with pytest.raises(CorruptBatch, match="more than max_decompressed_bytes"):
            scan(batch, 1024 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024


def test_a_zstd_bomb_is_stopped_near_the_cap() -> None:
    """zstd cannot bound its output per call, so the reader bounds the input it feeds."""
    with full_reader_alone():
        assert_zstd_bomb_stopped_near_the_cap(
            lambda batch, cap: list(
                read_records(batch, RecordReading(), max_decompressed_bytes=cap)
            )
        )


@pytest.mark.parametrize("compression", list(CompressionType), ids=lambda c: c.name.lower())
def test_batches_from_an_independent_writer_read_back(compression: CompressionType) -> None:
    """kafka-python's own batch writer (xerial framing for snappy, as the Java client)."""
    with warnings.catch_warnings():
        # kafka-python 3 loads its schemas with importlib.resources' deprecated API.
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(compression),
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i in range(50):
        builder.append(
            i, timestamp=None, key=f"key-{i}".encode(), value=b"v" * 3000, headers=[("h", b"x")]
        )

    records = read_all(bytes(builder.build()), value_bytes=2)

    assert len(records) == 50
    assert (records[49].index, records[49].key, records[49].value) == (49, b"key-49", b"vv")
    assert (records[49].value_size, records[49].headers) == (3000, (("h", b"x"),))


# --- the fast path: the full reader's answers, for less ------------------------------------------


READINGS = {
    "values": VALUES,
    "lacking-trace-id": lacking_reading(("trace-id",)),
    "lacking-trace-id-h": lacking_reading(("trace-id", "h")),
    "everything": EVERYTHING,
    "prefixes": RecordReading(key_bytes=3, value_bytes=2),
}
"""Readings the C scanner is held to the full reader on."""


def lacking(buffer: bytes, keys: tuple[str, ...]) -> tuple[tuple[int, ...], int]:
    """The records that lack one of the keys, found by reading every record with the full
    reader: (their indexes, size_in_bytes)."""
    with full_reader_alone():
        records = read_all(buffer, headers=True, key_bytes=0, value_bytes=0)
    missing = tuple(r.index for r in records if not set(keys) <= {k for k, _ in r.headers})
    return missing, sum(r.size_in_bytes for r in records)


def lacking_or_error(buffer: bytes, keys: tuple[str, ...]) -> tuple[object, int] | str:
    try:
        return lacking(buffer, keys)
    except CorruptBatch as exc:
        return str(exc)


def taken_or_error(buffer: bytes, reading: RecordReading) -> tuple[object, int] | str:
    """read_records' answer as (the indexes of the records taken, size_in_bytes) or the
    CorruptBatch text."""
    got = answer(buffer, reading)
    if isinstance(got[0], str):
        return got[0]
    records, size, _ = got
    assert isinstance(records, list) and isinstance(size, int)
    return tuple(index for index, *_ in records), size


def values_and_size(buffer: bytes) -> tuple[list[bytes | None], int] | str:
    """Every record's whole value, read with the full reader: (values, size) or the error."""
    try:
        with full_reader_alone():
            records = read_all(buffer, headers=False, key_bytes=0, value_bytes=-1)
    except CorruptBatch as exc:
        return str(exc)
    return [r.value for r in records], sum(r.size_in_bytes for r in records)


def values_or_error(buffer: bytes) -> tuple[list[bytes | None], int] | str:
    """The same from read_records(VALUES), the fast path first."""
    got = answer(buffer, VALUES)
    if isinstance(got[0], str):
        return got[0]
    records, size, _ = got
    assert isinstance(records, list) and isinstance(size, int)
    return [value for _, _, value, *_ in records], size


def varied_records() -> tuple[Record, ...]:
    """Sizes that need 1, 2 and 3 byte varints, null and empty fields, several headers."""
    rng = random.Random(7)
    shapes: list[tuple[tuple[bytes, bytes | None], ...]] = [
        ((b"trace-id", b"0af7651916cd43dd8448eb211c80319c"),),
        (),
        ((b"trace-id", None),),
        ((b"tenant", b"t"), (b"trace-id", b"x" * 200)),
        ((b"Trace-Id", b"1"),),
        ((b"trace-id-2", b"1"),),
        ((b"trace-id", b""), (b"tenant", None), (b"trace-id", b"again")),
        ((b"t" * 70, b"long key"), (b"trace-id", b"x" * 9000)),
        ((b"", b"empty key"),),
    ]
    return tuple(
        record(
            offset,
            None if offset % 3 == 0 else rng.randbytes(rng.choice([0, 5, 100, 20_000])),
            None if offset % 7 == 0 else rng.randbytes(rng.choice([0, 1, 63, 64, 512, 20_000])),
            shapes[offset % len(shapes)],
        )
        for offset in range(150)
    )


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(
    "keys",
    [("trace-id",), ("trace-id", "tenant"), ("tenant",), ("",), ("absent",), ()],
    ids=repr,
)
def test_the_records_taken_for_lacking_keys_are_what_reading_every_record_finds(
    codec: str, keys: tuple[str, ...]
) -> None:
    for records in (FIVE_RECORDS, varied_records()):
        buffer = batch_with(codec, records)

        assert taken_or_error(buffer, lacking_reading(keys)) == lacking(buffer, keys)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("reading", list(READINGS.values()), ids=list(READINGS))
def test_the_fast_path_reads_what_the_full_reader_reads(codec: str, reading: RecordReading) -> None:
    for records in (FIVE_RECORDS, varied_records()):
        buffer = batch_with(codec, records)

        assert answer(buffer, reading) == answer(buffer, reading, full=True)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(
    ("reading", "taken"),
    [(lacking_reading(("trace-id",)), 67), (VALUES, 150), (EVERYTHING, 150)],
    ids=["lacking", "values", "everything"],
)
def test_a_sound_batch_is_read_without_the_full_reader(
    codec: str, reading: RecordReading, taken: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The point of the fast path: no Python per record, and for lacking keys no object
    for a record that has them. The full reader is only for saying what is wrong with a
    batch."""
    buffer = batch_with(codec, varied_records())
    expected = answer(buffer, reading, full=True)
    (batch,) = read_batches(buffer)
    monkeypatch.setattr(records_module, "_read_fully", None)

    records = read_records(batch, reading)
    assert (list(records), records.size_in_bytes, records.records_read) == expected
    assert len(expected[0]) == taken


@pytest.mark.parametrize("extra", [63, 64])
def test_lacking_takes_any_number_of_keys(extra: int) -> None:
    """The C scanner tracks up to 64 keys per record; with more, the full reader answers."""
    keys = ("trace-id", *(f"k{n}" for n in range(extra)))
    headers = tuple((key.encode(), b"") for key in keys)
    records = (record(0, b"k", b"v", headers), record(1, b"k", b"v", headers[:-1]))
    buffer = batch_with("none", records)

    assert taken_or_error(buffer, lacking_reading(keys))[0] == (1,) == lacking(buffer, keys)[0]


def test_lacking_matches_keys_as_decoded() -> None:
    """A header key that is not UTF-8 decodes with U+FFFD, and matches a key written so."""
    buffer = batch_with("none", (record(0, b"k", b"v", ((b"bad-\xff", b"x"),)),))

    assert taken_or_error(buffer, lacking_reading(("bad-\ufffd",)))[0] == ()
    assert taken_or_error(buffer, lacking_reading(("bad-",)))[0] == (0,)
    # UTF-8 cannot carry it
    assert taken_or_error(buffer, lacking_reading(("bad-\udcff",)))[0] == (0,)


def corrupt_batches() -> list[tuple[str, bytes]]:
    plain = uncompressed_batch((record(0, b"k", b"v", ((b"h", b"1"),)), record(1, b"k", b"v")))
    section = plain[HEADER_SIZE:]
    header_key_too_long = bytearray(section)
    header_key_too_long[section.index(b"\x02h")] = 2 * 9  # header key size 9
    cases = [
        ("too-few", reframe(batch_with("none"), record_count=6)),
        ("too-many", reframe(batch_with("zstd"), record_count=4)),
        ("trailing-byte", reframe(plain, records_section=section + b"\x00")),
        ("header-key-overrun", reframe(plain, records_section=bytes(header_key_too_long))),
        ("longer-record", reframe(plain, records_section=bytes([section[0] + 2]) + section[1:])),
        ("empty-section", reframe(plain, records_section=b"")),
        (
            "garbage-zstd",
            reframe(plain, records_section=b"not zstd" * 9, attributes=int(CompressionType.ZSTD)),
        ),
        (
            "truncated-lz4",
            reframe(
                plain,
                records_section=lz4.frame.compress(section)[:-4],
                attributes=int(CompressionType.LZ4),
            ),
        ),
    ]
    for size in (4, 5):  # the key runs into record 1, or just fits and the value does not
        overrun = bytearray(uncompressed_batch((record(0, b"k", b"v"), record(1, b"k", b"v"))))
        overrun[HEADER_SIZE + 4] = 2 * size
        cases.append((f"key-size-{size}", reframe(bytes(overrun))))
    return cases


@pytest.mark.parametrize(
    ("name", "buffer"), corrupt_batches(), ids=[n for n, _ in corrupt_batches()]
)
def test_a_corrupt_batch_is_refused_in_the_full_readers_words(name: str, buffer: bytes) -> None:
    """Corrupt for every reading with headers; for the values alone too, all but a header
    key overrun, which a reading without headers does not look at. The same words, after as
    many records."""
    with pytest.raises(CorruptBatch) as expected:
        read_all(buffer)

    refused = answer(buffer, lacking_reading(("h",)))

    assert refused == (str(expected.value), refused[1])
    assert refused == answer(buffer, lacking_reading(("h",)), full=True)
    assert values_or_error(buffer) == values_and_size(buffer)
    assert answer(buffer, VALUES) == answer(buffer, VALUES, full=True)


@pytest.mark.parametrize(
    "reading", [lacking_reading(("h",)), VALUES, EVERYTHING], ids=["lacking", "values", "all"]
)
def test_the_fast_path_stops_a_zstd_bomb_near_the_cap(reading: RecordReading) -> None:
    assert_zstd_bomb_stopped_near_the_cap(
        lambda batch, cap: list(read_records(batch, reading, max_decompressed_bytes=cap))
    )


def damaged_section() -> tuple[bytes, bytes]:
    """A batch whose records use every field (null and empty, long and short, headers with
    null values), and its records section."""
    plain = uncompressed_batch(
        (
            record(0, None, b'{"a": 1}', ((b"trace-id", b"x"),)),
            record(1, b"k" * 70, b"v" * 200),
            record(2, b"", None),
            record(3, b"key", b"w" * 9000, ((b"h", None), (b"trace-id", b"1"))),
            record(4, b"k", b"v", ((b"trace-id", b"y"), (b"g", b""))),
        )
    )
    return plain, plain[HEADER_SIZE:]


def assert_the_fast_path_answers_as_the_full_reader(buffer: bytes, case: object) -> None:
    assert values_or_error(buffer) == values_and_size(buffer), case
    for keys in (("trace-id",), ("trace-id", "h")):
        expected = lacking_or_error(buffer, keys)
        assert taken_or_error(buffer, lacking_reading(keys)) == expected, (case, keys)
    for name, reading in READINGS.items():
        assert answer(buffer, reading) == answer(buffer, reading, full=True), (case, name)


def test_the_fast_path_agrees_with_the_full_reader_on_damaged_records() -> None:
    """Every byte of a records section set in turn to values that upset varints and sizes
    (CRC fixed, so the records themselves are what is wrong): the C scanner reads each
    record exactly as the full reader does, or leaves it to it; never a third answer, since
    what it lets through is what the broker is sent."""
    plain, section = damaged_section()
    compared = 0
    for position in range(0, len(section), 7 if len(section) > 2000 else 1):
        for byte in (0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF):
            damaged = bytearray(section)
            damaged[position] = byte
            buffer = reframe(plain, records_section=bytes(damaged))
            assert_the_fast_path_answers_as_the_full_reader(buffer, (position, byte))
            compared += 1
    assert compared > 5000


def test_the_fast_path_agrees_with_the_full_reader_on_random_damage() -> None:
    """Several bytes at once set to random values, in a thousand copies (a fixed seed, so a
    failure reproduces): no answer of the fast path differs from the full reader's."""
    plain, section = damaged_section()
    rng = random.Random(20261121)
    for attempt in range(1000):
        damaged = bytearray(section)
        for _ in range(rng.choice([2, 3, 8])):
            damaged[rng.randrange(len(damaged))] = rng.choice(
                [0x00, 0x80, 0xFF, rng.randrange(256)]
            )
        buffer = reframe(plain, records_section=bytes(damaged))
        assert_the_fast_path_answers_as_the_full_reader(buffer, attempt)


def raw_record(body: bytes) -> bytes:
    return varint(len(body)) + body


@pytest.mark.parametrize(
    ("name", "body"),
    [
        # attributes, timestamp delta, offset delta, key, value, header count, headers
        ("plain", b"\x00\x00\x00" + varint(1) + b"k" + varint(1) + b"v" + b"\x00"),
        # a header count of 0 written in two bytes, then a byte that belongs to no field
        ("overlong-zero-headers", b"\x00\x00\x00" + varint(-1) + varint(-1) + b"\x80\x00\x00"),
        ("overlong-zero-headers-at-end", b"\x00\x00\x00" + varint(-1) + varint(-1) + b"\x80\x00"),
        # a value size in five bytes, the last using bits an int32 has no room for
        ("wide-varint", b"\x00\x00\x00" + varint(-1) + b"\x82\x80\x80\x80\x10" + b"\x00"),
        ("five-byte-size", b"\x00\x00\x00" + varint(-1) + b"\x82\x80\x80\x80\x00v\x00"),
        ("ten-byte-timestamp", b"\x00" + b"\x80" * 9 + b"\x01\x00" + varint(-1) * 2 + b"\x00"),
        ("eleven-byte-timestamp", b"\x00" + b"\x80" * 10 + b"\x00\x00" + varint(-1) * 2 + b"\x00"),
        # an offset delta is an int32: six bytes are too many for Kafka and the full reader
        ("six-byte-offset", b"\x00\x00" + b"\x80" * 5 + b"\x00" + varint(-1) * 2 + b"\x00"),
        # three headers in four bytes: more than one byte a header does not fit
        ("header-count-over-half", b"\x00\x00\x00" + varint(-1) * 2 + varint(3) + b"\x00" * 4),
        ("null-header-key", b"\x00\x00\x00" + varint(-1) * 2 + varint(1) + varint(-1) * 2),
        (
            "header",
            b"\x00\x00\x00" + varint(-1) * 2 + varint(1) + varint(8) + b"trace-id" + varint(-1),
        ),
    ],
)
def test_hand_written_records_read_alike(name: str, body: bytes) -> None:
    """Encodings a client would not write but a crafted request can: read as the full
    reader reads them, or refused in its words."""
    buffer = reframe(uncompressed_batch((record(0, b"k", b"v"),)), records_section=raw_record(body))
    assert values_or_error(buffer) == values_and_size(buffer)
    assert taken_or_error(buffer, lacking_reading(("trace-id",))) == lacking_or_error(
        buffer, ("trace-id",)
    )
    for reading in READINGS.values():
        assert answer(buffer, reading) == answer(buffer, reading, full=True)


def test_the_overlong_zero_header_count_is_refused_as_the_broker_would() -> None:
    """Kafka's reader checks that a record's fields end where its length says; so does the
    full reader here, and so must the fast path, which once took a header count of 0 written
    in two bytes as "the record may go on" when reading values alone."""
    body = b"\x00\x00\x00" + varint(-1) + varint(3) + b"abc" + b"\x80\x00" + b"\x00"
    buffer = reframe(uncompressed_batch((record(0, b"k", b"v"),)), records_section=raw_record(body))
    assert values_or_error(buffer) == "record 0: length is 11 but its fields take 10 bytes"


# A timestamp delta in ten bytes whose last uses bits a long has no room for: Kafka's reader
# (and the full reader, through kio) drops them; the C scanner calls the record irregular.
ODD_TIMESTAMP = b"\x00" + b"\x80" * 9 + b"\x7f" + b"\x00"


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_the_full_reader_takes_over_where_the_fast_path_stops(
    codec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record the C scanner leaves, windows after it has handed out the first records:
    the full reader reads the rest, and every record is taken once, in order, as the full
    reader alone takes them."""
    # 300 records of 4 KiB: windows of 1 MiB in place, of 256 KiB decompressed
    plain = uncompressed_batch(tuple(record(i, b"k", bytes(4096)) for i in range(300)))
    section = plain[HEADER_SIZE:]
    odd = (
        ODD_TIMESTAMP
        + varint(3)
        + b"odd"
        + varint(1)
        + b"v"
        + varint(1)
        + varint(8)
        + b"trace-id"
        + varint(-1)
    )
    compression, compress = CODECS[codec]
    buffer = reframe(
        plain,
        records_section=compress(section + raw_record(odd)),
        attributes=int(compression),
        record_count=301,
    )
    skipped: list[int] = []
    read_fully = records_module._read_fully

    def spy(*args: object, skip: int) -> object:
        skipped.append(skip)
        return read_fully(*args, skip=skip)  # type: ignore[arg-type]

    monkeypatch.setattr(records_module, "_read_fully", spy)

    expected = [answer(buffer, reading, full=True) for reading in READINGS.values()]
    skipped.clear()

    assert [answer(buffer, reading) for reading in READINGS.values()] == expected
    assert not any(isinstance(got[0], str) for got in expected)
    taken = answer(buffer, EVERYTHING)[0]
    assert isinstance(taken, list)
    assert [index for index, *_ in taken] == list(range(301))
    assert taken[300][1:4] == (b"odd", b"v", (("trace-id", None),))
    assert skipped and all(skip > 50 for skip in skipped)  # past the first window


def test_a_batch_read_from_bytes_is_scanned_in_place_within_its_own_bounds() -> None:
    """Given the request's bytes, the fast path scans them where they are, from the batch's
    payload_start up to its end: records lying beyond (the next batch) are never read as
    this batch's, even when its record_count asks for more."""
    first, second = batch_with("none"), batch_with("none", varied_records())
    batches = read_batches(first + second)
    assert [b.payload_start for b in batches] == [HEADER_SIZE, len(first) + HEADER_SIZE]
    assert [value for _, _, value, *_ in read_records(batches[1], VALUES)] == [
        r.value for r in read_all(second, headers=False)
    ]

    # The window itself: two records sections back to back, a stop between them.
    assert NATIVE is not None
    sections = first[HEADER_SIZE:] + second[HEADER_SIZE:]
    window = NATIVE.record_window(None, False, 0, -1, sections, 0, 0, 155, len(first) - HEADER_SIZE)
    assert window is not None and window[:2] == (len(first) - HEADER_SIZE, 5)
    assert [fields[2] for fields in window[3]] == [r.value for r in read_all(first, headers=False)]


@pytest.mark.parametrize("codec", CODECS)
def test_without_the_c_scanner_the_full_reader_answers_alone(
    codec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """protocol._recscan not built (or KPG_RECORD_SCANNER=python): the same answers, from
    the full reader, for sound and corrupt batches."""
    sound = batch_with(codec, varied_records())
    cases = [sound, *(buffer for _, buffer in corrupt_batches())]
    readings = [lacking_reading(("trace-id",)), VALUES]
    expected = [[answer(b, reading) for reading in readings] for b in cases]
    monkeypatch.setattr(records_module, "_native", None)
    monkeypatch.setattr(records_module, "_scan", None)  # the fast path is not taken

    assert records_module.record_scanner() == "python"
    for buffer, answers in zip(cases, expected, strict=True):
        assert [answer(buffer, reading) for reading in readings] == answers
        assert taken_or_error(buffer, readings[0]) == lacking_or_error(buffer, ("trace-id",))


def test_a_memoryview_is_copied_not_scanned_in_place() -> None:
    """Offsets into a memoryview are not offsets into the bytes beneath it."""
    buffer = b"\x00" * 7 + batch_with("none")
    (batch,) = read_batches(memoryview(buffer)[7:])
    assert batch.payload_start is None
    assert [value for _, _, value, *_ in read_records(batch, VALUES)] == [
        r.value for r in read_all(buffer[7:], headers=False)
    ]
