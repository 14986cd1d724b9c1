"""ACLs that take the gateway's own topics from it: a client with ALTER on the cluster could
create a DENY for the gateway's principal on its audit or state topic (or, where brokers set
``allow.everyone.if.no.acl.found``, any binding on it), or delete the bindings that grant the
gateway its topics. The gateway's audit writes then fail (decisions unaudited under
``audit.on_failure: continue``, every change refused under ``deny``) and its state store
stops. CreateAcls and DeleteAcls were carried unread. Now an item that can apply to an own
topic is answered CLUSTER_AUTHORIZATION_FAILED and never reaches the broker; the request's
other items go on, and every item is audited.

The real gateway before the tapped real broker, with raw requests: the test broker, Tansu,
keeps no ACLs and answers ACL requests with a body cut short, which aborts librdkafka (and
confluent-kafka's admin client refuses filters without a name before sending). What reaches
the broker is read off the tap; tests/unit/test_acl_patterns.py merges a Kafka-like answer
with the gateway's refusals.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.delete_acls.v3.request import DeleteAclsFilter, DeleteAclsRequest
from kio.static.primitive import i8

from tests.support import (
    BrokerTap,
    GatewayThread,
    RawClient,
    gateway_config,
    spool_events,
    wait_for,
)

pytestmark = pytest.mark.adversarial

CREATE_ACLS, DELETE_ACLS = 30, 31
REFUSED = KafkaError.CLUSTER_AUTHORIZATION_FAILED
GATEWAY = "User:kpg"


@pytest.fixture
def gw(tap: BrokerTap, tmp_path: Path) -> Iterator[tuple[GatewayThread, str]]:
    audit_topic = f"_kpg_audit_{uuid.uuid4().hex[:8]}"
    running = GatewayThread(
        gateway_config(
            tap.address, audit={"topic": audit_topic, "spool_dir": str(tmp_path / "audit")}
        )
    ).start()
    tap.requests.clear()
    try:
        yield running, audit_topic
    finally:
        running.stop()


def binding(name: str, pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(
        ResourceType.TOPIC,
        name,
        pattern,
        GATEWAY,
        "*",
        AclOperation.WRITE,
        AclPermissionType.DENY,
    )


def acl_creation(name: str, *, pattern_type: int = 3) -> AclCreation:
    """A DENY of WRITE for the gateway's principal on topic ``name`` (LITERAL by default)."""
    return AclCreation(
        resource_type=i8(2),  # TOPIC
        resource_name=name,
        resource_pattern_type=i8(pattern_type),
        principal=GATEWAY,
        host="*",
        operation=i8(4),  # WRITE
        permission_type=i8(2),  # DENY
    )


def acl_filter(name: str | None, *, resource_type: int, pattern_type: int) -> DeleteAclsFilter:
    return DeleteAclsFilter(
        resource_type_filter=i8(resource_type),
        resource_name_filter=name,
        pattern_type_filter=i8(pattern_type),
        principal_filter=None,
        host_filter=None,
        operation=i8(1),  # ANY
        permission_type=i8(1),  # ANY
    )


def error_code(future: object) -> int | None:
    try:
        future.result(timeout=30)  # type: ignore[attr-defined]
    except KafkaException as exc:
        return int(exc.args[0].code())
    return None


def test_no_binding_that_covers_the_gateways_topics_is_created(
    gw: tuple[GatewayThread, str], tap: BrokerTap, tmp_path: Path
) -> None:
    gateway, own = gw
    covering = (
        acl_creation(own),
        acl_creation("*"),
        acl_creation(own[:4], pattern_type=4),  # PREFIXED
    )
    answer = RawClient(gateway.bootstrap).request(
        CREATE_ACLS, 3, CreateAclsRequest(creations=covering)
    )
    assert [int(r.error_code) for r in answer.results] == [REFUSED] * 3
    assert CREATE_ACLS not in tap.api_keys()
    events = spool_events(tmp_path / "audit", lambda e: e.api == "CreateAcls", count=3)
    assert [(e.verdict, e.policy, e.resource_type) for e in events] == [
        ("denied", "own_topics", "acl")
    ] * 3
    # a binding on another topic goes to the broker
    other = CreateAclsRequest(creations=(acl_creation("orders"),))
    RawClient(gateway.bootstrap).send(CREATE_ACLS, 3, other)
    wait_for(lambda: CREATE_ACLS in tap.api_keys(), timeout=10)
    [request] = tap.forwarded(CREATE_ACLS)
    assert [str(c.resource_name) for c in request.creations] == ["orders"]


def test_no_filter_that_can_match_the_gateways_bindings_deletes(
    gw: tuple[GatewayThread, str], tap: BrokerTap
) -> None:
    gateway, own = gw
    covering = (
        acl_filter(None, resource_type=1, pattern_type=1),  # every binding there is
        acl_filter(None, resource_type=2, pattern_type=3),  # every literal topic binding
        acl_filter(own, resource_type=2, pattern_type=3),
        acl_filter("orders", resource_type=2, pattern_type=2),  # MATCH takes "*" with it
        acl_filter(own[:4], resource_type=1, pattern_type=1),  # the prefixed binding too
    )
    answer = RawClient(gateway.bootstrap).request(
        DELETE_ACLS, 3, DeleteAclsRequest(filters=covering)
    )
    assert [int(r.error_code) for r in answer.filter_results] == [REFUSED] * len(covering)
    assert all(own in (r.error_message or "") for r in answer.filter_results)
    assert DELETE_ACLS not in tap.api_keys()
    # a filter of another topic's bindings goes to the broker
    filters = (acl_filter("orders", resource_type=2, pattern_type=3),)
    RawClient(gateway.bootstrap).send(DELETE_ACLS, 3, DeleteAclsRequest(filters=filters))
    wait_for(lambda: DELETE_ACLS in tap.api_keys(), timeout=10)
    [request] = tap.forwarded(DELETE_ACLS)
    assert [str(f.resource_name_filter) for f in request.filters] == ["orders"]
