"""The topics a ShareFetch or ShareAcknowledge request (KIP-932) names, by id.

Both name topics by id only. The ids are read from the decoded request (kio): the
``topics`` a ShareFetch fetches or acknowledges, and the ``topics`` a ShareAcknowledge
acknowledges. A ShareFetch's ``forgotten_topics_data`` only leave the share session, and
are not counted.
"""

from __future__ import annotations

import uuid
from typing import Final

from .codec import decode_request
from .framing import RequestHeader

SHARE_FETCH: Final = 78
SHARE_ACKNOWLEDGE: Final = 79


def share_topic_ids(header: RequestHeader, frame: bytes) -> tuple[uuid.UUID, ...]:
    """Each topic id the request fetches or acknowledges, once each, in order.

    :raises Undecodable: for a malformed body or a version kio lacks.
    """
    if header.api_key not in (SHARE_FETCH, SHARE_ACKNOWLEDGE):
        raise ValueError(f"API key {header.api_key} is neither ShareFetch nor ShareAcknowledge")
    payload = decode_request(header, frame)
    topics = getattr(payload, "topics", None) or ()
    return tuple(dict.fromkeys(uuid.UUID(str(topic.topic_id)) for topic in topics))
