# protocol/_recscan.c: the fast path of protocol/records.py's read_records.

from typing import TypeAlias

_Headers: TypeAlias = tuple[tuple[str, bytes | None], ...]
_Fields: TypeAlias = tuple[int, bytes | None, bytes | None, _Headers, int, int, int]

def record_window(
    wanted: tuple[bytes, ...] | None,
    headers: bool,
    key_bytes: int,
    value_bytes: int,
    buffer: bytes,
    position: int,
    first: int,
    count: int,
    stop: int,
    /,
) -> tuple[int, int, int, list[_Fields]] | None: ...
