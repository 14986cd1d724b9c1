"""Certificates with any subject, for the TLS principal tests: a small DER encoder, the
client key and CA of ``make_pki`` (tests/support.py), openssl to sign. ``java_names`` asks
Java 17 (tests/X500Names.java, what Kafka's brokers run on) how it names the subjects."""

from __future__ import annotations

import datetime
import secrets
import shutil
import ssl
import subprocess
from collections.abc import Sequence
from pathlib import Path

# ASN.1 universal tags of the string types a subject's value may have.
UTF8 = 0x0C
NUMERIC = 0x12
PRINTABLE = 0x13
TELETEX = 0x14
IA5 = 0x16
VISIBLE = 0x1A
GENERAL = 0x1B
UNIVERSAL = 0x1C
BMP = 0x1E

CN = "2.5.4.3"
O = "2.5.4.10"  # noqa: E741
OU = "2.5.4.11"
C = "2.5.4.6"
EMAIL = "1.2.840.113549.1.9.1"

Attribute = tuple[str, int, bytes]
"""(OID, tag of the value, the value's content bytes)."""
Subject = Sequence[Sequence[Attribute]]
"""RDNs in DER order (least specific first), each a set of attributes in DER order."""

JAVA = shutil.which("java")


def tlv(tag: int, content: bytes) -> bytes:
    size = len(content)
    if size < 0x80:
        return bytes([tag, size]) + content
    length = size.to_bytes((size.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(length)]) + length + content


def oid(dotted: str) -> bytes:
    arcs = [int(a) for a in dotted.split(".")]
    body = bytearray()
    for arc in [arcs[0] * 40 + arcs[1], *arcs[2:]]:
        chunk = [arc & 0x7F]
        arc >>= 7
        while arc:
            chunk.append(0x80 | (arc & 0x7F))
            arc >>= 7
        body += bytes(reversed(chunk))
    return tlv(0x06, bytes(body))


def text(value: str, tag: int = UTF8) -> bytes:
    """``value`` as the content of a string of ``tag``, in the type's own encoding."""
    if tag == BMP:
        return value.encode("utf-16-be")
    if tag == UNIVERSAL:
        return value.encode("utf-32-be")
    if tag == TELETEX:
        return value.encode("latin-1", "replace")
    return value.encode("utf-8")


def attr(kind: str, value: str, tag: int = UTF8) -> Attribute:
    return (kind, tag, text(value, tag))


def name(subject: Subject) -> bytes:
    """The DER of a Name, the sets kept in the order given (not sorted as DER would)."""
    rdns = b"".join(
        tlv(0x31, b"".join(tlv(0x30, oid(k) + tlv(t, v)) for k, t, v in rdn)) for rdn in subject
    )
    return tlv(0x30, rdns)


def _elements(der: bytes) -> list[bytes]:
    """The TLVs inside one constructed TLV (short or long lengths, no indefinite ones)."""
    at = 2 if der[1] < 0x80 else 2 + (der[1] & 0x7F)
    out = []
    while at < len(der):
        size, head = der[at + 1], 2
        if size >= 0x80:
            head = 2 + (size & 0x7F)
            size = int.from_bytes(der[at + 2 : at + head], "big")
        out.append(der[at : at + head + size])
        at += head + size
    return out


def _der(pem: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem.read_text())


class Issuer:
    """Signs certificates for any subject with ``make_pki``'s CA (``pki``), all for the key
    of its client ``client``."""

    def __init__(self, pki: Path) -> None:
        self.pki = pki
        ca = _elements(_elements(_der(pki / "ca.pem"))[0])
        self._issuer = ca[3] if ca[0][0] == 0xA0 else ca[2]
        self._spki = subprocess.run(
            ["openssl", "pkey", "-in", str(pki / "client.key"), "-pubout", "-outform", "DER"],
            check=True,
            capture_output=True,
        ).stdout

    def der(self, subject: Subject | bytes) -> bytes:
        """A certificate for ``subject``: a Name's DER as is, or RDNs."""
        now = datetime.datetime.now(datetime.UTC)
        times = (now + datetime.timedelta(days=d) for d in (-1, 2))
        validity = tlv(
            0x30, b"".join(tlv(0x17, t.strftime("%y%m%d%H%M%SZ").encode()) for t in times)
        )
        algorithm = tlv(0x30, oid("1.2.840.113549.1.1.11") + b"\x05\x00")
        serial = tlv(0x02, b"\x01" + secrets.token_bytes(8))
        subject_der = subject if isinstance(subject, bytes) else name(subject)
        version = tlv(0xA0, tlv(0x02, b"\x02"))
        tbs = tlv(
            0x30, version + serial + algorithm + self._issuer + validity + subject_der + self._spki
        )
        signature = subprocess.run(
            ["openssl", "dgst", "-sha256", "-sign", str(self.pki / "ca.key")],
            input=tbs,
            check=True,
            capture_output=True,
        ).stdout
        return tlv(0x30, tbs + algorithm + tlv(0x03, b"\x00" + signature))

    def pem(self, subject: Subject | bytes, stem: str) -> Path:
        """The certificate as ``<stem>.pem`` with a copy of the key as ``<stem>.key`` (for
        ``tls_context(pki, stem)``). Returns the PEM's path."""
        path = self.pki / f"{stem}.pem"
        path.write_text(ssl.DER_cert_to_PEM_cert(self.der(subject)))
        shutil.copyfile(self.pki / "client.key", self.pki / f"{stem}.key")
        return path


def java_names(certificates: Sequence[Path]) -> list[str | None]:
    """What Kafka's broker names each certificate's subject: Java's
    ``getSubjectX500Principal().getName()`` (RFC 2253); None where Java refuses the
    certificate. Java reads them all in one run."""
    assert JAVA is not None
    source = Path(__file__).with_name("X500Names.java")
    run = subprocess.run(
        [JAVA, str(source), *map(str, certificates)], capture_output=True, text=True
    )
    # A JRE without the JDK's compiler (jdk.compiler) cannot run a source file: say so.
    assert run.returncode == 0, f"java {source.name} failed (a JDK is needed):\n{run.stderr}"
    names: list[str | None] = []
    for line in run.stdout.splitlines():
        kind, units, *_ = (line + " ").split(" ")
        if kind != "OK":
            names.append(None)
            continue
        names.append(bytes.fromhex(units).decode("utf-16-be", "surrogatepass"))
    assert len(names) == len(certificates), run.stderr
    return names


def unsigned(subject: Subject) -> bytes:
    """A certificate's DER with ``subject`` and nothing else real (no issuer, key or
    signature worth the name): for reading its subject alone."""
    algorithm = tlv(0x30, oid("1.2.840.113549.1.1.11") + b"\x05\x00")
    empty = tlv(0x30, b"")
    tbs = tlv(0x30, tlv(0x02, b"\x01") + algorithm + empty + empty + name(subject) + empty)
    return tlv(0x30, tbs + algorithm + tlv(0x03, b"\x00"))
