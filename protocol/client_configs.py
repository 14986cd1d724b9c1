"""The requests ``kpg configs`` sends (DescribeConfigs v4, IncrementalAlterConfigs v1) and
their answers as plain values.

Resource type and config source codes are plain ints here: the gateway's own types for
dynamic client configs (see :mod:`gateway.client_configs`) are no member of any enum kio or
Kafka knows, and int8 carries them as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from kio.schema.describe_configs.v4.response import (
    DescribeConfigsResponse as DescribeConfigsResponseV4,
)
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig as AlterableConfigV1,
)
from kio.schema.incremental_alter_configs.v1.request import (
    AlterConfigsResource as AlterResourceV1,
)
from kio.schema.incremental_alter_configs.v1.request import (
    IncrementalAlterConfigsRequest as IncrementalRequestV1,
)
from kio.schema.incremental_alter_configs.v1.response import (
    IncrementalAlterConfigsResponse as IncrementalResponseV1,
)
from kio.static.primitive import i8

from .admin import DESCRIBE_CONFIGS_VERSION, describe_configs
from .alter_configs import INCREMENTAL_ALTER_CONFIGS
from .codec import decode_response_as, encode_request
from .describe_configs import DESCRIBE_CONFIGS, described_resources
from .describe_configs import DescribedConfig as DescribedConfig  # re-exported for the CLI
from .describe_configs import DescribedResource as DescribedResource

INCREMENTAL_VERSION: Final = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class AlteredResource:
    resource_type: int
    resource_name: str
    error_code: int
    error_message: str | None


def describe_request(
    resources: Sequence[tuple[int, str]],
    *,
    correlation_id: int,
    client_id: str,
    include_synonyms: bool = True,
    include_documentation: bool = False,
) -> bytes:
    """A DescribeConfigs v4 request frame (size prefix included) for every config of each
    ``(resource type, resource name)``."""
    request = describe_configs(
        resources, include_synonyms=include_synonyms, include_documentation=include_documentation
    )
    return encode_request(
        request.api_key, request.api_version, correlation_id, client_id, request.payload
    )


def read_describe_response(frame: bytes) -> tuple[DescribedResource, ...]:
    """The resources of a DescribeConfigs v4 answer (frame without size prefix), in order.

    :raises Undecodable:
    """
    return described_resources(
        decode_response_as(
            (DescribeConfigsResponseV4,), DESCRIBE_CONFIGS, DESCRIBE_CONFIGS_VERSION, frame
        )
    )


def incremental_alter_request(
    resources: Sequence[tuple[int, str, Sequence[tuple[str, int, str | None]]]],
    *,
    validate_only: bool,
    correlation_id: int,
    client_id: str,
) -> bytes:
    """An IncrementalAlterConfigs v1 request frame (size prefix included): per resource
    ``(type, name, [(config name, operation, value), ...])``."""
    payload = IncrementalRequestV1(
        resources=tuple(
            AlterResourceV1(
                resource_type=i8(t),
                resource_name=n,
                configs=tuple(
                    AlterableConfigV1(name=k, config_operation=i8(op), value=v) for k, op, v in ops
                ),
            )
            for t, n, ops in resources
        ),
        validate_only=validate_only,
    )
    return encode_request(
        INCREMENTAL_ALTER_CONFIGS, INCREMENTAL_VERSION, correlation_id, client_id, payload
    )


def read_incremental_alter_response(frame: bytes) -> tuple[AlteredResource, ...]:
    """The per-resource results of an IncrementalAlterConfigs v1 answer (no size prefix).

    :raises Undecodable:
    """
    payload = decode_response_as(
        (IncrementalResponseV1,), INCREMENTAL_ALTER_CONFIGS, INCREMENTAL_VERSION, frame
    )
    return tuple(
        AlteredResource(
            resource_type=int(r.resource_type),
            resource_name=r.resource_name,
            error_code=int(r.error_code),
            error_message=r.error_message,
        )
        for r in payload.responses
    )


def error_name(code: int) -> str:
    """Kafka's name for an error code: ``INVALID_REQUEST``; ``UNKNOWN_ERROR_CODE_<n>`` for a
    code kio does not know."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN_ERROR_CODE_{code}"
