"""One configuration in force, and everything built from it that judges requests.

A reload (SIGHUP, ``kpg reload``) builds a new :class:`Generation` beside the running one and
swaps it in with one assignment; a connection takes the generation in force when a request
has been read and judges that request with it alone (its handler table, policy chain, record
validator, decision recorder and limits), so no request is judged partly by the old
configuration and partly by the new. A generation that has been replaced is closed (its
plug-ins' ``close()`` called) once the last request it judges has been handed on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from policies.chain import PolicyChain

from .config import GatewayConfig
from .decisions import DecisionRecorder
from .handlers.base import Registration
from .record_validation import RecordValidator
from .tasks import TaskSet

log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False, kw_only=True)
class Generation:
    config: GatewayConfig
    policies: PolicyChain
    record_validator: RecordValidator
    recorder: DecisionRecorder
    table: Mapping[int, Registration]
    _users: int = 0
    _retired: bool = False
    _closed: bool = False

    @property
    def policy_version(self) -> str:
        return self.config.policy_version

    @property
    def closed(self) -> bool:
        """Closed, or closing (its plug-ins' ``close()`` under way): nothing judges with it."""
        return self._closed

    def enter(self) -> None:
        """A request is judged with this generation (until :meth:`leave`)."""
        self._users += 1

    def leave(self, tasks: TaskSet) -> None:
        self._users -= 1
        if self._retired and not self._users:
            self._close_soon(tasks)

    def retire(self, tasks: TaskSet) -> None:
        """Replaced: close once no request uses it (now, if none does)."""
        self._retired = True
        if not self._users:
            self._close_soon(tasks)

    def _close_soon(self, tasks: TaskSet) -> None:
        if self._closed:
            return
        self._closed = True
        # A plug-in's close() may take up to its timeout: off the event loop.
        tasks.spawn(asyncio.to_thread(self._close_now), name="close-generation")

    def close(self) -> None:
        """Close now (gateway shutdown); a second close does nothing."""
        if self._closed:
            return
        self._closed = True
        self._close_now()

    def _close_now(self) -> None:
        self.record_validator.close()
        for problem in self.policies.close():
            log.error("policy close failed: %s", problem)
