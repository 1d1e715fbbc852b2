"""Realistic fake credentials embedded in realistic agent notes, for every kind memd.redact knows.

`SECRET_CORPUS` is a list of `(kind, secret, text)`: `text` contains `secret` exactly once, in the kind of place
an agent's notes carry one (a .env file, a curl command, a traceback, JSON config, a markdown code block), and
redacting `text` must give `text.replace(secret, "[REDACTED:<kind>]")`. For assignments and URLs the secret is
only the value or the password, so the key, user and host must survive. Other tests import it to prove that no
secret reaches the wire (`from secrets_corpus import SECRET_CORPUS`).

`CLEAN_CORPUS` is ordinary developer prose, code and logs that must come back unchanged.

The secrets are generated at import from a fixed seed instead of being written out: the same values every run,
and no string in the repository that a secret scanner (or a person) could mistake for a leaked credential.
"""

from __future__ import annotations

import base64
import json
import random
import string

_rng = random.Random(0x5EC12E7)

ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits
B64 = ALNUM + "+/"
B64URL = ALNUM + "-_"
HEX = "0123456789abcdef"


def _rand(n: int, alphabet: str = ALNUM) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


def _strong(n: int, alphabet: str = ALNUM) -> str:
    """Random, with upper case, lower case and a digit, and starting and ending with a letter or digit."""
    assert set(string.ascii_uppercase) & set(alphabet) and set(string.ascii_lowercase) & set(alphabet)
    while True:
        value = _rand(n, alphabet)
        if (
            any(c.isupper() for c in value)
            and any(c.islower() for c in value)
            and any(c.isdigit() for c in value)
            and value[0].isalnum()
            and value[-1].isalnum()
        ):
            return value


def _b64url_json(obj: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj, separators=(",", ":")).encode()).decode().rstrip("=")


def _jwt() -> str:
    header = _b64url_json({"alg": "RS256", "typ": "JWT", "kid": _rand(16, HEX)})
    payload = _b64url_json(
        {"sub": f"user_{_rand(12, HEX)}", "iss": "https://auth.acme.dev/", "iat": 1717750000, "exp": 1717753600}
    )
    return f"{header}.{payload}.{_rand(86, B64URL)}"


def _pem(label: str, size: int = 1190, headers: str = "", newline: str = "\n") -> str:
    body = base64.b64encode(_rng.randbytes(size)).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    head = f"-----BEGIN {label}-----"
    tail = f"-----END {label}-----"
    return newline.join([head, *([headers] if headers else []), *lines, tail])


def _password(n: int = 20) -> str:
    return _strong(n, ALNUM + "!@#%^*_+-")


# One of each shape, named so a failing case says what it was.
OPENAI_LEGACY = "sk-" + _strong(48)
OPENAI_PROJECT = "sk-proj-" + _strong(156, B64URL)
OPENAI_SERVICE = "sk-svcacct-" + _strong(120, B64URL)
ANTHROPIC = "sk-ant-api03-" + _strong(93, B64URL) + "AA"
ANTHROPIC_ADMIN = "sk-ant-admin01-" + _strong(93, B64URL) + "AA"
AWS_ACCESS = "AKIA" + _rand(16, UPPER_DIGITS)
AWS_SESSION_ACCESS = "ASIA" + _rand(16, UPPER_DIGITS)
AWS_SECRET = _strong(40, B64)
GITHUB_PAT_CLASSIC = "ghp_" + _rand(36)
GITHUB_OAUTH = "gho_" + _rand(36)
GITHUB_APP_INSTALL = "ghs_" + _rand(36)
GITHUB_USER_TO_SERVER = "ghu_" + _rand(36)
GITHUB_REFRESH = "ghr_" + _rand(76)
GITHUB_PAT_FINE = "github_pat_" + _rand(22, UPPER_DIGITS) + "_" + _rand(59)
SLACK_BOT = f"xoxb-{_rand(12, string.digits)}-{_rand(13, string.digits)}-{_rand(24)}"
SLACK_USER = f"xoxp-{_rand(12, string.digits)}-{_rand(12, string.digits)}-{_rand(13, string.digits)}-{_rand(32, HEX)}"
SLACK_APP = f"xapp-1-A{_rand(10, UPPER_DIGITS)}-{_rand(13, string.digits)}-{_rand(64, HEX)}"
SLACK_LEGACY = f"xoxs-{_rand(11, string.digits)}-{_rand(11, string.digits)}-{_rand(12, string.digits)}-{_rand(64, HEX)}"
SLACK_WEBHOOK_PATH = f"T{_rand(8, UPPER_DIGITS)}/B{_rand(10, UPPER_DIGITS)}/{_rand(24)}"
GOOGLE = "AIza" + _rand(35, B64URL)
GOOGLE_FIREBASE = "AIza" + _rand(35, B64URL)
JWT_ACCESS = _jwt()
JWT_SESSION = _jwt()
OPAQUE_BEARER = _strong(40)
GOOGLE_OAUTH_BEARER = "ya29.a0" + _strong(120, B64URL)
BARE_BEARER = _strong(32)
BASIC_CREDENTIALS = base64.b64encode(f"deploy:{_password()}".encode()).decode()
RSA_KEY = _pem("RSA PRIVATE KEY")
EC_KEY = _pem("EC PRIVATE KEY", size=121)
OPENSSH_KEY = _pem("OPENSSH PRIVATE KEY", size=399)
PKCS8_ENCRYPTED = _pem("ENCRYPTED PRIVATE KEY", size=1298)
RSA_LEGACY_ENCRYPTED = _pem(
    "RSA PRIVATE KEY", headers=f"Proc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,{_rand(32, HEX).upper()}\n"
)
PKCS8_IN_JSON = _pem("PRIVATE KEY", size=1218, newline="\\n")
PGP_KEY = _pem("PGP PRIVATE KEY BLOCK", size=600, headers="Comment: deploy signing key\n")


def _case(kind: str, secret: str, template: str) -> tuple[str, str, str]:
    assert template.count("{S}") == 1, template
    return kind, secret, template.replace("{S}", secret)


SECRET_CORPUS: list[tuple[str, str, str]] = [
    # --- openai_key
    _case("openai_key", OPENAI_LEGACY, "# .env.local\nOPENAI_API_KEY={S}\nOPENAI_MODEL=gpt-4o-mini\n"),
    _case(
        "openai_key",
        OPENAI_PROJECT,
        "Traceback (most recent call last):\n"
        '  File "summarize.py", line 42, in <module>\n'
        "openai.AuthenticationError: Error code: 401 - {'error': {'message': 'Incorrect API key provided: {S}. "
        "You can find your API key at https://platform.openai.com/account/api-keys.', "
        "'type': 'invalid_request_error', 'code': 'invalid_api_key'}}",
    ),
    _case(
        "openai_key",
        OPENAI_SERVICE,
        '{\n  "provider": "openai",\n  "api_key": "{S}",\n  "timeout_seconds": 30\n}',
    ),
    # --- anthropic_key
    _case(
        "anthropic_key",
        ANTHROPIC,
        "curl https://api.anthropic.com/v1/messages \\\n"
        '  -H "x-api-key: {S}" \\\n'
        '  -H "anthropic-version: 2023-06-01" \\\n'
        '  -d \'{"model": "claude-3-5-sonnet-latest", "max_tokens": 256}\'',
    ),
    _case(
        "anthropic_key",
        ANTHROPIC_ADMIN,
        "2024-06-07T10:15:02Z DEBUG anthropic.client init key={S} model=claude-3-5-haiku retries=2",
    ),
    # --- aws_access_key
    _case(
        "aws_access_key",
        AWS_ACCESS,
        "~/.aws/credentials has:\n[default]\naws_access_key_id = {S}\nregion = eu-west-1\n",
    ),
    _case(
        "aws_access_key",
        AWS_SESSION_ACCESS,
        '$ aws sts assume-role ...\n{\n    "Credentials": {\n        "AccessKeyId": "{S}",\n'
        '        "Expiration": "2024-06-07T11:15:02Z"\n    }\n}',
    ),
    # --- aws_secret_key
    _case("aws_secret_key", AWS_SECRET, "[default]\naws_secret_access_key = {S}\noutput = json\n"),
    _case(
        "aws_secret_key",
        AWS_SECRET,
        "Set the CI secrets, then:\n```sh\nexport AWS_SECRET_ACCESS_KEY={S}\naws s3 ls s3://acme-artifacts/\n```",
    ),
    _case("aws_secret_key", AWS_SECRET, '        "SecretAccessKey": "{S}",\n        "SessionToken": null,'),
    # --- github_token
    _case(
        "github_token",
        GITHUB_PAT_CLASSIC,
        "git remote set-url origin https://{S}@github.com/acme/widgets.git && git push origin fix/retry",
    ),
    _case("github_token", GITHUB_OAUTH, "- `gh auth token` printed `{S}`; used it for the GraphQL query"),
    _case(
        "github_token",
        GITHUB_APP_INSTALL,
        "Cloning https://x-access-token:{S}@github.com/acme/widgets.git into /tmp/build-4821",
    ),
    _case("github_token", GITHUB_USER_TO_SERVER, "DEBUG github: refreshed user token {S} (expires in 8h)"),
    _case("github_token", GITHUB_REFRESH, "refresh_token rotated -> {S}"),
    _case(
        "github_token",
        GITHUB_PAT_FINE,
        "      - name: Publish\n        env:\n          GITHUB_TOKEN: {S}\n        run: gh release create v1.4.0",
    ),
    # --- slack_token
    _case(
        "slack_token",
        SLACK_BOT,
        'from slack_sdk import WebClient\nclient = WebClient(token="{S}")\nclient.chat_postMessage(channel="#deploys")',
    ),
    _case("slack_token", SLACK_USER, "Posting the release notes with the xoxp token {S} to #general"),
    _case("slack_token", SLACK_APP, "# socket mode\nSLACK_APP_TOKEN={S}\nSLACK_SIGNING_SECRET_FILE=/run/secrets/slack"),
    _case("slack_token", SLACK_LEGACY, "legacy workspace token ({S}) still works for files.upload"),
    _case(
        "slack_token",
        SLACK_WEBHOOK_PATH,
        "curl -X POST -H 'Content-type: application/json' --data '{\"text\":\"deploy done\"}' "
        "https://hooks.slack.com/services/{S}",
    ),
    # --- google_api_key
    _case(
        "google_api_key",
        GOOGLE,
        "GET https://maps.googleapis.com/maps/api/geocode/json?address=Berlin&key={S} -> 200 OK (312 ms)",
    ),
    _case(
        "google_api_key",
        GOOGLE_FIREBASE,
        'const firebaseConfig = {\n  apiKey: "{S}",\n  authDomain: "acme-prod.firebaseapp.com",\n};',
    ),
    # --- jwt
    _case(
        "jwt",
        JWT_ACCESS,
        "curl -s https://api.acme.dev/v2/orders \\\n  -H 'Authorization: Bearer {S}' | jq '.items[0]'",
    ),
    _case("jwt", JWT_SESSION, "< HTTP/1.1 200 OK\n< Set-Cookie: session={S}; Path=/; HttpOnly; Secure\n< Vary: Cookie"),
    # --- bearer_token
    _case(
        "bearer_token",
        OPAQUE_BEARER,
        'curl -H "Authorization: Bearer {S}" -H "Accept: application/json" https://api.example.com/v2/items',
    ),
    _case(
        "bearer_token",
        GOOGLE_OAUTH_BEARER,
        "GET /v1/me HTTP/1.1\nHost: api.acme.dev\nauthorization: bearer {S}\nAccept: */*\n",
    ),
    _case("bearer_token", BARE_BEARER, "Retried the webhook with bearer {S} after the refresh; got 204."),
    _case("bearer_token", BASIC_CREDENTIALS, "requests.get(url, headers={'Authorization': 'Basic {S}'})"),
    # --- private_key
    _case(
        "private_key",
        RSA_KEY,
        "Found the deploy key in `infra/keys/deploy.pem`:\n```\n{S}\n```\nRotated it and removed the file.",
    ),
    _case("private_key", EC_KEY, "$ cat tls/server.key\n{S}\n$ openssl ec -in tls/server.key -noout -check"),
    _case("private_key", OPENSSH_KEY, "~/.ssh/id_ed25519 on the build box:\n{S}\n(permissions 0600)"),
    _case("private_key", PKCS8_ENCRYPTED, "Step 3 output:\n{S}\nPassphrase is in the team vault."),
    _case("private_key", RSA_LEGACY_ENCRYPTED, "Old format key from 2016:\n{S}\n"),
    _case(
        "private_key",
        PKCS8_IN_JSON,
        '{\n  "type": "service_account",\n  "project_id": "acme-prod",\n'
        '  "private_key": "{S}\\n",\n  "client_email": "reporting@acme-prod.iam.gserviceaccount.com"\n}',
    ),
    _case("private_key", PGP_KEY, "gpg --export-secret-keys --armor releases@acme.dev\n{S}\n"),
    # --- password_assignment (only the value goes; the key stays)
    _case("password_assignment", _password(), "# .env\nDB_HOST=db.internal\nDB_PASSWORD={S}\nDB_POOL=10\n"),
    _case(
        "password_assignment",
        _password(),
        "database:\n  host: db.internal\n  user: reporting\n  password: {S}\n  pool_size: 10\n",
    ),
    _case(
        "password_assignment",
        _password(),
        '{"username": "svc-reporting", "password": "{S}", "port": 5432}',
    ),
    _case("password_assignment", _password(), "[client]\nuser = backup\npasswd: {S}\n"),
    _case(
        "password_assignment",
        _password(16),
        "ODBC: Driver={PostgreSQL Unicode};Server=db.internal;Uid=app;Pwd={S};Database=shop",
    ),
    _case(
        "password_assignment",
        _strong(40),
        "POST /oauth/token\ngrant_type=client_credentials&client_id=reporting-svc&client_secret={S}&scope=read",
    ),
    _case("password_assignment", _strong(32), "provider:\n  name: weatherapi\n  api_key: {S}\n"),
    _case("password_assignment", _strong(32), "mapbox apikey: {S} (set in config/maps.yml)"),
    _case("password_assignment", _rand(32, HEX), "GET /export?token={S}&format=csv -> 200, 14 MB"),
    _case("password_assignment", _strong(48), '{"access_token" : "{S}", "token_type": "bearer", "expires_in": 3600}'),
    _case("password_assignment", _password(), "mysql --user=app --password={S} -h db.internal shop < dump.sql"),
    _case(
        "password_assignment",
        _password(),
        'conn = psycopg.connect(host="db.internal", user="app", password="{S}", dbname="shop")',
    ),
    _case("password_assignment", _strong(50, ALNUM + "!@#%^*(-_=+)"), "# settings/prod.py\nSECRET_KEY = '{S}'\n"),
    _case("password_assignment", "correct horse battery staple 42", 'PASSPHRASE="{S}"\nKEYFILE=/etc/acme/signing.key'),
    _case("password_assignment", _password(), "2024-06-07 10:15:02 INFO login attempt user=bob secret={S} ok=false"),
    # --- connection_string (only the password goes; scheme, user and host stay)
    _case(
        "connection_string",
        _strong(20, ALNUM + "!%^*_+-"),
        "DATABASE_URL=postgres://app:{S}@db.internal:5432/shop?sslmode=require",
    ),
    _case(
        "connection_string",
        _strong(24, ALNUM + "-_~"),
        "sqlalchemy.exc.OperationalError: (psycopg.OperationalError) connection failed "
        "[SQL: postgresql+psycopg://reporting:{S}@10.0.3.7:5432/analytics]",
    ),
    _case("connection_string", _strong(20), "mysqldump from mysql://root:{S}@127.0.0.1:3306/shop took 41s"),
    _case(
        "connection_string",
        _strong(24),
        'MONGO_URI="mongodb+srv://admin:{S}@cluster0.ab1cd.mongodb.net/?retryWrites=true&w=majority"',
    ),
    _case("connection_string", _strong(32), "celery broker: redis://:{S}@cache.internal:6379/0"),
    _case("connection_string", _strong(20), "amqp://guest:{S}@rabbit.internal:5672/%2f refused the connection"),
    _case(
        "connection_string",
        _strong(20),
        "pip install --index-url https://deploy:{S}@nexus.acme.dev/repository/pypi/simple acme-core",
    ),
    _case("connection_string", "p@ss" + _strong(12), "Unencoded at-sign: postgres://app:{S}@db.internal/shop"),
]

KINDS = sorted({kind for kind, _, _ in SECRET_CORPUS})

CLEAN_CORPUS: list[str] = [
    "The password policy requires 12 characters, one digit and one symbol.",
    "Token count for the hot tier is 1532 of 2000 (76.6%); tokens_used=1532 tokens_budget=2000",
    "Asked the secretary to book room 4.12 for the design review.",
    "Fixed the off-by-one in src/tokens.py and tests/unit/test_tokens.py; memd/redact.py untouched.",
    "Commit 9fceb02d0ae598e95dc970b74767f19372d61af8 reverted the change from a1b2c3d.",
    "session_id: 3f2b8c1e-7d4a-4e5b-9c6d-1a2b3c4d5e6f, request 550e8400-e29b-41d4-a716-446655440000",
    "response = client.chat.completions.create(model=model, max_tokens=4096, temperature=0)",
    "def login(username: str, password: str) -> Session:\n    ...",
    'password = os.environ["DB_PASSWORD"]\napi_key = settings.OPENAI_API_KEY\ntoken = get_token()',
    "export OPENAI_API_KEY=$OPENAI_API_KEY\nexport DB_PASSWORD=${DB_PASSWORD}",
    'curl -H "Authorization: Bearer $TOKEN" https://api.example.com/v1/items',
    "Docs say: send `Authorization: Bearer <token>` on every request.",
    "Use a bearer token; the OAuth flow returns token_type=Bearer and expires_in=3600.",
    "pip install scikit-learn==1.5.0 (people call it sk-learn)",
    "Connect to postgres://db.internal:5432/shop as app; the password lives in the vault.",
    "git clone git@github.com:acme/widgets.git && cd widgets",
    "A JWT header starts with eyJ because it is base64 for '{\"'.",
    "PWD=/home/alice/src/memd\nOLDPWD=/home/alice",
    "services:\n  db:\n    environment:\n      POSTGRES_PASSWORD: ${POSTGRES_PASSWORD}\n",
    "token: ********\npassword: ''",
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGm3q9vW0nJ4yK1s8f5t2u7x0z3b6c9e2h5k8m1p4r7 alice@laptop",
    "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBaMQswCQYDVQQGEwJJ\n"
    "-----END CERTIFICATE-----",
    "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE1234567890abcdefghijklmnopqr\n"
    "-----END PUBLIC KEY-----",
    "The deploy key starts with -----BEGIN OPENSSH PRIVATE KEY----- and must stay in the vault.",
    "See https://github.com/acme/widgets/pull/42#issuecomment-1234567 for the review.",
    "The tokenizer is cl100k_base; the token budget for warm is 6000.",
    "A password reset email was sent to alice@example.com at 10:15.",
    "ghp_ means a classic personal access token, github_pat_ a fine-grained one.",
    "AKIA keys are long-lived; ASIA keys come from STS and expire.",
    "Set `password_min_length: 12` and `auth_token_ttl: 3600` in config/security.yml.",
    "| secret | rotated |\n|---|---|\n| db | yes |",
    "xoxb-tokens belong to bots, xoxp-tokens to users.",
    "docker pull ghcr.io/acme/api@sha256:4b825dc642cb6eb9a060e54bf8d69288fbee4904f0c1d2e3a4b5c6d7e8f90a1b",
    "http://localhost:8080/callback?email=foo@example.com returned 302",
    "The bearer of this note should rerun `make test` before merging.",
    "secret_santa.py picks pairs; secretary.md lists the rota; tokens/ has fixtures.",
    "kwargs: password=password, token=token (passed through unchanged)",
    "Retry-After: 1\nx-request-id: req_8f14e45fceea167a5a36dedd4bea2543",
    "Ran 412 tests in 38.2s: OK (skipped=3)",
    "",
]
