"""The gateway's own topics (the Kafka state store's topic and the audit topic) changed by a
client through the admin APIs: a compacted state topic made ``cleanup.policy=delete`` with
``retention.ms=1``, or truncated by DeleteRecords, would lose every stored
``record.validation.policy`` and client config (a gateway restarting would load none). The
config change is refused by the gateway's own protected-topics rule (POLICY_VIOLATION), the
truncation as every partitioned API refuses an own topic (TOPIC_AUTHORIZATION_FAILED), and
neither reaches the broker. The same rule refuses the legacy AlterConfigs and
CreatePartitions, which the test broker lacks (the gateway then advertises neither).

Found closed (a regression guard, no fix with it); the other routes into these topics have
tests of their own: Produce by name and DeleteTopics (tests/inproc/test_gateway_topics.py),
Produce by id (test_produce_by_topic_id.py), Fetch, ListOffsets and DeleteRecords of the audit
topic (test_partitioned_routes.py), AddPartitionsToTxn (test_transaction_routes.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_END, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from tests.support import BrokerTap, GatewayThread, gateway_config, outcome

pytestmark = pytest.mark.adversarial

DELETE_RECORDS, INCREMENTAL_ALTER_CONFIGS = 21, 44
VIOLATION = KafkaError.POLICY_VIOLATION


@pytest.fixture
def gw(tap: BrokerTap) -> Iterator[tuple[GatewayThread, tuple[str, str]]]:
    suffix = uuid.uuid4().hex[:8]
    own = (f"_kpg_state_{suffix}", f"_kpg_audit_{suffix}")
    running = GatewayThread(
        gateway_config(
            tap.address, state={"store": "kafka", "topic": own[0]}, audit={"topic": own[1]}
        )
    ).start()
    tap.requests.clear()
    try:
        yield running, own
    finally:
        running.stop()


def _codes(futures: dict[object, object]) -> list[int | None]:
    codes: list[int | None] = []
    for future in futures.values():
        error = outcome(future)
        codes.append(None if error is None else error[0])
    return codes


def test_no_client_changes_the_configs_or_truncates_the_gateways_topics(
    gw: tuple[GatewayThread, tuple[str, str]], tap: BrokerTap
) -> None:
    gateway, own = gw
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    wipe = [
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET),
    ]
    for topic in own:
        resource = ConfigResource("topic", topic, incremental_configs=wipe)
        assert _codes(admin.incremental_alter_configs([resource])) == [VIOLATION], topic
        truncate = admin.delete_records([TopicPartition(topic, 0, OFFSET_END)])
        assert _codes(truncate) == [KafkaError.TOPIC_AUTHORIZATION_FAILED], topic
    assert not tap.api_keys() & {INCREMENTAL_ALTER_CONFIGS, DELETE_RECORDS}
