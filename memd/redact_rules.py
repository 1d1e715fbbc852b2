"""What counts as a secret: the rules memd.redact applies, in priority order, and what a value must look like.

Order: private keys, then formats a vendor marks with a prefix, then formats known by their context (a header, a
URL, a key name, a command line), then the generic rules (a secret-named key with a value, a secret given in a
sentence). An earlier rule wins a span, so a vendor key in `API_KEY=...` is named by its vendor.

Each rule is tried only where one of its anchors (literal strings) occurs, and its pattern is matched there
(`back` characters earlier when the anchor is not where the secret starts). Rules keyed on words (`password`,
`bearer`) run on an ASCII-lowercased copy of the text with the same offsets. Every repetition is possessive,
bounded or stops at the next marker, so a match attempt never backtracks over the whole text.

A false positive costs an agent an identifier it needs, so the generic rules demand evidence: a key or a sentence
that names a secret, and a value that is not a reference (`${VAR}`, `os.environ[...]`, `<your-key>`), a version,
a number with its unit, an e-mail address, a URL, an environment variable's name or one of memd's ids; a bare
random string with no prefix and no such context is left alone. tests/secrets_corpus.py is the specification.

Imports nothing from memd.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

# (original text, match, start, end of the secret) -> keep the match?
Accept = Callable[[str, "re.Match[str]", int, int], bool]


@dataclass(frozen=True)
class Rule:
    kind: str
    # The pattern is matched only where an anchor occurs (minus `back` characters): a cheap, exact pre-filter.
    anchors: tuple[str, ...]
    pattern: re.Pattern[str]
    # Named groups holding the secret, tried in order (alternatives of one pattern); none: the whole match.
    groups: tuple[str, ...] = ()
    accept: Accept | None = None
    # Anchors and pattern apply to the ASCII-lowercased text (same length, same offsets).
    folded: bool = False
    back: int = 0


def _rule(
    kind: str,
    anchors: tuple[str, ...],
    pattern: str,
    *,
    groups: tuple[str, ...] = (),
    accept: Accept | None = None,
    folded: bool = False,
    back: int = 0,
) -> Rule:
    return Rule(kind, anchors, re.compile(pattern), groups, accept, folded, back)


def _prefixed(
    kind: str,
    prefixes: tuple[str, ...],
    body: str,
    accept: Accept | None = None,
    anchors: tuple[str, ...] = (),
) -> Rule:
    """A token a vendor marks with a prefix: not inside a longer word, and `body` must run to its end. `anchors`,
    when given, are shorter strings every prefix starts with (one scan of the text instead of one per prefix)."""
    alternatives = "|".join(re.escape(p) for p in prefixes)
    assert not anchors or all(p.startswith(anchors) for p in prefixes)
    pattern = rf"(?<![A-Za-z0-9_-])(?:{alternatives}){body}(?![A-Za-z0-9])"
    return _rule(kind, anchors or prefixes, pattern, accept=accept)


# --- what a value must look like ------------------------------------------------------------------------------


def _has(value: str, *, upper: bool = False, lower: bool = False, digit: bool = False) -> bool:
    return (
        (not upper or any(c.isupper() for c in value))
        and (not lower or any(c.islower() for c in value))
        and (not digit or any(c.isdigit() for c in value))
    )


def _mixed_case(text: str, m: re.Match[str], start: int, end: int) -> bool:
    # A prefix followed by a word (`hf_Downloads`) is a name; a token body mixes upper and lower case.
    return _has(text[start:end], upper=True, lower=True)


def _random_key_body(text: str, m: re.Match[str], start: int, end: int) -> bool:
    # `sk-learn-pipeline-v2` is a name; a real key body is random: mixed case and digits, or a long hex string.
    body = text[m.start("body") : m.end("body")]
    if _has(body, upper=True, lower=True, digit=True):
        return True
    return len(body) >= 32 and _has(body, digit=True) and all(c in "0123456789abcdef" for c in body)


def _random_bearer(text: str, m: re.Match[str], start: int, end: int) -> bool:
    # Outside an Authorization header "bearer" is often prose ("a bearer token"); a real token is long and random.
    value = text[start:end]
    return len(value) >= 16 and _has(value, digit=True) and any(c.isalpha() for c in value)


def _slack_with_digits(text: str, m: re.Match[str], start: int, end: int) -> bool:
    # Real Slack tokens carry numeric team/user ids; `xoxb-tokens-belong-to-bots` is prose.
    return _has(text[start + 5 : end], digit=True)


def _aws_secret_in_prose(text: str, m: re.Match[str], start: int, end: int) -> bool:
    # Base64 of 30 random bytes: mixed case and digits. A path (`ci/Build/2024/06/07/...`) has many slashes.
    value = text[start:end]
    return _has(value, upper=True, lower=True, digit=True) and value.count("/") <= 3 and "//" not in value


_NOT_A_VALUE = re.compile(
    r"""(?ix)
    (?: none | null | nil | true | false | yes | no | on | off | undefined | empty
      | str | string | bytes | int | bool | any | optional\[.* | secretstr | object | dict | list | tuple | float
      | \*+ | x{3,} | \.{3} | … | [{\[(|]           # masked; an object, list or block follows
      | \$\{.* | (?-i:\$[A-Z_][A-Z0-9_]*) | %\(\w+\)[sdr] | %[sdr]   # ${VAR} $VAR %(var)s
      | \{\{.* | \{[A-Za-z_]\w*\} | .*<[^<>]*>.*      # {{ secrets.X }} {password} <your-key> <id>:<secret>
      | (?:[a-z_]\w*(?:\(\))?\.)*[a-z_]\w*[\[(].*      # code: os.environ["X"] get_token() tokens[i]
      | [a-z_]+(?:\.[a-z_]+)+                         # an attribute: settings.api_key, Keyword.Type
      | (?:self|cls|os|settings|config|env|args|kwargs|process\.env)\.[\w.]*
      | (?-i:[A-Z][a-z]+(?:[A-Z][a-z]*)+)             # a class name: HiddenText, ClientSecret
      | \#[0-9a-f]{3,8}                                # a colour
      | [^a-z0-9]* | \w | -?\d{1,3}                    # no letter or digit; one character; a small number
      | (?:/|~/|\./|\.\./)[\w./@+-]*                 # a path (PWD=/home/alice/src)
      | pass | passwd | password | pwd | secret | token | user(?:name)?  # user:password@host in documentation
      | \[REDACTED:[a-z_]+\]
    )""",
)


def _value_given(text: str, m: re.Match[str], start: int, end: int) -> bool:
    return not _NOT_A_VALUE.fullmatch(text[start:end])


def _from_a_client(text: str, m: re.Match[str], start: int, end: int) -> bool:
    # `-u user:password` is a credential on an HTTP client's command line; `docker run -u 1000:1000` is not.
    return _value_given(text, m, start, end) and _A_CLIENT.search(_line_before(text, m.start())) is not None


_A_CLIENT = re.compile(r"(?:^|[\s;&|(`$])(?:curl|wget|http|https|xh)\s")  # the command, lower case as typed


def _line_before(text: str, at: int) -> str:
    """The line up to `at`, at most 512 characters of it: a bounded look-back keeps the scan linear."""
    return text[max(text.rfind("\n", max(0, at - 512), at) + 1, at - 512) : at]


# What a key must end with to name a secret (`DB_PASSWORD`, `api_key`, `X-Auth-Token`, `client_secret`).
_SECRET_WORDS = (
    r"(?:pass(?:word|wd|phrase|wort)?|pwd|secret|token|credentials?|contrase(?:ñ|n)a|kennwort|apikey"
    r"|(?:api|access|secret|private|priv|signing|encryption|master|client|auth|service|account|db|database)[_.-]?key)"
)
_KEY_NAME = re.compile(rf"[a-z0-9_.-]*?{_SECRET_WORDS}")
_NAMES_A_SECRET = re.compile(rf"(?:[a-z0-9]+[_.])*{_SECRET_WORDS}")  # `session_token`, `state.api_key`
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_.-")


def _plausible_assignment(text: str, m: re.Match[str], start: int, end: int) -> bool:
    folded = m.string
    key_end = m.end("kw")
    key_start = m.start("kw")
    while key_start > 0 and folded[key_start - 1] in _KEY_CHARS and key_end - key_start < 64:
        key_start -= 1
    if key_start > 0 and folded[key_start - 1] in _KEY_CHARS:
        return False  # a longer run than any key name: not an assignment
    key = folded[key_start:key_end]
    if not _KEY_NAME.fullmatch(key) or (key.endswith("pass") and key[-5:-4].isalpha()):  # `bypass=1`
        return False
    if folded.endswith((":param ", ":type "), 0, key_start):
        return False  # a docstring: `:param token: The token to use`
    value = text[start:end]
    # `password=password`, `token = session_token`: the value names a secret (a variable, a keyword argument).
    if _NOT_A_VALUE.fullmatch(value) or _NAMES_A_SECRET.fullmatch(value.lower()):
        return False
    if m.group("sep") == ":" and m.group("bare") is not None:
        # `key: value` inside a sentence ("what counts as a secret: the rules ...", "token: The token to use")
        # rather than alone on its line (YAML, headers, INI): the value must look like a password, not a word.
        words_after = text[end : end + 80].split("\n", 1)[0].strip()[:1].isalpha()
        if words_after or _line_before(text, key_start).strip(" \t-*#>{[,\"'"):
            return _looks_like_a_password(value)
    return True


_NOT_A_SECRET_WORD = re.compile(
    r"""(?x)
      v?\d+(?:\.\d+)+(?:[-+.][\w.]+)?               # a version
    | \d+(?:[.,:]\d+)*[a-zA-Z%]{0,5}                # a number, a time, a size with its unit
    | [A-Z][A-Z0-9]*_[A-Z0-9_]+                     # an environment variable's name
    | [^@\s]+@[^@\s]+\.[A-Za-z]{2,}                 # an e-mail address
    | \w+://.*                                      # a URL
    | [nd]-\d{14}-[0-9a-f]{6} | ckpt-[\w-]+         # memd's own ids
    """
)


def _looks_like_a_password(value: str) -> bool:
    return len(value) >= 6 and (_has(value, digit=True) or not value.isalnum() or _has(value[1:], upper=True))


def _secret_in_prose(text: str, m: re.Match[str], start: int, end: int) -> bool:
    value = text[start:end]
    if _NOT_A_VALUE.fullmatch(value) or _NOT_A_SECRET_WORD.fullmatch(value) or _NAMES_A_SECRET.fullmatch(value.lower()):
        return False
    if m.group("ws") is not None:  # "API key 8f7Y...": no verb, so only a clearly random string
        return len(value) >= 16 and _has(value, upper=True, lower=True, digit=True)
    if m.group("q") is not None:
        return len(value) >= 4
    if m.group("kw").startswith("pass"):  # passwords are often weak: a digit, a symbol or inner capital suffices
        return _looks_like_a_password(value)
    return len(value) >= 16 and _has(value, digit=True) and any(c.isalpha() for c in value)


# --- the rules, in priority order ------------------------------------------------------------------------------

_B64 = "A-Za-z0-9+/"
_TOKEN = r"A-Za-z0-9_\-"
_HEX = "0-9a-fA-F"

_GITLAB_PREFIXES: tuple[str, ...] = (
    *(f"{p}-" for p in ("glpat", "gldt", "glft", "glsoat", "glrt", "glcbt", "glimt", "glptt", "glagent", "gloas")),
    *("glffct-", "GR1348941"),
)

_PRIVATE_KEYS: tuple[Rule, ...] = (
    _rule(
        "private_key",
        ("-----BEGIN ",),
        r"-----BEGIN (?:[A-Z0-9]{1,20} ){0,4}PRIVATE KEY(?: BLOCK)?-----"
        r"(?:"
        # A complete block: the body may hold headers (Proc-Type: 4,ENCRYPTED) but never a run of 5 dashes,
        # so a BEGIN without its END fails at the next marker instead of scanning to the end of the text.
        r"(?:[^-]|-(?!----))*?-----END (?:[A-Z0-9]{1,20} ){0,4}PRIVATE KEY(?: BLOCK)?-----"
        # A truncated block (the note was cut): the base64 lines that follow, real or JSON-escaped newlines.
        r"|(?:(?:\r?\n|\\n)[A-Za-z0-9+/=]{16,})++"
        r")",
    ),
    # PuTTY .ppk: the lines after `Private-Lines: N` (the public lines are public).
    _rule(
        "private_key",
        ("Private-Lines:",),
        rf"Private-Lines: ?\d+\r?\n(?P<secret>[{_B64}=]{{1,64}}+(?![^\r\n])(?:\r?\n[{_B64}=]{{1,64}}+(?![^\r\n]))*+)",
        groups=("secret",),
    ),
    _prefixed("private_key", ("AGE-SECRET-KEY-1",), "[0-9A-Z]{58}"),
)

_VENDOR_PREFIXES: tuple[Rule, ...] = (
    _prefixed("anthropic_key", ("sk-ant-",), f"[{_TOKEN}]{{20,}}+", anchors=("sk-",)),
    _prefixed("openrouter_key", ("sk-or-v1-",), f"[{_HEX}]{{64}}", anchors=("sk-",)),
    _rule(
        "openai_key",
        ("sk-",),
        r"(?<![A-Za-z0-9_-])sk-(?!ant-)(?:(?:proj|svcacct|admin|None)-)?(?P<body>[A-Za-z0-9_-]{20,}+)",
        accept=_random_key_body,
    ),
    _rule(
        "github_token",
        ("gh", "github_pat_"),
        r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36,}+|github_pat_\w{40,}+)",
    ),
    _prefixed(
        "gitlab_token",
        _GITLAB_PREFIXES,
        f"[{_TOKEN}]{{20,}}+",
        anchors=("gl", "GR1348941"),
    ),
    _prefixed("huggingface_token", ("hf_", "api_org_"), "[A-Za-z0-9]{30,}+", accept=_mixed_case),
    _prefixed(
        "stripe_key",
        ("sk_live_", "sk_test_", "rk_live_", "rk_test_", "whsec_"),
        "[A-Za-z0-9]{20,}+",
        anchors=("sk_", "rk_", "whsec_"),
    ),
    _prefixed("npm_token", ("npm_",), "[A-Za-z0-9]{36}", accept=_mixed_case),
    _prefixed("sendgrid_key", ("SG.",), rf"[{_TOKEN}]{{22}}\.[{_TOKEN}]{{43}}"),
    _prefixed("google_oauth", ("GOCSPX-",), f"[{_TOKEN}]{{28}}"),
    _prefixed("google_oauth", ("ya29.",), f"[{_TOKEN}]{{20,}}+"),
    _prefixed("google_oauth", ("1//0",), f"[{_TOKEN}]{{30,}}+"),
    _prefixed("google_api_key", ("AIza",), f"[{_TOKEN}]{{35}}(?![{_TOKEN}])"),
    _prefixed("aws_access_key", ("AKIA", "ASIA", "ABIA", "ACCA"), "[A-Z0-9]{16}", anchors=("AK", "ASIA", "ABIA", "AC")),
    _prefixed("aws_access_key", ("A3T",), "[A-Z0-9]{17}"),
    _prefixed("twilio_key", ("SK",), f"[{_HEX}]{{32}}"),  # an API key SID
    _prefixed("mailgun_key", ("key-",), "[0-9a-f]{32}"),
    _prefixed("shopify_token", ("shpat_", "shpca_", "shppa_", "shpss_"), f"[{_HEX}]{{32}}", anchors=("shp",)),
    _prefixed("digitalocean_token", ("dop_v1_", "doo_v1_", "dor_v1_"), "[0-9a-f]{64}"),
    _prefixed("databricks_token", ("dapi",), r"[0-9a-f]{32}(?:-\d+)?"),
    _prefixed(
        "pypi_token",
        ("pypi-AgEIcHlwaS5vcmc", "pypi-AgENdGVzdC5weXBpLm9yZw"),  # macaroons for pypi.org and test.pypi.org
        f"[{_TOKEN}]{{50,}}+",
        anchors=("pypi-Ag",),
    ),
    _prefixed("docker_token", ("dckr_pat_", "dckr_oat_"), f"[{_TOKEN}]{{27,}}+", anchors=("dckr_",)),
    _prefixed("heroku_key", ("HRKU-",), f"[{_TOKEN}]{{40,}}+"),
    _prefixed("square_token", ("sq0atp-", "sq0csp-"), f"[{_TOKEN}]{{22,}}+", anchors=("sq0",)),
    _prefixed("artifactory_token", ("AKCp",), "[A-Za-z0-9]{60,}+", anchors=("AK",)),
    _prefixed("atlassian_token", ("ATATT3",), f"[{_TOKEN}=]{{100,}}+"),
    _prefixed("vault_token", ("hvs.", "hvb.", "hvr."), f"[{_TOKEN}]{{24,}}+", anchors=("hv",)),
    _prefixed("sentry_token", ("sntrys_", "sntryu_"), f"[{_TOKEN}+/=]{{40,}}+", anchors=("sntry",)),
    _prefixed("grafana_token", ("glsa_",), f"[A-Za-z0-9]{{32}}_[{_HEX}]{{8}}", anchors=("gl",)),
    _prefixed("grafana_token", ("glc_",), f"[{_B64}]{{32,}}+={{0,2}}", anchors=("gl",)),
    _prefixed("newrelic_key", ("NRAK-",), "[A-Z0-9]{27}"),
    _prefixed("postman_key", ("PMAK-",), "[0-9a-f]{24}-[0-9a-f]{34}"),
    _prefixed("linear_key", ("lin_api_",), "[A-Za-z0-9]{40}"),
    _prefixed("notion_token", ("ntn_",), "[A-Za-z0-9]{40,}+"),
    _prefixed("figma_token", ("figd_",), f"[{_TOKEN}]{{40,}}+"),
    _prefixed("supabase_token", ("sbp_",), "[0-9a-f]{40}"),
    _prefixed("supabase_token", ("sb_secret_",), f"[{_TOKEN}]{{20,}}+"),
    _prefixed("replicate_token", ("r8_",), "[A-Za-z0-9]{37}", accept=_mixed_case),
    _prefixed("groq_key", ("gsk_",), "[A-Za-z0-9]{52}"),
    _prefixed("xai_key", ("xai-",), "[A-Za-z0-9]{80}"),
    _prefixed("perplexity_key", ("pplx-",), "[A-Za-z0-9]{48}"),
    _prefixed(
        "doppler_token",
        ("dp.pt.", "dp.st.", "dp.sa.", "dp.ct.", "dp.scim.", "dp.audit."),
        "[A-Za-z0-9]{40,}+",
        anchors=("dp.",),
    ),
    _prefixed("pulumi_token", ("pul-",), "[0-9a-f]{40}"),
    _rule(
        "slack_token",
        ("xox", "xapp-"),
        r"(?<![A-Za-z0-9_-])(?:xox[abposre](?:\.xox[bp])?|xapp)-[A-Za-z0-9-]{10,}+",
        accept=_slack_with_digits,
    ),
)

# A bot token starts with the base64 of the bot's id: a digit 1-9, then a digit, gives these two characters.
_DISCORD_STARTS = ("MT", "Mj", "Mz", "ND", "NT", "Nj", "Nz", "OD", "OT")

_IN_CONTEXT: tuple[Rule, ...] = (
    _rule(
        "slack_token",
        ("hooks.slack.com/",),
        r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<secret>[A-Za-z0-9_/-]{8,}+)",
        groups=("secret",),
    ),
    _rule(
        "discord_token",
        ("/api/webhooks/",),
        rf"(?:(?<=discord\.com)|(?<=discordapp\.com))/api/webhooks/\d{{5,30}}/(?P<secret>[{_TOKEN}]{{60,}}+)",
        groups=("secret",),
    ),
    _prefixed("discord_token", _DISCORD_STARTS, rf"[{_TOKEN}]{{21,24}}\.[{_TOKEN}]{{6}}\.[{_TOKEN}]{{27,38}}"),
    # A Telegram bot token is `<bot id>:<secret>`; the bot id is public and stays.
    _rule(
        "telegram_token",
        (":A",),
        rf"(?<=[0-9]{{5}}):(?P<secret>A[{_TOKEN}]{{32,34}})(?![{_TOKEN}])",
        groups=("secret",),
    ),
    _rule(
        "azure_key",
        ("AccountKey=", "SharedAccessKey="),
        rf"(?<![A-Za-z])(?:AccountKey|SharedAccessKey)=(?P<secret>[{_B64}]{{20,}}+={{0,2}})",
        groups=("secret",),
    ),
    _rule("azure_key", ("sig=",), r"(?<=[?&;])sig=(?P<secret>[A-Za-z0-9%+/=_-]{20,}+)", groups=("secret",)),
    _rule(
        "npm_token",
        (":_authToken=",),
        r":_authToken=[ \t]*(?P<secret>[^\s\"'#;]++)",
        groups=("secret",),
        accept=_value_given,
    ),
    # The auth token that goes with a Twilio account SID: `-u AC...:token`, `Client("AC...", "token")`.
    _rule(
        "twilio_key",
        ("AC",),
        rf"(?<![A-Za-z0-9_-])AC[{_HEX}]{{32}}[\"']?[ \t]*[,:][ \t]*[\"']?(?P<secret>[{_HEX}]{{32}})(?![A-Za-z0-9])",
        groups=("secret",),
    ),
    _rule("mailchimp_key", ("-us",), r"(?<![A-Za-z0-9])[0-9a-f]{32}-us\d{1,2}(?![A-Za-z0-9])", back=32),
    _rule(
        "mailgun_key",
        ("mailgun",),
        r"mailgun[^\n]{0,80}?(?<![0-9a-z-])(?P<secret>[0-9a-h]{32}-[0-9a-h]{8}-[0-9a-h]{8})(?![0-9a-z-])",
        groups=("secret",),
        folded=True,
    ),
    _rule(
        "terraform_token", (".atlasv1.",), rf"(?<![A-Za-z0-9])[A-Za-z0-9]{{14}}\.atlasv1\.[{_TOKEN}=]{{60,}}+", back=14
    ),
    _rule(
        "jwt",
        ("eyJ",),
        # The signature may be missing (an unsigned token, or one cut short): header and claims alone are still sent.
        r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{5,}+\.eyJ[A-Za-z0-9_-]{5,}+(?:\.[A-Za-z0-9_-]*+)?",
    ),
    _rule(
        "aws_secret_key",
        ("secret",),
        r"(?:(?<![a-z0-9])|(?<=aws)|(?<=aws_))secret_?access_?key[\"']?[ \t]*[:=][ \t]*[\"']?"
        r"(?P<secret>[a-z0-9/+]{40})(?![a-z0-9/+=])",
        groups=("secret",),
        folded=True,
    ),
    # "The AWS secret key is ...", "aws creds -- secret: ...": a random 40-character base64 string near "aws".
    _rule(
        "aws_secret_key",
        ("aws",),
        r"aws[^\n]{0,100}?(?<![a-z0-9/+=])(?P<secret>[a-z0-9/+]{40})(?![a-z0-9/+=])",
        groups=("secret",),
        accept=_aws_secret_in_prose,
        folded=True,
    ),
    _rule(
        "bearer_token",
        ("authorization",),
        r"\b(?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*[\"']?(?:bearer|basic|token)[ \t]++"
        r"(?P<secret>[a-z0-9._~+/-]++=*+)",
        groups=("secret",),
        folded=True,
    ),
    _rule(
        "bearer_token",
        ("bearer",),
        r"\bbearer[ \t]++(?P<secret>[a-z0-9._~+/-]++=*+)",
        groups=("secret",),
        accept=_random_bearer,
        folded=True,
    ),
    # `user:password` handed to an HTTP client (curl -u, wget, httpie -a); the user stays.
    _rule(
        "basic_auth",
        ("-u", "-U", "-a"),  # also finds --user, --proxy-user and --auth
        r"(?:(?<![\w-])|(?<=[\s\"'=]-)|(?<=--proxy))-(?:u|user|U|a|auth)(?:[ \t]++|=)[\"']?[^\s:\"'/]{1,256}+"
        r":(?P<secret>[^\s\"']{1,256}+)",
        groups=("secret",),
        accept=_from_a_client,
    ),
    _rule(
        "basic_auth", ('"auth"',), rf"\"auth\"[ \t]*:[ \t]*\"(?P<secret>[{_B64}]{{8,}}+={{0,2}})\"", groups=("secret",)
    ),
    # ~/.netrc: machine HOST login USER password PASSWORD
    _rule(
        "basic_auth",
        ("login",),
        r"(?<![\w-])login[ \t]++\S++\s++password[ \t]++(?P<secret>\S++)",
        groups=("secret",),
        accept=_value_given,
    ),
    _rule(
        "connection_string",
        ("://",),
        # The password ends at the last "@" of the authority, so `p@ss@host` (unencoded) is still covered.
        r"(?<=[A-Za-z0-9])://[^\s:/@?#]{0,256}+:(?P<secret>[^\s/?#\"'`<>]{1,256}?)@(?=[^\s@/?#]*+(?:[/?#\s\"'<>)\]]|$))",
        groups=("secret",),
        accept=_value_given,
    ),
)

# "API key", "api_key", "apikey", "secret key", ...: what makes a bare "key" name a secret.
_KEY_QUALIFIERS = "|".join(
    f"(?<={q}{sep})" for q in ("api", "access", "auth", "secret", "private", "signing") for sep in ("", " ", "_", "-")
)

_GENERIC: tuple[Rule, ...] = (
    # KEY = VALUE where the key names a secret (DB_PASSWORD=..., "api_key": "...", X-Auth-Token: ...).
    _rule(
        "password_assignment",
        ("pass", "pwd", "secret", "token", "key", "credential", "contrase", "kennwort"),
        r"(?P<kw>pass(?:word|wd|phrase|wort)?|pwd|secret|token|credentials?|key|contrase(?:ñ|n)a|kennwort)"
        r"[\"']?[ \t]*(?P<sep>:=|=>|==|[:=])[ \t]*"
        # A quoted value ends at its closing quote or, cut short, at the end of the line.
        r"(?:\"(?P<dq>(?:[^\"\\\n]|\\.)++)"
        r"|'(?P<sq>[^'\n]++)"
        r"|(?P<bare>[^\s\"'`&<>,;]*[^\s\"'`&<>,;.)}\]]))",
        groups=("dq", "sq", "bare"),
        accept=_plausible_assignment,
        folded=True,
    ),
    # A secret given in a sentence: "the password is ...", "the API token was ...", "API key 8f7Y...".
    _rule(
        "secret_phrase",
        ("pass", "secret", "token", "key", "credential"),
        r"(?P<kw>(?<![a-z0-9_])(?:pass(?:word|phrase|wd)|secret|token|credentials?)"
        rf"|(?:{_KEY_QUALIFIERS})key)(?![a-z0-9_])"
        # "password for the staging db is ...": up to three words between the keyword and the verb.
        r"(?:(?:[ \t]++(?:for|of|on|in|to|at)(?:[ \t]++[^\s:=,;.]{1,40}+){1,3}?)?"
        r"(?:[ \t]++(?:is now|was changed to|has been changed to|changed to|set to|became|is|was)[ \t]++"
        r"|[ \t]*+[:=][ \t]*+)"
        r"|(?P<ws>[ \t]++))"
        r"(?:[\"'`](?P<q>[^\"'`\n]{1,200}+)[\"'`]|(?P<bare>[^\s\"'`<>]*[^\s\"'`<>.,;:!?)\]}]))",
        groups=("q", "bare"),
        accept=_secret_in_prose,
        folded=True,
    ),
)

RULES: tuple[Rule, ...] = _PRIVATE_KEYS + _VENDOR_PREFIXES + _IN_CONTEXT + _GENERIC

KINDS: tuple[str, ...] = tuple(sorted({rule.kind for rule in RULES}))
"""Every kind of secret `redact` knows, as it appears in placeholders and counts."""
