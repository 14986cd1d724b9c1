"""A reload landing while a request is being judged: the request is judged, and audited,
entirely by the configuration it started with; the next one by the new configuration. The
gateway is the real one in front of the real broker; the request is held inside a plug-in
until the reload has been applied."""

from __future__ import annotations

import gc
import json
import sys
import weakref
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.config import HostPort
from tests.support import GatewayThread, gateway_config, outcome, unique_name, wait_for

pytestmark = pytest.mark.inproc

PLUGINS = str(Path(__file__).resolve().parents[1] / "plugins")


def test_a_request_under_judgement_when_a_reload_lands_keeps_the_old_configuration(
    broker: HostPort, tmp_path: Path
) -> None:
    shared: dict[str, Any] = {
        "state": {"path": str(tmp_path / "state.db")},
        "audit": {"spool_dir": str(tmp_path / "audit"), "segment_max_age_s": 0.2},
    }
    old = gateway_config(
        broker,
        policies={
            "create.topic.policy.class.name": "kafka_test_policies.HangingCreateTopicPolicy",
            "create.topic.policy.class.path": PLUGINS,
            "policy.timeout.ms": 30_000,
            "rules": [{"name": "partition-count", "type": "partitions", "max": 10}],
        },
        **shared,
    )
    new = gateway_config(
        broker,
        policies={"rules": [{"name": "partition-count", "type": "partitions", "max": 2}]},
        **shared,
    )
    assert old.policy_version != new.policy_version
    gw = GatewayThread(old).start()
    # The class the gateway loaded from class.path (a module of its own, not tests.plugins.*).
    hanging = sys.modules["kafka_test_policies"].HangingCreateTopicPolicy
    hanging.release.clear()
    hanging.entered.clear()
    held, wide = unique_name("hang"), unique_name("wide")
    try:
        admin = AdminClient({"bootstrap.servers": gw.bootstrap})
        pending = admin.create_topics([NewTopic(held, 5, 1)])[held]
        assert hanging.entered.wait(30)

        reloaded = gw.run(gw.gateway.reload(lambda: new))
        assert reloaded.applied and reloaded.policy_version == new.policy_version
        # The next request (on a connection of its own: the held one is read no further
        # until its request is answered): the new rule, and no plug-in to wait for.
        other = AdminClient({"bootstrap.servers": gw.bootstrap})
        denied = outcome(other.create_topics([NewTopic(wide, 5, 1)])[wide])
        assert denied is not None and "partition-count" in denied[1]

        hanging.release.set()
        assert outcome(pending) is None, "judged by the rules it started with (max 10)"
    finally:
        hanging.release.set()
        gw.stop()
    events = [
        json.loads(line)
        for segment in sorted((tmp_path / "audit").glob("events-*.jsonl"))
        for line in segment.read_text().splitlines()
    ]
    by_topic = {e["resource_name"]: e for e in events if e["api"] == "CreateTopics"}
    assert (by_topic[held]["verdict"], by_topic[held]["policy_version"]) == (
        "allowed",
        old.policy_version,
    )
    assert (by_topic[wide]["verdict"], by_topic[wide]["policy_version"]) == (
        "denied",
        new.policy_version,
    )
    (reload,) = [e for e in events if e["event_kind"] == "lifecycle" and e["action"] == "reload"]
    assert f"{old.policy_version} -> {new.policy_version}" in reload["message"]


def test_a_replaced_configuration_is_let_go_once_closed(broker: HostPort) -> None:
    """Every replaced generation (its policy chain, plug-ins, handler table and their caches)
    stayed referenced until shutdown, some 34 KB a reload: a gateway reloaded by a job every
    minute held 1.5 GB after a month (300 reloads, measured: 10.2 MB kept, 0.3 MB now)."""

    def config(limit: int) -> Any:
        rules = [{"name": "partition-count", "type": "partitions", "max": limit}]
        return gateway_config(broker, policies={"rules": rules})

    gw = GatewayThread(config(2)).start()
    try:
        first = weakref.ref(gw.gateway.policies)  # the first configuration's policy chain
        for limit in range(3, 8):
            new = config(limit)
            assert gw.run(gw.gateway.reload(lambda new=new: new)).applied
        assert wait_for(lambda: gc.collect() >= 0 and first() is None), "still referenced"
        assert not gw.gateway._replaced
    finally:
        gw.stop()
