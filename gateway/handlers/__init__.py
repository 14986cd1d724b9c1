"""One handler per intercepted Kafka API, registered in one explicit table.

A handler turns a request into an :class:`gateway.outcomes.Outcome` value; the judged APIs are
:class:`gateway.engine.Enforcement` s run by the one engine. APIs absent from the table but
known to the gateway pass through as raw bytes; an API key the gateway does not know is
refused before any handler runs. Handlers are built once with the gateway's
:class:`gateway.services.Services` and never import the server or the connection.
"""

from __future__ import annotations

from collections.abc import Mapping

from protocol.versions import VersionRange

from ..services import Services
from . import (
    acls,
    add_partitions_to_txn,
    alter_configs,
    alter_partition_reassignments,
    api_versions,
    cluster_settings,
    consumer_group_heartbeat,
    create_partitions,
    create_topics,
    delete_groups,
    delete_records,
    delete_topics,
    describe_cluster,
    describe_configs,
    describe_producers,
    elect_leaders,
    fetch,
    find_coordinator,
    join_group,
    list_config_resources,
    list_offsets,
    metadata,
    offset_commit,
    offset_delete,
    offset_for_leader_epoch,
    produce,
    sasl_authenticate,
    sasl_handshake,
    share_acknowledge,
    share_fetch,
)
from .base import Registration, refuse
from .coverage import COVERAGE

_MODULES = (
    metadata,
    find_coordinator,
    describe_cluster,
    produce,
    fetch,
    list_offsets,
    offset_for_leader_epoch,
    describe_producers,
    create_topics,
    sasl_handshake,
    sasl_authenticate,
    create_partitions,
    delete_topics,
    delete_records,
    delete_groups,
    offset_delete,
    alter_partition_reassignments,
    elect_leaders,
    describe_configs,
    join_group,
    consumer_group_heartbeat,
    offset_commit,
    list_config_resources,
    share_fetch,
    share_acknowledge,
    add_partitions_to_txn,
)

REFUSED = frozenset(key for key, c in COVERAGE.items() if c.treatment == "refused")
"""Never forwarded, never advertised (see :mod:`.coverage`)."""


def version_caps() -> dict[int, VersionRange | None]:
    """API key -> the versions the gateway carries for it; None: never forwarded."""
    caps: dict[int, VersionRange | None] = {m.API_KEY: m.VERSIONS for m in _MODULES}
    caps[api_versions.API_KEY] = api_versions.VERSIONS
    caps[alter_configs.LEGACY_API_KEY] = alter_configs.LEGACY_VERSIONS
    caps[alter_configs.INCREMENTAL_API_KEY] = alter_configs.INCREMENTAL_VERSIONS
    caps[cluster_settings.QUOTAS_API_KEY] = cluster_settings.QUOTAS_VERSIONS
    caps[cluster_settings.SCRAM_API_KEY] = cluster_settings.SCRAM_VERSIONS
    caps[acls.CREATE_API_KEY] = acls.CREATE_VERSIONS
    caps[acls.DELETE_API_KEY] = acls.DELETE_VERSIONS
    caps.update(dict.fromkeys(REFUSED))
    return caps


def build_table(services: Services) -> Mapping[int, Registration]:
    """The explicit table: API key -> handler and the versions it takes. Keys it leaves out
    are passed through (see :mod:`.coverage` for why each may be)."""
    caps = version_caps()
    table = {
        m.API_KEY: Registration(handler=m.handler(services), versions=m.VERSIONS) for m in _MODULES
    }
    table[api_versions.API_KEY] = Registration(
        handler=api_versions.handler(caps), versions=api_versions.VERSIONS
    )
    # A create that loses to another puts the winner's record.validation.policy back after
    # the broker's answer (see create_topics).
    table[create_topics.API_KEY] = Registration(
        handler=table[create_topics.API_KEY].handler,
        versions=create_topics.VERSIONS,
        after_answers_taken=True,
    )
    table[alter_configs.LEGACY_API_KEY] = Registration(
        handler=alter_configs.legacy_handler(services), versions=alter_configs.LEGACY_VERSIONS
    )
    table[alter_configs.INCREMENTAL_API_KEY] = Registration(
        handler=alter_configs.incremental_handler(services),
        versions=alter_configs.INCREMENTAL_VERSIONS,
    )
    table[cluster_settings.QUOTAS_API_KEY] = Registration(
        handler=cluster_settings.quotas_handler(services),
        versions=cluster_settings.QUOTAS_VERSIONS,
    )
    table[cluster_settings.SCRAM_API_KEY] = Registration(
        handler=cluster_settings.scram_handler(services),
        versions=cluster_settings.SCRAM_VERSIONS,
    )
    table[acls.CREATE_API_KEY] = Registration(
        handler=acls.create_acls_handler(services), versions=acls.CREATE_VERSIONS
    )
    table[acls.DELETE_API_KEY] = Registration(
        handler=acls.delete_acls_handler(services), versions=acls.DELETE_VERSIONS
    )
    for api_key in REFUSED:
        table[api_key] = Registration(handler=refuse, versions=None)
    return table
