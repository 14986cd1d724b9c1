"""A TLS client's principal is its certificate subject as Kafka's broker names it, Java's
``X500Principal.getName()``: the gateway's name is checked against Java 17's own for many
subjects (tests/X500Names.java, one JVM for all, run as a source file: a JDK 11 or later).
Skipped only where ``java`` is not on the PATH (CI has Java 17: Spark needs it).

Each certificate is signed by a real CA, and OpenSSL must read it (``_test_decode_cert``, as
the gateway's TLS handshake does) for its name to matter: one OpenSSL refuses never becomes a
principal."""

from __future__ import annotations

import random
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.principal import distinguished_name
from protocol.x500 import UnreadableName
from tests.support import make_pki
from tests.x509 import (
    BMP,
    CN,
    EMAIL,
    GENERAL,
    IA5,
    JAVA,
    NUMERIC,
    OU,
    PRINTABLE,
    TELETEX,
    UNIVERSAL,
    UTF8,
    VISIBLE,
    C,
    Issuer,
    O,
    Subject,
    attr,
    java_names,
)

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(JAVA is None, reason="no java on the PATH: Java's names unavailable"),
]

# (what it shows, subject); the gateway's name must be Java's.
CASES: list[tuple[str, Subject]] = [
    ("plain", [[attr(C, "US", PRINTABLE)], [attr(O, "Acme")], [attr(CN, "alice")]]),
    ("hash inside a value", [[attr(CN, "a#b")]]),
    ("leading spaces, each escaped", [[attr(CN, "  two")]]),
    ("trailing spaces, each escaped", [[attr(CN, "two  ")]]),
    ("a single space", [[attr(CN, " ")]]),
    ("carriage returns at the ends", [[attr(CN, "\rx\r")]]),
    ("NUL", [[attr(CN, "a\x00b")]]),
    ("control characters", [[attr(CN, "a\x01b\nc\td")]]),
    ("non-ASCII", [[attr(CN, "é ü 日本 😀 \u2028\u200b")]]),
    ("empty value", [[attr(CN, "")]]),
    ("specials", [[attr(CN, 'x,OU=ops+"<>;\\=')]]),
    ("leading hash", [[attr(CN, "#x")]]),
    ("backslash", [[attr(CN, "\\")]]),
    ("BMPString", [[attr(CN, "admin", BMP)]]),
    ("NumericString", [[attr(CN, "12345", NUMERIC)]]),
    ("UniversalString", [[attr(CN, "admin", UNIVERSAL)]]),
    ("TeletexString, ASCII", [[attr(CN, "admin", TELETEX)]]),
    ("IA5String", [[attr(CN, "admin", IA5)]]),
    ("PrintableString", [[attr(CN, "admin", PRINTABLE)]]),
    ("emailAddress", [[attr(EMAIL, "a@b.c", IA5)], [attr(CN, "x")]]),
    (
        "serialNumber, title, givenName, surname",
        [
            [attr("2.5.4.5", "123", PRINTABLE)],
            [attr("2.5.4.12", "boss")],
            [attr("2.5.4.42", "Al")],
            [attr("2.5.4.4", "Bo")],
        ],
    ),
    (
        "DC, UID, STREET, ST, L",
        [
            [attr("0.9.2342.19200300.100.1.25", "com", IA5)],
            [attr("0.9.2342.19200300.100.1.1", "u1")],
            [attr("2.5.4.9", "Main St")],
            [attr("2.5.4.8", "CA")],
            [attr("2.5.4.7", "SF")],
        ],
    ),
    (
        "dnQualifier, pseudonym, organizationIdentifier",
        [[attr("2.5.4.46", "q")], [attr("2.5.4.65", "p")], [attr("2.5.4.97", "VAT")]],
    ),
    ("unknown OID", [[attr("1.2.3.4", "foo")], [attr("2.999.1234567890123", "x")]]),
    ("multi-valued RDN", [[attr(CN, "b"), attr(OU, "a")]]),
    ("multi-valued RDN, not in DER order", [[attr(OU, "a"), attr(CN, "b")]]),
    ("duplicate attributes", [[attr(CN, "x"), attr(CN, "y")], [attr(CN, "x")]]),
    ("empty subject", []),
    ("an empty RDN", [[attr(CN, "admin")], []]),
    ("only an empty RDN", [[]]),
]

# Subjects OpenSSL reads but Java names with replacement characters (content that is not
# UTF-8, which Java reads as UTF-8 whatever the type): the gateway refuses them.
REFUSED: list[tuple[str, Subject]] = [
    ("TeletexString, Latin-1", [[attr(CN, "café", TELETEX)]]),
    ("BMPString, non-ASCII", [[attr(CN, "é", BMP)]]),
]


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> Issuer:
    pki = make_pki(tmp_path_factory.mktemp("x500"), {"client": "/CN=client"})
    return Issuer(pki)


def _openssl_reads(path: Path) -> bool:
    try:
        ssl._ssl._test_decode_cert(str(path))  # type: ignore[attr-defined]
    except ssl.SSLError:
        return False
    return True


def _gateway_name(path: Path) -> str | None:
    return distinguished_name(ssl.PEM_cert_to_DER_cert(path.read_text()))


def test_the_gateway_names_a_subject_as_java_does(issuer: Issuer) -> None:
    paths = [issuer.pem(subject, f"case{i}") for i, (_, subject) in enumerate(CASES)]
    expected = java_names(paths)
    got = {}
    for (what, _), path, java in zip(CASES, paths, expected, strict=True):
        assert _openssl_reads(path), what
        got[what] = (_gateway_name(path), java)
    assert {what: gateway for what, (gateway, _) in got.items()} == {
        what: java for what, (_, java) in got.items()
    }


def test_a_subject_java_reads_with_replacement_characters_is_refused(issuer: Issuer) -> None:
    paths = [issuer.pem(subject, f"refused{i}") for i, (_, subject) in enumerate(REFUSED)]
    for (what, _), path, java in zip(REFUSED, paths, java_names(paths), strict=True):
        assert _openssl_reads(path), what
        assert java is not None and "\ufffd" in java, what
        with pytest.raises(UnreadableName):
            _gateway_name(path)


def _random_subjects(count: int) -> Iterator[Subject]:
    rnd = random.Random(2253)
    kinds = [CN, OU, O, C, EMAIL, "2.5.4.5", "0.9.2342.19200300.100.1.25", "1.2.3.4"]
    tags = [UTF8, PRINTABLE, TELETEX, IA5, BMP, GENERAL, NUMERIC, VISIBLE, UNIVERSAL]
    alphabet = 'ab Z09 #,+="\\<>;\r\x00\x7fé日😀'
    for _ in range(count):
        subject = []
        for _ in range(rnd.randrange(0, 4)):
            rdn = []
            for _ in range(rnd.randrange(0, 3)):
                tag = rnd.choice(tags)
                if rnd.random() < 0.3:
                    value = bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 6)))
                    rdn.append((rnd.choice(kinds), tag, value))
                else:
                    text = "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(0, 6)))
                    rdn.append(attr(rnd.choice(kinds), text, tag))
            subject.append(rdn)
        yield subject


def test_random_subjects_are_named_as_java_does_or_refused(issuer: Issuer) -> None:
    """Of random subjects OpenSSL reads, the gateway names each as Java does, or refuses it
    where Java's name has replacement characters."""
    paths = [issuer.pem(subject, f"random{i}") for i, subject in enumerate(_random_subjects(150))]
    read = [path for path in paths if _openssl_reads(path)]
    assert len(read) > 50  # the test still tests something
    differences = []
    for path, java in zip(read, java_names(read), strict=True):
        try:
            gateway = _gateway_name(path)
        except UnreadableName:
            if java is not None and "\ufffd" not in java:
                differences.append((path.name, java, "refused"))
            continue
        if gateway != java:
            differences.append((path.name, java, gateway))
    assert differences == []
