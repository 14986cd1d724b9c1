"""ssl.principal.mapping.rules, against the cases of Kafka's own SslPrincipalMapperTest and
the example in Kafka's documentation of the setting; and OAUTHBEARER's principal claim."""

from __future__ import annotations

import base64
import json
import random
import subprocess
from pathlib import Path

import pytest

from gateway.principal import (
    AmbiguousSaslMessage,
    NoMatchingRule,
    RuleFailed,
    SaslState,
    SslPrincipalMapper,
    distinguished_name,
    oauthbearer_claim,
    sasl_username,
    ssl_principal,
)
from protocol.x500 import UnreadableName
from tests.x509 import BMP, CN, IA5, JAVA, OU, attr, unsigned

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "rules",
    [
        "DEFAULT",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
        "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
        "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
    ],
)
def test_valid_rules(rules: str) -> None:
    assert SslPrincipalMapper(rules).rules


@pytest.mark.parametrize(
    "rules",
    [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
        # what Python's regular expressions read unlike Java's
        "RULE:(?x)^CN=([a b]+)$/$1/",
        "RULE:(?ix)^CN=(.*)$/$1/",
        "RULE:^CN=((?x:[a b])+)$/$1/",
        "RULE:^CN=([a-z[0-9]]+)$/$1/",
        "RULE:^CN=([a-z&&[^x]]+)$/$1/",
        "RULE:^CN=a\\vb$/ab/",
        "RULE:(?u)^CN=(.*)$/$1/",
        "RULE:^(C)N=\\101$/x/",
        "RULE:^CN=\\0101$/x/",
    ],
)
def test_invalid_rules(rules: str) -> None:
    with pytest.raises(ValueError, match="invalid rule"):
        SslPrincipalMapper(rules)


def test_kafka_mapper_cases() -> None:
    mapper = SslPrincipalMapper(
        ", ".join(
            [
                "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
                "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
                "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
                "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
                "DEFAULT",
            ]
        )
    )
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert (
        mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"
    )


def test_kafka_documentation_example() -> None:
    """The rules and the two names of the ssl.principal.mapping.rules documentation."""
    mapper = SslPrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,\n"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,\n"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,\n"
        "DEFAULT"
    )
    dn = "CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown"
    assert mapper.name(dn) == "serviceuser"
    dn = "CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown"
    assert mapper.name(dn) == "adminuser@admin"


@pytest.mark.parametrize(
    ("expected", "rules"),
    [
        ("[]", ""),
        ("[DEFAULT]", "DEFAULT"),
        ("[RULE:/]", "RULE://"),
        ("[RULE:/.*]", "RULE:/.*/"),
        ("[RULE:/.*/L]", "RULE:/.*/L"),
        ("[RULE:/, DEFAULT]", "RULE://,DEFAULT"),
        ("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  "),
        ("[RULE:   /     , DEFAULT]", "  RULE:   /     / ,  DEFAULT  "),
        ("[RULE:  /     /U, DEFAULT]", "  RULE:  /     /U   ,DEFAULT  "),
        (
            "[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]",
            "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
        ),
        # empty rules are ignored
        ("[]", ",   , , ,      , , ,   "),
        ("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,"),
        ("[RULE: /   , DEFAULT]", ",  , RULE: /   /    ,,,   DEFAULT, ,   "),
        ("[RULE:   /  /U, DEFAULT]", "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,"),
        # escape sequences
        (r"[RULE:\/\\\(\)\n\t/\/\/]", r"RULE:\/\\\(\)\n\t/\/\//"),
        (r"[RULE:\**\/+/*/L, RULE:\/*\**/**]", r"RULE:\**\/+/*/L,RULE:\/*\**/**/"),
        # rules rule
        (
            r"[RULE:,RULE:,/,RULE:,\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, "
            r"DEFAULT, /DEFAULT, DEFAULT]",
            r"RULE:,RULE:,/,RULE:,\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, "
            r"/DEFAULT/,DEFAULT",
        ),
    ],
)
def test_rules_splitting(expected: str, rules: str) -> None:
    assert str(SslPrincipalMapper(rules)) == expected


def test_comma_with_whitespace() -> None:
    mapper = SslPrincipalMapper(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz") == r"Tkac\, Adam"


def test_replacement_references() -> None:
    """Java's replacement text: $12 with fewer groups is group 1 then 2; a group past the
    last stays text; a backslash makes the next character literal."""
    assert SslPrincipalMapper("RULE:^CN=(.*)$/$12/").name("CN=x") == "x2"
    assert SslPrincipalMapper("RULE:^CN=(.*)$/$3-$1/").name("CN=x") == "$3-x"
    assert SslPrincipalMapper(r"RULE:^CN=(.*)$/\$1:$1/").name("CN=x") == "$1:x"


def test_a_replacement_java_throws_on_fails_the_subject() -> None:
    """Where Java's replaceAll throws on a rule's replacement (a group the pattern lacks: with
    no groups Kafka does not escape $1; a $ with no number), Kafka fails the authentication;
    the gateway named the client ``$1`` (every subject the rule matched the same principal).
    $0 with no groups is the whole match, as in Java."""
    with pytest.raises(RuleFailed):
        SslPrincipalMapper("RULE:^CN=[a-z]+$/$1/, DEFAULT").name("CN=admin")
    with pytest.raises(RuleFailed):
        SslPrincipalMapper("RULE:^CN=([a-z]+)$/$x/").name("CN=admin")
    assert SslPrincipalMapper("RULE:^CN=[a-z]+$/u-$0/").name("CN=admin") == "u-CN=admin"


def test_a_rule_maps_only_a_name_its_pattern_matches_whole() -> None:
    """Java's Matcher.matches(): a pattern that matches only the start of the name maps
    nothing, and the next rule (here DEFAULT) names the client, as Kafka's broker does."""
    mapper = SslPrincipalMapper("RULE:CN=([a-z]+)/$1/,DEFAULT")
    assert mapper.name("CN=alice") == "alice"
    assert mapper.name("CN=alice,OU=guests") == "CN=alice,OU=guests"


def test_a_leading_space_or_hash_is_escaped_as_rfc_2253_writes_it() -> None:
    """Kafka names a certificate by X500Principal.getName() (RFC 2253), which escapes a
    value's leading space or '#' and its trailing space: the rules see that name."""
    for value, escaped in ((" alice", "\\ alice"), ("#alice", "\\#alice"), ("alice ", "alice\\ ")):
        cert = unsigned([[attr(CN, value)]])
        assert ssl_principal(cert) == f"User:CN={escaped}"


def test_no_rule_maps_the_name() -> None:
    mapper = SslPrincipalMapper("RULE:^CN=(.*?),OU=eng$/$1/")
    with pytest.raises(NoMatchingRule):
        mapper.name("CN=bob,OU=sales")
    cert = unsigned([[attr(OU, "eng")], [attr(CN, "alice")]])
    assert ssl_principal(cert, mapper) == "User:alice"
    assert ssl_principal(cert) == "User:CN=alice,OU=eng"


def _jwt(claims: dict[str, object]) -> str:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2lnbmF0dXJl"


def test_oauthbearer_claim() -> None:
    token = _jwt({"sub": "svc-orders", "azp": "orders-app"})
    message = f"n,,\x01auth=Bearer {token}\x01\x01"
    assert oauthbearer_claim(message) == "svc-orders"
    assert oauthbearer_claim(message, "azp") == "orders-app"
    assert oauthbearer_claim(message, "email") is None
    assert oauthbearer_claim("n,,\x01auth=Bearer not-a-jwt\x01\x01") is None


def test_oauthbearer_scheme_is_read_in_any_case_and_only_a_nonempty_string_claim_names() -> None:
    """Kafka reads the scheme case-insensitively (OAuthBearerClientInitialResponse), so the
    gateway names the user of ``BEARER`` and ``bearer`` as of ``Bearer``; a claim that is not
    a non-empty string (Kafka refuses such a token) names nobody, never its text."""
    token = _jwt({"sub": "svc-orders"})
    for scheme in ("bearer", "BEARER"):
        assert oauthbearer_claim(f"n,,\x01auth={scheme} {token}\x01\x01") == "svc-orders"
    for sub in (123, "", ["svc-orders"], {"name": "svc-orders"}, True):
        message = f"n,,\x01auth=Bearer {_jwt({'sub': sub})}\x01\x01"
        assert oauthbearer_claim(message) is None, sub


def test_oauthbearer_principal_only_once_the_broker_accepts() -> None:
    token = _jwt({"sub": "svc-orders", "client_id": "orders"})
    for success, expected in ((False, None), (True, "User:orders")):
        state = SaslState(oauthbearer_claim="client_id")
        state.start("OAUTHBEARER")
        state.client_message(f"n,,\x01auth=Bearer {token}\x01\x01".encode())
        assert state.broker_answered(success) == expected


@pytest.mark.parametrize(
    ("mechanism", "message"),
    [
        (
            "OAUTHBEARER",
            f"n,,\x01auth=Bearer {_jwt({'sub': 'admin'})}\x01auth=Bearer "
            f"{_jwt({'sub': 'mallory'})}\x01\x01",
        ),
        (
            "OAUTHBEARER",
            "n,,\x01auth=Bearer "
            + ".".join(
                base64.urlsafe_b64encode(part).decode().rstrip("=")
                for part in (b'{"alg":"RS256"}', b'{"sub":"mallory","sub":"admin"}', b"sig")
            )
            + "\x01\x01",
        ),
        ("SCRAM-SHA-256", "n,,n=mallory,r=abc,n=admin"),
        ("SCRAM-SHA-512", "n,,n=admin,n=mallory,r=abc"),
        # an authorization id other than the user: Kafka refuses it, a broker honouring it
        # acts as admin while the gateway would name mallory
        ("PLAIN", "admin\x00mallory\x00pw"),
        ("SCRAM-SHA-256", "n,a=admin,n=mallory,r=abc"),
        ("OAUTHBEARER", f"n,a=admin,\x01auth=Bearer {_jwt({'sub': 'mallory'})}\x01\x01"),
    ],
)
def test_a_first_message_naming_two_users_is_refused(mechanism: str, message: str) -> None:
    """Brokers need not agree which of two user names counts (Kafka's OAUTHBEARER takes the
    last ``auth``; an authorization id other than the user is refused by Kafka and honoured by
    a broker that implements it), so the gateway names neither: the exchange is refused."""
    state = SaslState()
    state.start(mechanism)
    with pytest.raises(AmbiguousSaslMessage):
        state.client_message(message.encode())
    extensions = f"n,,\x01auth=Bearer {_jwt({'sub': 'svc'})}\x01traceId=7\x01\x01"
    assert oauthbearer_claim(extensions) == "svc"


@pytest.mark.parametrize(
    ("mechanism", "message", "user"),
    [
        ("PLAIN", "alice\x00alice\x00pw", "alice"),
        ("SCRAM-SHA-256", "n,a=a=2Cb,n=a=2Cb,r=abc", "a,b"),
        ("OAUTHBEARER", f"n,a=svc,\x01auth=Bearer {_jwt({'sub': 'svc'})}\x01\x01", "svc"),
        ("SCRAM-SHA-256", "n,a=owner,n=tok1,r=abc,tokenauth=true", None),  # a token's owner
    ],
)
def test_an_authorization_id_naming_the_user_itself_is_taken(
    mechanism: str, message: str, user: str | None
) -> None:
    state = SaslState()
    state.start(mechanism)
    state.client_message(message.encode())
    assert state.claimed_user == user


@pytest.mark.parametrize(
    "message",
    ["\x00alice", "\x00alice\x00pw\x00more", "alice", "\x00alice\x00pw\x00"],
)
def test_a_plain_message_of_other_than_three_fields_names_no_one(message: str) -> None:
    """SASL/PLAIN is authzid NUL user NUL password, exactly (RFC 4616; Kafka refuses any other
    count of fields): a message of two or four fields is read as naming no user, whatever
    its second field says."""
    assert sasl_username("PLAIN", message.encode()) is None


def test_a_damaged_certificate_is_refused_not_a_crash() -> None:
    """Whatever the bytes, reading a subject either names it or raises UnreadableName (the
    connection is refused as unauthenticated), never another error."""
    rnd = random.Random(2253)
    subjects = [
        [[attr(CN, "alice"), attr(OU, "eng")], [], [attr(OU, "é#, ", BMP)]],
        [[attr("1.2.840.113549.1.9.1", "a@b", IA5)], [attr(CN, "x" * 200)]],
    ]
    named = refused = 0
    for _ in range(3000):
        der = bytearray(unsigned(rnd.choice(subjects)))
        for _ in range(rnd.randrange(1, 4)):
            at = rnd.randrange(len(der))
            choice = rnd.random()
            if choice < 0.6:
                der[at] = rnd.randrange(256)
            elif choice < 0.8:
                del der[at]
            else:
                der.insert(at, rnd.randrange(256))
        try:
            distinguished_name(bytes(der))
        except UnreadableName:
            refused += 1
        else:
            named += 1
    assert named and refused  # both ways were taken


# (pattern, replacement, L/U/"", subject): a rule Kafka applies with Java's regular
# expressions, the gateway with Python's.
JAVA_RULE_CASES = [
    ("^CN=(.*?),OU=ServiceUsers.*$", "$1", "L", "CN=Duke,OU=ServiceUsers,O=Org,C=US"),
    ("^CN=(.*?),OU=(.*?),O=(.*?)$", "$1@$2", "U", "CN=duke,OU=sme,O=x"),
    ("^CN=([^,]*)(,.*)?$", "$1", "", "CN=caf\u00e9,OU=\u65e5"),
    # Python's (?i) took the Kelvin sign for k, ſ for s; Java's (?i) is ASCII only
    ("(?i)^CN=([a-z]+)$", "$1", "L", "CN=\u212aafka"),
    ("(?i)^CN=(s\\w*)$", "$1", "L", "CN=\u017fuper"),
    # Python's \w, \d, \s took ı, ٣ and a no-break space; Java's know ASCII only
    ("^CN=(\\w+)$", "$1", "U", "CN=adm\u0131n"),
    ("^CN=admin(\\d*)$", "admin", "", "CN=admin\u0663"),
    ("^CN=admin(\\s*)$", "admin", "", "CN=admin\u00a0"),
    # Java's . matches no line terminator, Python's stops only at \n
    ("^CN=([a-z]+)(,.*)?$", "$1", "", "CN=admin,OU=x\u2028y"),
    ("^CN=([a-z]+)(,.*)?$", "$1", "", "CN=admin,OU=x\x85y"),
    ("^CN=([a-z]+)(,.*)?$", "$1", "", "CN=admin,OU=x\ry"),
    # Java's \b knows Unicode letters, its \w does not
    ("^CN=admin\\b.*$", "admin", "", "CN=admin\u00e9"),
    ("^CN=admin\\b.*$", "admin", "", "CN=admin,OU=eng"),
    # Java's (?x) ignores spaces inside a class; its [a[b]] is a union, its \v a class
    ("(?x)^CN=([a b]+)$", "$1", "", "CN=a b"),
    ("^CN=((?x:[a b])+)$", "$1", "", "CN=a b"),
    ("^CN=([a-z[0-9]]+)$", "$1", "", "CN=a1"),
    ("^CN=([a-z&&[^x]]+)$", "$1", "", "CN=a&&[^x]"),
    ("^CN=a\\vb$", "ab", "", "CN=a\fb"),
    # Python's \101 is octal A, Java's group 1 and 01; Java's \0101 octal A, Python's \010 1
    ("^(C)N=\\101$", "x", "", "CN=A"),
    ("^CN=\\0101$", "x", "", "CN=A"),
    # Java's replacement: $0 is the match, a group the pattern lacks throws, as does a $
    # with no number, ${name}, a trailing backslash; Kafka escapes a group past the last
    ("^CN=[a-z]+$", "u-$0", "", "CN=admin"),
    ("^CN=[a-z]+$", "$1", "", "CN=admin"),
    ("^CN=([a-z]+)$", "$x", "", "CN=admin"),
    ("^CN=([a-z]+)$", "${name}", "", "CN=admin"),
    ("^CN=([a-z]+)$", "$1\\", "", "CN=admin"),
    ("^CN=([a-z]+)$", "$", "", "CN=admin"),
    ("^CN=([a-z]+)$", "$12-$3-\\$1-$0", "", "CN=admin"),
    ("^CN=([a-z]+)$", "$5$6", "", "CN=admin"),
    ("^CN=([a-z]+)$", "\\$5", "", "CN=admin"),
    ("^CN=([a-z]+)$", "$\u0661", "", "CN=admin"),
    ("^CN=([a-z]+)$", "$99999999999", "", "CN=admin"),
    ("^CN=([a-z]+)(,OU=x)?$", "$1$2", "", "CN=admin"),
    ("^(.*)$", "[$1]", "", "CN=admin"),
]


JAVA_THROWS = "(Kafka's rule throws: the authentication fails)"


def _java_rules(cases: list[tuple[str, str, str, str]]) -> list[str | None]:
    """What Kafka's SslPrincipalMapper.Rule.apply gives for each case (tests/SslRules.java,
    Java's own regular expressions); None where the rule does not match, JAVA_THROWS where
    applying it throws."""
    assert JAVA is not None
    source = Path(__file__).parent.parent / "SslRules.java"
    args = [" ".join(part.encode().hex() for part in case) for case in cases]
    run = subprocess.run([JAVA, str(source), *args], capture_output=True, text=True)
    assert run.returncode == 0, f"java {source.name} failed (a JDK is needed):\n{run.stderr}"
    out: list[str | None] = []
    for line in run.stdout.splitlines():
        kind, _, units = line.partition(" ")
        if kind == "ERR":
            out.append(JAVA_THROWS)
        else:
            out.append(bytes.fromhex(units).decode("utf-16-be") if kind == "OK" else None)
    assert len(out) == len(cases), run.stderr
    return out


@pytest.mark.skipif(JAVA is None, reason="no java on the PATH: Java's regexes unavailable")
def test_a_rule_maps_a_subject_as_java_does_or_refuses_it() -> None:
    """A rule's pattern is Java's in Kafka, Python's in the gateway: where the two read a
    subject differently (Unicode in \\w, \\d, \\s, (?i) and \\b; line terminators for .;
    (?x), nested classes, \\v) the gateway named the client as Kafka's rule never did (CN=Kafka
    with a Kelvin sign was User:kafka, Kafka's next rule named it otherwise). Each rule maps
    a subject as Java's does, or the gateway refuses the subject or the rule."""
    differences = []
    for case, java in zip(JAVA_RULE_CASES, _java_rules(JAVA_RULE_CASES), strict=True):
        pattern, replacement, flag, subject = case
        try:
            mapper = SslPrincipalMapper(f"RULE:{pattern}/{replacement}/{flag}")
        except ValueError:
            continue  # a rule the gateway refuses to start with
        try:
            gateway: str | None = mapper.name(subject)
        except RuleFailed:
            gateway = JAVA_THROWS
        except NoMatchingRule:
            gateway = None
        except UnreadableName:
            continue
        if gateway != java:
            differences.append((case, java, gateway))
    assert differences == []


def test_a_rule_java_reads_otherwise_refuses_the_subject() -> None:
    """The subjects the rules above would read unlike Java are refused, not named."""
    mapper = SslPrincipalMapper(r"RULE:^CN=([a-z]+)(,.*)?$/$1/, RULE:^OU=x\b.*$/y/, DEFAULT")
    for subject in ("CN=admin,OU=x\u2028y", "CN=admin,OU=\ny", "OU=x\u00e9"):
        with pytest.raises(UnreadableName):
            mapper.name(subject)
    assert mapper.name("CN=admin,OU=eng") == "admin"
    assert mapper.name("OU=x,CN=eng") == "y"
    assert SslPrincipalMapper("DEFAULT").name("CN=a\u2028b") == "CN=a\u2028b"
    with pytest.raises(ValueError, match="invalid rule"):
        SslPrincipalMapper("RULE:(?u)^CN=(.*)$/$1/")
