"""Kafka's rule for a legal topic name (``org.apache.kafka.common.internals.Topic.validate``)."""

from __future__ import annotations

import re
from typing import Final

from kio.schema.errors import ErrorCode

from .results import ItemError

MAX_NAME_LENGTH: Final = 249
_LEGAL: Final = re.compile(r"[a-zA-Z0-9._-]+")


def topic_name_problem(name: str | None) -> str | None:
    """Why ``name`` is not a legal Kafka topic name, in Kafka's words; None when it is."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > MAX_NAME_LENGTH:
        return (
            f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters, "
            f"topic name: {name}"
        )
    if not _LEGAL.fullmatch(name):
        return (
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'"
        )
    return None


def illegal_topic(name: str | None) -> ItemError | None:
    """INVALID_TOPIC_EXCEPTION (17) with Kafka's words for a name no topic can have."""
    problem = topic_name_problem(name)
    if problem is None:
        return None
    return ItemError(error_code=int(ErrorCode.invalid_topic_exception), error_message=problem)
