"""What every handler module shares: the handler type and its registration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from protocol.versions import VersionRange

from ..engine import ClusterView, Enforcement, RequestContext
from ..outcomes import Close, Outcome
from ..services import Services


class Handler(Protocol):
    async def __call__(
        self, ctx: RequestContext, cluster: ClusterView, frame: bytes
    ) -> Outcome: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Registration:
    handler: Handler
    versions: VersionRange | None
    """The versions the gateway advertises and accepts for this API (intersected with the
    broker's); None means the API is never forwarded."""
    after_answers_taken: bool = False
    """Judge a request only once the client has taken every answer before it: for an API
    whose step after the broker's answer must run (it puts back state another client's
    request relies on), since that step runs when the connection comes to the answer, in
    request order, and a client that does not read its earlier answers would otherwise hold
    it off, and lose it when its connection is closed."""


def enforced(services: Services, enforcement: Enforcement[Any, Any]) -> Handler:
    """The handler that runs ``enforcement`` through the engine."""

    async def handle(ctx: RequestContext, cluster: ClusterView, frame: bytes) -> Outcome:
        return await services.engine.run(enforcement, ctx, cluster, frame)

    return handle


async def refuse(ctx: RequestContext, cluster: ClusterView, frame: bytes) -> Outcome:
    return Close(
        reason=f"API key {ctx.api_key} is not carried by the gateway",
        metric_reason="refused_api",
    )
