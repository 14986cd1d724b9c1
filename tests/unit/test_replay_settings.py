"""``kpg audit replay`` re-judges recorded changes of cluster-wide settings (client quotas,
SCRAM credentials): the ``broker.configs`` rule decides them by who asked alone, and that is
recorded, so a candidate rule set can be tried on them like on topic creations."""

from __future__ import annotations

from typing import Any

import pytest

from policies.loader import load_policy_chain
from spark_audit.replay import judge_item

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
