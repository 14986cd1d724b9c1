"""The configurations deploy/ ships, as a platform team copies them: the policies of the
Docker Compose gateway (``deploy/gateway.compose.yaml``) and of the Kubernetes ConfigMap
(``deploy/kubernetes/configmap.yaml``), loaded as the gateway loads them, in front of the
tapped real broker.

Neither broker behind them guards its cluster settings: Compose's Apache Kafka has no
authorizer, and the ConfigMap's Strimzi listener is plaintext. Without a ``broker.configs``
rule any client that reached the gateway, unauthenticated, could throttle every client with
a quota on the default user, give ``User:platform-admin`` (whom the rules allow) a password
of its choosing, or set the cluster-wide ``min.insync.replicas`` past the replication
factor, after which every ``acks=all`` produce fails. Each is sent raw, anonymous: refused
with POLICY_VIOLATION naming the rule, nothing reaches the broker. Tansu drops the
connection of an AlterClientQuotas it does not know, so on a gateway that forwarded it the
request fails before any answer.

Nor do they authenticate clients, so without ``client_configs.admin_principals`` any client
could set any user's dynamic client configs (and fill the state every instance re-reads, to
``client.configs.max.entities``, after which no change is taken)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config import load
from tests.adversarial.test_broker_configs import BROKER, SET, incremental, results
from tests.adversarial.test_cluster_settings import (
    ALTER_CLIENT_QUOTAS,
    ALTER_USER_SCRAM_CREDENTIALS,
    _set_password,
    _throttle_everyone,
)
from tests.inproc.test_client_configs import USER_CLIENT, alter, stored
from tests.support import BrokerTap, GatewayThread, RawClient, gateway_config, policy_message

pytestmark = pytest.mark.adversarial

ROOT = Path(__file__).resolve().parents[2]
INCREMENTAL_ALTER_CONFIGS = 44
POLICY_VIOLATION = 44
CLUSTER_AUTHORIZATION_FAILED = 31


SECTIONS = ("policies", "client_configs")
"""What the tests take of a shipped file: the rest names its own broker and ports."""


def _compose_sections(tmp_path: Path) -> dict[str, Any]:
    del tmp_path
    config = yaml.safe_load((ROOT / "deploy" / "gateway.compose.yaml").read_text())
    return {key: config[key] for key in SECTIONS if key in config}


def _kubernetes_sections(tmp_path: Path) -> dict[str, Any]:
    (configmap,) = yaml.safe_load_all((ROOT / "deploy/kubernetes/configmap.yaml").read_text())
    text = configmap["data"]["gateway.yaml"]
    (tmp_path / "gateway.yaml").write_text(text)
    load(tmp_path / "gateway.yaml")  # the ConfigMap loads as the pods load it
    config = yaml.safe_load(text)
    return {key: config[key] for key in SECTIONS if key in config}


@pytest.fixture(params=[_compose_sections, _kubernetes_sections], ids=["compose", "kubernetes"])
def gw(request: pytest.FixtureRequest, tap: BrokerTap, tmp_path: Path) -> Iterator[GatewayThread]:
    running = GatewayThread(gateway_config(tap.address, **request.param(tmp_path))).start()
    tap.requests.clear()
    try:
        yield running
    finally:
        running.stop()


def _refusal(code: int, message: str | None) -> tuple[int, str | None]:
    return code, policy_message(message) if code == POLICY_VIOLATION else message


def test_anonymous_client_cannot_throttle_every_client(gw: GatewayThread, tap: BrokerTap) -> None:
    answer = RawClient(gw.bootstrap, timeout=5).request(
        ALTER_CLIENT_QUOTAS, 1, _throttle_everyone()
    )
    assert [_refusal(int(e.error_code), e.error_message) for e in answer.entries] == [
        (
            POLICY_VIOLATION,
            "the client quotas of user=<default>: an unauthenticated client may not change its "
            "configs (rule broker-configs)",
        )
    ]
    assert ALTER_CLIENT_QUOTAS not in tap.api_keys()


def test_anonymous_client_cannot_set_an_admins_password(gw: GatewayThread, tap: BrokerTap) -> None:
    answer = RawClient(gw.bootstrap, timeout=5).request(
        ALTER_USER_SCRAM_CREDENTIALS, 0, _set_password("platform-admin")
    )
    assert [_refusal(int(r.error_code), r.error_message)[0] for r in answer.results] == [
        POLICY_VIOLATION
    ]
    assert ALTER_USER_SCRAM_CREDENTIALS not in tap.api_keys()


def test_anonymous_client_cannot_change_the_cluster_default(
    gw: GatewayThread, tap: BrokerTap
) -> None:
    request = incremental([(BROKER, "", [("min.insync.replicas", SET, "3")])])
    answer = RawClient(gw.bootstrap, timeout=5).request(INCREMENTAL_ALTER_CONFIGS, 1, request)
    ((kind, name, code, message),) = results(answer)
    assert (kind, name, code) == (BROKER, "", POLICY_VIOLATION)
    assert message is not None and message.endswith("(rule broker-configs)")
    assert INCREMENTAL_ALTER_CONFIGS not in tap.api_keys()


def test_anonymous_client_cannot_change_client_configs(gw: GatewayThread) -> None:
    ((_, name, code, message),) = alter(
        gw.bootstrap, [(USER_CLIENT, "alice:", [("acks", SET, "0")])]
    )
    assert (name, code) == ("alice:", CLUSTER_AUTHORIZATION_FAILED)
    assert message is not None and "admin_principals" in message
    assert not stored(gw)
