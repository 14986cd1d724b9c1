"""protocol/_recscan.c reads bytes from the network: its scanning core is run under
AddressSanitizer and UndefinedBehaviorSanitizer over damaged and cut-short copies of real
records sections (tests/fuzz/recscan_fuzz.c), where a read one byte out of bounds fails."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.unit.test_records import HEADER_SIZE, damaged_section, uncompressed_batch, varied_records

pytestmark = pytest.mark.unit

HARNESS = Path(__file__).parents[1] / "fuzz" / "recscan_fuzz.c"
COPIES = 200_000


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
