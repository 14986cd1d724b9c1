"""The one shape of an answer the gateway gives itself for one item of a request."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class ItemError:
    """The gateway's answer for one item (a topic, a config resource, a partition) of a request
    it did not forward, in Kafka's words.

    ``error_code`` 0 is an item the gateway handled itself with success (a dry run it answers,
    a config it keeps). ``record_errors`` are Produce's (batch_index, message) pairs that come
    with INVALID_RECORD (KIP-467); empty for every other API. Versions of a response without
    ``error_message`` carry the bare code, as Kafka's do.
    """

    error_code: int
    error_message: str | None = None
    record_errors: tuple[tuple[int, str | None], ...] = ()

    @property
    def ok(self) -> bool:
        return self.error_code == 0


OK = ItemError(error_code=0)
"""An item handled here with success."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Note(ItemError):
    """A success with something to say, for an item that is still forwarded: where the broker
    answers the item with success, the answer carries ``error_message``; where the broker
    refuses it, the broker's error stands. (The gateway's dry-run rules on a validate_only
    request: the request would succeed, and the client learns what they would deny.)"""

    error_code: int = 0
