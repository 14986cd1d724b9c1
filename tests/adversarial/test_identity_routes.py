"""Who the gateway thinks a client is: no client can make the gateway name it a principal the
broker did not authenticate (a rule that lets ``User:admin`` do what others may not would then
let it through).

The broker side is the test broker behind :mod:`tests.security_front` with TLS and SASL
(Tansu has no SASL): the front authenticates with fixed credentials as Kafka does, OAUTHBEARER
tokens issued by its token endpoint. The gateway reads the principal from the client's SASL
messages and trusts it once the broker accepts the exchange, so it must read exactly what the
broker reads.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import ssl
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.types import TopicName

from protocol import create_topics as ct
from protocol.errors import POLICY_VIOLATION
from tests.security.conftest import (  # noqa: F401 - the secured upstream's fixtures
    DELEGATION_TOKEN_HMAC,
    OAUTH_CLIENT_SECRET,
    Upstream,
    pki,
    sasl_ssl_upstream,
)
from tests.security.test_upstream_tls import listener_tls
from tests.support import (
    BrokerTap,
    GatewayThread,
    RawClient,
    gateway_config,
    make_pki,
    spool_events,
    tls_context,
    tls_listener,
)
from tests.x509 import BMP, CN, PRINTABLE, Issuer, O, attr

pytestmark = pytest.mark.adversarial

CREATE_TOPICS = 19

POLICIES = {
    "rules": [
        {
            "name": "platform-topics",
            "type": "protected.topics",
            "topics": ["__.*"],
            "allowed.principals": ["User:admin"],
        }
    ]
}


@pytest.fixture
def gateway(sasl_ssl_upstream: Upstream) -> Iterator[GatewayThread]:  # noqa: F811
    config = gateway_config(
        sasl_ssl_upstream.front.address,
        upstream={"tls": {"ca_file": str(sasl_ssl_upstream.pki / "ca.pem")}},
        tls=listener_tls(sasl_ssl_upstream.pki, client_auth="none"),
        policies=POLICIES,
    )
    running = GatewayThread(config).start()
    try:
        yield running
    finally:
        running.stop()


def token_for(url: str, client_id: str, secret: str) -> str:
    form = urllib.parse.urlencode(
        {
            "grant_type": "client_credentials",
            "client_id": client_id,
            "client_secret": secret,
        }
    ).encode()
    with urllib.request.urlopen(url, form, timeout=10) as answer:  # noqa: S310 - loopback
        token: str = json.load(answer)["access_token"]
    return token


def unsigned_token(subject: str) -> str:
    """A JWT nobody issued, naming ``subject``."""
    parts = ({"alg": "none", "typ": "JWT"}, {"sub": subject, "exp": 4102444800})
    encoded = [base64.urlsafe_b64encode(json.dumps(p).encode()).decode().rstrip("=") for p in parts]
    return ".".join([*encoded, "c2ln"])


def broker_has(upstream: Upstream, topic: str) -> bool:
    """Whether the broker itself (behind the front, asked directly) has ``topic``."""
    client = RawClient(str(upstream.front.broker))
    try:
        answer = client.request(
            3,
            12,
            MetadataRequest(
                topics=(MetadataRequestTopic(topic_id=None, name=TopicName(topic)),),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
        )
    finally:
        client.sock.close()
    (found,) = answer.topics
    return int(found.error_code) == 0


def create_topic(raw: RawClient, topic: str) -> int | None:
    """CreateTopics of ``topic`` on ``raw``: its error code, None when the gateway closed the
    connection instead."""
    spec = ct.TopicSpec(
        name=topic, num_partitions=1, replication_factor=1, assignments=(), configs=()
    )
    raw.send_bytes(
        ct.build_request(
            [spec], validate_only=False, timeout_ms=5000, correlation_id=99, client_id="m"
        )
    )
    try:
        answer = raw.recv_frame()
    except (ConnectionError, OSError):
        return None
    return int(ct.read_answer(4, answer)[topic].error_code)


def test_oauthbearer_auth_given_twice_names_no_one_but_the_broker_s_principal(
    sasl_ssl_upstream: Upstream,  # noqa: F811 - the fixture imported above
    gateway: GatewayThread,
) -> None:
    """OAUTHBEARER's first message with two ``auth`` pairs: an unsigned token naming admin,
    then the client's own valid one. Kafka reads the pairs into a map, so the last counts and
    the broker authenticates kpg-oauth; a gateway reading the first would name the connection
    User:admin and let it create a protected topic. The topic must not reach the broker."""
    tokens = sasl_ssl_upstream.tokens
    assert tokens is not None
    valid = token_for(tokens.url, "kpg-oauth", OAUTH_CLIENT_SECRET)
    message = f"n,,\x01auth=Bearer {unsigned_token('admin')}\x01auth=Bearer {valid}\x01\x01"
    topic = f"__evil-{uuid.uuid4().hex[:8]}"
    raw = RawClient(gateway.bootstrap, tls=tls_context(sasl_ssl_upstream.pki, "alice"))
    try:
        handshake = raw.request(17, 1, SaslHandshakeRequest(mechanism="OAUTHBEARER"))
        assert handshake.error_code == 0
        try:
            answer = raw.request(36, 2, SaslAuthenticateRequest(auth_bytes=message.encode()))
            authenticated = int(answer.error_code) == 0
        except (ConnectionError, OSError):
            authenticated = False
        code = create_topic(raw, topic) if authenticated else None
    finally:
        raw.sock.close()
    assert code != 0
    assert not broker_has(sasl_ssl_upstream, topic)
    assert ("OAUTHBEARER", "admin") not in sasl_ssl_upstream.front.authenticated


def test_a_comma_in_a_certificate_name_cannot_make_it_match_another_rule(
    tap: BrokerTap, tmp_path: Path
) -> None:
    """A certificate the CA signed for OU=sales whose CN is ``mallory,OU=admins``: in the
    subject as Java prints it (RFC 2253) that comma is escaped, so the rule for OU=admins does
    not match it, nor does the per-CN rule (Kafka refuses a subject no rule maps). Read
    unescaped it would be ``CN=mallory,OU=admins,OU=sales,O=Acme``: platform-admin, who may
    create the protected ``__`` topics."""
    certs = make_pki(tmp_path, {"mallory": "/O=Acme/OU=sales/CN=mallory,OU=admins"})
    rules = "RULE:^CN=[a-z]+,OU=admins,.*$/platform-admin/,RULE:^CN=([a-z]+),.*$/$1/"
    policies = {
        "rules": [
            {
                "name": "platform-topics",
                "type": "protected.topics",
                "topics": ["__.*"],
                "allowed.principals": ["User:platform-admin"],
            }
        ]
    }
    listener = {**tls_listener(certs), "principal_mapping_rules": rules}
    gw = GatewayThread(gateway_config(tap.address, tls=listener, policies=policies)).start()
    topic = f"__evil-{uuid.uuid4().hex[:8]}"
    # nor anything else: the subject no rule maps fails authentication, as on Kafka, rather
    # than being served as no one (an unprotected topic would then be created)
    ordinary = f"ordinary-{uuid.uuid4().hex[:8]}"
    codes = []
    try:
        for name in (topic, ordinary):
            try:
                raw = RawClient(gw.bootstrap, tls=tls_context(certs, "mallory"))
            except (ssl.SSLError, OSError):
                codes.append(None)
            else:
                try:
                    codes.append(create_topic(raw, name))
                finally:
                    raw.sock.close()
    finally:
        gw.stop()
    assert 0 not in codes
    assert CREATE_TOPICS not in tap.api_keys()


def test_a_certificate_cannot_take_another_subject_s_name_by_its_encoding(
    tap: BrokerTap, tmp_path: Path
) -> None:
    """Certificates the CA signed with the subject ``CN=admin,O=Acme`` as OpenSSL reads it
    (Python's ``getpeercert()``), but not as Java does: the CN a BMPString (Java reads its
    bytes as UTF-8: ``CN=\\00a\\00d\\00m\\00i\\00n,O=Acme``), and one with an empty RDN after
    the CN (``,CN=admin,O=Acme``; OpenSSL drops it). Kafka names neither the admin; named from
    the parsed subject the gateway named both ``User:CN=admin,O=Acme`` and let them create the
    topics only the admin may."""
    certs = make_pki(tmp_path, {"client": "/O=Acme/CN=mallory"})
    issuer = Issuer(certs)
    acme = [attr(O, "Acme", PRINTABLE)]
    issuer.pem([acme, [attr(CN, "admin", BMP)]], "bmp")
    issuer.pem([acme, [attr(CN, "admin")], []], "empty_rdn")
    policies = {
        "rules": [
            {
                "name": "platform-topics",
                "type": "protected.topics",
                "topics": ["__.*"],
                "allowed.principals": ["User:CN=admin,O=Acme"],
            }
        ]
    }
    gw = GatewayThread(gateway_config(tap.address, tls=tls_listener(certs), policies=policies))
    gw.start()
    codes = {}
    try:
        for who in ("bmp", "empty_rdn"):
            raw = RawClient(gw.bootstrap, tls=tls_context(certs, who))
            try:
                codes[who] = create_topic(raw, f"__{who}-{uuid.uuid4().hex[:8]}")
            finally:
                raw.sock.close()
    finally:
        gw.stop()
    assert codes == {"bmp": POLICY_VIOLATION, "empty_rdn": POLICY_VIOLATION}
    assert CREATE_TOPICS not in tap.api_keys()


def test_a_mapping_rule_reads_a_subject_as_java_does(tap: BrokerTap, tmp_path: Path) -> None:
    """A certificate the CA signed for ``CN=Kafka`` with the Kelvin sign (U+212A) for its K,
    under ``RULE:(?i)^CN=([a-z]+)$/$1/L, DEFAULT``: Java's (?i) is ASCII-only, so Kafka's
    rule does not match and DEFAULT names it ``User:CN=\u212aafka``; Python's matched and
    lower-cased it to ``kafka``, the gateway's User:kafka, allowed what only kafka may."""
    certs = make_pki(tmp_path, {"client": "/CN=mallory"})
    Issuer(certs).pem([[attr(CN, "\u212aafka")]], "kelvin")
    policies = {
        "rules": [
            {
                "name": "platform-topics",
                "type": "protected.topics",
                "topics": ["__.*"],
                "allowed.principals": ["User:kafka"],
            }
        ]
    }
    rules = "RULE:(?i)^CN=([a-z]+)$/$1/L, DEFAULT"
    listener = {**tls_listener(certs), "principal_mapping_rules": rules}
    gw = GatewayThread(gateway_config(tap.address, tls=listener, policies=policies)).start()
    try:
        raw = RawClient(gw.bootstrap, tls=tls_context(certs, "kelvin"))
        try:
            code = create_topic(raw, f"__kelvin-{uuid.uuid4().hex[:8]}")
        finally:
            raw.sock.close()
    finally:
        gw.stop()
    assert code == POLICY_VIOLATION
    assert CREATE_TOPICS not in tap.api_keys()


def token_authenticate(raw: RawClient, token_id: str, token_hmac: str) -> int:
    """A SCRAM-SHA-256 exchange with a delegation token, as Kafka's Java client makes it
    (``tokenauth=true`` in the first message, the token's id as user, its HMAC as password):
    the error code of the last answer, -1 when the gateway closed the connection."""
    try:
        handshake = raw.request(17, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
        assert handshake.error_code == 0
        nonce = base64.b64encode(os.urandom(18)).decode()
        first_bare = f"n={token_id},r={nonce},tokenauth=true"
        first = raw.request(36, 2, SaslAuthenticateRequest(auth_bytes=f"n,,{first_bare}".encode()))
        if int(first.error_code) != 0:
            return int(first.error_code)
        server_first = bytes(first.auth_bytes).decode()
        fields = dict(part.split("=", 1) for part in server_first.split(","))
        salted = hashlib.pbkdf2_hmac(
            "sha256", token_hmac.encode(), base64.b64decode(fields["s"]), int(fields["i"])
        )
        without_proof = f"c=biws,r={fields['r']}"
        auth_message = f"{first_bare},{server_first},{without_proof}".encode()
        client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
        signature = hmac.new(hashlib.sha256(client_key).digest(), auth_message, hashlib.sha256)
        proof = bytes(a ^ b for a, b in zip(client_key, signature.digest(), strict=True))
        final = f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
        return int(raw.request(36, 2, SaslAuthenticateRequest(auth_bytes=final)).error_code)
    except (ConnectionError, OSError):
        return -1


def test_a_delegation_tokens_id_is_not_taken_for_a_user_name(
    sasl_ssl_upstream: Upstream,  # noqa: F811 - the fixture imported above
    gateway: GatewayThread,
) -> None:
    """SCRAM with a delegation token (KIP-48): the first message's ``n=`` is the token's id,
    and Kafka's ScramSaslServer authenticates the token's owner, here mallory. A gateway that
    reads ``n=`` as the user names the connection after the token: with a token whose id is
    ``admin`` (Kafka makes ids random; the front lets one be chosen), User:admin, who may
    create the protected topics. The topic must not reach the broker."""
    topic = f"__evil-{uuid.uuid4().hex[:8]}"
    raw = RawClient(gateway.bootstrap, tls=tls_context(sasl_ssl_upstream.pki, "alice"))
    try:
        code = token_authenticate(raw, "admin", DELEGATION_TOKEN_HMAC)
        created = create_topic(raw, topic) if code == 0 else None
    finally:
        raw.sock.close()
    assert ("SCRAM-SHA-256", "mallory") in sasl_ssl_upstream.front.authenticated
    assert created != 0
    assert not broker_has(sasl_ssl_upstream, topic)


def test_a_delegation_token_client_is_audited_as_no_one_it_is_not(
    sasl_ssl_upstream: Upstream,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    """With a token id as Kafka makes them, the audit named the client ``User:<token id>``, a
    user that does not exist, where the broker authenticated mallory: the audit is the only
    record of who did what behind the gateway. The decision names no principal instead (the
    gateway cannot learn a token's owner: Kafka refuses delegation token requests on a
    connection a token authenticated), as for GSSAPI."""
    token_id = "nHq3b2XoQ1qPZ8YVvLr2wA"
    config = gateway_config(
        sasl_ssl_upstream.front.address,
        upstream={"tls": {"ca_file": str(sasl_ssl_upstream.pki / "ca.pem")}},
        tls=listener_tls(sasl_ssl_upstream.pki, client_auth="none"),
        audit={"spool_dir": str(tmp_path), "fsync": "always"},
    )
    gw = GatewayThread(config).start()
    topic = f"tok-{uuid.uuid4().hex[:8]}"
    try:
        raw = RawClient(gw.bootstrap, tls=tls_context(sasl_ssl_upstream.pki, "alice"))
        try:
            assert token_authenticate(raw, token_id, DELEGATION_TOKEN_HMAC) == 0
            assert create_topic(raw, topic) == 0
        finally:
            raw.sock.close()
        (event,) = spool_events(tmp_path, lambda e: e.resource_name == topic)
    finally:
        gw.stop()
    assert event.action == "create" and event.verdict == "allowed"
    assert event.principal is None
