"""The gateway's configuration: parsed and checked once at start-up into frozen values.

A bad configuration stops start-up with :class:`ConfigError`, whose message names the key
and the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from protocol.framing import DEFAULT_MAX_FRAME_BYTES


class ConfigError(Exception):
    """A configuration problem; the message names the key and where it came from."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HostPort:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamConfig:
    bootstrap_servers: tuple[HostPort, ...]
    """Empty: start an embedded Tansu broker and front it."""
    connect_timeout_s: float = 10.0


@dataclass(frozen=True, slots=True, kw_only=True)
class LimitsConfig:
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_in_flight_requests: int = 100


@dataclass(frozen=True, slots=True, kw_only=True)
class GatewayConfig:
    listen: HostPort
    advertised_host: str
    node_port_base: int
    """Node N's listener port is ``node_port_base + N``; 0 picks free ports (tests)."""
    upstream: UpstreamConfig
    limits: LimitsConfig = LimitsConfig()
    metrics: HostPort | None = None
    shutdown_timeout_s: float = 10.0
    policies: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    source: str = "<defaults>"


_TOP_KEYS = frozenset(
    {
        "listen",
        "advertised_host",
        "node_port_base",
        "upstream",
        "limits",
        "metrics",
        "shutdown_timeout_s",
        "policies",
    }
)
_UPSTREAM_KEYS = frozenset({"bootstrap_servers", "connect_timeout_s"})
_LIMIT_KEYS = frozenset({"max_frame_bytes", "max_in_flight_requests"})


def parse_host_port(text: str, key: str, source: str) -> HostPort:
    host, sep, port_text = str(text).rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ConfigError(f"{source}: {key}: expected HOST:PORT, got {text!r}")
    return HostPort(host=host.strip("[]"), port=int(port_text))


def _number(
    value: object, key: str, source: str, *, minimum: float, integer: bool = True
) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{source}: {key}: expected a number, got {value!r}")
    if integer and not isinstance(value, int):
        raise ConfigError(f"{source}: {key}: expected a whole number, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{source}: {key}: must be at least {minimum}, got {value!r}")
    return value


def _section(
    raw: Mapping[str, Any], key: str, allowed: frozenset[str], source: str
) -> dict[str, Any]:
    value = raw.get(key) or {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{source}: {key}: expected a mapping, got {value!r}")
    for sub in value:
        if sub not in allowed:
            raise ConfigError(
                f"{source}: {key}.{sub}: unknown key (known: {', '.join(sorted(allowed))})"
            )
    return dict(value)


def _servers(value: object, key: str, source: str) -> tuple[HostPort, ...]:
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ConfigError(f"{source}: {key}: expected a list of HOST:PORT, got {value!r}")
    return tuple(
        parse_host_port(str(item).strip(), key, source) for item in items if str(item).strip()
    )


def from_mapping(raw: Mapping[str, Any], source: str) -> GatewayConfig:
    """Build the config from parsed YAML.

    :raises ConfigError: naming the offending key and ``source``.
    """
    for key in raw:
        if key not in _TOP_KEYS:
            raise ConfigError(
                f"{source}: {key}: unknown key (known: {', '.join(sorted(_TOP_KEYS))})"
            )
    listen = parse_host_port(raw.get("listen", "127.0.0.1:9092"), "listen", source)
    advertised = raw.get("advertised_host")
    if advertised is None:
        if listen.host in ("0.0.0.0", "::"):
            raise ConfigError(
                f"{source}: advertised_host: required when listen is {listen}: clients need a "
                "name or address they can reach"
            )
        advertised = listen.host
    if not isinstance(advertised, str) or not advertised:
        raise ConfigError(f"{source}: advertised_host: expected a host name, got {advertised!r}")
    node_port_base = int(
        _number(raw.get("node_port_base", 9100), "node_port_base", source, minimum=0)
    )
    if node_port_base > 65535:
        raise ConfigError(f"{source}: node_port_base: must be a port number, got {node_port_base}")
    up = _section(raw, "upstream", _UPSTREAM_KEYS, source)
    upstream = UpstreamConfig(
        bootstrap_servers=_servers(
            up.get("bootstrap_servers"), "upstream.bootstrap_servers", source
        ),
        connect_timeout_s=float(
            _number(
                up.get("connect_timeout_s", 10.0),
                "upstream.connect_timeout_s",
                source,
                minimum=0.1,
                integer=False,
            )
        ),
    )
    lim = _section(raw, "limits", _LIMIT_KEYS, source)
    limits = LimitsConfig(
        max_frame_bytes=int(
            _number(
                lim.get("max_frame_bytes", DEFAULT_MAX_FRAME_BYTES),
                "limits.max_frame_bytes",
                source,
                minimum=64,
            )
        ),
        max_in_flight_requests=int(
            _number(
                lim.get("max_in_flight_requests", 100),
                "limits.max_in_flight_requests",
                source,
                minimum=1,
            )
        ),
    )
    metrics_raw = raw.get("metrics")
    metrics = parse_host_port(metrics_raw, "metrics", source) if metrics_raw else None
    policies = raw.get("policies") or {}
    if not isinstance(policies, Mapping):
        raise ConfigError(f"{source}: policies: expected a mapping, got {policies!r}")
    return GatewayConfig(
        listen=listen,
        advertised_host=advertised,
        node_port_base=node_port_base,
        upstream=upstream,
        limits=limits,
        metrics=metrics,
        shutdown_timeout_s=float(
            _number(
                raw.get("shutdown_timeout_s", 10.0),
                "shutdown_timeout_s",
                source,
                minimum=0,
                integer=False,
            )
        ),
        policies=MappingProxyType(dict(policies)),
        source=source,
    )


def load(path: Path | None, overrides: Mapping[str, Any] | None = None) -> GatewayConfig:
    """Read ``path`` (YAML; None for defaults), apply command-line ``overrides`` (same keys,
    dotted for nested ones: ``upstream.bootstrap_servers``), and check everything.

    :raises ConfigError: for an unreadable file, bad YAML, or a bad value.
    """
    raw: dict[str, Any] = {}
    source = "<defaults>"
    if path is not None:
        source = str(path)
        try:
            loaded = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise ConfigError(f"{source}: cannot read: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{source}: not valid YAML: {exc}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{source}: expected a mapping at the top level")
        raw = loaded or {}
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        section, _, key = dotted.rpartition(".")
        target = raw
        if section:
            target = raw.setdefault(section, {}) or {}
            raw[section] = target
        target[key] = value
    return from_mapping(raw, source)


def with_upstream(config: GatewayConfig, servers: tuple[HostPort, ...]) -> GatewayConfig:
    """The config fronting ``servers`` (used once the embedded broker is up)."""
    return replace(config, upstream=replace(config.upstream, bootstrap_servers=servers))
