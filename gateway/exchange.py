"""One request, one answer, over a plain socket: how the ``kpg`` tools talk to a gateway."""

from __future__ import annotations

import socket

from protocol.framing import DEFAULT_MAX_FRAME_BYTES, SIZE, check_frame_size


def exchange(host: str, port: int, frame: bytes, timeout: float) -> bytes:
    """Send one request frame (size prefix included) and return the response frame (without).

    :raises OSError: when the gateway cannot be reached or closes the connection early.
    :raises FrameRejected: when the answer's size is negative or above Kafka's default cap.
    """
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(frame)

        def exact(n: int) -> bytes:
            data = b""
            while len(data) < n:
                chunk = sock.recv(n - len(data))
                if not chunk:
                    raise ConnectionError("the gateway closed the connection")
                data += chunk
            return data

        size: int = SIZE.unpack(exact(4))[0]
        check_frame_size(size, DEFAULT_MAX_FRAME_BYTES)
        return exact(size)
