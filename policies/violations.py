"""Every rule one decision found broken, written into one Kafka error message and read back.

Kafka answers one error message per topic (or config resource), so the gateway puts every
violation of the decision in it, enforced denials and dry-run ones alike, in the chain's order:

- none: no message (None);
- one enforced denial: its message as the rule or plug-in wrote it (as Kafka's own policy
  errors read);
- one dry-run denial: ``would deny (dry-run): <message>``;
- more: ``<n> policy violations: 1) <message>; 2) would deny (dry-run): <message>; ...``.

:func:`parse_message` reads such a message back into :class:`Violation` s, so a client tool
(``kpg dry-run``) lists the same violations as one that runs the chain itself
(``kpg policy check``). A denial's own text may contain anything, text a client chose among
it (a config value a rule echoes); the numbering (checked to run 1..n) is what keeps the items
apart, so a separator look-alike inside an item (``; 2) ``) is written with two spaces
(``;  2) ``, and read back with one): a client's text can neither cut an item in two nor make
an enforced denial read as a dry-run one. A message that does not follow the numbering is
read as one violation.

The gateway may end a denial's message with `` (audit request id <id>)``, so that a client's
log joins the audit table (:func:`with_request_id`); :func:`split_request_id` takes it off
before the violations are read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol

Outcome = Literal["denied", "would_deny"]

WOULD_DENY_PREFIX: Final = "would deny (dry-run): "
_COUNTED: Final = re.compile(r"(\d+) policy violations: 1\) ")
_ITEM_SEPARATOR: Final = re.compile(r"; (\d+)\) ")
_SEPARATOR_LOOKALIKE: Final = re.compile(r"; (?=\d+\) )")
_ESCAPED_LOOKALIKE: Final = re.compile(r";  (?=\d+\) )")
_REQUEST_ID: Final = re.compile(
    r"(?:^| )\(audit request id ([^\s()]+)\)$|^audit request id ([^\s()]+)$"
)


class _VerdictLike(Protocol):
    @property
    def outcome(self) -> str: ...

    @property
    def message(self) -> str | None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Violation:
    """One rule or plug-in that objects: ``denied`` (enforced) or ``would_deny`` (dry-run)."""

    outcome: Outcome
    message: str

    @property
    def verdict(self) -> str:
        """How the tools print it: ``denied`` or ``would-deny``."""
        return "denied" if self.outcome == "denied" else "would-deny"


def violations_of(verdicts: Iterable[_VerdictLike]) -> tuple[Violation, ...]:
    """The verdicts that object, in order (a verdict without a message keeps an empty one)."""
    found = []
    for v in verdicts:
        if v.outcome == "denied":
            found.append(Violation(outcome="denied", message=v.message or ""))
        elif v.outcome == "would_deny":
            found.append(Violation(outcome="would_deny", message=v.message or ""))
    return tuple(found)


def _item(violation: Violation) -> str:
    message = _SEPARATOR_LOOKALIKE.sub(";  ", violation.message)
    if violation.outcome == "would_deny":
        return WOULD_DENY_PREFIX + message
    return message


def client_message(violations: Sequence[Violation]) -> str | None:
    """The one error message carrying every violation (see the module docstring)."""
    if not violations:
        return None
    if len(violations) == 1:
        return _item(violations[0])
    items = "; ".join(f"{i}) {_item(v)}" for i, v in enumerate(violations, start=1))
    return f"{len(violations)} policy violations: {items}"


def _violation(item: str) -> Violation:
    item = _ESCAPED_LOOKALIKE.sub("; ", item)
    if item.startswith(WOULD_DENY_PREFIX):
        return Violation(outcome="would_deny", message=item[len(WOULD_DENY_PREFIX) :])
    return Violation(outcome="denied", message=item)


def parse_message(message: str | None) -> tuple[Violation, ...]:
    """The violations a :func:`client_message` carries; () for None or an empty message."""
    if not message:
        return ()
    counted = _COUNTED.match(message)
    if counted is not None:
        items = _split_numbered(message[counted.end() :], int(counted.group(1)))
        if items is not None:
            return tuple(_violation(item) for item in items)
    return (_violation(message),)


def _split_numbered(text: str, count: int) -> list[str] | None:
    """``text`` cut at ``; 2) ``, ``; 3) ``, ... up to ``count``; None if it does not fit."""
    items: list[str] = []
    start = 0
    expected = 2
    for match in _ITEM_SEPARATOR.finditer(text):
        if int(match.group(1)) != expected or expected > count:
            continue
        items.append(text[start : match.start()])
        start = match.end()
        expected += 1
    items.append(text[start:])
    return items if len(items) == count else None


def with_request_id(message: str | None, request_id: str) -> str:
    """``message`` ending in the audit request id (the id alone for no message)."""
    note = f"(audit request id {request_id})"
    return f"{message} {note}" if message else note


def split_request_id(message: str | None) -> tuple[str | None, str | None]:
    """(the message without a trailing audit request id, the id or None)."""
    if not message:
        return message, None
    found = _REQUEST_ID.search(message)
    if found is None:
        return message, None
    return message[: found.start()] or None, found.group(1) or found.group(2)
