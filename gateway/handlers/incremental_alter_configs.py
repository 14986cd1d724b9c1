"""IncrementalAlterConfigs (v0-v1): each config resource through the policy chain.

The flow (current configs read with DescribeConfigs, SET, DELETE, APPEND and SUBTRACT applied
to them, per-resource decisions, forward / answer / merge, validate_only) is the one the
legacy AlterConfigs uses; it lives in :mod:`.alter_configs`, which describes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol import alter_configs as ac
from protocol.framing import RequestHeader

from . import Outcome
from .alter_configs import config_change

if TYPE_CHECKING:
    from gateway.connection import ConnectionContext

API_KEY = ac.INCREMENTAL_ALTER_CONFIGS
VERSIONS = ac.INCREMENTAL_VERSIONS


async def handle(ctx: ConnectionContext, header: RequestHeader, frame: bytes) -> Outcome:
    return await config_change(ctx, header, frame)
