"""``kpg dry-run`` and ``kpg policy check``: what a team runs before it creates topics.

- ``kpg dry-run`` sends CreateTopics with validate_only through a running gateway, so the
  cluster's policies (and the broker's own checks) answer, and nothing is created.
- ``kpg policy check`` evaluates the same manifest against a gateway config's policies with
  no cluster at all, for the CI pipeline of a topic repository.

Both print the same table, made by one function (:func:`verdict_rows`) from the same
violations: one row per violated rule, ``DENIED`` for an enforced rule, ``would-deny`` for a
dry-run one, or one ``allowed`` row. ``kpg policy check`` takes them from the policy chain's
decision; ``kpg dry-run`` from the gateway's answer, whose error message lists every violation
(:mod:`policies.violations`; a topic only dry-run rules object to is answered with success and
their message). Both exit 1 when any topic is denied (would-deny alone is 0), 2 on bad input.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

from policies import strict_yaml
from policies.api import CreateTopicRequestMetadata
from policies.loader import PolicyConfigError, flatten_configs, load_policy_chain
from policies.manifest import ManifestError, parse_manifest
from policies.violations import Violation, parse_message, split_request_id
from protocol import create_topics as ct
from protocol.codec import Undecodable
from protocol.framing import FrameRejected
from protocol.results import ItemError
from protocol.topic_names import illegal_topic

from .client_security import (
    COMMAND_CONFIG_HELP,
    AuthenticationFailed,
    ClientSecurity,
    CommandConfigError,
    load_command_config,
    unreachable_hint,
)
from .config import ConfigError, GatewayConfig, HostPort, load, parse_host_port
from .exchange import exchange

POLICY_VIOLATION_CODE = 44
_ERROR_NAMES = {
    0: "ok",
    36: "TOPIC_ALREADY_EXISTS",
    37: "INVALID_PARTITIONS",
    38: "INVALID_REPLICATION_FACTOR",
    17: "INVALID_TOPIC_EXCEPTION",
    40: "INVALID_CONFIG",
    42: "INVALID_REQUEST",
    44: "POLICY_VIOLATION",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    topic: str
    partitions: str
    replication_factor: str
    verdict: str
    message: str


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dry = sub.add_parser(
        "dry-run",
        help="validate topic creations through a running gateway (validate_only)",
        description=(
            "Send CreateTopics with validate_only=true through the gateway for the topics "
            "given with --topic or in a manifest and print every rule each topic breaks, one "
            "row per rule: DENIED (enforced) or would-deny (dry-run); allowed when none. "
            "Exits 1 when any topic is refused (would-deny alone: 0), 2 on bad input or no "
            "answer. Nothing is created."
        ),
    )
    dry.add_argument(
        "--bootstrap-server",
        required=True,
        metavar="HOST:PORT",
        help="the gateway's bootstrap address",
    )
    dry.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="NAME:PARTITIONS:RF[:k=v,...]",
        help="a topic to check; repeatable",
    )
    dry.add_argument(
        "manifest",
        nargs="?",
        type=Path,
        help="YAML manifest: topics: [{name, partitions, replication_factor, configs}]",
    )
    dry.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for the answer (default: 30)"
    )
    dry.add_argument("--command-config", type=Path, metavar="FILE", help=COMMAND_CONFIG_HELP)
    dry.set_defaults(func=cmd_dry_run)

    policy = sub.add_parser("policy", help="policy tools that need no cluster")
    policy_sub = policy.add_subparsers(dest="policy_command", required=True)
    check = policy_sub.add_parser(
        "check",
        help="check a topic manifest against a gateway config's policies, offline",
        description=(
            "Evaluate the manifest's topics against the policies of the gateway config, with no "
            "cluster, after what the gateway refuses before any policy (a name Kafka refuses, "
            "a record.validation.policy it cannot apply). Prints every rule each topic breaks, "
            "one row per rule, as kpg dry-run does: DENIED (enforced) or would-deny (dry-run); "
            "allowed when none; the error's name for a refused topic. Exits 1 when any topic "
            "is denied or refused (would-deny alone: 0), 2 on bad input."
        ),
    )
    check.add_argument("--config", required=True, type=Path, help="gateway YAML config")
    check.add_argument("manifest", type=Path, help="YAML manifest of topics")
    check.add_argument("--principal", help="check as this principal, e.g. User:alice")
    check.set_defaults(func=cmd_policy_check)


def _read_manifest(path: Path) -> dict[str, Any]:
    try:
        loaded = strict_yaml.load(path.read_bytes(), name=str(path))
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(loaded, dict):
        raise ManifestError(f"{path}: expected a mapping with a topics: list")
    return loaded


def _topic_flag(text: str) -> CreateTopicRequestMetadata:
    parts = text.split(":", 3)
    if len(parts) < 3 or not parts[1].isdigit() or not parts[2].isdigit():
        raise ManifestError(f"--topic {text!r}: expected NAME:PARTITIONS:RF[:key=value,...]")
    configs = {}
    if len(parts) == 4 and parts[3]:
        for item in parts[3].split(","):
            key, sep, value = item.partition("=")
            if not sep:
                raise ManifestError(f"--topic {text!r}: config {item!r} is not key=value")
            configs[key] = value
    return CreateTopicRequestMetadata(
        topic=parts[0],
        num_partitions=int(parts[1]),
        replication_factor=int(parts[2]),
        replicas_assignments=None,
        configs=configs,
    )


def verdict_rows(
    topic: str, partitions: object, replication_factor: object, violations: Sequence[Violation]
) -> list[Row]:
    """The rows of one topic: one per violation (``DENIED`` for an enforced rule,
    ``would-deny`` for a dry-run one), or one ``allowed`` row."""

    def row(verdict: str, message: str) -> Row:
        return Row(
            topic=topic,
            partitions=str(partitions),
            replication_factor=str(replication_factor),
            verdict=verdict,
            message=message,
        )

    if not violations:
        return [row("allowed", "")]
    return [row("DENIED" if v.outcome == "denied" else "would-deny", v.message) for v in violations]


def answer_rows(spec: ct.TopicSpec, result: ItemError | None) -> list[Row]:
    """The rows for the gateway's answer about one topic of a dry run."""
    if result is None:
        return [_error_row(spec, "error", "no answer for this topic")]
    message, _ = split_request_id(result.error_message)
    if result.error_code in (0, POLICY_VIOLATION_CODE):
        violations = parse_message(message)
        refused = result.error_code == POLICY_VIOLATION_CODE
        if refused and not any(v.outcome == "denied" for v in violations):
            # the gateway refused the topic: a message that reads otherwise (one from a
            # gateway that did not escape a client's text) is shown whole, as a denial
            violations = (Violation(outcome="denied", message=message or ""),)
        return verdict_rows(spec.name, spec.num_partitions, spec.replication_factor, violations)
    name = _ERROR_NAMES.get(result.error_code, f"error {result.error_code}")
    return [_error_row(spec, name, message or "")]


def _error_row(spec: ct.TopicSpec, verdict: str, message: str) -> Row:
    return Row(
        topic=spec.name,
        partitions=str(spec.num_partitions),
        replication_factor=str(spec.replication_factor),
        verdict=verdict,
        message=message,
    )


def _print_table(rows: Sequence[Row], out: TextIO) -> None:
    header = Row(
        topic="TOPIC",
        partitions="PARTITIONS",
        replication_factor="RF",
        verdict="VERDICT",
        message="MESSAGE",
    )
    table = [header, *rows]
    widths = [
        max(len(getattr(r, f)) for r in table)
        for f in ("topic", "partitions", "replication_factor", "verdict")
    ]
    for r in table:
        cells = (r.topic, r.partitions, r.replication_factor, r.verdict)
        line = "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True))
        print(f"{line}  {printable(r.message)}".rstrip(), file=out)


def printable(text: str) -> str:
    """``text`` with every character that is not printable (a new line, a terminal escape)
    written as a Python escape: a config value echoed in a rule's message can add no row to
    the table and move no cursor over a ``DENIED`` one."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


DRY_RUN_BATCH = 1000
"""Topics per CreateTopics of ``kpg dry-run``: the default of ``judged.request.max.items``."""

_ITEMS_LIMIT = re.compile(
    r"more than the (\d+) the gateway judges in one request \(limits: judged\.request\.max\.items\)"
)


def _items_limit(answer: Mapping[str, ItemError]) -> int | None:
    """The gateway's ``judged.request.max.items`` when it refused a request whole for
    naming more topics (every topic refused with that message); else None."""
    limits = {
        int(found.group(1)) if (found := _ITEMS_LIMIT.search(r.error_message or "")) else None
        for r in answer.values()
    }
    if len(limits) != 1:
        return None
    return limits.pop()


def _ask(
    address: HostPort, security: ClientSecurity, specs: Sequence[ct.TopicSpec], timeout: float
) -> dict[str, ItemError]:
    """The gateway's answer for each topic of a dry run.

    :raises OSError, AuthenticationFailed, FrameRejected, Undecodable: as :func:`exchange`.
    """
    results: dict[str, ItemError] = {}
    # in requests of at most DRY_RUN_BATCH topics: the gateway judges no more in one
    # (limits: judged.request.max.items, 1,000 by default); a gateway set lower refuses
    # the request whole, naming its limit, and the topics go again in requests that fit
    batches = [specs[i : i + DRY_RUN_BATCH] for i in range(0, len(specs), DRY_RUN_BATCH)]
    while batches:
        batch = batches.pop(0)
        frame = ct.build_request(
            batch,
            validate_only=True,
            timeout_ms=int(timeout * 1000),
            correlation_id=1,
            client_id="kpg-dry-run",
        )
        answer = ct.read_answer(
            4,
            exchange(
                address.host,
                address.port,
                frame,
                timeout,
                security,
                client_id="kpg-dry-run",
            ),
        )
        limit = _items_limit(answer)
        if limit is not None and 0 < limit < len(batch):
            batches[:0] = [batch[i : i + limit] for i in range(0, len(batch), limit)]
            continue
        results.update(answer)
    return results


def cmd_dry_run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    # sys.stdout as it is now, not as it was when this module was imported
    out = sys.stdout if out is None else out
    try:
        requests = [_topic_flag(t) for t in args.topic]
        if args.manifest is not None:
            requests += parse_manifest(_read_manifest(args.manifest), source=str(args.manifest))
        address = parse_host_port(args.bootstrap_server, "--bootstrap-server", "command line")
        security = load_command_config(args.command_config)
    except (ManifestError, ConfigError, CommandConfigError) as exc:
        print(f"kpg dry-run: {exc}", file=sys.stderr)
        return 2
    if not requests:
        print("kpg dry-run: no topics: give --topic or a manifest", file=sys.stderr)
        return 2
    names = [r.topic for r in requests]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        # one CreateTopics naming a topic twice is refused whole for that name (INVALID_REQUEST)
        print(f"kpg dry-run: topic {', '.join(twice)} given more than once", file=sys.stderr)
        return 2
    specs = [_spec(r) for r in requests]
    try:
        results = _ask(address, security, specs, args.timeout)
    except AuthenticationFailed as exc:
        print(f"kpg dry-run: {address}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        hint = unreachable_hint(security, exc)
        print(f"kpg dry-run: cannot reach {address}: {exc}{hint}", file=sys.stderr)
        return 2
    except (FrameRejected, Undecodable) as exc:
        print(
            f"kpg dry-run: {address} did not answer as a Kafka gateway: {exc}"
            f"{unreachable_hint(security, exc)}",
            file=sys.stderr,
        )
        return 2
    rows = [row for spec in specs for row in answer_rows(spec, results.get(spec.name))]
    _print_table(rows, out)
    request_ids = sorted(
        {i for r in results.values() if (i := split_request_id(r.error_message)[1]) is not None}
    )
    if request_ids:
        print(f"kpg dry-run: audit request id {', '.join(request_ids)}", file=sys.stderr)
    return 0 if all(r.verdict in ("allowed", "would-deny") for r in rows) else 1


def _spec(request: CreateTopicRequestMetadata) -> ct.TopicSpec:
    """A manifest's or ``--topic``'s topic as CreateTopics carries it: the counts as given
    (a 0 goes as 0, which Kafka refuses, never as -1, the broker's default)."""
    assert request.num_partitions is not None and request.replication_factor is not None
    return ct.TopicSpec(
        name=request.topic,
        num_partitions=request.num_partitions,
        replication_factor=request.replication_factor,
        assignments=(),
        configs=tuple(request.configs.items()),
    )


def cmd_policy_check(args: argparse.Namespace, out: TextIO | None = None) -> int:
    # sys.stdout as it is now, not as it was when this module was imported
    out = sys.stdout if out is None else out
    # Imported here, not with the module: kpg builds its parser from this module, and the
    # handlers import the record scanner, which reads KPG_RECORD_SCANNER on import (kpg run
    # refuses a bad value in one line, after the parser is built).
    from .handlers.create_topics import refusal
    from .server import own_topics_rule

    try:
        config = load(args.config)
        # judged as the gateway judges them: its own topics protected
        chain = load_policy_chain(
            config.policies, source=config.source, extra_rules=own_topics_rule(config)
        )
    except (ConfigError, PolicyConfigError) as exc:
        print(f"kpg policy check: configuration error: {exc}", file=sys.stderr)
        return 2
    with chain:
        try:
            requests = parse_manifest(_read_manifest(args.manifest), source=str(args.manifest))
            invalid_policy = _validation_policy_check(config, requests)
        except ManifestError as exc:
            print(f"kpg policy check: {exc}", file=sys.stderr)
            return 2
        except ConfigError as exc:
            print(f"kpg policy check: configuration error: {exc}", file=sys.stderr)
            return 2
        rows = []
        denied = False
        for request in requests:
            # what the gateway answers before any policy runs, as Kafka's controller does
            spec = _spec(request)
            refused = illegal_topic(spec.name) or refusal(spec, invalid_policy)
            if refused is not None:
                rows += answer_rows(spec, refused)
                denied = True
                continue
            decision = chain.check_create_topic(request, principal=args.principal)
            denied = denied or not decision.allowed
            rows += verdict_rows(
                request.topic,
                request.num_partitions,
                request.replication_factor,
                decision.violations,
            )
    _print_table(rows, out)
    return 1 if denied else 0


def _validation_policy_check(
    config: GatewayConfig, requests: Sequence[CreateTopicRequestMetadata]
) -> Callable[[str], ItemError | None]:
    """How the gateway checks a topic's record.validation.policy value: with the record
    validator ``config`` loads, loaded only when a topic sets the key (its plug-in or schema
    registry settings may need what a CI job does not have).

    :raises ConfigError: when the validator cannot be loaded (the gateway would not start).
    """
    from .handlers._validation_policy import invalid_value
    from .record_validation import VALIDATION_POLICY_KEY, load_record_validator

    if not any(VALIDATION_POLICY_KEY in r.configs for r in requests):
        return lambda value: None
    validator = load_record_validator(
        config.policies, flatten_configs(config.policies), config.source, config.limits
    )
    policy = validator.policy
    try:
        checked = {
            value: invalid_value(value, policy)
            for r in requests
            if (value := r.configs.get(VALIDATION_POLICY_KEY)) is not None
        }
    finally:
        try:
            policy.close()
        except Exception as exc:  # noqa: BLE001 - a plug-in's close: reported, not fatal
            print(f"kpg policy check: closing {validator.name}: {exc!r}", file=sys.stderr)
    return lambda value: checked.get(value)
