# protocol/_recscan.c: the fast record scanners of protocol/records.py.

def header_window(
    wanted: tuple[bytes, ...],
    missing: list[int],
    buffer: bytes,
    position: int,
    first: int,
    count: int,
    stop: int,
    /,
) -> tuple[int, int, int] | None: ...
def values_window(
    values: list[bytes | None], buffer: bytes, position: int, first: int, count: int, stop: int, /
) -> tuple[int, int, int] | None: ...
