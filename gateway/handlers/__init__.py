"""One handler per intercepted Kafka API, registered in one explicit table.

A handler turns a request into an :class:`Outcome` value. Denials are routine values, not
exceptions. APIs absent from :data:`HANDLERS` but known to the gateway pass through as raw
bytes; an API key the gateway does not know is refused before any handler runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from protocol.framing import RequestHeader
from protocol.versions import VersionRange

if TYPE_CHECKING:
    from gateway.connection import ConnectionContext


@dataclass(frozen=True, slots=True, kw_only=True)
class Forward:
    """Send ``frame`` (the client's bytes, or a reduced request) upstream.

    ``on_response`` turns the broker's response frame into the one the client gets (address
    rewrite, merging local errors); None passes it through untouched.
    """

    frame: bytes
    expect_response: bool = True
    on_response: Callable[[bytes], Awaitable[bytes]] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """Answer locally with this response frame (no size prefix); nothing goes upstream."""

    frame: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class Drop:
    """Nothing goes upstream and no answer is due (an acks=0 produce the gateway refused)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Close:
    """Close the client connection, logging ``reason``; ``metric_reason`` labels the count."""

    reason: str
    metric_reason: str


Outcome = Forward | Answer | Drop | Close


class Handler(Protocol):
    async def __call__(
        self, ctx: ConnectionContext, header: RequestHeader, frame: bytes
    ) -> Outcome: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Registration:
    handler: Handler
    versions: VersionRange | None
    """The versions the gateway advertises and accepts for this API (intersected with the
    broker's); None means the API is never forwarded."""


def build_table() -> Mapping[int, Registration]:
    """The explicit table: API key -> handler and the versions it takes."""
    from . import (
        alter_configs,
        api_versions,
        create_partitions,
        create_topics,
        delete_topics,
        describe_cluster,
        describe_configs,
        fetch,
        find_coordinator,
        incremental_alter_configs,
        join_group,
        metadata,
        produce,
        sasl_authenticate,
        sasl_handshake,
    )

    modules = (
        api_versions,
        metadata,
        find_coordinator,
        describe_cluster,
        produce,
        fetch,
        create_topics,
        sasl_handshake,
        sasl_authenticate,
        create_partitions,
        delete_topics,
        incremental_alter_configs,
        alter_configs,
        describe_configs,
        join_group,
    )
    table = {m.API_KEY: Registration(handler=m.handle, versions=m.VERSIONS) for m in modules}
    table.update(_NEVER_FORWARDED)
    return table


async def _refuse(ctx: ConnectionContext, header: RequestHeader, frame: bytes) -> Outcome:
    return Close(
        reason=f"API key {header.api_key} is not carried by the gateway",
        metric_reason="refused_api",
    )


_NEVER_FORWARDED = {
    # Share-group fetches hand out leader endpoints (KIP-932 node_endpoints) that the gateway
    # does not rewrite yet, so they would leak broker addresses.
    78: Registration(handler=_refuse, versions=None),
    79: Registration(handler=_refuse, versions=None),
}
