"""Plug-ins used by the tests, loaded by class name from this directory (class.path).

``KafkaLikeCreateTopicPolicy`` re-implements, in our own code, the rules of the policy that
Kafka's CreateTopics integration tests configure, so the gateway can be held to Kafka's
semantics: messages, per-topic failure, validate_only.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from policies.api import (
    AlterConfigPolicy,
    AlterConfigRequestMetadata,
    AlterConfigV2Policy,
    AlterConfigV2RequestMetadata,
    CreateTopicPolicy,
    CreateTopicRequestMetadata,
    PolicyViolation,
    RecordIntrospectionHints,
    RecordProxy,
    RecordValidationPolicy,
    TopicActionPolicy,
    TopicActionRequestMetadata,
    TopicMetadata,
)


class KafkaLikeCreateTopicPolicy(CreateTopicPolicy):
    configured: Mapping[str, str] | None = None

    def configure(self, configs: Mapping[str, str]) -> None:
        KafkaLikeCreateTopicPolicy.configured = dict(configs)

    def validate(self, request_metadata: CreateTopicRequestMetadata) -> None:
        partitions = request_metadata.num_partitions
        if partitions is not None:
            if partitions < 5:
                raise PolicyViolation(
                    f"Topics should have at least 5 partitions, received {partitions}"
                )
            if partitions > 10:
                retention = request_metadata.configs.get("retention.ms")
                if retention is None or int(retention) > 5000:
                    raise PolicyViolation(
                        "RetentionMs should be less than 5000ms if partitions > 10"
                    )
        else:
            assert request_metadata.replicas_assignments is not None
            count = len(request_metadata.replicas_assignments)
            if count != 3:
                raise PolicyViolation(
                    f"Topic partitions should have 3 partitions, received {count}"
                )


class CrashingCreateTopicPolicy(CreateTopicPolicy):
    def validate(self, request_metadata: CreateTopicRequestMetadata) -> None:
        raise RuntimeError("the policy's database is down")


class HangingCreateTopicPolicy(CreateTopicPolicy):
    release = threading.Event()
    entered = threading.Event()
    """Set once a call is waiting for ``release``."""

    def validate(self, request_metadata: CreateTopicRequestMetadata) -> None:
        if request_metadata.topic.startswith("hang"):
            self.entered.set()
            self.release.wait(30)
        time.sleep(0)


class SpinningCreateTopicPolicy(CreateTopicPolicy):
    """Burns CPU in Python (holding the interpreter's lock but for its switch interval) on a
    topic named ``spin...`` until ``release``."""

    release = threading.Event()

    def validate(self, request_metadata: CreateTopicRequestMetadata) -> None:
        if request_metadata.topic.startswith("spin"):
            spins = 0
            while not self.release.is_set():
                spins += 1


class MinInsyncAlterConfigPolicy(AlterConfigPolicy):
    """Kafka's AlterConfigPolicy test semantics: min.insync.replicas may not be changed."""

    seen: list[AlterConfigRequestMetadata] = []

    def validate(self, request_metadata: AlterConfigRequestMetadata) -> None:
        MinInsyncAlterConfigPolicy.seen.append(request_metadata)
        if "min.insync.replicas" in request_metadata.configs:
            raise PolicyViolation("Changing min.insync.replicas is not allowed")


class RecordingAlterConfigV2Policy(AlterConfigV2Policy):
    seen: list[AlterConfigV2RequestMetadata] = []

    def validate(self, request_metadata: AlterConfigV2RequestMetadata) -> None:
        RecordingAlterConfigV2Policy.seen.append(request_metadata)


class RecordingTopicActionPolicy(TopicActionPolicy):
    seen: list[TopicActionRequestMetadata] = []

    def validate(self, request_metadata: TopicActionRequestMetadata) -> None:
        RecordingTopicActionPolicy.seen.append(request_metadata)
        if request_metadata.topic.startswith("forbidden-"):
            raise PolicyViolation(
                f"{request_metadata.action.name} of {request_metadata.topic} is not allowed"
            )


class HangingAlterConfigPolicy(AlterConfigPolicy):
    """Never returns (until released) for a resource whose name starts with ``hang``."""

    release = threading.Event()

    def validate(self, request_metadata: AlterConfigRequestMetadata) -> None:
        if request_metadata.resource.name.startswith("hang"):
            self.release.wait(60)


class HangingRecordValidationPolicy(RecordValidationPolicy):
    """Never returns (until released) for records of a topic whose name starts with ``hang``."""

    release = threading.Event()

    def get_hints(self) -> RecordIntrospectionHints:
        return RecordIntrospectionHints(
            access_headers=False, access_key_bytes=0, access_value_bytes=0
        )

    def validate(self, topic_metadata: TopicMetadata, record: RecordProxy) -> None:
        if topic_metadata.topic.startswith("hang"):
            self.release.wait(60)


class SlowRecordValidationPolicy(RecordValidationPolicy):
    """Takes ``SECONDS`` per record of a topic whose name starts with ``slow`` (a plug-in
    that asks a service, say); any other record at once. Always passes."""

    SECONDS = 1.5

    def get_hints(self) -> RecordIntrospectionHints:
        return RecordIntrospectionHints(
            access_headers=False, access_key_bytes=0, access_value_bytes=0
        )

    def validate(self, topic_metadata: TopicMetadata, record: RecordProxy) -> None:
        if topic_metadata.topic.startswith("slow"):
            time.sleep(self.SECONDS)


class GatedCreateTopicPolicy(CreateTopicPolicy):
    """Allows everything; holds a worker of ``kpg run --workers`` in ``configure()`` (at its
    start-up or reload) while ``<test.gate.dir>/hold-worker-<index>`` exists, after writing
    ``<test.gate.dir>/configuring-<pid>``: a test can keep a worker between reading its
    configuration and serving. Elsewhere (a worker is the process with --worker-index in its
    command line) it does not wait. Then fails as WorkerRefusedCreateTopicPolicy does in the
    workers named by ``test.fail.in.workers``."""

    def configure(self, configs: Mapping[str, str]) -> None:
        self._hold(configs)
        WorkerRefusedCreateTopicPolicy().configure(configs)

    def _hold(self, configs: Mapping[str, str]) -> None:
        gate = configs.get("test.gate.dir")
        if not gate or "--worker-index" not in sys.argv:
            return
        index = sys.argv[sys.argv.index("--worker-index") + 1]
        Path(gate, f"configuring-{os.getpid()}").touch()
        deadline = time.monotonic() + 120
        while Path(gate, f"hold-worker-{index}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)

    def validate(self, request_metadata: CreateTopicRequestMetadata) -> None:
        return None


_CONFIGURED = [0]
"""How many times a WorkerRefusedCreateTopicPolicy was configured in this process."""


class WorkerRefusedCreateTopicPolicy(CreateTopicPolicy):
    """Allows everything; its ``configure()`` fails in the workers of ``kpg run --workers``
    whose index is in ``test.fail.in.workers`` (comma-separated), and nowhere else (not in
    the supervisor's check): a file only a worker refuses. ``test.fail.in.worker.from``
    ``W:N`` makes it fail in worker W from the Nth time it is configured in that process on
    (start-up is the first, each reload one more), whatever the file."""

    def configure(self, configs: Mapping[str, str]) -> None:
        if "--worker-index" not in sys.argv:
            return
        index = sys.argv[sys.argv.index("--worker-index") + 1]
        _CONFIGURED[0] += 1
        if index in configs.get("test.fail.in.workers", "").split(","):
            raise RuntimeError(f"refused in worker {index}")
        worker, _, nth = configs.get("test.fail.in.worker.from", "").partition(":")
        if worker == index and _CONFIGURED[0] >= int(nth):
            raise RuntimeError(f"refused in worker {index} (configured {_CONFIGURED[0]} times)")

    def validate(self, request_metadata: CreateTopicRequestMetadata) -> None:
        return None
