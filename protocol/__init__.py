"""The Kafka wire protocol, as the gateway needs it. The only package that imports ``kio``.

Contracts, stated once:

- Pure: no sockets, no asyncio. Functions take bytes and return bytes or frozen values.
- Framing: every Kafka frame is a big-endian int32 size followed by that many bytes. A size
  below zero or above the configured cap is refused before a single body byte is read
  (:func:`protocol.framing.check_frame_size`).
- Request headers are v1 (non-flexible) or v2 (flexible, with tagged fields); response
  headers are v0 or v1, except ApiVersions, whose response header is always v0 so that a
  client can read it before it knows the broker's versions.
- Only the APIs the gateway inspects or rewrites are decoded, and only in the versions kio
  ships (:data:`protocol.versions.DECODABLE`). Everything else stays bytes.
- Errors are Kafka's error codes (:class:`protocol.errors.ErrorCode`).
"""
