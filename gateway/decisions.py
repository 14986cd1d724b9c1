"""Where every policy decision goes: the log, the metrics and the audit events.

A denial is logged at INFO (it is routine), a dry-run would-deny at WARNING (someone is about
to turn that rule on and should know), and every decision becomes audit events: one per
denying or would-deny verdict, or one "allowed" event when nothing objected.

A connection closed instead of served is a decision too (one denied event, see
:meth:`DecisionRecorder.record_closed`): a refused authentication (resource type ``user``; policy
``sasl.client_auth`` for the gateway's own refusals, ``broker`` for the broker's refusal of a
mechanism or of credentials; behind the gateway the broker sees every client at the
gateway's address, so these events are the only record of who tried which user name), and a
request refused unread or unjudged (policy ``protocol``, ``own_topics`` or
``cluster_state``; ``limits`` for a frame refused on its size).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Final

from policies.chain import Decision
from protocol.versions import api_name
from spark_audit.event import AuditEvent, ConfigChange, TopicSpec, new_request_id

from .audit import AuditEmitter, recorded_client_id
from .limits import AuditPace, client_key
from .metrics import GatewayMetrics, api_label

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Subject:
    """Who asked, and about what."""

    client_address: str
    principal: str | None
    client_id: str | None
    api_key: int
    api_version: int
    resource_type: str
    resource_name: str
    action: str
    validate_only: bool = False
    records_examined: int = 0
    bytes_examined: int = 0
    request_id: str | None = None
    """Shared by every decision of one client request."""
    request_events: int | None = None
    """How many events all the decisions of that request write (:func:`events_of` each)."""
    config_changes: tuple[ConfigChange, ...] | None = None
    topic_spec: TopicSpec | None = None


SASL_GATE: Final = "sasl.client_auth"
"""The policy of the gateway's own authentication refusals."""
BROKER: Final = "broker"
"""The policy of the broker's authentication refusals, as the gateway saw them."""


def events_of(decision: Decision) -> int:
    """How many audit events :meth:`DecisionRecorder.record` writes for ``decision``: one per
    rule that denied or objected, else one ``allowed``."""
    return max(1, sum(1 for verdict in decision.verdicts if verdict.outcome != "allowed"))


class AuditNotWritten(Exception):
    """A decision's events did not all reach the audit sinks, and ``audit.on_failure`` is
    ``deny``: the request must not go on."""


class DecisionRecorder:
    """Records decisions; ``policy_version`` (a plain attribute, which a reload sets) is
    stamped on every event it writes. ``deny_unaudited`` (``audit.on_failure: deny``): a
    decision whose events a sink failed to write raises :class:`AuditNotWritten`. ``pace``:
    each decision's events are charged to its client there (``client.audit.events.per.sec``),
    whether or not an audit sink is configured (its denials are logged either way)."""

    def __init__(
        self,
        metrics: GatewayMetrics,
        emitter: AuditEmitter | None,
        instance: str,
        *,
        policy_version: str | None = None,
        deny_unaudited: bool = False,
        pace: AuditPace | None = None,
    ) -> None:
        self._metrics = metrics
        self._pace = pace
        self._emitter = emitter
        self._instance = instance
        self.policy_version = policy_version
        self.deny_unaudited = deny_unaudited

    async def record(self, subject: Subject, decision: Decision, error_code: int | None) -> None:
        """Log, count and audit ``decision``; returns once its events are written.

        :raises AuditNotWritten: under ``deny_unaudited``, for an allowed decision when a
            sink failed to write one of its events.
        """
        api = api_name(subject.api_key)
        events = []
        for verdict in decision.verdicts:
            self._metrics.policy_decisions.labels(
                api_label(subject.api_key), verdict.policy, verdict.outcome
            ).inc()
            if verdict.outcome == "allowed":
                continue
            text = (
                f"{api} {subject.action} {subject.resource_type} {subject.resource_name!r} "
                f"by {subject.principal or 'ANONYMOUS'} ({subject.client_address}): "
                f"{verdict.policy} {verdict.outcome.replace('_', '-')}: {verdict.message} "
                f"(audit request id {subject.request_id})"
            )
            if verdict.outcome == "would_deny":
                log.warning("dry-run %s", text)
            else:
                log.info("%s", text)
            events.append(
                self._event(
                    subject,
                    api,
                    verdict.policy,
                    verdict.mode.value,
                    verdict.outcome,
                    error_code if verdict.outcome == "denied" else None,
                    verdict.message,
                )
            )
        if not events:
            events.append(self._event(subject, api, None, "enforce", "allowed", None, None))
        self._charge(subject, len(events))
        if self._emitter is not None:
            # Written before the client hears the decision: killing the gateway afterwards
            # cannot lose it.
            written = await self._emitter.emit_all_written(events)
            # A denial is refused whether or not its event was written.
            if not written and self.deny_unaudited and decision.allowed:
                self._metrics.unaudited_refusals.inc()
                raise AuditNotWritten(
                    f"the gateway could not write the audit event of this decision "
                    f"(audit request id {subject.request_id}); audit.on_failure is deny"
                )

    async def record_closed(
        self, subject: Subject, *, policy: str, error_code: int | None, reason: str
    ) -> None:
        """Count and audit a connection closed instead of served under ``policy`` (the
        connection logs and closes it); ``error_code``: what the client was answered, None
        when the connection closed unanswered. One denied event, a request of its own."""
        api = api_name(subject.api_key)
        self._metrics.policy_decisions.labels(api_label(subject.api_key), policy, "denied").inc()
        self._charge(subject, 1)
        if self._emitter is None:
            return
        if subject.request_id is None:
            subject = replace(subject, request_id=new_request_id(), request_events=1)
        event = self._event(subject, api, policy, "enforce", "denied", error_code, reason)
        await self._emitter.emit_written(event)

    def _charge(self, subject: Subject, events: int) -> None:
        if self._pace is not None:
            self._pace.charge(client_key(subject.principal, subject.client_address), events)

    def _event(
        self,
        subject: Subject,
        api: str,
        policy: str | None,
        mode: str,
        verdict: str,
        error_code: int | None,
        message: str | None,
    ) -> AuditEvent:
        return AuditEvent(
            gateway_instance=self._instance,
            client_address=subject.client_address,
            principal=subject.principal,
            client_id=recorded_client_id(subject.client_id),
            api=api,
            api_version=subject.api_version,
            resource_type=subject.resource_type,
            resource_name=subject.resource_name,
            action=subject.action,
            policy=policy,
            mode=mode,  # type: ignore[arg-type]
            verdict=verdict,  # type: ignore[arg-type]
            error_code=error_code,
            message=message,
            validate_only=subject.validate_only,
            records_examined=subject.records_examined,
            bytes_examined=subject.bytes_examined,
            event_kind="decision",
            policy_version=self.policy_version,
            request_id=subject.request_id,
            config_changes=subject.config_changes,
            topic_spec=subject.topic_spec,
            request_events=subject.request_events,
        )
