"""DescribeConfigs: the broker's answer, plus the topic configs the gateway keeps itself.

A topic's ``record.validation.policy`` lives in the gateway's state store (a broker would
refuse it); it is shown with the source DYNAMIC_TOPIC_CONFIG, as the broker shows a topic's
own configs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol import describe_configs as dc
from protocol.framing import RequestHeader

from ..record_validation import VALIDATION_POLICY_KEY
from . import Forward, Outcome

if TYPE_CHECKING:
    from gateway.connection import ConnectionContext

API_KEY = dc.DESCRIBE_CONFIGS
VERSIONS = dc.VERSIONS
TOPIC = 2
DYNAMIC_TOPIC_CONFIG = 1


async def handle(ctx: ConnectionContext, header: RequestHeader, frame: bytes) -> Outcome:
    request = dc.read_request(header, frame)
    extra: dict[tuple[int, str], list[dc.LocalConfig]] = {}
    for resource in request.resources:
        if resource.resource_type != TOPIC:
            continue
        value = ctx.validation_policy_of(resource.resource_name)
        if value is not None:
            extra[(TOPIC, resource.resource_name)] = [
                dc.LocalConfig(
                    name=VALIDATION_POLICY_KEY,
                    value=value,
                    source=DYNAMIC_TOPIC_CONFIG,
                    synonyms=(
                        dc.Synonym(
                            name=VALIDATION_POLICY_KEY, value=value, source=DYNAMIC_TOPIC_CONFIG
                        ),
                    ),
                )
            ]
    if not extra:
        return Forward(frame=frame)

    async def merge(response: bytes) -> bytes:
        return dc.answer(request, header.correlation_id, {}, response, extra)

    return Forward(frame=frame, on_response=merge)
