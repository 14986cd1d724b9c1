"""The judges of a topic creation agree: for one policy configuration and one topic, what the
live gateway answers a CreateTopics (validate_only and real), what ``kpg dry-run`` prints
through it and what ``kpg policy check`` prints offline are the same verdict and the same
violated rules, one row per rule in the chain's order.

Seeded and generated: each seed draws a rule set (naming pattern, partition and replication
bounds, allowed and bounded configs, required and forbidden configs, protected topics, each
rule enforced or dry-run) and topics (names Kafka takes and names it refuses: unicode, dots,
too long, the gateway's own audit topic; counts given, -1 for the broker's default, 0; a
``record.validation.policy`` the gateway can or cannot apply; several violations at once).
A -1 is judged live as the broker's default (the test broker states 3 partitions of 1
replica), so offline it is checked with those counts. ``kpg audit replay`` of what these
decisions recorded is tests/spark/test_replay_agrees.py.
"""

from __future__ import annotations

import argparse
import io
import random
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kio.schema.create_topics.v2 import request as v2
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32, i32Timedelta

from gateway import tools
from gateway.config import HostPort
from gateway.exchange import exchange
from policies.violations import split_request_id
from protocol import create_topics as ct
from protocol.create_topics import encode_legacy_request
from protocol.results import ItemError
from tests.inproc.test_create_topics import _read_legacy
from tests.support import TEST_BROKER_DEFAULTS, GatewayThread, RawClient, gateway_config

pytestmark = pytest.mark.inproc

SEEDS = (16, 1601, 42, 7, 2026)
CASES_PER_SEED = 16
NAMING = r"[a-z]+\.[a-z0-9-]+\.v[0-9]+"


def rule_set(rnd: random.Random) -> list[dict[str, Any]]:
    """A few of the built-in rules, with drawn bounds, each enforced or dry-run."""
    templates: list[dict[str, Any]] = [
        {"type": "topic.name", "pattern": NAMING},
        {"type": "partitions", "min": rnd.randint(1, 4), "max": rnd.randint(6, 60)},
        {"type": "replication.factor", "min": 1, "max": rnd.randint(1, 3)},
        {"type": "config", "config": "min.insync.replicas", "min": 1, "max": 2},
        {
            "type": "config",
            "config": "cleanup.policy",
            "allowed": rnd.choice([["delete"], ["delete", "compact"]]),
        },
        {"type": "config", "config": "retention.ms", "min": 60_000, "max": 604_800_000},
        {"type": "required.configs", "configs": ["retention.ms"]},
        {"type": "forbidden.configs", "configs": ["unclean.leader.election.enable"]},
        {
            "type": "protected.topics",
            "topics": [r"secret\..*"],
            "allowed.principals": ["User:admin"],
        },
    ]
    rules = []
    for index, template in enumerate(templates):
        if rnd.random() < 0.65:
            mode = "dry-run" if rnd.random() < 0.3 else "enforce"
            rules.append({"name": f"r{index}-{template['type']}", "mode": mode, **template})
    return rules


CONFIG_VALUES: dict[str, list[str]] = {
    "retention.ms": ["3600000", "1", "abc", "９９", "86400000000"],
    "cleanup.policy": ["delete", "compact", "delete,compact", "bogus"],
    "min.insync.replicas": ["1", "2", "3"],
    "unclean.leader.election.enable": ["true", "false"],
    "record.validation.policy": ["key-required", "nonsense:1"],
    "message.timestamp.type": ["CreateTime", "Zeit⏱"],
}


@dataclass(frozen=True)
class Case:
    spec: ct.TopicSpec
    offline_counts: tuple[int, int]
    """The counts ``kpg policy check`` is given: a -1 as the broker's default."""


def topic_cases(rnd: random.Random, token: str, audit_topic: str) -> list[Case]:
    defaults = (
        TEST_BROKER_DEFAULTS["num.partitions"],
        TEST_BROKER_DEFAULTS["default.replication.factor"],
    )
    cases = []
    for i in range(CASES_PER_SEED):
        name = rnd.choice(
            [
                f"team.o{token}{i}.v1",
                f"team.o{token}{i}.v1",
                f"Odd_Name{token}{i}",
                f"tópico{token}{i}",
                f"a..b{token}{i}",
                f"secret.{token}{i}",
                ".",
                "x" * 250,
                f"{token}{i}" + "y" * (249 - len(f"{token}{i}")),
                audit_topic,
            ]
        )
        partitions = rnd.choice([1, 3, 12, 100, -1, 0])
        replication = rnd.choice([1, 2, 3, -1])
        configs = tuple(
            (key, rnd.choice(values))
            for key, values in CONFIG_VALUES.items()
            if rnd.random() < 0.35
        )
        spec = ct.TopicSpec(
            name=name,
            num_partitions=partitions,
            replication_factor=replication,
            assignments=(),
            configs=configs,
        )
        offline = (
            defaults[0] if partitions == -1 else partitions,
            defaults[1] if replication == -1 else replication,
        )
        cases.append(Case(spec=spec, offline_counts=offline))
    # a name drawn twice is one CreateTopics naming a topic twice: keep the first
    unique: dict[str, Case] = {}
    for case in cases:
        unique.setdefault(case.spec.name, case)
    return list(unique.values())


Rows = list[tuple[str, str]]


def counts(case: Case) -> tuple[int, int]:
    return case.spec.num_partitions, case.spec.replication_factor


def live(gw: GatewayThread, spec: ct.TopicSpec, *, validate_only: bool) -> ItemError:
    """The gateway's answer to a CreateTopics v4 of ``spec`` (v4: the first with -1)."""
    host, _, port = gw.bootstrap.rpartition(":")
    frame = ct.build_request(
        [spec], validate_only=validate_only, timeout_ms=10_000, correlation_id=7, client_id="judges"
    )
    return ct.read_answer(4, exchange(host, int(port), frame, 10.0))[spec.name]


def live_versions(gw: GatewayThread, spec: ct.TopicSpec) -> dict[int, tuple[int, str | None]]:
    """The gateway's answer to a validate_only CreateTopics of ``spec`` in v1 (before -1 was
    the broker's default for clients, KIP-464; the gateway and Kafka's controllers resolve it
    in every version), v3 and v7: (code, message without the audit request id)."""
    host, _, port = gw.bootstrap.rpartition(":")
    payload = v2.CreateTopicsRequest(
        topics=(
            v2.CreatableTopic(
                name=TopicName(spec.name),
                num_partitions=i32(spec.num_partitions),
                replication_factor=i16(spec.replication_factor),
                assignments=(),
                configs=tuple(v2.CreatableTopicConfig(name=k, value=v) for k, v in spec.configs),
            ),
        ),
        timeout=i32Timedelta.parse(timedelta(seconds=10)),
        validate_only=True,
    )
    client = RawClient(gw.bootstrap)
    try:
        client.send_bytes(encode_legacy_request(1, 11, "judges", payload))
        [(_, code, message)] = _read_legacy(client.recv_frame(), 1)
    finally:
        client.close()
    found = {1: (code, split_request_id(message)[0])}
    for version in (3, 7):
        frame = ct.build_request(
            [spec],
            validate_only=True,
            timeout_ms=10_000,
            correlation_id=7,
            client_id="judges",
            version=version,
        )
        answer = ct.read_answer(version, exchange(host, int(port), frame, 10.0))[spec.name]
        found[version] = (answer.error_code, split_request_id(answer.error_message)[0])
    return found


def live_rows(spec: ct.TopicSpec, answer: ItemError) -> Rows:
    return [(r.verdict, r.message) for r in tools.answer_rows(spec, answer)]


def table_rows(table: str) -> dict[str, Rows]:
    """A tool's table, by topic: (verdict, message) per row."""
    found: dict[str, Rows] = {}
    for line in table.splitlines()[1:]:
        topic, _partitions, _rf, verdict, *message = line.split(maxsplit=4)
        found.setdefault(topic, []).append((verdict, message[0] if message else ""))
    return found


def run_tool(command: Any, **args: Any) -> tuple[int, dict[str, Rows]]:
    out = io.StringIO()
    code = command(argparse.Namespace(**args), out)
    return code, table_rows(out.getvalue())


def manifest(path: Path, cases: Sequence[Case]) -> Path:
    topics = [
        {
            "name": c.spec.name,
            "partitions": c.offline_counts[0],
            "replication_factor": c.offline_counts[1],
            "configs": dict(c.spec.configs),
        }
        for c in cases
    ]
    path.write_text(yaml.safe_dump({"topics": topics}, allow_unicode=True), encoding="utf-8")
    return path


@pytest.fixture(params=SEEDS, ids=[f"seed{s}" for s in SEEDS])
def judged(
    request: pytest.FixtureRequest, broker: HostPort, tmp_path: Path
) -> Iterator[tuple[GatewayThread, Path, list[Case]]]:
    rnd = random.Random(request.param)
    policies = {"rules": rule_set(rnd)}
    audit = {"topic": f"_kpg_audit_{request.param}", "spool_dir": str(tmp_path / "spool")}
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({"policies": policies, "audit": {"topic": audit["topic"]}}))
    token = uuid.uuid4().hex[:6]
    cases = topic_cases(rnd, token, audit["topic"])
    gw = GatewayThread(gateway_config(broker, policies=policies, audit=audit)).start()
    try:
        yield gw, config, cases
    finally:
        gw.stop()


def test_live_gateway_dry_run_and_policy_check_agree(
    judged: tuple[GatewayThread, Path, list[Case]], tmp_path: Path
) -> None:
    gw, config, cases = judged
    answers = {c.spec.name: live(gw, c.spec, validate_only=True) for c in cases}

    # kpg policy check: every case but a count of 0 (a manifest's counts are at least 1), a
    # -1 as the broker's default the gateway resolved
    offline_code, offline = run_tool(
        tools.cmd_policy_check,
        config=config,
        manifest=manifest(tmp_path / "offline.yaml", [c for c in cases if 0 not in counts(c)]),
        principal=None,
    )
    # kpg dry-run: what a manifest can say (counts of at least 1), and a 0 by --topic
    in_manifest = [c for c in cases if min(c.spec.num_partitions, c.spec.replication_factor) >= 1]
    flags = [
        c
        for c in cases
        if min(c.spec.num_partitions, c.spec.replication_factor) == 0
        and not any("," in v or ":" in v for _, v in c.spec.configs if v is not None)
        and ":" not in c.spec.name
    ]
    dry_code, dry = run_tool(
        tools.cmd_dry_run,
        bootstrap_server=gw.bootstrap,
        topic=[
            f"{c.spec.name}:{c.spec.num_partitions}:{c.spec.replication_factor}:"
            + ",".join(f"{k}={v}" for k, v in c.spec.configs)
            for c in flags
        ],
        manifest=manifest(tmp_path / "dry.yaml", in_manifest) if in_manifest else None,
        timeout=10.0,
        command_config=None,
    )

    for case in cases:
        spec, answer = case.spec, answers[case.spec.name]
        expected = live_rows(spec, answer)
        if 0 not in counts(case):
            assert offline[spec.name] == expected, spec
        if case in in_manifest or case in flags:
            assert dry[spec.name] == expected, spec

    refused = any(v not in ("allowed", "would-deny") for rows in offline.values() for v, _ in rows)
    assert offline_code == (1 if refused else 0)
    assert dry_code == (
        1
        if any(v not in ("allowed", "would-deny") for rows in dry.values() for v, _ in rows)
        else 0
    )

    # Every version the gateway takes judges alike.
    for case in cases:
        answer = answers[case.spec.name]
        expected = (answer.error_code, split_request_id(answer.error_message)[0])
        assert set(live_versions(gw, case.spec).values()) == {expected}, case.spec

    # A real CreateTopics gets the dry run's verdict; its message is the denial's, and a
    # success carries no dry-run notes.
    for case in cases:
        if len(case.spec.name) > 200:
            continue  # not created on the test broker: the verdict is the dry run's above
        real = live(gw, case.spec, validate_only=False)
        dry_run = answers[case.spec.name]
        assert real.error_code == dry_run.error_code, case.spec
        if real.error_code == 0:
            assert real.error_message is None
        else:
            assert (
                split_request_id(real.error_message)[0]
                == split_request_id(dry_run.error_message)[0]
            )


def test_a_zero_count_is_sent_as_zero_not_as_the_brokers_default(
    gateway: GatewayThread,
) -> None:
    """``kpg dry-run --topic name:0:1`` asked the gateway about -1 partitions (the broker's
    default, 3 here) and printed it allowed; the gateway refuses 0 (INVALID_PARTITIONS)."""
    name = f"zero-{uuid.uuid4().hex[:8]}"
    code, rows = run_tool(
        tools.cmd_dry_run,
        bootstrap_server=gateway.bootstrap,
        topic=[f"{name}:0:1"],
        manifest=None,
        timeout=10.0,
        command_config=None,
    )
    spec = ct.TopicSpec(
        name=name, num_partitions=0, replication_factor=1, assignments=(), configs=()
    )
    assert rows[name] == live_rows(spec, live(gateway, spec, validate_only=True))
    assert rows[name][0][0] == "INVALID_PARTITIONS" and code == 1


def test_policy_check_refuses_what_the_gateway_refuses_before_any_policy(
    gateway: GatewayThread, tmp_path: Path
) -> None:
    """An illegal name, the gateway's own topic and a record.validation.policy it cannot
    apply were ``allowed`` offline; the gateway answers INVALID_TOPIC_EXCEPTION,
    POLICY_VIOLATION (rule gateway-topics) and INVALID_CONFIG."""
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({"policies": {"rules": []}, "audit": {"topic": "_kpg_own"}}))
    cases = [
        Case(
            spec=ct.TopicSpec(
                name=n, num_partitions=1, replication_factor=1, assignments=(), configs=c
            ),
            offline_counts=(1, 1),
        )
        for n, c in [
            ("tópico", ()),
            ("..", ()),
            ("_kpg_own", ()),
            (f"rvp-{uuid.uuid4().hex[:6]}", (("record.validation.policy", "nonsense:1"),)),
        ]
    ]
    code, rows = run_tool(
        tools.cmd_policy_check,
        config=config,
        manifest=manifest(tmp_path / "m.yaml", cases),
        principal=None,
    )
    verdicts = {name: [v for v, _ in r] for name, r in rows.items()}
    assert verdicts == {
        "tópico": ["INVALID_TOPIC_EXCEPTION"],
        "..": ["INVALID_TOPIC_EXCEPTION"],
        "_kpg_own": ["DENIED"],
        cases[3].spec.name: ["INVALID_CONFIG"],
    }
    assert code == 1
    for case in (cases[0], cases[1], cases[3]):
        assert rows[case.spec.name] == live_rows(
            case.spec, live(gateway, case.spec, validate_only=True)
        )


def test_a_topic_listed_twice_is_bad_input_to_both_tools(tmp_path: Path) -> None:
    """The gateway answers a CreateTopics naming a topic twice INVALID_REQUEST for it; the
    offline check judged each entry alone and printed it allowed twice."""
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({"policies": {"rules": []}}))
    spec = ct.TopicSpec(
        name="twice", num_partitions=1, replication_factor=1, assignments=(), configs=()
    )
    path = manifest(tmp_path / "m.yaml", [Case(spec=spec, offline_counts=(1, 1))] * 2)
    assert (
        tools.cmd_policy_check(
            argparse.Namespace(config=config, manifest=path, principal=None), io.StringIO()
        )
        == 2
    )
    dry = argparse.Namespace(
        bootstrap_server="127.0.0.1:9",
        topic=["twice:1:1"],
        manifest=path,
        timeout=1.0,
        command_config=None,
    )
    assert tools.cmd_dry_run(dry, io.StringIO()) == 2


def test_dry_run_fits_its_requests_to_the_gateways_item_limit(
    broker: HostPort, tmp_path: Path
) -> None:
    """A gateway whose ``judged.request.max.items`` is below ``kpg dry-run``'s 1,000 refuses
    a larger manifest whole (every topic DENIED by the limit), where the offline check judged
    each; the tool now sends the topics again in requests of the gateway's limit."""
    policies = {"rules": [{"name": "partition-count", "type": "partitions", "max": 5}]}
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({"policies": policies}))
    token = uuid.uuid4().hex[:6]
    cases = [
        Case(
            spec=ct.TopicSpec(
                name=f"lim{token}{i}",
                num_partitions=partitions,
                replication_factor=1,
                assignments=(),
                configs=(),
            ),
            offline_counts=(partitions, 1),
        )
        for i, partitions in enumerate([1, 9, 3, 12, 2])
    ]
    path = manifest(tmp_path / "m.yaml", cases)
    gw = GatewayThread(
        gateway_config(broker, policies=policies, limits={"judged.request.max.items": 2})
    ).start()
    try:
        dry_code, dry = run_tool(
            tools.cmd_dry_run,
            bootstrap_server=gw.bootstrap,
            topic=[],
            manifest=path,
            timeout=10.0,
            command_config=None,
        )
    finally:
        gw.stop()
    offline_code, offline = run_tool(
        tools.cmd_policy_check, config=config, manifest=path, principal=None
    )
    assert dry == offline
    assert [v for rows in dry.values() for v, _ in rows] == [
        "allowed",
        "DENIED",
        "allowed",
        "DENIED",
        "allowed",
    ]
    assert dry_code == offline_code == 1


def test_policy_check_loads_the_record_validator_only_for_a_topic_that_names_it(
    tmp_path: Path,
) -> None:
    """A record validator the check cannot load (here: a class that does not exist; in CI,
    a schema registry password file that is not there) keeps the gateway from starting, so a
    manifest setting record.validation.policy is bad configuration (exit 2); one that does
    not set it is judged by the rules alone."""
    config = tmp_path / "gateway.yaml"
    policies = {"record.validation.policy.class.name": "nowhere.Validator", "rules": []}
    config.write_text(yaml.safe_dump({"policies": policies}))
    plain = ct.TopicSpec(
        name="plain", num_partitions=1, replication_factor=1, assignments=(), configs=()
    )
    named = ct.TopicSpec(
        name="named",
        num_partitions=1,
        replication_factor=1,
        assignments=(),
        configs=(("record.validation.policy", "key-required"),),
    )
    code, rows = run_tool(
        tools.cmd_policy_check,
        config=config,
        manifest=manifest(tmp_path / "plain.yaml", [Case(spec=plain, offline_counts=(1, 1))]),
        principal=None,
    )
    assert (code, rows) == (0, {"plain": [("allowed", "")]})
    code, rows = run_tool(
        tools.cmd_policy_check,
        config=config,
        manifest=manifest(tmp_path / "named.yaml", [Case(spec=named, offline_counts=(1, 1))]),
        principal=None,
    )
    assert (code, rows) == (2, {})
