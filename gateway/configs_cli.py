"""``kpg configs``: dynamic client configs per user and client-id, as kafka-configs.sh shows
them (seed 003), through a running gateway.

It speaks Kafka's protocol to the gateway (plaintext, or TLS and SASL as
``--command-config`` says: :mod:`gateway.client_security`), which keeps these configs itself:
DescribeConfigs (v4, with synonyms) for ``--describe`` and IncrementalAlterConfigs (v1: SET
for ``--add-config``, DELETE for ``--delete-config``) for ``--alter``, on the gateway's
USER_CLIENT resource ``user:client-id`` (CLIENT, the connection's own user, for
``--describe`` of a client-id alone). The type codes must be the gateway's
(``--client-codes``, default: :class:`gateway.client_configs.ClientConfigCodes`).

``--describe`` with an entity type left unnamed describes every entity of it, as
kafka-configs.sh does: ListConfigResources (v1) for the gateway's type lists the entities,
then one DescribeConfigs describes them, printed one after the other as a named describe
prints one (``--entity-type users``: every user's default; with ``--entity-type clients``:
every user's client-ids; ``--entity-type clients`` alone: the connection's own user's).

Messages are kafka-configs.sh's: after an alter, "Completed updating config for user alice."
(the first entity type given and its name; "Completed updating default config for clients in
the cluster." when that one is an --entity-default).

Quota keys are refused before anything is sent: kafka-configs.sh sends them with
AlterClientQuotas, which this command does not. Exit codes: 0 done, 1 the gateway refused
(its error message on stderr), 2 bad input or no answer.

What the gateway answers is printed with every character that is not printable escaped
(:func:`gateway.tools.printable`): any client may name its own client-id entity, so a name
(or an error message quoting one) could otherwise move the operator's cursor or add lines.
"""

from __future__ import annotations

import argparse
import enum
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TextIO

from protocol import client_configs as wire
from protocol import list_config_resources as lcr
from protocol.alter_configs import DELETE, SET
from protocol.codec import Undecodable
from protocol.framing import FrameRejected

from .client_configs import QUOTA_KEYS, ClientConfigCodes, parse_user_client, quota_message
from .client_security import (
    COMMAND_CONFIG_HELP,
    AuthenticationFailed,
    CommandConfigError,
    Connection,
    connect,
    load_command_config,
    unreachable_hint,
)
from .config import ConfigError, parse_host_port
from .tools import printable

_EXAMPLES: Final = """\
examples:
  kpg configs --bootstrap-server localhost:9092 --alter \\
      --entity-type users --entity-name alice \\
      --add-config acks=-1,session.timeout.ms=11000
  kpg configs --bootstrap-server localhost:9092 --alter \\
      --entity-type users --entity-name alice --entity-type clients --entity-name app-1 \\
      --add-config 'acks=0,partition.assignment.strategy=[range,cooperative-sticky]'
  kpg configs --bootstrap-server localhost:9092 --describe --user alice --client app-1
  kpg configs --bootstrap-server localhost:9092 --alter --user alice --delete-config acks
  kpg configs --bootstrap-server localhost:9092 --describe --entity-type users
  kpg configs --bootstrap-server gateway:9093 --command-config client-ssl.properties \\
      --describe --entity-type users --entity-name alice --entity-type clients
"""

_ADD_CONFIG_FORMAT: Final = (
    'Invalid entity config: all configs to be added must be in the format "key=val" or '
    '"key=[val1,val2]".'
)
_CLIENT_ID: Final = "kpg-configs"
_SPLIT_OUTSIDE_BRACKETS: Final = re.compile(r",(?=[^\]]*(?:\[|$))")
_EQUALS: Final = re.compile(r"\s*=\s*")


class UsageError(ValueError):
    """Command-line input the command cannot act on (exit 2)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """The config resource a command line names."""

    resource_type: int
    resource_name: str
    user: str | None
    """None: a CLIENT resource, whose user the gateway takes from the connection."""
    client_id: str
    """"": the user's default."""
    head: tuple[str, str | None] = ("users", None)
    """The first entity type on the command line and its name (None: --entity-default), which
    kafka-configs.sh's message after an alter names."""

    def heading(self, all_configs: bool = False) -> str:
        """kafka-configs.sh's line before the entries."""
        kind = "All" if all_configs else "Dynamic"
        if self.user is None:
            return f"{kind} configs for client {self.client_id} are:"
        if self.client_id == "":
            return f"{kind} configs for user {self.user} are:"
        return f"{kind} configs for user {self.user}:{self.client_id} are:"

    def altered(self) -> str:
        """kafka-configs.sh's line after a successful alter: it names the first entity type
        given and its name, and says "default" only for --entity-default there."""
        kind, name = self.head
        if name is None:
            return f"Completed updating default config for {kind} in the cluster."
        return f"Completed updating config for {kind[:-1]} {name}."


class _Entity(argparse.Action):
    """Collects --entity-type/--entity-name/--entity-default (and the --user/--client
    shorthands) in command-line order, as kafka-configs.sh pairs them."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        entities = list(getattr(namespace, "entities", None) or [])
        value = values if isinstance(values, str) else None
        if self.const == "user":
            entities += [("type", "users"), ("name", value)]
        elif self.const == "client":
            entities += [("type", "clients"), ("name", value)]
        else:
            entities.append((self.const, value))
        namespace.entities = entities


def add_configs_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "configs",
        help="describe or alter dynamic client configs per user and client-id via a gateway",
        description=(
            "Describe or alter dynamic client configs, kept by the gateway per user (a default\n"
            "for all the user's clients) and per client-id (overriding the default), in\n"
            "kafka-configs.sh's words. Only the dynamic client configs the gateway supports;\n"
            "quotas are managed with kafka-configs.sh against the cluster. Exits 1 when the\n"
            "gateway refuses a change or a describe (its message printed), 2 on bad input or\n"
            "no usable answer from the gateway."
        ),
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--bootstrap-server", required=True, metavar="HOST:PORT", help="the gateway's address"
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--alter", action="store_true", help="change configs")
    action.add_argument("--describe", action="store_true", help="list configs")
    parser.set_defaults(entities=[])
    parser.add_argument(
        "--entity-type",
        action=_Entity,
        const="type",
        metavar="users|clients",
        help=(
            "users (then --entity-name USER) and optionally clients (then a client-id); "
            "with --describe, a type with no name after it means every entity of it"
        ),
    )
    parser.add_argument(
        "--entity-name", action=_Entity, const="name", metavar="NAME", help="names the type before"
    )
    parser.add_argument(
        "--entity-default",
        action=_Entity,
        const="default",
        nargs=0,
        help="after --entity-type clients: the user's default (same as no clients entity)",
    )
    parser.add_argument(
        "--user",
        action=_Entity,
        const="user",
        metavar="USER",
        help="same as --entity-type users --entity-name USER",
    )
    parser.add_argument(
        "--client",
        action=_Entity,
        const="client",
        metavar="CLIENT_ID",
        help="same as --entity-type clients --entity-name CLIENT_ID",
    )
    parser.add_argument(
        "--add-config",
        metavar="K=V,...",
        help="configs to set: k1=v1,k2=[v1,v2,v3] (brackets for list values)",
    )
    parser.add_argument("--delete-config", metavar="K,...", help="configs to remove: k1,k2")
    parser.add_argument(
        "--all",
        action="store_true",
        help="with --describe: also the defaults a client-id inherits from its user",
    )
    parser.add_argument(
        "--client-codes",
        metavar="KEY=CODE,...",
        help=(
            "the gateway's codes if not the defaults: client_type, user_client_type, "
            "dynamic_client_source, dynamic_default_client_source"
        ),
    )
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for each answer (default: 30)"
    )
    parser.add_argument("--command-config", type=Path, metavar="FILE", help=COMMAND_CONFIG_HELP)
    parser.set_defaults(func=cmd_configs)


def parse_codes(text: str | None) -> ClientConfigCodes:
    """:raises UsageError:"""
    if not text:
        return ClientConfigCodes()
    raw: dict[str, object] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"-?[0-9]+", value.strip()):
            raise UsageError(f"--client-codes: expected KEY=NUMBER, got {item!r}")
        raw[key.strip()] = int(value)
    try:
        return ClientConfigCodes.from_mapping(raw, key_prefix="--client-codes ")
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def target_of(entities: Sequence[tuple[str, str | None]], codes: ClientConfigCodes) -> Target:
    """The resource named by the entity options, in command-line order.

    :raises UsageError:
    """
    named = {k: v for k, v in _named_entities(entities).items() if not isinstance(v, _Every)}
    head = next(iter(named.items()))
    if "users" in named:
        user = named["users"]
        if user is None:
            raise UsageError(
                "dynamic client configs are kept per user, with no default across users: "
                "--entity-type users needs --entity-name"
            )
        client_id = named.get("clients") or ""
        if ":" in client_id:
            raise UsageError(
                f"client-id {client_id!r} holds a colon: the gateway splits user:client-id at "
                f"the last colon, so {user}:{client_id} names another user's entity; a client "
                "with that id reads its configs as CLIENT, through its own connection"
            )
        return Target(
            resource_type=codes.user_client_type,
            resource_name=f"{user}:{client_id}",
            user=user,
            client_id=client_id,
            head=head,
        )
    client = named["clients"]
    if client is None:
        raise UsageError("--entity-type clients --entity-default needs --entity-type users")
    return Target(
        resource_type=codes.client_type,
        resource_name=client,
        user=None,
        client_id=client,
        head=head,
    )


class _Every(enum.Enum):
    ENTITY = "every entity"


EVERY: Final = _Every.ENTITY
"""An --entity-type with no name after it, in a --describe: every entity of the type."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Listing:
    """What a --describe with an entity type left unnamed asks for: the entities of
    ``resource_type`` the gateway lists (ListConfigResources) whose user and client-id match
    (a name, "" for the user's default, or :data:`EVERY`)."""

    resource_type: int
    user: str | _Every | None
    """None: the CLIENT type, the connection's own user."""
    client_id: str | _Every

    def targets(self, listed: Sequence[tuple[int, str]], codes: ClientConfigCodes) -> list[Target]:
        """The listed resources this listing wants, as targets, in the gateway's order."""
        found = []
        for resource_type, name in listed:
            if resource_type != self.resource_type:
                continue
            if self.user is None:
                found.append(
                    Target(
                        resource_type=resource_type, resource_name=name, user=None, client_id=name
                    )
                )
                continue
            try:
                entity = parse_user_client(name)
            except ValueError:
                continue
            if self.user is not EVERY and entity.user != self.user:
                continue
            if self.client_id is EVERY:
                if entity.client_id == "":
                    continue
            elif entity.client_id != self.client_id:
                continue
            found.append(
                Target(
                    resource_type=resource_type,
                    resource_name=name,
                    user=entity.user,
                    client_id=entity.client_id,
                )
            )
        return found


def listing_of(
    entities: Sequence[tuple[str, str | None]], codes: ClientConfigCodes
) -> Listing | None:
    """For a --describe: the listing its entity options ask for when an entity type is left
    unnamed (as kafka-configs.sh then describes every entity of it); None when every type is
    named (then :func:`target_of`).

    ``users`` alone: every user's default; ``users`` and ``clients``: every user's client-ids
    (either one may be named); ``clients`` alone: the connection's own user's client-ids.

    :raises UsageError:
    """
    named = _named_entities(entities, every=True)
    if EVERY not in named.values():
        return None
    if "users" not in named:
        return Listing(resource_type=codes.client_type, user=None, client_id=EVERY)
    user = named["users"]
    if user is None:
        raise UsageError(
            "dynamic client configs are kept per user, with no default across users: "
            "--entity-type users takes --entity-name, or nothing to describe every user"
        )
    client = named.get("clients", "")
    return Listing(
        resource_type=codes.user_client_type,
        user=user,
        client_id="" if client is None else client,
    )


def _named_entities(
    entities: Sequence[tuple[str, str | None]], every: bool = False
) -> dict[str, str | None | _Every]:
    """Entity type -> entity name (None for --entity-default), each type paired with the
    name or default option that follows it; with ``every`` (a --describe), a type followed by
    no name is :data:`EVERY`.

    :raises UsageError:
    """
    named: dict[str, str | None | _Every] = {}
    pending: str | None = None
    for kind, value in entities:
        if kind == "type":
            if every and pending is not None:
                named[pending] = EVERY
                pending = None
            _check_entity_type(value, pending, named)
            pending = value
            continue
        if pending is None:
            option = "--entity-name" if kind == "name" else "--entity-default"
            raise UsageError(f"{option} must follow an --entity-type")
        if kind == "name" and not value:
            raise UsageError(f"--entity-type {pending}: the entity name is empty")
        named[pending] = value if kind == "name" else None
        pending = None
    if pending is not None and every:
        named[pending] = EVERY
    elif pending is not None:
        raise UsageError(f"--entity-type {pending} needs --entity-name or --entity-default")
    if not named:
        raise UsageError("name the entity: --entity-type users --entity-name USER")
    return named


def _check_entity_type(value: str | None, pending: str | None, named: Mapping[str, object]) -> None:
    """:raises UsageError: unless ``--entity-type value`` may come next."""
    if pending is not None:
        raise UsageError(f"--entity-type {pending} needs --entity-name or --entity-default")
    if value not in ("users", "clients"):
        raise UsageError(
            f"--entity-type {value}: kpg configs handles dynamic client configs, "
            "entity types users and clients (use kafka-configs.sh for the others)"
        )
    if value in named:
        raise UsageError(f"--entity-type {value} is given twice")


def parse_add_config(text: str) -> list[tuple[str, str]]:
    """kafka-configs.sh's --add-config: ``k1=v1,k2=[v1,v2]`` (commas inside brackets stay
    in the value; the brackets go).

    :raises UsageError:
    """
    pairs = []
    for item in _SPLIT_OUTSIDE_BRACKETS.split(text):
        parts = _EQUALS.split(item)
        if len(parts) != 2 or not parts[0].strip():
            raise UsageError(_ADD_CONFIG_FORMAT)
        pairs.append((parts[0].strip(), re.sub(r"[\[\]]", "", parts[1]).strip()))
    return pairs


def parse_delete_config(text: str) -> list[str]:
    return [key.strip() for key in text.split(",") if key.strip()]


def alter_operations(
    add_config: str | None, delete_config: str | None
) -> list[tuple[str, int, str | None]]:
    """The IncrementalAlterConfigs operations: SET per added key, DELETE per deleted key.

    :raises UsageError: for neither, a malformed --add-config, a key both added and
        deleted, or a quota key.
    """
    added = parse_add_config(add_config) if add_config is not None else []
    deleted = parse_delete_config(delete_config) if delete_config is not None else []
    if not added and not deleted:
        raise UsageError(
            "At least one of --add-config or --delete-config must be specified with --alter"
        )
    both = sorted({k for k, _ in added} & set(deleted))
    if both:
        raise UsageError(f"a config cannot be both added and deleted: {', '.join(both)}")
    quotas = [k for k, _ in added if k in QUOTA_KEYS] + [k for k in deleted if k in QUOTA_KEYS]
    if quotas:
        raise UsageError(quota_message(quotas[0]))
    return [(k, SET, v) for k, v in added] + [(k, DELETE, None) for k in deleted]


def format_description(
    target: Target,
    resource: wire.DescribedResource,
    codes: ClientConfigCodes,
    all_configs: bool = False,
) -> list[str]:
    """kafka-configs.sh's --describe lines for one resource.

    As kafka-configs.sh does for brokers, only the entity's own configs are listed (source
    DYNAMIC_CLIENT_CONFIG for a client-id, DYNAMIC_DEFAULT_CLIENT_CONFIG for the user's
    default), each with its synonyms; ``all_configs`` (``--all``) lists every config the
    gateway reports, inherited defaults included.
    """
    own_source = (
        codes.dynamic_default_client_source
        if target.user is not None and target.client_id == ""
        else codes.dynamic_client_source
    )
    lines = [target.heading(all_configs)]
    for c in resource.configs:
        if not all_configs and c.source != own_source:
            continue
        synonyms = ", ".join(
            f"{codes.source_name(s.source)}:{s.name}={_shown(s.value)}" for s in c.synonyms
        )
        lines.append(
            f"  {c.name}={_shown(c.value)} sensitive={str(c.is_sensitive).lower()} "
            f"synonyms={{{synonyms}}}"
        )
    return lines


def _shown(value: str | None) -> str:
    return "null" if value is None else value


def format_error(error_code: int, error_message: str | None) -> str:
    message = f": {error_message}" if error_message else ""
    return f"{wire.error_name(error_code)} ({error_code}){message}"


def cmd_configs(args: argparse.Namespace, out: TextIO | None = None) -> int:
    # sys.stdout as it is now, not as it was when this module was imported
    out = sys.stdout if out is None else out
    try:
        codes = parse_codes(args.client_codes)
        listing = listing_of(args.entities, codes) if args.describe else None
        target = target_of(args.entities, codes) if listing is None else None
        address = parse_host_port(args.bootstrap_server, "--bootstrap-server", "command line")
        security = load_command_config(args.command_config)
        if args.describe and (args.add_config is not None or args.delete_config is not None):
            raise UsageError("--add-config and --delete-config go with --alter")
        frame = _request_frame(args, target) if target is not None else b""
    except (UsageError, ConfigError, CommandConfigError) as exc:
        print(f"kpg configs: {exc}", file=sys.stderr)
        return 2
    try:
        with connect(address.host, address.port, args.timeout, security, _CLIENT_ID) as link:
            if listing is not None:
                return _describe_every(link, listing, codes, args.all, out)
            assert target is not None
            return _one_entity(link, frame, target, codes, args, out)
    except AuthenticationFailed as exc:
        print(f"kpg configs: {address}: {exc}", file=sys.stderr)
        return 2
    except (OSError, Undecodable, FrameRejected) as exc:
        hint = unreachable_hint(security, exc)
        print(f"kpg configs: no usable answer from {address}: {exc}{hint}", file=sys.stderr)
        return 2


def _one_entity(
    link: Connection,
    frame: bytes,
    target: Target,
    codes: ClientConfigCodes,
    args: argparse.Namespace,
    out: TextIO,
) -> int:
    """:raises OSError, Undecodable, FrameRejected:"""
    answer = link.request(frame)
    results: Sequence[wire.DescribedResource | wire.AlteredResource] = (
        wire.read_describe_response(answer)
        if args.describe
        else wire.read_incremental_alter_response(answer)
    )
    result = next(
        (
            r
            for r in results
            if (r.resource_type, r.resource_name) == (target.resource_type, target.resource_name)
        ),
        None,
    )
    if result is None:
        print(f"kpg configs: the answer lacks resource {target.resource_name!r}", file=sys.stderr)
        return 2
    if result.error_code != 0:
        print(
            f"kpg configs: {printable(format_error(result.error_code, result.error_message))}",
            file=sys.stderr,
        )
        return 1
    if isinstance(result, wire.DescribedResource):
        for line in format_description(target, result, codes, args.all):
            print(printable(line), file=out)
    else:
        print(target.altered(), file=out)
    return 0


def _describe_every(
    link: Connection, listing: Listing, codes: ClientConfigCodes, all_configs: bool, out: TextIO
) -> int:
    """Every entity the listing matches: ListConfigResources, then one DescribeConfigs for
    them all, printed entity by entity as a named --describe prints one.

    :raises OSError, Undecodable, FrameRejected:
    """
    code, listed = lcr.read_list_response(
        link.request(
            lcr.list_request([listing.resource_type], correlation_id=1, client_id=_CLIENT_ID)
        )
    )
    if code != 0:
        print(f"kpg configs: listing the entities: {format_error(code, None)}", file=sys.stderr)
        return 1
    targets = listing.targets(listed, codes)
    if not targets:
        return 0
    answer = link.request(
        wire.describe_request(
            [(t.resource_type, t.resource_name) for t in targets],
            correlation_id=2,
            client_id=_CLIENT_ID,
        )
    )
    described = {(r.resource_type, r.resource_name): r for r in wire.read_describe_response(answer)}
    status = 0
    for target in targets:
        result = described.get((target.resource_type, target.resource_name))
        if result is None or result.error_code != 0:
            why = (
                "no answer"
                if result is None
                else format_error(result.error_code, result.error_message)
            )
            print(printable(f"kpg configs: {target.resource_name}: {why}"), file=sys.stderr)
            status = 1
            continue
        for line in format_description(target, result, codes, all_configs):
            print(printable(line), file=out)
    return status


def _request_frame(args: argparse.Namespace, target: Target) -> bytes:
    """The DescribeConfigs (``--describe``) or IncrementalAlterConfigs (``--alter``) request.

    :raises UsageError:
    """
    if args.describe:
        return wire.describe_request(
            [(target.resource_type, target.resource_name)],
            correlation_id=1,
            client_id="kpg-configs",
        )
    operations: list[tuple[str, int, str | None]] = []
    if args.alter:
        if target.user is None:
            raise UsageError(
                "--alter needs --entity-type users --entity-name USER: dynamic client "
                "configs are kept per user"
            )
        operations = alter_operations(args.add_config, args.delete_config)
    return wire.incremental_alter_request(
        [(target.resource_type, target.resource_name, operations)],
        validate_only=False,
        correlation_id=1,
        client_id="kpg-configs",
    )
