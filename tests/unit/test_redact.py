"""Specification of credential scrubbing (memd.redact): every secret in the corpus is replaced by its typed
placeholder with the text around it intact; identifiers, hashes and ordinary developer text are never touched;
the LLM's reply is scrubbed before it is stored; huge hostile input is scanned in linear time."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator

import pytest
from fakellm import FakeLLM, Reply
from hypothesis import given, settings
from hypothesis import strategies as st
from secrets_corpus import (
    AWS_SECRET,
    CLEAN_CORPUS,
    GITHUB_PAT_CLASSIC,
    KINDS,
    LOOKALIKES,
    OPENAI_PROJECT,
    RSA_KEY,
    SECRET_CORPUS,
    STRIPE_SECRET,
)

from memd import redact as redact_module
from memd.llm import OpenAISummarizer
from memd.redact import Redaction, redact
from memd.summarizer import Entry, SummaryRequest


def placeholder(kind: str) -> str:
    return f"[REDACTED:{kind}]"


def corpus_id(case: tuple[str, str, str]) -> str:
    kind, _, text = case
    return f"{kind}:{text[:30]!r}"


# --- the secret corpus ---------------------------------------------------------------------------------------


def test_the_corpus_has_a_true_positive_for_every_kind_the_redactor_knows() -> None:
    assert set(KINDS) == set(redact_module.KINDS)


def test_the_corpus_covers_every_format_the_review_found_reaching_the_endpoint() -> None:
    reviewed = {
        "stripe_key",
        "gitlab_token",
        "huggingface_token",
        "npm_token",
        "sendgrid_key",
        "google_oauth",
        "telegram_token",
        "azure_key",
        "basic_auth",  # curl -u user:pass
        "aws_secret_key",  # written in prose too
        "secret_phrase",  # "the password is ..."
    }
    common = {
        "openai_key",
        "anthropic_key",
        "aws_access_key",
        "github_token",
        "slack_token",
        "jwt",
        "private_key",
        "bearer_token",
        "connection_string",
        "password_assignment",
        "twilio_key",
        "mailgun_key",
        "discord_token",
        "shopify_token",
        "digitalocean_token",
        "databricks_token",
        "pypi_token",
        "docker_token",
        "heroku_key",
    }
    assert reviewed | common <= set(KINDS)
    texts = {kind: [text for k, _, text in SECRET_CORPUS if k == kind] for kind in KINDS}
    assert any(" is " in t for t in texts["aws_secret_key"])
    assert any("curl -u" in t for t in texts["basic_auth"])
    assert any("password is" in t for t in texts["secret_phrase"])
    assert any("AccountKey=" in t for t in texts["azure_key"])
    assert any('"private_key"' in t for t in texts["private_key"])  # a GCP service-account JSON
    for prefix in ("ghp_", "gho_", "ghs_", "ghu_", "ghr_", "github_pat_"):
        assert any(prefix in t for t in texts["github_token"]), prefix


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


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("curl -u admin:s3cret-Pw https://ci/", "curl -u admin:[REDACTED:basic_auth] https://ci/"),
        ("curl --user=admin:s3cret-Pw https://ci/", "curl --user=admin:[REDACTED:basic_auth] https://ci/"),
        ("curl --proxy-user me:s3cret-Pw https://ci/", "curl --proxy-user me:[REDACTED:basic_auth] https://ci/"),
        ("wget -u x; curl -U px:s3cret-Pw http://a/", "wget -u x; curl -U px:[REDACTED:basic_auth] http://a/"),
    ],
)
def test_a_password_handed_to_an_http_client_loses_the_password_and_keeps_the_user(text: str, expected: str) -> None:
    assert redact(text) == Redaction(expected, {"basic_auth": 1})


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("the password is hunter2", "hunter2"),
        ("The DB password for the reporting replica is Tr0ub4dor&3.", "Tr0ub4dor&3"),
        ("the root password is now s3cr3t-ish (temporary)", "s3cr3t-ish"),
        ("The password was changed to 'plain words only'", "plain words only"),
        ("the api key is 9f8e7d6c5b4a39281706f5e4d3c2b1a0", "9f8e7d6c5b4a39281706f5e4d3c2b1a0"),
        ("our secret key = Zm9vYmFyYmF6cXV4MTIzNDU2", "Zm9vYmFyYmF6cXV4MTIzNDU2"),
        ("used access token Q2xpZW50SWQ6MTIzNDU2Nzg5MA for the export", "Q2xpZW50SWQ6MTIzNDU2Nzg5MA"),
    ],
)
def test_a_secret_given_in_a_sentence_is_redacted(text: str, secret: str) -> None:
    result = redact(text)
    assert result.text == text.replace(secret, "[REDACTED:secret_phrase]")
    assert result.counts == {"secret_phrase": 1}


@pytest.mark.parametrize(
    "text",
    [
        "the password is required",
        "the password is too short (8 < 12)",
        "the token is valid for 3600s",
        "the token is 3600s old",
        "the API key is `OPENAI_API_KEY` in the environment",
        "the secret is v1.4.0-rc.2",
        "the password is in ~/.pgpass",
        "the token is n-20261130094232-1ca0a3",
        "the access token is https://auth.acme.dev/token",
        "the password is <redacted>",
        "api key rotation happens weekly",
    ],
)
def test_a_sentence_about_a_secret_that_gives_none_is_kept(text: str) -> None:
    assert redact(text) == Redaction(text, {})


def test_a_jwt_cut_before_its_signature_is_still_redacted() -> None:
    header_and_claims = ".".join(JWT.split(".")[:2])
    assert redact(f"token {header_and_claims} (truncated)").text == "token [REDACTED:jwt] (truncated)"


def test_a_telegram_bot_keeps_its_public_id() -> None:
    token = "AAH" + "dqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
    assert redact(f"bot 110201543:{token}").text == "bot 110201543:[REDACTED:telegram_token]"


def test_offsets_stay_right_when_lower_casing_would_change_the_length() -> None:
    # "İ".lower() is two characters: the case-folded copy must keep every offset of the original.
    text = f"İstanbul İİİ office: password=hunter2 and {GITHUB_PAT_CLASSIC} (İ)"
    result = redact(text)
    assert result.text == (
        "İstanbul İİİ office: password=[REDACTED:password_assignment] and [REDACTED:github_token] (İ)"
    )
    assert result.counts == {"password_assignment": 1, "github_token": 1}


def test_a_vendor_key_in_an_assignment_is_named_by_its_vendor() -> None:
    text = f"STRIPE_KEY={STRIPE_SECRET}\nAWS_SECRET_ACCESS_KEY={AWS_SECRET}"
    assert redact(text).counts == {"stripe_key": 1, "aws_secret_key": 1}


# --- ordinary text -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", CLEAN_CORPUS, ids=lambda t: repr(t[:40]))
def test_ordinary_developer_text_comes_back_unchanged(text: str) -> None:
    assert redact(text) == Redaction(text, {})


@pytest.mark.parametrize(("category", "text"), LOOKALIKES, ids=lambda v: repr(v[:40]))
def test_identifiers_hashes_and_near_misses_come_back_unchanged(category: str, text: str) -> None:
    assert redact(text) == Redaction(text, {})


@settings(max_examples=200, deadline=None)
@given(
    case=st.sampled_from(SECRET_CORPUS),
    before=st.lists(st.sampled_from(CLEAN_CORPUS + [text for _, text in LOOKALIKES]), max_size=4),
    after=st.lists(st.sampled_from(CLEAN_CORPUS + [text for _, text in LOOKALIKES]), max_size=4),
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


# --- the LLM's reply -----------------------------------------------------------------------------------------


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


def summarize(llm: FakeLLM, note: str, *, redact_secrets: bool = True) -> tuple[str, dict[str, int]]:
    summarizer = OpenAISummarizer(llm.url, "fake", "test-key", 5.0, 0, redact_secrets)
    request = SummaryRequest(entries=[Entry("n-1", "note", note)], max_tokens=200, task=f"ship it; {STRIPE_SECRET}")
    result = asyncio.run(summarizer.summarize(request))
    return result.text, result.redactions


def test_a_secret_the_llm_echoes_is_redacted_before_it_is_stored_and_counted(llm: FakeLLM) -> None:
    # The model never saw these (the prompt was scrubbed), but a model can make one up or recall one.
    llm.script(Reply(f"# Context Summary\n- pushed with {GITHUB_PAT_CLASSIC}\n- DB password is hunter2-prod"))
    text, counts = summarize(llm, f"set OPENAI_API_KEY={OPENAI_PROJECT} before the run")
    assert GITHUB_PAT_CLASSIC not in text and "hunter2-prod" not in text
    assert "- pushed with [REDACTED:github_token]" in text
    assert "- DB password is [REDACTED:secret_phrase]" in text
    # Sent: the note's key and the task's key; stored: the two from the reply.
    assert counts == {"openai_key": 1, "stripe_key": 1, "github_token": 1, "secret_phrase": 1}
    sent = str(llm.requests)
    assert OPENAI_PROJECT not in sent and STRIPE_SECRET not in sent


def test_with_redaction_off_neither_the_prompt_nor_the_reply_is_touched(llm: FakeLLM) -> None:
    llm.script(Reply(f"# Context Summary\n- pushed with {GITHUB_PAT_CLASSIC}"))
    text, counts = summarize(llm, f"OPENAI_API_KEY={OPENAI_PROJECT}", redact_secrets=False)
    assert GITHUB_PAT_CLASSIC in text
    assert counts == {}
    assert OPENAI_PROJECT in str(llm.requests)


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
    "sk_live_",
    "glpat-",
    "gl",
    "hf_",
    "npm_",
    "SG.",
    "GOCSPX-",
    "ya29.",
    "1//0",
    "12345:A",
    "AccountKey=",
    "?sig=",
    "//registry.npmjs.org/:_authToken=",
    "AC0123456789abcdef0123456789abcdef:",
    "0123456789abcdef0123456789abcdef-us",
    "mailgun ",
    "abcdefghijklmn.atlasv1.",
    "curl -u a:",
    '"auth": "',
    "login a password ",
    "the password for a b c is ",
    "api key ",
    "MTI",
    "aws ",
    "Private-Lines: 1\n",
    "AGE-SECRET-KEY-1",
    "discord.com/api/webhooks/1234567/",
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
        pytest.param(_megabyte("aws " + "Ab1/" * 9), id="aws-near-39-char-runs"),
        pytest.param(_megabyte("the password for a b c d "), id="prose-without-a-verb"),
        pytest.param(_megabyte("curl -u a:b -u "), id="curl-flags"),
        pytest.param(_megabyte("Private-Lines: 9\nAAAA\n"), id="ppk-lines"),
        pytest.param(_megabyte("mailgun " + "0" * 40), id="mailgun-window"),
        pytest.param(_megabyte("password=${"), id="turned-down-values-that-run-to-the-end"),
        pytest.param(_megabyte("the token is ${"), id="turned-down-prose-that-runs-to-the-end"),
    ],
)
def test_a_megabyte_of_hostile_input_is_scanned_without_catastrophic_backtracking(text: str) -> None:
    # No timing assertion (machines differ); a backtracking pattern would make this run for hours, not seconds.
    result = redact(text)
    if text.startswith("sk-Ab1_"):
        assert result == Redaction("[REDACTED:openai_key]", {"openai_key": 1})
