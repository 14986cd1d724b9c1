"""Record batches for tests and benchmarks: built with kio's writer (an independent
encoder), then compressed with any codec or changed field by field, CRC fixed."""

import datetime
import gzip
import io
import struct
from collections.abc import Callable, Mapping

import lz4.frame
import snappy
import zstandard
from crc32c import crc32c
from kio.records.schema import NewRecordBatch, Record, RecordHeader
from kio.records.writers import write_new_batch
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import TopicName
from kio.static.primitive import TZAwareMicros, i8, i16, i32, i32Timedelta, i64

from protocol.records import CompressionType

HEADER_SIZE = 61  # a magic 2 batch header, up to and including record_count
TIMESTAMP = TZAwareMicros.parse(datetime.datetime(2024, 5, 1, tzinfo=datetime.UTC))


def xerial(data: bytes, block_size: int = 32 * 1024) -> bytes:
    """Snappy in the xerial framing the Java client writes."""
    framed = [b"\x82SNAPPY\x00", struct.pack(">ii", 1, 1)]
    for start in range(0, len(data), block_size):
        block = snappy.compress(data[start : start + block_size])
        framed += [struct.pack(">i", len(block)), block]
    return b"".join(framed)


Compress = Callable[[bytes], bytes]
CODECS: dict[str, tuple[CompressionType, Compress]] = {
    "none": (CompressionType.NONE, lambda data: data),
    "gzip": (CompressionType.GZIP, gzip.compress),
    "snappy-raw": (CompressionType.SNAPPY, snappy.compress),
    "snappy-xerial": (CompressionType.SNAPPY, xerial),
    "lz4": (CompressionType.LZ4, lz4.frame.compress),
    "zstd": (CompressionType.ZSTD, zstandard.ZstdCompressor().compress),
}


def record(
    offset: int,
    key: bytes | None,
    value: bytes | None,
    headers: tuple[tuple[bytes, bytes | None], ...] = (),
) -> Record:
    return Record(
        attributes=i8(0),
        timestamp=TIMESTAMP,
        offset=i64(offset),
        key=key,
        value=value,
        headers=tuple(RecordHeader(key=k, value=v) for k, v in headers),
    )


def uncompressed_batch(records: tuple[Record, ...], *, idempotent: bool = True) -> bytes:
    """One batch of the records; idempotent=False: no producer id, as a plain producer sends."""
    buffer = io.BytesIO()
    write_new_batch(
        buffer,
        NewRecordBatch(
            producer_id=i64(7 if idempotent else -1),
            producer_epoch=i16(1 if idempotent else -1),
            base_sequence=i32(0 if idempotent else -1),
            records=records,
            attributes=i16(0),
        ),
    )
    return buffer.getvalue()


def reframe(
    batch: bytes,
    *,
    records_section: bytes | None = None,
    attributes: int | None = None,
    magic: int | None = None,
    record_count: int | None = None,
) -> bytes:
    """Change a batch's fields or records section and fix its batch_length and CRC."""
    header = bytearray(batch[:HEADER_SIZE])
    section = batch[HEADER_SIZE:] if records_section is None else records_section
    if attributes is not None:
        struct.pack_into(">h", header, 21, attributes)
    if magic is not None:
        header[16] = magic
    if record_count is not None:
        struct.pack_into(">i", header, 57, record_count)
    struct.pack_into(">i", header, 8, HEADER_SIZE - 12 + len(section))
    struct.pack_into(">I", header, 17, crc32c(bytes(header[21:]) + section))
    return bytes(header) + section


def batch_with(codec: str, records: tuple[Record, ...], *, idempotent: bool = True) -> bytes:
    """One batch of the records, its records section compressed with the codec (CODECS)."""
    compression, compress = CODECS[codec]
    plain = uncompressed_batch(records, idempotent=idempotent)
    return reframe(
        plain, records_section=compress(plain[HEADER_SIZE:]), attributes=int(compression)
    )


def produce_v9(
    topics: Mapping[str, Mapping[int, bytes | None]],
    *,
    acks: int = 1,
    transactional_id: str | None = None,
) -> ProduceRequest:
    """A Produce v9 request: for each topic, its partitions' records (None: an entry with no
    records; an empty mapping: a topic entry with no partitions)."""
    return ProduceRequest(
        transactional_id=transactional_id,
        acks=i16(acks),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        topic_data=tuple(
            TopicProduceData(
                name=TopicName(topic),
                partition_data=tuple(
                    PartitionProduceData(index=i32(index), records=records)
                    for index, records in partitions.items()
                ),
            )
            for topic, partitions in topics.items()
        ),
    )


def one_record_batch() -> bytes:
    """One uncompressed record, key ``k``, value ``v``, no headers (not idempotent)."""
    return batch_with("none", (record(0, b"k", b"v"),), idempotent=False)


def varint(value: int) -> bytes:
    """A zigzag varint, as records carry their sizes."""
    raw, out = (value << 1) ^ (value >> 63), bytearray()
    while raw >= 0x80:
        out.append(raw & 0x7F | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)
