"""The documentation checked against the code, where a newcomer or an operator would check it
by hand: the README's configuration table against the keys the loader reads and the defaults
it loads; the metrics and labels the guides name against those the gateway defines; the
files, tests and Python names they cite against the checkout; the flags they give each kpg
command against its parser; the shipped configurations against the loader."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from gateway import config as gateway_config
from gateway import record_validation
from gateway.cli import build_parser
from gateway.client_configs import ClientConfigCodes
from gateway.config import load
from policies import loader

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
GUIDES = (
    "README.md",
    "spark_audit/README.md",
    "spark_audit/SCHEMA.md",
    "tests/adversarial/README.md",
    "bench/mutation/README.md",
    "deploy/kubernetes/README.md",
    "deploy/gateway.example.yaml",
    "deploy/gateway.compose.yaml",
    "docker-compose.yml",
    "Makefile",
)


def _components(key: str) -> list[str]:
    """``limits."max.connections"`` -> ``["limits", "max.connections"]``."""
    return [part.strip('"') for part in re.findall(r'"[^"]+"|[^."]+', key)]


def _config_table() -> list[tuple[list[str], str]]:
    """The rows of the README's configuration table: the keys of each (``.x`` after a key
    written out is its sibling ``x``) and the default column."""
    text = README.read_text()
    section = text[text.index("### Configuration") :]
    section = section[: section.index("\n\n", section.index("| key | default | meaning |"))]
    rows = []
    for line in section.splitlines():
        cells = line.split(" | ")
        if not line.startswith("| `") or len(cells) < 3:
            continue
        keys: list[str] = []
        parent: list[str] = []
        for token in re.findall(r"`([^`]+)`", cells[0]):
            if token.startswith("."):
                keys.append(".".join([*parent, *_components(token[1:])]))
            else:
                parts = _components(token)
                parent = parts[:-1]
                keys.append(".".join(parts))
        rows.append((keys, cells[1]))
    return rows


def _keys_the_loader_reads() -> set[str]:
    c = gateway_config
    keys = {k for k in c._TOP_KEYS}
    sections = {
        "upstream": c._UPSTREAM_KEYS,
        "upstream.tls": c._UPSTREAM_TLS_KEYS,
        "upstream.sasl": c._UPSTREAM_SASL_KEYS,
        "upstream.broker_defaults": c._BROKER_DEFAULT_KEYS,
        "state": c._STATE_KEYS,
        "client_configs": c._CLIENT_CONFIGS_KEYS,
        "client_configs.enforce": c._ENFORCE_KEYS,
        "client_configs.codes": {f.name for f in dataclasses.fields(ClientConfigCodes)},
        "tls": c._TLS_KEYS,
        "sasl": c._SASL_LISTENER_KEYS,
        "audit": c._AUDIT_KEYS,
        "limits": c._LIMIT_KEYS,
        "policies": {
            loader._TIMEOUT_KEY,
            loader._THREADS_KEY,
            loader._EXTRA_CONFIGS_KEY,
            loader._RULES_KEY,
            *(f"{kind}.class.name" for kind in loader._PLUGIN_KINDS),
            *record_validation._OWN_KEYS,
        },
    }
    for section, names in sections.items():
        keys |= {f"{section}.{name}" for name in names}
    return keys


def test_readme_configuration_table_names_every_key_the_loader_reads() -> None:
    """Every key the loader accepts has a row (the policies' own keys had none: an operator
    found `policy.timeout.ms`'s default, 5000, only in a docstring), and every key a row names
    is one the loader accepts."""
    documented = {key for keys, _ in _config_table() for key in keys}
    read = _keys_the_loader_reads()
    sections = {key for key in read if any(other.startswith(f"{key}.") for other in read)}
    assert sorted(read - sections - documented) == [], "keys the README's table leaves out"
    assert sorted(documented - read) == [], "keys in the README's table the loader does not read"
    readme = README.read_text()
    for suffix in loader._PLUGIN_SUFFIXES:  # written once for every kind of plug-in
        assert f'policies."<prefix>.{suffix}"' in readme or suffix == "class.name", suffix


def _loaded(value: object, parts: list[str]) -> object:
    """The loaded value at ``parts`` of a key: ``limits.max.connections`` is
    ``limits.max_connections``, ``client_configs.enforce.acks`` ``enforce_acks``."""
    if not parts:
        return value
    for i in range(len(parts), 0, -1):
        name = "_".join(parts[:i])
        if hasattr(value, name):
            return _loaded(getattr(value, name), parts[i:])
    raise AttributeError(".".join(parts))


def _stated_defaults(keys: list[str], cell: str) -> list[tuple[str, str]]:
    """(key, literal) for each key whose default the cell states as a literal: one for all
    the row's keys, or one per key, in order."""
    pieces = [cell.strip()] * len(keys) if "`, `" not in cell else cell.strip().split(", ")
    if len(pieces) != len(keys):
        return []
    stated = []
    for key, piece in zip(keys, pieces, strict=True):
        literal = re.fullmatch(r"`([^`]+)`(?: \(.*\))?", piece)
        if literal is not None:
            stated.append((key, literal.group(1)))
    return stated


def test_readme_configuration_defaults_are_the_loaders(tmp_path: Path) -> None:
    """A default the table states as a literal (`10`, `judge`, `127.0.0.1:9092`, `max_frame_bytes`)
    is what a configuration that sets nothing loads as."""
    (tmp_path / "empty.yaml").write_text("{}\n")
    empty = load(tmp_path / "empty.yaml")
    policies = loader.parse_policy_config({}, source="empty")
    loaded_policies = {
        "policies.policy.timeout.ms": policies.timeout_s * 1000,
        "policies.policy.threads": policies.threads,
        "policies.record.validation.schema.registry.timeout.ms": (
            record_validation._DEFAULT_REGISTRY_TIMEOUT_MS
        ),
    }
    checked = []
    for keys, cell in _config_table():
        for key, stated in _stated_defaults(keys, cell):
            section, *parts = key.split(".")
            # not checked here: the plug-ins' keys (no literal), sasl.client_auth (`required`
            # when upstream.sasl is set, else `none`), tls (off unless set)
            unchecked = (section == "policies" and key not in loaded_policies) or (
                key == "sasl.client_auth" or getattr(empty, section) is None
            )
            if unchecked:
                continue
            if key in loaded_policies:
                value = loaded_policies[key]
            else:
                value = _loaded(getattr(empty, section), parts)
            if re.fullmatch(r"[a-z_]+", stated) and hasattr(getattr(empty, section), stated):
                stated = str(getattr(getattr(empty, section), stated))  # another key's value
            if isinstance(value, gateway_config.HostPort):
                value = f"{value.host}:{value.port}"
            assert str(value).lower() == stated or (
                isinstance(value, int | float) and float(stated) == value
            ), (key, stated, value)
            checked.append(key)
    assert len(checked) >= 35, checked


def test_every_metric_the_gateway_registers_is_documented_and_no_other() -> None:
    """The README's metric names against those gateway/ registers (a counter's ``_total``
    is the one prometheus_client adds)."""
    registered = set()
    for path in (ROOT / "gateway").rglob("*.py"):
        registered |= set(re.findall(r'"(kpg_[a-z_]+)"', path.read_text()))
    named = set()
    for guide in GUIDES:
        named |= set(re.findall(r"(?<![\w])(kpg_[a-z_]*[a-z])", (ROOT / guide).read_text()))
    named = {re.sub(r"_(total|bucket|count|sum)$", "", name) for name in named}
    assert not registered - named, "metrics the guides do not name"
    assert not named - registered, "metrics the guides name that the gateway does not register"


def test_the_labels_the_guides_give_a_metric_are_its_own() -> None:
    """`kpg_policy_decisions_total{api,policy,outcome}`: each label a guide writes is one the
    gateway gives the metric (read from its definition: name, help, label list)."""
    code = "\n".join(p.read_text() for p in (ROOT / "gateway").rglob("*.py"))
    labels = {
        m.group(1): {x.strip().strip('"') for x in (m.group(2) or m.group(3) or "").split(",")}
        - {""}
        for m in re.finditer(
            r'"(kpg_[a-z_]+)",\s*(?:"[^"]*"\s*)+,?\s*(?:\[([^\]]*)\]|labels=\[([^\]]*)\])?', code
        )
    }
    assert sum(1 for names in labels.values() if names) >= 15
    wrong = []
    for guide in GUIDES:
        for name, written in re.findall(r"(kpg_[a-z_]+)\{([^}]*)\}", (ROOT / guide).read_text()):
            given = {part.partition("=")[0].strip() for part in written.split(",")}
            if not given <= labels[re.sub(r"_(total|bucket|count|sum)$", "", name)]:
                wrong.append(f"{guide}: {name}{{{written}}}")
    assert wrong == []


def _ignored(paths: list[str]) -> set[str]:
    result = subprocess.run(
        ["git", "check-ignore", "--no-index", *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return set(result.stdout.split())


def test_files_and_tests_the_guides_cite_exist() -> None:
    """A path a guide cites (`tests/adversarial/test_create_races.py`, written across a line
    break too) is in the checkout, a test module cited by its name alone is somewhere under
    tests/, and a test function cited by its name is defined there."""
    tests_source = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("*.py"))
    missing = []
    for guide in GUIDES:
        text = re.sub(r"/\n\s*", "/", (ROOT / guide).read_text())
        cited = re.findall(
            r"(?<![\w/.-])((?:gateway|protocol|policies|spark_audit|tests|bench|deploy)/[\w./-]*\w/?)"
            r"(?![\w./<*{-])",
            text,
        )
        # a path: a file name with its extension, a directory with its slash, or two levels
        # deep (not "gateway/direct ratios")
        cited = [
            p for p in cited if p.endswith("/") or "." in p.rpartition("/")[2] or p.count("/") > 1
        ]
        paths = [p for p in set(cited) if not (ROOT / p).exists()]
        missing += [f"{guide}: {p}" for p in sorted(set(paths) - _ignored(paths))]
        for module in set(re.findall(r"(?<![\w/])(test_\w+\.py)", text)):
            if not any((ROOT / "tests").rglob(module)):
                missing.append(f"{guide}: {module}")
        for function in set(re.findall(r"(?<![\w/])(test_\w+)(?![\w.])", text)):
            if not re.search(rf"def {function}\(", tests_source):
                missing.append(f"{guide}: {function}")
    assert not missing


@pytest.mark.parametrize(
    "path",
    [
        "deploy/gateway.example.yaml",
        "deploy/gateway.compose.yaml",
        "policies/example_rules.yaml",
    ],
)
def test_every_shipped_gateway_config_loads(path: str) -> None:
    """Each gateway configuration the guides point to loads as it is (the Kubernetes one is
    loaded from its ConfigMap by test_deploy.py)."""
    assert load(ROOT / path).policy_version.startswith("sha256:")


def test_the_example_rules_show_every_kind_of_rule() -> None:
    """The README and the example configs send readers to policies/example_rules.yaml "for
    every kind": a rule type the loader takes must have an example there."""
    example = yaml.safe_load((ROOT / "policies" / "example_rules.yaml").read_text())
    shown = {rule["type"] for rule in example["policies"]["rules"]}
    assert sorted(set(loader._RULE_KEYS) - shown) == []


def _resolves(name: str) -> bool:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            value: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attribute in parts[i:]:
            if not hasattr(value, attribute):
                return False
            value = getattr(value, attribute)
        return True
    return False


def test_python_names_the_guides_cite_exist() -> None:
    """A module, class or constant a guide names (`spark_audit.chain.verify_links`,
    `policies.builtin.RequireHeaderValidationPolicy`) imports."""
    missing = []
    for guide in GUIDES:
        text = (ROOT / guide).read_text()
        for name in set(
            re.findall(
                r"`((?:gateway|policies|protocol|spark_audit|tests)\.[A-Za-z_][\w.]*)`", text
            )
        ):
            if not name.endswith((".zip", ".py", ".yaml")) and not _resolves(name):
                missing.append(f"{guide}: {name}")
    assert sorted(missing) == []


def _kpg_flags() -> dict[tuple[str, ...], set[str]]:
    """Each kpg command (``("audit", "report")``) and the options its parser takes."""
    flags: dict[tuple[str, ...], set[str]] = {}

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        flags[path] = {option for action in parser._actions for option in action.option_strings}
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*path, name))

    walk(build_parser(), ())
    return flags


def _kpg_uses(text: str, commands: set[tuple[str, ...]]) -> list[tuple[tuple[str, ...], str]]:
    """(command, the flags written after it up to the end of its line or code span)."""
    uses = []
    for use in re.finditer(r"\bkpg((?: [a-z-]+)+)((?: [^\n`|]*)?)", re.sub(r"\\\n\s*", " ", text)):
        words, path = use.group(1).split(), ()
        for word in words:
            if (*path, word) not in commands:
                break
            path = (*path, word)
        rest = " ".join(words[len(path) :]) + use.group(2)
        uses += [(path, flag) for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", rest) if path]
    return uses


def test_the_flags_the_guides_give_a_kpg_command_are_its_own() -> None:
    """`kpg audit report --input ... --out ...`: each flag written after a kpg command is one
    that command's parser takes."""
    flags = _kpg_flags()
    uses = [
        (guide, *use)
        for guide in GUIDES
        for use in _kpg_uses((ROOT / guide).read_text(), set(flags))
    ]
    assert len(uses) >= 50
    wrong = [
        f"{guide}: kpg {' '.join(path)} {flag}"
        for guide, path, flag in uses
        if flag not in flags[path]
    ]
    assert wrong == []
