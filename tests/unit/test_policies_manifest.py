"""``kpg policy check``'s core: a topic manifest judged by the chain, with no cluster."""

from __future__ import annotations

import re
from collections.abc import Mapping

import pytest

from policies.chain import PolicyChain
from policies.manifest import ManifestError, check_manifest, parse_manifest
from policies.rules import ConfigRule, ProtectedTopicsRule, ReplicationFactorRule

pytestmark = pytest.mark.unit

SOURCE = "topics.yaml"
T = {"name": "t", "partitions": 1, "replication_factor": 1}


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
        checks = check_manifest(chain, manifest, source=SOURCE)
    assert [(c.topic, c.decision.allowed) for c in checks] == [
        ("orders", True),
        ("audit", False),
        ("clicks", False),
    ]
    assert checks[1].decision.message == (
        "topic audit: replication factor 1 is below the minimum of 3 (rule rf)"
    )
    assert checks[2].decision.message == (
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
        [check] = check_manifest(chain, manifest, source=SOURCE, principal="User:ci")
        [refused] = check_manifest(chain, manifest, source=SOURCE, principal="User:bob")
    assert check.decision.allowed
    assert [v.outcome for v in check.decision.verdicts] == ["allowed"]
    assert not refused.decision.allowed


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
