"""``kpg audit replay`` re-judges recorded changes of cluster-wide settings (client quotas,
SCRAM credentials): the ``broker.configs`` rule decides them by who asked alone, and that is
recorded, so a candidate rule set can be tried on them like on topic creations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from policies.loader import load_policy_chain
from spark_audit.replay import CandidateError, judge_item, load_candidate

pytestmark = pytest.mark.unit

CANDIDATE = {
    "rules": [
        {"name": "broker-configs", "type": "broker.configs", "allowed.principals": ["User:ops"]}
    ]
}


def _item(action: str, resource_type: str, name: str, principal: str | None) -> dict[str, Any]:
    return {
        "api": "AlterUserScramCredentials",
        "action": action,
        "resource_type": resource_type,
        "resource_name": name,
        "principal": principal,
        "topic_spec": None,
        "config_changes": None,
    }


@pytest.mark.parametrize(
    ("action", "resource_type"),
    [("alter_scram_credentials", "user"), ("alter_client_quotas", "client_quotas")],
)
@pytest.mark.parametrize(
    ("principal", "denied"),
    [("User:ops", []), ("User:mallory", ["broker-configs"]), (None, ["broker-configs"])],
)
def test_a_recorded_cluster_setting_is_judged_by_who_asked(
    action: str, resource_type: str, principal: str | None, denied: list[str]
) -> None:
    chain = load_policy_chain(CANDIDATE, source="<candidate>")
    try:
        judged = judge_item(chain, _item(action, resource_type, "platform-admin", principal))
    finally:
        chain.close()
    assert judged["replayable"] is True
    assert judged["denied_rules"] == denied
    if denied:
        assert "platform-admin" in judged["message"]


# --- what the gateway itself decided, and what an event cannot tell ---------------------------

PLUGINS = str(Path(__file__).resolve().parents[1] / "plugins")


def test_the_gateways_own_refusal_stays_whatever_the_candidate_says() -> None:
    """The gateway refuses a change of its own sign-in user's credentials whoever asks
    (policy own_principal); the replay judged the recorded refusal by broker.configs alone
    and listed it newly allowed for a principal that rule allows."""
    chain = load_policy_chain(CANDIDATE, source="<candidate>")
    item = _item("alter_scram_credentials", "user", "kpg-gateway", "User:ops")
    try:
        judged = judge_item(chain, {**item, "recorded_denied_rules": ["own_principal"]})
    finally:
        chain.close()
    assert (judged["replayable"], judged["denied_rules"]) == (True, ["own_principal"])


@pytest.mark.parametrize(
    ("api", "action", "resource_type"),
    [
        ("DeleteRecords", "delete_records", "topic"),
        ("Fetch", "fetch", "topic"),
        ("CreateAcls", "create_acl", "acl"),
    ],
)
def test_a_refusal_of_the_gateways_own_topics_stays_as_recorded(
    api: str, action: str, resource_type: str
) -> None:
    """A client's DeleteRecords or Fetch of the audit topic (or an ACL that could cover it)
    is refused by the gateway whatever the policies say (policy own_topics); the replay
    counted such a refusal not replayable, as if a rule had decided it."""
    chain = load_policy_chain(CANDIDATE, source="<candidate>")
    item = {**_item(action, resource_type, "_kpg_audit", "User:ops"), "api": api}
    try:
        judged = judge_item(chain, {**item, "recorded_denied_rules": ["own_topics"]})
    finally:
        chain.close()
    assert (judged["replayable"], judged["denied_rules"]) == (True, ["own_topics"])


def test_a_topic_config_change_is_not_judged_without_what_the_event_lacks() -> None:
    """A candidate TopicActionPolicy needs the topic's state and a required.configs rule the
    configs the request left as they were; neither is recorded, and the replay denied every
    such change for their lack (newly denied, where the live gateway allowed it)."""
    change = {
        **_item("alter_config", "topic", "orders", "User:alice"),
        "api": "IncrementalAlterConfigs",
        "config_changes": [
            {"name": "min.insync.replicas", "before": "1", "after": "2", "sensitive": False}
        ],
    }
    candidates = [
        {
            "topic.action.policy.class.name": "kafka_test_policies.RecordingTopicActionPolicy",
            "topic.action.policy.class.path": PLUGINS,
        },
        {"rules": [{"name": "retention", "type": "required.configs", "configs": ["retention.ms"]}]},
    ]
    for candidate in candidates:
        chain = load_policy_chain(candidate, source="<candidate>")
        try:
            judged = judge_item(chain, change)
        finally:
            chain.close()
        assert judged["replayable"] is False, candidate
        assert "not recorded" in judged["reason"]


def _broker_change(**changes: str | None) -> dict[str, Any]:
    return {
        **_item("alter_config", "broker", "", "User:ops"),
        "api": "IncrementalAlterConfigs",
        "config_changes": [
            {"name": k, "before": None, "after": v, "sensitive": False} for k, v in changes.items()
        ],
    }


def test_a_broker_default_is_judged_only_where_the_event_says_which_synonym_wins() -> None:
    """The gateway judges the synonym the broker will use, in its whole configs: a change of
    log.retention.hours under a log.retention.ms already set is not judged live (ms wins).
    The event holds only log.retention.hours, and the replay judged it (newly denied)."""
    candidate = {
        "rules": [
            {"name": "retention", "type": "config", "config": "retention.ms", "max": 3_600_000}
        ]
    }
    chain = load_policy_chain(candidate, source="<candidate>")
    try:
        hours = judge_item(chain, _broker_change(**{"log.retention.hours": "1000"}))
        ms = judge_item(chain, _broker_change(**{"log.retention.ms": "7200000"}))
        all_three = judge_item(
            chain,
            _broker_change(
                **{
                    "log.retention.ms": None,
                    "log.retention.minutes": None,
                    "log.retention.hours": "2",
                }
            ),
        )
    finally:
        chain.close()
    assert hours["replayable"] is False and "log.retention.ms" in hours["reason"]
    assert (ms["replayable"], ms["denied_rules"]) == (True, ["retention"])
    assert (all_three["replayable"], all_three["denied_rules"]) == (True, ["retention"])


def test_a_v1_event_stays_not_replayable_whoever_refused_it() -> None:
    """A v1 creation holds no topic spec: not replayable, even when the gateway refused it
    (its own refusals are kept as recorded only for the events that say what was asked)."""
    chain = load_policy_chain(CANDIDATE, source="<candidate>")
    v1 = {
        **_item("create", "topic", "orders", None),
        "api": "CreateTopics",
        "schema_version": 1,
        "recorded_denied_rules": ["gateway"],
    }
    try:
        judged = judge_item(chain, v1)
    finally:
        chain.close()
    assert (judged["replayable"], judged["reason"]) == (
        False,
        "creation without a topic spec (v1 event)",
    )


def test_a_candidate_with_a_key_twice_is_refused_as_the_gateway_refuses_it(
    tmp_path: Path,
) -> None:
    """The replay judged the second ``policies:`` alone, the gateway now refuses the file."""
    candidate = tmp_path / "candidate.yaml"
    candidate.write_text(
        "policies:\n  rules: [{name: p, type: partitions, max: 5}]\npolicies: {}\n"
    )
    with pytest.raises(CandidateError, match=r"'policies' a second time") as refused:
        load_candidate(str(candidate))
    assert f'in "{candidate}", line 3' in str(refused.value)
