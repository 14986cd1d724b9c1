"""Reads a topic manifest, the topics ``kpg policy check`` and ``kpg dry-run`` judge.

A manifest lists topics as they would be created::

    topics:
      - name: orders.v1
        partitions: 12
        replication_factor: 3
        configs: {min.insync.replicas: 2, retention.ms: 604800000}

Each topic becomes the :class:`CreateTopicRequestMetadata` the policies judge; config values
are turned into the strings Kafka would send (``true``/``false`` for booleans). What a topic
is judged by (the gateway's checks before any policy, then the chain) is ``gateway/tools.py``'s,
so that the offline check and the gateway agree.
"""

from __future__ import annotations

from collections.abc import Mapping

from policies.api import CreateTopicRequestMetadata

__all__ = ["ManifestError", "parse_manifest"]

_TOPIC_KEYS = ("name", "partitions", "replication_factor", "configs")


class ManifestError(Exception):
    """A malformed manifest; the message names the file and the key."""


def parse_manifest(
    manifest: Mapping[str, object], *, source: str
) -> tuple[CreateTopicRequestMetadata, ...]:
    """The manifest's topics as create requests.

    :raises ManifestError: naming ``source`` and the key.
    """
    topics = manifest.get("topics")
    if not isinstance(topics, list):
        raise ManifestError(f"{source}: topics: expected a list of topics")
    requests: list[CreateTopicRequestMetadata] = []
    names: set[str] = set()
    for index, entry in enumerate(topics):
        at = f"{source}: topics[{index}]"
        if not isinstance(entry, Mapping):
            raise ManifestError(f"{at}: expected a mapping with {', '.join(_TOPIC_KEYS)}")
        for key in entry:
            if key not in _TOPIC_KEYS:
                raise ManifestError(f"{at}.{key}: unknown key ({', '.join(_TOPIC_KEYS)})")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise ManifestError(f"{at}.name: expected the topic's name")
        if name in names:
            # Kafka refuses a CreateTopics that names a topic twice (INVALID_REQUEST)
            raise ManifestError(f"{at}.name: topic {name!r} is listed more than once")
        names.add(name)
        counts = []
        for key in ("partitions", "replication_factor"):
            value = entry.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ManifestError(f"{at}.{key}: expected a positive whole number, got {value!r}")
            counts.append(value)
        requests.append(
            CreateTopicRequestMetadata(
                topic=name,
                num_partitions=counts[0],
                replication_factor=counts[1],
                replicas_assignments=None,
                configs=_configs(entry.get("configs", {}), f"{at}.configs"),
            )
        )
    return tuple(requests)


def _configs(value: object, at: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ManifestError(f"{at}: expected a mapping of config names to values")
    configs = {}
    for key, item in value.items():
        if isinstance(item, bool):
            configs[str(key)] = "true" if item else "false"
        elif isinstance(item, str | int | float):
            configs[str(key)] = str(item)
        else:
            raise ManifestError(f"{at}.{key}: expected a single value, got {item!r}")
    return configs
