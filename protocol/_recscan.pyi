# protocol/_recscan.c: the record scanners of protocol/records.py in C.

def header_window(
    buffer: bytes,
    position: int,
    first: int,
    count: int,
    stop: int,
    wanted: tuple[bytes, ...],
    missing: list[int],
    /,
) -> tuple[int, int, int] | None: ...
def values_window(
    buffer: bytes,
    position: int,
    first: int,
    count: int,
    stop: int,
    values: list[bytes | None],
    /,
) -> tuple[int, int, int] | None: ...
