"""protocol/_recscan.c on its own: built, bounded by its arguments, and safe on any bytes.

It reads bytes from the network, so its scanning core is run under AddressSanitizer and
UndefinedBehaviorSanitizer over damaged and cut-short copies of real records sections
(tests/fuzz/recscan_fuzz.c), where a read one byte out of bounds fails. That it answers as
the full reader does is tests/unit/test_records.py's business.
"""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

import protocol.records as records_module
from tests.batches import record, varint
from tests.unit.test_records import (
    HEADER_SIZE,
    batch_with,
    damaged_section,
    raw_record,
    uncompressed_batch,
    varied_records,
)

pytestmark = pytest.mark.unit

HARNESS = Path(__file__).parents[1] / "fuzz" / "recscan_fuzz.c"
COPIES = 200_000
NATIVE = records_module._native


def test_the_c_scanner_is_built_and_used() -> None:
    """make test installs the package with setup.py, which builds it: what ships is what
    the record tests test."""
    assert NATIVE is not None, "protocol._recscan is not built (is there a C compiler?)"
    assert records_module.record_scanner() == "native"


def test_the_window_refuses_arguments_outside_its_buffer() -> None:
    """The scanner reads only buffer[position:stop]; arguments that point elsewhere, or ask
    for what it cannot do, are an error, not a read out of bounds."""
    assert NATIVE is not None
    section = batch_with("none")[HEADER_SIZE:]
    for position, first, count, stop in [
        (0, 0, 5, len(section) + 1),
        (-1, 0, 5, len(section)),
        (10, 0, 5, 9),
        (0, 3, 2, len(section)),
        (0, -1, 5, len(section)),
    ]:
        with pytest.raises(ValueError):
            NATIVE.record_window(None, False, 0, -1, section, position, first, count, stop)
        with pytest.raises(ValueError):
            NATIVE.record_window((b"h",), True, 0, 0, section, position, first, count, stop)
    with pytest.raises(ValueError):
        NATIVE.record_window((b"h",) * 65, True, 0, 0, section, 0, 0, 5, len(section))
    with pytest.raises(ValueError):
        NATIVE.record_window((b"h",), False, 0, 0, section, 0, 0, 5, len(section))  # no headers
    with pytest.raises(ValueError):
        NATIVE.record_window(None, False, -2, 0, section, 0, 0, 5, len(section))
    with pytest.raises(TypeError):
        NATIVE.record_window(("h",), True, 0, 0, section, 0, 0, 5, len(section))  # type: ignore[arg-type]
    # No record asked for (first == count): none read, the position as given.
    assert NATIVE.record_window(None, False, 0, -1, section, 7, 5, 5, len(section)) == (7, 5, 0, [])
    # Within bounds, the same section reads whole.
    window = NATIVE.record_window(None, False, 0, -1, section, 0, 0, 5, len(section))
    assert window is not None and window[:3] == (len(section), 5, 0) and len(window[3]) == 5


def test_the_scanning_core_stays_in_bounds_on_damaged_records(tmp_path: Path) -> None:
    compiler = shutil.which("gcc") or shutil.which("cc")
    assert compiler, "a C compiler builds protocol/_recscan.c; this check needs one too"
    binary = tmp_path / "recscan_fuzz"
    subprocess.run(
        [compiler, "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
        + ["-Wall", "-Wextra", "-Werror", "-o", str(binary), str(HARNESS)],
        check=True,
    )
    seeds = []
    for name, section in [
        # sizes in one, two and three byte varints; 2 to 9,000 byte records
        ("varied", uncompressed_batch(varied_records()[:24])[HEADER_SIZE:]),
        ("damaged", damaged_section()[1]),
        ("five", uncompressed_batch()[HEADER_SIZE:]),
    ]:
        seeds.append(tmp_path / name)
        seeds[-1].write_bytes(section)

    run = subprocess.run(
        [str(binary), str(COPIES), *map(str, seeds)], capture_output=True, text=True, timeout=300
    )

    assert run.returncode == 0, run.stderr[-4000:]
    seen = dict(re.findall(r"(\w+) (\d+)", run.stdout))
    # Not a vacuous run: records were read whole, cut short and refused, values handed out.
    assert int(seen["copies"]) == COPIES
    assert all(int(seen[what]) > 10_000 for what in ("read", "cut", "irregular", "value_bytes"))


def test_a_record_cut_anywhere_is_cut_not_irregular() -> None:
    """A window's stop can fall anywhere in a record, inside its length varint too (a
    compressed batch is scanned in windows of 256 KiB): the record is cut, with the bytes it
    needs from its start (at least a longest length varint's, 5), not called irregular,
    which would leave the rest of the batch to the full reader."""
    assert NATIVE is not None
    section = uncompressed_batch((record(0, b"k", b"v"), record(1, b"k", b"v" * 100)))[HEADER_SIZE:]
    whole = NATIVE.record_window(None, False, 0, -1, section, 0, 0, 2, len(section))
    assert whole is not None and whole[:3] == (len(section), 2, 0)
    first = whole[3][0][6]  # the first record's size_in_bytes
    second = len(section) - first
    assert section[first] >= 0x80  # the second record's length takes two bytes
    for cut in range(second):
        window = NATIVE.record_window(None, False, 0, -1, section, 0, 0, 2, first + cut)
        assert window is not None, cut
        assert window[:3] == (first, 1, max(5, second) if cut >= 5 else 5), cut
        assert [fields[2] for fields in window[3]] == [b"v"]


@pytest.mark.parametrize(
    ("name", "body"),
    [
        # attributes, timestamp delta, offset delta, key, value, header count, headers
        ("ten-byte-timestamp", b"\x00" + b"\x80" * 9 + b"\x01\x00" + varint(-1) * 2 + b"\x00"),
        ("five-byte-offset", b"\x00\x00" + b"\x80" * 4 + b"\x0f" + varint(-1) * 2 + b"\x00"),
        ("five-byte-size", b"\x00\x00\x00" + varint(-1) + b"\x82\x80\x80\x80\x00v\x00"),
        ("one-byte-fields", b"\x00\x00\x00" + (varint(1) + b"k") * 2 + varint(1) + b"\x02h\x02v"),
    ],
)
def test_what_kafka_reads_the_scanner_reads(name: str, body: bytes) -> None:
    """Encodings Kafka's reader takes (a long timestamp delta is a record written a long
    time from its batch's first) are read by the scanner, not left to the full reader: it is
    irregular only for what the full reader refuses or Kafka would read otherwise."""
    assert NATIVE is not None
    section = raw_record(body)
    for wanted, headers in [(None, False), (None, True), ((b"trace-id",), True)]:
        window = NATIVE.record_window(wanted, headers, -1, -1, section, 0, 0, 1, len(section))
        assert window is not None and window[:3] == (len(section), 1, 0), (name, wanted)
