"""Requests the gateway sends on its own (to learn a topic's or resource's current state),
and their answers as plain values.

The gateway sends them on the client's own upstream connection, so the broker applies the
client's identity and ACLs to them, and reads the answers itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from kio.schema.describe_configs.v4.request import DescribeConfigsRequest as DescribeConfigsV4
from kio.schema.describe_configs.v4.request import DescribeConfigsResource as ResourceV4
from kio.schema.describe_configs.v4.response import (
    DescribeConfigsResponse as DescribeConfigsResponseV4,
)
from kio.schema.incremental_alter_configs.v1.request import (
    AlterConfigsResource as AlterResourceV1,
)
from kio.schema.incremental_alter_configs.v1.request import (
    IncrementalAlterConfigsRequest as IncrementalAlterConfigsV1,
)
from kio.schema.incremental_alter_configs.v1.response import (
    IncrementalAlterConfigsResponse as IncrementalAlterConfigsResponseV1,
)
from kio.schema.metadata.v12.request import MetadataRequest as MetadataV12
from kio.schema.metadata.v12.request import MetadataRequestTopic as MetadataTopicV12
from kio.schema.metadata.v12.response import MetadataResponse as MetadataResponseV12
from kio.schema.types import TopicName
from kio.static.primitive import i8
from kio.static.protocol import RequestPayload, ResponsePayload

from .addresses import METADATA
from .alter_configs import INCREMENTAL_ALTER_CONFIGS, AlterConfigsResponse
from .codec import decode_response_as, encode_request
from .describe_configs import DESCRIBE_CONFIGS, DescribedResource, described_resources
from .results import ItemError

DESCRIBE_CONFIGS_VERSION: Final = 4
INCREMENTAL_ALTER_CONFIGS_VERSION: Final = 1

# Config sources (DescribeConfigs v1+) besides the dynamic ones of protocol.describe_configs.
SOURCE_STATIC_BROKER: Final = 4
SOURCE_DEFAULT: Final = 5


ResponseT = TypeVar("ResponseT", bound=ResponsePayload)
"""The kio entity a request of the gateway's own is answered with."""
_Response_co = TypeVar("_Response_co", bound=ResponsePayload, covariant=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class InternalRequest(Generic[_Response_co]):
    """A request the gateway writes, typed by the kio entity of its answer (``response``)."""

    api_key: int
    api_version: int
    payload: RequestPayload
    response: type[_Response_co]
    """The answer's entity: kio's response of ``api_key`` at ``api_version``."""

    def frame(self, correlation_id: int) -> bytes:
        """The request frame without size prefix."""
        return encode_request(
            self.api_key, self.api_version, correlation_id, "kpg-gateway", self.payload
        )[4:]

    def read(self, frame: bytes) -> _Response_co:
        """:raises Undecodable: for a malformed answer."""
        return decode_response_as((self.response,), self.api_key, self.api_version, frame)


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


ResourceConfigs = DescribedResource
"""A resource's configs as DescribeConfigs reports them (kept under this name here)."""


def describe_topics(names: Sequence[str]) -> InternalRequest[MetadataResponseV12]:
    payload = MetadataV12(
        topics=tuple(MetadataTopicV12(name=TopicName(n), topic_id=None) for n in names),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    return InternalRequest(
        api_key=METADATA, api_version=12, payload=payload, response=MetadataResponseV12
    )


def read_topics(payload: MetadataResponseV12) -> dict[str, TopicDescription]:
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


def broker_ids(payload: MetadataResponseV12) -> tuple[int, ...]:
    return tuple(int(b.node_id) for b in payload.brokers)


def describe_configs(
    resources: Sequence[tuple[int, str]],
    *,
    include_synonyms: bool = False,
    include_documentation: bool = False,
) -> InternalRequest[DescribeConfigsResponseV4]:
    """A DescribeConfigs v4 request for every config of each ``(resource type, name)``."""
    payload = DescribeConfigsV4(
        resources=tuple(
            ResourceV4(resource_type=i8(t), resource_name=n, configuration_keys=None)
            for t, n in resources
        ),
        include_synonyms=include_synonyms,
        include_documentation=include_documentation,
    )
    return InternalRequest(
        api_key=DESCRIBE_CONFIGS,
        api_version=DESCRIBE_CONFIGS_VERSION,
        payload=payload,
        response=DescribeConfigsResponseV4,
    )


def read_configs(payload: DescribeConfigsResponseV4) -> dict[tuple[int, str], ResourceConfigs]:
    return {(r.resource_type, r.resource_name): r for r in described_resources(payload)}


def authorize_alter_configs(
    resources: Sequence[tuple[int, str]],
) -> InternalRequest[IncrementalAlterConfigsResponseV1]:
    """A validate_only IncrementalAlterConfigs (v1) of each ``(resource type, name)`` with no
    config entries: it changes nothing, and a Kafka broker answers it only after authorizing
    ALTER_CONFIGS on each resource (TOPIC_AUTHORIZATION_FAILED for a topic the client may
    not alter), so its answer says whether the client may change the resources' configs."""
    payload = IncrementalAlterConfigsV1(
        resources=tuple(
            AlterResourceV1(resource_type=i8(t), resource_name=n, configs=()) for t, n in resources
        ),
        validate_only=True,
    )
    return InternalRequest(
        api_key=INCREMENTAL_ALTER_CONFIGS,
        api_version=INCREMENTAL_ALTER_CONFIGS_VERSION,
        payload=payload,
        response=IncrementalAlterConfigsResponseV1,
    )


def read_alter_results(payload: AlterConfigsResponse) -> dict[tuple[int, str], ItemError]:
    """``(resource type, name)`` -> the broker's result for it, from an AlterConfigs or
    IncrementalAlterConfigs answer; an empty message is read as none."""
    return {
        (int(r.resource_type), r.resource_name): ItemError(
            error_code=int(r.error_code), error_message=r.error_message or None
        )
        for r in payload.responses
    }
