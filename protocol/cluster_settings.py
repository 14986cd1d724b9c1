"""AlterClientQuotas (v0-v1) and AlterUserScramCredentials (v0): the cluster-wide settings that
Kafka keeps beside the broker configs, guarded on the CLUSTER resource as they are (quotas by
ALTER_CONFIGS, SCRAM credentials by ALTER).

Items: a quota request's entries by position (each names an entity: ``user``, ``client-id``,
``ip``, a null name for the default); a credentials request's users, in request order,
deletions first, as Kafka answers one result per user.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias, get_args

from kio.schema.alter_client_quotas import v0 as q0
from kio.schema.alter_client_quotas import v1 as q1
from kio.schema.alter_user_scram_credentials import v0 as s0
from kio.schema.errors import ErrorCode

from .codec import (
    built,
    decode_request_as,
    decode_response_as,
    encode_body,
    encode_request,
    filled,
    replaced,
    schema_of,
)
from .framing import RequestHeader, response_header
from .results import ItemError

ALTER_CLIENT_QUOTAS: Final = 49
ALTER_USER_SCRAM_CREDENTIALS: Final = 51

QuotasRequest: TypeAlias = q0.AlterClientQuotasRequest | q1.AlterClientQuotasRequest
QuotasResponse: TypeAlias = q0.AlterClientQuotasResponse | q1.AlterClientQuotasResponse
QuotaEntry: TypeAlias = q0.response.EntryData | q1.response.EntryData
QuotaEntity: TypeAlias = q0.response.EntityData | q1.response.EntityData

SentEntry: TypeAlias = q0.request.EntryData | q1.request.EntryData

_QUOTA_REQUESTS: Final[tuple[type[QuotasRequest], ...]] = get_args(QuotasRequest)
_QUOTA_RESPONSES: Final[tuple[type[QuotasResponse], ...]] = get_args(QuotasResponse)
_QUOTA_ENTRIES: Final[tuple[type[QuotaEntry], ...]] = get_args(QuotaEntry)
_QUOTA_ENTITIES: Final[tuple[type[QuotaEntity], ...]] = get_args(QuotaEntity)

_DEFAULT: Final = "<default>"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientQuotas:
    version: int
    entities: tuple[str, ...]
    """Each entry's entity as a denial names it (``user=alice, client-id=<default>``), by
    position."""
    users: tuple[str | None, ...]
    """Each entry's named user (None: the default user, or no user part), by position."""
    payload: QuotasRequest


def _entity_label(entity: Collection[q0.request.EntityData | q1.request.EntityData]) -> str:
    parts = [
        f"{e.entity_type}={_DEFAULT if e.entity_name is None else e.entity_name}" for e in entity
    ]
    return ", ".join(parts) if parts else "no entity"


def _named_user(entity: Collection[q0.request.EntityData | q1.request.EntityData]) -> str | None:
    names = [e.entity_name for e in entity if e.entity_type == "user"]
    return names[0] if names else None


def read_client_quotas(header: RequestHeader, frame: bytes) -> ClientQuotas:
    """:raises Undecodable: for a malformed body or a version kio lacks."""
    payload = decode_request_as(_QUOTA_REQUESTS, header, frame)
    return ClientQuotas(
        version=header.api_version,
        entities=tuple(_entity_label(entry.entity) for entry in payload.entries),
        users=tuple(_named_user(entry.entity) for entry in payload.entries),
        payload=payload,
    )


def client_quotas_keeping(
    request: ClientQuotas, header: RequestHeader, keep: Collection[int]
) -> bytes:
    """The request frame (no size prefix) holding only the entries at the ``keep`` positions."""
    entries = tuple(e for i, e in enumerate(request.payload.entries) if i in keep)
    payload = replaced(request.payload, entries=entries)
    return encode_request(
        ALTER_CLIENT_QUOTAS, request.version, header.correlation_id, header.client_id, payload
    )[4:]


def client_quotas_answer(
    request: ClientQuotas,
    correlation_id: int,
    local: Mapping[int, ItemError],
    broker_frame: bytes | None,
) -> bytes:
    """The response frame (no size prefix): one result per entry, in request order, from
    ``local`` where given, else the broker's next (it answers the entries it got in order)."""
    broker = (
        None
        if broker_frame is None
        else decode_response_as(
            _QUOTA_RESPONSES, ALTER_CLIENT_QUOTAS, request.version, broker_frame
        )
    )
    answered: Sequence[QuotaEntry] = broker.entries if broker is not None else ()
    from_broker = iter(answered)
    entry_cls = schema_of(_QUOTA_ENTRIES, request.version)
    entity_cls = schema_of(_QUOTA_ENTITIES, request.version)
    entries: list[QuotaEntry] = []
    sent_entries: Sequence[SentEntry] = request.payload.entries
    for index, sent in enumerate(sent_entries):
        mine = local.get(index)
        if mine is None:
            entries.append(next(from_broker))
            continue
        entity = tuple(
            entity_cls(entity_type=e.entity_type, entity_name=e.entity_name) for e in sent.entity
        )
        fields = {
            "error_code": ErrorCode(mine.error_code),
            "error_message": mine.error_message,
            "entity": entity,
        }
        entries.append(built(entry_cls, fields))
    top: dict[str, object] = {"entries": tuple(entries)}
    if broker is not None:
        top["throttle_time"] = broker.throttle_time
    payload = filled(schema_of(_QUOTA_RESPONSES, request.version), top)
    return response_header(correlation_id, ALTER_CLIENT_QUOTAS, request.version) + encode_body(
        payload
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ScramCredentials:
    version: int
    users: tuple[str, ...]
    """Every user a deletion or upsertion names, in request order, repeats included."""
    payload: s0.AlterUserScramCredentialsRequest


def read_scram_credentials(header: RequestHeader, frame: bytes) -> ScramCredentials:
    """:raises Undecodable: for a malformed body or a version kio lacks."""
    payload = decode_request_as((s0.AlterUserScramCredentialsRequest,), header, frame)
    users = [d.name for d in payload.deletions] + [u.name for u in payload.upsertions]
    return ScramCredentials(version=header.api_version, users=tuple(users), payload=payload)


def scram_credentials_keeping(
    request: ScramCredentials, header: RequestHeader, keep: Collection[str]
) -> bytes:
    """The request frame (no size prefix) changing only the credentials of the ``keep`` users."""
    payload = replaced(
        request.payload,
        deletions=tuple(d for d in request.payload.deletions if d.name in keep),
        upsertions=tuple(u for u in request.payload.upsertions if u.name in keep),
    )
    return encode_request(
        ALTER_USER_SCRAM_CREDENTIALS,
        request.version,
        header.correlation_id,
        header.client_id,
        payload,
    )[4:]


def scram_credentials_answer(
    request: ScramCredentials,
    correlation_id: int,
    local: Mapping[str, ItemError],
    broker_frame: bytes | None,
) -> bytes:
    """The response frame (no size prefix): one result per user, in request order, from
    ``local`` where given, else from the broker's answer.

    :raises KeyError: when a user is in neither.
    """
    broker = (
        None
        if broker_frame is None
        else decode_response_as(
            (s0.AlterUserScramCredentialsResponse,),
            ALTER_USER_SCRAM_CREDENTIALS,
            request.version,
            broker_frame,
        )
    )
    from_broker = {r.user: r for r in broker.results} if broker is not None else {}
    results: list[s0.response.AlterUserScramCredentialsResult] = []
    for user in dict.fromkeys(request.users):
        mine = local.get(user)
        if mine is None:
            results.append(from_broker[user])
        else:
            results.append(
                s0.response.AlterUserScramCredentialsResult(
                    user=user,
                    error_code=ErrorCode(mine.error_code),
                    error_message=mine.error_message,
                )
            )
    top: dict[str, object] = {"results": tuple(results)}
    if broker is not None:
        top["throttle_time"] = broker.throttle_time
    payload = filled(s0.AlterUserScramCredentialsResponse, top)
    return response_header(
        correlation_id, ALTER_USER_SCRAM_CREDENTIALS, request.version
    ) + encode_body(payload)
