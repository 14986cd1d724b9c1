"""Record batches (magic 2): split, verify, decompress and read records lazily.

Contracts, stated once:

- `read_batches` checks everything that can be checked without touching the records:
  the buffer is an exact sequence of whole batches, each with magic 2, a batch_length
  that covers its header, a matching CRC-32C, a known compression codec and a
  non-negative record_count. It copies nothing: each `BatchView.payload` is a
  memoryview into the caller's buffer, so the buffer must outlive the views.
- `read_records` is the one record reader. A `RecordReading` says what it takes of each
  record (the headers or not, how many leading bytes of key and value) and of which
  records: every one, or only those that lack one of some header keys, the others read,
  checked and counted but never made into an object. It is lazy: nothing is decompressed
  before the first record is asked for, and a caller that stops early pays only for what
  it read:

  ========================  ===================================================
  codec                     what one step decompresses
  ========================  ===================================================
  none                      nothing; records are parsed in place (no copy)
  gzip, lz4 (frame)         at most 256 KiB of output
  zstd                      whole blocks adding up to at most 256 KiB, plus one
                            (a block is at most 128 KiB)
  snappy, xerial framing    one xerial block (the Java client writes 32 KiB)
  snappy, raw block         the whole records section: the format cannot stream
  ========================  ===================================================

  The checks that need the whole records section (exactly record_count records, no
  bytes after the last one, the compressed stream complete and intact) run only when
  the iteration ends. A caller that stops early has not validated the batch.
- It reads in bounded steps, so that a caller can take turns with other work:
  `BatchRecords.windows()` hands the records over a window at a time, each window at
  most 1,024 records (128 from the full reader) and at most one decompression step
  above between two windows. One record is never split: `max_record_bytes` bounds it.
  Raw snappy is the exception: its block is one step.
- Limits raise `OverLimit` (a `CorruptBatch`): a compressed batch as soon as its
  records pass `max_decompressed_bytes` (a raw snappy or xerial block before it is
  decompressed, from its declared size), a record whose size_in_bytes is over
  `max_record_bytes` before it is read.
- The fast path is C (protocol/_recscan.c): it reads records a window at a time (256 KiB
  decompressed, or 1 MiB in place when read_batches was given `bytes`) and makes an
  object only of the records the reading takes. The full reader (`_read_fully`) is the
  reference: the C scanner reads a record exactly as it does, or leaves the batch to it
  from the first record not yet handed out, on a record out of the ordinary, a failing
  stream, or header keys it cannot match (more than 64, or not plain UTF-8). Whatever is
  wrong with a batch is so said in the full reader's words, after as many records. A
  limit is not a fault of the batch: both readers stop at a record over max_record_bytes
  alike; past max_decompressed_bytes each stops where its reading ahead takes it, so a
  batch damaged just before that point may be refused for either.
  Without that module (not built, or KPG_RECORD_SCANNER=python) the full reader answers
  alone: the same answers, the search for missing header keys about 200 times slower
  (2.3 against 0.011 us per 512-byte record, one batch of 1,900, in process).
- Every problem in the data raises `CorruptBatch`, whose text says what is wrong.
"""

import enum
import functools
import os
import zlib
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from functools import partial
from itertools import chain
from types import ModuleType
from typing import Final, TypeAlias

import lz4.frame
import snappy
import zstandard
from crc32c import crc32c
from kio.serial.errors import BufferUnderflow
from kio.serial.readers import (
    read_int8,
    read_int16,
    read_int32,
    read_int64,
    read_signed_varint,
    read_signed_varlong,
    read_uint32,
    read_unsigned_varint,
)

__all__ = (
    "MAX_DECOMPRESSED_BYTES",
    "BatchRecords",
    "BatchView",
    "CompressionType",
    "CorruptBatch",
    "RecordFields",
    "RecordHeaders",
    "RecordReading",
    "read_batches",
    "read_records",
    "record_scanner",
)

_native: ModuleType | None
try:
    from . import _recscan as _native
except ImportError:  # built without a C compiler: the full reader answers alike, slower
    _native = None
_SCANNER_ENV: Final = "KPG_RECORD_SCANNER"
_scanner_asked = os.environ.get(_SCANNER_ENV, "")
if _scanner_asked not in ("", "native", "python"):
    raise ImportError(f"{_SCANNER_ENV}={_scanner_asked!r}: expected native or python (or unset)")
if _scanner_asked == "python":
    _native = None
elif _scanner_asked == "native" and _native is None:
    raise ImportError(
        f"{_SCANNER_ENV}=native, but protocol._recscan was not built: install with a C "
        "compiler, or unset it to read records with the full Python reader"
    )

MAX_DECOMPRESSED_BYTES: Final = 100 * 1024 * 1024
"""Default cap on what one batch's records section may decompress to."""

# Field offsets in a magic 2 batch, named as in Kafka's DefaultRecordBatch.
_BASE_OFFSET_OFFSET: Final = 0
_LENGTH_OFFSET: Final = 8
_PARTITION_LEADER_EPOCH_OFFSET: Final = 12
_MAGIC_OFFSET: Final = 16
_CRC_OFFSET: Final = 17
_ATTRIBUTES_OFFSET: Final = 21
_LAST_OFFSET_DELTA_OFFSET: Final = 23
_BASE_TIMESTAMP_OFFSET: Final = 27
_MAX_TIMESTAMP_OFFSET: Final = 35
_PRODUCER_ID_OFFSET: Final = 43
_PRODUCER_EPOCH_OFFSET: Final = 51
_BASE_SEQUENCE_OFFSET: Final = 53
_RECORDS_COUNT_OFFSET: Final = 57
_RECORDS_OFFSET: Final = 61
_LOG_OVERHEAD: Final = _PARTITION_LEADER_EPOCH_OFFSET  # base_offset + batch_length
_RECORD_BATCH_OVERHEAD: Final = _RECORDS_OFFSET

_COMPRESSION_CODEC_MASK: Final = 0x07
_TRANSACTIONAL_FLAG_MASK: Final = 0x10
_CONTROL_FLAG_MASK: Final = 0x20

_MAX_VARINT_SIZE: Final = 5
_READ_AHEAD: Final = 64 * 1024
_COMPRESSED_INPUT_CHUNK: Final = 64 * 1024

_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE: Final = len(_XERIAL_MAGIC) + 8  # two int32 version fields

# zstd (RFC 8878). A block decompresses to at most 128 KiB and costs at least 4 bytes (an
# RLE block): 64 bytes of input make at most 2 MiB of output.
_ZSTD_MIN_INPUT_CHUNK: Final = 64
_ZSTD_STEP_OUTPUT: Final = 256 * 1024
_ZSTD_MAX_BLOCK: Final = 128 * 1024
_ZSTD_MAGIC: Final = 0xFD2FB528
_ZSTD_SKIPPABLE_MAGIC: Final = 0x184D2A50
_ZSTD_SKIPPABLE_MASK: Final = 0xFFFFFFF0
_ZSTD_RLE_BLOCK: Final = 1
_ZSTD_COMPRESSED_BLOCK: Final = 2


class CompressionType(enum.IntEnum):
    """The codec in bits 0-2 of a batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class CorruptBatch(Exception):
    """A record batch that cannot be read; the text says what is wrong with it."""


class OverLimit(CorruptBatch):
    """Reading stopped at a limit the caller set, not at a fault of the batch: records past
    ``max_decompressed_bytes`` of decompressed data, or a record longer than
    ``max_record_bytes``. Either reader stops there; the full reader is not asked again."""

    def __init__(
        self, message: str, *, limit: str, maximum: int, size: int, record: int | None = None
    ) -> None:
        super().__init__(message)
        self.limit = limit
        """``max_decompressed_bytes`` or ``max_record_bytes``."""
        self.maximum = maximum
        """The limit's value."""
        self.size = size
        """How far over it is known to go: the bytes decompressed so far, or declared by
        the block being decompressed (at least this many); the record's size_in_bytes."""
        self.record = record
        """For max_record_bytes: the record's index in the batch."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchView:
    """One record batch: header parsed and verified, records section untouched."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    compression: CompressionType
    is_transactional: bool
    is_control: bool
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    payload: memoryview
    """The records section as sent (compressed or not), a view into the caller's buffer."""
    payload_start: int | None = None
    """Where payload starts in ``payload.obj``, when read_batches was given ``bytes``: the
    fast path then scans those bytes in place instead of copying the payload out."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordReading:
    """What `read_records` takes of each record, and of which records.

    :raises ValueError: key_bytes or value_bytes below -1; lacking without headers.
    """

    headers: bool = False
    """Read every header. Without, a record's headers are counted but not read, so a
    malformed header goes unnoticed."""
    key_bytes: int = 0
    """-1 for the whole key, N for its first N bytes; 0 gives b"" for a non-null key (and
    None for a null one), so nullness and the full size are always known."""
    value_bytes: int = 0
    """As key_bytes, for the value."""
    lacking: tuple[str, ...] | None = None
    """None: every record. Header keys: only the records that lack a header with one of
    them (matched exactly, case-sensitive, as the keys decode; whatever the header's
    value, null included). Needs headers."""

    def __post_init__(self) -> None:
        if self.key_bytes < -1 or self.value_bytes < -1:
            raise ValueError(
                f"key_bytes and value_bytes must be >= -1: {self.key_bytes}, {self.value_bytes}"
            )
        if self.lacking is not None and not self.headers:
            raise ValueError("reading the records that lack a header key needs headers=True")


RecordHeaders: TypeAlias = tuple[tuple[str, bytes | None], ...]
"""A record's headers: (key, value) pairs in order, a null value as None. Keys decode as
UTF-8 the way Java does: invalid sequences become U+FFFD."""

RecordFields: TypeAlias = tuple[int, bytes | None, bytes | None, RecordHeaders, int, int, int]
"""One record as read_records gives it, a plain tuple (an object per record would cost
more than reading it): (index, key, value, headers, key_size, value_size, size_in_bytes).
index is the position in the batch, 0-based (Kafka's batch_index in record_errors); key
and value are cut as the RecordReading asks, None when null; headers are () unless read;
key_size and value_size are the full sizes on the wire, -1 for null; size_in_bytes is the
record's encoded size, its length varint included (Kafka's sizeInBytes)."""


class BatchRecords:
    """The records of one batch that a RecordReading takes, in batch order: an iterator of
    RecordFields (see read_records), or of windows of them (``windows()``).

    ``records_read``: how many records have been read whole so far, taken or not; after a
    CorruptBatch, how many the full reader read before it. ``size_in_bytes``: once the
    iteration has ended, every record's size_in_bytes added up, which is the length of the
    decompressed records section.
    """

    __slots__ = ("_records", "_windows", "records_read", "size_in_bytes")

    def __init__(self, batch: BatchView, reading: RecordReading, limits: "_Limits"):
        self.records_read = 0
        self.size_in_bytes = 0
        self._windows = _windows(batch, reading, limits, self)
        self._records: Iterator[RecordFields] = chain.from_iterable(self._windows)

    def __iter__(self) -> Iterator[RecordFields]:
        return self._records

    def __next__(self) -> RecordFields:
        return next(self._records)

    def windows(self) -> Iterator[list[RecordFields]]:
        """The same records, a window at a time (lists, some empty), for a caller that takes
        turns with other work: each window is a bounded step (see the module docstring).
        Iterate either this or the records, not both."""
        return self._windows


def read_batches(records: bytes | memoryview) -> tuple[BatchView, ...]:
    """Split a Produce partition's records field into batches and verify each header.

    An empty buffer gives an empty tuple; whether that is allowed is the caller's call.

    :raises CorruptBatch: magic other than 2, truncated data, a batch_length too short
        for the header, bytes left over after the last batch, a bad CRC-32C, an
        unknown compression codec, or a negative record_count.
    """
    view = memoryview(records).cast("B")
    batches: list[BatchView] = []
    start = 0
    while start < len(view):
        batch = _read_batch(view, start, in_place=isinstance(records, bytes))
        batches.append(batch)
        start += _LOG_OVERHEAD + batch.batch_length
    return tuple(batches)


def read_records(
    batch: BatchView,
    reading: RecordReading,
    *,
    max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES,
    max_record_bytes: int | None = None,
) -> BatchRecords:
    """The records of a batch that ``reading`` takes, read as it asks, decompressing only as
    far as needed.

    See the module docstring for what is lazy and which checks wait for the end.

    :raises ValueError: max_decompressed_bytes or max_record_bytes < 1 (at once, not on
        iteration).
    :raises CorruptBatch: while iterating, for records that do not add up to the
        batch's record_count and records section, records whose fields overrun them,
        a compressed stream that is truncated or fails to decompress.
    :raises OverLimit: while iterating, for more than max_decompressed_bytes of
        decompressed records, or a record whose size_in_bytes is over max_record_bytes
        (None: no limit), before it is read.
    """
    if max_decompressed_bytes < 1:
        raise ValueError(f"max_decompressed_bytes must be positive: {max_decompressed_bytes}")
    if max_record_bytes is not None and max_record_bytes < 1:
        raise ValueError(f"max_record_bytes must be positive: {max_record_bytes}")
    limits = _Limits(decompressed=max_decompressed_bytes, record=max_record_bytes or _NO_LIMIT)
    return BatchRecords(batch, reading, limits)


def record_scanner() -> str:
    """How read_records reads records: "native" (protocol/_recscan.c, the full reader only
    for what it leaves) or "python" (the full reader alone: the module was not built, or
    KPG_RECORD_SCANNER=python asks for it)."""
    return "python" if _native is None else "native"


def _read_batch(view: memoryview, start: int, *, in_place: bool = False) -> BatchView:
    remaining = len(view) - start
    if remaining > _MAGIC_OFFSET:
        # The magic byte sits at the same offset in the legacy (magic 0 and 1) formats.
        magic, _ = read_int8(view, start + _MAGIC_OFFSET)
        if magic != 2:
            raise CorruptBatch(
                f"batch at byte {start} has magic {magic}; only magic 2 record batches are accepted"
            )
    if remaining < _RECORD_BATCH_OVERHEAD:
        raise CorruptBatch(
            f"truncated: {remaining} bytes at byte {start} are shorter than a record "
            f"batch header ({_RECORD_BATCH_OVERHEAD} bytes)"
        )
    batch_length, _ = read_int32(view, start + _LENGTH_OFFSET)
    if batch_length < _RECORD_BATCH_OVERHEAD - _LOG_OVERHEAD:
        raise CorruptBatch(
            f"batch at byte {start} has batch_length {batch_length}, shorter than its "
            f"own header ({_RECORD_BATCH_OVERHEAD - _LOG_OVERHEAD} bytes)"
        )
    end = start + _LOG_OVERHEAD + batch_length
    if end > len(view):
        raise CorruptBatch(
            f"truncated: batch at byte {start} has batch_length {batch_length} but only "
            f"{remaining - _LOG_OVERHEAD} bytes follow it"
        )

    crc, _ = read_uint32(view, start + _CRC_OFFSET)
    computed_crc = crc32c(view[start + _ATTRIBUTES_OFFSET : end])
    if crc != computed_crc:
        raise CorruptBatch(
            f"bad CRC: batch at byte {start} carries CRC-32C {crc:#010x} but its "
            f"contents hash to {computed_crc:#010x}"
        )

    attributes, _ = read_int16(view, start + _ATTRIBUTES_OFFSET)
    codec = attributes & _COMPRESSION_CODEC_MASK
    try:
        compression = CompressionType(codec)
    except ValueError:
        raise CorruptBatch(
            f"batch at byte {start} has unknown compression codec {codec} "
            f"(attributes {attributes:#06x})"
        ) from None
    record_count, _ = read_int32(view, start + _RECORDS_COUNT_OFFSET)
    if record_count < 0:
        raise CorruptBatch(f"batch at byte {start} has negative record_count {record_count}")

    return BatchView(
        base_offset=read_int64(view, start + _BASE_OFFSET_OFFSET)[0],
        batch_length=batch_length,
        partition_leader_epoch=read_int32(view, start + _PARTITION_LEADER_EPOCH_OFFSET)[0],
        magic=2,
        crc=crc,
        attributes=attributes,
        compression=compression,
        is_transactional=bool(attributes & _TRANSACTIONAL_FLAG_MASK),
        is_control=bool(attributes & _CONTROL_FLAG_MASK),
        last_offset_delta=read_int32(view, start + _LAST_OFFSET_DELTA_OFFSET)[0],
        base_timestamp=read_int64(view, start + _BASE_TIMESTAMP_OFFSET)[0],
        max_timestamp=read_int64(view, start + _MAX_TIMESTAMP_OFFSET)[0],
        producer_id=read_int64(view, start + _PRODUCER_ID_OFFSET)[0],
        producer_epoch=read_int16(view, start + _PRODUCER_EPOCH_OFFSET)[0],
        base_sequence=read_int32(view, start + _BASE_SEQUENCE_OFFSET)[0],
        record_count=record_count,
        payload=view[start + _RECORDS_OFFSET : end],
        payload_start=start + _RECORDS_OFFSET if in_place else None,
    )


# Reading the records of one batch: the C scanner's windows while it reads them, then the
# full reader for the rest. Each window is a bounded step of work, so that a caller can take
# turns with other work between windows: at most _WINDOW_RECORDS records from the C scanner
# (_FULL_READER_RECORDS from the full reader), and between two windows at most
# _INFLATE_STEP bytes decompressed; only one record is never split, whatever its size
# (max_record_bytes bounds it).


@dataclass(frozen=True, slots=True)
class _Limits:
    """What read_records may read of one batch: decompressed bytes, bytes of one record."""

    decompressed: int
    record: int


_NO_LIMIT: Final = 1 << 62


def _windows(
    batch: BatchView, reading: RecordReading, limits: _Limits, progress: BatchRecords
) -> Iterator[list[RecordFields]]:
    """The records a reading takes, a window at a time: from protocol._recscan while it
    reads the batch, then, if it leaves the batch, from the full reader from the first
    record not yet handed out."""
    wanted = None if reading.lacking is None else _native_keys(reading.lacking)
    if _native is not None and (reading.lacking is None or wanted is not None):
        window = partial(
            _native.record_window, wanted, reading.headers, reading.key_bytes, reading.value_bytes
        )
        try:
            yield from _scan(batch, limits, window, progress)
            return
        except OverLimit:
            raise  # the caller's limit, not a fault of the records: the full reader stops too
        except (_Irregular, CorruptBatch):
            pass  # the full reader below says what is wrong, in its own words
    yield from _read_fully(batch, reading, limits, progress, skip=progress.records_read)


class _Irregular(Exception):
    """The fast scan met something it leaves to the full reader to name."""


_SCAN_WINDOW: Final = 256 * 1024
"""Decompressed bytes per window of a compressed batch."""
_IN_PLACE_WINDOW: Final = 1024 * 1024
"""Bytes per window of an uncompressed batch: one window for a batch of librdkafka's default
batch.size (1,000,000), and a bounded list of records taken for a bigger one."""
_WINDOW_RECORDS: Final = 1024
"""Records per window of the C scanner: about 0.3 ms when every one is taken (made into
objects), whatever their size; windows of 512-byte records hold fewer."""
_FULL_READER_RECORDS: Final = 128
"""Records per window of the full reader (about 2 us each in Python)."""
_INFLATE_STEP: Final = 256 * 1024
"""Decompressed bytes asked for at a time while gathering a long record."""
_NATIVE_MAX_KEYS: Final = 64  # protocol._recscan tracks up to 64 wanted header keys

_Window: TypeAlias = Callable[
    [bytes, int, int, int, int], tuple[int, int, int, list[RecordFields]] | None
]
"""(buffer, position, first record, record count, stop) -> (position, index, bytes the
record at position needs from there on, the records taken) after the records lying whole in
buffer[:stop], or None for an irregular record: protocol._recscan's record_window, with
what to read bound."""
_Steps: TypeAlias = Generator[list[RecordFields], None, tuple[bytes, int]]
"""_refill: empty windows between steps, then (the new buffer, its position)."""


@functools.lru_cache(maxsize=256)
def _native_keys(keys: tuple[str, ...]) -> tuple[bytes, ...] | None:
    """The keys as a header carries them, when protocol._recscan can match them: when
    matching those bytes is matching the decoded key (not for a key with U+FFFD, which a key
    that is not UTF-8 decodes to, nor for one that UTF-8 cannot carry, a lone surrogate),
    and there are at most 64."""
    if any("\ufffd" in key for key in keys):
        return None
    try:
        raw = tuple(dict.fromkeys(key.encode() for key in keys))
    except UnicodeEncodeError:
        return None
    return raw if len(raw) <= _NATIVE_MAX_KEYS else None


def _scan(
    batch: BatchView, limits: _Limits, window: _Window, progress: BatchRecords
) -> Iterator[list[RecordFields]]:
    """Run ``window`` over every record of a batch, yielding what it takes, a window at a
    time; progress.records_read is where the next window starts. Raises _Irregular when a
    record is irregular or the records and the section do not end together, CorruptBatch
    from decompression, OverLimit at a limit.

    The scanner reads only records lying whole between position and stop, which is never
    more than max_record_bytes past position: so a record over that limit is never read
    here, but met as the one the scanner needs more bytes for, as the full reader meets it.
    """
    source = _open_inflater(batch, limits.decompressed)
    if source is None:
        return _scan_in_place(batch, limits.record, window, progress)
    return _scan_stream(source, batch.record_count, limits.record, window, progress)


def _scan_in_place(
    batch: BatchView, max_record: int, window: _Window, progress: BatchRecords
) -> Iterator[list[RecordFields]]:
    """_scan of an uncompressed batch: in the bytes read_batches was given, where they are."""
    payload = batch.payload
    start = batch.payload_start
    whole = payload.obj
    if start is None or not isinstance(whole, bytes):
        whole, start = bytes(payload), 0
    end = start + len(payload)
    count = batch.record_count
    step = min(_IN_PLACE_WINDOW, max_record)
    position, index, needed = start, 0, 0
    while index < count:
        if needed > max_record:
            raise _too_long(index, needed, max_record)
        stop = min(end, position + max(needed, step))
        last = min(count, index + _WINDOW_RECORDS)
        answer = window(whole, position, index, last, stop)
        if answer is None:
            raise _Irregular
        position, index, needed, records = answer
        progress.records_read = index
        yield records
        if index < last and stop == end and needed <= max_record:
            raise _Irregular  # the section ends before the records do
    if position != end:
        raise _Irregular
    progress.size_in_bytes = end - start


def _scan_stream(
    source: "_Inflater", count: int, max_record: int, window: _Window, progress: BatchRecords
) -> Iterator[list[RecordFields]]:
    """_scan of a compressed batch: in windows of decompressed bytes."""
    step = min(_SCAN_WINDOW, max_record)
    buffer = b""
    position = index = size = 0
    needed = _MAX_VARINT_SIZE
    while index < count:
        if needed > max_record:
            raise _too_long(index, needed, max_record)
        kept = len(buffer) - position
        if needed > kept:
            buffer, position = yield from _refill(source, buffer, position, max(needed, step))
            if len(buffer) == kept:  # the stream ended before the records did
                raise _Irregular
        start = position
        last = min(count, index + _WINDOW_RECORDS)
        stop = min(len(buffer), position + max(needed, step))
        answer = window(buffer, position, index, last, stop)
        if answer is None:
            raise _Irregular
        position, index, needed, records = answer
        size += position - start
        progress.records_read = index
        yield records
    if position != len(buffer) or source.read(1):
        raise _Irregular
    progress.size_in_bytes = size


# The full reader: the reference the C scanner is held to, and the reader of whatever it
# leaves. It decodes a one-byte varint (zigzag: (b >> 1) ^ -(b & 1)) in line and leaves
# longer ones to kio; every byte field (key, value, header key and value) goes through
# _read_bytes, one place for what makes a field fit its record.


def _read_fully(
    batch: BatchView, reading: RecordReading, limits: _Limits, progress: BatchRecords, *, skip: int
) -> Iterator[list[RecordFields]]:
    """Every record of the batch read in Python, from the first, yielding those the reading
    takes from index ``skip`` on (the C scanner handed out those before), in windows."""
    headers, key_bytes, value_bytes = reading.headers, reading.key_bytes, reading.value_bytes
    lacking = None if reading.lacking is None else frozenset(reading.lacking)
    max_record = limits.record
    read = size = 0
    try:
        source = _open_inflater(batch, limits.decompressed)
        # Uncompressed: the whole section, in place. Compressed: a window of decompressed
        # bytes that starts at `position`'s record and is refilled from `source`.
        buffer: bytes | memoryview = batch.payload if source is None else b""
        view = memoryview(buffer)
        position = 0
        count = batch.record_count
        for first in range(0, count, _FULL_READER_RECORDS):
            taken: list[RecordFields] = []
            for index in range(first, min(count, first + _FULL_READER_RECORDS)):
                available = len(buffer) - position
                if source is not None and available < _MAX_VARINT_SIZE:
                    buffer, position = yield from _refill(
                        source, buffer, position, _MAX_VARINT_SIZE
                    )
                    view = memoryview(buffer)
                    available = len(buffer)
                length_size, size_in_bytes = _record_size(
                    buffer, position, available, index, count, max_record
                )
                if source is not None and available < size_in_bytes:
                    buffer, position = yield from _refill(source, buffer, position, size_in_bytes)
                    view = memoryview(buffer)
                    available = len(buffer)
                if available < size_in_bytes:
                    raise CorruptBatch(
                        f"truncated: record {index} has length {size_in_bytes - length_size} "
                        f"but the records section has only {available - length_size} bytes left"
                    )
                body = view[position + length_size : position + size_in_bytes]
                record = _read_record(body, index, size_in_bytes, headers, key_bytes, value_bytes)
                position += size_in_bytes
                size += size_in_bytes
                read = index + 1
                if index >= skip and (
                    lacking is None or not lacking.issubset([key for key, _ in record[3]])
                ):
                    taken.append(record)
            yield taken
        _check_section_end(source, len(buffer) - position, count)
    finally:
        progress.records_read = read
    progress.size_in_bytes = size


def _record_size(
    buffer: bytes | memoryview, position: int, available: int, index: int, count: int, limit: int
) -> tuple[int, int]:
    """The record at position: (the size of its length varint, its size_in_bytes).

    :raises CorruptBatch: when the section has ended, or the length is cut off or negative.
    :raises OverLimit: when its size_in_bytes is over limit (max_record_bytes).
    """
    if available == 0:
        raise CorruptBatch(
            f"batch declares record_count {count} but its records section ends "
            f"after {index} records"
        )
    byte = buffer[position]
    if byte < 0x80:
        length, length_size = (byte >> 1) ^ -(byte & 1), 1
    else:
        length, length_size = _record_length(buffer, position, index)
    if length < 0:
        raise CorruptBatch(f"record {index} has negative length {length}")
    if length_size + length > limit:
        raise _too_long(index, length_size + length, limit)
    return length_size, length_size + length


def _too_long(index: int, size: int, limit: int) -> OverLimit:
    return OverLimit(
        f"record {index} is {size} bytes long, more than max_record_bytes ({limit})",
        limit="max_record_bytes",
        maximum=limit,
        size=size,
        record=index,
    )


def _record_length(buffer: bytes | memoryview, position: int, index: int) -> tuple[int, int]:
    """The length of the record at position, a varint longer than one byte: (length, size of
    the varint)."""
    try:
        return read_signed_varint(buffer, position)
    except BufferUnderflow as exc:
        raise CorruptBatch(f"truncated: record {index}'s length is cut off") from exc
    except ValueError as exc:
        raise CorruptBatch(f"record {index}: its length cannot be read: {exc}") from exc


def _check_section_end(source: "_Inflater | None", left_over: int, count: int) -> None:
    """After the last record: nothing may be left of the records section."""
    if source is not None and left_over == 0:
        left_over = len(source.read(1))
    if left_over:
        raise CorruptBatch(
            f"records section has bytes left after the {count} records the batch declares"
        )


def _refill(source: "_Inflater", buffer: bytes | memoryview, position: int, needed: int) -> _Steps:
    """Keep the unread part of buffer and append at least what makes `needed` bytes (less
    only at the end of the stream), asking for at most _INFLATE_STEP bytes at a time; an
    empty window between two asks."""
    parts: list[bytes | memoryview] = [memoryview(buffer)[position:]]
    missing = max(needed - len(parts[0]), _READ_AHEAD)
    while True:
        asked = min(missing, _INFLATE_STEP)
        more = source.read(asked)
        parts.append(more)
        missing -= len(more)
        if missing <= 0 or len(more) < asked:
            return b"".join(parts), 0
        yield []


def _read_record(
    body: memoryview,
    index: int,
    size_in_bytes: int,
    headers: bool,
    key_bytes: int,
    value_bytes: int,
) -> RecordFields:
    """Parse one record body (after its length varint); body ends where the record ends.

    Reading past body's end (IndexError in line, BufferUnderflow in kio) is one error.
    """
    try:
        # attributes (int8); the timestamp and offset deltas are skipped, but read, so that
        # a malformed one is caught.
        offset = 2 if body[1] < 0x80 else 1 + read_signed_varlong(body, 1)[1]
        offset += 1 if body[offset] < 0x80 else read_signed_varint(body, offset)[1]

        key_size, key, offset = _read_bytes(body, offset, key_bytes, "key")
        value_size, value, offset = _read_bytes(body, offset, value_bytes, "value")

        byte = body[offset]
        if byte < 0x80:
            header_count = (byte >> 1) ^ -(byte & 1)
            offset += 1
        else:
            header_count, size = read_signed_varint(body, offset)
            offset += size
        # Each header takes at least two bytes (its two length varints).
        if header_count < 0 or 2 * header_count > len(body) - offset:
            raise ValueError(f"header count {header_count} does not fit the record")
        record_headers: RecordHeaders = ()
        if headers and header_count:
            record_headers, offset = _read_headers(body, offset, header_count)
        if (headers or header_count == 0) and offset != len(body):
            raise ValueError(f"length is {len(body)} but its fields take {offset} bytes")
    except (BufferUnderflow, IndexError) as exc:
        raise CorruptBatch(f"record {index}: fields overrun its length {len(body)}") from exc
    except ValueError as exc:
        raise CorruptBatch(f"record {index}: {exc}") from exc
    return index, key, value, record_headers, key_size, value_size, size_in_bytes


def _read_bytes(
    body: memoryview, offset: int, prefix: int, what: str
) -> tuple[int, bytes | None, int]:
    """The nullable byte field at offset (a size varint, then the bytes): (its size, its
    first ``prefix`` bytes (-1: all; None when null), the offset after it)."""
    byte = body[offset]
    if byte < 0x80:
        size = (byte >> 1) ^ -(byte & 1)
        offset += 1
    else:
        size, length = read_signed_varint(body, offset)
        offset += length
    if size == -1:
        return -1, None, offset
    end = offset + size
    if size < -1 or end > len(body):
        raise ValueError(f"{what} size {size} does not fit the record")
    return size, bytes(body[offset : end if prefix == -1 else min(end, offset + prefix)]), end


def _read_headers(body: memoryview, offset: int, count: int) -> tuple[RecordHeaders, int]:
    parsed: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        key_size, key, offset = _read_bytes(body, offset, -1, "header key")
        if key is None:
            raise ValueError(f"header key size {key_size} does not fit the record")
        _, value, offset = _read_bytes(body, offset, -1, "header value")
        parsed.append((str(key, "utf-8", "replace"), value))
    return tuple(parsed), offset


# Decompression. Each codec is wrapped as an _Inflater: read(n) returns up to n bytes,
# fewer only at the end of the stream, and enforces max_decompressed_bytes.


def _open_inflater(batch: BatchView, max_decompressed_bytes: int) -> "_Inflater | None":
    payload = batch.payload
    match batch.compression:
        case CompressionType.NONE:
            return None
        case CompressionType.GZIP:
            return _GzipInflater(payload, max_decompressed_bytes)
        case CompressionType.SNAPPY:
            if payload[: len(_XERIAL_MAGIC)].tobytes() == _XERIAL_MAGIC:
                return _XerialSnappyInflater(payload, max_decompressed_bytes)
            return _RawSnappyInflater(payload, max_decompressed_bytes)
        case CompressionType.LZ4:
            return _Lz4Inflater(payload, max_decompressed_bytes)
        case CompressionType.ZSTD:
            return _ZstdInflater(payload, max_decompressed_bytes)


class _Inflater:
    """Decompressed bytes on demand, at most `limit` of them in all."""

    codec: str = ""

    def __init__(self, payload: memoryview, limit: int) -> None:
        self._payload = payload
        self._position = 0  # in payload: what has been fed to the decompressor
        self._limit = limit
        self._produced = 0
        self._spill = memoryview(b"")  # output made beyond what read() asked for

    def read(self, n: int) -> bytes:
        parts = [self._spill[:n]]
        self._spill = self._spill[n:]
        wanted = n - len(parts[0])
        while wanted > 0:
            # Ask for one byte past the limit, so that going over it is seen.
            piece = self._next(min(wanted, self._limit - self._produced + 1))
            if piece is None:
                break
            self._produced += len(piece)
            if self._produced > self._limit:
                raise self._over_limit(self._produced)
            parts.append(memoryview(piece)[:wanted])
            self._spill = memoryview(piece)[wanted:]
            wanted -= len(parts[-1])
        return b"".join(parts)

    def _next(self, wanted: int) -> bytes | None:
        """Some output (up to `wanted` bytes if the codec can bound it); None at the end."""
        raise NotImplementedError

    def _next_input(self, size: int = _COMPRESSED_INPUT_CHUNK) -> memoryview | None:
        if self._position >= len(self._payload):
            return None
        chunk = self._payload[self._position : self._position + size]
        self._position += len(chunk)
        return chunk

    def _check_room(self, size: int) -> None:
        """Refuse before decompressing a block whose size is known in advance."""
        if self._produced + size > self._limit:
            raise self._over_limit(self._produced + size)

    def _over_limit(self, size: int) -> OverLimit:
        return OverLimit(
            f"{self.codec} records section decompresses to more than "
            f"max_decompressed_bytes ({self._limit})",
            limit="max_decompressed_bytes",
            maximum=self._limit,
            size=size,
        )

    def _truncated(self) -> CorruptBatch:
        return CorruptBatch(f"truncated: {self.codec} stream ends before its end marker")

    def _failed(self, exc: Exception) -> CorruptBatch:
        return CorruptBatch(f"{self.codec} decompression failed: {exc}")


class _GzipInflater(_Inflater):
    """gzip through zlib, bounded by max_length; concatenated members are read in turn
    (as java.util.zip.GZIPInputStream does)."""

    codec = "gzip"

    def __init__(self, payload: memoryview, limit: int) -> None:
        super().__init__(payload, limit)
        self._decompressor = _new_gzip_decompressor()
        self._pending: bytes | memoryview = b""  # input after a finished member

    def _next(self, wanted: int) -> bytes | None:
        try:
            while True:
                if self._decompressor.eof:
                    self._pending = self._decompressor.unused_data
                    if not self._pending and self._position >= len(self._payload):
                        return None
                    self._decompressor = _new_gzip_decompressor()
                data = self._decompressor.unconsumed_tail or self._pending or self._next_input()
                self._pending = b""
                output = self._decompressor.decompress(data or b"", wanted)
                if output:
                    return output
                if data is None and not self._decompressor.eof:
                    raise self._truncated()
        except zlib.error as exc:
            raise self._failed(exc) from exc


def _new_gzip_decompressor() -> "zlib._Decompress":
    return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)


class _Lz4Inflater(_Inflater):
    """The LZ4 frame format, bounded by max_length; concatenated frames are read in turn.

    Kafka's Lz4BlockInputStream reads the first frame only and ignores (and stores) what
    follows it. Reading every frame is the safe side of that difference: records behind the
    first frame are bytes left after the batch's records, so the batch is refused rather
    than stored with records no policy read (tests/unit/test_records_as_kafka_reads.py)."""

    codec = "lz4"

    def __init__(self, payload: memoryview, limit: int) -> None:
        super().__init__(payload, limit)
        self._decompressor = lz4.frame.LZ4FrameDecompressor()
        self._pending: bytes | memoryview = b""  # input after a finished frame

    def _next(self, wanted: int) -> bytes | None:
        try:
            while True:
                if self._decompressor.eof:
                    self._pending = self._decompressor.unused_data or b""
                    if not self._pending and self._position >= len(self._payload):
                        return None
                    self._decompressor = lz4.frame.LZ4FrameDecompressor()
                if not self._decompressor.needs_input:
                    data: bytes | memoryview | None = b""
                else:
                    data = self._pending or self._next_input()
                    self._pending = b""
                    if data is None:
                        raise self._truncated()
                output: bytes = self._decompressor.decompress(data, max_length=wanted)
                if output:
                    return output
        except RuntimeError as exc:
            raise self._failed(exc) from exc


class _ZstdInflater(_Inflater):
    """zstd; concatenated frames are read in turn (as zstd-jni does).

    zstandard's stream reader reports a truncated frame as a clean end, so this uses a
    decompressor object, which says whether the frame ended. That object cannot bound
    its output, so the input it gets is bounded instead: whole blocks whose sizes add up
    to at most _ZSTD_STEP_OUTPUT (_ZstdBlocks reads their headers), or, where the stream
    is not laid out as it expects, _ZSTD_MIN_INPUT_CHUNK bytes (at most 2 MiB at zstd's
    largest ratio).
    """

    codec = "zstd"

    def __init__(self, payload: memoryview, limit: int) -> None:
        super().__init__(payload, limit)
        self._decompressor = zstandard.ZstdDecompressor().decompressobj()
        self._blocks = _ZstdBlocks(payload)
        self._pending = memoryview(b"")  # input after a finished frame

    def _next(self, wanted: int) -> bytes | None:
        try:
            while True:
                if self._decompressor.eof:
                    self._pending = memoryview(self._decompressor.unused_data)
                    if not self._pending and self._position >= len(self._payload):
                        return None
                    if self._pending:  # the frame ended where the headers said it did not
                        self._blocks.opaque = True
                    self._decompressor = zstandard.ZstdDecompressor().decompressobj()
                if self._pending:
                    data: memoryview | None = self._pending[:_ZSTD_MIN_INPUT_CHUNK]
                    self._pending = self._pending[_ZSTD_MIN_INPUT_CHUNK:]
                else:
                    data = self._next_input(self._blocks.cut(self._position) - self._position)
                if data is None:
                    raise self._truncated()
                output = self._decompressor.decompress(data)
                if output:
                    return output
        except zstandard.ZstdError as exc:
            raise self._failed(exc) from exc


class _ZstdBlocks:
    """Where to cut a zstd stream so that what is fed at once decompresses to a bounded
    size: it walks the frame and block headers (RFC 8878) ahead of the decompressor. A raw
    or RLE block makes its Block_Size of output, a compressed one at most 128 KiB (the
    decompressor refuses more). It only chooses the cuts: the decompressor checks the
    stream, so what is wrong with one is said in its words."""

    def __init__(self, payload: memoryview) -> None:
        self._payload = payload
        self._at = 0  # the next header: of a frame, or of a block when in_frame
        self._in_frame = False
        self._checksum = False
        self.opaque = False
        """Not laid out as expected (not a zstd frame, or a frame that ended elsewhere):
        cut at _ZSTD_MIN_INPUT_CHUNK bytes from here on."""

    def cut(self, start: int) -> int:
        """Where the input fed from ``start`` (the last cut) should end."""
        end = len(self._payload)
        if self.opaque or self._at != start:
            self.opaque = True
            return min(end, start + _ZSTD_MIN_INPUT_CHUNK)
        output = 0
        while self._at < end and output < _ZSTD_STEP_OUTPUT:
            if not self._in_frame:
                if output or not self._frame_header():
                    break
                continue
            made = self._block()
            if made is None:
                return end  # a block header cut off: the decompressor says so
            output += made
            if not self._in_frame:
                break  # a frame at a time: the decompressor ends with it
        if self.opaque:
            return min(end, start + _ZSTD_MIN_INPUT_CHUNK)
        return max(min(self._at, end), start + 1)

    def _frame_header(self) -> bool:
        """Step over a frame header (or a skippable frame); False when it is not one."""
        p, at = self._payload, self._at
        if len(p) - at < 5:
            self.opaque = True
            return False
        magic = int.from_bytes(p[at : at + 4], "little")
        if magic & _ZSTD_SKIPPABLE_MASK == _ZSTD_SKIPPABLE_MAGIC:
            if len(p) - at < 8:
                self.opaque = True
                return False
            self._at = at + 8 + int.from_bytes(p[at + 4 : at + 8], "little")
            return True
        if magic != _ZSTD_MAGIC:
            self.opaque = True
            return False
        descriptor = p[at + 4]
        single_segment = descriptor >> 5 & 1
        window = 0 if single_segment else 1
        dictionary_id = (0, 1, 2, 4)[descriptor & 3]
        content_size = (single_segment, 2, 4, 8)[descriptor >> 6]
        self._at = at + 5 + window + dictionary_id + content_size
        self._checksum = bool(descriptor & 4)
        self._in_frame = True
        return True

    def _block(self) -> int | None:
        """Step over a block: how much it decompresses to at most; None if cut off."""
        p, at = self._payload, self._at
        if len(p) - at < 3:
            return None
        header = int.from_bytes(p[at : at + 3], "little")
        kind, size = header >> 1 & 3, header >> 3
        self._at = at + 3 + (1 if kind == _ZSTD_RLE_BLOCK else size)
        if header & 1:  # the last block, then the checksum if the frame has one
            self._at += 4 if self._checksum else 0
            self._in_frame = False
        return _ZSTD_MAX_BLOCK if kind == _ZSTD_COMPRESSED_BLOCK else size


class _SnappyInflater(_Inflater):
    codec = "snappy"

    def _uncompress_block(self, block: memoryview) -> bytes:
        """Check the block's declared size against the limit, then decompress it."""
        try:
            uncompressed_length, _ = read_unsigned_varint(block, 0)
        except (BufferUnderflow, ValueError) as exc:
            raise CorruptBatch(f"snappy block has no readable length: {exc}") from exc
        self._check_room(uncompressed_length)
        try:
            output: bytes = snappy.uncompress(block)
        except snappy.UncompressError as exc:
            raise self._failed(exc) from exc
        return output


class _RawSnappyInflater(_SnappyInflater):
    """One raw snappy block (what librdkafka writes): decompressed whole, on first read."""

    def __init__(self, payload: memoryview, limit: int) -> None:
        super().__init__(payload, limit)
        self._done = False

    def _next(self, wanted: int) -> bytes | None:
        if self._done:
            return None
        self._done = True
        return self._uncompress_block(self._payload)


class _XerialSnappyInflater(_SnappyInflater):
    """The xerial snappy framing the Java client writes: a 16-byte header, then
    [int32 block length][raw snappy block] repeated; decompressed a block at a time."""

    def __init__(self, payload: memoryview, limit: int) -> None:
        super().__init__(payload, limit)
        if len(payload) < _XERIAL_HEADER_SIZE:
            raise CorruptBatch("truncated: snappy (xerial) header is incomplete")
        self._position = _XERIAL_HEADER_SIZE

    def _next(self, wanted: int) -> bytes | None:
        while self._position < len(self._payload):
            try:
                block_length, size = read_int32(self._payload, self._position)
            except BufferUnderflow as exc:
                raise CorruptBatch("truncated: snappy (xerial) block length") from exc
            start = self._position + size
            end = start + block_length
            if block_length < 0 or end > len(self._payload):
                raise CorruptBatch(
                    f"truncated: snappy (xerial) block of {block_length} bytes at byte "
                    f"{self._position} overruns the records section"
                )
            self._position = end
            output = self._uncompress_block(self._payload[start:end])
            if output:
                return output
        return None
