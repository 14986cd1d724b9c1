"""The enforcement engine: one split / judge / merge path for every API the gateway judges.

An :class:`Enforcement` knows one Kafka API: how to read its request, the items in it (topics,
config resources, partitions), how to judge each item, and how to write a request holding only
some items and an answer merging the gateway's own results with the broker's. The engine does
the rest, the same way for every API:

1. ``prepare``: a shortcut that may decide the request unread (Produce to topics nobody
   validates is forwarded as sent).
2. Dedupe: an item named twice gets the enforcement's ``duplicate`` error, as Kafka answers.
3. ``judge``: each remaining item is either answered here (an :class:`ItemError`: the topic
   does not exist, the request is invalid) or decided by the policies (a :class:`Judged`).
4. Audit: every :class:`Judged` goes to the decision recorder (log, metrics, audit events)
   before the client hears of it, all under one request id for the request. A denied item
   gets its ``denial``, its message ending in ``(audit request id <id>)`` so the client's
   log joins the audit table. Errors that stand in for the broker's (a topic that exists,
   answered here) keep the broker's words. An allowed item of a validate_only request that
   dry-run rules object to is answered with their message on its success, where the
   enforcement can write it (``dry_run_notes``).
5. ``settle``: what happens to the allowed items besides forwarding them (a dry run answered
   here, state written first, a request that must be re-encoded, a step after the broker's
   answer).
6. Route: nothing left to forward -> :class:`Answer`; everything allowed and nothing to
   change -> the client's bytes, untouched; else a reduced request, and the local results
   merged into the broker's answer in request order, in the client's version.

Items absent from ``judge``'s result are allowed. Denials are values; a request that cannot
be decoded raises :class:`protocol.codec.Undecodable` and the connection refuses it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Generic, Protocol, TypeVar
from uuid import UUID

from policies.chain import Decision, Mode, Verdict
from protocol.admin import InternalRequest, ResourceConfigs, ResponseT, TopicDescription
from protocol.errors import POLICY_VIOLATION
from protocol.framing import RequestHeader
from protocol.results import ItemError, Note
from protocol.versions import VersionRange, api_name
from spark_audit.event import ConfigChange as AuditedConfigChange
from spark_audit.event import TopicSpec as AuditedTopicSpec
from spark_audit.event import new_request_id

from .config import UNLIMITED, LimitsConfig
from .decisions import AuditNotWritten, DecisionRecorder, Subject, events_of
from .outcomes import Answer, Close, Forward, Outcome
from .principal import SaslState

K = TypeVar("K", bound=Hashable)
R = TypeVar("R")

STATE_STORE: Final = "state_store"
"""The policy of a refusal made because the gateway's state store could not be written as an
allowed change was carried out (:meth:`Engine.refused`): the item's "allowed" event was
already written, so the refusal the client gets is an event of its own."""


@dataclass(slots=True)
class Session:
    """What one client connection has established: who it is."""

    principal: str | None = None
    """``User:<name>`` from the TLS client certificate or a completed SASL exchange; None on
    an unauthenticated connection."""
    sasl: SaslState = field(default_factory=SaslState)


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestContext:
    """One request: who sent it, from where, and its header."""

    header: RequestHeader
    client_address: str
    session: Session

    @property
    def principal(self) -> str | None:
        return self.session.principal

    @property
    def client_id(self) -> str | None:
        return self.header.client_id

    @property
    def api_key(self) -> int:
        return self.header.api_key

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def correlation_id(self) -> int:
        return self.header.correlation_id


class ClusterView(Protocol):
    """What the cluster says, asked on the client's own connection (so the broker applies the
    client's identity and ACLs to it).

    Each method raises ``UpstreamClosed`` when the broker does not answer in time, and
    ``Undecodable`` for an answer that does not decode.
    """

    async def describe_topics(self, names: Sequence[str]) -> Mapping[str, TopicDescription]: ...

    async def broker_ids(self) -> Sequence[int]: ...

    async def describe_all_topics(
        self,
    ) -> tuple[Mapping[str, TopicDescription], Mapping[UUID, str]]: ...

    async def describe_configs(
        self, resources: Sequence[tuple[int, str]], *, include_synonyms: bool = False
    ) -> Mapping[tuple[int, str], ResourceConfigs]:
        """Every config of each resource; with ``include_synonyms``, each entry's synonyms
        too, in Kafka's order of precedence (the config's own default, source DEFAULT_CONFIG,
        last)."""
        ...

    async def authorize_alter_configs(
        self, resources: Sequence[tuple[int, str]]
    ) -> Mapping[tuple[int, str], ItemError]:
        """The broker's answer, per resource, to a validate_only IncrementalAlterConfigs with
        no entries: its authorization error (Kafka authorizes ALTER_CONFIGS before anything
        else) or OK. It changes nothing."""
        ...

    async def send(self, request: InternalRequest[ResponseT]) -> ResponseT:
        """The broker's answer to a request the gateway wrote (its own, or a client's it
        reissues), decoded."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Judged:
    """A policy decision about one item: audited, and ``denial`` for the client if it denies."""

    decision: Decision
    resource_type: str
    resource_name: str
    action: str
    validate_only: bool = False
    denial: ItemError | None = None
    """What a denied item is answered; None: POLICY_VIOLATION with the decision's message."""
    records_examined: int = 0
    bytes_examined: int = 0
    config_changes: tuple[AuditedConfigChange, ...] | None = None
    """A config change: each key with its value before and after (audited)."""
    topic_spec: AuditedTopicSpec | None = None
    """A topic creation: the topic as the policies judged it (audited)."""

    def error(self) -> ItemError:
        if self.denial is not None:
            return self.denial
        return ItemError(error_code=int(POLICY_VIOLATION), error_message=self.decision.message)


Ruling = ItemError | Judged
"""What ``judge`` says of one item: answered here, or decided by the policies."""

AfterStep = Callable[[bytes], Awaitable[Mapping[K, ItemError]]]
"""Runs on the broker's answer (before the client sees it); its results replace the broker's
for those items."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Settlement(Generic[K]):
    """What becomes of the allowed items besides being forwarded."""

    local: Mapping[K, ItemError] = field(default_factory=dict)
    """Allowed items answered here (a dry run, a change only the gateway keeps)."""
    reencode_request: bool = False
    """The broker gets a request written by the gateway even when every item is allowed."""
    reencode_answer: bool = False
    """The client gets an answer written by the gateway even when the broker answered all."""
    after: AfterStep[K] | None = None


class Enforcement(Protocol[R, K]):
    """One judged Kafka API (see the module docstring for the flow)."""

    api_key: int
    versions: VersionRange
    dry_run_notes: bool
    """Whether :meth:`answer` puts a :class:`protocol.results.Note` on the broker's success
    (then a validate_only item the dry-run rules object to is answered with their message)."""
    unaudited_error: int
    """The error an allowed item is answered with when its decision could not be audited
    and ``audit.on_failure`` is ``deny``."""
    decodes_whole: bool
    """Whether :meth:`read` decodes the whole request into objects: then a request over
    ``judged.request.max.bytes`` closes the connection unread (Produce reads its records by
    the record validation budget instead)."""

    def prepare(self, ctx: RequestContext, frame: bytes) -> bytes | Outcome:
        """The frame to enforce (possibly rewritten), or an outcome decided unread."""
        ...

    def read(self, header: RequestHeader, frame: bytes) -> R:
        """:raises Undecodable: for a body the gateway cannot read."""
        ...

    def keys(self, request: R) -> Sequence[K]:
        """The request's items, in request order, repeats included."""
        ...

    def decided_items(self, request: R, keys: Sequence[K]) -> int:
        """How many decisions of the policies judging ``request`` takes, each judged and
        audited alone (``judged.request.max.items`` bounds it); 0 for an API the policies do
        not decide item by item."""
        ...

    def duplicate(self, key: K) -> ItemError | None:
        """The answer for an item named twice; None where repeats are allowed."""
        ...

    def expects_response(self, request: R) -> bool:
        """False for a request the client wants no answer to (Produce with acks=0)."""
        ...

    async def judge(
        self, ctx: RequestContext, cluster: ClusterView, request: R, keys: Sequence[K]
    ) -> Mapping[K, Ruling]: ...

    async def settle(
        self, ctx: RequestContext, cluster: ClusterView, request: R, allowed: Sequence[K]
    ) -> Settlement[K] | Close: ...

    def for_broker(self, request: R, header: RequestHeader, allowed: Sequence[K]) -> bytes:
        """The request frame (no size prefix) carrying the ``allowed`` items only."""
        ...

    def answer(
        self, request: R, correlation_id: int, local: Mapping[K, ItemError], broker: bytes | None
    ) -> bytes:
        """The response frame (no size prefix): ``local`` results where given, else the
        broker's (``broker``: its answer to :meth:`for_broker`, None when nothing went)."""
        ...


class BaseEnforcement(Generic[R, K]):
    """The defaults most enforcements keep: nothing decided unread, repeats refused as the
    subclass words it, an answer expected, the allowed items simply forwarded, no dry-run
    notes."""

    dry_run_notes: bool = False
    unaudited_error: int = int(POLICY_VIOLATION)
    decodes_whole: bool = True

    def prepare(self, ctx: RequestContext, frame: bytes) -> bytes | Outcome:
        return frame

    def expects_response(self, request: R) -> bool:
        return True

    def decided_items(self, request: R, keys: Sequence[K]) -> int:
        return len(set(keys))

    async def settle(
        self, ctx: RequestContext, cluster: ClusterView, request: R, allowed: Sequence[K]
    ) -> Settlement[K] | Close:
        return Settlement()


class Engine:
    """Runs enforcements; the decision recorder is the one service it needs itself, and the
    limits what a request may cost."""

    def __init__(self, decisions: DecisionRecorder, *, limits: LimitsConfig | None = None) -> None:
        self._decisions = decisions
        self.limits = limits or LimitsConfig()
        """The generation's ``limits:``: what one request may cost the gateway."""

    @property
    def decisions(self) -> DecisionRecorder:
        return self._decisions

    def oversized(self, ctx: RequestContext, frame: bytes) -> Close | None:
        """The refusal of a request too large to decode whole (``judged.request.max.bytes``):
        decoded, it would cost the gateway 10 to 18 times its size in memory and hold the
        event loop, every other client's requests waiting, while it decodes. So does a walk
        over every partition (OffsetCommit v1 written again as v2, Fetch v15+ read to its
        replica id), which those handlers ask here first. The connection is closed
        unanswered, as Kafka closes one over ``socket.request.max.bytes``."""
        limit = self.limits.judged_request_max_bytes
        if limit == UNLIMITED or len(frame) <= limit:
            return None
        return Close(
            reason=f"{api_name(ctx.api_key)} v{ctx.api_version} request of {len(frame)} bytes "
            f"exceeds judged.request.max.bytes ({limit}), the largest the gateway decodes to "
            "judge or walks",
            metric_reason="oversized",
        )

    async def run(
        self,
        enforcement: Enforcement[R, K],
        ctx: RequestContext,
        cluster: ClusterView,
        frame: bytes,
    ) -> Outcome:
        prepared = enforcement.prepare(ctx, frame)
        if not isinstance(prepared, bytes):
            return prepared
        oversized = self.oversized(ctx, prepared) if enforcement.decodes_whole else None
        if oversized is not None:
            return oversized
        request = enforcement.read(ctx.header, prepared)
        keys = enforcement.keys(request)
        refused = await self._too_many_items(enforcement, ctx, request, keys)
        if refused is not None:
            return refused
        local, allowed, notes = await self._judge(enforcement, ctx, cluster, request, keys)
        settlement = await enforcement.settle(ctx, cluster, request, allowed)
        if isinstance(settlement, Close):
            return settlement
        local.update(settlement.local)
        allowed = [key for key in allowed if key not in settlement.local]
        if enforcement.dry_run_notes:
            _add_notes(local, notes)
        if not allowed and keys:
            return Answer(frame=enforcement.answer(request, ctx.correlation_id, local, None))
        return _route(enforcement, ctx.header, prepared, request, local, allowed, settlement)

    async def refused(
        self,
        ctx: RequestContext,
        error: ItemError,
        *,
        policy: str,
        resource_type: str,
        resource_name: str,
        action: str,
    ) -> ItemError:
        """Audit a refusal the gateway makes instead of judging (an unclean election of every
        partition), or after the item was judged and allowed (in ``settle``: a bound the state
        store checks as the change is written, or a store that cannot write it,
        :data:`STATE_STORE`), as one denied decision of its own (a request of one event), by
        ``policy``; ``error`` for the client, with the audit request id. After judging, the
        item's "allowed" event stays: it says what the policies decided, and this one what the
        client was answered."""
        verdict = Verdict(
            policy=policy, mode=Mode.ENFORCE, outcome="denied", message=error.error_message or ""
        )
        request_id = new_request_id()
        subject = _subject(
            ctx,
            request_id,
            resource_type=resource_type,
            resource_name=resource_name,
            action=action,
            request_events=1,
        )
        await self._decisions.record(
            subject, Decision(allowed=False, verdicts=(verdict,)), error.error_code
        )
        return tagged(error, request_id)

    async def _too_many_items(
        self, enforcement: Enforcement[R, K], ctx: RequestContext, request: R, keys: Sequence[K]
    ) -> Answer | None:
        """The answer to a request with more items to decide than ``judged.request.max.items``:
        every item refused, none judged, one audit event. Judged, each would cost the event
        loop its policy checks and its own audit event (a denial is some 900 bytes)."""
        limit = self.limits.judged_request_max_items
        if limit == UNLIMITED:
            return None
        count = enforcement.decided_items(request, keys)
        if count <= limit:
            return None
        # kpg dry-run reads the limit back from this message (gateway/tools.py, _ITEMS_LIMIT)
        message = (
            f"This request has {count} items for the policies to judge, more than the "
            f"{limit} the gateway judges in one request (limits: judged.request.max.items); "
            "none was judged or carried out. Send them in smaller requests."
        )
        verdict = Verdict(policy="limits", mode=Mode.ENFORCE, outcome="denied", message=message)
        request_id = new_request_id()
        subject = _subject(
            ctx,
            request_id,
            resource_type="cluster",
            resource_name="",
            action="request",
            request_events=1,
        )
        error = ItemError(error_code=int(POLICY_VIOLATION), error_message=message)
        await self._decisions.record(
            subject, Decision(allowed=False, verdicts=(verdict,)), error.error_code
        )
        local = dict.fromkeys(keys, tagged(error, request_id))
        return Answer(frame=enforcement.answer(request, ctx.correlation_id, local, None))

    async def _judge(
        self,
        enforcement: Enforcement[R, K],
        ctx: RequestContext,
        cluster: ClusterView,
        request: R,
        keys: Sequence[K],
    ) -> tuple[dict[K, ItemError], list[K], dict[K, str]]:
        """Dedupe, judge and audit: the items answered here, the allowed ones in order, and
        what the dry-run rules say of allowed items of a validate_only request. The request's
        id is made at its first decision (most Fetch requests have none); denials carry it in
        their message."""
        local: dict[K, ItemError] = {}
        notes: dict[K, str] = {}
        counts = Counter(keys)
        for key, count in counts.items():
            duplicate = enforcement.duplicate(key) if count > 1 else None
            if duplicate is not None:
                local[key] = duplicate
        unique = [key for key in counts if key not in local]
        rulings = await enforcement.judge(ctx, cluster, request, unique)
        # One decision shared by items is audited once: what its audit came to, by ruling.
        audited: dict[int, ItemError | None] = {}
        request_id = ""
        # Every event of the request says how many there are (the report counts a request of
        # one event without grouping the table by request id).
        decided = {id(r): r for key in unique if isinstance(r := rulings.get(key), Judged)}
        request_events = sum(events_of(r.decision) for r in decided.values())
        for key in unique:
            ruling = rulings.get(key)
            if not isinstance(ruling, Judged):
                if ruling is not None:
                    local[key] = ruling
                continue
            request_id = request_id or new_request_id()
            if id(ruling) not in audited:
                audited[id(ruling)] = await self._audit(
                    ctx, enforcement, ruling, request_id, request_events
                )
            unaudited = audited[id(ruling)]
            if not ruling.decision.allowed:
                local[key] = tagged(ruling.error(), request_id)
            elif unaudited is not None:
                local[key] = unaudited
            elif ruling.validate_only and ruling.decision.message is not None:
                notes[key] = ruling.decision.message
        return local, [key for key in unique if key not in local], notes

    async def _audit(
        self,
        ctx: RequestContext,
        enforcement: Enforcement[R, K],
        judged: Judged,
        request_id: str,
        request_events: int,
    ) -> ItemError | None:
        """Record ``judged``; None once audited (or when an unwritten audit may go on), else
        the error its allowed items are answered with (``audit.on_failure: deny``)."""
        subject = _subject(
            ctx,
            request_id,
            resource_type=judged.resource_type,
            resource_name=judged.resource_name,
            action=judged.action,
            validate_only=judged.validate_only,
            records_examined=judged.records_examined,
            bytes_examined=judged.bytes_examined,
            config_changes=judged.config_changes,
            topic_spec=judged.topic_spec,
            request_events=request_events,
        )
        code = None if judged.decision.allowed else judged.error().error_code
        try:
            await self._decisions.record(subject, judged.decision, code)
        except AuditNotWritten as exc:
            return ItemError(error_code=enforcement.unaudited_error, error_message=str(exc))
        return None


def _subject(
    ctx: RequestContext,
    request_id: str,
    *,
    resource_type: str,
    resource_name: str,
    action: str,
    **what: Any,
) -> Subject:
    """Who asked (from ``ctx``) about what: the subject of one decision of a request."""
    return Subject(
        request_id=request_id,
        client_address=ctx.client_address,
        principal=ctx.principal,
        client_id=ctx.client_id,
        api_key=ctx.api_key,
        api_version=ctx.api_version,
        resource_type=resource_type,
        resource_name=resource_name,
        action=action,
        **what,
    )


def _add_notes(local: dict[K, ItemError], notes: Mapping[K, str]) -> None:
    """A validate_only item the dry-run rules object to, but which succeeds, is answered with
    their message: as a :class:`Note` on the broker's success when it is forwarded, in place
    on the gateway's own success when answered here (keeping what that success says of the
    item: a dry run's filled-in topic)."""
    for key, message in notes.items():
        here = local.get(key)
        if here is None:
            local[key] = Note(error_message=message)
        elif here.ok and here.error_message is None:
            local[key] = replace(here, error_message=message)


def tagged(error: ItemError, request_id: str) -> ItemError:
    """``error`` with the audit request id at the end of its message (an OK stays as is)."""
    if error.ok:
        return error
    note = f"audit request id {request_id}"
    message = f"{error.error_message} ({note})" if error.error_message else note
    return replace(error, error_message=message)


def _route(
    enforcement: Enforcement[R, K],
    header: RequestHeader,
    frame: bytes,
    request: R,
    local: Mapping[K, ItemError],
    allowed: Sequence[K],
    settlement: Settlement[K],
) -> Forward:
    """Forward the allowed items: the client's bytes when nothing changes, else a request the
    gateway writes, with the local results merged into the broker's answer."""
    expect_response = enforcement.expects_response(request)
    as_sent = not local and not settlement.reencode_request
    if as_sent and not settlement.reencode_answer and settlement.after is None:
        return Forward(frame=frame, expect_response=expect_response)
    forwarded = frame if as_sent else enforcement.for_broker(request, header, allowed)
    if not expect_response:
        return Forward(frame=forwarded, expect_response=False)
    after = settlement.after
    reencode = settlement.reencode_answer or not as_sent

    async def merge(response: bytes) -> bytes:
        results = dict(local)
        if after is not None:
            results.update(await after(response))
        if not results and not reencode:
            return response
        return enforcement.answer(request, header.correlation_id, results, response)

    return Forward(frame=forwarded, on_response=merge)
