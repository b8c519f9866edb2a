"""Secrets are left out of what goes to a summariser or into a memory; ordinary text is not."""

from __future__ import annotations

import random
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.scrub import MARKER, contains_secret, looks_random, scrub
from tests.cost import LINEAR_GROWTH, growth

# (text, the secret that must be gone afterwards)
SECRETS = [
    (
        "my key is sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z please",
        "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8",
    ),
    ("sk-abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH", "sk-abcdefghijklmnop"),
    ("anthropic: sk-ant-api03-Zx9yW8vU7tS6rQ5pO4nM3lK2jI1hG0fE-_dC", "sk-ant-api03-Zx9yW8vU7tS6"),
    ("OPENROUTER sk-or-v1-0123456789abcdef0123456789abcdef0123", "sk-or-v1-0123456789abcdef"),
    ("git push with ghp_16C7e42F292c6912E7710c838347Ae178B4a here", "ghp_16C7e42F292c6912E77"),
    ("github_pat_11AABBCCDD0123456789_abcdefghijklmnopqrstuvwxyzABCDEF", "github_pat_11AABBCCDD"),
    ("GROQ_KEY gsk_7sPq2Lm9Xc4Vb8Nz1Qw5Er3Ty6Ui0OpAs", "gsk_7sPq2Lm9Xc4Vb8Nz1Qw"),
    ("xai-Q2w3E4r5T6y7U8i9O0pLkJhGfDsA1z2x3C4v5B6n", "xai-Q2w3E4r5T6y7U8i9O0p"),
    ("aws id AKIAIOSFODNN7EXAMPLE in the config", "AKIAIOSFODNN7EXAMPLE"),
    (
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ),
    ("the secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq4m1EYx9Q was set", "wJalrXUtnFEMI/K7MDENG"),
    ("maps key AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY ok", "AIzaSyD-9tSrke72PouQMnMX"),
    ("hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "hf_AbCdEfGhIjKlMnOpQrSt"),
    ("curl -H 'Authorization: Bearer 9f8e7d6c5b4a3f2e1d0c' https://x.test", "9f8e7d6c5b4a3f2e1d0c"),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
    ("x-api-key: 5d41402abc4b2a76b9719d911017c592zz", "5d41402abc4b2a76b9719d911017c592zz"),
    ("password: hunter2", "hunter2"),
    ("DB_PASSWORD=s3cr3t!pass", "s3cr3t!pass"),
    ('{"user": "amy", "password": "correct horse battery"}', "correct horse battery"),
    ("my password is Tr0ub4dor&3 and that is that", "Tr0ub4dor&3"),
    ("pwd=letmein99", "letmein99"),
    ("passwd: 'qwerty123'", "qwerty123"),
    ("client_secret = 8f14e45fceea167a5a36dedd4bea2543", "8f14e45fceea167a5a36dedd4bea2543"),
    ("api_key: 'abc123def456ghi789'", "abc123def456ghi789"),
    ("refresh_token=1//0gAbCdEf-GhIjKlMn", "1//0gAbCdEf-GhIjKlMn"),
    ("postgres://app:pa55w0rd@db.example.com:5432/app", "pa55w0rd"),
    (
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
        "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "eyJhbGciOiJIUzI1NiJ9",
    ),
    ("random token X_5c8haBlLUY3nd2NaVsjx0ZmGpgDvOW8bnYGTFegVu9y3oAH5wB", "X_5c8haBlLUY3nd2N"),
    (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx4Bq\nZm9vYmFy==\n"
        "-----END RSA PRIVATE KEY-----\nafter",
        "MIIEowIBAAKCAQEAx4Bq",
    ),
    (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU\nAAAA\n",
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmU",
    ),
    # AWS's documented example secret access key, on its own and after a word that names it
    ("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCY"),
    ("my aws secret is wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY ok", "bPxRfiCYEXAMPLEKEY"),
    # card numbers that pass the Luhn check (issuers' published test numbers)
    ("pay with 4111 1111 1111 1111 exp 12/27", "1111 1111 1111"),
    ("card 4111-1111-1111-1111", "1111-1111-1111"),
    ("card number 5555555555554444.", "5555555555554444"),
    ("amex 3782 822463 10005 cvv 123", "822463"),
    # IBANs that pass the mod-97 check
    ("Send it to GB82 WEST 1234 5698 7654 32 please", "5698 7654"),
    ("IBAN: DE89370400440532013000.", "370400440532013000"),
    # a password said in words
    ("my wifi password is swordfish", "swordfish"),
    ("the router password is 'CorrectHorse'", "CorrectHorse"),
    ("password for the nas is admin1234", "admin1234"),
    ("log in with password hunter22 tonight", "hunter22"),
    ("PIN is 4821", "4821"),
    # passwords on a command line
    ("mysql -u root -pS3cretPass shop", "S3cretPass"),
    ("mysqldump -h db -u app -p'my secret' shop > dump.sql", "my secret"),
    ("sshpass -p 'hunter2' ssh pi@raspberrypi.local", "hunter2"),
    ("sshpass -p hunter2 ssh pi@host", "hunter2"),
    ("curl -u admin:Pa55word https://x.test", "Pa55word"),
    # netrc entries, on one line and spread over lines
    ("machine api.example.com login alice password swordfish", "swordfish"),
    ("machine api.example.com\n  login alice\n  password swordfish\n", "swordfish"),
    # TOTP seeds
    (
        "otpauth://totp/Example:alice@example.com?secret=JBSWY3DPEHPK3PXP&issuer=Example",
        "JBSWY3DPEHPK3PXP",
    ),
    ("My 2FA setup key is JBSWY3DPEHPK3PXP", "JBSWY3DPEHPK3PXP"),
    ("authenticator secret: jbsw y3dp ehpk 3pxp", "jbsw y3dp"),
    # Discord bot token and webhook
    ("bot token MTk4NjIyNDgzNDcxOTI1MjQ4.Cl2FMQ.ZnCjm1XVW7vRze4b7Cq4se7kKWs here", "ZnCjm1XVW7"),
    (
        "https://discord.com/api/webhooks/123456789012345678/AbCdEfGhIjKlMnOpQrStUvWxYz01234",
        "AbCdEfGhIjKlMnOpQrStUvWxYz01234",
    ),
    # htpasswd lines: Apache MD5, bcrypt, SHA-1
    ("alice:$apr1$r31.....$HqJZimcKQFAMYayBlzkrA/", "HqJZimcKQFAMYayBlzkrA"),
    ("bob:$2y$05$Ui.fq0aP3OLt0sVVGl/sH.pTkfpqTzDTLiT/OLEDS8mbWKYUdXJ6C", "pTkfpqTzDTLiT"),
    ("carol:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=", "W6ph5Mm5Pz8GgiULbPgzG37mj9g"),
    # a wallet recovery phrase, plain and numbered
    (
        "seed: legal winner thank year wave sausage worth useful legal winner thank yellow",
        "wave sausage worth useful",
    ),
    (
        "1. abandon 2. ability 3. able 4. about 5. above 6. absent\n7. absorb 8. abstract "
        "9. absurd 10. abuse 11. access 12. accident",
        "absorb 8. abstract",
    ),
    # US social security numbers (the SSA's long-void Woolworth example)
    ("my SSN is 078-05-1120", "078-05-1120"),
    ("social security number: 078 05 1120", "078 05 1120"),
]

LOOK_ALIKES = [
    "Pneumonoultramicroscopicsilicovolcanoconiosis is a long word.",
    "Antidisestablishmentarianism and floccinaucinihilipilification",
    "See https://github.com/openai/openai-python/blob/main/src/openai/_client.py for details",
    "https://docs.python.org/3/library/asyncio-task.html#asyncio.timeout",
    "commit 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39 fixed the crash",
    "image digest sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "request id 550e8400-e29b-41d4-a716-446655440000 failed",
    "the md5 is 5d41402abc4b2a76b9719d911017c592",
    "test_summary_keeps_every_fact_when_the_model_omits_them_2",
    "AbstractSingletonProxyFactoryBeanConfigurationManager2",
    "max_tokens = 1024 and the token limit was 2,000 tokens",
    "the password is required, and the password was wrong",
    "Use Bearer authentication for the API",
    "api_key = os.environ['OPENAI_API_KEY']",
    "token = get_token()",
    "The alphabet abcdefghijklmnopqrstuvwxyz0123456789 is in the table",
    "/home/priya/projects/conch/engines/context/summarise.py",
    "C:\\Users\\Priya\\Documents\\Budget2026\\summary-final-v2.xlsx",
    "release-2026-11-29-final-build-candidate-number-3",
    "Write to priya.raman@example.com about invoice #48213 ($1,200).",
    "Authorization: required for every call",
    "secret: keep it simple",
    "https://example.com/files/2024/report-v2-final/section3/page12",
    # numbers that fail their check digits, or have another shape
    "order 1234 5678 9012 3456 shipped",
    "4111 1111 1111 1112 was a typo",
    "GB82 WEST 1234 5698 7654 33 is one digit off",
    "ISBN 978-0-306-40615-7, call +44 20 7946 0958 or 555-123-4567",
    "tracking 1Z999AA10123456784, build 20261129123456, room 123-45",
    # prose about passwords, and code that handles one
    "The password manager keeps 12 passwords; the password is case sensitive.",
    "Use the default password for encrypted files.",
    "mysql -u root -p shop",
    "def load(password: Optional[bytes]) -> None: password = password.encode('utf-8')",
    "Password manager and/or keychain",
    # an ordinary sentence made of words that are on the recovery-phrase list
    "I want to buy a house near the river with a garden and a shed for the tools.",
    "Users/Priya/Documents/Project2/notesAbcd",
    "",
]


@pytest.mark.parametrize(("text", "secret"), SECRETS)
def test_each_kind_of_secret_is_left_out(text: str, secret: str) -> None:
    out = scrub(text)
    assert secret not in out
    assert MARKER in out
    assert contains_secret(text)


def test_text_around_a_secret_is_kept() -> None:
    out = scrub("Use ghp_16C7e42F292c6912E7710c838347Ae178B4a to push to main today.")
    assert out == f"Use {MARKER} to push to main today."
    pem = scrub(
        "before\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg\n-----END EC PRIVATE KEY-----\nafter"
    )
    assert pem == f"before\n{MARKER}\nafter"


def test_a_key_block_cut_short_is_left_out_to_its_last_line() -> None:
    out = scrub("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nABCD\n\nThanks!")
    assert "MIIEvQ" not in out and "ABCD" not in out
    assert out.endswith("Thanks!")


@pytest.mark.parametrize("text", LOOK_ALIKES)
def test_look_alikes_are_left_alone(text: str) -> None:
    assert scrub(text) == text
    assert not contains_secret(text)


def test_random_keys_of_every_alphabet_are_caught() -> None:
    rng = random.Random(20261129)
    alphabets = {
        "base62": string.ascii_letters + string.digits,
        "base36": string.ascii_lowercase + string.digits,
        "BASE36": string.ascii_uppercase + string.digits,
        "url-safe": string.ascii_letters + string.digits + "-_",
    }
    for name, alphabet in alphabets.items():
        keys = [
            "".join(rng.choice(alphabet) for _ in range(rng.randint(32, 64))) for _ in range(400)
        ]
        caught = sum(scrub(f"key {k} end") == f"key {MARKER} end" for k in keys)
        assert caught >= 390, f"{name}: only {caught} of 400 random keys were left out"


_WORDS = (
    "summary model window budget person message folded piece chat token request reply "
    "answer memory server local cheap small fact keeper render scrub prompt focus limit "
    "history turn provider stream event health note context"
)


def test_identifiers_made_of_words_are_not_taken_for_keys() -> None:
    rng = random.Random(7)
    words = _WORDS.split()
    for i in range(600):
        parts = [rng.choice(words) for _ in range(rng.randint(5, 8))]
        styles = (
            "_".join(parts) + f"_{i}",
            parts[0] + "".join(p.title() for p in parts[1:]) + str(i),
            "-".join(parts) + f"-v{i}",
        )
        for ident in styles:
            assert not looks_random(ident), ident
            assert scrub(ident) == ident


# --- never raises, idempotent, linear --------------------------------------------------------

_FRAGMENTS = st.sampled_from(
    [s for s, _ in SECRETS]
    + LOOK_ALIKES
    + [
        "password",
        "=",
        ": ",
        " is ",
        "Bearer ",
        "token",
        "sk-",
        "ghp_",
        "-----BEGIN RSA PRIVATE KEY-----",
        "-----END RSA PRIVATE KEY-----",
        "\n",
        "://",
        "@",
        MARKER,
        "[secret",
        '"',
        "'",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_FRAGMENTS, st.text(max_size=40)), max_size=12).map("".join))
def test_scrub_never_raises_and_is_idempotent(text: str) -> None:
    once = scrub(text)
    assert scrub(once) == once
    assert not contains_secret(once)


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_scrub_never_raises_on_any_text(text: str) -> None:
    once = scrub(text)
    assert isinstance(once, str)
    assert scrub(once) == once


@pytest.mark.parametrize(
    ("head", "unit"),
    [
        ("", "a"),
        ("", "sk-"),
        ("", "password="),
        ("", "-----BEGIN RSA PRIVATE KEY-----\n"),
        ("", "eyJ"),
        ("", "https://a:"),
        ("", "1a"),
        ("", "Bearer "),
        ("", "mysql -u root "),
        ("", "mysql -p"),
        ("", "sshpass -v "),
        ("", "password for the "),
        ("", "machine x login y password\n"),
        ("", "4111 "),
        ("", "GB82 "),
        ("", "abandon "),
        ("", "2fa ABCD "),
        ("", "$1$"),
        ("", "123-45-"),
        ("abc", " "),
    ],
    ids=[
        "letters",
        "sk",
        "password",
        "pem",
        "jwt",
        "url",
        "digits",
        "bearer",
        "mysql",
        "mysql-p",
        "sshpass",
        "password-for",
        "netrc",
        "card",
        "iban",
        "seed-words",
        "totp",
        "crypt",
        "ssn",
        "spaces",
    ],
)
def test_a_huge_paste_is_scrubbed_in_linear_time(head: str, unit: str) -> None:
    # Quadratic backtracking on a 5 MB paste would take hours. Counted in work done, not
    # seconds, so a busy machine cannot fail it: four times the text, four times the work.
    assert growth(scrub, unit, 25_000, head=head) < LINEAR_GROWTH
