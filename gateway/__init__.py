"""The gateway: the only package that does network I/O.

Contracts, stated once:

- One upstream connection per client connection, opened when its first request has been
  read (a connection that sends nothing holds none); requests go upstream in the order the
  client sent them, and responses leave to the client in that same order. A locally made
  answer waits behind earlier forwarded ones.
- Backpressure: at most ``limits.max_in_flight_requests`` requests per connection await
  their answer; the connection stops reading until one leaves. Writers are drained before
  more is read. A frame's size is checked before its body is read.
- Limits over all connections, Kafka's (:mod:`gateway.limits`): past ``max.connections`` or
  ``max.connections.per.ip``, or past ``max.connection.creation.rate`` (or its per-address
  form) new connections in the current second, a new connection is closed at accept, before
  a byte is read (over TLS, before its handshake).
  ``queued.max.request.bytes`` caps the bytes of requests being received and handed on: a
  frame's size is taken from it before its body is read and given back once the request
  has been forwarded, answered or refused; a frame that does not fit waits, its connection
  unread, and one larger than the whole cap is refused. Bodies are read as they arrive,
  never as one read of the declared size. A connection with no answer due that has waited
  ``connections.max.idle.ms`` on its client is closed. A client (principal, else address)
  whose decisions have had more audit events written than ``client.audit.events.per.sec``
  allows has its next request, on any of its connections, read only once its budget is
  back; no event is dropped.
- Fail closed: a request the gateway must inspect but cannot decode is refused (the
  connection is closed, as a broker closes it), never forwarded blind. An API key the
  gateway does not know is never forwarded.
- Authentication (``sasl.client_auth: required``): until the broker has accepted a
  connection's SASL exchange, only ApiVersions, SaslHandshake and SaslAuthenticate are
  served, in Kafka's order; anything else closes the connection, unforwarded and unanswered.
  A refused exchange closes it after the refusal whatever the setting.
- Every broker address a client can learn (Metadata, FindCoordinator, DescribeCluster) is
  replaced by a gateway listener's address before the response leaves.
- Upstream gone: the client connection is closed, as a dead broker's would be. Listeners
  stay up; new connections reach the broker again once it is back.
- Tasks are created through :mod:`gateway.tasks`, which keeps references and names them.
"""
