"""What the gateway does with every API key Kafka defines (every key kio ships): the coverage
table. Each key is one of:

- ``judged``: decoded and judged by an enforcement (its module in this package);
- ``rewritten``: forwarded, and the request or the answer rewritten (broker addresses, the
  versions the gateway carries, the principal learned from SASL, a dynamic client config);
- ``passed``: forwarded as raw bytes, with the reason it cannot change a topic, a config, a
  group offset or data that a policy protects;
- ``refused``: never forwarded and never advertised in ApiVersions; a client that sends it
  anyway has its connection closed. Inter-broker and controller APIs, and APIs whose answers
  carry addresses the gateway does not rewrite.

A key kio knows that this table does not classify fails the coverage test, so a kio upgrade
cannot add an API that slips through unexamined.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

Treatment = Literal["judged", "rewritten", "passed", "refused"]


@dataclass(frozen=True, slots=True)
class Coverage:
    treatment: Treatment
    reason: str


def _j(reason: str) -> Coverage:
    return Coverage("judged", reason)


def _w(reason: str) -> Coverage:
    return Coverage("rewritten", reason)


def _p(reason: str) -> Coverage:
    return Coverage("passed", reason)


def _r(reason: str) -> Coverage:
    return Coverage("refused", reason)


_INTERNAL = "inter-broker or controller API: no client sends it"
_GROUP = "group membership and coordination; no policy governs groups"
_READ = "reads only"
_TXN = "transaction bookkeeping; the records themselves are judged at Produce"
_SHARE = (
    "share group membership and offsets: not judged yet (a heartbeat subscribes topics, "
    "own ones included); ShareFetch and ShareAcknowledge are carried"
)

COVERAGE: Final[dict[int, Coverage]] = {
    0: _j(
        "record validation (v13: topic ids resolved to names first); the gateway's own topics "
        "refused; leader endpoints (v10+) rewritten"
    ),
    1: _j(
        "the gateway's own topics refused (from v13 by id: an id not learnt to name another "
        "topic is read, one not known UNKNOWN_TOPIC_ID); a follower's fetch (a replica id) "
        "refused; every other fetch passes unread; an incremental session's answer kept "
        "whole; leader endpoints (v16+) rewritten"
    ),
    2: _j(
        "legal topic names; the gateway's own topics refused; a replica's request (a replica "
        "id other than -1, answered to the log end) refused"
    ),
    3: _j("auto-creation judged as CreateTopics; legal topic names; broker addresses rewritten"),
    8: _w(
        "commits a group's own offsets; the broker authorizes the group and topic. A client's "
        "retention time (v2-v4) set to -1, the broker's: a short one deletes the offsets at "
        "the next offset cleanup, an OffsetDelete unjudged. v1 (a commit timestamp per "
        "partition does the same) sent as v2 with -1 and no timestamps; v0 not carried"
    ),
    9: _p(_READ),
    10: _w("the coordinator's address replaced by the gateway's"),
    11: _w("session.timeout.ms set from a dynamic client config (opt-in)"),
    12: _p(_GROUP),
    13: _p(_GROUP),
    14: _p(_GROUP),
    15: _p(_READ),
    16: _p(_READ),
    17: _w("the mechanism noted, to learn the principal"),
    18: _w("versions narrowed to those the gateway carries"),
    19: _j("create-topic policies, KIP-108 and KIP-201"),
    20: _j(
        "topic action policy DELETE; protected and own topics; a v6 entry naming both a topic "
        "and a topic id INVALID_REQUEST, as Kafka answers it"
    ),
    21: _j("protected topics and the gateway's own refused"),
    22: _p(
        "allocates a producer id; with a transactional id, fences that id's earlier producer "
        "and aborts its open transaction (abort markers only: nothing becomes visible); the "
        "broker authorizes the transactional id"
    ),
    23: _j("legal topic names; the gateway's own topics refused"),
    24: _j(
        "the gateway's own topics refused (a transaction would write its markers into them), "
        "the request's other partitions not attempted; v0-v3 only, the clients' form: v4 and "
        "later are the brokers' own (KIP-890), adding partitions to any producer's "
        "transaction; " + _TXN
    ),
    25: _p(_TXN),
    26: _p(_TXN),
    27: _r(_INTERNAL),
    28: _p(
        "commits a group's offsets inside a transaction; the broker authorizes them. Like "
        "OffsetCommit, it can move a group's offsets on a protected topic"
    ),
    29: _p(_READ),
    30: _j(
        "a binding that can apply to the gateway's own topics refused; the broker authorizes "
        "the rest (ALTER on the cluster), which no other gateway policy governs"
    ),
    31: _j(
        "a filter that can match bindings of the gateway's own topics refused; the broker "
        "authorizes the rest (ALTER on the cluster), which no other gateway policy governs"
    ),
    32: _j(
        "the gateway's own configs added; dynamic client configs answered; a broker's configs "
        "holding addresses (listeners, controller.quorum.voters, bootstrap servers) shown "
        "without their value, as sensitive"
    ),
    33: _j("alter-config policies, KIP-201 MODIFY"),
    34: _p("moves a replica between disks of one broker; replicas and configs stay"),
    35: _p(_READ),
    36: _w("the principal learned once the broker accepts"),
    37: _j("topic action policy MODIFY; partition rules"),
    38: _p("delegation tokens: authentication, authorized by the broker"),
    39: _p("delegation tokens: authentication, authorized by the broker"),
    40: _p("delegation tokens: authentication, authorized by the broker"),
    41: _p(_READ),
    42: _j("judged as OffsetDelete of every topic the group has offsets for"),
    43: _j("unclean elections judged as unclean.leader.election.enable=true"),
    44: _j("alter-config policies, KIP-201 MODIFY; dynamic client configs"),
    45: _j("topic action policy MODIFY; replication factor rules; protected topics"),
    46: _p(_READ),
    47: _j("protected topics and the gateway's own refused"),
    48: _p(_READ),
    49: _j(
        "client quotas: only the principals a broker.configs rule allows; none naming the "
        "gateway's own user (upstream.sasl)"
    ),
    50: _p(_READ),
    51: _j(
        "SCRAM credentials: only the principals a broker.configs rule allows; the gateway's "
        "own (upstream.sasl) no one"
    ),
    52: _r(_INTERNAL),
    53: _r(_INTERNAL),
    54: _r(_INTERNAL),
    55: _r("its answer lists the controllers' addresses, which the gateway does not carry"),
    56: _r(_INTERNAL),
    57: _r(
        "changes the cluster's feature levels (metadata.version): an operator's task, "
        "not a client's through a policy gateway"
    ),
    58: _r(_INTERNAL),
    59: _r(_INTERNAL),
    60: _w("broker addresses replaced by the gateway's; controller endpoints refused"),
    61: _j("legal topic names; the gateway's own topics refused"),
    62: _r(_INTERNAL),
    63: _r(_INTERNAL),
    64: _r("unregisters a broker from the cluster: an operator's task"),
    65: _p(_READ),
    66: _p(_READ),
    67: _r(_INTERNAL),
    68: _w(
        "group membership; a consumer whose session.timeout.ms is a dynamic client config "
        "refused (opt-in): the broker, not the request, sets a KIP-848 member's timeout"
    ),
    69: _p(_READ),
    70: _r(_INTERNAL),
    71: _p("client telemetry subscription; changes nothing"),
    72: _p("client telemetry; changes nothing"),
    73: _r(_INTERNAL),
    74: _w("reads only; the gateway answers for its own dynamic client config types"),
    75: _p(_READ),
    76: _r(_SHARE),
    77: _r(_SHARE),
    78: _w(
        "leader endpoints rewritten; the gateway's own topics (by id) refused, and ids not known"
    ),
    79: _w(
        "leader endpoints rewritten; the gateway's own topics (by id) refused, and ids not known"
    ),
    80: _r("changes the controller quorum: an operator's task"),
    81: _r("changes the controller quorum: an operator's task"),
    82: _r("changes the controller quorum: an operator's task"),
    83: _r(_INTERNAL),
    84: _r(_INTERNAL),
    85: _r(_INTERNAL),
    86: _r(_INTERNAL),
    87: _r(_INTERNAL),
    88: _r("a streams group's heartbeat makes the broker create its internal topics, unjudged"),
    89: _p(_READ),
    90: _r(_SHARE),
    91: _r(_SHARE),
    92: _r(_SHARE),
}
"""API key -> what the gateway does with it, and why."""
