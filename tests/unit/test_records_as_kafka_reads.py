"""The gateway's record reader held to Apache Kafka's: what it lets through for a validated
topic, Kafka reads as the same records, or refuses. Never other records, which would be
stored unjudged.

The reference below is Kafka's reader as written in apache/kafka (clients/.../record/
DefaultRecord.java readFrom, DefaultRecordBatch's iterators, utils/ByteUtils readVarint),
transcribed for a decompressed records section: a 32-bit varint whose fifth byte carries bits
an int has no room for is read with them dropped; a key, value or header value of any
negative size is null; a negative header count, a count over the bytes left, or a header key
of negative size is refused; a record's fields must end where its length says; exactly
record_count records, then nothing. Where Kafka reads more leniently (the dropped bits, sizes
below -1) the gateway refuses: it may refuse more than Kafka, never read otherwise.

The codec cases pin what Kafka's streams do with unusual framing (compress/GzipCompression,
Lz4BlockInputStream, ZstdCompression over zstd-jni, SnappyCompression over snappy-java
1.1.10.5), each next to the gateway's answer.
"""

import gzip
import random
import struct

import lz4.frame
import pytest
import snappy
import zstandard

from protocol.records import (
    CompressionType,
    CorruptBatch,
    RecordReading,
    read_batches,
    read_records,
)
from tests.batches import HEADER_SIZE, record, reframe, uncompressed_batch, varint, xerial

pytestmark = pytest.mark.unit

Fields = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]
REFUSED = "refused"


class KafkaRefuses(Exception):
    """Kafka's reader throws (InvalidRecordException, BufferUnderflowException, ...)."""


def _kafka_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """ByteUtils.readUnsignedVarint: int arithmetic, so the fifth byte's high bits drop."""
    result = 0
    for i in range(5):
        if pos >= len(buf):
            raise KafkaRefuses("buffer underflow")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F if byte & 0x80 or i < 4 else byte) << (7 * i)
        if not byte & 0x80:
            return result & 0xFFFFFFFF, pos
    raise KafkaRefuses("varint longer than 5 bytes")


def _kafka_varint(buf: bytes, pos: int) -> tuple[int, int]:
    raw, pos = _kafka_uvarint(buf, pos)
    value = ((raw >> 1) ^ -(raw & 1)) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value, pos


def _kafka_varlong(buf: bytes, pos: int) -> int:
    for _ in range(10):
        if pos >= len(buf):
            raise KafkaRefuses("buffer underflow")
        pos += 1
        if not buf[pos - 1] & 0x80:
            return pos
    raise KafkaRefuses("varlong longer than 10 bytes")


def _kafka_bytes(buf: bytes, pos: int, size: int) -> tuple[bytes | None, int]:
    """Utils.readBytes: null for any negative size."""
    if size < 0:
        return None, pos
    if pos + size > len(buf):
        raise KafkaRefuses("limit past the buffer")
    return buf[pos : pos + size], pos + size


def kafka_records(section: bytes, count: int) -> list[Fields]:
    """The records Kafka reads from a decompressed records section, or KafkaRefuses."""
    pos, out = 0, []
    for _ in range(count):
        size, pos = _kafka_varint(section, pos)
        if size < 0 or len(section) - pos < size:
            raise KafkaRefuses("Invalid record size")
        start = pos
        if pos >= len(section):
            raise KafkaRefuses("buffer underflow")
        pos = _kafka_varlong(section, pos + 1)  # attributes, timestamp delta
        _, pos = _kafka_varint(section, pos)  # offset delta
        key_size, pos = _kafka_varint(section, pos)
        key, pos = _kafka_bytes(section, pos, key_size)
        value_size, pos = _kafka_varint(section, pos)
        value, pos = _kafka_bytes(section, pos, value_size)
        count_headers, pos = _kafka_varint(section, pos)
        if count_headers < 0 or count_headers > len(section) - pos:
            raise KafkaRefuses("Found invalid number of record headers")
        headers = []
        for _ in range(count_headers):
            header_key_size, pos = _kafka_varint(section, pos)
            if header_key_size < 0:
                raise KafkaRefuses("Invalid negative header key size")
            header_key, pos = _kafka_bytes(section, pos, header_key_size)
            header_value_size, pos = _kafka_varint(section, pos)
            header_value, pos = _kafka_bytes(section, pos, header_value_size)
            assert header_key is not None
            headers.append((header_key.decode("utf-8", "replace"), header_value))
        if pos - start != size:
            raise KafkaRefuses("Invalid record size: expected to read ...")
        out.append((key, value, tuple(headers)))
    if pos != len(section):
        raise KafkaRefuses("Incorrect declared batch size, records still remaining")
    return out


def gateway_records(buffer: bytes, reading: RecordReading) -> list[Fields] | str:
    try:
        (batch,) = read_batches(buffer)
        return [
            (key, value, headers) for _, key, value, headers, *_ in read_records(batch, reading)
        ]
    except CorruptBatch:
        return REFUSED


EVERYTHING = RecordReading(headers=True, key_bytes=-1, value_bytes=-1)
VALUES = RecordReading(key_bytes=-1, value_bytes=-1)


def _section() -> tuple[bytes, bytes]:
    plain = uncompressed_batch(
        (
            record(0, None, b'{"a": 1}', ((b"trace-id", b"x"),)),
            record(1, b"k" * 70, b"v" * 200),
            record(2, b"", None, ((b"h", None), (b"trace-id", b"1"))),
            record(3, b"key", b"w", ((b"trace-id", b"y"), (b"g", b""))),
        ),
        idempotent=False,
    )
    return plain, plain[HEADER_SIZE:]


def _bodies(section: bytes) -> list[bytes]:
    """Each record's body (after its length), by the lengths."""
    pos, bodies = 0, []
    while pos < len(section):
        size, pos = _kafka_varint(section, pos)
        bodies.append(section[pos : pos + size])
        pos += size
    return bodies


def _damaged(rng: random.Random, bodies: list[bytes]) -> tuple[bytes, int]:
    """The records with one to three changes in their bodies, each record's length kept
    true to its body or not; or the record count off by one."""
    changed = [bytearray(body) for body in bodies]
    lengths = [len(body) for body in bodies]
    count = len(bodies)
    for _ in range(rng.choice([1, 2, 3])):
        i = rng.randrange(len(changed))
        body = changed[i]
        choice = rng.randrange(5)
        if choice == 0:
            body[rng.randrange(len(body))] = rng.choice(
                [0x00, 0x01, 0x02, 0x03, 0x0F, 0x10, 0x7F, 0x80, 0xFF, rng.randrange(256)]
            )
        elif choice == 1:
            body.insert(rng.randrange(len(body) + 1), rng.choice([0x00, 0x80, 0x01, 0x02]))
        elif choice == 2 and len(body) > 1:
            del body[rng.randrange(len(body))]
        elif choice == 3:
            count += rng.choice([-1, 1])
        if rng.random() < 0.7:
            lengths[i] = len(body)
    section = b"".join(varint(n) + bytes(body) for n, body in zip(lengths, changed, strict=True))
    return section, max(count, 0)


def test_records_the_gateway_reads_kafka_reads_alike() -> None:
    """Records damaged at random (fields, varints, lengths, counts; CRC fixed; a fixed
    seed): whatever the gateway reads with headers, Kafka reads the same, key, value and
    headers. Read without headers (value and key rules), the gateway does not look at header
    bytes: Kafka then reads the same keys and values, or refuses the batch for its headers."""
    plain, section = _section()
    bodies = _bodies(section)
    rng = random.Random(20261124)
    accepted = 0
    for attempt in range(2000):
        damaged, count = _damaged(rng, bodies)
        buffer = reframe(plain, records_section=damaged, record_count=count)
        try:
            kafka: list[Fields] | str = kafka_records(damaged, count)
        except KafkaRefuses:
            kafka = REFUSED
        ours = gateway_records(buffer, EVERYTHING)
        assert ours in (REFUSED, kafka), (attempt, damaged.hex(), count)
        accepted += ours != REFUSED
        values = gateway_records(buffer, VALUES)
        if values != REFUSED and kafka != REFUSED:
            assert values == [(k, v, ()) for k, v, _ in kafka], (attempt, damaged.hex(), count)
    assert accepted > 200  # damage that leaves a readable batch (a changed value, a header)


def _raw_record(body: bytes) -> bytes:
    return bytes([len(body) << 1]) + body


@pytest.mark.parametrize(
    ("name", "body", "kafka"),
    [
        # attributes, timestamp delta, offset delta, key size, key, value size, value, headers
        # A key size of 1 written in five bytes, the fifth with a bit an int drops: Kafka
        # reads 1, a reader that kept the bit a size past the record.
        ("wide-key-size", b"\x00\x00\x00\x82\x80\x80\x80\x10k\x02v\x00", (b"k", b"v", ())),
        # Sizes below -1: null to Kafka.
        ("key-size-minus-2", b"\x00\x00\x00\x03\x02v\x00", (None, b"v", ())),
        (
            "header-value-size-minus-5",
            b"\x00\x00\x00\x01\x02v\x02\x02h\x09",
            (None, b"v", (("h", None),)),
        ),
    ],
)
def test_what_kafka_reads_leniently_the_gateway_refuses(
    name: str, body: bytes, kafka: Fields
) -> None:
    buffer = reframe(
        uncompressed_batch((record(0, b"k", b"v"),), idempotent=False),
        records_section=_raw_record(body),
    )

    assert kafka_records(_raw_record(body), 1) == [kafka]
    assert gateway_records(buffer, EVERYTHING) == REFUSED
    # Read without headers, a header is not looked at: its key and value are Kafka's.
    assert gateway_records(buffer, VALUES) in (REFUSED, [(kafka[0], kafka[1], ())])


def _section_of(*values: bytes) -> bytes:
    batch = uncompressed_batch(
        tuple(record(i, b"k", v) for i, v in enumerate(values)), idempotent=False
    )
    return batch[HEADER_SIZE:]


GOOD = _section_of(b"good")
TWO = _section_of(b"good", b"also")
HIDDEN = _section_of(b"hidden")
SKIPPABLE = struct.pack("<II", 0x184D2A50, 4) + b"skip"
LZ4_CHECKSUMMED = lz4.frame.compress(GOOD, content_checksum=True)


BOTH = [b"good", b"also"]
ONE = [b"good"]
GZIP, LZ4, ZSTD, SNAPPY = (
    CompressionType.GZIP,
    CompressionType.LZ4,
    CompressionType.ZSTD,
    CompressionType.SNAPPY,
)
# name: (codec, records section as sent, record_count, the values Kafka reads (REFUSED when
# it refuses the batch), the values the gateway reads)
CODEC_CASES: dict[str, tuple[CompressionType, bytes, int, object, object]] = {
    # GZIPInputStream reads member after member, and ignores what follows a member when it
    # is no gzip header (readTrailer).
    "gzip-members-split": (GZIP, gzip.compress(TWO[:9]) + gzip.compress(TWO[9:]), 2, BOTH, BOTH),
    "gzip-garbage-after": (GZIP, gzip.compress(GOOD) + b"garbage!", 1, ONE, REFUSED),
    "gzip-member-of-more": (GZIP, gzip.compress(GOOD) + gzip.compress(HIDDEN), 1, REFUSED, REFUSED),
    # Lz4BlockInputStream reads one frame: at its end mark the stream ends. The content
    # checksum is skipped unread ("TODO: verify this content checksum").
    "lz4-split-over-frames": (
        LZ4,
        lz4.frame.compress(TWO[:9]) + lz4.frame.compress(TWO[9:]),
        2,
        REFUSED,
        BOTH,
    ),
    "lz4-empty-frame-after": (LZ4, lz4.frame.compress(GOOD) + lz4.frame.compress(b""), 1, ONE, ONE),
    "lz4-skippable-frame-after": (LZ4, lz4.frame.compress(GOOD) + SKIPPABLE, 1, ONE, ONE),
    "lz4-skippable-frame-first": (LZ4, SKIPPABLE + lz4.frame.compress(GOOD), 1, REFUSED, ONE),
    "lz4-end-mark-missing": (LZ4, lz4.frame.compress(GOOD)[:-4], 1, REFUSED, REFUSED),
    "lz4-content-checksum-wrong": (
        LZ4,
        LZ4_CHECKSUMMED[:-1] + bytes([LZ4_CHECKSUMMED[-1] ^ 1]),
        1,
        ONE,
        REFUSED,
    ),
    # zstd-jni reads frame after frame and steps over skippable frames.
    "zstd-split-over-frames": (
        ZSTD,
        zstandard.compress(TWO[:9]) + zstandard.compress(TWO[9:]),
        2,
        BOTH,
        BOTH,
    ),
    "zstd-skippable-frames": (ZSTD, SKIPPABLE + zstandard.compress(GOOD) + SKIPPABLE, 1, ONE, ONE),
    "zstd-garbage-after": (ZSTD, zstandard.compress(GOOD) + b"garbage!", 1, REFUSED, REFUSED),
    "zstd-truncated": (ZSTD, zstandard.compress(GOOD)[:-2], 1, REFUSED, REFUSED),
    # snappy-java: without the xerial magic one raw block; with it chunk after chunk, fewer
    # than 4 bytes after the last ignored, a chunk length equal to the magic's first 4 bytes
    # the start of another xerial stream, read on.
    "snappy-raw": (SNAPPY, snappy.compress(GOOD), 1, ONE, ONE),
    "snappy-raw-trailing": (SNAPPY, snappy.compress(GOOD) + b"\x00", 1, REFUSED, REFUSED),
    "snappy-xerial-chunks": (SNAPPY, xerial(TWO, block_size=9), 2, BOTH, BOTH),
    "snappy-xerial-3-bytes-after": (SNAPPY, xerial(GOOD) + b"abc", 1, ONE, REFUSED),
    "snappy-xerial-stream-after": (SNAPPY, xerial(TWO[:9]) + xerial(TWO[9:]), 2, BOTH, REFUSED),
    "snappy-xerial-stream-of-more": (SNAPPY, xerial(GOOD) + xerial(HIDDEN), 1, REFUSED, REFUSED),
}


@pytest.mark.parametrize("name", CODEC_CASES)
def test_unusual_framing_reads_as_kafka_reads_or_is_refused(name: str) -> None:
    """Pinned: the gateway's answer. Held: where Kafka reads records, the gateway reads the
    same or refuses (where Kafka refuses, nothing is stored whatever the gateway reads)."""
    codec, payload, count, kafka, expected = CODEC_CASES[name]
    buffer = reframe(
        uncompressed_batch((record(0, b"k", b"v"),), idempotent=False),
        records_section=payload,
        attributes=int(codec),
        record_count=count,
    )
    ours = gateway_records(buffer, EVERYTHING)
    values = ours if ours == REFUSED else [value for _, value, _ in ours]

    assert values == expected
    assert kafka == REFUSED or values in (REFUSED, kafka)


def test_an_lz4_frame_after_the_records_is_refused_though_kafka_ignores_it() -> None:
    """Kafka reads the records from the first frame, ignores a second and stores it with the
    batch: records in it were never read by the broker, nor by the gateway's policy if the
    gateway stopped at the first frame as Kafka does. The gateway reads every frame and
    refuses a batch whose records are followed by more, so those bytes are never stored."""
    buffer = reframe(
        uncompressed_batch((record(0, b"k", b"v"),), idempotent=False),
        records_section=lz4.frame.compress(GOOD) + lz4.frame.compress(HIDDEN),
        attributes=int(CompressionType.LZ4),
        record_count=1,
    )

    assert gateway_records(buffer, EVERYTHING) == REFUSED
    assert gateway_records(buffer, VALUES) == REFUSED
