"""The one runner of policy plug-ins: every call (topic, config and record policies alike) runs
on the policy chain's bounded :class:`policies.chain.WorkerPool` and is awaited for at most
``policy.timeout.ms``, without blocking the event loop. A check with no plug-in call (the
built-in rules alone) is decided on the spot, with no thread hand-off.

A call that finds every thread busy waits for one, within the same ``policy.timeout.ms`` (the
deadline covers the wait and the call). Turns go round the clients that wait, one call each:
a client is its principal, or on an unauthenticated connection its host, so a client holding
the threads with slow calls over many connections delays another client's call by one call's
length at most, and does not have it refused. Only when no thread frees up in time does the
call deny, without calling the plug-in (fail closed)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

from policies.chain import (
    Check,
    Decision,
    Mode,
    PluginCall,
    PolicyChain,
    Verdict,
    busy_message,
    failure_message,
    plugin_verdict,
    timeout_message,
)

T = TypeVar("T")
_Turn = tuple["asyncio.Future[Future[Any]]", Callable[[], Any]]


class Caller(Protocol):
    """Whom a call is made for (a ``gateway.engine.RequestContext`` is one)."""

    @property
    def principal(self) -> str | None: ...

    @property
    def client_address(self) -> str: ...


class PolicyUnavailable(Exception):
    """A plug-in call that did not run or did not return in time; the message says which."""


class PolicyRunner:
    def __init__(self, chain: PolicyChain) -> None:
        self.chain = chain
        self._pool = chain.pool
        self.timeout_s = chain.timeout_s
        self._waiting: OrderedDict[str, deque[_Turn]] = OrderedDict()
        """The calls waiting for a thread, by client; the first client in line goes next."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pool.on_free(self._freed)

    async def decide(self, ctx: Caller, check: Check) -> Decision:
        """Make the plug-in calls of ``check`` one after the other; each one that raises,
        does not return in time or finds no free worker in time denies."""
        verdicts = {}
        for index, step in enumerate(check.steps):
            if isinstance(step, PluginCall):
                verdicts[index] = plugin_verdict(step.plugin, await self._denial(ctx, step))
        return check.decide(verdicts)

    async def _denial(self, ctx: Caller, step: PluginCall) -> str | None:
        name = step.plugin.name
        try:
            await self.call(ctx, name, step.call, what="validate()")
        except PolicyUnavailable as exc:
            return str(exc)
        except Exception as exc:  # noqa: BLE001 - a plug-in's failure denies, named
            return failure_message(name, "validate()", exc)
        return None

    async def call(self, ctx: Caller, name: str, call: Callable[[], T], *, what: str) -> T:
        """Run ``call`` on the pool, for the client of ``ctx``, and return what it returns.

        :raises PolicyUnavailable: no worker free, or no return, within the timeout.
        :raises Exception: whatever ``call`` raised.
        """
        loop = self._loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        future = None if self._waiting else self._pool.try_submit(call)
        if future is None:
            future = await self._turn(_client(ctx), call, deadline, name)
        try:
            async with asyncio.timeout_at(deadline):
                return await asyncio.wrap_future(future)
        except TimeoutError:
            raise PolicyUnavailable(timeout_message(name, what, self.timeout_s)) from None

    async def _turn(
        self, client: str, call: Callable[[], T], deadline: float, name: str
    ) -> Future[T]:
        """Wait in ``client``'s line until a worker takes ``call``."""
        assert self._loop is not None
        turn: asyncio.Future[Future[Any]] = self._loop.create_future()
        self._waiting.setdefault(client, deque()).append((turn, call))
        self._admit()  # a worker may have freed up since the caller found none
        try:
            async with asyncio.timeout_at(deadline):
                return await asyncio.shield(turn)
        except TimeoutError:
            if turn.done():  # taken as the deadline passed: the call runs, and is awaited
                return turn.result()
            turn.cancel()
            self._leave_line(client, turn)
            raise PolicyUnavailable(busy_message(name, self._pool)) from None
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                turn.result().cancel()  # not started yet: dropped; started: runs unawaited
            turn.cancel()
            self._leave_line(client, turn)
            raise

    def _leave_line(self, client: str, turn: asyncio.Future[Future[Any]]) -> None:
        """Take a turn its caller no longer waits for out of the client's line. Left for
        :meth:`_admit` to skip, it stayed while no thread freed up (plug-in calls that never
        return): _admit stops at the first client's first live turn, so while one client
        kept calling, every turn of the others that had given up stayed, each holding its
        call (a Produce's records), one more per call for as long as the threads hung."""
        line = self._waiting.get(client)
        if line is None:
            return
        if line and line[0][0] is turn:
            line.popleft()  # the usual case: a line's turns reach their deadlines in order
        else:
            for index, (queued, _) in enumerate(line):
                if queued is turn:
                    del line[index]
                    break
        if not line:
            del self._waiting[client]

    def _admit(self) -> None:
        """Hand waiting calls to free workers, one client's call at a time in turn."""
        waiting = self._waiting
        while waiting:
            client, line = next(iter(waiting.items()))
            turn, call = line[0]
            if not turn.cancelled():  # else its caller stopped waiting: skipped
                future = self._pool.try_submit(call)
                if future is None:
                    return
                turn.set_result(future)
                waiting.move_to_end(client)  # had its turn
            line.popleft()
            if not line:
                del waiting[client]

    def _freed(self) -> None:
        """A worker finished a call (on its thread): let the loop hand it the next one."""
        loop = self._loop
        if self._waiting and loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
                loop.call_soon_threadsafe(self._admit)

    @staticmethod
    def gateway_denial(message: str, policy: str = "gateway") -> Decision:
        """Fail closed: the gateway's own denial (policy ``gateway`` unless named), audited as
        a policy's."""
        verdict = Verdict(policy=policy, mode=Mode.ENFORCE, outcome="denied", message=message)
        return Decision(allowed=False, verdicts=(verdict,))

    @classmethod
    def state_unreadable(cls, topic: str, problem: str) -> Decision:
        """The gateway's denial when a policy needs a topic state it cannot read."""
        return cls.gateway_denial(
            f"the gateway cannot read the state of topic {topic} that its policies need: {problem}"
        )


def _client(ctx: Caller) -> str:
    """Whose turn a call takes: the principal, or the host of an unauthenticated connection."""
    if ctx.principal is not None:
        return ctx.principal
    host, _, _ = ctx.client_address.rpartition(":")
    return f"host {host or ctx.client_address}"
