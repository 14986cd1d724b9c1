"""Kafka's error codes, as kio defines them, under the names the gateway uses."""

from kio.schema.errors import ErrorCode

NONE = ErrorCode.none
CORRUPT_MESSAGE = ErrorCode.corrupt_message
UNSUPPORTED_VERSION = ErrorCode.unsupported_version
INVALID_REQUEST = ErrorCode.invalid_request
POLICY_VIOLATION = ErrorCode.policy_violation
INVALID_RECORD = ErrorCode.invalid_record
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.unknown_topic_or_partition
UNKNOWN_TOPIC_ID = ErrorCode.unknown_topic_id
TOPIC_AUTHORIZATION_FAILED = ErrorCode.topic_authorization_failed
CLUSTER_AUTHORIZATION_FAILED = ErrorCode.cluster_authorization_failed

__all__ = (
    "CLUSTER_AUTHORIZATION_FAILED",
    "CORRUPT_MESSAGE",
    "INVALID_RECORD",
    "INVALID_REQUEST",
    "NONE",
    "POLICY_VIOLATION",
    "TOPIC_AUTHORIZATION_FAILED",
    "UNKNOWN_TOPIC_ID",
    "UNKNOWN_TOPIC_OR_PARTITION",
    "UNSUPPORTED_VERSION",
    "ErrorCode",
)
