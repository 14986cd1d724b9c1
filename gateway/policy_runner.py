"""The one runner of policy plug-ins: every call (topic, config and record policies alike) runs
on the policy chain's bounded :class:`policies.chain.WorkerPool` and is awaited for at most
``policy.timeout.ms``, without blocking the event loop. A check with no plug-in call (the
built-in rules alone) is decided on the spot, with no thread hand-off."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

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


class PolicyUnavailable(Exception):
    """A plug-in call that did not run or did not return in time; the message says which."""


class PolicyRunner:
    def __init__(self, chain: PolicyChain) -> None:
        self.chain = chain
        self._pool = chain.pool
        self.timeout_s = chain.timeout_s

    async def decide(self, check: Check) -> Decision:
        """Make the plug-in calls of ``check`` one after the other; each one that raises,
        does not return in time or finds every worker busy denies."""
        verdicts = {}
        for index, step in enumerate(check.steps):
            if isinstance(step, PluginCall):
                verdicts[index] = plugin_verdict(step.plugin, await self._denial(step))
        return check.decide(verdicts)

    async def _denial(self, step: PluginCall) -> str | None:
        name = step.plugin.name
        try:
            await self.call(name, step.call, what="validate()")
        except PolicyUnavailable as exc:
            return str(exc)
        except Exception as exc:  # noqa: BLE001 - a plug-in's failure denies, named
            return failure_message(name, "validate()", exc)
        return None

    async def call(self, name: str, call: Callable[[], T], *, what: str) -> T:
        """Run ``call`` on the pool and return what it returns.

        :raises PolicyUnavailable: every worker busy, or no return within the timeout.
        :raises Exception: whatever ``call`` raised.
        """
        future = self._pool.try_submit(call)
        if future is None:
            raise PolicyUnavailable(busy_message(name, self._pool))
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), self.timeout_s)
        except TimeoutError:
            raise PolicyUnavailable(timeout_message(name, what, self.timeout_s)) from None

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
