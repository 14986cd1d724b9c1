"""Who the client is: TLS client certificates (for real) and SASL (scripted upstream)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.api_versions.v3.response import ApiVersion, ApiVersionsResponse
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.create_topics.v7.response import CreatableTopicResult, CreateTopicsResponse
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32, i32Timedelta, i64Timedelta

from gateway.config import HostPort
from gateway.principal import ssl_principal
from tests.plugins.kafka_test_policies import RecordingTopicActionPolicy
from tests.scripted import ScriptedCluster
from tests.support import (
    GatewayThread,
    RawClient,
    gateway_config,
    make_pki,
    ssl_client,
    tls_listener,
    unique_name,
)
from tests.x509 import BMP, CN, EMAIL, IA5, OU, TELETEX, Issuer, O, attr, unsigned

pytestmark = pytest.mark.inproc

# By its full module name, so the test reads the same class object the gateway loaded.
TOPIC_ACTION = {
    "topic.action.policy.class.name": (
        "tests.plugins.kafka_test_policies.RecordingTopicActionPolicy"
    ),
}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A client certificate (``client``) with a full distinguished name."""
    return make_pki(tmp_path_factory.mktemp("pki"), {"client": "/C=US/O=Acme/OU=eng/CN=alice"})


def test_tls_client_certificate_is_the_principal(broker: HostPort, pki: Path) -> None:
    RecordingTopicActionPolicy.seen.clear()
    gw = GatewayThread(gateway_config(broker, policies=TOPIC_ACTION, tls=tls_listener(pki))).start()
    try:
        admin = AdminClient(ssl_client(gw.bootstrap, pki, "client"))
        topic = unique_name("tls")
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
        (seen,) = [m for m in RecordingTopicActionPolicy.seen if m.topic == topic]
        assert seen.principal == "User:CN=alice,OU=eng,O=Acme,C=US"
        # Without a client certificate the TLS handshake fails: nothing gets through.
        anonymous = AdminClient(ssl_client(gw.bootstrap, pki, None))
        other = unique_name("tls")
        with pytest.raises(KafkaException):  # librdkafka reports a transport failure
            anonymous.create_topics([NewTopic(other, 1, 1)], request_timeout=5)[other].result(10)
        assert not [m for m in RecordingTopicActionPolicy.seen if m.topic == other]
    finally:
        gw.stop()


def test_plain_connection_has_no_principal(broker: HostPort) -> None:
    RecordingTopicActionPolicy.seen.clear()
    gw = GatewayThread(gateway_config(broker, policies=TOPIC_ACTION)).start()
    try:
        topic = unique_name("anon")
        admin = AdminClient({"bootstrap.servers": gw.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
        assert [m.principal for m in RecordingTopicActionPolicy.seen if m.topic == topic] == [None]
    finally:
        gw.stop()


# Subjects whose name OpenSSL's parsed form (``getpeercert()``) does not give as Java does,
# with Java 17's name for each (tests/unit/test_x500_names.py checks these against Java).
AS_JAVA_NAMES_THEM = [
    (
        "email",
        [[attr(EMAIL, "a@b.c", IA5)], [attr(CN, "alice")]],
        "CN=alice,1.2.840.113549.1.9.1=#16056140622e63",
    ),
    ("bmp", [[attr(CN, "admin", BMP)]], "CN=\\00a\\00d\\00m\\00i\\00n"),
    ("empty_rdn", [[attr(CN, "admin")], []], ",CN=admin"),
    ("spaces", [[attr(CN, "  bob#1  ")]], "CN=\\ \\ bob\\#1\\ \\ "),
    ("unsorted_rdn", [[attr(OU, "a"), attr(CN, "b")]], "OU=a+CN=b"),
    ("no_subject", [], ""),
]


def test_a_certificate_subject_is_the_principal_java_names(
    broker: HostPort, tmp_path: Path
) -> None:
    """Through a real TLS handshake the principal is the subject as Java names it (read from
    the DER the handshake gave, ``getpeercert(binary_form=True)``). OpenSSL's parsed form
    (``getpeercert()``) had given ``emailAddress=a@b.c``, ``CN=admin`` (a BMPString, and a CN
    beside an empty RDN), a space escaped once at each end, and for an empty subject no
    principal at all (unauthenticated) where Kafka's is ``User:``. A subject Java would name
    with replacement characters (Latin-1 in a TeletexString) fails authentication."""
    certs = make_pki(tmp_path, {"client": "/CN=client"})
    issuer = Issuer(certs)
    for stem, subject, _ in AS_JAVA_NAMES_THEM:
        issuer.pem(subject, stem)
    issuer.pem([[attr(CN, "café", TELETEX)]], "latin1")
    RecordingTopicActionPolicy.seen.clear()
    gw = GatewayThread(gateway_config(broker, policies=TOPIC_ACTION, tls=tls_listener(certs)))
    gw.start()
    try:
        principals = {}
        for stem, _, _ in AS_JAVA_NAMES_THEM:
            topic = unique_name(f"dn-{stem}")
            admin = AdminClient(ssl_client(gw.bootstrap, certs, stem))
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
            principals[stem] = [
                m.principal for m in RecordingTopicActionPolicy.seen if m.topic == topic
            ]
        refused = unique_name("dn-latin1")
        latin1 = AdminClient(ssl_client(gw.bootstrap, certs, "latin1"))
        try:
            latin1.create_topics([NewTopic(refused, 1, 1)], request_timeout=5)[refused].result(10)
        except KafkaException:  # librdkafka reports the closed connection as a transport failure
            latin1_served = False
        else:
            latin1_served = True
    finally:
        gw.stop()
    assert principals == {stem: [f"User:{java}"] for stem, _, java in AS_JAVA_NAMES_THEM}
    assert not latin1_served
    assert not [m for m in RecordingTopicActionPolicy.seen if m.topic == refused]


@pytest.mark.unit
def test_rfc2253_escaping() -> None:
    cert = unsigned([[attr(O, "Acme, Inc.")], [attr(CN, "bob+1")]])
    assert ssl_principal(cert) == "User:CN=bob\\+1,O=Acme\\, Inc."
    assert ssl_principal(None) is None


ZERO = i32Timedelta.parse(timedelta(0))


def _scripted_sasl(outcomes: list[bool]):  # type: ignore[no-untyped-def]
    """A scripted broker that runs a SASL exchange: the test broker cannot run SASL
    (TEST_BROKER.md), so the broker side of the exchange is scripted here."""
    answers = list(outcomes)

    async def respond(me, header, request):  # type: ignore[no-untyped-def]
        if header.api_key == 18:
            return ApiVersionsResponse(
                error_code=ErrorCode.none,
                throttle_time=ZERO,
                api_keys=tuple(
                    ApiVersion(api_key=i16(k), min_version=i16(lo), max_version=i16(hi))
                    for k, lo, hi in ((17, 0, 1), (18, 0, 3), (19, 2, 7), (36, 0, 2))
                ),
            )
        if header.api_key == 17:
            return SaslHandshakeResponse(
                error_code=ErrorCode.none, mechanisms=("PLAIN", "SCRAM-SHA-256")
            )
        if header.api_key == 36:
            ok = answers.pop(0)
            return SaslAuthenticateResponse(
                error_code=ErrorCode.none if ok else ErrorCode.sasl_authentication_failed,
                error_message=None if ok else "Authentication failed",
                auth_bytes=b"server-message",
                session_lifetime=i64Timedelta.parse(timedelta(0)),
            )
        if header.api_key == 19:
            return CreateTopicsResponse(
                throttle_time=ZERO,
                topics=tuple(
                    CreatableTopicResult(
                        name=t.name,
                        topic_id=None,
                        error_code=ErrorCode.none,
                        error_message=None,
                        configs=None,
                    )
                    for t in request.topics
                ),
            )
        raise AssertionError(f"unexpected API {header.api_key}")

    return respond


def _exchange(mechanism: str, messages: list[bytes], outcomes: list[bool]) -> str | None:
    RecordingTopicActionPolicy.seen.clear()
    cluster = ScriptedCluster()
    upstream = cluster.add(_scripted_sasl(outcomes), "sasl-broker")
    assert upstream.address is not None
    gw = GatewayThread(gateway_config(upstream.address, policies=TOPIC_ACTION)).start()
    try:
        client = RawClient(gw.bootstrap)
        assert client.request(17, 1, SaslHandshakeRequest(mechanism=mechanism)).error_code == 0
        for message, accepted in zip(messages, outcomes, strict=True):
            answer = client.request(36, 2, SaslAuthenticateRequest(auth_bytes=message))
            if not accepted:
                # The refusal reaches the client, then the gateway closes the connection, as
                # Kafka does, though this scripted broker would keep it open: nothing more is
                # served on it, under any principal.
                assert answer.error_code == ErrorCode.sasl_authentication_failed
                assert client.is_closed()
                return None
        topic = unique_name("sasl")
        client.request(
            19,
            7,
            CreateTopicsRequest(
                topics=(
                    CreatableTopic(
                        name=TopicName(topic),
                        num_partitions=i32(1),
                        replication_factor=i16(1),
                        assignments=(),
                        configs=(),
                    ),
                ),
                timeout=ZERO,
                validate_only=False,
            ),
        )
        (seen,) = [m for m in RecordingTopicActionPolicy.seen if m.topic == topic]
        return seen.principal
    finally:
        gw.stop()
        cluster.close()


def test_sasl_plain_principal_after_broker_success() -> None:
    assert _exchange("PLAIN", [b"\x00alice\x00secret"], [True]) == "User:alice"


def test_sasl_plain_failure_leaves_no_principal() -> None:
    assert _exchange("PLAIN", [b"\x00mallory\x00wrong"], [False]) is None


def test_sasl_scram_principal_after_the_final_round() -> None:
    messages = [b"n,,n=bob=2Cjr,r=abc123", b"c=biws,r=abc123xyz,p=proof"]
    assert _exchange("SCRAM-SHA-256", messages, [True, True]) == "User:bob,jr"
    assert _exchange("SCRAM-SHA-256", messages, [True, False]) is None
