"""The config changes the policy chain is asked about: before, request -> altered, after."""

from __future__ import annotations

import pytest

from gateway.config_changes import (
    ConfigChange,
    InvalidAlteration,
    audited,
    looks_sensitive,
    sensitive_keys,
)
from gateway.config_changes import incremental as _incremental
from gateway.config_changes import legacy as _legacy
from protocol.alter_configs import APPEND, DELETE, SET, SUBTRACT, ConfigAlteration

pytestmark = pytest.mark.unit


def incremental(
    before: dict[str, str],
    operations: list[tuple[str, int, str | None]],
    defaults: dict[str, str] | None = None,
) -> ConfigChange | InvalidAlteration:
    """The tables below write an operation as (name, op, value), as it stands on the wire."""
    return _incremental(
        before, [ConfigAlteration(name=n, operation=o, value=v) for n, o, v in operations], defaults
    )


def legacy(
    before: dict[str, str], configs: list[tuple[str, str | None]]
) -> ConfigChange | InvalidAlteration:
    return _legacy(before, [ConfigAlteration(name=n, operation=SET, value=v) for n, v in configs])


BEFORE = {"cleanup.policy": "delete", "retention.ms": "1000"}


@pytest.mark.parametrize(
    ("operations", "defaults", "altered", "after"),
    [
        pytest.param(
            [("retention.ms", SET, "2000")],
            None,
            {"retention.ms": "2000"},
            {"cleanup.policy": "delete", "retention.ms": "2000"},
            id="set-replaces",
        ),
        pytest.param(
            [("min.insync.replicas", SET, "2")],
            None,
            {"min.insync.replicas": "2"},
            {**BEFORE, "min.insync.replicas": "2"},
            id="set-adds",
        ),
        pytest.param(
            [("retention.ms", DELETE, None)],
            None,
            {"retention.ms": None},
            {"cleanup.policy": "delete"},
            id="delete-removes",
        ),
        pytest.param(
            [("segment.ms", DELETE, "ignored")],
            None,
            {"segment.ms": None},
            BEFORE,
            id="delete-unset-key-changes-nothing",
        ),
        pytest.param(
            [("cleanup.policy", APPEND, "compact")],
            None,
            {"cleanup.policy": "delete,compact"},
            {"cleanup.policy": "delete,compact", "retention.ms": "1000"},
            id="append",
        ),
        pytest.param(
            [("cleanup.policy", APPEND, "compact,delete,compact")],
            None,
            {"cleanup.policy": "delete,compact"},
            {"cleanup.policy": "delete,compact", "retention.ms": "1000"},
            id="append-adds-only-missing-items",
        ),
        pytest.param(
            [("leader.replication.throttled.replicas", APPEND, "0:1")],
            None,
            {"leader.replication.throttled.replicas": "0:1"},
            {**BEFORE, "leader.replication.throttled.replicas": "0:1"},
            id="append-unset-no-default-starts-empty",
        ),
        pytest.param(
            [("compression.type", APPEND, "zstd")],
            {"compression.type": "producer"},
            {"compression.type": "producer,zstd"},
            {**BEFORE, "compression.type": "producer,zstd"},
            id="append-unset-starts-from-default",
        ),
        pytest.param(
            [("cleanup.policy", APPEND, "compact")],
            {"cleanup.policy": "compact"},
            {"cleanup.policy": "delete,compact"},
            {"cleanup.policy": "delete,compact", "retention.ms": "1000"},
            id="append-set-key-ignores-default",
        ),
        pytest.param(
            [("cleanup.policy", SUBTRACT, "delete")],
            None,
            {"cleanup.policy": ""},
            {"cleanup.policy": "", "retention.ms": "1000"},
            id="subtract-last-item-leaves-empty-value",
        ),
        pytest.param(
            [("cleanup.policy", SUBTRACT, "compact")],
            None,
            {"cleanup.policy": "delete"},
            BEFORE,
            id="subtract-absent-item",
        ),
        pytest.param(
            [("x.list", SUBTRACT, "b,,c")],
            {"x.list": "a,b,c"},
            {"x.list": "a"},
            {**BEFORE, "x.list": "a"},
            id="subtract-unset-starts-from-default",
        ),
        pytest.param(
            [
                ("retention.ms", DELETE, None),
                ("cleanup.policy", APPEND, "compact"),
                ("segment.bytes", SET, "1048576"),
            ],
            None,
            {"retention.ms": None, "cleanup.policy": "delete,compact", "segment.bytes": "1048576"},
            {"cleanup.policy": "delete,compact", "segment.bytes": "1048576"},
            id="several-keys",
        ),
        pytest.param([], None, {}, BEFORE, id="nothing"),
    ],
)
def test_incremental(
    operations: list[tuple[str, int, str | None]],
    defaults: dict[str, str] | None,
    altered: dict[str, str | None],
    after: dict[str, str],
) -> None:
    assert incremental(BEFORE, operations, defaults) == ConfigChange(altered=altered, after=after)


@pytest.mark.parametrize(
    ("operations", "message"),
    [
        pytest.param(
            [("retention.ms", SET, "1"), ("retention.ms", DELETE, None)],
            "Error due to duplicate config keys",
            id="duplicate-key",
        ),
        pytest.param(
            [("a", SET, None), ("b", DELETE, None), ("c", APPEND, None)],
            "Null value not supported for : a, c",
            id="null-value",
        ),
        pytest.param([("a", 7, "x")], "Unknown operations type 7", id="unknown-operation"),
    ],
)
def test_incremental_invalid(operations: list[tuple[str, int, str | None]], message: str) -> None:
    assert incremental(BEFORE, operations) == InvalidAlteration(message=message)


@pytest.mark.parametrize(
    ("before", "configs", "altered", "after"),
    [
        pytest.param(
            BEFORE,
            [("cleanup.policy", "delete"), ("retention.ms", "5")],
            {"cleanup.policy": "delete", "retention.ms": "5"},
            {"cleanup.policy": "delete", "retention.ms": "5"},
            id="full-set-every-key-sent-is-altered",
        ),
        pytest.param(
            BEFORE,
            [("retention.ms", "5"), ("segment.ms", "10")],
            {"retention.ms": "5", "segment.ms": "10", "cleanup.policy": None},
            {"retention.ms": "5", "segment.ms": "10"},
            id="implicit-delete",
        ),
        pytest.param(
            BEFORE,
            [],
            {"cleanup.policy": None, "retention.ms": None},
            {},
            id="empty-set-deletes-everything",
        ),
        pytest.param({}, [("a", "1")], {"a": "1"}, {"a": "1"}, id="nothing-before"),
    ],
)
def test_legacy(
    before: dict[str, str],
    configs: list[tuple[str, str | None]],
    altered: dict[str, str | None],
    after: dict[str, str],
) -> None:
    assert legacy(before, configs) == ConfigChange(altered=altered, after=after)


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        pytest.param(
            [("a", "1"), ("a", "2")], "Error due to duplicate config keys", id="duplicate-key"
        ),
        pytest.param(
            [("a", None), ("b", "1")], "Null value not supported for : a", id="null-value"
        ),
    ],
)
def test_legacy_invalid(configs: list[tuple[str, str | None]], message: str) -> None:
    assert legacy(BEFORE, configs) == InvalidAlteration(message=message)


def test_before_is_not_modified() -> None:
    before = dict(BEFORE)
    incremental(before, [("retention.ms", DELETE, None), ("cleanup.policy", APPEND, "compact")])
    legacy(before, [])
    assert before == BEFORE


# --- what the audit event records -------------------------------------------------------------


def test_the_audit_record_has_each_altered_key_before_and_after_and_no_secret() -> None:
    before = {"retention.ms": "1000", "cleanup.policy": "delete", "ssl.key.password": "x"}
    change = legacy(
        before, [("retention.ms", "2000"), ("max.message.bytes", "5"), ("ssl.key.password", "y")]
    )
    assert isinstance(change, ConfigChange)
    secret = sensitive_keys([("ssl.key.password", True, 9), ("retention.ms", False, 5)])

    records = audited(change, before, lambda name: name in secret)

    assert [(r.name, r.before, r.after, r.sensitive) for r in records] == [
        ("retention.ms", "1000", "2000", False),
        ("max.message.bytes", None, "5", False),
        ("ssl.key.password", None, None, True),
        ("cleanup.policy", "delete", None, False),  # the legacy API's implicit delete
    ]


@pytest.mark.parametrize(
    ("described", "expected"),
    [
        ([("a", True, 2)], {"a"}),  # flagged
        ([("b", False, 9)], {"b"}),  # PASSWORD type
        ([("c", False, 2)], set()),
    ],
)
def test_sensitive_keys_as_kafka_marks_them(
    described: list[tuple[str, bool, int]], expected: set[str]
) -> None:
    assert sensitive_keys(described) == expected


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("listener.name.internal.ssl.keystore.password", True),
        ("listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config", True),
        ("password.encoder.secret", True),
        ("listener.name.x.ssl.keystore.key", True),
        # a plug-in's own broker config, named in capitals: a secret all the same
        ("custom.plugin.API.PASSWORD", True),
        # Kafka 4.1's OAuth client assertion key (KIP-1139), of type PASSWORD
        ("listener.name.x.oauthbearer.sasl.oauthbearer.assertion.private.key.passphrase", True),
        ("log.retention.ms", False),
        ("sasl.enabled.mechanisms", False),
    ],
)
def test_undescribed_keys_named_like_secrets_are_sensitive(name: str, secret: bool) -> None:
    assert looks_sensitive(name) is secret


@pytest.mark.parametrize(
    ("inherited", "after"),
    [({"cleanup.policy"}, "delete,compact"), (set(), "compact")],
    ids=["inherited-from-a-broker-config", "set-on-the-topic"],
)
def test_append_to_an_inherited_key_starts_from_its_default(
    inherited: set[str], after: str
) -> None:
    """A topic's cleanup.policy=compact that comes from the brokers' log.cleanup.policy is in
    before, but Kafka's APPEND starts from the config's own default (delete)."""
    change = _incremental(
        {"cleanup.policy": "compact"},
        [ConfigAlteration(name="cleanup.policy", operation=APPEND, value="compact")],
        {"cleanup.policy": "delete"},
        inherited,
    )
    assert isinstance(change, ConfigChange)
    assert change.after == {"cleanup.policy": after}
