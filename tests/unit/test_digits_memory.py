"""policies/_digits.c under AddressSanitizer and UndefinedBehaviorSanitizer.

Its scans read record values from the network: the module is built with the sanitizers and
loaded into a Python run with their runtime preloaded, and every scan is run over texts each
held in a heap block of exactly its own size (malloc'd through ctypes), so that a read one
byte past the text stops the run, as does a write past as_printed's copy of a number on the
stack. That it answers as the Python fallbacks do is tests/unit/test_record_policies.py's
business.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SOURCE = Path(__file__).parents[2] / "policies" / "_digits.c"

# Run in the sanitized Python: argv[1] is the built module. Prints what it scanned.
DRIVER = r"""
import ctypes, importlib.util, random, sys

spec = importlib.util.spec_from_file_location("policies._digits", sys.argv[1])
digits = importlib.util.module_from_spec(spec)
spec.loader.exec_module(digits)
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
scanned = 0


def exact(text):
    # text in a heap block of its own size: a read past it is a heap-buffer-overflow
    block = libc.malloc(max(len(text), 1))
    ctypes.memmove(block, text, len(text))
    return block, memoryview((ctypes.c_char * len(text)).from_address(block)).cast("B")


def scan(text):
    global scanned
    block, view = exact(text)
    digits.count_members(view)
    digits.double_suspects(view)
    digits.scan_json(view)
    for n in (1, 2, 5, 19, len(text) or 1, len(text) + 1):
        digits.has_digit_run(view, n)
    view.release()
    libc.free(block)
    scanned += 1


numbers = []
for length in range(1, 90):
    numbers += ["1." + "0" * length + "1", "-9" * length + ".5", "1e-" + "4" * length]
    numbers += ["0." + "0" * length + "123456789012345678", "1" * length]
rng = random.Random(20261125)
texts = [b'{"a\\"": [1.5, "x\\\\", -0.0000000000000000001e-400], "b": {"c": 1e999}}']
texts += [("[" + n + "]").encode() for n in numbers] + [n.encode() for n in numbers]
for _ in range(300):
    texts.append(bytes(rng.choice(b'0123456789.eE+-"\\:{}[], ') for _ in range(rng.randrange(80))))
for text in texts:
    for end in range(len(text) + 1):  # every prefix: cut in a string, an escape, a number
        scan(text[:end])
print("scanned", scanned)
"""


def test_the_json_scans_stay_in_bounds(tmp_path: Path) -> None:
    compiler = shutil.which("gcc")
    assert compiler, "a C compiler builds policies/_digits.c; this check needs gcc's sanitizers"
    runtimes = [
        subprocess.run(
            [compiler, f"-print-file-name={name}"], capture_output=True, text=True, check=True
        ).stdout.strip()
        for name in ("libasan.so", "libubsan.so")
    ]
    module = tmp_path / f"_digits{sysconfig.get_config_var('EXT_SUFFIX')}"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O1", "-g", "-fno-omit-frame-pointer"]
        + ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-Wall", "-Wextra"]
        + [f"-I{sysconfig.get_paths()['include']}", "-o", str(module), str(SOURCE)],
        check=True,
    )
    env = {
        **os.environ,
        "LD_PRELOAD": " ".join(runtimes),
        "ASAN_OPTIONS": "detect_leaks=0",
        "PYTHONMALLOC": "malloc",
    }

    run = subprocess.run(
        [sys.executable, "-c", DRIVER, str(module)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert run.returncode == 0, run.stderr[-4000:]
    assert int(run.stdout.split()[-1]) > 50_000  # not a vacuous run
