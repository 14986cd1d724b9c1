"""One request, one answer: how the ``kpg`` tools talk to a gateway, over plaintext, TLS or
SASL as their ``--command-config`` says (:mod:`gateway.client_security`)."""

from __future__ import annotations

from .client_security import PLAINTEXT, ClientSecurity, connect


def exchange(
    host: str,
    port: int,
    frame: bytes,
    timeout: float,
    security: ClientSecurity = PLAINTEXT,
    client_id: str = "kpg",
) -> bytes:
    """Send one request frame (size prefix included) and return the response frame (without).

    :raises OSError: when the gateway cannot be reached, TLS fails, SASL is refused, or the
        gateway closes the connection early.
    :raises FrameRejected: when the answer's size is negative or above Kafka's default cap.
    :raises Undecodable: for a SASL answer that does not decode.
    """
    with connect(host, port, timeout, security, client_id) as connection:
        return connection.request(frame)
