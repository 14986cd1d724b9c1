"""Kafka's error codes, as kio defines them, under the names the gateway uses."""

from kio.schema.errors import ErrorCode

NONE = ErrorCode.none
CORRUPT_MESSAGE = ErrorCode.corrupt_message
UNSUPPORTED_VERSION = ErrorCode.unsupported_version
INVALID_REQUEST = ErrorCode.invalid_request
POLICY_VIOLATION = ErrorCode.policy_violation
INVALID_RECORD = ErrorCode.invalid_record

__all__ = (
    "CORRUPT_MESSAGE",
    "INVALID_RECORD",
    "INVALID_REQUEST",
    "NONE",
    "POLICY_VIOLATION",
    "UNSUPPORTED_VERSION",
    "ErrorCode",
)
