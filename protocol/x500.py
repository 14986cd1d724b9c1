"""A certificate's subject as Kafka's broker names it: Java's ``X500Principal.getName()``
(RFC 2253), read from the certificate's DER. Pure functions, no I/O.

Java prints what OpenSSL's parsed view (Python's ``getpeercert()``) has lost, so the name is
read from the DER itself:

- the RDNs most specific first, comma-separated; the values of a multi-valued RDN joined by
  ``+`` in the order of the certificate's encoding; an RDN with no value is an empty string
  (``,CN=x``);
- the keywords CN, C, L, ST, O, OU, STREET, DC and UID; every other attribute type by its
  dotted OID, with its value as ``#`` and the hex of its DER (``1.2.840.113549.1.9.1=#16...``
  for emailAddress), as is a value that is not a PrintableString, TeletexString, IA5String,
  GeneralString, BMPString or UTF8String (a NumericString, VisibleString, UniversalString);
- a string's content bytes read as UTF-8 whatever its type (a BMPString ``admin`` is
  ``\\00a\\00d\\00m\\00i\\00n``), then ``,=+<>#;"\\`` escaped with a backslash, NUL as
  ``\\00``, and every leading and trailing space or carriage return escaped.

What Java would print with replacement characters (content that is not UTF-8) or reads
leniently (an encoding DER does not allow) raises :class:`UnreadableName`: the gateway cannot
be sure it prints the broker's name, so it refuses the certificate.
"""

from __future__ import annotations

from typing import Final

# Java's AVAKeyword table, the keywords it prints in RFC 2253 form.
_KEYWORDS: Final = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
# AVA.isDerString (not canonical): the types Java prints as text.
_STRING_TAGS: Final = frozenset({0x13, 0x14, 0x16, 0x1B, 0x1E, 0x0C})
_ESCAPED: Final = frozenset(',=+<>#;"\\')
_SEQUENCE: Final = 0x30
_SET: Final = 0x31
_OID: Final = 0x06


class UnreadableName(ValueError):
    """A certificate whose subject the gateway cannot name exactly as Java does."""


def _element(der: bytes, at: int, end: int) -> tuple[int, int, int]:
    """The tag, content start and end of the DER element at ``at`` (which must end by
    ``end``).

    :raises UnreadableName:
    """
    if at + 2 > end:
        raise UnreadableName("truncated DER")
    tag, first = der[at], der[at + 1]
    if tag & 0x1F == 0x1F:
        raise UnreadableName("a high tag number")
    start = at + 2
    size = first
    if first & 0x80:
        count = first & 0x7F
        if count == 0 or count > 4 or start + count > end:
            raise UnreadableName("an indefinite or oversized length")
        size = int.from_bytes(der[start : start + count], "big")
        if size < 0x80 or der[start] == 0:
            raise UnreadableName("a length not in DER's shortest form")
        start += count
    if start + size > end:
        raise UnreadableName("truncated DER")
    return tag, start, start + size


def _children(der: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """The elements from ``start`` to ``end``: tag, where each begins, its content's start
    and its end."""
    out = []
    at = start
    while at < end:
        tag, content, element_end = _element(der, at, end)
        out.append((tag, at, content, element_end))
        at = element_end
    return out


def certificate_subject(certificate: bytes) -> bytes:
    """The DER of the subject Name of an X.509 certificate's DER.

    :raises UnreadableName:
    """
    tag, start, end = _element(certificate, 0, len(certificate))
    if tag != _SEQUENCE or end != len(certificate):
        raise UnreadableName("not a certificate")
    tbs = _children(certificate, start, end)
    if not tbs or tbs[0][0] != _SEQUENCE:
        raise UnreadableName("not a certificate")
    fields = _children(certificate, tbs[0][2], tbs[0][3])
    index = 5 if fields and fields[0][0] == 0xA0 else 4  # after [0] version, if any
    if len(fields) <= index or fields[index][0] != _SEQUENCE:
        raise UnreadableName("a certificate without a subject")
    _, at, _, subject_end = fields[index]
    return certificate[at:subject_end]


def _oid(content: bytes) -> str:
    """Dotted form of an OBJECT IDENTIFIER's content, as Java's ObjectIdentifier prints it.

    :raises UnreadableName: for an encoding Java refuses.
    """
    if not content or content[-1] & 0x80:
        raise UnreadableName("a malformed OID")
    arcs: list[int] = []
    value = 0
    fresh = True
    for byte in content:
        if fresh and byte == 0x80:
            raise UnreadableName("an OID arc not in its shortest form")
        value = (value << 7) | (byte & 0x7F)
        fresh = not byte & 0x80
        if fresh:
            arcs.append(value)
            value = 0
    first = arcs[0]
    head = [0, first] if first < 40 else [1, first - 40] if first < 80 else [2, first - 80]
    return ".".join(map(str, head + arcs[1:]))


def _escape(text: str) -> str:
    """AVA.toRFC2253String's escaping of a string value."""
    chars: list[str] = []
    for char in text:
        if char in _ESCAPED:
            chars.append("\\" + char)
        elif char == "\x00":
            chars.append("\\00")
        else:
            chars.append(char)
    # Then Java escapes each leading and trailing space and carriage return of that text.
    flat = "".join(chars)
    lead = len(flat) - len(flat.lstrip(" \r"))
    trail = len(flat.rstrip(" \r"))
    if lead == len(flat):
        return "".join("\\" + c for c in flat)
    return (
        "".join("\\" + c for c in flat[:lead])
        + flat[lead:trail]
        + ("".join("\\" + c for c in flat[trail:]))
    )


def _attribute(der: bytes, start: int, end: int) -> str:
    parts = _children(der, start, end)
    if len(parts) != 2 or parts[0][0] != _OID:
        raise UnreadableName("an attribute that is not a type and a value")
    (_, _, oid_start, oid_end), (tag, value_start, content, value_end) = parts
    dotted = _oid(der[oid_start:oid_end])
    keyword = _KEYWORDS.get(dotted, dotted)
    if keyword[0].isdigit() or tag not in _STRING_TAGS:
        return f"{keyword}=#{der[value_start:value_end].hex()}"
    try:
        text = der[content:value_end].decode("utf-8")
    except UnicodeDecodeError:
        raise UnreadableName("a value Java reads with replacement characters") from None
    return f"{keyword}={_escape(text)}"


def rfc2253(name: bytes) -> str:
    """A Name's DER as Java's ``X500Principal.getName()`` prints it.

    :raises UnreadableName:
    """
    tag, start, end = _element(name, 0, len(name))
    if tag != _SEQUENCE or end != len(name):
        raise UnreadableName("a name that is not a SEQUENCE")
    rdns: list[str] = []
    for rdn_tag, _, rdn_start, rdn_end in _children(name, start, end):
        if rdn_tag != _SET:
            raise UnreadableName("an RDN that is not a SET")
        values = []
        for atv_tag, _, atv_start, atv_end in _children(name, rdn_start, rdn_end):
            if atv_tag != _SEQUENCE:
                raise UnreadableName("an attribute that is not a SEQUENCE")
            values.append(_attribute(name, atv_start, atv_end))
        rdns.append("+".join(values))
    return ",".join(reversed(rdns))
