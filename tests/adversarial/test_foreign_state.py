"""State the gateway did not write: a SQLite state file holding a row another program, or
another version of the gateway, wrote in a form this one does not read (a BLOB key, as a
driver binding bytes writes it). Served as it was, the row's topic had no
record.validation.policy and its records went to the broker unvalidated; the gateway now
refuses to judge on such a state (every Produce REQUEST_TIMED_OUT) until the row is gone.
The Kafka store's counterpart is in tests/inproc/test_state_topic.py."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from gateway.config import HostPort
from gateway.record_validation import STATE_NAMESPACE
from gateway.state import KafkaTopicStore
from tests.adversarial.test_shared_state_routes import POLICY, produce_error
from tests.support import GatewayThread, RawClient, gateway_config, records_at, unique_name

pytestmark = pytest.mark.adversarial


def test_a_policy_row_the_gateway_cannot_read_is_not_taken_as_none(
    broker: HostPort, tmp_path: Path
) -> None:
    path = tmp_path / "state.db"
    topic = unique_name("foreign")
    admin = AdminClient({"bootstrap.servers": str(broker)})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    gw = GatewayThread(gateway_config(broker, state={"path": str(path)})).start()
    client = RawClient(gw.bootstrap, timeout=30)
    try:
        with closing(sqlite3.connect(path)) as conn:
            conn.executemany(
                "INSERT INTO gateway_state VALUES (?, ?, ?, 0)",
                [
                    (STATE_NAMESPACE, "other-topic", POLICY),
                    (STATE_NAMESPACE, topic.encode(), POLICY),
                ],
            )
            conn.commit()
        assert produce_error(client, topic) == ErrorCode.request_timed_out
        with closing(sqlite3.connect(path)) as conn:
            conn.execute("UPDATE gateway_state SET key = CAST(key AS TEXT)")
            conn.commit()
        assert produce_error(client, topic) == ErrorCode.invalid_record
    finally:
        client.close()
        gw.stop()
    assert records_at(broker, topic) == 0


def test_a_move_to_the_kafka_state_store_keeps_the_policies(
    broker: HostPort, tmp_path: Path
) -> None:
    """A gateway moved from ``state.store: sqlite`` to ``kafka`` started on an empty state
    topic while the file at ``state.path`` held every topic's record.validation.policy, and
    validated nothing: it now carries the file over once, and the policy holds."""
    path = tmp_path / "state.db"
    topic = unique_name("moved")
    on_sqlite = GatewayThread(gateway_config(broker, state={"path": str(path)})).start()
    try:
        admin = AdminClient({"bootstrap.servers": on_sqlite.bootstrap})
        created = NewTopic(topic, 1, 1, config={"record.validation.policy": POLICY})
        admin.create_topics([created])[topic].result(15)
    finally:
        on_sqlite.stop()
    state = {"store": "kafka", "topic": unique_name("kpg-state"), "path": str(path)}
    on_kafka = GatewayThread(gateway_config(broker, state=state)).start()
    client = RawClient(on_kafka.bootstrap, timeout=30)
    try:
        assert produce_error(client, topic) == ErrorCode.invalid_record
    finally:
        client.close()
        on_kafka.stop()


def _file_with(path: Path, rows: dict[str, str]) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS gateway_state (namespace TEXT NOT NULL, key TEXT NOT "
            "NULL, value TEXT NOT NULL, updated_at REAL NOT NULL, PRIMARY KEY (namespace, key)) "
            "WITHOUT ROWID"
        )
        conn.executemany(
            "INSERT OR REPLACE INTO gateway_state VALUES (?, ?, ?, 0)",
            [(STATE_NAMESPACE, topic, value) for topic, value in rows.items()],
        )
        conn.commit()
    path.chmod(0o600)


def test_a_file_is_carried_over_once_and_a_differing_entry_stops_the_start(
    broker: HostPort, tmp_path: Path
) -> None:
    """Carried over once per host and file: an entry added to the file later is not (the
    topic has been the state since, and later changes through it must not be undone); a
    file whose entry the topic holds with another value stops the start, naming it."""
    path = tmp_path / "state.db"
    first, later = unique_name("first"), unique_name("later")
    _file_with(path, {first: POLICY})
    state = {"store": "kafka", "topic": unique_name("kpg-state"), "path": str(path)}
    gw = GatewayThread(gateway_config(broker, state=state)).start()
    try:
        assert gw.gateway.state.get(STATE_NAMESPACE, first) == POLICY
    finally:
        gw.stop()
    _file_with(path, {later: POLICY})
    gw = GatewayThread(gateway_config(broker, state=state)).start()
    try:
        assert gw.gateway.state.get(STATE_NAMESPACE, later) is None
        assert gw.gateway.state.get(STATE_NAMESPACE, first) == POLICY
    finally:
        gw.stop()

    other = tmp_path / "other.db"
    _file_with(other, {first: "key-required"})
    refused = GatewayThread(gateway_config(broker, state={**state, "path": str(other)}))
    try:
        with pytest.raises(Exception, match=rf"{STATE_NAMESPACE} '{first}'"):
            refused.start()
        # the refused start left nothing connected to the broker (its state store closed)
        store = refused.gateway.state
        assert isinstance(store, KafkaTopicStore)
        assert (store._consumer, store._producer) == (None, None)
    finally:
        refused.stop()
