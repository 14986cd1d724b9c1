"""Plug-in policies that ship with the gateway, ready to name in a ``*.class.name`` key.

* :class:`RequireHeaderValidationPolicy` — the sample policy of the record validation
  proposal, as written there: a record must carry a header whose key is the topic's
  ``record.validation.policy`` value, taken literally.

The richer record policy, :class:`policies.records.BuiltinRecordValidationPolicy`, lives in
:mod:`policies.records`.
"""

from __future__ import annotations

from typing import Final

from policies.api import (
    InvalidRecord,
    RecordIntrospectionHints,
    RecordProxy,
    RecordValidationPolicy,
    TopicMetadata,
)

__all__ = ["RequireHeaderValidationPolicy"]

_HEADERS_ONLY: Final = RecordIntrospectionHints(
    access_headers=True, access_key_bytes=0, access_value_bytes=0
)


class RequireHeaderValidationPolicy(RecordValidationPolicy):
    """Accepts only records with a header whose key equals the topic's
    ``record.validation.policy`` (the whole value, case-sensitive; the header's value may be
    anything, null included).

    ``record.validation.policy.class.name: policies.builtin.RequireHeaderValidationPolicy``
    """

    def get_hints(self) -> RecordIntrospectionHints:
        """Headers only: the gateway need not read keys or values."""
        return _HEADERS_ONLY

    def required_headers_for(self, validation_policy: str) -> tuple[str, ...]:
        """The whole value, as one key: the gateway may check it without calling
        :meth:`validate` for records that carry it
        (:class:`policies.records.RequiredHeadersOnly`)."""
        return (validation_policy,)

    def validate(self, topic: TopicMetadata, record: RecordProxy) -> None:
        """:raises InvalidRecord: if no header has the key; the proposal's message."""
        required = topic.validation_policy
        for key, _ in record.headers:
            if key == required:
                return
        raise InvalidRecord(
            f"Topic {topic.topic} requires records to contain a header with key: {required}"
        )
