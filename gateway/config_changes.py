"""What a config change does to a resource's configs: pure functions, no I/O, no kio.

From the configs set on a resource (``before``) and one resource's part of a request, build
the :class:`ConfigChange` the policy chain is asked about: ``altered`` (what Kafka's
``AlterConfigPolicy`` sees) and ``after`` (``before`` with the request applied, what
``AlterConfigV2Policy`` sees; a deleted key is absent from it).

IncrementalAlterConfigs (:func:`incremental`), as Kafka's controller applies it:

- SET puts the value; DELETE removes the key (deleting a key that is not set is allowed and
  changes nothing).
- APPEND and SUBTRACT treat the value as a comma-separated list; the request's value is a
  list too. APPEND adds the items not present yet, SUBTRACT removes the items present.
  Empty items are dropped. On a key that is not set, the list starts from the config's own
  default, as Kafka does (``ConfigurationControlManager.getParts``: the ConfigDef default,
  not a broker config that gives the resource another value); the caller passes the defaults
  it knows in ``defaults`` (DescribeConfigs' DEFAULT_CONFIG entries and synonyms), and
  without one the list starts empty. A SUBTRACT that removes every item leaves the key set
  to the empty string, as Kafka's controller does (it stores ``""``, not a delete).
- Only list-typed configs take APPEND and SUBTRACT; the gateway does not know the config
  types, so it applies them to any key and leaves the refusal (INVALID_CONFIG) to the broker.
- ``altered`` holds every key of the request: SET, APPEND and SUBTRACT with the resulting
  value, DELETE with None.

Legacy AlterConfigs (:func:`legacy`) replaces the whole set: ``after`` is the request's
configs, and every key set before but missing from the request is deleted (an implicit
delete). ``altered`` holds every key the request sends and, unlike Kafka, the implicitly
deleted keys with None. Kafka leaves implicit deletes out of what its AlterConfigPolicy sees
(KAFKA-14195, kept for compatibility), so a policy that forbids changing a key cannot stop a
legacy request that removes it by leaving it out; the gateway shows the policy every key the
change removes, so that such a policy holds whichever API the client uses.

Requests Kafka refuses before any policy runs come back as :class:`InvalidAlteration`, with
Kafka's message (the caller answers INVALID_REQUEST): a key that appears twice, a missing
value for anything but DELETE (for the legacy API: any missing value), an unknown operation.

:func:`audited` turns a change into what the audit event records: every altered key with its
value before and after, values of sensitive keys left out.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from policies.api import FrozenMap
from protocol.alter_configs import APPEND, DELETE, SET, SUBTRACT, ConfigAlteration
from spark_audit import event

OPERATIONS: Final = frozenset({SET, DELETE, APPEND, SUBTRACT})


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigChange:
    """One resource's config change, as the policy chain is asked about it."""

    altered: Mapping[str, str | None]
    after: Mapping[str, str]

    def __post_init__(self) -> None:
        object.__setattr__(self, "altered", FrozenMap(self.altered))
        object.__setattr__(self, "after", FrozenMap(self.after))


@dataclass(frozen=True, slots=True, kw_only=True)
class InvalidAlteration:
    """A request Kafka refuses with INVALID_REQUEST before asking any policy."""

    message: str


def incremental(
    before: Mapping[str, str],
    operations: Sequence[ConfigAlteration],
    defaults: Mapping[str, str] | None = None,
    inherited: Collection[str] = (),
) -> ConfigChange | InvalidAlteration:
    """Apply IncrementalAlterConfigs entries to ``before``.

    ``defaults``: the value a key has when it is not set, where known (the start of an
    APPEND or SUBTRACT on a key that is not set). ``inherited``: keys whose value in
    ``before`` the resource takes from a broker config instead of setting it (a topic's from a
    dynamic broker config): Kafka starts an APPEND or SUBTRACT of one from its default too,
    since it reads only the resource's own configs.
    """
    invalid = _check(
        [c.name for c in operations],
        [(c.name, c.value) for c in operations if c.operation != DELETE],
    )
    if invalid is not None:
        return invalid
    unknown = [c.operation for c in operations if c.operation not in OPERATIONS]
    if unknown:
        return InvalidAlteration(message=f"Unknown operations type {unknown[0]}")
    after = dict(before)
    altered: dict[str, str | None] = {}
    for c in operations:
        name, op, value = c.name, c.operation, c.value
        if op == DELETE:
            after.pop(name, None)
            altered[name] = None
            continue
        assert value is not None  # _check refused missing values
        if op == SET:
            after[name] = value
        else:
            start = None if name in inherited else before.get(name)
            if start is None and defaults is not None:
                start = defaults.get(name)
            items = _items(start)
            if op == APPEND:
                items += [v for v in dict.fromkeys(_items(value)) if v not in items]
            else:
                for item in _items(value):
                    if item in items:
                        items.remove(item)
            after[name] = ",".join(items)
        altered[name] = after[name]
    return ConfigChange(altered=altered, after=after)


def legacy(
    before: Mapping[str, str], configs: Sequence[ConfigAlteration]
) -> ConfigChange | InvalidAlteration:
    """Apply a legacy AlterConfigs set (every operation SET) to ``before``: it replaces it."""
    invalid = _check([c.name for c in configs], [(c.name, c.value) for c in configs])
    if invalid is not None:
        return invalid
    after = {c.name: c.value for c in configs if c.value is not None}
    altered: dict[str, str | None] = dict(after)
    for name in before:
        if name not in after:
            altered[name] = None
    return ConfigChange(altered=altered, after=after)


def _check(
    names: Sequence[str], valued: Sequence[tuple[str, str | None]]
) -> InvalidAlteration | None:
    """Kafka's checks, in its order: duplicate keys, then missing values."""
    if len(set(names)) != len(names):
        return InvalidAlteration(message="Error due to duplicate config keys")
    missing = [name for name, value in valued if value is None]
    if missing:
        return InvalidAlteration(message="Null value not supported for : " + ", ".join(missing))
    return None


def _items(value: str | None) -> list[str]:
    return [item for item in (value or "").split(",") if item]


PASSWORD_TYPE: Final = 9
"""DescribeConfigs ``config_type`` of a PASSWORD config (Kafka's ConfigDef.Type)."""

_SENSITIVE_NAMES: Final = (
    "password",
    "passphrase",
    "secret",
    "jaas.config",
    "ssl.keystore.key",
    "ssl.keystore.certificate.chain",
    "ssl.truststore.certificates",
)


def looks_sensitive(name: str) -> bool:
    """A key Kafka would mark sensitive (type PASSWORD) though the broker did not describe it:
    a listener- or mechanism-prefixed copy (``listener.name.x.ssl.key.password``,
    ``...sasl.jaas.config``) or an unknown one named like a secret."""
    lowered = name.lower()
    return any(part in lowered for part in _SENSITIVE_NAMES)


def sensitive_keys(described: Collection[tuple[str, bool, int]]) -> frozenset[str]:
    """Of (name, is_sensitive, config_type) as DescribeConfigs gives them: the sensitive
    keys (flagged, or of type PASSWORD)."""
    return frozenset(
        name for name, flagged, config_type in described if flagged or config_type == PASSWORD_TYPE
    )


def audited(
    change: ConfigChange,
    before: Mapping[str, str],
    sensitive: Callable[[str], bool],
) -> tuple[event.ConfigChange, ...]:
    """The audit record of ``change``: each altered key (in request order, implicit deletes
    after) with its value in ``before`` and after the change; both null for a key
    ``sensitive`` says is secret."""
    records = []
    for name in change.altered:
        if sensitive(name):
            records.append(event.ConfigChange(name=name, before=None, after=None, sensitive=True))
        else:
            records.append(
                event.ConfigChange(name=name, before=before.get(name), after=change.after.get(name))
            )
    return tuple(records)
