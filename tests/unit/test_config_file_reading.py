"""The configuration file and a topic manifest as an operator (or a reviewer of a GitOps
repository) writes them: what reads one way to a person and another to the gateway is
refused at start-up, on reload, by ``kpg run --check`` and by ``kpg policy check``, naming
the file and the place, or is read as written."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.cli import _check
from gateway.config import ConfigError, load
from gateway.supervisor import Supervisor
from gateway.tools import _read_manifest
from policies.loader import PolicyConfigError, parse_policy_config
from policies.manifest import ManifestError
from policies.rules import ConfigRule, ForbiddenConfigsRule

pytestmark = pytest.mark.unit

HEAD = "advertised_host: 127.0.0.1\n"


def written(tmp_path: Path, text: str, name: str = "gateway.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def bomb(levels: int) -> str:
    """A "billion laughs": each level a list of ten aliases of the one before."""
    lines = ["policies:", "  acme.l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, levels):
        lines.append(f"  acme.l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 10)}]")
    return HEAD + "\n".join(lines) + "\n"


# --- YAML that safe_load reads otherwise than a reader does -----------------------------------

REFUSED_YAML = [
    pytest.param(
        "policies:\n"
        "  rules:\n"
        "    - {name: partition-count, type: partitions, max: 50}\n"
        "limits:\n"
        "  max_in_flight_requests: 100\n"
        "policies:\n"  # the last one silently replaced the rules above
        "  policy.timeout.ms: 2000\n",
        "line 7",
        "'policies' a second time (first on line 2)",
        id="second-policies-section",
    ),
    pytest.param(
        "policies:\n"
        "  rules:\n"
        "    - name: partition-count\n"
        "      type: partitions\n"
        "      max: 50\n"
        "      max: 5000\n",
        "line 7",
        "'max' a second time",
        id="rule-key-twice",
    ),
    pytest.param(
        "policies:\n"
        "  create.topic.policy.class.name: acme.Strict\n"
        "  create.topic.policy.class.name: acme.Lax\n",
        "line 4",
        "'create.topic.policy.class.name' a second time",
        id="plugin-twice",
    ),
    pytest.param(
        "policies:\n"
        "  rules:\n"
        "    - &limit {name: partition-count, type: partitions, max: 50}\n"
        "    - {<<: *limit, name: partition-count-2, max: 5000}\n",
        "line 5",
        "merge keys (<<) are not accepted",
        id="merge-key-override",
    ),
    pytest.param(
        "upstream:\n  tls:\n    check_hostname: off\n",
        "line 4",
        "'off' is a boolean to YAML 1.1",
        id="yaml11-off",
    ),
    pytest.param(
        "policies:\n  rules:\n    - {name: p, type: partitions, max: 0100}\n",
        "line 4",
        "'0100': a leading zero makes it octal to YAML 1.1 (this reader: 64)",
        id="yaml11-octal",
    ),
    pytest.param(
        "shutdown_timeout_s: 1:30\n",
        "line 2",
        "'1:30' is a base-60 number to YAML 1.1 (90)",
        id="yaml11-base-60",
    ),
    pytest.param(
        "policies:\n  acme.settings: &a [*a]\n",
        "line 3",
        "an alias inside the collection it names",
        id="recursive-alias",
    ),
    pytest.param(bomb(6), "line 1", "aliases stand for", id="alias-bomb"),
    pytest.param(
        "policies: {acme.x: " + "[" * 3000 + "]" * 3000 + "}\n",
        "line 2",
        "nested too deeply",
        id="deep-nesting",
    ),
]


@pytest.mark.parametrize(("text", "line", "problem"), REFUSED_YAML)
def test_yaml_that_reads_otherwise_is_refused_naming_the_place(
    tmp_path: Path, text: str, line: str, problem: str
) -> None:
    path = written(tmp_path, HEAD + text if not text.startswith(HEAD) else text)
    with pytest.raises(ConfigError) as caught:
        load(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: not valid YAML: ")
    assert problem in message
    assert f'in "{path}", {line},' in message


@pytest.mark.parametrize("text", ["", "# policies:\n#   rules: []\n", "---\n"])
def test_a_file_with_no_settings_is_refused(tmp_path: Path, text: str) -> None:
    """An empty file is what a reload reads while the file is written in place (truncated,
    not yet written): it was read as no policies at all, every default in force."""
    path = written(tmp_path, text)
    with pytest.raises(ConfigError, match=rf"^{path}: holds no settings"):
        load(path)
    assert load(written(tmp_path, "{}\n")).policies == {}


def test_a_file_that_is_not_utf8_is_refused_not_a_traceback(tmp_path: Path) -> None:
    """Latin-1 bytes raised UnicodeDecodeError out of kpg run and kpg policy check."""
    path = tmp_path / "gateway.yaml"
    path.write_bytes(HEAD.encode() + b'policies:\n  acme.owner: "Ren\xe9"\n')
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert str(caught.value).startswith(f"{path}: not valid YAML: ")
    assert f'in "{path}", position 55' in str(caught.value)
    manifest = tmp_path / "topics.yaml"
    manifest.write_bytes(b"topics: [{name: caf\xe9, partitions: 1, replication_factor: 1}]\n")
    with pytest.raises(ManifestError, match="not valid YAML"):
        _read_manifest(manifest)


def test_a_workers_copy_is_refused_naming_the_operators_file(tmp_path: Path) -> None:
    copy = written(tmp_path, HEAD + "policies: {}\npolicies: {}\n", "copy.yaml")
    with pytest.raises(ConfigError) as caught:
        load(copy, source="/etc/kpg/gateway.yaml")
    assert 'in "/etc/kpg/gateway.yaml", line 3' in str(caught.value)


def test_what_every_reader_reads_alike_still_loads(tmp_path: Path) -> None:
    path = written(
        tmp_path,
        HEAD + "upstream:\n  tls: false\n"
        "policies:\n"
        "  acme.principals: &admins ['User:ops']\n"
        "  acme.more: *admins\n"
        "  rules:\n"
        "    - {name: r, type: config, config: retention.ms, min: 60_000, max: 0x7fffffff}\n"
        "    - {name: u, type: config, config: unclean.leader.election.enable,"
        " allowed: [false]}\n",
    )
    config = load(path)
    assert config.upstream.tls is None
    rules = parse_policy_config(config.policies, source=str(path)).rules
    assert rules[0] == ConfigRule(name="r", config="retention.ms", min=60_000, max=2**31 - 1)
    assert rules[1] == ConfigRule(
        name="u", config="unclean.leader.election.enable", allowed=frozenset({"false"})
    )


def test_a_manifest_is_read_as_strictly(tmp_path: Path) -> None:
    path = written(
        tmp_path,
        "topics:\n"
        "  - name: payments.orders.v1\n"
        "    partitions: 12\n"
        "    replication_factor: 3\n"
        "    partitions: 1200\n",
        "topics.yaml",
    )
    with pytest.raises(ManifestError, match=r"'partitions' a second time"):
        _read_manifest(path)


# --- values that silently meant nothing ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # .nan compares false with every bound: accepted as a timeout, and as a rule's min
        ("upstream:\n  request_timeout_s: .nan\n", "upstream.request_timeout_s: expected a finite"),
        ("shutdown_timeout_s: .inf\n", "shutdown_timeout_s: expected a finite number"),
        (
            "client_configs:\n  admin_principals:\n",
            "client_configs.admin_principals: no value",
        ),
    ],
)
def test_a_setting_that_would_mean_nothing_is_refused(
    tmp_path: Path, text: str, message: str
) -> None:
    path = written(tmp_path, HEAD + text)
    with pytest.raises(ConfigError, match=rf"^{path}: {message}"):
        load(path)


RETENTION = {"name": "retention", "type": "config", "config": "retention.ms"}

REFUSED_POLICIES = [
    pytest.param({"rules": [{**RETENTION, "min": float("nan")}]}, "rules[0].min", id="nan-min"),
    # `min:` with its value forgotten read as no minimum at all
    pytest.param({"rules": [{**RETENTION, "min": None, "max": 10}]}, "rules[0].min", id="null"),
    pytest.param({"create.topic.policy.class.name": None}, "create.topic.policy.class.name"),
    pytest.param(
        {"record.validation.policy.class.name": ""}, "record.validation.policy.class.name"
    ),
]


@pytest.mark.parametrize(("section", "key"), REFUSED_POLICIES)
def test_a_policy_setting_that_would_mean_nothing_is_refused(
    section: dict[str, object], key: str
) -> None:
    with pytest.raises(PolicyConfigError) as caught:
        parse_policy_config(section, source="gw.yaml")
    assert str(caught.value).startswith(f"gw.yaml: policies.{key}: ")


@pytest.mark.parametrize(
    ("rule", "key", "hint"),
    [
        (
            {**RETENTION, "config": "retention.msec", "max": 1},
            "config",
            "did you mean retention.ms",
        ),
        ({**RETENTION, "config": "Retention.ms", "max": 1}, "config", "did you mean retention.ms"),
        (
            {**RETENTION, "config": "log.retention.hours", "max": 168},
            "config",
            "it is a broker config: a rule on the topic config retention.ms judges it too",
        ),
        (
            {"name": "f", "type": "forbidden.configs", "configs": ["unclean.leader.elect.enable"]},
            "configs",
            "did you mean unclean.leader.election.enable",
        ),
        (
            {"name": "q", "type": "required.configs", "configs": ["retention.ms", "owner"]},
            "configs",
            "'owner' is not a Kafka topic config",
        ),
    ],
)
def test_a_rule_on_a_config_no_broker_has_is_refused(
    rule: dict[str, object], key: str, hint: str
) -> None:
    with pytest.raises(PolicyConfigError) as caught:
        parse_policy_config({"rules": [rule]}, source="gw.yaml")
    message = str(caught.value)
    assert message.startswith(f"gw.yaml: policies.rules[0].{key}: ")
    assert "this rule would never apply" in message
    assert hint in message


def test_a_brokers_own_topic_configs_can_be_named() -> None:
    rules = parse_policy_config(
        {
            "policy.extra.topic.configs": ["confluent.placement.constraints"],
            "rules": [
                {
                    "name": "f",
                    "type": "forbidden.configs",
                    "configs": ["confluent.placement.constraints", "record.validation.policy"],
                }
            ],
        },
        source="gw.yaml",
    ).rules
    assert rules == (
        ForbiddenConfigsRule(
            name="f", configs=("confluent.placement.constraints", "record.validation.policy")
        ),
    )


@pytest.mark.parametrize("pattern", ["payments-*", "team_a_*"])
def test_a_wildcard_written_as_a_pattern_is_refused(pattern: str) -> None:
    rule = {"name": "p", "type": "protected.topics", "topics": ["__.*", pattern]}
    with pytest.raises(PolicyConfigError) as caught:
        parse_policy_config({"rules": [rule]}, source="gw.yaml")
    message = str(caught.value)
    assert message.startswith("gw.yaml: policies.rules[0].topics: ")
    assert f"write '{pattern[:-1]}.*'" in message


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        # a Cyrillic о (U+043E) where the Latin o is: protected nothing, looked the same
        ("__c\u043ensumer_offsets", "holds '\u043e' (U+043E)"),
        ("payments/orders", "requires the character '/'"),
        ("(orders|payments):.*", "requires the character ':'"),
        ("team a\\..*", "requires the character ' '"),
    ],
)
def test_a_pattern_no_topic_name_can_match_is_refused(pattern: str, problem: str) -> None:
    for rule in (
        {"name": "p", "type": "protected.topics", "topics": [pattern]},
        {"name": "n", "type": "topic.name", "pattern": pattern},
    ):
        with pytest.raises(PolicyConfigError) as caught:
            parse_policy_config({"rules": [rule]}, source="gw.yaml")
        assert problem in str(caught.value)
        assert "can never match" in str(caught.value)


@pytest.mark.parametrize(
    "pattern",
    [
        "payments-.*",
        "payments[-]*",
        "payments\\-*",
        "[^/]+",
        "(?i)Orders\\.v[0-9]+",
        "connect-(configs|offsets|status)",
    ],
)
def test_a_pattern_that_means_it_is_taken(pattern: str) -> None:
    rule = {"name": "p", "type": "protected.topics", "topics": [pattern]}
    assert parse_policy_config({"rules": [rule]}, source="gw.yaml").rules


@pytest.mark.parametrize("pattern", ["[a-z]+.[a-z0-9-]+.v[0-9]+", "(orders|payments).v1"])
def test_a_naming_rule_with_a_lone_dot_is_refused(pattern: str) -> None:
    """The dot of team.orders.v1 written without its backslash matches any character:
    team_orders-v1 passed the naming rule."""
    rule = {"name": "n", "type": "topic.name", "pattern": pattern}
    with pytest.raises(PolicyConfigError) as caught:
        parse_policy_config({"rules": [rule]}, source="gw.yaml")
    assert str(caught.value).startswith("gw.yaml: policies.rules[0].pattern: ")
    assert "has a '.' on its own" in str(caught.value)


@pytest.mark.parametrize(
    "pattern", ["[a-z]+\\.[a-z0-9-]+\\.v[0-9]+", "orders.*", "a.?b", "[.a-z]+"]
)
def test_a_naming_rule_with_an_escaped_or_repeated_dot_is_taken(pattern: str) -> None:
    rule = {"name": "n", "type": "topic.name", "pattern": pattern}
    assert parse_policy_config({"rules": [rule]}, source="gw.yaml").rules


@pytest.mark.parametrize("pattern", ["[a-z]+\\.v[0-9]+|.*", ".*", "(?i)[a-z0-9._-]+", "[^/]*"])
def test_a_naming_rule_that_matches_every_name_is_refused(pattern: str) -> None:
    """A stray alternative made the naming rule a no-op."""
    rule = {"name": "n", "type": "topic.name", "pattern": pattern}
    with pytest.raises(PolicyConfigError, match=r"matches every topic name"):
        parse_policy_config({"rules": [rule]}, source="gw.yaml")


def test_a_protected_topics_pattern_may_keep_a_lone_dot() -> None:
    """It protects more names, never fewer."""
    rule = {"name": "p", "type": "protected.topics", "topics": ["payments.orders"]}
    assert parse_policy_config({"rules": [rule]}, source="gw.yaml").rules


@pytest.mark.parametrize(
    "section",
    [
        {"Rules": [{"name": "p", "type": "partitions", "max": 5}]},
        {"rule": [{"name": "p", "type": "partitions", "max": 5}]},
        {"rulse": [{"name": "p", "type": "partitions", "max": 5}]},
        {"rules": [], "acme.rules": [{"name": "p", "type": "partitions", "max": 5}]},
    ],
)
def test_rules_under_another_key_are_refused(section: dict[str, object]) -> None:
    """Any key but ``rules`` only reached the plug-ins: no rule of it ran."""
    key = next(k for k in section if k != "rules")
    with pytest.raises(PolicyConfigError) as caught:
        parse_policy_config(section, source="gw.yaml")
    assert str(caught.value).startswith(f"gw.yaml: policies.{key}: looks like the rules")


def test_plug_in_settings_are_still_free() -> None:
    config = parse_policy_config(
        {
            "acme.roles": ["admin"],
            "acme.limits": [{"name": "x"}],
            "acme.checks": [{"name": "x", "type": "acme.owner-header"}],
            "roles": "a",
        },
        source="gw.yaml",
    )
    assert config.configs["acme.roles"] == "admin"


@pytest.mark.parametrize("value", ["", " , ", [""]])
def test_an_empty_upstream_is_refused_not_read_as_the_embedded_broker(
    tmp_path: Path, value: object
) -> None:
    """``bootstrap_servers: ""`` (a template's unset variable) or ``--upstream "$KAFKA"`` with
    KAFKA unset started the embedded in-memory broker in place of the cluster."""
    path = written(tmp_path, HEAD)
    with pytest.raises(ConfigError, match=r"upstream.bootstrap_servers: empty"):
        load(path, {"upstream.bootstrap_servers": value})
    assert load(path, {"upstream.bootstrap_servers": []}).upstream.bootstrap_servers == ()
    assert load(path).upstream.bootstrap_servers == ()


# --- one file, one reading, on every path -------------------------------------------------


@pytest.mark.parametrize(
    ("text", "warning"),
    [
        (
            "policies:\n  rules:\n"
            "    - {name: p, type: partitions, max: 50, mode: dry-run}\n"
            "    - {name: n, type: topic.name, pattern: 'a+', mode: dry-run}\n",
            "every rule and plug-in is mode: dry-run: nothing is enforced",
        ),
        ("policies: {}\n", "no rule and no plug-in"),
        ("upstream:\n  auto_create: pass\n", "upstream.auto_create is pass"),
    ],
)
def test_kpg_run_check_says_what_the_file_leaves_open(
    tmp_path: Path, text: str, warning: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reviewer's CI runs kpg run --check: what start-up warns about shows there too."""
    path = written(tmp_path, HEAD + "client_configs: {admin_principals: []}\n" + text)
    assert _check(load(path)) == 0
    err = capsys.readouterr().err
    assert f"kpg: warning: {path}: " in err
    assert warning in err


def test_kpg_run_check_is_quiet_about_an_enforced_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = written(
        tmp_path,
        HEAD + "client_configs: {admin_principals: []}\n"
        "policies:\n  rules: [{name: p, type: partitions, max: 50}]\n",
    )
    assert _check(load(path)) == 0
    assert "warning" not in capsys.readouterr().err


def test_a_reload_refuses_a_file_with_a_key_twice(tmp_path: Path) -> None:
    """The supervisor's check of a reloaded file: the second ``policies:`` that undid the
    first is refused, and the workers' copy stays as it was."""
    path = written(tmp_path, HEAD + "policies:\n  rules: [{name: p, type: partitions, max: 50}]\n")
    outcomes: list[tuple[str, str]] = []
    supervisor = Supervisor(
        workers=0,
        config=load(path),
        config_file=path,
        command=lambda index, fd, copy: [],
        load=lambda copy: load(copy, source=str(path)),
        on_reload=lambda result, message: outcomes.append((result, message)),
    )
    try:
        supervisor.adopt()
        running = supervisor.config_copy.read_text()
        path.write_text(path.read_text() + "policies: {}\n")
        asyncio.run(supervisor.reload())
        assert supervisor.config_copy.read_text() == running
    finally:
        supervisor.close()
    assert [result for result, _ in outcomes] == ["refused"]
    assert "'policies' a second time" in outcomes[0][1]


@pytest.mark.xfail(
    strict=True,
    reason="a file read while it is written in place and cut at a line boundary is valid YAML "
    "with fewer rules: nothing in its bytes tells it from a shorter file. The empty file (the "
    "usual cut: truncated, not yet written) is refused; the README says to replace the file "
    "by rename, as editors, sed -i and ConfigMaps do",
)
def test_a_file_cut_while_written_in_place_is_refused(tmp_path: Path) -> None:
    whole = (
        HEAD + "policies:\n  rules:\n"
        "    - {name: partition-count, type: partitions, max: 50}\n"
        "    - {name: replication, type: replication.factor, min: 3}\n"
    )
    path = written(tmp_path, whole[: whole.index("    - {name: replication")])
    with pytest.raises(ConfigError):
        load(path)
