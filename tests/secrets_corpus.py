"""Realistic fake credentials embedded in realistic agent notes, for every kind memd.redact knows, and the
identifiers, hashes and prose that look like them and must survive.

`SECRET_CORPUS` is a list of `(kind, secret, text)`: `text` contains `secret` exactly once, in the kind of place
an agent's notes carry one (a .env file, a curl command, a traceback, JSON config, a markdown code block, a
sentence), and redacting `text` must give `text.replace(secret, "[REDACTED:<kind>]")`. For assignments, URLs and
`user:password` pairs the secret is only the value or the password, so the key, user and host must survive.
Other tests import it to prove that no secret reaches the wire (`from secrets_corpus import SECRET_CORPUS`).

`LOOKALIKES` is a list of `(category, text)`: near misses (commit hashes, UUIDs, digests, base64 of words, paths,
versions, dates, note ids, vendor prefixes in prose, `-u uid:gid`, "the password is stored in ...") that must
come back unchanged: identifiers and hashes in notes matter to agents, so a false positive has a cost.
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

OPENAI_HEX_STYLE = "sk-" + _rand(32, HEX)  # the same "sk-" convention with a hex body (DeepSeek, Moonshot, ...)
OPENROUTER = "sk-or-v1-" + _rand(64, HEX)
STRIPE_SECRET = "sk_live_51" + _strong(97)
STRIPE_TEST = "sk_test_" + _strong(24)
STRIPE_RESTRICTED = "rk_live_" + _strong(24)
STRIPE_WEBHOOK = "whsec_" + _strong(32)
GITLAB_PAT = "glpat-" + _strong(20, B64URL)
GITLAB_RUNNER_REGISTRATION = "GR1348941" + _strong(20, B64URL)
GITLAB_RUNNER = "glrt-" + _strong(20, B64URL)
GITLAB_DEPLOY = "gldt-" + _strong(20, B64URL)
HUGGINGFACE = "hf_" + _rand(34, string.ascii_letters)  # letters only
HUGGINGFACE_ORG = "api_org_" + _rand(34, string.ascii_letters)
NPM = "npm_" + _strong(36)
NPM_LEGACY_UUID = "-".join(_rand(n, HEX) for n in (8, 4, 4, 4, 12))
SENDGRID = "SG." + _strong(22, B64URL) + "." + _strong(43, B64URL)
GOOGLE_CLIENT_SECRET = "GOCSPX-" + _strong(28, B64URL)
GOOGLE_REFRESH = "1//0" + _strong(100, B64URL)
TELEGRAM_BOT_ID = _rand(10, string.digits).lstrip("0") or "7"
TELEGRAM_SECRET = "AA" + _strong(33, B64URL)  # the bot id before the colon is public
AZURE_ACCOUNT_KEY = _strong(86, B64) + "=="
AZURE_SHARED_ACCESS_KEY = _strong(43, B64) + "="
AZURE_SAS_SIG = _strong(43) + "%3D"
TWILIO_ACCOUNT_SID = "AC" + _rand(32, HEX)
TWILIO_AUTH_TOKEN = _rand(32, HEX)
TWILIO_API_KEY = "SK" + _rand(32, HEX)
MAILGUN = "key-" + _rand(32, HEX)
MAILGUN_SIGNING = f"{_rand(32, HEX)}-{_rand(8, HEX)}-{_rand(8, HEX)}"
MAILCHIMP = _rand(32, HEX) + "-us21"
# A Discord bot token starts with the base64 of the bot's numeric id.
DISCORD_BOT_ID = base64.b64encode(("1" + _rand(18, string.digits)).encode()).decode().rstrip("=")
DISCORD_BOT = f"{DISCORD_BOT_ID}.{_strong(6, B64URL)}.{_strong(38, B64URL)}"
DISCORD_WEBHOOK_TOKEN = _strong(68, B64URL)
SHOPIFY = "shpat_" + _rand(32, HEX)
DIGITALOCEAN = "dop_v1_" + _rand(64, HEX)
DATABRICKS = "dapi" + _rand(32, HEX)
PYPI = "pypi-AgEIcHlwaS5vcmc" + _strong(160, B64URL)
DOCKER_HUB = "dckr_pat_" + _strong(27, B64URL)
HEROKU = "HRKU-AA" + _strong(58, B64URL)
SQUARE = "sq0atp-" + _strong(22, B64URL)
ARTIFACTORY = "AKCp8" + _strong(68)
ATLASSIAN = "ATATT3xFfGF0" + _strong(180, B64URL)
VAULT = "hvs." + _strong(91, B64URL)
AGE = "AGE-SECRET-KEY-1" + _rand(58, "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L")
SENTRY = "sntryu_" + _rand(64, HEX)
GRAFANA = "glsa_" + _strong(32) + "_" + _rand(8, HEX)
NEWRELIC = "NRAK-" + _rand(27, UPPER_DIGITS)
POSTMAN = f"PMAK-{_rand(24, HEX)}-{_rand(34, HEX)}"
LINEAR = "lin_api_" + _strong(40)
NOTION = "ntn_" + _strong(46)
FIGMA = "figd_" + _strong(40, B64URL)
SUPABASE = "sbp_" + _rand(40, HEX)
REPLICATE = "r8_" + _strong(37)
GROQ = "gsk_" + _strong(52)
XAI = "xai-" + _strong(80)
PERPLEXITY = "pplx-" + _strong(48)
DOPPLER = "dp.pt." + _strong(43)
PULUMI = "pul-" + _rand(40, HEX)
TERRAFORM = _strong(14) + ".atlasv1." + _strong(67, B64URL)
AWS_SECRET_PROSE = _strong(40, B64)
AWS_SECRET_PROSE_2 = _strong(40, B64)
PUTTY_PRIVATE_LINES = "\n".join([*(_rand(64, B64) for _ in range(13)), _rand(24, B64) + "=="])
DOCKER_AUTH = base64.b64encode(f"acme-ci:{_password()}".encode()).decode()


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
        "google_oauth",
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
    # --- openai_key: the "sk-" convention also carries hex bodies (DeepSeek, Moonshot, ...)
    _case("openai_key", OPENAI_HEX_STYLE, "DEEPSEEK_API_KEY={S} # from platform.deepseek.com"),
    _case("openrouter_key", OPENROUTER, 'client = OpenAI(base_url="https://openrouter.ai/api/v1", api_key="{S}")'),
    # --- aws_secret_key written in prose, with no key name to anchor it
    _case("aws_secret_key", AWS_SECRET_PROSE, "The AWS secret key is {S} (rotated Monday, ask Dana for the new one)."),
    _case("aws_secret_key", AWS_SECRET_PROSE_2, "aws sandbox creds -- secret: {S}; region us-east-2"),
    # --- stripe_key
    _case("stripe_key", STRIPE_SECRET, "# payments/.env\nSTRIPE_SECRET_KEY={S}\nSTRIPE_CURRENCY=eur\n"),
    _case("stripe_key", STRIPE_TEST, "stripe.api_key = '{S}'  # test mode"),
    _case("stripe_key", STRIPE_RESTRICTED, "curl https://api.stripe.com/v1/charges -u {S}: -d limit=3"),
    _case("stripe_key", STRIPE_WEBHOOK, "stripe listen: Ready! Your webhook signing secret is {S} (^C to quit)"),
    # --- gitlab_token
    _case("gitlab_token", GITLAB_PAT, "git clone https://oauth2:{S}@gitlab.com/acme/infra.git /tmp/infra"),
    _case(
        "gitlab_token",
        GITLAB_RUNNER_REGISTRATION,
        "gitlab-runner register --url https://gitlab.acme.dev --registration-token {S} --executor docker",
    ),
    _case("gitlab_token", GITLAB_RUNNER, '[[runners]]\n  name = "build-01"\n  token = "{S}"\n  executor = "docker"'),
    _case("gitlab_token", GITLAB_DEPLOY, "deploy token for the registry pull: {S} (read_registry only)"),
    # --- huggingface_token
    _case("huggingface_token", HUGGINGFACE, "huggingface-cli login --token {S} --add-to-git-credential"),
    _case("huggingface_token", HUGGINGFACE_ORG, "org token {S} works for the gated model download"),
    # --- npm_token
    _case("npm_token", NPM, "# ~/.npmrc\n//registry.npmjs.org/:_authToken={S}\nsave-exact=true\n"),
    _case("npm_token", NPM_LEGACY_UUID, "old-style .npmrc line: //registry.npmjs.org/:_authToken={S}"),
    # --- sendgrid_key
    _case("sendgrid_key", SENDGRID, "SendGrid answered 401 for {S}: the key was revoked yesterday"),
    # --- google_oauth
    _case(
        "google_oauth",
        GOOGLE_CLIENT_SECRET,
        '{"installed": {"client_id": "481516234-k8s7q2.apps.googleusercontent.com", "client_secret": "{S}", '
        '"redirect_uris": ["http://localhost"]}}',
    ),
    _case("google_oauth", GOOGLE_REFRESH, "gcloud printed the refresh token {S} -- stored it in the keyring"),
    # --- telegram_token
    _case(
        "telegram_token",
        TELEGRAM_SECRET,
        f'curl -s "https://api.telegram.org/bot{TELEGRAM_BOT_ID}:{{S}}/sendMessage" '
        '-d chat_id=-1001234567890 -d text="deploy ok"',
    ),
    _case("telegram_token", TELEGRAM_SECRET, f"BotFather gave us {TELEGRAM_BOT_ID}:{{S}} for @acme_alerts_bot"),
    # --- azure_key (the value only: account name and endpoint stay)
    _case(
        "azure_key",
        AZURE_ACCOUNT_KEY,
        "AZURE_STORAGE_CONNECTION_STRING=DefaultEndpointsProtocol=https;AccountName=acmelogs;"
        "AccountKey={S};EndpointSuffix=core.windows.net",
    ),
    _case(
        "azure_key",
        AZURE_SHARED_ACCESS_KEY,
        "Endpoint=sb://acme-events.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;"
        "SharedAccessKey={S}",
    ),
    _case(
        "azure_key",
        AZURE_SAS_SIG,
        "GET https://acmelogs.blob.core.windows.net/logs/app.log?sv=2022-11-02&ss=b&srt=o&sp=r"
        "&se=2024-06-08T00:00:00Z&sig={S} -> 403",
    ),
    # --- basic_auth: `user:password` handed to a client (the user stays)
    _case("basic_auth", _password(), "curl -u admin:{S} https://jenkins.internal/api/json?pretty=true"),
    _case("basic_auth", _password(), 'curl -sS --user "deploy:{S}" -X POST https://registry.acme.dev/v2/token'),
    _case("basic_auth", _password(), "http -a alice:{S} POST https://api.acme.dev/login"),
    _case("basic_auth", DOCKER_AUTH, '{"auths": {"registry.acme.dev": {"auth": "{S}"}}}'),
    _case("basic_auth", _password(), "# ~/.netrc\nmachine api.acme.dev login svc-deploy password {S}\n"),
    # --- secret_phrase: a secret given in a sentence
    _case("secret_phrase", _password(12), "Staging login works: the password is {S} and the user is admin."),
    _case("secret_phrase", _password(14), "The admin password for the staging db is {S}."),
    _case("secret_phrase", "tarmac frisbee velvet 9", "Vault unseal note: the passphrase is '{S}' (two shares)."),
    _case("secret_phrase", "hunter2", "Password was {S}, rotated after the demo."),
    _case(
        "secret_phrase",
        "-".join(_rand(n, HEX) for n in (8, 4, 4, 4, 12)),
        "Heroku API key is {S} (from `heroku auth:token`).",
    ),
    _case("secret_phrase", _strong(32), "The API token was {S}; revoked it after the test."),
    # --- twilio_key
    _case("twilio_key", TWILIO_API_KEY, "TWILIO_API_KEY={S}\nTWILIO_REGION=ie1"),
    _case(
        "twilio_key",
        TWILIO_AUTH_TOKEN,
        f"curl -X POST https://api.twilio.com/2010-04-01/Accounts/{TWILIO_ACCOUNT_SID}/Messages.json "
        f"-u {TWILIO_ACCOUNT_SID}:{{S}} --data-urlencode 'Body=hi'",
    ),
    _case("twilio_key", TWILIO_AUTH_TOKEN, f'client = Client("{TWILIO_ACCOUNT_SID}", "{{S}}")'),
    # --- mailgun_key
    _case(
        "mailgun_key",
        MAILGUN,
        "curl -s --user 'api:{S}' https://api.mailgun.net/v3/mg.acme.dev/messages -F to=ops@acme.dev",
    ),
    _case("mailgun_key", MAILGUN_SIGNING, "Mailgun webhook signing: {S} (Sending > Webhooks)"),
    # --- mailchimp_key
    _case("mailchimp_key", MAILCHIMP, "mailchimp3 MailChimp(mc_api='{S}', mc_user='newsletter')"),
    # --- discord_token
    _case("discord_token", DISCORD_BOT, "bot.run('{S}')  # TODO move to env"),
    _case(
        "discord_token",
        DISCORD_WEBHOOK_TOKEN,
        "alerts go to https://discord.com/api/webhooks/1187654321098765432/{S} (channel #ops)",
    ),
    # --- vendor tokens recognised by their prefix
    _case("shopify_token", SHOPIFY, "X-Shopify-Access-Token: {S}\nContent-Type: application/json"),
    _case("digitalocean_token", DIGITALOCEAN, "doctl auth init --context acme -t {S}"),
    _case("databricks_token", DATABRICKS, "databricks configure: host https://adb-42.azuredatabricks.net, pat {S}"),
    _case("pypi_token", PYPI, "# ~/.pypirc\n[pypi]\nusername = __token__\npassword = {S}\n"),
    _case("pypi_token", PYPI, "TWINE_USERNAME=__token__ TWINE_PASSWORD={S} twine upload dist/*"),
    _case("docker_token", DOCKER_HUB, "echo {S} | docker login -u acmeci --password-stdin"),
    _case("heroku_key", HEROKU, "export HEROKU_API_KEY={S}\nheroku apps:info -a acme-api"),
    _case("square_token", SQUARE, "Square sandbox access token {S} for the POS tests"),
    _case("artifactory_token", ARTIFACTORY, "jfrog rt c --url https://acme.jfrog.io --access-token {S}"),
    _case("atlassian_token", ATLASSIAN, "curl -u me@acme.dev:{S} https://acme.atlassian.net/rest/api/3/myself"),
    _case("vault_token", VAULT, "vault login printed token {S} with policies [default deploy]"),
    _case("sentry_token", SENTRY, "sentry-cli --auth-token {S} releases new 1.4.0"),
    _case("grafana_token", GRAFANA, "Grafana service account token: {S}"),
    _case("newrelic_key", NEWRELIC, "NEW_RELIC_USER_KEY: {S}"),
    _case("postman_key", POSTMAN, "postman api key {S} (workspace export)"),
    _case("linear_key", LINEAR, 'headers = {"Authorization": "{S}"}  # Linear GraphQL'),
    _case("notion_token", NOTION, "Notion integration: {S} shared with the Roadmap page"),
    _case("figma_token", FIGMA, "curl -H 'X-Figma-Token: {S}' https://api.figma.com/v1/files/abc"),
    _case("supabase_token", SUPABASE, "supabase login --token {S}"),
    _case("replicate_token", REPLICATE, "REPLICATE_API_TOKEN={S} python run_sdxl.py"),
    _case("groq_key", GROQ, "Groq key {S} hit the rate limit at 30 rpm"),
    _case("xai_key", XAI, "xai_client = Client(api_key='{S}')"),
    _case("perplexity_key", PERPLEXITY, "PPLX: {S}"),
    _case("doppler_token", DOPPLER, "doppler configure set token {S} --scope /srv/api"),
    _case("pulumi_token", PULUMI, "PULUMI_ACCESS_TOKEN={S} pulumi up --stack prod"),
    _case("terraform_token", TERRAFORM, 'credentials "app.terraform.io" {\n  token = "{S}"\n}'),
    # --- private_key beyond PEM
    _case("private_key", AGE, "# created: 2024-06-07T10:15:02Z\n# public key: age1qyqszqgpqyqszqgpqyqs\n{S}\n"),
    _case(
        "private_key",
        PUTTY_PRIVATE_LINES,
        "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: build-box\nPublic-Lines: 2\n"
        "AAAAC3NzaC1lZDI1NTE5AAAAIGm3q9vW0nJ4yK1s8f5t2u7x0z3b6c9e2h5k8m1p\nPrivate-Lines: 14\n{S}\nPrivate-MAC: "
        "9f3c2b1a0e",
    ),
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


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# Near misses that must survive, by what they are. Identifiers and hashes in notes matter to agents.
LOOKALIKES: list[tuple[str, str]] = [
    # git commit hashes
    ("commit_hash", "Commit 9fceb02d0ae598e95dc970b74767f19372d61af8 (short 9fceb02) reverted a1b2c3d."),
    ("commit_hash", "HEAD is now at e55fd7e Tests: one module-scoped daemon helper"),
    ("commit_hash", "git rev-parse HEAD -> 196166d0c3a1f4e2b8d7c6a5f4e3d2c1b0a9f8e7; pre_commit 9c1e4b7d"),
    ("commit_hash", '"pre_commit": "5d41402abc4b2a76b9719d911017c592ae4f2c3d", "post_commit": "4b7d…"'),
    # UUIDs and other generated ids
    ("uuid", "request 550e8400-e29b-41d4-a716-446655440000 failed; retried as 6ba7b810-9dad-11d1-80b4-00c04fd430c8"),
    ("uuid", "trace_id=3F2B8C1E-7D4A-4E5B-9C6D-1A2B3C4D5E6F span=00f067aa0ba902b7"),
    ("uuid", "x-request-id: 01HZX3K8Q9V7W2M4N6P8R0T2Y4 (ULID); req_8f14e45fceea167a5a36dedd4bea2543"),
    ("uuid", "chatcmpl-9XyzAbC123dEf456GhI789jKl, file-4Qd8Lk2Vb9Xw3Ez7Tr5Yu1Io, asst_abc123DEF456ghi789"),
    (
        "uuid",
        "pod api-7d9f8b6c5d-x2k4p restarted; container "
        "3c9f8e2a1b4d6f0e8c7a5b3d1f9e7c5a3b1d9f7e5c3a1b9d7f5e3c1a9b7d5f3e",
    ),
    # digests
    (
        "digest",
        "sha256sum: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  dist/memd-0.9.3.tar.gz",
    ),
    ("digest", "docker pull ghcr.io/acme/api@sha256:4b825dc642cb6eb9a060e54bf8d69288fbee4904f0c1d2e3a4b5c6d7e8f90a1b"),
    (
        "digest",
        '"integrity": "sha512-' + _b64("x" * 20 + "lockfile digest of left-pad 1.3.0, not a key") + '"',
    ),
    ("digest", 'md5 d41d8cd98f00b204e9800998ecf8427e, ETag "9b2cf535f27731c974343645a3985328"'),
    # base64 of ordinary words and data
    ("base64", f"echo {_b64('hello world')} | base64 -d"),
    ("base64", f"the fixture body is {_b64('The quick brown fox jumps over the lazy dog')} (pangram)"),
    ("base64", f'"next_cursor": "{_b64("user:U0G9WFXNZ")}", "has_more": true'),
    ("base64", f"A JWT header alone: {_b64url_json({'alg': 'HS256', 'typ': 'JWT'})} (no payload, no signature)"),
    (
        "base64",
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGm3q9vW0nJ4yK1s8f5t2u7x0z3b6c9e2h5k8m1p4r7 alice@laptop",
    ),
    # file paths
    ("path", "Edited /home/alice/src/memd/tests/unit/test_redact.py and memd/redact.py"),
    ("path", r"pip wrote C:\Users\alice\AppData\Local\Temp\pip-build-env-x8Kq2Lm9Nw\overlay"),
    ("path", "aws s3 cp notes.md s3://acme-ci/Build/2024/06/07/ReleaseNotesV14Final.md --sse"),
    ("path", "PWD=/home/alice/src/memd; config at ~/.config/memd/config.toml; keys in ~/.ssh/id_ed25519"),
    # version strings
    ("version", "memd 0.9.3 on Python 3.11.7; openai==1.40.0; node v20.11.1; v1.4.0-rc.2+build.20240607"),
    ("version", "Requires: tiktoken>=0.12,<1 and setuptools>=77; image acme/api:2024.06.07-3f2a9c1"),
    # dates and times
    ("date", "2026-11-30T10:15:00+00:00 checkpoint; next at 2024-06-07T10:15:02.123456Z"),
    ("date", "cron 0 */6 * * *; window 10:15:30-10:45:00; ratio 16:9; uptime 3d 04:12:55"),
    # memd's own ids
    ("note_id", "compressed n-20261130094232-1ca0a3 and n-20261130094305-7f3e9b into ckpt-20261130-101500-3f2a"),
    ("note_id", "decision d-20261130094300-ab12cd superseded d-20261129081500-00ff11"),
    # cloud identifiers that are not secrets
    ("cloud_id", "arn:aws:iam::123456789012:role/deploy-ci assumed; account 123456789012, region eu-west-1"),
    ("cloud_id", "Twilio account SID AC3f2b8c1e7d4a4e5b9c6d1a2b3c4d5e6f (not secret; the auth token is)"),
    ("cloud_id", "OAuth client 481516234-k8s7q2.apps.googleusercontent.com; Slack channel C024BE91L user U024BE7LH"),
    ("cloud_id", "Stripe publishable key pk_live_51H8xYzAbCdEfGhIjKlMnOpQr is public by design"),
    ("cloud_id", "AccountName=acmelogs;EndpointSuffix=core.windows.net (the key comes from Key Vault)"),
    # vendor prefixes named in prose or code
    ("prefix_prose", "sk_live_ and rk_live_ keys stay server-side; glpat- tokens expire after a year"),
    ("prefix_prose", "hf_hub_download(repo_id='acme/model'); npm_config_cache=/tmp/npm; SG.com office"),
    ("prefix_prose", "dapi_version=2; the HRKU- prefix; xai-sdk 1.0; r8_ and gsk_ prefixes; dckr_pat_ scopes"),
    ("prefix_prose", "Use the `AccountKey=<your-key>` form; pass &sig= only in SAS URLs; key-value store"),
    ("prefix_prose", "ATATT3 means Atlassian; hvs. means Vault; AGE-SECRET-KEY-1 starts an age key"),
    # user:group, ports and other colon pairs
    ("colon_pair", "docker run -u 1000:1000 -v $PWD:/src acme/build; docker exec -u root:root api sh"),
    ("colon_pair", "git push -u origin main:main && chown -R app:app /srv/app"),
    ("colon_pair", 'curl -u "$USER:$TOKEN" https://api.acme.dev/v1/me; curl -u admin https://jenkins.internal/'),
    ("colon_pair", '"https://url:8000";@something else, user@host:22, git@github.com:acme/w.git'),
    ("colon_pair", "listening on localhost:8080 and [fe80::1ff:fe23:4567:890a]:9000; bot 1234567890:short"),
    # sentences that talk about secrets without giving one
    ("secret_prose", "The password is stored in the vault; the token is valid for 3600 seconds."),
    ("secret_prose", "The secret is to keep the hot tier small. The password is at least 12 characters."),
    ("secret_prose", "The API key is in 1Password under 'OpenAI prod'. The token count is 1532."),
    ("secret_prose", "The tokenizer is cl100k_base; the encoding for tokens is o200k_base."),
    ("secret_prose", "The secret key is `DJANGO_SECRET_KEY` (env) and the password is `None` in tests."),
    ("secret_prose", "Password was reset by alice@example.com; the token was revoked at 10:15."),
]
