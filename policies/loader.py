"""Builds the policy chain from the ``policies:`` section of the gateway's configuration.

The section is a mapping already read from YAML. Plug-ins use Kafka's property names::

    create.topic.policy.class.name      alter.config.policy.class.name
    alter.config.v2.policy.class.name   topic.action.policy.class.name

each with an optional ``<prefix>.class.path`` (a directory searched first when importing the
``module.Class`` name; it is put at the front of ``sys.path``, as a Java class path is searched
before the broker's) and ``<prefix>.mode`` (``enforce``, the default, or ``dry-run``).
``policy.timeout.ms`` (default 5000) bounds each plug-in call and ``policy.threads``
(default 8) the threads that run them. ``rules:`` lists the built-in rules; see
``policies/example_rules.yaml`` for every kind.

As KIP-201 says, ``topic.action.policy`` cannot be combined with ``create.topic.policy`` or
``alter.config.policy``. Other keys are free for plug-ins to read: every plug-in's
``configure()`` gets the whole section flattened to strings (:func:`flatten_configs`).

Everything is checked once, at start-up; a problem raises :class:`PolicyConfigError`, whose
message names the file and the key.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import re2  # type: ignore[import-untyped]

from policies.api import (
    AlterConfigPolicy,
    AlterConfigV2Policy,
    CreateTopicPolicy,
    FrozenMap,
    TopicActionPolicy,
)
from policies.chain import Policy, PolicyChain, PolicyPlugin
from policies.rules import (
    BROKER_SYNONYMS,
    TOPIC_CONFIGS,
    BrokerConfigsRule,
    ConfigRule,
    ForbiddenConfigsRule,
    Mode,
    NamePattern,
    PartitionsRule,
    ProtectedTopicsRule,
    ReplicationFactorRule,
    RequiredConfigsRule,
    Rule,
    TopicNameRule,
)

__all__ = [
    "PluginSpec",
    "PolicyConfig",
    "PolicyConfigError",
    "build_policy_chain",
    "flatten_configs",
    "load_policy_chain",
    "parse_policy_config",
]

CREATE_TOPIC_POLICY: Final = "create.topic.policy"
ALTER_CONFIG_POLICY: Final = "alter.config.policy"
ALTER_CONFIG_V2_POLICY: Final = "alter.config.v2.policy"
TOPIC_ACTION_POLICY: Final = "topic.action.policy"
RECORD_VALIDATION_POLICY: Final = "record.validation.policy"
"""Its plug-in is loaded by the gateway's record validation, not by this chain."""

_PLUGIN_KINDS: Final[Mapping[str, type[Policy]]] = {
    CREATE_TOPIC_POLICY: CreateTopicPolicy,
    ALTER_CONFIG_POLICY: AlterConfigPolicy,
    ALTER_CONFIG_V2_POLICY: AlterConfigV2Policy,
    TOPIC_ACTION_POLICY: TopicActionPolicy,
}
_PLUGIN_SUFFIXES: Final = ("class.name", "class.path", "mode")
_TIMEOUT_KEY: Final = "policy.timeout.ms"
_THREADS_KEY: Final = "policy.threads"
_EXTRA_CONFIGS_KEY: Final = "policy.extra.topic.configs"
"""Topic config names the brokers take beyond Kafka's (a vendor's own), for the rules."""
_RULES_KEY: Final = "rules"

# KIP-201: the new policy covers what these old ones did, so they cannot be used together.
_CONFLICTS: Final = {
    CREATE_TOPIC_POLICY: "it covers topic creation",
    ALTER_CONFIG_POLICY: (
        "it covers topic config changes; for other resources use alter.config.v2.policy"
    ),
}


class PolicyConfigError(Exception):
    """A bad ``policies:`` section; the message names the file and the key."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PluginSpec:
    """One configured plug-in: ``prefix`` is Kafka's, such as ``create.topic.policy``."""

    prefix: str
    class_name: str
    class_path: str | None
    mode: Mode


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyConfig:
    """The ``policies:`` section, checked."""

    source: str
    plugins: tuple[PluginSpec, ...]
    rules: tuple[Rule, ...]
    timeout_s: float
    threads: int
    configs: Mapping[str, str]
    """The section flattened: what each plug-in's ``configure()`` receives."""

    def plugin(self, prefix: str) -> PluginSpec | None:
        return next((p for p in self.plugins if p.prefix == prefix), None)


def load_policy_chain(
    section: Mapping[str, object], *, source: str, extra_rules: Sequence[Rule] = ()
) -> PolicyChain:
    """Check the section, import and configure the plug-ins, and build the chain.

    ``extra_rules`` come first: rules the gateway itself needs (protecting its own topics).

    :raises PolicyConfigError: for any problem, plug-ins that fail to load included.
    """
    config = parse_policy_config(section, source=source)
    if extra_rules:
        config = dataclasses.replace(config, rules=(*extra_rules, *config.rules))
    return build_policy_chain(config)


def parse_policy_config(section: Mapping[str, object], *, source: str) -> PolicyConfig:
    """Check the section without importing anything.

    :raises PolicyConfigError: naming the key and ``source``.
    """
    errors = _Errors(source)
    for key in section:
        if not isinstance(key, str):
            raise errors.at(repr(key), "keys must be strings")
    plugins = []
    for prefix in _PLUGIN_KINDS:
        spec = _parse_plugin(section, prefix, errors)
        if spec is not None:
            plugins.append(spec)
    configured = {p.prefix for p in plugins}
    if TOPIC_ACTION_POLICY in configured:
        for old, reason in _CONFLICTS.items():
            if old in configured:
                raise errors.at(
                    f"{old}.class.name",
                    f"cannot be used together with {TOPIC_ACTION_POLICY}.class.name: "
                    f"{reason} (KIP-201)",
                )
    timeout_ms = _positive_int(section, _TIMEOUT_KEY, 5000, errors)
    threads = _positive_int(section, _THREADS_KEY, 8, errors)
    own_keys = (_TIMEOUT_KEY, _THREADS_KEY, _EXTRA_CONFIGS_KEY)
    for key in section:
        if key.startswith("policy.") and key not in own_keys:
            raise errors.at(key, f"unknown key; expected one of {', '.join(own_keys)}")
        _check_plugin_kind(key, section[key], errors)
        _check_not_rules(key, section[key], errors)
    extra = _strings(section.get(_EXTRA_CONFIGS_KEY, []), _EXTRA_CONFIGS_KEY, errors, empty=True)
    topic_configs = TOPIC_CONFIGS | {RECORD_VALIDATION_POLICY, *extra}
    return PolicyConfig(
        source=source,
        plugins=tuple(plugins),
        rules=_parse_rules(section.get(_RULES_KEY), topic_configs, errors),
        timeout_s=timeout_ms / 1000,
        threads=threads,
        configs=FrozenMap(flatten_configs(section)),
    )


def _check_plugin_kind(key: str, value: object, errors: _Errors) -> None:
    """Other keys go to the plug-ins' configure(), as Kafka passes its configs; but a
    ``<kind>.class.name`` of no kind the gateway knows (a misspelt one) would name a policy
    that never runs, so it is refused, and so is one with no value (read as unset, it
    configured no plug-in, or the built-in record validation, silently)."""
    if not key.endswith(".class.name"):
        return
    if value is None or value == "":
        raise errors.at(
            key, "no value: name the class (module.Class), or leave the key out for none"
        )
    kind = key.removesuffix(".class.name")
    known = (*_PLUGIN_KINDS, RECORD_VALIDATION_POLICY)
    if kind not in known:
        raise errors.at(
            key,
            "no such policy kind, so this class would never run; expected one of: "
            + ", ".join(f"{k}.class.name" for k in known),
        )


def _check_not_rules(key: str, value: object, errors: _Errors) -> None:
    """The built-in rules are read from ``rules`` alone; a key that was meant to be it
    (``Rules``, ``rule``, or any key holding a list of built-in rules, such as a misspelt
    ``rulse``) would only reach the plug-ins' configure(), and no rule of it would run. A
    plug-in's own list of rules (types of its own) stays."""
    if key == _RULES_KEY:
        return
    looks_like_rules = (
        isinstance(value, list)
        and bool(value)
        and all(
            isinstance(entry, Mapping) and "name" in entry and entry.get("type") in _RULE_KEYS
            for entry in value
        )
    )
    if key.lower() in ("rule", "rules") or looks_like_rules:
        raise errors.at(
            key,
            f"looks like the rules, which are read from policies.{_RULES_KEY} alone: under "
            "this key they would only reach the plug-ins, and no rule of it would run",
        )


def build_policy_chain(config: PolicyConfig) -> PolicyChain:
    """Import, instantiate and configure each plug-in, then build the chain.

    :raises PolicyConfigError: naming the ``class.name`` key of a plug-in that fails.
    """
    errors = _Errors(config.source)
    loaded: dict[str, PolicyPlugin] = {}
    try:
        for spec in config.plugins:
            policy = _instantiate(spec, errors)
            loaded[spec.prefix] = PolicyPlugin(policy=policy, mode=spec.mode, name=spec.class_name)
            try:
                policy.configure(config.configs)
            except Exception as exc:
                raise errors.at(
                    f"{spec.prefix}.class.name",
                    f"{spec.class_name}.configure() failed: {type(exc).__name__}: {exc}",
                ) from exc
    except PolicyConfigError as error:
        for plugin in loaded.values():
            try:
                plugin.policy.close()
            # A plug-in's close() may raise anything; the configuration error stays the answer.
            except Exception as exc:  # noqa: BLE001
                error.add_note(f"closing {plugin.name} also failed: {type(exc).__name__}: {exc}")
        raise
    return PolicyChain(
        rules=config.rules,
        create_topic_policy=loaded.get(CREATE_TOPIC_POLICY),
        alter_config_policy=loaded.get(ALTER_CONFIG_POLICY),
        alter_config_v2_policy=loaded.get(ALTER_CONFIG_V2_POLICY),
        topic_action_policy=loaded.get(TOPIC_ACTION_POLICY),
        timeout_s=config.timeout_s,
        max_workers=config.threads,
    )


def flatten_configs(section: Mapping[str, object]) -> dict[str, str]:
    """The section as a flat string map, the form Kafka passes to ``configure()``.

    Nested keys are joined with dots; a list of scalars becomes a comma-separated string
    (Kafka's list form); a list holding mappings is indexed (``rules.0.name``); booleans
    become ``true``/``false`` and null the empty string.
    """
    flat: dict[str, str] = {}

    def visit(key: str, value: object) -> None:
        if isinstance(value, Mapping):
            for name, inner in value.items():
                visit(f"{key}.{name}" if key else str(name), inner)
        elif isinstance(value, list | tuple):
            if all(not isinstance(item, Mapping | list | tuple) for item in value):
                flat[key] = ",".join(_scalar_text(item) for item in value)
            else:
                for index, item in enumerate(value):
                    visit(f"{key}.{index}", item)
        else:
            flat[key] = _scalar_text(value)

    visit("", section)
    return flat


# --- helpers ----------------------------------------------------------------------------------


class _Errors:
    def __init__(self, source: str) -> None:
        self.source = source

    def at(self, key: str, problem: str) -> PolicyConfigError:
        return PolicyConfigError(f"{self.source}: policies.{key}: {problem}")


def _scalar_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _parse_plugin(section: Mapping[str, object], prefix: str, errors: _Errors) -> PluginSpec | None:
    for key in section:
        if key.startswith(prefix + ".") and key[len(prefix) + 1 :] not in _PLUGIN_SUFFIXES:
            expected = ", ".join(f"{prefix}.{s}" for s in _PLUGIN_SUFFIXES)
            raise errors.at(key, f"unknown key; expected one of {expected}")
    name_key, path_key, mode_key = (f"{prefix}.{s}" for s in _PLUGIN_SUFFIXES)
    class_name = section.get(name_key)
    if class_name is None:
        for key in (path_key, mode_key):
            if key in section:
                raise errors.at(key, f"set without {name_key}")
        return None
    if not isinstance(class_name, str) or not re.fullmatch(r"\w+(\.\w+)+", class_name):
        raise errors.at(name_key, f"expected a dotted name module.Class, got {class_name!r}")
    class_path = section.get(path_key)
    if class_path is not None and (not isinstance(class_path, str) or not class_path):
        raise errors.at(path_key, f"expected a directory, got {class_path!r}")
    return PluginSpec(
        prefix=prefix,
        class_name=class_name,
        class_path=class_path,
        mode=_mode(section.get(mode_key), mode_key, errors),
    )


def _mode(value: object, key: str, errors: _Errors) -> Mode:
    if value is None:
        return Mode.ENFORCE
    for mode in Mode:
        if value == mode.value:
            return mode
    choices = " or ".join(m.value for m in Mode)
    raise errors.at(key, f"expected {choices}, got {value!r}")


def _positive_int(section: Mapping[str, object], key: str, default: int, errors: _Errors) -> int:
    value = section.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise errors.at(key, f"expected a positive whole number, got {value!r}")
    return value


def _instantiate(spec: PluginSpec, errors: _Errors) -> Policy:
    key = f"{spec.prefix}.class.name"
    kind = _PLUGIN_KINDS[spec.prefix]
    module_name, _, class_name = spec.class_name.rpartition(".")
    directory = None
    if spec.class_path is not None:
        directory = os.path.abspath(spec.class_path)
        if not os.path.isdir(directory):
            raise errors.at(f"{spec.prefix}.class.path", f"{directory} is not a directory")
        if directory not in sys.path:
            sys.path.insert(0, directory)
            importlib.invalidate_caches()
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise errors.at(key, f"cannot import {module_name}: {type(exc).__name__}: {exc}") from exc
    if directory is not None:
        location = os.path.abspath(getattr(module, "__file__", None) or "")
        if os.path.commonpath([location, directory]) != directory:
            raise errors.at(
                key,
                f"module {module_name} is already imported from {location}, "
                f"not from {spec.prefix}.class.path {directory}",
            )
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type):
        raise errors.at(key, f"module {module_name} has no class {class_name}")
    if not issubclass(cls, kind):
        raise errors.at(key, f"{spec.class_name} is not a subclass of policies.api.{kind.__name__}")
    try:
        policy: Policy = cls()
    except Exception as exc:
        raise errors.at(key, f"{spec.class_name}() failed: {type(exc).__name__}: {exc}") from exc
    return policy


# --- rules ------------------------------------------------------------------------------------

_RULE_KEYS: Final[Mapping[str, frozenset[str]]] = {
    "partitions": frozenset({"min", "max"}),
    "replication.factor": frozenset({"min", "max"}),
    "config": frozenset({"config", "min", "max", "allowed"}),
    "required.configs": frozenset({"configs"}),
    "forbidden.configs": frozenset({"configs"}),
    "topic.name": frozenset({"pattern"}),
    "protected.topics": frozenset({"topics", "allowed.principals"}),
    "broker.configs": frozenset({"allowed.principals"}),
}
_COMMON_RULE_KEYS: Final = frozenset({"name", "type", "mode"})


def _parse_rules(value: object, topic_configs: frozenset[str], errors: _Errors) -> tuple[Rule, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise errors.at(_RULES_KEY, "expected a list of rules")
    rules: list[Rule] = []
    seen: set[str] = set()
    for index, entry in enumerate(value):
        at = f"{_RULES_KEY}[{index}]"
        if not isinstance(entry, Mapping):
            raise errors.at(at, "expected a mapping with name, type and the rule's settings")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise errors.at(f"{at}.name", "every rule needs a name")
        if name in seen:
            raise errors.at(f"{at}.name", f"another rule is already named {name!r}")
        seen.add(name)
        rule_type = entry.get("type")
        if rule_type not in _RULE_KEYS:
            raise errors.at(
                f"{at}.type", f"expected one of {', '.join(_RULE_KEYS)}, got {rule_type!r}"
            )
        assert isinstance(rule_type, str)
        for key in entry:
            if key not in _COMMON_RULE_KEYS and key not in _RULE_KEYS[rule_type]:
                allowed = ", ".join(sorted(_COMMON_RULE_KEYS | _RULE_KEYS[rule_type]))
                raise errors.at(f"{at}.{key}", f"unknown key for a {rule_type} rule ({allowed})")
        mode = _mode(entry.get("mode"), f"{at}.mode", errors)
        rules.append(_parse_rule(rule_type, entry, at, name, mode, topic_configs, errors))
    return tuple(rules)


def _parse_rule(
    rule_type: str,
    entry: Mapping[str, object],
    at: str,
    name: str,
    mode: Mode,
    topic_configs: frozenset[str],
    errors: _Errors,
) -> Rule:
    if rule_type in ("partitions", "replication.factor"):
        low, high = _bounds(entry, at, errors, whole=True)
        cls = PartitionsRule if rule_type == "partitions" else ReplicationFactorRule
        return cls(
            name=name,
            mode=mode,
            min=None if low is None else int(low),
            max=None if high is None else int(high),
        )
    if rule_type == "config":
        return _config_rule(entry, at, name, mode, topic_configs, errors)
    if rule_type in ("required.configs", "forbidden.configs"):
        configs = _strings(entry.get("configs"), f"{at}.configs", errors)
        for config in configs:
            _check_topic_config(config, topic_configs, f"{at}.configs", errors)
        if rule_type == "required.configs":
            return RequiredConfigsRule(name=name, mode=mode, configs=configs)
        return ForbiddenConfigsRule(name=name, mode=mode, configs=configs)
    if rule_type == "topic.name":
        pattern = entry.get("pattern")
        if not isinstance(pattern, str):
            raise errors.at(f"{at}.pattern", "expected a regular expression")
        compiled = _regex(pattern, f"{at}.pattern", errors)
        _check_no_lone_dot(pattern, f"{at}.pattern", errors)
        if all(compiled.fullmatch(probe) for probe in _UNLIKE_NAMES):
            # a stray alternative (`[a-z]+\.v[0-9]+|.*`) made the rule a no-op
            raise errors.at(
                f"{at}.pattern",
                f"{pattern!r} matches every topic name (even {', '.join(_UNLIKE_NAMES)}), so "
                "this rule would never deny anything",
            )
        return TopicNameRule(name=name, mode=mode, pattern=compiled)
    if rule_type == "broker.configs":
        principals = _principals(entry, at, errors)
        return BrokerConfigsRule(name=name, mode=mode, allowed_principals=principals)
    assert rule_type == "protected.topics"
    return _protected_topics_rule(entry, at, name, mode, errors)


def _config_rule(
    entry: Mapping[str, object],
    at: str,
    name: str,
    mode: Mode,
    topic_configs: frozenset[str],
    errors: _Errors,
) -> ConfigRule:
    config = entry.get("config")
    if not isinstance(config, str) or not config:
        raise errors.at(f"{at}.config", "expected the config's name, such as retention.ms")
    _check_topic_config(config, topic_configs, f"{at}.config", errors)
    has_bounds = "min" in entry or "max" in entry
    if has_bounds == ("allowed" in entry):
        raise errors.at(at, "a config rule sets min and/or max, or allowed (not both)")
    if has_bounds:
        low, high = _bounds(entry, at, errors, whole=False)
        return ConfigRule(name=name, mode=mode, config=config, min=low, max=high)
    allowed = _strings(entry["allowed"], f"{at}.allowed", errors, scalars=True)
    return ConfigRule(name=name, mode=mode, config=config, allowed=frozenset(allowed))


def _protected_topics_rule(
    entry: Mapping[str, object], at: str, name: str, mode: Mode, errors: _Errors
) -> ProtectedTopicsRule:
    topics = _strings(entry.get("topics"), f"{at}.topics", errors)
    return ProtectedTopicsRule(
        name=name,
        mode=mode,
        topics=tuple(_regex(t, f"{at}.topics", errors) for t in topics),
        allowed_principals=_principals(entry, at, errors),
    )


_BROKER_CONFIG_OF: Final = {
    synonym.name: topic_config
    for topic_config, synonyms in BROKER_SYNONYMS.items()
    for synonym in synonyms
    if synonym.name != topic_config
}


def _check_topic_config(name: str, known: frozenset[str], key: str, errors: _Errors) -> None:
    """A rule's config name must be a topic config the brokers have (:data:`TOPIC_CONFIGS`,
    ``record.validation.policy``, ``policy.extra.topic.configs``): a rule on another name
    (``retention.msec``, ``Retention.ms``, a broker config) matches nothing a broker takes,
    so it would never deny anything."""
    if name in known:
        return
    if name in _BROKER_CONFIG_OF:
        hint = (
            f"it is a broker config: a rule on the topic config {_BROKER_CONFIG_OF[name]} "
            "judges it too"
        )
    else:
        close = [k for k in known if k.lower() == name.lower()] or difflib.get_close_matches(
            name, sorted(known), n=1, cutoff=0.8
        )
        hint = f"did you mean {close[0]}?" if close else ""
    raise errors.at(
        key,
        f"{name!r} is not a Kafka topic config, so this rule would never apply"
        f"{f' ({hint})' if hint else ''}; a broker's own topic configs (a vendor's) can be "
        f"listed in policies.{_EXTRA_CONFIGS_KEY}",
    )


def _principals(entry: Mapping[str, object], at: str, errors: _Errors) -> frozenset[str]:
    """``allowed.principals``: Kafka principals (``User:alice``); none when left out."""
    key = f"{at}.allowed.principals"
    principals = _strings(entry.get("allowed.principals", []), key, errors, empty=True)
    for principal in principals:
        if not re.fullmatch(r"[^:\s]+:.+", principal):
            raise errors.at(key, f"expected principals such as User:alice, got {principal!r}")
    return frozenset(principals)


def _bounds(
    entry: Mapping[str, object], at: str, errors: _Errors, *, whole: bool
) -> tuple[float | None, float | None]:
    bounds: list[float | None] = []
    for key in ("min", "max"):
        value = entry.get(key)
        number_types = (int,) if whole else (int, float)
        kind = "a whole number" if whole else "a number"
        if key in entry and value is None:
            # read as unset, `min:` with its value forgotten judged nothing
            raise errors.at(f"{at}.{key}", f"no value: expected {kind}, or leave the key out")
        if value is not None and (not isinstance(value, number_types) or isinstance(value, bool)):
            raise errors.at(f"{at}.{key}", f"expected {kind}, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            # .nan compares false with everything: a bound that never denies
            raise errors.at(f"{at}.{key}", f"expected a finite number, got {value!r}")
        bounds.append(value)
    low, high = bounds
    if low is None and high is None:
        raise errors.at(at, "set min, max or both")
    if low is not None and high is not None and low > high:
        raise errors.at(f"{at}.min", f"min {low} is above max {high}")
    return low, high


def _strings(
    value: object, key: str, errors: _Errors, *, scalars: bool = False, empty: bool = False
) -> tuple[str, ...]:
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise errors.at(key, "expected a list")
    items = []
    for item in value:
        if isinstance(item, str) and item:
            items.append(item)
        elif scalars and isinstance(item, bool | int | float):
            items.append(_scalar_text(item))
        else:
            raise errors.at(key, f"expected non-empty strings, got {item!r}")
    if not items and not empty:
        raise errors.at(key, "expected at least one entry")
    return tuple(items)


_TOPIC_CHARACTERS: Final = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
)
"""What Kafka's topic names are made of (``Topic.validate``)."""


def _check_topic_characters(pattern: str, key: str, errors: _Errors) -> None:
    """A pattern matched against topic names may hold no character a topic name cannot:
    none outside ASCII (a Cyrillic ``о`` in ``__cоnsumer_offsets`` looks like the Latin
    one and protected nothing), and no literal one outside Kafka's letters, digits, ``.``,
    ``_`` and ``-`` (``payments/orders``, ``orders:*``): the part that holds it can never
    match."""
    for index, char in enumerate(pattern):
        if not char.isascii():
            raise errors.at(
                key,
                f"{pattern!r} holds {char!r} (U+{ord(char):04X}) at {index}: topic names are "
                "ASCII, so this pattern can never match where it does; a character that "
                "looks like an ASCII one is not it",
            )
    for char in _literals(re._parser.parse(pattern)):  # type: ignore[attr-defined]
        if char not in _TOPIC_CHARACTERS:
            raise errors.at(
                key,
                f"{pattern!r} requires the character {char!r}, which no topic name holds "
                "(Kafka's are letters, digits, '.', '_' and '-'), so that part of it can "
                "never match",
            )


_UNLIKE_NAMES: Final = ("A", "_", "-", "9", "x-Y_9.Z", "__consumer_offsets")
"""Topic names no naming convention accepts all of."""


def _check_no_lone_dot(pattern: str, key: str, errors: _Errors) -> None:
    """A naming rule's unescaped ``.`` that stands alone (not ``.*``, ``.+``, ``.?``) is the
    dot of ``team.orders.v1`` written without its backslash: it matches any character, so
    ``[a-z]+.[a-z]+.v[0-9]+`` let ``team_orders-v1`` through. A protected.topics pattern may
    keep one (it only protects more)."""
    if _has_lone_any(re._parser.parse(pattern)):  # type: ignore[attr-defined]
        raise errors.at(
            key,
            f"{pattern!r} has a '.' on its own, which matches any character, not only a dot "
            "(team_orders-v1 passes where team.orders.v1 was meant): write \\. for a dot, or "
            "a class such as [a-z0-9_-] for the characters meant",
        )


def _has_lone_any(parsed: object) -> bool:
    """Whether a parsed pattern holds ``.`` other than as the whole body of a repeat."""
    stack: list[object] = [parsed]
    while stack:
        items = stack.pop()
        for op, av in items:  # type: ignore[attr-defined]
            name = str(op)
            if name == "ANY":
                return True
            if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
                body = av[2]
                if not (len(body) == 1 and str(body[0][0]) == "ANY"):
                    stack.append(body)
            elif name == "SUBPATTERN":
                stack.append(av[3])
            elif name == "BRANCH":
                stack.extend(av[1])
            elif name == "ATOMIC_GROUP":
                stack.append(av)
    return False


def _literals(parsed: object) -> list[str]:
    """The characters a parsed pattern requires literally (outside character classes)."""
    found: list[str] = []
    stack: list[object] = [parsed]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple) and len(item) == 2 and str(item[0]) == "LITERAL":
            found.append(chr(item[1]))
        elif isinstance(item, tuple) and len(item) == 2 and str(item[0]) in ("IN", "NOT_LITERAL"):
            continue
        elif isinstance(item, list | tuple) or type(item).__name__ == "SubPattern":
            stack.extend(item)  # type: ignore[arg-type]
    return found


def _regex(pattern: str, key: str, errors: _Errors) -> NamePattern:
    """``pattern`` compiled by RE2, which matches in time linear in the name: the names are
    the clients', and Python's ``re`` can take hours on a name made to backtrack a pattern an
    operator wrote in good faith (``([a-z]+-?)+``), all of it on the event loop. RE2 lacks
    only what needs backtracking (lookarounds, backreferences): such a pattern is refused.
    So is one that ends like a wildcard (``payments-*``), which as a regular expression
    matches ``payments``, ``payments-``, ``payments--``: nothing the operator meant."""
    try:
        re.compile(pattern)  # Python's words for what is not a regular expression at all
    except re.error as exc:
        raise errors.at(key, f"invalid regular expression {pattern!r}: {exc}") from None
    _check_topic_characters(pattern, key, errors)
    glob = re.fullmatch(r"(.*[^\\])([-_])\*", pattern)
    if glob is not None:
        stem, dash = glob.groups()
        raise errors.at(
            key,
            f"{pattern!r} reads as a wildcard but is a regular expression matched against the "
            f"whole name: it matches {stem!r} followed by any number of {dash!r}, not "
            f"{stem + dash + 'orders'!r}; write {stem + dash + '.*'!r} for every name that "
            f"starts with {stem + dash!r} ({stem + '[' + dash + ']*'!r} if you mean it)",
        )
    try:
        compiled: NamePattern = re2.compile(pattern)
    except re2.error as exc:
        raise errors.at(
            key,
            f"regular expression {pattern!r} is not supported: {exc}; patterns are matched by "
            "RE2, in time linear in the name, and cannot use lookarounds or backreferences "
            "(a client's topic name could make them run for hours)",
        ) from None
    return compiled
