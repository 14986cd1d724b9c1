"""Fetch: passed through as raw bytes, unless it may name one of the gateway's own topics.

Fetch v16 and later answers may carry leader endpoints (KIP-951 ``node_endpoints``) when
leadership moved: each answer's layout is walked to its tagged fields (records skipped by
their length, never copied or read), and only one holding leader endpoints is decoded and has
them swapped for the gateway's listeners (:mod:`._addresses`).

The gateway's own topics (state and audit) are read by no client: before v13, a request whose
bytes hold one of their names is decoded and those partitions get TOPIC_AUTHORIZATION_FAILED
(:mod:`._partitioned`); the rest is fetched as asked. From v13 topics are named by id: the
request is walked to its topic ids (:func:`protocol.fetch_replica.read_fetch`, under
``judged.request.max.bytes``) and passes unread only when each was learnt to name a topic not
the gateway's own (:class:`._partitioned.TopicNamesById`: an id names one topic forever, so
nothing learnt goes stale, on any worker); otherwise it is decoded, an own topic's partitions
refused and an id still not known once asked again answered UNKNOWN_TOPIC_ID (an own topic made
again has a new id, unknown until learnt). Any other request is never decoded. The answer of
a decoded request is the broker's whole, the refusals added: an incremental fetch session's
(KIP-227) answer holds partitions the request did not name. An answer with refusals closes the
client's fetch session (:func:`protocol.partitioned.answer`), so that its next fetch names the
refused partitions again.

A follower's fetch (a replica id of 0 or more: v0-v14 in the body's first field, from v15 in
the ``replica_state`` tagged field, :mod:`protocol.fetch_replica`) is inter-broker
replication, not a client's read: Kafka serves it past the high watermark and counts it as
that replica's progress (the high watermark and the ISR move), guarded only by the
CLUSTER_ACTION ACL, which a broker without an authorizer grants anyone. So is -3, a broker's
own replica move between disks, which Kafka also serves to the log end (asking only READ on
the topic). Any replica id Kafka does not serve as a consumer's closes the connection
unforwarded, as the inter-broker APIs do. From v15 that takes a walk over every partition of
the request, so a v15+ request over ``judged.request.max.bytes`` closes the connection unread,
as a judged request decoded whole does: 96 MB of partitions held the event loop 1.8 s (every
client waiting), and its answer's walk (v16+) as long again.
"""

from __future__ import annotations

from protocol.codec import Undecodable, can_decode
from protocol.fetch_replica import REPLICA_STATE_SINCE, TOPIC_IDS_SINCE, is_consumer, read_fetch
from protocol.versions import TAKEN

from ..engine import RequestContext
from ..outcomes import Close, Forward, Outcome
from ..services import Services
from ._addresses import with_leader_endpoints
from ._partitioned import TopicPartitions
from .base import Handler, enforced

API_KEY = 1
VERSIONS = TAKEN[API_KEY]


class Fetch(TopicPartitions):
    def prepare(self, ctx: RequestContext, frame: bytes) -> bytes | Outcome:
        own = self._services.own_topics
        version = ctx.api_version
        by_id = bool(own) and version >= TOPIC_IDS_SINCE
        if version >= REPLICA_STATE_SINCE or by_id:
            oversized = self._services.engine.oversized(ctx, frame)
            if oversized is not None:
                return oversized
        try:
            replica_ids, topic_ids = read_fetch(ctx.header, frame, topic_ids=by_id)
        except Undecodable as exc:
            return Close(reason=str(exc), metric_reason="undecodable")
        refused = _as_replica(ctx, replica_ids)
        if refused is not None:
            return refused
        if not own:
            return Forward(frame=frame)
        if not by_id:
            if not any(topic.encode() in frame for topic in own):
                return Forward(frame=frame)
            if not can_decode(API_KEY, version):
                return Close(
                    reason=f"Fetch v{version} may name the gateway's own topics and is "
                    "too old to read",
                    metric_reason="undecodable",
                )
            return frame
        # forwarded unread only when every topic id is one learnt to name another topic
        # (an id names one topic forever); any other is read, and resolved (judge)
        if self._names.all_others(topic_ids, frame):
            return Forward(frame=frame)
        return frame


def _as_replica(ctx: RequestContext, replica_ids: tuple[int, ...]) -> Close | None:
    """The refusal of a fetch as a replica."""
    replicas = [r for r in replica_ids if not is_consumer(r)]
    if not replicas:
        return None
    return Close(
        reason=f"Fetch v{ctx.api_version} as replica {replicas[0]}: follower fetches are "
        "replication, not carried for clients",
        metric_reason="refused_api",
    )


def handler(services: Services) -> Handler:
    return with_leader_endpoints(
        API_KEY, services, enforced(services, Fetch(services, API_KEY, VERSIONS))
    )
