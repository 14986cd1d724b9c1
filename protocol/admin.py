"""Requests the gateway sends on its own (to learn a topic's or resource's current state),
and their answers as plain values.

The gateway sends them on the client's own upstream connection, so the broker applies the
client's identity and ACLs to them, and reads the answers itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kio.schema.describe_configs.v4.request import DescribeConfigsRequest as DescribeConfigsV4
from kio.schema.describe_configs.v4.request import DescribeConfigsResource as ResourceV4
from kio.schema.metadata.v12.request import MetadataRequest as MetadataV12
from kio.schema.metadata.v12.request import MetadataRequestTopic as MetadataTopicV12
from kio.schema.types import TopicName
from kio.static.primitive import i8

from .codec import Payload, decode_response, encode_request

METADATA: Final = 3
DESCRIBE_CONFIGS: Final = 32
UNKNOWN_TOPIC_OR_PARTITION: Final = 3

# Config sources (DescribeConfigs v1+): what counts as "set on the resource".
SOURCE_DYNAMIC_TOPIC: Final = 1
SOURCE_DYNAMIC_BROKER: Final = 2
SOURCE_DYNAMIC_DEFAULT_BROKER: Final = 3
SOURCE_STATIC_BROKER: Final = 4
SOURCE_DEFAULT: Final = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class InternalRequest:
    api_key: int
    api_version: int
    payload: Payload

    def frame(self, correlation_id: int) -> bytes:
        """The request frame without size prefix."""
        return encode_request(
            self.api_key, self.api_version, correlation_id, "kpg-gateway", self.payload
        )[4:]

    def read(self, frame: bytes) -> Payload:
        """:raises Undecodable: for a malformed answer."""
        return decode_response(self.api_key, self.api_version, frame)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicDescription:
    name: str
    error_code: int
    partitions: Mapping[int, tuple[int, ...]]
    """partition -> replica broker ids"""

    @property
    def exists(self) -> bool:
        return self.error_code == 0

    @property
    def replication_factor(self) -> int:
        return max((len(r) for r in self.partitions.values()), default=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigEntry:
    name: str
    value: str | None
    source: int
    read_only: bool
    is_sensitive: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceConfigs:
    resource_type: int
    resource_name: str
    error_code: int
    error_message: str | None
    entries: tuple[ConfigEntry, ...]

    def set_on_resource(self) -> dict[str, str]:
        """The configs set on the resource itself (dynamic ones), defaults excluded: what a
        config change replaces, and what AlterConfigV2Policy's before/after hold."""
        own = {SOURCE_DYNAMIC_TOPIC, SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT_BROKER}
        if self.resource_type == 4 and self.resource_name == "":
            own = {SOURCE_DYNAMIC_DEFAULT_BROKER}
        return {e.name: e.value for e in self.entries if e.source in own and e.value is not None}

    def effective(self) -> dict[str, str]:
        return {e.name: e.value for e in self.entries if e.value is not None}


def describe_topics(names: Sequence[str]) -> InternalRequest:
    payload = MetadataV12(
        topics=tuple(MetadataTopicV12(name=TopicName(n), topic_id=None) for n in names),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    return InternalRequest(api_key=METADATA, api_version=12, payload=payload)


def read_topics(payload: Payload) -> dict[str, TopicDescription]:
    return {
        t.name: TopicDescription(
            name=t.name,
            error_code=int(t.error_code),
            partitions={
                int(p.partition_index): tuple(int(r) for r in p.replica_nodes) for p in t.partitions
            },
        )
        for t in payload.topics
        if t.name is not None
    }


def broker_ids(payload: Payload) -> tuple[int, ...]:
    return tuple(int(b.node_id) for b in payload.brokers)


def describe_configs(resources: Sequence[tuple[int, str]]) -> InternalRequest:
    payload = DescribeConfigsV4(
        resources=tuple(
            ResourceV4(resource_type=i8(t), resource_name=n, configuration_keys=None)
            for t, n in resources
        ),
        include_synonyms=False,
        include_documentation=False,
    )
    return InternalRequest(api_key=DESCRIBE_CONFIGS, api_version=4, payload=payload)


def read_configs(payload: Payload) -> dict[tuple[int, str], ResourceConfigs]:
    result: dict[tuple[int, str], ResourceConfigs] = {}
    for r in payload.results:
        entries: Any = r.configs
        result[(int(r.resource_type), r.resource_name)] = ResourceConfigs(
            resource_type=int(r.resource_type),
            resource_name=r.resource_name,
            error_code=int(r.error_code),
            error_message=r.error_message,
            entries=tuple(
                ConfigEntry(
                    name=e.name,
                    value=e.value,
                    source=int(e.config_source),
                    read_only=bool(e.read_only),
                    is_sensitive=bool(e.is_sensitive),
                )
                for e in entries
            ),
        )
    return result
