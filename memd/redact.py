"""Credential scrubbing for text that leaves the machine (contract 7: secrets stay home).

`redact()` is applied to every text before it is sent to a remote LLM: agent notes carry pasted .env files,
curl commands, logs and configs, and a credential in them must not reach a third party. Each secret is replaced
by a typed placeholder, `[REDACTED:<kind>]`, so the summary can still say that a key or password was involved;
for `key=value` assignments and URLs only the value or the password is replaced and the key, user and host stay.

Rules run in priority order over the original text (PEM blocks, then specific key formats, then bearer tokens,
connection strings and finally the generic assignment rule). A span claimed by an earlier rule is never touched
again, so nothing is redacted twice, and an existing placeholder is never redacted: `redact` is idempotent.
Every pattern starts at a literal or behind a boundary lookbehind, and its repetitions are possessive, bounded
or stop at the next marker, so matching stays linear in the input size (no catastrophic backtracking on hostile
or huge notes; tests/unit/test_redact.py feeds it megabytes of near-misses).

Imports nothing from memd.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field

PLACEHOLDER = "[REDACTED:{kind}]"
_PLACEHOLDER_RE = re.compile(r"\[REDACTED:[a-z_]{1,40}\]")


@dataclass(frozen=True)
class Redaction:
    text: str
    counts: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]
    # Named groups holding the secret, tried in order (alternatives of one pattern); none: the whole match.
    groups: tuple[str, ...] = ()
    accept: Callable[[re.Match[str], str], bool] | None = None
    # The rule cannot match unless one of these occurs in the text (case-folded when `folded`): a cheap skip.
    needles: tuple[str, ...] = ()
    folded: bool = False


def _looks_random(value: str, *, mixed_case: bool) -> bool:
    has_digit = any(c.isdigit() for c in value)
    if mixed_case:
        return has_digit and any(c.isupper() for c in value) and any(c.islower() for c in value)
    return has_digit and any(c.isalpha() for c in value)


def _random_key_body(match: re.Match[str], value: str) -> bool:
    # `sk-learn-pipeline-v2` is a name; a real key body is random: upper case, lower case and digits.
    return _looks_random(match.group("body"), mixed_case=True)


def _random_bearer(match: re.Match[str], value: str) -> bool:
    # Outside an Authorization header "bearer" is often prose ("a bearer token"); a real token is long and random.
    return len(value) >= 16 and _looks_random(value, mixed_case=False)


def _slack_with_digits(match: re.Match[str], value: str) -> bool:
    # Real Slack tokens carry numeric team/user ids; `xoxb-tokens-belong-to-bots` is prose.
    return any(c.isdigit() for c in value[5:])


_NOT_A_VALUE = re.compile(
    r"""(?ix)
    (?: none | null | nil | true | false | yes | no | on | off | undefined | empty
      | str | string | bytes | int | bool | any | optional\[.* | secretstr
      | \*+ | x{3,} | \.{3} | … | [{\[(|]           # masked; an object, list or block follows
      | \$\{.* | (?-i:\$[A-Z_][A-Z0-9_]*) | %\(\w+\)[sdr] | %[sdr]   # ${VAR} $VAR %(var)s
      | \{\{.* | \{[A-Za-z_]\w*\} | <[^>]*>          # {{ secrets.X }} {password} <your-key>
      | (?-i:[a-z_][a-z0-9_]*(?:\.[A-Za-z_]\w*)*(?:\[|\([\w.]*\)?))  # os.environ["X"] get_token()
      | (?:self|cls|os|settings|config|env|args|kwargs|process\.env)\.[\w.]*
      | (?:/|~/|\./|\.\./)[\w./@+-]*                 # a path (PWD=/home/alice/src)
    )""",
)


def _plausible_assignment(match: re.Match[str], value: str) -> bool:
    if _NOT_A_VALUE.fullmatch(value):
        return False
    # `password=password` / `api_key=api_key` is a keyword argument passed on, not a literal secret.
    return value.lower() != match.group("key").lower()


_KEYWORDS = (
    r"pass(?:word|wd|phrase)|pwd|secret|token|api[_-]?key|apikey"
    r"|(?:access|secret|private|signing|encryption|master|client)[_-]?key|credentials?"
)

_RULES: tuple[_Rule, ...] = (
    _Rule(
        "private_key",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]{1,20} ){0,4}PRIVATE KEY(?: BLOCK)?-----"
            r"(?:"
            # A complete block: the body may hold headers (Proc-Type: 4,ENCRYPTED) but never a run of 5 dashes,
            # so a BEGIN without its END fails at the next marker instead of scanning to the end of the text.
            r"(?:[^-]|-(?!----))*?-----END (?:[A-Z0-9]{1,20} ){0,4}PRIVATE KEY(?: BLOCK)?-----"
            # A truncated block (the note was cut): the base64 lines that follow, real or JSON-escaped newlines.
            r"|(?:(?:\r?\n|\\n)[A-Za-z0-9+/=]{16,})++"
            r")"
        ),
        needles=("PRIVATE KEY",),
    ),
    _Rule("anthropic_key", re.compile(r"(?<![A-Za-z0-9_-])sk-ant-[A-Za-z0-9_-]{20,}+"), needles=("sk-ant-",)),
    _Rule(
        "openai_key",
        re.compile(r"(?<![A-Za-z0-9_-])sk-(?!ant-)(?:(?:proj|svcacct|admin|None)-)?(?P<body>[A-Za-z0-9_-]{20,}+)"),
        accept=_random_key_body,
        needles=("sk-",),
    ),
    _Rule(
        "github_token",
        re.compile(r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36,}+|github_pat_\w{40,}+)"),
        needles=("gh",),
    ),
    _Rule(
        "slack_token",
        re.compile(r"(?<![A-Za-z0-9_-])(?:xox[abposre](?:\.xox[bp])?|xapp)-[A-Za-z0-9-]{10,}+"),
        accept=_slack_with_digits,
        needles=("xox", "xapp-"),
    ),
    _Rule(
        "slack_token",
        re.compile(r"https://hooks\.slack\.com/(?:services|workflows|triggers)/(?P<secret>[A-Za-z0-9_/-]{8,}+)"),
        groups=("secret",),
        needles=("hooks.slack.com",),
    ),
    _Rule("google_api_key", re.compile(r"(?<![A-Za-z0-9_-])AIza[A-Za-z0-9_-]{35}(?![A-Za-z0-9_-])"), needles=("AIza",)),
    _Rule(
        "aws_access_key",
        re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
        needles=("AKIA", "ASIA", "ABIA", "ACCA"),
    ),
    _Rule(
        "aws_secret_key",
        re.compile(
            r"(?i:(?<![A-Za-z0-9])(?:aws_?)?secret_?access_?key)[\"']?[ \t]*[:=][ \t]*[\"']?"
            r"(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
        ),
        groups=("secret",),
        needles=("access",),
        folded=True,
    ),
    _Rule(
        "jwt",
        re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{5,}+\.eyJ[A-Za-z0-9_-]{5,}+\.[A-Za-z0-9_-]*+"),
        needles=("eyJ",),
    ),
    _Rule(
        "bearer_token",
        re.compile(
            r"(?i:\b(?:proxy-)?authorization)[\"']?[ \t]*[:=][ \t]*[\"']?(?i:bearer|basic|token)[ \t]++"
            r"(?P<secret>[A-Za-z0-9._~+/-]++=*+)"
        ),
        groups=("secret",),
        needles=("authorization",),
        folded=True,
    ),
    _Rule(
        "bearer_token",
        re.compile(r"(?i:\bbearer)[ \t]++(?P<secret>[A-Za-z0-9._~+/-]++=*+)"),
        groups=("secret",),
        accept=_random_bearer,
        needles=("bearer",),
        folded=True,
    ),
    _Rule(
        "connection_string",
        re.compile(
            r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,30}://[^\s:/@?#]{0,256}:"
            # The password ends at the last "@" of the authority, so `p@ss@host` (unencoded) is still covered.
            r"(?P<secret>[^\s/?#]{1,256}?)@(?=[^\s@/?#]*(?:[/?#\s\"'<>)\]]|$))"
        ),
        groups=("secret",),
        needles=("://",),
    ),
    _Rule(
        "password_assignment",
        re.compile(
            rf"(?<![A-Za-z0-9_.-])(?P<key>[A-Za-z0-9_.-]{{0,64}}?(?i:{_KEYWORDS}))"
            r"[\"']?[ \t]*(?::=|=>|==|[:=])[ \t]*"
            # A quoted value ends at its closing quote or, cut short, at the end of the line.
            r"(?:\"(?P<dq>(?:[^\"\\\n]|\\.)++)"
            r"|'(?P<sq>[^'\n]++)"
            r"|(?P<bare>[^\s\"'&<>,;]*[^\s\"'&<>,;.)}\]]))"
        ),
        groups=("dq", "sq", "bare"),
        accept=_plausible_assignment,
        needles=("pass", "pwd", "secret", "token", "key", "credential"),
        folded=True,
    ),
)


def redact(text: str) -> Redaction:
    """Replace every credential in `text` by `[REDACTED:<kind>]`; counts say how many of each kind."""
    # Placeholders already in the text (a summary of summaries) are claimed first, as opaque: never redacted
    # again and never part of another match, such as a URL whose "user:password" straddles one.
    spans: list[tuple[int, int, str | None]] = [(*m.span(), None) for m in _PLACEHOLDER_RE.finditer(text)]
    starts = [start for start, _, _ in spans]
    folded = text.lower()
    for rule in _RULES:
        haystack = folded if rule.folded else text
        if rule.needles and not any(needle in haystack for needle in rule.needles):
            continue
        for match in rule.pattern.finditer(text):
            start, end = _secret_span(rule, match)
            if start >= end or (rule.accept is not None and not rule.accept(match, text[start:end])):
                continue
            i = bisect_left(starts, start)
            if (i > 0 and spans[i - 1][1] > start) or (i < len(spans) and spans[i][0] < end):
                continue  # claimed by an earlier, more specific rule
            starts.insert(i, start)
            spans.insert(i, (start, end, rule.kind))
    counts: dict[str, int] = {}
    out: list[str] = []
    pos = 0
    for start, end, kind in spans:
        if kind is None:
            continue
        out.append(text[pos:start])
        out.append(PLACEHOLDER.format(kind=kind))
        counts[kind] = counts.get(kind, 0) + 1
        pos = end
    if not counts:
        return Redaction(text, {})
    out.append(text[pos:])
    return Redaction("".join(out), counts)


def _secret_span(rule: _Rule, match: re.Match[str]) -> tuple[int, int]:
    for name in rule.groups:
        if match.group(name) is not None:
            return match.span(name)
    return match.span() if not rule.groups else (0, 0)
