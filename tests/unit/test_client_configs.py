"""Dynamic client configs per user and client-id (seed 003): codes, validators, names, the
store layout, describe and incremental alter, the wire codecs and ``kpg configs``' parsing
and output. No network: the CLI's output functions get answers built by the gateway's own
encoder (``protocol.describe_configs.answer``)."""

from __future__ import annotations

import argparse

import pytest

from gateway import client_configs as cc
from gateway import configs_cli as cli
from gateway.client_configs import ClientConfigCodes
from protocol import alter_configs as ac
from protocol import client_configs as wire
from protocol import describe_configs as dc
from protocol.alter_configs import ConfigAlteration
from protocol.framing import parse_request_header
from protocol.results import OK, ItemError

pytestmark = pytest.mark.unit

CODES = ClientConfigCodes()
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

# The seed's example: alice's default acks=-1, session.timeout.ms=11000 (producer_byte_rate is
# a quota and never stored here), and her client-id override acks=0, heartbeat.interval.ms=2000.
SEED_ITEMS = {
    "alice/<default>/acks": "-1",
    "alice/<default>/session.timeout.ms": "11000",
    "alice/clientid-override/acks": "0",
    "alice/clientid-override/heartbeat.interval.ms": "2000",
}


# --- codes ----------------------------------------------------------------------------------


def test_default_codes_are_clear_of_kafka() -> None:
    assert (CODES.client_type, CODES.user_client_type) == (120, 121)
    assert (CODES.dynamic_client_source, CODES.dynamic_default_client_source) == (120, 121)
    assert CODES.source_name(120) == "DYNAMIC_CLIENT_CONFIG"
    assert CODES.source_name(121) == "DYNAMIC_DEFAULT_CLIENT_CONFIG"
    assert CODES.source_name(1) == "DYNAMIC_TOPIC_CONFIG"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"client_type": 16}, "codes.client_type: 16 is Kafka's resource type CLIENT_METRICS"),
        ({"user_client_type": 32}, "codes.user_client_type: 32 is Kafka's resource type GROUP"),
        ({"client_type": 2}, "codes.client_type: 2 is Kafka's resource type TOPIC"),
        ({"client_type": 64}, "codes.client_type: 64 is reserved"),
        (
            {"dynamic_client_source": 7},
            "codes.dynamic_client_source: 7 is Kafka's config source DYNAMIC_CLIENT_METRICS",
        ),
        (
            {"dynamic_default_client_source": 8},
            "codes.dynamic_default_client_source: 8 is Kafka's config source DYNAMIC_GROUP",
        ),
        ({"user_client_type": 120}, "codes.user_client_type: 120 is already codes.client_type"),
        (
            {"dynamic_client_source": 121},
            "codes.dynamic_default_client_source: 121 is already codes.dynamic_client_source",
        ),
        ({"client_type": 128}, "codes.client_type: expected a resource type code from 1 to 127"),
        ({"client_type": 0}, "codes.client_type: expected a resource type code from 1 to 127"),
        ({"client_type": -8}, "codes.client_type: expected a resource type code from 1 to 127"),
        ({"client_type": "120"}, "codes.client_type: expected a resource type code"),
        ({"client_type": True}, "codes.client_type: expected a resource type code"),
        ({"client": 100}, "codes.client: unknown key"),
    ],
)
def test_codes_that_clash_are_refused_naming_the_key(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as caught:
        ClientConfigCodes.from_mapping(raw, key_prefix="codes.")
    assert str(caught.value).startswith(message)


def test_codes_from_mapping_keep_defaults_for_missing_keys() -> None:
    codes = ClientConfigCodes.from_mapping({"client_type": 100, "dynamic_client_source": 9})
    assert codes == ClientConfigCodes(
        client_type=100,
        user_client_type=121,
        dynamic_client_source=9,
        dynamic_default_client_source=121,
    )
    assert codes.resource_types == {100, 121}


def test_codes_constructed_directly_are_checked_too() -> None:
    with pytest.raises(ValueError, match="client_type: 16 is Kafka's resource type"):
        ClientConfigCodes(client_type=16)


# --- validators -----------------------------------------------------------------------------

_ACKS = "String must be one of: all, -1, 0, 1"
_SCHEMES = "String must be one of: none, gzip, snappy, lz4, zstd"
_INT = "Not a number of type INT"
_PAS = "partition.assignment.strategy"


def _bad(key: str, value: str, tail: str) -> tuple[str, str, str]:
    return key, value, f"Invalid value {value.strip()} for configuration {key}: {tail}"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        _bad("acks", "2", _ACKS),
        _bad("acks", "ALL", _ACKS),
        ("acks", "all", None),
        ("acks", "-1", None),
        ("acks", " 0 ", None),
        ("acks", "1", None),
        ("session.timeout.ms", "11000", None),
        _bad("session.timeout.ms", "abc", _INT),
        _bad("session.timeout.ms", "0", "Value must be at least 1"),
        _bad("session.timeout.ms", "2147483648", _INT),
        ("heartbeat.interval.ms", "2000", None),
        _bad("heartbeat.interval.ms", "1.5", _INT),
        ("linger.ms", "2147483648", None),
        _bad("linger.ms", "-1", "Value must be at least 0"),
        _bad("linger.ms", "9223372036854775808", "Not a number of type LONG"),
        ("batch.size", "0", None),
        _bad("batch.size", "16k", _INT),
        ("compression.type", "zstd", None),
        _bad("compression.type", "brotli", _SCHEMES),
        _bad("max.poll.records", "0", "Value must be at least 1"),
        (_PAS, "range, cooperative-sticky", None),
        (_PAS, "org.apache.kafka.clients.consumer.RangeAssignor", None),
        (
            _PAS,
            "range,com.evil.Assignor",
            f"Invalid value com.evil.Assignor for configuration {_PAS}",
        ),
        (_PAS, " , ", f"Invalid value  ,  for configuration {_PAS}: List must not be empty"),
        ("acks", None, "Null value not supported for : acks"),
        (
            "bootstrap.servers",
            "x:9092",
            "Unknown dynamic client config: bootstrap.servers (supported",
        ),
        ("enable.idempotence", "false", "Unknown dynamic client config: enable.idempotence"),
    ],
)
def test_validate(key: str, value: str | None, message: str | None) -> None:
    problem = cc.validate(key, value)
    if message is None:
        assert problem is None
    else:
        assert problem is not None and problem.startswith(message)


@pytest.mark.parametrize(
    "key",
    ["producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"],
)
def test_quota_keys_are_refused_pointing_at_alter_client_quotas(key: str) -> None:
    problem = cc.validate(key, "50000")
    assert problem is not None
    assert problem.startswith(f"{key} is a client quota")
    assert "AlterClientQuotas" in problem


def test_only_the_list_key_is_marked_as_a_list() -> None:
    assert [k for k, spec in cc.KEYS.items() if spec.is_list] == ["partition.assignment.strategy"]


# --- names ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("principal", "user"),
    [
        ("User:alice", "alice"),
        (None, "ANONYMOUS"),
        ("User:CN=alice,OU=eng,O=Acme", "CN=alice,OU=eng,O=Acme"),
        ("User:svc:team", "svc:team"),
    ],
)
def test_user_of_principal(principal: str | None, user: str) -> None:
    assert cc.user_of(principal) == user


@pytest.mark.parametrize(
    ("name", "user", "client_id"),
    [
        ("alice:app-1", "alice", "app-1"),
        ("alice:", "alice", ""),
        ("svc:team:app-1", "svc:team", "app-1"),
        ("CN=alice,O=Acme:app", "CN=alice,O=Acme", "app"),
    ],
)
def test_parse_user_client(name: str, user: str, client_id: str) -> None:
    entity = cc.parse_user_client(name)
    assert (entity.user, entity.client_id) == (user, client_id)
    assert entity.resource_name == name
    assert entity.is_default == (client_id == "")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("alice", "expected user:client-id"),
        (":app-1", "the user name is empty"),
        ("User:alice:app-1", "carries the user name, not the principal (alice:app-1"),
    ],
)
def test_malformed_user_client_names_are_refused(name: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        cc.parse_user_client(name)


def test_entity_of_client_puts_the_connection_user_in_front() -> None:
    client = cc.entity_of(CODES.client_type, "app:1", "User:alice", CODES)
    assert client == cc.ClientEntity(user="alice", client_id="app:1")
    anonymous = cc.entity_of(CODES.client_type, "app-1", None, CODES)
    assert anonymous == cc.ClientEntity(user="ANONYMOUS", client_id="app-1")
    admin = cc.entity_of(CODES.user_client_type, "bob:app-2", "User:admin", CODES)
    assert admin == cc.ClientEntity(user="bob", client_id="app-2")
    assert cc.entity_of(2, "alice:app-1", "User:alice", CODES) is None


# --- store layout ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "client_id", "key"),
    [
        ("alice", "app-1", "alice/app-1/acks"),
        ("alice", "", "alice/<default>/acks"),
        ("alice", "<default>", "alice/%3Cdefault%3E/acks"),
        ("svc/x:y", "a b", "svc%2Fx%3Ay/a%20b/acks"),
        ("CN=a,O=b", "c/d", "CN%3Da%2CO%3Db/c%2Fd/acks"),
    ],
)
def test_store_keys_round_trip(user: str, client_id: str, key: str) -> None:
    assert cc.store_key(user, client_id, "acks") == key
    assert cc.parse_store_key(key) == (user, client_id, "acks")


def test_entity_configs_do_not_mix_users_or_entries() -> None:
    items = {
        **SEED_ITEMS,
        "alice2/<default>/acks": "1",
        "alice/other/acks": "1",
    }
    assert cc.entity_configs(items, "alice", "") == {"acks": "-1", "session.timeout.ms": "11000"}
    assert cc.entity_configs(items, "alice", "clientid-override") == {
        "acks": "0",
        "heartbeat.interval.ms": "2000",
    }
    assert cc.entity_configs(items, "alice2", "") == {"acks": "1"}


# --- describe -------------------------------------------------------------------------------


def _synonym(name: str, value: str, source: int) -> dc.Synonym:
    return dc.Synonym(name=name, value=value, source=source)


def test_describe_merges_default_and_override_as_the_seed_shows() -> None:
    items = {**SEED_ITEMS, "alice/<default>/producer_byte_rate": "50000"}
    configs = cc.describe(items, "alice", "clientid-override", CODES, include_synonyms=True)
    shown = [(c.name, c.value, c.source, c.synonyms) for c in configs]
    assert shown == [
        ("acks", "0", 120, (_synonym("acks", "0", 120), _synonym("acks", "-1", 121))),
        (
            "heartbeat.interval.ms",
            "2000",
            120,
            (_synonym("heartbeat.interval.ms", "2000", 120),),
        ),
        (
            "session.timeout.ms",
            "11000",
            121,
            (_synonym("session.timeout.ms", "11000", 121),),
        ),
    ]
    assert configs[0].config_type == 2 and configs[1].config_type == 3


@pytest.mark.parametrize(
    ("user", "client_id"),
    [
        ("alice", "clientid-override"),
        ("alice", ""),
        ("alice", "new-app"),
        ("alice2", ""),
        ("bob", "x"),
    ],
)
def test_describe_from_the_store_grouped_by_entity_is_the_same(user: str, client_id: str) -> None:
    items = {
        **SEED_ITEMS,
        "alice/<default>/producer_byte_rate": "50000",
        cc.store_key("a/b", "c/d", "acks"): "1",  # separators quoted in the key
    }
    grouped = cc.configs_by_entity(items)
    assert cc.describe({}, user, client_id, CODES, grouped=grouped) == cc.describe(
        items, user, client_id, CODES
    )
    assert cc.describe({}, "a/b", "c/d", CODES, grouped=grouped) == cc.describe(
        items, "a/b", "c/d", CODES
    )


def test_describe_of_the_default_alone_and_without_synonyms() -> None:
    configs = cc.describe(SEED_ITEMS, "alice", "", CODES, include_synonyms=False)
    assert [(c.name, c.value, c.source, c.synonyms) for c in configs] == [
        ("acks", "-1", 121, ()),
        ("session.timeout.ms", "11000", 121, ()),
    ]


def test_describe_of_a_client_id_with_no_entry_inherits_the_default() -> None:
    configs = cc.describe(SEED_ITEMS, "alice", "new-app", CODES)
    assert {c.name: (c.value, c.source) for c in configs} == {
        "acks": ("-1", 121),
        "session.timeout.ms": ("11000", 121),
    }
    assert cc.describe(SEED_ITEMS, "bob", "new-app", CODES) == ()


# --- incremental alter ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("items", "client_id", "ops", "writes"),
    [
        pytest.param({}, "app-1", [("acks", SET, "0")], {"alice/app-1/acks": "0"}, id="set"),
        pytest.param(
            {},
            "",
            [("acks", SET, " -1 ")],
            {"alice/<default>/acks": "-1"},
            id="set-default-trimmed",
        ),
        pytest.param(SEED_ITEMS, "clientid-override", [("acks", SET, "0")], {}, id="set-same"),
        pytest.param(
            SEED_ITEMS,
            "clientid-override",
            [("acks", DELETE, None), ("linger.ms", SET, "5")],
            {"alice/clientid-override/acks": None, "alice/clientid-override/linger.ms": "5"},
            id="delete-and-set",
        ),
        pytest.param(SEED_ITEMS, "app-1", [("acks", DELETE, None)], {}, id="delete-unset"),
        pytest.param(
            {"alice/app-1/retired.key": "x"},
            "app-1",
            [("retired.key", DELETE, "")],
            {"alice/app-1/retired.key": None},
            id="delete-stored-unknown",
        ),
        pytest.param(
            {"alice/app-1/partition.assignment.strategy": "range"},
            "app-1",
            [("partition.assignment.strategy", APPEND, "cooperative-sticky,range")],
            {"alice/app-1/partition.assignment.strategy": "range,cooperative-sticky"},
            id="append",
        ),
        pytest.param(
            {},
            "app-1",
            [("partition.assignment.strategy", APPEND, "range")],
            {"alice/app-1/partition.assignment.strategy": "range"},
            id="append-unset",
        ),
        pytest.param(
            {"alice/app-1/partition.assignment.strategy": "range,cooperative-sticky"},
            "app-1",
            [("partition.assignment.strategy", SUBTRACT, "range")],
            {"alice/app-1/partition.assignment.strategy": "cooperative-sticky"},
            id="subtract",
        ),
        pytest.param(
            {"alice/app-1/partition.assignment.strategy": "range"},
            "app-1",
            [("partition.assignment.strategy", SUBTRACT, "range")],
            {"alice/app-1/partition.assignment.strategy": None},
            id="subtract-to-empty-deletes",
        ),
    ],
)
def test_apply_incremental(
    items: dict[str, str],
    client_id: str,
    ops: list[tuple[str, int, str | None]],
    writes: dict[str, str | None],
) -> None:
    assert cc.apply_incremental(items, "alice", client_id, _alterations(ops)) == (writes, None)


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        (
            [("session.timeout.ms", SET, "10000"), ("acks", SET, "2")],
            "Invalid value 2 for configuration acks: String must be one of: all, -1, 0, 1",
        ),
        ([("acks", APPEND, "0")], "Config value append is not allowed for config key: acks"),
        (
            [("linger.ms", SUBTRACT, "5")],
            "Config value subtract is not allowed for config key: linger.ms",
        ),
        (
            [("partition.assignment.strategy", APPEND, "bogus")],
            "Invalid value bogus for configuration partition.assignment.strategy",
        ),
        (
            [("acks", SET, "0"), ("producer_byte_rate", SET, "60000")],
            "producer_byte_rate is a client quota",
        ),
        ([("producer_byte_rate", DELETE, None)], "producer_byte_rate is a client quota"),
        ([("bootstrap.servers", DELETE, None)], "Unknown dynamic client config: bootstrap"),
        ([("acks", SET, "0"), ("acks", SET, "1")], "Error due to duplicate config keys"),
        ([("acks", SET, None)], "Null value not supported for : acks"),
        ([("acks", 7, "0")], "Unknown operations type 7"),
    ],
)
def test_apply_incremental_refuses_the_whole_resource(
    ops: list[tuple[str, int, str | None]], message: str
) -> None:
    writes, error = cc.apply_incremental(
        SEED_ITEMS, "alice", "clientid-override", _alterations(ops)
    )
    assert writes == {}
    assert error is not None
    assert error[0] == 42
    assert error[1].startswith(message)


def test_applied_writes_show_in_the_next_describe() -> None:
    items = dict(SEED_ITEMS)
    writes, error = cc.apply_incremental(
        items,
        "alice",
        "clientid-override",
        _alterations([("acks", DELETE, None), ("max.poll.records", SET, "50")]),
    )
    assert error is None
    for key, value in writes.items():
        if value is None:
            del items[key]
        else:
            items[key] = value
    configs = {
        c.name: (c.value, c.source) for c in cc.describe(items, "alice", "clientid-override", CODES)
    }
    assert configs["acks"] == ("-1", 121)
    assert configs["max.poll.records"] == ("50", 120)


# --- wire -----------------------------------------------------------------------------------


def _seed_answer(include_synonyms: bool = True) -> bytes:
    """The gateway's DescribeConfigs answer to kpg configs' request for the seed's entity,
    made by the gateway's own encoder."""
    frame = wire.describe_request(
        [(CODES.user_client_type, "alice:clientid-override")],
        correlation_id=7,
        client_id="kpg-configs",
        include_synonyms=include_synonyms,
    )[4:]
    view = dc.read_request(parse_request_header(frame), frame)
    configs = cc.describe(SEED_ITEMS, "alice", "clientid-override", CODES)
    return dc.answer(view, 7, {0: OK}, None, configs={0: configs})


def test_describe_request_carries_the_gateway_type_code() -> None:
    frame = wire.describe_request(
        [(121, "alice:app-1"), (2, "orders")], correlation_id=3, client_id="kpg-configs"
    )[4:]
    header = parse_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id) == (32, 4, 3)
    view = dc.read_request(header, frame)
    assert [(r.resource_type, r.resource_name) for r in view.resources] == [
        (121, "alice:app-1"),
        (2, "orders"),
    ]
    assert view.include_synonyms


def test_describe_response_reads_sources_and_synonyms() -> None:
    (resource,) = wire.read_describe_response(_seed_answer())
    assert (resource.resource_type, resource.resource_name) == (121, "alice:clientid-override")
    assert resource.error_code == 0
    acks = resource.configs[0]
    assert (acks.name, acks.value, acks.source, acks.is_sensitive) == ("acks", "0", 120, False)
    assert acks.synonyms == (_synonym("acks", "0", 120), _synonym("acks", "-1", 121))


def test_incremental_alter_round_trip() -> None:
    frame = wire.incremental_alter_request(
        [(121, "alice:", [("acks", SET, "-1"), ("linger.ms", DELETE, None)])],
        validate_only=False,
        correlation_id=5,
        client_id="kpg-configs",
    )[4:]
    header = parse_request_header(frame)
    assert (header.api_key, header.api_version) == (44, 1)
    request = ac.read_request(header, frame)
    (resource,) = request.resources
    assert resource.key == (121, "alice:")
    assert [(c.name, c.operation, c.value) for c in resource.configs] == [
        ("acks", SET, "-1"),
        ("linger.ms", DELETE, None),
    ]
    refused = ItemError(error_code=42, error_message="Invalid value 2 for configuration acks")
    answer = ac.answer(request, 5, {(121, "alice:"): refused}, None)
    assert wire.read_incremental_alter_response(answer) == (
        wire.AlteredResource(
            resource_type=121,
            resource_name="alice:",
            error_code=42,
            error_message="Invalid value 2 for configuration acks",
        ),
    )


def test_error_names() -> None:
    assert wire.error_name(42) == "INVALID_REQUEST"
    assert wire.error_name(31) == "CLUSTER_AUTHORIZATION_FAILED"
    assert wire.error_name(9999) == "UNKNOWN_ERROR_CODE_9999"


# --- kpg configs ----------------------------------------------------------------------------


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kpg")
    add = parser.add_subparsers(dest="command", required=True)
    cli.add_configs_command(add)
    return parser.parse_args(["configs", "--bootstrap-server", "127.0.0.1:9", *argv])


SEED_OVERRIDE = (
    "--entity-type",
    "users",
    "--entity-name",
    "alice",
    "--entity-type",
    "clients",
    "--entity-name",
    "clientid-override",
)


@pytest.mark.parametrize(
    "entity_args",
    [
        SEED_OVERRIDE,
        ("--user", "alice", "--client", "clientid-override"),
        ("--entity-type", "clients", "--entity-name", "clientid-override", "--user", "alice"),
    ],
)
def test_users_and_clients_name_the_user_client_resource(entity_args: tuple[str, ...]) -> None:
    args = _parse("--describe", *entity_args)
    target = cli.target_of(args.entities, CODES)
    assert (target.resource_type, target.resource_name, target.user, target.client_id) == (
        121,
        "alice:clientid-override",
        "alice",
        "clientid-override",
    )


@pytest.mark.parametrize(
    "entity_args",
    [
        ("--entity-type", "users", "--entity-name", "alice"),
        ("--user", "alice", "--entity-type", "clients", "--entity-default"),
    ],
)
def test_a_user_alone_names_the_default(entity_args: tuple[str, ...]) -> None:
    target = cli.target_of(_parse("--alter", *entity_args).entities, CODES)
    assert (target.resource_type, target.resource_name, target.client_id) == (121, "alice:", "")


@pytest.mark.parametrize(
    ("entity_args", "message"),
    [
        (("--user", "alice"), "Completed updating config for user alice."),
        (
            ("--user", "alice", "--entity-type", "clients", "--entity-default"),
            "Completed updating config for user alice.",
        ),
        (SEED_OVERRIDE, "Completed updating config for user alice."),
        (("--client", "app-1", "--user", "alice"), "Completed updating config for client app-1."),
        (
            ("--entity-type", "clients", "--entity-default", "--user", "alice"),
            "Completed updating default config for clients in the cluster.",
        ),
    ],
)
def test_the_alter_message_is_kafka_configs_own(entity_args: tuple[str, ...], message: str) -> None:
    """kafka-configs.sh names the first entity type given and its name; "default" only for
    --entity-default there (ConfigCommand.alterConfig)."""
    target = cli.target_of(_parse("--alter", *entity_args).entities, CODES)
    assert target.altered() == message


def test_a_client_alone_is_the_client_resource() -> None:
    target = cli.target_of(_parse("--describe", "--client", "app-1").entities, CODES)
    assert (target.resource_type, target.resource_name, target.user) == (120, "app-1", None)
    assert target.heading() == "Dynamic configs for client app-1 are:"


@pytest.mark.parametrize(
    ("entity_args", "message"),
    [
        (("--entity-type", "users", "--entity-default"), "no default across users"),
        (("--entity-type", "topics", "--entity-name", "t"), "--entity-type topics: kpg configs"),
        (("--entity-type", "users"), "--entity-type users needs --entity-name"),
        (("--entity-name", "alice"), "--entity-name must follow an --entity-type"),
        (("--user", "alice", "--user", "bob"), "--entity-type users is given twice"),
        (("--entity-type", "clients", "--entity-default"), "needs --entity-type users"),
        ((), "name the entity"),
        # alice:x:y is user alice:x's client-id y: the write went to another user's entity,
        # and the message said alice's was updated
        (("--user", "alice", "--client", "x:y"), "client-id 'x:y' holds a colon"),
    ],
)
def test_entity_errors(entity_args: tuple[str, ...], message: str) -> None:
    with pytest.raises(cli.UsageError, match=message):
        cli.target_of(_parse("--describe", *entity_args).entities, CODES)


def test_add_config_parses_as_kafka_configs_does() -> None:
    text = "acks=0, partition.assignment.strategy=[range,cooperative-sticky],linger.ms = 5"
    assert cli.parse_add_config(text) == [
        ("acks", "0"),
        ("partition.assignment.strategy", "range,cooperative-sticky"),
        ("linger.ms", "5"),
    ]


@pytest.mark.parametrize("text", ["acks", "acks=0=1", "=0", "acks=0,,linger.ms=1"])
def test_malformed_add_config_is_refused(text: str) -> None:
    with pytest.raises(cli.UsageError, match="Invalid entity config"):
        cli.parse_add_config(text)


def test_alter_operations_set_then_delete() -> None:
    args = _parse(
        "--alter",
        *SEED_OVERRIDE,
        "--add-config",
        "acks=0,heartbeat.interval.ms=2000",
        "--delete-config",
        "linger.ms, batch.size",
    )
    assert cli.alter_operations(args.add_config, args.delete_config) == [
        ("acks", SET, "0"),
        ("heartbeat.interval.ms", SET, "2000"),
        ("linger.ms", DELETE, None),
        ("batch.size", DELETE, None),
    ]


@pytest.mark.parametrize(
    ("add", "delete", "message"),
    [
        (
            "acks=-1,session.timeout.ms=11000,producer_byte_rate=50000",
            None,
            "producer_byte_rate is a client quota",
        ),
        (None, "consumer_byte_rate", "consumer_byte_rate is a client quota"),
        ("acks=0", "acks", "both added and deleted: acks"),
        (None, None, "At least one of --add-config or --delete-config"),
    ],
)
def test_alter_operations_refusals(add: str | None, delete: str | None, message: str) -> None:
    with pytest.raises(cli.UsageError, match=message):
        cli.alter_operations(add, delete)


def test_client_codes_flag() -> None:
    assert cli.parse_codes("client_type=100,user_client_type=101").user_client_type == 101
    assert cli.parse_codes(None) == CODES
    with pytest.raises(cli.UsageError, match="client_type: 16 is Kafka's resource type"):
        cli.parse_codes("client_type=16")
    with pytest.raises(cli.UsageError, match="expected KEY=NUMBER"):
        cli.parse_codes("client_type=x")


def test_describe_output_is_the_seeds() -> None:
    target = cli.target_of(_parse("--describe", *SEED_OVERRIDE).entities, CODES)
    (resource,) = wire.read_describe_response(_seed_answer())
    assert cli.format_description(target, resource, CODES) == [
        "Dynamic configs for user alice:clientid-override are:",
        "  acks=0 sensitive=false synonyms={DYNAMIC_CLIENT_CONFIG:acks=0, "
        "DYNAMIC_DEFAULT_CLIENT_CONFIG:acks=-1}",
        "  heartbeat.interval.ms=2000 sensitive=false "
        "synonyms={DYNAMIC_CLIENT_CONFIG:heartbeat.interval.ms=2000}",
    ]


def test_describe_all_output_is_the_seeds() -> None:
    target = cli.target_of(_parse("--describe", "--all", *SEED_OVERRIDE).entities, CODES)
    (resource,) = wire.read_describe_response(_seed_answer())
    assert cli.format_description(target, resource, CODES, all_configs=True) == [
        "All configs for user alice:clientid-override are:",
        "  acks=0 sensitive=false synonyms={DYNAMIC_CLIENT_CONFIG:acks=0, "
        "DYNAMIC_DEFAULT_CLIENT_CONFIG:acks=-1}",
        "  heartbeat.interval.ms=2000 sensitive=false "
        "synonyms={DYNAMIC_CLIENT_CONFIG:heartbeat.interval.ms=2000}",
        "  session.timeout.ms=11000 sensitive=false "
        "synonyms={DYNAMIC_DEFAULT_CLIENT_CONFIG:session.timeout.ms=11000}",
    ]


def test_describe_of_the_default_lists_the_default_entries() -> None:
    target = cli.target_of(_parse("--describe", "--user", "alice").entities, CODES)
    configs = cc.describe(SEED_ITEMS, "alice", "", CODES)
    resource = wire.DescribedResource(
        resource_type=121,
        resource_name="alice:",
        error_code=0,
        error_message=None,
        configs=tuple(
            wire.DescribedConfig(
                name=c.name,
                value=c.value,
                source=c.source,
                read_only=False,
                is_sensitive=False,
                synonyms=c.synonyms,
                config_type=c.config_type,
                documentation=None,
            )
            for c in configs
        ),
    )
    assert cli.format_description(target, resource, CODES) == [
        "Dynamic configs for user alice are:",
        "  acks=-1 sensitive=false synonyms={DYNAMIC_DEFAULT_CLIENT_CONFIG:acks=-1}",
        "  session.timeout.ms=11000 sensitive=false "
        "synonyms={DYNAMIC_DEFAULT_CLIENT_CONFIG:session.timeout.ms=11000}",
    ]


def test_alter_output_is_the_seeds() -> None:
    target = cli.target_of(_parse("--alter", *SEED_OVERRIDE).entities, CODES)
    assert target.altered() == "Completed updating config for user alice."


def test_error_output_names_the_code_and_the_gateways_message() -> None:
    message = "Invalid value 2 for configuration acks: String must be one of: all, -1, 0, 1"
    assert cli.format_error(42, message) == f"INVALID_REQUEST (42): {message}"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--alter", "--client", "app-1", "--add-config", "acks=0"), "--alter needs --entity-type"),
        (
            ("--alter", "--user", "alice", "--add-config", "producer_byte_rate=1"),
            "is a client quota",
        ),
        (("--describe", "--user", "alice", "--add-config", "acks=0"), "go with --alter"),
        (("--describe", "--user", "alice", "--client-codes", "client_type=32"), "GROUP"),
    ],
)
def test_bad_input_exits_2_before_sending(
    argv: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _parse(*argv)
    assert cli.cmd_configs(args) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert "no usable answer" not in captured.err
    assert captured.out == ""


def _alterations(ops: list[tuple[str, int, str | None]]) -> list[ConfigAlteration]:
    """The tables write an operation as (name, op, value), as it stands on the wire."""
    return [ConfigAlteration(name=n, operation=o, value=v) for n, o, v in ops]
