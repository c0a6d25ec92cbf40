"""The curation secret scrubber on planted secrets and on ordinary text.

A seeded generator plants secrets of many kinds (random values in each kind's real shape,
no hand-written literals) into realistic terminal sessions, config files shown by ``cat``,
diffs, source files, HTTP exchanges, JSON tool results and web pages. A secret counts as
caught when no 8-character piece of its value (or the whole value, if shorter) survives.
Ordinary text (the synthetic collector's seven domains, generated lines full of hashes,
ids and the word "password" in code, and Python's own documentation) must keep fewer than
1 line in 1,000 unchanged. ``benchmarks/scrub.py`` reuses these generators.
"""

from __future__ import annotations

import base64
import json
import random
import string
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from pipelines.curate.scrub import KINDS, placeholder, rules, scrub_text, scrub_transition, secret_rows

SECRET_KINDS = tuple(k for k in KINDS if k != "email")  # an address is personal data, redacted on purpose
ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"
USERS = ["admin", "root", "deploy", "app", "svc_backup", "ci-bot", "alice", "j.smith", "postgres", "etl"]
HOSTS = ["db.internal", "10.0.3.17", "api.acme.io", "staging-db-02", "mq.prod.local", "git.example.org", "172.16.4.20"]
DBS = ["shop", "orders", "analytics", "users_prod", "wiki", "billing"]
WORDS = [
    "alpha",
    "bravo",
    "cedar",
    "delta",
    "ember",
    "falcon",
    "granite",
    "harbor",
    "indigo",
    "juniper",
    "kestrel",
    "lumen",
    "maple",
    "nectar",
    "onyx",
    "prairie",
    "quartz",
    "raven",
    "summit",
    "tundra",
]


def rand(r: random.Random, n: int, chars: str = ALNUM) -> str:
    return "".join(r.choices(chars, k=n))


def b64(r: random.Random, nbytes: int, *, url: bool = False) -> str:
    raw = r.randbytes(nbytes)
    return (base64.urlsafe_b64encode(raw).rstrip(b"=") if url else base64.b64encode(raw)).decode()


def password(r: random.Random) -> str:
    """What people choose: words with digits and a symbol, or a generated string."""
    if r.random() < 0.5:
        return r.choice(WORDS).title() + r.choice(["", "_", "-", "."]) + str(r.randint(10, 9999)) + r.choice("!#%*+^~")
    return rand(r, r.randint(12, 24), ALNUM + "!#%*+^~_-.")


# -- values: one maker per kind -----------------------------------------------------------------
def _jwt(r: random.Random) -> str:
    head = {"alg": r.choice(["HS256", "RS256", "ES256"]), "typ": "JWT"}
    body = {
        "sub": str(r.randint(10**5, 10**9)),
        "iat": r.randint(1_600_000_000, 1_800_000_000),
        "scope": r.choice(["read", "admin"]),
    }
    enc = [base64.urlsafe_b64encode(json.dumps(x).encode()).rstrip(b"=").decode() for x in (head, body)]
    return ".".join([*enc, b64(r, 32, url=True)])


def _private_key(r: random.Random) -> str:
    label = r.choice(
        [
            "RSA PRIVATE KEY",
            "EC PRIVATE KEY",
            "OPENSSH PRIVATE KEY",
            "PRIVATE KEY",
            "ENCRYPTED PRIVATE KEY",
            "PGP PRIVATE KEY BLOCK",
            "DSA PRIVATE KEY",
        ]
    )
    body = b64(r, r.choice([121, 240, 600, 1190]))
    width = 70 if "OPENSSH" in label else 64
    lines = [body[i : i + width] for i in range(0, len(body), width)]
    if label.startswith("PGP"):
        lines = ["Version: GnuPG v2", "", *lines, "=" + b64(r, 3)]
    return f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----"


VALUES: dict[str, Callable[[random.Random], str]] = {
    "mysql_password": password,
    "sshpass_password": password,
    "curl_password": password,
    "password_line": password,
    "secret_keyword": lambda r: rand(r, r.randint(24, 48)),
    "export_token": lambda r: rand(r, r.randint(24, 40), ALNUM + "_-"),
    "aws_secret_key": lambda r: rand(r, 40, ALNUM + "+/"),
    "aws_key": lambda r: r.choice(["AKIA", "ASIA"]) + rand(r, 16, string.ascii_uppercase + string.digits),
    "bearer_token": lambda r: rand(r, r.randint(32, 64), ALNUM + "-._~"),
    "basic_auth": lambda r: base64.b64encode(f"{r.choice(USERS)}:{password(r)}".encode()).decode(),
    "hf_token": lambda r: "hf_" + rand(r, 34, string.ascii_letters),
    "github_token": lambda r: r.choice(["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]) + rand(r, 36),
    "github_pat": lambda r: "github_pat_" + rand(r, 22) + "_" + rand(r, 59),
    "gitlab_token": lambda r: "glpat-" + rand(r, 20, ALNUM + "_-"),
    "private_key": _private_key,
    "jwt": _jwt,
    "openai_key": lambda r: r.choice(["sk-proj-", "sk-", "sk-svcacct-"]) + rand(r, 20) + "T3BlbkFJ" + rand(r, 20),
    "anthropic_key": lambda r: "sk-ant-api03-" + rand(r, 93, ALNUM + "_-") + "AA",
    "slack_token": lambda r: (
        f"{r.choice(['xoxb', 'xoxp'])}-{r.randint(10**10, 10**13)}-{r.randint(10**10, 10**13)}-"
        + rand(r, 24, string.ascii_lowercase + string.digits)
    ),
    "stripe_key": lambda r: r.choice(["sk_live_", "rk_live_"]) + rand(r, r.choice([24, 99])),
    "google_api_key": lambda r: "AIza" + rand(r, 35, ALNUM + "_-"),
    "npm_token": lambda r: "npm_" + rand(r, 36),
    "pypi_token": lambda r: "pypi-AgEIcHlwaS5vcmc" + rand(r, 120, ALNUM + "_-"),
    "url_credentials": lambda r: rand(r, r.randint(10, 20)),
    "db_connection": password,
    "azure_storage_key": lambda r: b64(r, 64),
    "twilio_key": lambda r: "SK" + rand(r, 32, HEX),
    "sendgrid_key": lambda r: "SG." + rand(r, 22, ALNUM + "_-") + "." + rand(r, 43, ALNUM + "_-"),
    "mailgun_key": lambda r: "key-" + rand(r, 32, HEX),
    "discord_token": lambda r: r.choice("MNO") + rand(r, 23) + "." + rand(r, 6, ALNUM + "_-") + "." + rand(r, 27, ALNUM + "_-"),
    "telegram_token": lambda r: f"{r.randint(10**8, 10**10 - 1)}:AA" + rand(r, 33, ALNUM + "_-"),
}


# -- where each kind shows up: (context, template); {v} is the value ---------------------------
# context: cmd (a shell command), conf (a line of a file), http (a header), out (printed output)
def _forms(r: random.Random) -> dict[str, list[tuple[str, str]]]:
    u, h, d = r.choice(USERS), r.choice(HOSTS), r.choice(DBS)
    return {
        "mysql_password": [
            ("cmd", f"mysql -u {u} -p{{v}} -h {h} {d}"),
            ("cmd", f"mysql --user={u} --password={{v}} {d} -e 'SELECT COUNT(*) FROM orders'"),
            ("cmd", f"mysqldump -u {u} -p'{{v}}' --single-transaction {d} > /tmp/{d}.sql"),
            ("cmd", f'mysqladmin -u{u} -p"{{v}}" -h {h} status'),
        ],
        "sshpass_password": [
            ("cmd", f"sshpass -p '{{v}}' ssh -o StrictHostKeyChecking=no {u}@{h} uptime"),
            ("cmd", f"sshpass -p{{v}} scp backup.tar.gz {u}@{h}:/srv/backups/"),
            ("cmd", f"sshpass -p {{v}} rsync -av ./dist/ {u}@{h}:/var/www/"),
        ],
        "curl_password": [
            ("cmd", f"curl -s -u {u}:{{v}} https://{h}/api/v1/status"),
            ("cmd", f"curl --user '{u}:{{v}}' -X POST -d @payload.json https://{h}/hooks"),
            ("cmd", f"wget --user={u} --password={{v}} https://{h}/files/report.csv"),
        ],
        "password_line": [
            ("conf", "DB_PASSWORD={v}"),
            ("conf", "  password: {v}"),
            ("conf", '  password: "{v}"'),
            ("conf", '    "password": "{v}",'),
            ("conf", "password = {v}"),
            ("out", "PASSWORD: {v}"),
            ("conf", "passwd={v}"),
            ("conf", "db_pwd = {v}"),
            ("conf", "spring.datasource.password={v}"),
            ("conf", "$db_password = '{v}';"),
            ("conf", "        'PASSWORD': '{v}',"),
            ("out", "Your new password is: {v}"),
            ("conf", "MYSQL_ROOT_PASSWORD: {v}"),
            ("cmd", f"PGPASSWORD={{v}} psql -h {h} -U {u} {d}"),
            ("cmd", f"MYSQL_PWD='{{v}}' mysql -u {u} {d}"),
        ],
        "secret_keyword": [
            ("conf", "api_key: {v}"),
            ("conf", "API_KEY={v}"),
            ("conf", '  "api_key": "{v}",'),
            ("conf", 'client_secret = "{v}"'),
            ("conf", "SECRET_KEY = '{v}'"),
            ("conf", "token: {v}"),
            ("conf", "auth_token={v}"),
            ("conf", '{{"accessToken":"{v}","expiresIn":3600}}'),
            ("conf", "  webhook_secret: {v}"),
            ("http", "X-Api-Key: {v}"),
            ("http", "Private-Token: {v}"),
            ("conf", 'config.secret = "{v}"'),
        ],
        "export_token": [
            ("cmd", "export SERVICE_TOKEN={v}"),
            ("cmd", 'export X_TOKEN="{v}"'),
            ("cmd", "export CI_JOB_TOKEN={v}"),
            ("cmd", "docker run -e API_TOKEN={v} -p 8080:8080 app:latest"),
            ("cmd", "export VAULT_TOKEN='{v}'"),
        ],
        "aws_secret_key": [
            ("conf", "aws_secret_access_key = {v}"),
            ("conf", "AWS_SECRET_ACCESS_KEY={v}"),
            ("out", '        "SecretAccessKey": "{v}",'),
            ("cmd", "aws configure set aws_secret_access_key {v}"),
            ("cmd", "export AWS_SECRET_ACCESS_KEY={v}"),
        ],
        "aws_key": [
            ("conf", "aws_access_key_id = {v}"),
            ("cmd", "export AWS_ACCESS_KEY_ID={v}"),
            ("out", '        "AccessKeyId": "{v}",'),
            ("out", "{v}"),
        ],
        "bearer_token": [
            ("http", "Authorization: Bearer {v}"),
            ("cmd", f'curl -H "Authorization: Bearer {{v}}" https://{h}/v2/me'),
            ("conf", '  "headers": {{"Authorization": "Bearer {v}"}},'),
            ("http", "> authorization: Bearer {v}"),
        ],
        "basic_auth": [
            ("http", "Authorization: Basic {v}"),
            ("cmd", f"curl -H 'Authorization: Basic {{v}}' https://{h}/"),
            ("http", "Proxy-Authorization: Basic {v}"),
        ],
        "hf_token": [
            ("cmd", "huggingface-cli login --token {v}"),
            ("conf", "HF_TOKEN={v}"),
            ("out", "{v}"),
            ("conf", 'login(token="{v}")'),
        ],
        "github_token": [
            ("cmd", "git clone https://x-access-token:{v}@github.com/acme/infra.git"),
            ("conf", "GITHUB_TOKEN={v}"),
            ("out", "{v}"),
            ("cmd", "echo {v} | gh auth login --with-token"),
        ],
        "github_pat": [("conf", "GH_TOKEN={v}"), ("cmd", "gh api user -H 'Authorization: token {v}'"), ("out", "token: {v}")],
        "gitlab_token": [("conf", "GITLAB_TOKEN={v}"), ("http", "PRIVATE-TOKEN: {v}"), ("out", "{v}")],
        "private_key": [("out", "{v}"), ("conf", "{v}")],
        "jwt": [
            ("http", "Authorization: Bearer {v}"),
            ("out", '{{"access_token": "{v}", "token_type": "bearer"}}'),
            ("out", "{v}"),
            ("http", "Cookie: session={v}; theme=dark"),
        ],
        "openai_key": [("conf", "OPENAI_API_KEY={v}"), ("conf", 'client = OpenAI(api_key="{v}")'), ("out", "{v}")],
        "anthropic_key": [("conf", "ANTHROPIC_API_KEY={v}"), ("http", "x-api-key: {v}"), ("out", "{v}")],
        "slack_token": [("conf", "SLACK_BOT_TOKEN={v}"), ("out", "{v}"), ("conf", 'slack_token: "{v}"')],
        "stripe_key": [
            ("conf", "STRIPE_SECRET_KEY={v}"),
            ("cmd", "curl https://api.stripe.com/v1/charges -u {v}:"),
            ("conf", "stripe.api_key = '{v}'"),
        ],
        "google_api_key": [
            ("conf", "GOOGLE_API_KEY={v}"),
            ("out", "https://maps.googleapis.com/maps/api/geocode/json?key={v}"),
            ("conf", '  "apiKey": "{v}",'),
        ],
        "npm_token": [("conf", "//registry.npmjs.org/:_authToken={v}"), ("conf", "NPM_TOKEN={v}"), ("out", "{v}")],
        "pypi_token": [("conf", "password = {v}"), ("cmd", "twine upload -u __token__ -p {v} dist/*"), ("out", "{v}")],
        "url_credentials": [
            ("conf", f"DATABASE_URL=postgres://{u}:{{v}}@{h}:5432/{d}"),
            ("cmd", f"git clone https://{u}:{{v}}@{h}/acme/app.git"),
            ("conf", f"  url: mongodb+srv://{u}:{{v}}@cluster0.{h}/{d}?retryWrites=true"),
            ("conf", f"CELERY_BROKER_URL=amqp://{u}:{{v}}@{h}:5672//"),
            ("out", f"redis://{u}:{{v}}@{h}:6379/0"),
        ],
        "db_connection": [
            ("conf", f"Server=tcp:{h},1433;Database={d};User ID={u};Password={{v}};Encrypt=true;"),
            ("conf", f"jdbc:postgresql://{h}:5432/{d}?user={u}&password={{v}}&ssl=true"),
            ("conf", f'"ConnectionStrings": {{{{"Default": "Host={h};Username={u};Password={{v}}"}}}}'),
        ],
        "azure_storage_key": [
            (
                "conf",
                "AZURE_STORAGE_CONNECTION_STRING=DefaultEndpointsProtocol=https;AccountName=acme"
                "store;AccountKey={v};EndpointSuffix=core.windows.net",
            )
        ],
        "twilio_key": [("conf", "TWILIO_API_KEY={v}"), ("out", "{v}")],
        "sendgrid_key": [("conf", "SENDGRID_API_KEY={v}"), ("out", "{v}")],
        "mailgun_key": [
            ("conf", "MAILGUN_API_KEY={v}"),
            ("cmd", f"curl -s --user 'api:{{v}}' https://api.mailgun.net/v3/{h}/messages"),
        ],
        "discord_token": [("conf", "DISCORD_TOKEN={v}"), ("conf", "client.run('{v}')"), ("out", "{v}")],
        "telegram_token": [("conf", "TELEGRAM_BOT_TOKEN={v}"), ("out", "https://api.telegram.org/bot{v}/getMe")],
    }


# -- ordinary text around them -------------------------------------------------------------------
def ordinary_line(r: random.Random) -> str:
    """A line of ordinary collected text with no secret: hashes, ids, digests, versions, paths,
    long identifiers, and the words password, token and key used in code and prose."""
    w, x = r.choice(WORDS), r.choice(WORDS)
    makers = [
        lambda: f"commit {rand(r, 40, HEX)}",
        lambda: f"{rand(r, 7, HEX)} Fix {w} handling in {x} parser (#{r.randint(100, 9999)})",
        lambda: f"{rand(r, 64, HEX)}  dist/{w}-{r.randint(0, 9)}.{r.randint(0, 20)}.{r.randint(0, 9)}.tar.gz",
        lambda: f"request_id={r.getrandbits(128):032x} trace={rand(r, 16, HEX)} status=200 took={r.randint(1, 900)}ms",
        lambda: f"    id: {rand(r, 8, HEX)}-{rand(r, 4, HEX)}-4{rand(r, 3, HEX)}-a{rand(r, 3, HEX)}-{rand(r, 12, HEX)}",
        lambda: f'ICON = "data:image/png;base64,{b64(r, 48)}"',
        lambda: f"    blob = b'{b64(r, 30)}'",
        lambda: f"FROM python:3.{r.randint(8, 13)}-slim@sha256:{rand(r, 64, HEX)}",
        lambda: f"{w}-{x}=={r.randint(0, 9)}.{r.randint(0, 30)}.{r.randint(0, 9)}",
        lambda: f'    "integrity": "sha512-{b64(r, 64)}",',
        lambda: f"/home/agent/{w}/src/{x}/{w}_{x}_handler.py:{r.randint(1, 900)}: in {x}_{w}",
        lambda: f"{w.upper()}_{x.upper()}_MAX_RETRY_BACKOFF_SECONDS = {r.randint(1, 60)}",
        lambda: f"def check_password(pw: str) -> bool:  # compares against the stored {w} hash",
        lambda: "    user.set_password(password=new_password)",
        lambda: "    password = request.form['password']",
        lambda: f"    token = self.tokenizer.encode({x}_text)",
        lambda: (
            f'    "max_tokens": {r.randint(16, 4096)}, "prompt_tokens": {r.randint(1, 9000)}, '
            f'"completion_tokens": {r.randint(1, 900)},'
        ),
        lambda: f"Enter the password for {w}@{x}: ",
        lambda: f"The password must be at least {r.randint(8, 16)} characters long and contain a digit.",
        lambda: f"    if token is None or token.kind != TokenKind.{x.upper()}:",
        lambda: f"  secretName: {w}-{x}-tls",
        lambda: f"      key: {w}.{x}.enabled",
        lambda: f"    for key, value in sorted({w}.items()):",
        lambda: f"-rw-------  1 agent agent {r.randint(100, 5000)} Nov {r.randint(1, 30)} 10:{r.randint(10, 59)} id_ed25519.pub",
        lambda: f"ssh-ed25519 {b64(r, 51)} agent@{w}",
        lambda: f"PWD=/home/agent/{w}",
        lambda: f'{"  " * r.randint(1, 4)}- textbox "Password" [bid=a{r.randint(1, 400)}]',
        lambda: f'<input type="password" name="password" id="{w}-password" autocomplete="current-password">',
        lambda: f'   {r.randint(1, 300):>4}\t    api_key = os.environ["{w.upper()}_API_KEY"]',
        lambda: f"  token: ${{{{ secrets.{w.upper()}_TOKEN }}}}",
        lambda: (
            f'{{"jsonrpc": "2.0", "id": {r.randint(1, 99)}, "result": '
            f'{{"{w}": "{rand(r, 24, HEX)}", "count": {r.randint(0, 50)}}}}}'
        ),
        lambda: f"{w}_{x}_{r.choice(WORDS)}_{r.choice(WORDS)}_{r.choice(WORDS)}_factory_impl = None",
        lambda: f'  File "/usr/lib/python3.11/{w}/{x}.py", line {r.randint(1, 900)}, in _{w}_{x}',
        lambda: f"docker.io/library/{w}@sha256:{rand(r, 64, HEX)}",
        lambda: f"  {w}: {x}  # see https://docs.example.org/{w}/{x}.html#section-{r.randint(1, 9)}",
        lambda: f"git push origin {w}/{x}-{r.randint(1, 999)}",
        lambda: f"PASSED tests/test_{w}.py::test_{x}_password_reset_token_expires",
        lambda: f"    secret_ref = vault.lookup('{w}/{x}')",
        lambda: f"--password-stdin < ~/.config/{w}/pass",
    ]
    return r.choice(makers)()


def ordinary_lines(seed: int, n: int) -> list[str]:
    r = random.Random(seed)
    return [ordinary_line(r) for _ in range(n)]


def _noise(r: random.Random, n: int) -> str:
    return "\n".join(ordinary_line(r) for _ in range(n))


def _document(r: random.Random, context: str, line: str) -> tuple[str, str]:
    """A realistic observation that holds the line: (domain, text)."""
    prompt = f"{r.choice(USERS)}@{r.choice(['web-1', 'dev', 'runner-7', 'box'])}:~/{r.choice(WORDS)}$ "
    name = r.choice(
        [
            ".env",
            "config/settings.yaml",
            "docker-compose.yml",
            "app.ini",
            "config.json",
            "deploy.sh",
            "settings.py",
            ".npmrc",
            "credentials",
            "application.properties",
        ]
    )
    style = r.choice(["terminal", "swe", "web", "mcp"])
    if context == "cmd":
        body = f"{prompt}{line}\n{_noise(r, r.randint(1, 6))}\n{prompt}"
    elif context == "http":
        body = (
            f"{prompt}curl -sv https://{r.choice(HOSTS)}/api/{r.choice(WORDS)}\n> GET /api/{r.choice(WORDS)} HTTP/1.1\n"
            f"> Host: {r.choice(HOSTS)}\n> User-Agent: curl/8.5.0\n{line}\n> Accept: */*\n>\n< HTTP/1.1 200 OK\n"
            f"< Content-Type: application/json\n<\n{_noise(r, 2)}"
        )
    else:
        body = f"{prompt}cat {name}\n{_noise(r, r.randint(0, 4))}\n{line}\n{_noise(r, r.randint(0, 4))}"
    if style == "terminal":
        return "terminal", body
    if style == "swe":
        if context in ("conf", "out") and r.random() < 0.5:
            head = f"diff --git a/{name} b/{name}\n--- a/{name}\n+++ b/{name}\n@@ -{r.randint(1, 80)},6 +{r.randint(1, 80)},7 @@"
            unchanged = [" " + ln for ln in _noise(r, 3).splitlines()]
            added = ["+" + ln for ln in line.splitlines()]
            return "swe", "\n".join([head, *unchanged, *added, " " + ordinary_line(r)])
        numbered = [f"{i + 1:>6}\t{ln}" for i, ln in enumerate(f"{_noise(r, 3)}\n{line}\n{_noise(r, 2)}".splitlines())]
        return "swe", f"[File: /repo/{name} ({len(numbered)} lines total)]\n" + "\n".join(numbered)
    if style == "web":
        if r.random() < 0.5:
            rows = [
                f'  - heading "{r.choice(WORDS).title()} settings" [level=2]',
                *(f'  - text "{ln}"' for ln in body.splitlines()),
            ]
            return "web", "- main:\n" + "\n".join(rows)
        html = body.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        return "web", f'<div class="log"><h3>{r.choice(WORDS).title()} build output</h3>\n<pre><code>{html}</code></pre></div>'
    result = {"content": [{"type": "text", "text": body}], "isError": False}
    return "mcp", json.dumps({"jsonrpc": "2.0", "id": r.randint(1, 999), "result": result})


@dataclass(frozen=True)
class Planted:
    kind: str  # the generator's kind (what a person would call it), not the scrubber's
    value: str
    domain: str
    text: str


def planted_corpus(seed: int = 0, per_kind: int = 10) -> list[Planted]:
    """``per_kind`` secrets of every kind, each in its own realistic observation."""
    r = random.Random(seed)
    out = []
    for kind in sorted(VALUES):
        for _ in range(per_kind):
            value = VALUES[kind](r)
            context, template = r.choice(_forms(r)[kind])
            line = template.replace("{v}", value).replace("{{", "{").replace("}}", "}")
            domain, text = _document(r, context, line)
            out.append(Planted(kind, value, domain, text))
    return out


def survives(value: str, text: str, n: int = 8) -> bool:
    """Whether any n-character piece of the value (or the whole value, if shorter) is still
    in the text, as is or JSON-escaped; a multi-line value is checked line by line."""
    texts = (text, text.replace("\\n", "\n").replace('\\"', '"'))
    for piece in (p for p in value.splitlines() if p):
        windows = [piece] if len(piece) <= n else [piece[i : i + n] for i in range(len(piece) - n + 1)]
        if any(w in t for w in windows for t in texts):
            return True
    return False


def recall_by_kind(corpus: list[Planted], scrub: Callable[[str], str]) -> dict[str, tuple[int, int]]:
    """kind -> (caught, planted)."""
    caught, total = Counter(), Counter()
    for p in corpus:
        total[p.kind] += 1
        caught[p.kind] += not survives(p.value, scrub(p.text))
    return {k: (caught[k], total[k]) for k in sorted(total)}


def changed_lines(texts: list[str], scrub: Callable[[str], str]) -> tuple[int, int, list[tuple[str, str]]]:
    """(lines changed, lines in all, the changed lines as (before, after))."""
    changed, total, examples = 0, 0, []
    for text in texts:
        before, after = text.splitlines(), scrub(text).splitlines()
        total += len(before)
        for b, a in zip(before, after, strict=True):
            if a != b:
                changed += 1
                examples.append((b, a))
    return changed, total, examples


def synth_texts(n: int = 1400, seed: int = 3) -> list[str]:
    """What the synthetic collector writes, every domain: states, next states, actions."""
    from collectors.synth import Synthesizer

    texts = []
    for t in Synthesizer(seed, max_obs_bytes=4096).transitions(n):
        texts += [t.next_state.text, t.action.canonical, t.instruction or ""]
        if t.step == 0:
            texts.append(t.state.text)
    return texts


def pydoc_texts() -> list[str]:
    from collectors.search.corpus import pydoc_corpus

    return [d.text for d in pydoc_corpus()]


def _scrub(text: str) -> str:
    return scrub_text(text, SECRET_KINDS)[0]


# -- the tests -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus() -> list[Planted]:
    return planted_corpus(seed=0, per_kind=10)


def test_the_planted_corpus_is_big_and_varied(corpus):
    assert len(corpus) >= 300 and len({p.kind for p in corpus}) >= 20
    assert {p.domain for p in corpus} == {"terminal", "swe", "web", "mcp"}
    assert all(p.value in p.text or "\\n" in json.dumps(p.value) for p in corpus if p.domain != "web")


def test_recall_on_planted_secrets_is_at_least_99_percent(corpus):
    by_kind = recall_by_kind(corpus, _scrub)
    caught = sum(c for c, _ in by_kind.values())
    missed = [(p.kind, p.value) for p in corpus if survives(p.value, _scrub(p.text))]
    assert caught / len(corpus) >= 0.99, missed
    assert all(c / n >= 0.9 for c, n in by_kind.values()), by_kind


def test_every_planted_secret_passes_the_row_prefilter(corpus):
    """The cheap RE2 pre-filter must never drop a row the scrubber would change."""
    from schemas import Action, Observation, Provenance, Transition
    from schemas.arrow import to_record_batch

    rows = [
        Transition.create(
            trajectory_id=f"t{i}",
            step=0,
            domain="terminal",
            env_id="bash",
            task_id="task",
            state=Observation.make("$ ", "terminal"),
            action=Action.make("run", command="ls"),
            next_state=Observation.make(p.text, "terminal"),
            provenance=Provenance(run_id="r"),
        )
        for i, p in enumerate(corpus)
    ]
    assert all(secret_rows(to_record_batch(rows), KINDS))
    clean = [
        row.evolve(next_state=Observation.make(line, "terminal"))
        for row, line in zip(rows, ordinary_lines(5, len(rows)), strict=False)
    ]
    flags = secret_rows(to_record_batch(clean), SECRET_KINDS)
    for row, flagged in zip(clean, flags, strict=True):
        if not flagged:
            assert _scrub(row.next_state.text) == row.next_state.text


def test_fewer_than_1_in_1000_ordinary_lines_change():
    for name, texts in (
        ("generated", ["\n".join(ordinary_lines(1, 20_000))]),
        ("synth", synth_texts()),
        ("pydoc", pydoc_texts()),
    ):
        changed, total, examples = changed_lines(texts, _scrub)
        assert total >= 10_000, name
        assert changed * 1000 < total, (name, changed, total, examples[:20])


@pytest.mark.parametrize(
    ("text", "secret", "kind"),
    [
        ("mysql -u root -pS3cretPass9 shop", "S3cretPass9", "password_arg"),
        ("mysql --password=Tr0ub4dor3x -h db shop", "Tr0ub4dor3x", "password_arg"),
        ("mysql -u root -p'hunter2!x' shop", "hunter2!x", "password_arg"),
        ("sshpass -p Kq8zLm2pW ssh deploy@10.0.0.4", "Kq8zLm2pW", "password_arg"),
        ("curl -u admin:Passw0rd77 https://api.acme.io", "Passw0rd77", "password_arg"),
        ("curl --user admin:Passw0rd77 https://api.acme.io", "Passw0rd77", "password_arg"),
        ("PASSWORD: Hunter22x\n", "Hunter22x", "password"),
        ("password=Hunter22x&user=bob", "Hunter22x", "password"),
        (
            "aws_secret_access_key = wJalrXUtnFEMIK7MDENGbPxRfiCYzzKEY0123456",
            "wJalrXUtnFEMIK7MDENGbPxRfiCYzzKEY0123456",
            "aws_secret_key",
        ),
        ("Authorization: Bearer 9f8e7d6c5b4a39281706f5e4d3c2b1a0", "9f8e7d6c5b4a39281706f5e4d3c2b1a0", "auth_header"),
        ("HF: hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh", "hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh", "hf_token"),
        ("ghp_0123456789abcdefghijABCDEFGHIJklmnop", "ghp_0123456789abcdefghijABCDEFGHIJklmnop", "github_token"),
    ],
)
def test_what_the_issue_found_missing_is_scrubbed_in_place(text, secret, kind):
    out, counts = scrub_text(text, KINDS)
    i, j = text.index(secret), text.index(secret) + len(secret)
    assert (out[:i], out[i:j], out[j:]) == (text[:i], placeholder(kind, len(secret)), text[j:])
    assert counts == {kind: 1}


def test_a_secret_seen_in_the_command_is_scrubbed_from_the_output_too():
    from schemas import Action, Observation, Provenance, Transition, transition_problems

    token = "ghp_" + "Zx9" * 12
    t = Transition.create(
        trajectory_id="t",
        step=0,
        domain="terminal",
        env_id="bash",
        task_id="task",
        state=Observation.make("$ ", "terminal"),
        action=Action.make("run", command=f"export GH={token}"),
        next_state=Observation.make(f"$ echo $GH\n{token}\n", "terminal"),
        provenance=Provenance(run_id="r"),
        instruction="configure git",
    )
    clean, counts = scrub_transition(t, KINDS)
    assert token not in clean.next_state.text and token not in clean.action.canonical and token not in clean.action.raw
    assert counts == {"github_token": 2} and transition_problems(clean) == []
    assert json.loads(clean.action.canonical)["command"].startswith("export GH=<github_token>")


def test_unknown_kinds_are_refused_when_the_config_is_read():
    from pydantic import ValidationError

    from pipelines.curate.config import Scrub

    with pytest.raises(ValidationError, match="unknown secret kind 'passwords'"):
        Scrub(kinds=["password", "passwords"])
    assert set(Scrub().kinds) == set(KINDS) == {kind for rule in rules() for kind in rule.kinds}


def test_secrets_in_json_inside_json_are_scrubbed():
    """An MCP result that carries a JSON document: quotes escaped twice."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from pipelines.curate.scrub import prefilter_pattern

    inner = json.dumps({"output": 'config:\n  "password": "Hunter22x!"\n  api_key: "AbC123dEf456GhI789"'})
    outer = json.dumps({"result": inner})
    out, counts = scrub_text(outer, KINDS)
    assert "Hunter22x!" not in out and "AbC123dEf456GhI789" not in out and counts == {"password": 1, "secret": 1}
    assert json.loads(json.loads(out)["result"])["output"].startswith('config:\n  "password": "<password>"')
    assert pc.match_substring_regex(pa.array([outer]), prefilter_pattern(KINDS)).to_pylist() == [True]


@pytest.mark.parametrize(
    ("prompt", "action"),
    [
        ("$ sudo apt-get update\n[sudo] password for agent: ", {"kind": "send_keys", "keys": "Tr0ub4dor&3\n"}),
        ("$ ssh deploy@10.0.0.4\ndeploy@10.0.0.4's password:", {"kind": "run", "command": "Tr0ub4dor&3"}),
        ("Enter passphrase for key '/root/.ssh/id_ed25519': ", {"kind": "type_text", "text": "Tr0ub4dor&3"}),
    ],
)
def test_what_the_agent_types_at_a_password_prompt_is_scrubbed(prompt, action):
    from schemas import Action, Observation, Provenance, Transition, transition_problems
    from schemas.arrow import to_record_batch

    t = Transition.create(
        trajectory_id="t",
        step=3,
        domain="terminal",
        env_id="bash",
        task_id="task",
        state=Observation.make(prompt, "terminal"),
        action=Action.make(**action),
        next_state=Observation.make("\nok\n$ ", "terminal"),
        provenance=Provenance(run_id="r"),
    )
    clean, counts = scrub_transition(t, KINDS)
    assert "Tr0ub4dor&3" not in clean.action.canonical + clean.action.raw and counts == {"typed_password": 1}
    assert transition_problems(clean) == [] and clean.action.args.keys() == t.action.args.keys()
    assert secret_rows(to_record_batch([t]), KINDS) == [True]
    after = t.evolve(state=Observation.make(prompt + "\n$ ", "terminal"))  # no longer at the prompt: a command
    assert scrub_transition(after, KINDS)[0].action == after.action
