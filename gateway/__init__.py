"""The gateway: the only package that does network I/O.

Contracts, stated once:

- One upstream connection per client connection; requests go upstream in the order the
  client sent them, and responses leave to the client in that same order. A locally made
  answer waits behind earlier forwarded ones.
- Backpressure: at most ``limits.max_in_flight_requests`` requests per connection await
  their answer; the connection stops reading until one leaves. Writers are drained before
  more is read. A frame's size is checked before its body is read.
- Fail closed: a request the gateway must inspect but cannot decode is refused (the
  connection is closed, as a broker closes it), never forwarded blind. An API key the
  gateway does not know is never forwarded.
- Every broker address a client can learn (Metadata, FindCoordinator, DescribeCluster) is
  replaced by a gateway listener's address before the response leaves.
- Upstream gone: the client connection is closed, as a dead broker's would be. Listeners
  stay up; new connections reach the broker again once it is back.
- Tasks are created through :mod:`gateway.tasks`, which keeps references and names them.
"""
