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
TOPIC_ALREADY_EXISTS = ErrorCode.topic_already_exists
INVALID_TOPIC_EXCEPTION = ErrorCode.invalid_topic_exception
INVALID_CONFIG = ErrorCode.invalid_config
UNKNOWN_SERVER_ERROR = ErrorCode.unknown_server_error
COORDINATOR_NOT_AVAILABLE = ErrorCode.coordinator_not_available
UNSUPPORTED_ENDPOINT_TYPE = ErrorCode.unsupported_endpoint_type
UNSUPPORTED_SASL_MECHANISM = ErrorCode.unsupported_sasl_mechanism
SASL_AUTHENTICATION_FAILED = ErrorCode.sasl_authentication_failed
KAFKA_STORAGE_ERROR = ErrorCode.kafka_storage_error
NOT_ENOUGH_REPLICAS = ErrorCode.not_enough_replicas
OPERATION_NOT_ATTEMPTED = ErrorCode.operation_not_attempted
REQUEST_TIMED_OUT = ErrorCode.request_timed_out
INVALID_REQUIRED_ACKS = ErrorCode.invalid_required_acks
INVALID_PARTITIONS = ErrorCode.invalid_partitions
INVALID_REPLICA_ASSIGNMENT = ErrorCode.invalid_replica_assignment
INVALID_SESSION_TIMEOUT = ErrorCode.invalid_session_timeout

__all__ = (
    "CLUSTER_AUTHORIZATION_FAILED",
    "COORDINATOR_NOT_AVAILABLE",
    "CORRUPT_MESSAGE",
    "INVALID_CONFIG",
    "INVALID_PARTITIONS",
    "INVALID_RECORD",
    "INVALID_REPLICA_ASSIGNMENT",
    "INVALID_REQUIRED_ACKS",
    "INVALID_SESSION_TIMEOUT",
    "INVALID_REQUEST",
    "KAFKA_STORAGE_ERROR",
    "INVALID_TOPIC_EXCEPTION",
    "NONE",
    "OPERATION_NOT_ATTEMPTED",
    "POLICY_VIOLATION",
    "REQUEST_TIMED_OUT",
    "TOPIC_ALREADY_EXISTS",
    "TOPIC_AUTHORIZATION_FAILED",
    "UNKNOWN_SERVER_ERROR",
    "UNKNOWN_TOPIC_ID",
    "SASL_AUTHENTICATION_FAILED",
    "UNKNOWN_TOPIC_OR_PARTITION",
    "UNSUPPORTED_ENDPOINT_TYPE",
    "UNSUPPORTED_SASL_MECHANISM",
    "UNSUPPORTED_VERSION",
    "ErrorCode",
)
