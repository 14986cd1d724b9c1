"""What a handler decides about one request: a value, never an exception."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Forward:
    """Send ``frame`` (the client's bytes, or a reduced request) upstream.

    ``on_response`` turns the broker's response frame into the one the client gets (address
    rewrite, merging local errors); None passes it through untouched.
    """

    frame: bytes
    expect_response: bool = True
    on_response: Callable[[bytes], Awaitable[bytes]] | None = None
    unanswered: Callable[[bytes], str | None] | None = None
    """Set when the client wants no answer though the broker gives one (an acks=0 Produce sent
    on with acks=-1): the answer, once ``on_response`` has made it, is not written but read by
    this, and a failure it names closes the connection, as Kafka closes an acks=0 producer's
    on an error."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """Answer locally with this response frame (no size prefix); nothing goes upstream."""

    frame: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class Close:
    """Close the client connection, logging ``reason``; ``metric_reason`` labels the count."""

    reason: str
    metric_reason: str


Outcome = Forward | Answer | Close
