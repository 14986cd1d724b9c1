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
from tests.unit.test_records import (
    HEADER_SIZE,
    batch_with,
    damaged_section,
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
