"""Topic manifests (``kpg policy check``, ``kpg dry-run``): read, then judged by the chain."""

from __future__ import annotations

import re
from collections.abc import Mapping

import pytest

from policies.api import CreateTopicRequestMetadata
from policies.chain import Decision, PolicyChain
from policies.manifest import ManifestError, parse_manifest
from policies.rules import ConfigRule, ProtectedTopicsRule, ReplicationFactorRule

pytestmark = pytest.mark.unit

SOURCE = "topics.yaml"
T = {"name": "t", "partitions": 1, "replication_factor": 1}


def _judged(
    chain: PolicyChain, manifest: Mapping[str, object], principal: str | None = None
) -> list[tuple[CreateTopicRequestMetadata, Decision]]:
    return [
        (request, chain.check_create_topic(request, principal=principal))
        for request in parse_manifest(manifest, source=SOURCE)
    ]


def test_each_topic_gets_its_own_decision_in_manifest_order() -> None:
    manifest = {
        "topics": [
            {"name": "orders", "partitions": 6, "replication_factor": 3},
            {"name": "audit", "partitions": 1, "replication_factor": 1},
            {
                "name": "clicks",
                "partitions": 3,
                "replication_factor": 3,
                "configs": {"unclean.leader.election.enable": True, "retention.ms": 1000},
            },
        ]
    }
    rules = [
        ReplicationFactorRule(name="rf", min=3),
        ConfigRule(
            name="unclean", config="unclean.leader.election.enable", allowed=frozenset({"false"})
        ),
    ]
    with PolicyChain(rules=rules) as chain:
        checks = _judged(chain, manifest)
    assert [(r.topic, d.allowed) for r, d in checks] == [
        ("orders", True),
        ("audit", False),
        ("clicks", False),
    ]
    assert checks[1][1].message == (
        "topic audit: replication factor 1 is below the minimum of 3 (rule rf)"
    )
    assert checks[2][1].message == (
        "topic clicks: unclean.leader.election.enable=true: 'true' is not one of false "
        "(rule unclean)"
    )


def test_configs_become_the_strings_kafka_would_send() -> None:
    [request] = parse_manifest(
        {
            "topics": [
                {
                    "name": "t",
                    "partitions": 1,
                    "replication_factor": 1,
                    "configs": {"a": True, "b": 7, "c": 0.5, "d": "x"},
                }
            ]
        },
        source=SOURCE,
    )
    assert request.configs == {"a": "true", "b": "7", "c": "0.5", "d": "x"}
    assert (request.num_partitions, request.replication_factor) == (1, 1)


def test_the_principal_is_passed_on() -> None:
    rule = ProtectedTopicsRule(
        name="p", topics=(re.compile(".*"),), allowed_principals=frozenset({"User:ci"})
    )
    manifest = {"topics": [{"name": "t", "partitions": 1, "replication_factor": 1}]}
    with PolicyChain(rules=[rule]) as chain:
        # protected topics may be created only by the allowed principals: User:ci is one
        [(_, check)] = _judged(chain, manifest, principal="User:ci")
        [(_, refused)] = _judged(chain, manifest, principal="User:bob")
    assert check.allowed
    assert [v.outcome for v in check.verdicts] == ["allowed"]
    assert not refused.allowed


@pytest.mark.parametrize(
    ("manifest", "where"),
    [
        ({}, "topics"),
        ({"topics": ["orders"]}, "topics[0]"),
        ({"topics": [{"partitions": 1, "replication_factor": 1}]}, "topics[0].name"),
        ({"topics": [{"name": "t", "replication_factor": 1}]}, "topics[0].partitions"),
        ({"topics": [{**T, "partitions": 0}]}, "topics[0].partitions"),
        ({"topics": [{**T, "replication_factor": "3"}]}, "topics[0].replication_factor"),
        ({"topics": [{**T, "config": {}}]}, "topics[0].config"),
        ({"topics": [{**T, "configs": ["a"]}]}, "topics[0].configs"),
        ({"topics": [{**T, "configs": {"a": [1]}}]}, "topics[0].configs.a"),
    ],
)
def test_a_malformed_manifest_names_the_file_and_the_key(
    manifest: Mapping[str, object], where: str
) -> None:
    with pytest.raises(ManifestError) as caught:
        parse_manifest(manifest, source=SOURCE)
    assert str(caught.value).startswith(f"{SOURCE}: {where}: ")
