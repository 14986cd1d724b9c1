"""What a new topic's configs would be, as Kafka's controller lists them in a CreateTopics v5+
answer (KIP-525), for the dry runs the gateway answers itself.

Kafka lists every topic config, sorted by name: the configs the request gives
(DYNAMIC_TOPIC_CONFIG), and for the rest the value of the broker config that stands for it
(its synonym: ``retention.ms`` for a topic is ``log.retention.ms``, else
``log.retention.minutes``, else ``log.retention.hours`` of the broker) with that config's
source, or Kafka's own default (DEFAULT_CONFIG). No topic config is read-only or sensitive.

What the gateway can know: the configs given, and the broker's values and sources as a broker
reports them to the client (DescribeConfigs of the BROKER resource, on the client's link).
What it cannot: a broker that reports no broker configs (Tansu), or that the client may not
describe, leaves every topic config not given unknown, and those are left out rather than
guessed; Kafka's KRaft controller reads its own static configs, which a broker's report
approximates. The synonym table is Kafka 4's (``ServerTopicConfigSynonyms``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from protocol.create_topics import TopicConfig
from protocol.describe_configs import SOURCE_DYNAMIC_TOPIC, DescribedConfig, DescribedResource

DEFAULT_CONFIG: Final = 5
_MS_PER: Final = {"ms": 1, "minutes": 60_000, "hours": 3_600_000}

TOPIC_CONFIG_SYNONYMS: Final[Mapping[str, tuple[str, ...]]] = {
    "cleanup.policy": ("log.cleanup.policy",),
    "compression.gzip.level": ("compression.gzip.level",),
    "compression.lz4.level": ("compression.lz4.level",),
    "compression.type": ("compression.type",),
    "compression.zstd.level": ("compression.zstd.level",),
    "delete.retention.ms": ("log.cleaner.delete.retention.ms",),
    "file.delete.delay.ms": ("log.segment.delete.delay.ms",),
    "flush.messages": ("log.flush.interval.messages",),
    "flush.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    "index.interval.bytes": ("log.index.interval.bytes",),
    "local.retention.bytes": ("log.local.retention.bytes",),
    "local.retention.ms": ("log.local.retention.ms",),
    "max.compaction.lag.ms": ("log.cleaner.max.compaction.lag.ms",),
    "max.message.bytes": ("message.max.bytes",),
    "message.timestamp.after.max.ms": ("log.message.timestamp.after.max.ms",),
    "message.timestamp.before.max.ms": ("log.message.timestamp.before.max.ms",),
    "message.timestamp.type": ("log.message.timestamp.type",),
    "min.cleanable.dirty.ratio": ("log.cleaner.min.cleanable.ratio",),
    "min.compaction.lag.ms": ("log.cleaner.min.compaction.lag.ms",),
    "min.insync.replicas": ("min.insync.replicas",),
    "preallocate": ("log.preallocate",),
    "retention.bytes": ("log.retention.bytes",),
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "segment.bytes": ("log.segment.bytes",),
    "segment.index.bytes": ("log.index.size.max.bytes",),
    "segment.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
    "unclean.leader.election.enable": ("unclean.leader.election.enable",),
}
"""Topic config -> the broker configs that stand for it, the first set one winning."""

NO_SYNONYM_DEFAULTS: Final[Mapping[str, str]] = {
    "follower.replication.throttled.replicas": "",
    "leader.replication.throttled.replicas": "",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
    "remote.storage.enable": "false",
}
"""Topic configs no broker config stands for: Kafka's defaults (DEFAULT_CONFIG)."""


def topic_configs(
    given: Mapping[str, str], broker: DescribedResource | None
) -> tuple[TopicConfig, ...]:
    """The configs a new topic would get, sorted by name: ``given`` (the request's) and, from
    ``broker`` (a broker's DescribeConfigs answer; None when it gave none), the broker's value
    for each topic config not given. Without broker configs only ``given`` is known."""
    configs = {
        name: TopicConfig(name=name, value=value, config_source=SOURCE_DYNAMIC_TOPIC)
        for name, value in given.items()
    }
    reported = {c.name: c for c in broker.configs} if broker is not None else {}
    if reported:
        for name, synonyms in TOPIC_CONFIG_SYNONYMS.items():
            if name not in configs:
                found = _from_synonyms(name, synonyms, reported)
                if found is not None:
                    configs[name] = found
        for name, value in NO_SYNONYM_DEFAULTS.items():
            configs.setdefault(
                name, TopicConfig(name=name, value=value, config_source=DEFAULT_CONFIG)
            )
    return tuple(configs[name] for name in sorted(configs))


def _from_synonyms(
    name: str, synonyms: tuple[str, ...], reported: Mapping[str, DescribedConfig]
) -> TopicConfig | None:
    for synonym in synonyms:
        entry = reported.get(synonym)
        if entry is None or entry.value is None:
            continue
        value = entry.value
        unit = synonym.rsplit(".", 1)[-1]
        if unit in ("minutes", "hours") and value.lstrip("-").isdigit():
            value = str(int(value) * _MS_PER[unit])
        return TopicConfig(
            name=name,
            value=value,
            config_source=entry.source,
            is_sensitive=entry.is_sensitive,
        )
    return None
