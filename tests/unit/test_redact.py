"""Specification of credential scrubbing (memd.redact): every secret in the corpus is replaced by its typed
placeholder with the text around it intact; ordinary developer text is never touched; huge hostile input is
scanned in linear time."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from secrets_corpus import (
    CLEAN_CORPUS,
    KINDS,
    OPENAI_PROJECT,
    RSA_KEY,
    SECRET_CORPUS,
)

from memd.redact import Redaction, redact


def placeholder(kind: str) -> str:
    return f"[REDACTED:{kind}]"


def corpus_id(case: tuple[str, str, str]) -> str:
    kind, _, text = case
    return f"{kind}:{text[:30]!r}"


# --- the secret corpus ---------------------------------------------------------------------------------------


def test_the_corpus_covers_every_kind_of_secret() -> None:
    assert set(KINDS) == {
        "openai_key",
        "anthropic_key",
        "aws_access_key",
        "aws_secret_key",
        "github_token",
        "slack_token",
        "google_api_key",
        "jwt",
        "bearer_token",
        "private_key",
        "password_assignment",
        "connection_string",
    }


@pytest.mark.parametrize("case", SECRET_CORPUS, ids=corpus_id)
def test_a_secret_is_replaced_by_its_typed_placeholder_and_nothing_else_changes(case: tuple[str, str, str]) -> None:
    kind, secret, text = case
    result = redact(text)
    assert secret not in result.text
    assert result.text == text.replace(secret, placeholder(kind))
    assert result.counts == {kind: 1}


@pytest.mark.parametrize("case", SECRET_CORPUS, ids=corpus_id)
def test_redacting_twice_changes_nothing_more(case: tuple[str, str, str]) -> None:
    once = redact(case[2])
    twice = redact(once.text)
    assert twice == Redaction(once.text, {})


def test_a_note_full_of_secrets_counts_every_one_by_kind() -> None:
    note = "\n\n".join(text for _, _, text in SECRET_CORPUS)
    result = redact(note)
    for _, secret, _ in SECRET_CORPUS:
        assert secret not in result.text
    expected = Counter(kind for kind, _, _ in SECRET_CORPUS)
    assert result.counts == dict(expected)
    assert sum(result.counts.values()) == result.text.count("[REDACTED:")


def test_a_secret_that_repeats_is_counted_each_time() -> None:
    text = f"first try OPENAI_API_KEY={OPENAI_PROJECT}\nsecond try OPENAI_API_KEY={OPENAI_PROJECT}\n"
    result = redact(text)
    assert result.text == (
        "first try OPENAI_API_KEY=[REDACTED:openai_key]\nsecond try OPENAI_API_KEY=[REDACTED:openai_key]\n"
    )
    assert result.counts == {"openai_key": 2}


# --- precedence: the most specific rule wins, once ------------------------------------------------------------

GHP = "ghp_" + "q7Lm2Xz9Rt4Vb8Nc1Kd6Wf3Hj5Gs0Pa2Ye7U"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1c2VyXzQyIiwiZXhwIjoxNzE3NzUzNjAwfQ."
    "p3Kq9XzL2mN7vB4cR8tY1wE6uI0oA5sD"
)


@pytest.mark.parametrize(
    ("text", "expected", "counts"),
    [
        (f"GITHUB_TOKEN={GHP}", "GITHUB_TOKEN=[REDACTED:github_token]", {"github_token": 1}),
        (f'{{"api_key": "{OPENAI_PROJECT}"}}', '{"api_key": "[REDACTED:openai_key]"}', {"openai_key": 1}),
        (f"Authorization: Bearer {JWT}", "Authorization: Bearer [REDACTED:jwt]", {"jwt": 1}),
        (
            f"https://x-access-token:{GHP}@github.com/acme/w.git",
            "https://x-access-token:[REDACTED:github_token]@github.com/acme/w.git",
            {"github_token": 1},
        ),
        (f'"private_key": "{RSA_KEY}"', '"private_key": "[REDACTED:private_key]"', {"private_key": 1}),
    ],
    ids=["env-github", "json-openai", "bearer-jwt", "url-github", "json-pem"],
)
def test_a_specific_format_wins_over_the_generic_rules_and_is_redacted_once(
    text: str, expected: str, counts: dict[str, int]
) -> None:
    assert redact(text) == Redaction(expected, counts)


def test_a_placeholder_already_in_the_text_is_left_alone() -> None:
    text = (
        "token=[REDACTED:jwt] password: [REDACTED:password_assignment] postgres://u:[REDACTED:x]@db/app "
        "https://[REDACTED:github_token]@github.com/acme/w.git"
    )
    assert redact(text) == Redaction(text, {})


# --- assignments keep their key ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("password=hunter2", "password=[REDACTED:password_assignment]"),
        ("DB_PASSWORD='hunter2'", "DB_PASSWORD='[REDACTED:password_assignment]'"),
        ('"client_secret": "s3cr3t-value"', '"client_secret": "[REDACTED:password_assignment]"'),
        ("apiKey := 'abc123def456'", "apiKey := '[REDACTED:password_assignment]'"),
        ("'token' => 'abc123def456',", "'token' => '[REDACTED:password_assignment]',"),
        ("X-Auth-Token: 9f8e7d6c5b4a", "X-Auth-Token: [REDACTED:password_assignment]"),
        ("pwd=hunter2;port=5432", "pwd=[REDACTED:password_assignment];port=5432"),
        ("(password=hunter2)", "(password=[REDACTED:password_assignment])"),
        ('password="cut sho', 'password="[REDACTED:password_assignment]'),
        ('password="cut short\nnext: line', 'password="[REDACTED:password_assignment]\nnext: line'),
    ],
)
def test_an_assignment_loses_its_value_and_keeps_its_key(text: str, expected: str) -> None:
    result = redact(text)
    assert result.text == expected
    assert result.counts == {"password_assignment": 1}


@pytest.mark.parametrize(
    "text",
    [
        "password: ${DB_PASSWORD}",
        "API_TOKEN=$API_TOKEN",
        'api_key: "<your-api-key>"',
        'password = os.environ["DB_PASSWORD"]',
        "token = get_token()",
        "api_key = settings.OPENAI_API_KEY",
        "password: ********",
        "password=None",
        "password: str = Field(repr=False)",
        "token: Optional[str] = None",
        "PWD=/home/alice/src",
        "password=password",
        'secret: "{{ secrets.DEPLOY_KEY }}"',
        "password: ''",
        "credentials: {",
    ],
)
def test_a_value_that_names_a_secret_instead_of_holding_one_is_kept(text: str) -> None:
    assert redact(text) == Redaction(text, {})


# --- formats at their edges ----------------------------------------------------------------------------------


def test_a_truncated_private_key_is_redacted_up_to_where_the_note_was_cut() -> None:
    block = RSA_KEY.split("\n")
    truncated = "\n".join(block[:6])
    text = f"key from the log:\n{truncated}\n[output truncated] then I deleted it."
    result = redact(text)
    assert result.text == "key from the log:\n[REDACTED:private_key]\n[output truncated] then I deleted it."
    assert result.counts == {"private_key": 1}


def test_a_connection_string_without_a_password_is_kept() -> None:
    text = "postgres://app@db.internal:5432/shop and redis://cache:6379/0 and ssh://git@github.com/acme/w.git"
    assert redact(text) == Redaction(text, {})


def test_a_bearer_token_needs_to_look_random_outside_an_authorization_header() -> None:
    assert redact("we send a bearer tokenizationservice header").counts == {}
    assert redact("Authorization: Bearer short1").text == "Authorization: Bearer [REDACTED:bearer_token]"


def test_names_that_merely_start_like_keys_are_kept() -> None:
    text = "sk-learn-pipeline-configuration-v2 and task-sk-abcdefghijklmnopqrstuvwxyz0123 and AKIA-rotation-runbook"
    assert redact(text) == Redaction(text, {})


def test_empty_text_is_returned_as_is() -> None:
    assert redact("") == Redaction("", {})


# --- ordinary text -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", CLEAN_CORPUS, ids=lambda t: repr(t[:40]))
def test_ordinary_developer_text_comes_back_unchanged(text: str) -> None:
    assert redact(text) == Redaction(text, {})


@settings(max_examples=200, deadline=None)
@given(
    case=st.sampled_from(SECRET_CORPUS),
    before=st.lists(st.sampled_from(CLEAN_CORPUS), max_size=4),
    after=st.lists(st.sampled_from(CLEAN_CORPUS), max_size=4),
)
def test_a_secret_anywhere_among_ordinary_notes_never_survives(
    case: tuple[str, str, str], before: list[str], after: list[str]
) -> None:
    kind, secret, text = case
    note = "\n".join([*before, text, *after])
    result = redact(note)
    assert secret not in result.text
    assert result.counts == {kind: 1}
    assert result.text == note.replace(secret, placeholder(kind))


# --- hostile input -------------------------------------------------------------------------------------------

NEAR_MISSES = [
    "sk-",
    "sk-ant-",
    "sk-proj-",
    "ghp_",
    "github_pat_",
    "xoxb-",
    "AIza",
    "AKIA",
    "eyJ",
    "eyJa.",
    "Bearer ",
    "Authorization: ",
    "password",
    "=",
    ":",
    '"',
    "\\",
    "a://b:",
    "@",
    "-----BEGIN RSA PRIVATE KEY-----",
    "\n",
    "-----",
    "aws_secret_access_key",
    "https://hooks.slack.com/services/",
    "token",
    "AAAAAAAAAAAAAAAA",
    " ",
]


def _megabyte(unit: str) -> str:
    return (unit * (1_000_000 // len(unit) + 1))[:1_000_000]


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("".join(NEAR_MISSES * (1_000_000 // len("".join(NEAR_MISSES)))), id="every-near-miss-cycled"),
        pytest.param(_megabyte("a://b:"), id="userinfo-without-host"),
        pytest.param(_megabyte("-----BEGIN PRIVATE KEY-----\nAAAA-"), id="pem-without-end"),
        pytest.param(_megabyte('password="\\'), id="unclosed-quoted-values"),
        pytest.param("sk-" + _megabyte("Ab1_"), id="one-endless-key"),
    ],
)
def test_a_megabyte_of_hostile_input_is_scanned_without_catastrophic_backtracking(text: str) -> None:
    # No timing assertion (machines differ); a backtracking pattern would make this run for hours, not seconds.
    result = redact(text)
    if text.startswith("sk-Ab1_"):
        assert result == Redaction("[REDACTED:openai_key]", {"openai_key": 1})
