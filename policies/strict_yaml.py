"""YAML as the gateway reads its files (its configuration, topic manifests, a replay's
candidate): PyYAML's ``safe_load``, refusing what a reader of the file would take for
something else than what ``safe_load`` makes of it.

- A key given twice in one mapping (``safe_load`` keeps the last one silently: a second
  ``policies:`` at the end of the file, or a rule's ``max`` written twice, undid the first).
- A merge key (``<<: *base``): the keys beside it silently win over the merged ones, and the
  first of several merged mappings over the later ones; YAML 1.2 has no merge keys.
- The scalars YAML 1.1 (PyYAML) and YAML 1.2 (Go's and most other tools a GitOps repository
  runs, and most readers) read differently: ``yes``/``no``/``on``/``off`` (booleans in 1.1,
  strings in 1.2), ``0750`` (octal 488 in 1.1, 750 in 1.2) and ``1:30`` (base 60: 90 in 1.1).
  ``true``/``false``, ``0x``/``0b`` numbers and ``1_000`` read the same to everyone.
- Aliases that stand for more than :data:`MAX_ALIAS_NODES` nodes in all (a "billion laughs"
  file is a few hundred bytes; the checks and the policy version walk every copy, so it held
  ``kpg run --check`` and a reload for hours, or ran the machine out of memory), and an alias
  inside what it names (a recursive structure no check can walk).
- Nesting too deep for the parser (Python's recursion limit).

Every refusal is a :class:`yaml.YAMLError` whose message names the line and column.
"""

from __future__ import annotations

import re
from typing import Any, Final

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

__all__ = ["MAX_ALIAS_NODES", "StrictYamlError", "load"]

MAX_ALIAS_NODES: Final = 100_000
"""The nodes aliases may add to a file, beyond its own: a manifest of 10,000 topics that each
name a shared ``configs: *defaults`` of four settings adds 90,000."""

_MERGE_TAG: Final = "tag:yaml.org,2002:merge"
_AMBIGUOUS_INT: Final = re.compile(r"[-+]?0[0-9_]+")
"""A leading zero: octal in YAML 1.1, decimal in YAML 1.2."""


class StrictYamlError(yaml.MarkedYAMLError):
    """Something :func:`load` refuses; the message names the line and column."""

    def __init__(self, problem: str, mark: yaml.Mark | None) -> None:
        super().__init__(None, None, problem, mark)


class _StrictLoader(yaml.SafeLoader):
    def compose_document(self) -> Node | None:
        node: Node | None = super().compose_document()
        if node is not None:
            _check_aliases(node)
        return node

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, MappingNode):
            seen: dict[object, yaml.Mark] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    raise StrictYamlError(
                        "merge keys (<<) are not accepted: the keys beside one silently win "
                        "over the merged ones, so a setting can read stricter than it is; "
                        "write the mapping out",
                        key_node.start_mark,
                    )
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:
                    continue  # an unhashable key: construct_mapping refuses it
                if first is not None:
                    raise StrictYamlError(
                        f"found the key {key!r} a second time (first on line {first.line + 1}); "
                        "only one of them would count",
                        key_node.start_mark,
                    )
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)

    def construct_strict_bool(self, node: yaml.ScalarNode) -> bool:
        if str(node.value).lower() not in ("true", "false"):
            raise StrictYamlError(
                f"{node.value!r} is a boolean to YAML 1.1 (this reader) and a string to YAML "
                "1.2; write true or false, or quote it",
                node.start_mark,
            )
        return bool(super().construct_yaml_bool(node))

    def construct_strict_int(self, node: yaml.ScalarNode) -> int:
        text = str(node.value)
        if _AMBIGUOUS_INT.fullmatch(text):
            raise StrictYamlError(
                f"{text!r}: a leading zero makes it octal to YAML 1.1 (this reader: "
                f"{super().construct_yaml_int(node)}) and decimal to YAML 1.2; write it "
                "without the leading zero, or quote it",
                node.start_mark,
            )
        if ":" in text:
            raise StrictYamlError(
                f"{text!r} is a base-60 number to YAML 1.1 ({super().construct_yaml_int(node)}) "
                "and a string to YAML 1.2; quote it",
                node.start_mark,
            )
        return int(super().construct_yaml_int(node))

    def construct_strict_float(self, node: yaml.ScalarNode) -> float:
        if ":" in str(node.value):
            raise StrictYamlError(
                f"{node.value!r} is a base-60 number to YAML 1.1 and a string to YAML 1.2; "
                "quote it",
                node.start_mark,
            )
        return float(super().construct_yaml_float(node))


_StrictLoader.add_constructor("tag:yaml.org,2002:bool", _StrictLoader.construct_strict_bool)
_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_strict_int)
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _StrictLoader.construct_strict_float)


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_aliases(root: Node) -> None:
    """Refuse an alias inside what it names, and aliases that add more than
    :data:`MAX_ALIAS_NODES` nodes: each node's size as the checks walk it (every alias a
    copy), computed once per node, without recursion."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            continue
        if key in sizes:
            continue
        on_path.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in on_path:
                raise StrictYamlError(
                    "an alias inside the collection it names (a recursive structure) is not "
                    "accepted",
                    node.start_mark,
                )
            if id(child) not in sizes:
                stack.append((child, False))
    added = sizes[id(root)] - len(sizes)
    if added > MAX_ALIAS_NODES:
        raise StrictYamlError(
            f"aliases stand for {added} more nodes than the file holds (at most "
            f"{MAX_ALIAS_NODES}): every copy is read and checked",
            root.start_mark,
        )


def load(text: str | bytes, *, name: str) -> Any:
    """The one YAML document in ``text`` (None when empty), read by ``yaml.safe_load``'s rules
    with the refusals above; ``name`` (the file's) is what the messages say it is. Bytes are
    decoded as YAML says (UTF-8, or UTF-16 with its byte order mark), whatever the locale.

    :raises yaml.YAMLError: for bad YAML and for everything refused here.
    """
    try:
        loader = _StrictLoader(text)
    except yaml.reader.ReaderError as exc:  # not text, or a control character in it
        exc.name = name
        raise
    loader.name = name
    try:
        return loader.get_single_data()
    except RecursionError:
        raise StrictYamlError("nested too deeply to be read", loader.get_mark()) from None
    except yaml.reader.ReaderError as exc:
        exc.name = name
        raise
    finally:
        loader.dispose()
