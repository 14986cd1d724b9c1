"""Loading the ``policies:`` section: Kafka's keys, class.path, rules, and errors that say where."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from policies import strict_yaml
from policies.api import (
    ConfigResource,
    ConfigResourceType,
    CreateTopicRequestMetadata,
    TopicState,
)
from policies.chain import PolicyChain
from policies.loader import (
    PolicyConfigError,
    flatten_configs,
    load_policy_chain,
    parse_policy_config,
)
from policies.rules import (
    BrokerConfigsRule,
    ConfigRule,
    ForbiddenConfigsRule,
    Mode,
    PartitionsRule,
    ProtectedTopicsRule,
    ReplicationFactorRule,
    RequiredConfigsRule,
    TopicNameRule,
)

pytestmark = pytest.mark.unit

SOURCE = "/etc/kpg/gateway.yaml"
EXAMPLE = Path(__file__).resolve().parents[2] / "policies" / "example_rules.yaml"

PLUGIN_MODULE = """
from policies.api import AlterConfigPolicy, CreateTopicPolicy, PolicyViolation

CONFIGURED = []
CLOSED = []


class MaxPartitions(CreateTopicPolicy):
    def configure(self, configs):
        self.limit = int(configs["acme.max.partitions"])
        CONFIGURED.append(dict(configs))

    def validate(self, request_metadata):
        if request_metadata.num_partitions > self.limit:
            raise PolicyViolation(f"at most {self.limit} partitions")

    def close(self):
        CLOSED.append(self)


class Refusing(AlterConfigPolicy):
    def configure(self, configs):
        raise RuntimeError("no registry configured")

    def validate(self, request_metadata):
        pass


class Exploding(CreateTopicPolicy):
    def __init__(self):
        raise OSError("cannot start")

    def validate(self, request_metadata):
        pass


class NotAPolicy:
    pass
"""


def request(partitions: int) -> CreateTopicRequestMetadata:
    return CreateTopicRequestMetadata(
        topic="orders",
        num_partitions=partitions,
        replication_factor=3,
        replicas_assignments=None,
        configs={},
    )


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A directory holding a plug-in module with a name no other test uses."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # undo the loader's sys.path insert
    module = f"acme_policies_{uuid.uuid4().hex}"
    (tmp_path / f"{module}.py").write_text(PLUGIN_MODULE)
    return tmp_path, module


@pytest.fixture
def chains() -> Iterator[list[PolicyChain]]:
    built: list[PolicyChain] = []
    yield built
    for chain in built:
        chain.close()


def load(section: Mapping[str, object], chains: list[PolicyChain]) -> PolicyChain:
    chain = load_policy_chain(section, source=SOURCE)
    chains.append(chain)
    return chain


# --- plug-ins -------------------------------------------------------------------------------


def test_a_plugin_loads_from_its_class_path_and_is_configured_with_the_flat_section(
    plugin_dir: tuple[Path, str], chains: list[PolicyChain]
) -> None:
    directory, module = plugin_dir
    section = {
        "create.topic.policy.class.name": f"{module}.MaxPartitions",
        "create.topic.policy.class.path": str(directory),
        "acme.max.partitions": 12,
        "acme.enabled": True,
    }
    chain = load(section, chains)
    assert chain.check_create_topic(request(12), principal=None).allowed
    denied = chain.check_create_topic(request(13), principal=None)
    assert denied.message == "at most 12 partitions"
    assert [v.policy for v in denied.verdicts] == [f"{module}.MaxPartitions"]
    [configured] = sys.modules[module].CONFIGURED
    assert configured == {
        "create.topic.policy.class.name": f"{module}.MaxPartitions",
        "create.topic.policy.class.path": str(directory),
        "acme.max.partitions": "12",
        "acme.enabled": "true",
    }


def test_a_plugin_loads_by_dotted_name_from_the_import_path(
    plugin_dir: tuple[Path, str], monkeypatch: pytest.MonkeyPatch, chains: list[PolicyChain]
) -> None:
    directory, module = plugin_dir
    monkeypatch.syspath_prepend(str(directory))
    section = {
        "create.topic.policy.class.name": f"{module}.MaxPartitions",
        "create.topic.policy.mode": "dry-run",
        "acme.max.partitions": 1,
    }
    chain = load(section, chains)
    decision = chain.check_create_topic(request(2), principal=None)
    assert decision.allowed
    assert [v.outcome for v in decision.verdicts] == ["would_deny"]
    assert chain.plugins[0].mode is Mode.DRY_RUN


@pytest.mark.parametrize(
    ("class_name", "key", "problem"),
    [
        ("{module}.Missing", "create.topic.policy.class.name", "has no class Missing"),
        ("{module}.NotAPolicy", "create.topic.policy.class.name", "is not a subclass of"),
        ("{module}.Refusing", "create.topic.policy.class.name", "is not a subclass of"),
        ("{module}.Exploding", "create.topic.policy.class.name", "OSError: cannot start"),
        ("no_such_module_xyz.Policy", "create.topic.policy.class.name", "cannot import"),
    ],
)
def test_a_plugin_that_cannot_be_loaded_names_its_key(
    plugin_dir: tuple[Path, str], class_name: str, key: str, problem: str
) -> None:
    directory, module = plugin_dir
    section = {
        "create.topic.policy.class.name": class_name.format(module=module),
        "create.topic.policy.class.path": str(directory),
    }
    with pytest.raises(PolicyConfigError) as caught:
        load_policy_chain(section, source=SOURCE)
    assert str(caught.value).startswith(f"{SOURCE}: policies.{key}: ")
    assert problem in str(caught.value)


def test_a_plugin_whose_configure_fails_stops_start_up_and_earlier_ones_are_closed(
    plugin_dir: tuple[Path, str],
) -> None:
    directory, module = plugin_dir
    section = {
        "create.topic.policy.class.name": f"{module}.MaxPartitions",
        "create.topic.policy.class.path": str(directory),
        "alter.config.policy.class.name": f"{module}.Refusing",
        "acme.max.partitions": "3",
    }
    with pytest.raises(PolicyConfigError, match="no registry configured") as caught:
        load_policy_chain(section, source=SOURCE)
    assert f"policies.alter.config.policy.class.name: {module}.Refusing.configure()" in str(
        caught.value
    )
    assert len(sys.modules[module].CLOSED) == 1


def test_a_class_path_that_is_not_a_directory_is_refused(tmp_path: Path) -> None:
    section = {
        "topic.action.policy.class.name": "acme.Policy",
        "topic.action.policy.class.path": str(tmp_path / "missing"),
    }
    with pytest.raises(PolicyConfigError, match=r"policies\.topic\.action\.policy\.class\.path"):
        load_policy_chain(section, source=SOURCE)


def test_a_module_already_imported_from_elsewhere_is_not_taken_for_the_class_path_one(
    plugin_dir: tuple[Path, str],
    tmp_path_factory: pytest.TempPathFactory,
    chains: list[PolicyChain],
) -> None:
    first, module = plugin_dir
    second = tmp_path_factory.mktemp("other")
    (second / f"{module}.py").write_text(PLUGIN_MODULE)
    base = {"create.topic.policy.class.name": f"{module}.MaxPartitions", "acme.max.partitions": 1}
    load({**base, "create.topic.policy.class.path": str(first)}, chains)
    with pytest.raises(PolicyConfigError, match="is already imported from"):
        load_policy_chain({**base, "create.topic.policy.class.path": str(second)}, source=SOURCE)


@pytest.mark.parametrize(
    ("old", "reason"),
    [
        ("create.topic.policy", "it covers topic creation"),
        ("alter.config.policy", "for other resources use alter.config.v2.policy"),
    ],
)
def test_an_old_and_the_new_policy_together_is_a_start_up_error(old: str, reason: str) -> None:
    section = {
        f"{old}.class.name": "acme.Old",
        "topic.action.policy.class.name": "acme.New",
    }
    with pytest.raises(PolicyConfigError) as caught:
        parse_policy_config(section, source=SOURCE)
    message = str(caught.value)
    assert message.startswith(f"{SOURCE}: policies.{old}.class.name: ")
    assert "cannot be used together with topic.action.policy.class.name" in message
    assert reason in message and "KIP-201" in message


def test_the_v2_policy_and_the_topic_action_policy_may_be_used_together() -> None:
    config = parse_policy_config(
        {
            "alter.config.v2.policy.class.name": "acme.V2",
            "topic.action.policy.class.name": "acme.New",
            "topic.action.policy.mode": "dry-run",
        },
        source=SOURCE,
    )
    assert [(p.prefix, p.mode) for p in config.plugins] == [
        ("alter.config.v2.policy", Mode.ENFORCE),
        ("topic.action.policy", Mode.DRY_RUN),
    ]


# --- errors name the key and the file -------------------------------------------------------

PARTITIONS = {"name": "p", "type": "partitions", "min": 1}
CONFIG = {"name": "c", "type": "config", "config": "retention.ms"}
PROTECTED = {"name": "x", "type": "protected.topics", "topics": ["a"]}

BAD_SECTIONS = [
    ({"create.topic.policy.class.name": "NoModule"}, "create.topic.policy.class.name"),
    ({"create.topic.policy.class.name": 42}, "create.topic.policy.class.name"),
    ({"create.topic.policy.mode": "dry-run"}, "create.topic.policy.mode"),
    ({"alter.config.policy.class.path": "/opt"}, "alter.config.policy.class.path"),
    (
        {"alter.config.v2.policy.class.name": "a.B", "alter.config.v2.policy.mode": "shadow"},
        "alter.config.v2.policy.mode",
    ),
    ({"topic.action.policy.clas.name": "a.B"}, "topic.action.policy.clas.name"),
    ({"policy.timeout.ms": 0}, "policy.timeout.ms"),
    ({"policy.timeout.ms": "5s"}, "policy.timeout.ms"),
    ({"policy.threads": True}, "policy.threads"),
    ({"policy.timout.ms": 100}, "policy.timout.ms"),
    ({"rules": {"name": "p"}}, "rules"),
    ({"rules": ["partitions"]}, "rules[0]"),
    ({"rules": [{"type": "partitions", "min": 1}]}, "rules[0].name"),
    ({"rules": [PARTITIONS, PARTITIONS]}, "rules[1].name"),
    ({"rules": [{"name": "p", "type": "partition", "min": 1}]}, "rules[0].type"),
    ({"rules": [{**PARTITIONS, "maximum": 3}]}, "rules[0].maximum"),
    ({"rules": [{**PARTITIONS, "mode": "warn"}]}, "rules[0].mode"),
    ({"rules": [{"name": "p", "type": "partitions"}]}, "rules[0]"),
    ({"rules": [{**PARTITIONS, "min": "3"}]}, "rules[0].min"),
    ({"rules": [{**PARTITIONS, "max": 2.5}]}, "rules[0].max"),
    ({"rules": [{**PARTITIONS, "min": 5, "max": 4}]}, "rules[0].min"),
    ({"rules": [{"name": "r", "type": "replication.factor", "max": True}]}, "rules[0].max"),
    ({"rules": [{"name": "c", "type": "config", "min": 1}]}, "rules[0].config"),
    ({"rules": [CONFIG]}, "rules[0]"),
    (
        {"rules": [{**CONFIG, "min": 1, "allowed": ["a"]}]},
        "rules[0]",
    ),
    ({"rules": [{**CONFIG, "allowed": "a"}]}, "rules[0].allowed"),
    ({"rules": [{**CONFIG, "allowed": []}]}, "rules[0].allowed"),
    ({"rules": [{"name": "q", "type": "required.configs", "configs": []}]}, "rules[0].configs"),
    ({"rules": [{"name": "f", "type": "forbidden.configs", "configs": [1]}]}, "rules[0].configs"),
    ({"rules": [{"name": "n", "type": "topic.name", "pattern": "(unclosed"}]}, "rules[0].pattern"),
    ({"rules": [{"name": "n", "type": "topic.name"}]}, "rules[0].pattern"),
    # lookarounds and backreferences need a backtracking matcher (see below)
    (
        {"rules": [{"name": "n", "type": "topic.name", "pattern": "(?!tmp)[a-z]+"}]},
        "rules[0].pattern",
    ),
    ({"rules": [{**PROTECTED, "topics": ["(a)\\1"]}]}, "rules[0].topics"),
    ({"rules": [{"name": "x", "type": "protected.topics"}]}, "rules[0].topics"),
    (
        {"rules": [{**PROTECTED, "allowed.principals": ["admin"]}]},
        "rules[0].allowed.principals",
    ),
    (
        {"rules": [{"name": "b", "type": "broker.configs", "allowed.principals": ["root"]}]},
        "rules[0].allowed.principals",
    ),
    (
        {"rules": [{"name": "b", "type": "broker.configs", "allowed.principals": "User:a"}]},
        "rules[0].allowed.principals",
    ),
    ({"rules": [{"name": "b", "type": "broker.configs", "topics": ["a"]}]}, "rules[0].topics"),
]


@pytest.mark.parametrize(("section", "key"), BAD_SECTIONS)
def test_a_bad_section_names_the_file_and_the_key(section: Mapping[str, object], key: str) -> None:
    with pytest.raises(PolicyConfigError) as caught:
        parse_policy_config(section, source=SOURCE)
    assert str(caught.value).startswith(f"{SOURCE}: policies.{key}: ")


def test_a_backtracking_pattern_is_refused_saying_why() -> None:
    section = {"rules": [{"name": "n", "type": "topic.name", "pattern": "(?!tmp)[a-z]+"}]}
    with pytest.raises(PolicyConfigError, match="RE2, in time linear in the name"):
        parse_policy_config(section, source=SOURCE)


# --- rules and settings ---------------------------------------------------------------------


def test_every_kind_of_rule_parses_with_its_mode() -> None:
    config = parse_policy_config(
        {
            "policy.timeout.ms": 250,
            "policy.threads": 2,
            "rules": [
                {"name": "a", "type": "partitions", "min": 3, "max": 10},
                {"name": "b", "type": "replication.factor", "min": 3, "mode": "dry-run"},
                {"name": "c", "type": "config", "config": "retention.ms", "max": 1.5e9},
                {
                    "name": "d",
                    "type": "config",
                    "config": "unclean.leader.election.enable",
                    "allowed": [False],
                },
                {"name": "e", "type": "required.configs", "configs": ["retention.ms"]},
                {"name": "f", "type": "forbidden.configs", "configs": ["preallocate"]},
                {"name": "g", "type": "topic.name", "pattern": "[a-z.]+"},
                {"name": "h", "type": "protected.topics", "topics": ["__.*"]},
                {"name": "i", "type": "broker.configs", "allowed.principals": ["User:root"]},
                {"name": "j", "type": "broker.configs", "mode": "dry-run"},
            ],
        },
        source=SOURCE,
    )
    assert (config.timeout_s, config.threads) == (0.25, 2)
    kinds = [(type(r), r.name, r.mode) for r in config.rules]
    assert kinds == [
        (PartitionsRule, "a", Mode.ENFORCE),
        (ReplicationFactorRule, "b", Mode.DRY_RUN),
        (ConfigRule, "c", Mode.ENFORCE),
        (ConfigRule, "d", Mode.ENFORCE),
        (RequiredConfigsRule, "e", Mode.ENFORCE),
        (ForbiddenConfigsRule, "f", Mode.ENFORCE),
        (TopicNameRule, "g", Mode.ENFORCE),
        (ProtectedTopicsRule, "h", Mode.ENFORCE),
        (BrokerConfigsRule, "i", Mode.ENFORCE),
        (BrokerConfigsRule, "j", Mode.DRY_RUN),
    ]
    allowed_rule = config.rules[3]
    assert isinstance(allowed_rule, ConfigRule)
    assert allowed_rule.allowed == frozenset({"false"})
    protected = config.rules[7]
    assert isinstance(protected, ProtectedTopicsRule)
    assert protected.allowed_principals == frozenset()
    broker_configs = config.rules[8:]
    assert [r.allowed_principals for r in broker_configs if isinstance(r, BrokerConfigsRule)] == [
        frozenset({"User:root"}),
        frozenset(),
    ]


def test_defaults_when_the_section_is_empty(chains: list[PolicyChain]) -> None:
    config = parse_policy_config({}, source=SOURCE)
    assert (config.plugins, config.rules, config.timeout_s, config.threads) == ((), (), 5.0, 8)
    assert load({}, chains).check_create_topic(request(1), principal=None).allowed


def test_flatten_configs_gives_kafka_style_strings() -> None:
    flat = flatten_configs(
        {
            "acme.limit": 5,
            "acme.on": False,
            "acme.unset": None,
            "acme": {"registry": {"url": "http://r:8081"}},
            "acme.topics": ["a", "b"],
            "rules": [{"name": "p", "type": "partitions", "min": 1}],
        }
    )
    assert flat == {
        "acme.limit": "5",
        "acme.on": "false",
        "acme.unset": "",
        "acme.registry.url": "http://r:8081",
        "acme.topics": "a,b",
        "rules.0.name": "p",
        "rules.0.type": "partitions",
        "rules.0.min": "1",
    }


def test_the_example_file_loads_and_judges_as_its_comments_say(chains: list[PolicyChain]) -> None:
    section = strict_yaml.load(EXAMPLE.read_text(), name=str(EXAMPLE))["policies"]
    chain = load(section, chains)
    assert len(chain.rules) == 10

    def create(topic: str, partitions: int = 6, rf: int = 3, **configs: str) -> list[str]:
        configs = {"retention.ms": "86400000", "min.insync.replicas": "2", **configs}
        metadata = CreateTopicRequestMetadata(
            topic=topic,
            num_partitions=partitions,
            replication_factor=rf,
            replicas_assignments=None,
            configs={k.replace("_", "."): v for k, v in configs.items()},
        )
        decision = chain.check_create_topic(metadata, principal="User:bob")
        return [v.policy for v in decision.verdicts if v.outcome != "allowed"]

    assert create("payments.orders.v1") == []
    assert create("payments.orders.v1", cleanup_policy="compact,delete") == []
    assert create("Orders") == ["topic-naming"]
    assert create("payments.orders.v1", partitions=1, rf=1) == [
        "partition-count",
        "replication-factor",
    ]
    assert create("payments.orders.v1", retention_ms="-1") == ["retention-time"]
    assert create("payments.orders.v1", unclean_leader_election_enable="true") == [
        "no-unclean-election"
    ]
    offsets = TopicState(
        num_partitions=50, replication_factor=3, replicas_assignments=None, configs={}
    )
    for principal, expected in (("User:bob", False), ("User:platform-admin", True), (None, False)):
        decision = chain.check_delete_topic(
            "__consumer_offsets", pre_state=offsets, principal=principal
        )
        assert decision.allowed is expected
    assert create("__evil") == ["topic-naming", "platform-topics"]

    def alter_cluster_default(principal: str | None, **configs: str) -> list[str]:
        altered = {k.replace("_", "."): v for k, v in configs.items()}
        decision = chain.check_alter_config(
            ConfigResource(type=ConfigResourceType.BROKER, name=""),
            altered=altered,
            before={},
            after=altered,
            principal=principal,
        )
        return [v.policy for v in decision.verdicts if v.outcome != "allowed"]

    admin = "User:platform-admin"
    assert alter_cluster_default(admin, log_retention_hours="24") == []
    assert alter_cluster_default(admin, log_retention_hours="0") == ["retention-time"]
    assert alter_cluster_default(admin, log_cleanup_policy="archive") == ["cleanup-policy"]
    assert alter_cluster_default(admin, min_insync_replicas="1") == ["min-insync-replicas"]
    assert alter_cluster_default(admin, unclean_leader_election_enable="true") == [
        "no-unclean-election"
    ]
    assert alter_cluster_default(None, log_retention_hours="24") == ["broker-configs"]
    assert alter_cluster_default("User:bob", log_retention_ms="1") == [
        "retention-time",
        "broker-configs",
    ]


@pytest.mark.parametrize(
    "key", ["create.topics.policy.class.name", "alter.configs.policy.class.name"]
)
def test_a_misspelt_plugin_kind_is_refused_not_ignored(key: str) -> None:
    """Other keys are the plug-ins' configs, passed on as Kafka passes its own; a class
    under a kind the gateway does not know would never run, a policy silently off."""
    with pytest.raises(PolicyConfigError, match=rf"policies\.{key}: no such policy kind"):
        parse_policy_config({key: "acme.Policy"}, source="gw.yaml")
    # the right spellings and the record plug-in's key still pass this check
    parse_policy_config({"record.validation.policy.class.name": "x.Y"}, source="gw.yaml")
