"""Secret scrubbing: applied once, where the report is built, to every string in it.

Two mechanisms, both keeping the context (key or flag name, URL scheme and host, `Bearer`) and masking the secret:

* by name (`is_secret_name`, `_secrecy`): a name is split into words (`_ - .`, spaces, camelCase) and judged by
  words. A secret word (`password`, `secret`, `credentials`, `auth`, `Authorization`, `cookie`, `webhook`) masks
  any value; a key or a token (`api_key`, `experiment_key`, `wandb_key`, `hf_token`, `access_key_id`) a value that
  could be a credential (not `"<|patch|>"`). Not secret: `max_tokens`, `pad_token`, `missing_keys`, `sort_key`,
  `cache_key` (a `key` is secret only after a word that says which: api, access, private, a service's name...),
  `tokenizer`, `key_padding_mask`, `password_file`, `author`. A password's short forms: `passwd`, `pwd` (`MYSQL_PWD`,
  ODBC's `Pwd=`), one word that ends in `password` (`PGPASSWORD`), and `pass` or `pw` after a word that is not a
  pass over data (`DB_PASS`, `smtp_pass`, `ADMIN_PW`; not `forward_pass`), or alone in capitals (`PASS`, an
  environment variable; `pass: 3` is a count). The shell's `PWD` is the working directory, no secret: the name
  `PWD` alone with an absolute path is kept (`PWD=/home/x`), with anything else masked (ODBC's `PWD=...;`).
  `scrub` masks the value under such a key at any depth (every leaf under `"credentials": {...}`; bools and None
  stay) and the value after such a flag in an argv list; `scrub_text` judges `name=value`, `name: value`,
  `"name": "value"`, `--flag value`, `?name=value&`, where a value that reads as code (a traceback's source line:
  `key: Tensor`, `token=self.token`) stays, and a bare `key` (torch's store keys) or a `SHAPE_KEY` constant is no
  secret's name.
* by shape (`scrub_text`): private key blocks (also cut ones), credentials in URLs (also without a scheme:
  `alice:pw@proxy:3128`; `curl -u alice:pw`), a URL query's `sig`, `signature`, `key` and `code`, webhooks, auth
  headers, prefixed tokens of the common services (the shapes of gitleaks' default rules and detect-secrets'
  plugins).

Every pattern runs in linear time over hundreds of KB of log: a run of characters is entered at its start only
(a look-behind on the run's own class, after the first character so that the engine skips to candidates), and
no pattern can fail after a long scan (its end is optional, or the scan stops where the next candidate begins).
"""

from __future__ import annotations

import binascii
import contextlib
import functools
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

MASK = "<redacted>"

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
#: Words that make a name secret wherever they stand (`db_password`, `client_secret`, `credentials`, `auth`).
_SECRET_WORDS = frozenset(
    {
        "password",
        "passwd",
        "passphrase",
        "pwd",
        "secret",
        "secrets",
        "credential",
        "credentials",
        "creds",
        "auth",
        "oauth",
        "authorization",
        "cookie",
        "cookies",
        "webhook",
        "webhooks",
        "dsn",
        "apikey",
        "apikeys",
        "privatekey",
        "accesstoken",
        "authtoken",
        "refreshtoken",
        "clientsecret",
        "connstr",
        "sas",
    }
)
#: A last word that only describes the secret, which is not in the value: `password_file`, `secret_name`, `auth_type`.
_DESCRIBES = frozenset(
    {
        "name",
        "names",
        "file",
        "files",
        "path",
        "paths",
        "dir",
        "env",
        "var",
        "type",
        "kind",
        "mode",
        "method",
        "scheme",
        "provider",
        "enabled",
        "required",
        "length",
        "len",
        "count",
        "policy",
        "ref",
        "source",
        "backend",
        "version",
        "format",
    }
)
#: `token` as the last word is a secret (`hf_token`, `auth_token`, `token`) unless the word before names a
#: vocabulary token or a count (`pad_token`, `eos_token`, `max_token`).
_VOCABULARY = frozenset(
    {
        "pad",
        "bos",
        "eos",
        "unk",
        "sep",
        "cls",
        "mask",
        "special",
        "start",
        "end",
        "stop",
        "max",
        "min",
        "num",
        "n",
        "total",
        "first",
        "last",
        "next",
        "prev",
        "new",
        "image",
        "audio",
        "video",
        "vision",
        "decoder",
        "additional",
        "eot",
        "per",
        "position",
    }
)
#: `pass` or `pw` as the last word is a password's short form (`db_pass`, `ADMIN_PW`) unless the word before
#: names a pass over data or a pointwise layer (`forward_pass`, `first_pass`, `conv_pw`).
_PASSES = _VOCABULARY | frozenset(
    {
        "forward",
        "backward",
        "fwd",
        "bwd",
        "second",
        "third",
        "single",
        "multi",
        "one",
        "two",
        "each",
        "train",
        "training",
        "eval",
        "warmup",
        "compile",
        "custom",
        "fusion",
        "graph",
        "render",
        "full",
        "half",
        "by",
        "sub",
        "high",
        "low",
        "band",
        "test",
        "check",
        "conv",
        "dw",
        "linear",
        "proj",
    }
)
#: The end of one word that is a password's name (`PGPASSWORD`, `rootpassword`, `appsecret`).
_PASSWORD_ENDS = ("password", "passwd", "passphrase", "secret")
#: `key` as the last word is a secret after a word that says which kind (`api_key`, `experiment_key`,
#: `wandb_key`, `access_key_id`, `api_keys`) and not after any other (`sort_key`, `cache_key`, `missing_keys`,
#: torch's `store_based_barrier_key`); plural `tokens` likewise (`access_tokens`; not `num_tokens`).
_KEY_KINDS = frozenset(
    {
        "api",
        "access",
        "secret",
        "private",
        "auth",
        "ssh",
        "deploy",
        "client",
        "signing",
        "encryption",
        "session",
        "refresh",
        "bearer",
        "service",
        "account",
        "master",
        "license",
        "gpg",
        "pgp",
        "shared",
        "hmac",
        "experiment",
        "app",
        "admin",
        "subscription",
        "wandb",
        "comet",
        "neptune",
        "clearml",
        "openai",
        "anthropic",
        "hf",
        "huggingface",
        "hub",
        "cohere",
        "mistral",
        "groq",
        "gemini",
        "google",
        "replicate",
        "together",
        "pinecone",
        "aws",
        "azure",
        "gcp",
        "github",
        "gitlab",
        "slack",
        "stripe",
        "twilio",
        "sendgrid",
        "mailgun",
        "datadog",
        "dd",
        "sentry",
        "kaggle",
        "ngc",
        "nvidia",
        "databricks",
        "langsmith",
        "langchain",
        "serpapi",
        "tavily",
        "deepseek",
    }
)


def _secrecy(words: list[str], shouted: bool = False, capitals: bool = False) -> int:
    """0: not a secret's name. 2: a secret word (`db_password`, `credentials`): any value is masked. 1: a key or a
    token (`api_key`, `hf_token`): a value is masked where it looks like a credential (`_is_credential`), as a
    vocabulary token (`"<|patch|>"`) or a count does not. `shouted`: an environment variable, where `*_KEY` is one.
    `capitals`: the name is in capitals, an environment variable's style, where `PASS` and `DB_PW` are passwords
    (text passes it without `shouted`: its `SHAPE_KEY` is a constant)."""
    if not words or (len(words) > 1 and words[-1] in _DESCRIBES):
        return 0
    if (
        _SECRET_WORDS.intersection(words)
        or "connectionstring" in "".join(words)
        or any(word.endswith(_PASSWORD_ENDS) for word in words)
    ):
        return 2
    last, before = words[-1], (words[-2] if len(words) > 1 else "")
    if last in ("pass", "pw"):  # `DB_PASS` masks any value, `db_pass` one like a credential, `PASS` likewise
        if before in _PASSES:
            return 0
        return 2 if capitals and before else int(capitals or bool(before))
    if last == "token":
        return int(before not in _VOCABULARY)
    if last in ("key", "keys", "tokens"):
        return int(words == ["key"] or before in _KEY_KINDS or (shouted and last == "key"))
    return int(last == "id" and before == "key" and len(words) > 2 and words[-3] in _KEY_KINDS)


#: The start of an absolute path: the shell's `PWD` holds one (`/home/x`, `~/x`, `C:\\x`), a password does not.
_ABSOLUTE = re.compile(r"[/~]|[A-Za-z]:[\\/]")


def _working_dir(name: str, value: object) -> bool:
    """The shell's `PWD` (the name exactly, in capitals) holding a path: the working directory, not ODBC's
    `PWD=<password>`."""
    return name == "PWD" and isinstance(value, str) and _ABSOLUTE.match(value) is not None


def is_secret_name(name: str, value: str | None = None) -> bool:
    """Whether a key, flag or variable name says its value is a secret (see the module's docstring). The name `PWD`
    alone is the shell's working directory: secret only with a `value` that is not an absolute path."""
    if name == "PWD":
        return value is not None and not _working_dir(name, value)
    return _secrecy(_words(name), name.isupper(), name.isupper()) > 0


def _words(name: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(name)]


# no END: to the end
_KEY_BLOCK = re.compile(
    r"(-----BEGIN[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----)(.*?)"
    r"(-----END[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----|\Z)",
    re.S,
)
_KEY_END = re.compile(r"-----END[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----")
_BODY = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=\\\r"  # base64, JSON's `\n`, CR


def _key_blocks(text: str) -> str:
    """Whole private key blocks, one with no END (masked to the end), and one whose BEGIN line was cut off (a
    kept log tail that starts mid-key: masked from the start of the base64 body before its END line)."""
    text = _KEY_BLOCK.sub(lambda m: m.group(1) + (MASK if m.group(2) else "") + m.group(3), text)
    if "-----END" not in text:
        return text
    out: list[str] = []
    done = lo = 0
    for m in _KEY_END.finditer(text):
        seg = text[lo : m.start()]
        pos, first = len(seg.rstrip(_BODY)), True
        # walk back over whole lines of base64, then the cut line's tail
        while pos > 0 and seg[pos - 1] == "\n":
            start = seg.rfind("\n", 0, pos - 1) + 1
            line = seg[start : pos - 1]
            kept = line.rstrip(_BODY)
            body = len(line) - len(kept)
            if not kept and (body >= 16 or (first and body)):
                pos, first = start, False
                continue
            if body >= 16:
                pos = start + len(kept)
            break
        if pos < len(seg):
            out += [text[done : lo + pos], MASK]
            done = m.start()
        lo = m.end()
    return "".join(out) + text[done:]


def _basic(m: re.Match[str]) -> str:
    """`Basic <base64 of user:password>`; other words after "Basic" stay."""
    with contextlib.suppress(binascii.Error, ValueError):
        if b":" in binascii.a2b_base64(m.group(2) + "=" * (-len(m.group(2)) % 4)):
            return m.group(1) + MASK
    return m.group(0)


def _wandb_key(m: re.Match[str]) -> str:
    """A W&B API key is 40 hex digits, like a git commit: masked only near the word "wandb"."""
    near = m.string[max(0, m.start() - 100) : m.end() + 60].lower()
    return MASK if "wandb" in near else m.group(0)


#: Prefixed tokens of the common services (gitleaks' default rules, detect-secrets' plugins), each entered at
#: the start of a run of token characters only.
_TOKEN_SHAPES = (
    r"hf_[A-Za-z0-9]{30,}",
    r"api_org_[A-Za-z0-9]{30,}",  # Hugging Face
    r"gh[pousr]_[A-Za-z0-9]{36,}",
    r"github_pat_\w{22,}",  # GitHub
    r"gl(?:pat|dt|rt|ptt|ft|imt|cbt|oas|soat|agent)-[\w-]{20,}",
    r"GR1348941[\w-]{20,}",  # GitLab
    r"sk-(?:proj-|ant-|svcacct-|admin-)?[\w-]{20,}",  # OpenAI, Anthropic
    r"xox[abposre]-[\w-]{10,}",
    r"xapp-[\w-]{20,}",  # Slack
    r"A(?:3T[A-Z0-9]|KIA|SIA|BIA|CCA)[A-Z0-9]{16}(?![A-Za-z0-9])",  # AWS access key ids
    r"AIza[\w-]{35}",
    r"ya29\.[\w-]{20,}",  # Google API keys, OAuth access tokens
    r"sk_(?:live|test)_[A-Za-z0-9]{20,}",
    r"rk_(?:live|test)_[A-Za-z0-9]{20,}",
    r"whsec_[A-Za-z0-9]{24,}",  # Stripe
    r"npm_[A-Za-z0-9]{36}",
    r"pypi-AgE[\w-]{50,}",
    r"rubygems_[a-f0-9]{48}",  # package registries
    r"dapi[0-9a-f]{32}(?:-\d+)?(?![\w-])",  # Databricks
    r"SK[0-9a-fA-F]{32}(?![\w-])",  # Twilio
    r"SG\.[\w-]{22}\.[\w-]{43}",  # SendGrid
    r"M[A-Za-z\d]{23,25}\.[\w-]{6}\.[\w-]{27,38}(?![\w-])",
    r"N[A-Za-z\d]{23,25}\.[\w-]{6}\.[\w-]{27,38}(?![\w-])",  # Discord
    r"nvapi-[\w-]{40,}",
    r"dckr_pat_[\w-]{20,}",
    r"hv[sb]\.[\w-]{24,}",
    r"do[por]_v1_[a-f0-9]{64}",  # NGC, Docker, Vault, DO
    r"gl(?:c|sa)_[\w+/]{32,}={0,2}",
    r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}",
    r"lin_api_[A-Za-z0-9]{40}",  # Grafana, ...
    r"r8_[A-Za-z0-9]{37}",
    r"gsk_[A-Za-z0-9]{48,}",
    r"pcsk_\w{40,}",
    r"lsv2_(?:pt|sk)_\w{40,}",  # Replicate, Groq, ...
    r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}",
    r"NRAK-[A-Z0-9]{27}",
    r"sntr[ysu]_[\w+/]{40,}={0,2}",
    r"LTAI[A-Za-z0-9]{12,20}",
    r"AGE-SECRET-KEY-1[0-9A-Z]{58}",
    r"xkeysib-[\w-]{60,}",
    r"key-[0-9a-f]{32}(?![\w-])",
    r"sq0(?:atp|csp)-[\w-]{22,}",
    r"ATATT3[\w-]{100,}=[A-F0-9]{8}",
    r"ntn_\w{40,}",
    r"pul-[a-f0-9]{40}",
    r"eyJ[\w-]{8,}\.eyJ[\w-]{8,}\.[\w-]*",
    r"eyJ[\w+/-]{40,}={0,2}",  # JWTs, base64 JSON credentials (Neptune)
)


def _at_run_start(*shapes: str) -> str:
    """The shapes, each entered only where no token character precedes it: the check is placed after the first
    character (literal or class; one alternative per first character) so that the engine skips to candidates."""
    groups: dict[tuple[str, str], list[str]] = {}
    for shape in shapes:
        first = re.match(r"\\d|\[[^]]*\]|.", shape)
        # `\d\d{7,9}`, not `\d{8,10}`
        assert first is not None and shape[first.end() :][:1] not in ("{", "*", "+", "?")
        body = r"[\w+/-]" if re.search(r"\[[^]]*[+/]", shape) else r"[\w-]"  # a class with "+" or "/"
        groups.setdefault((first.group(), body), []).append(shape[first.end() :])
    return "|".join(f"{first}(?<!{body}.)(?:{'|'.join(rests)})" for (first, body), rests in groups.items())


#: After a name's first character: the tail of a secret word (`oken` of `token`) in its first 64 characters.
_HINT = r"[\w.-]{0,64}?(?i:ass|wd|ecret|red|uth|ookie|ook|sn|ey|oken|onn|(?<=p)w)"
#: (pattern, replacement), applied in order after private keys; `name=value` comes last.
# not prose
_PATTERNS: tuple[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (
    # webhooks: the host and the route stay
    (
        re.compile(
            r"((?:hooks\.slack\.com/(?:services|workflows|triggers)|discord(?:app)?\.com/api/webhooks"
            r"|\.webhook\.office\.com|outlook\.office(?:365)?\.com/webhook)/)[^\s\"'<>]+"
        ),
        rf"\1{MASK}",
    ),
    # scheme://user:password@host, scheme://:password@host, scheme://<token>@host (a scan stops at the next "/");
    # `scheme:/user...` too: a URL given where a path is expected comes back with its "//" made one "/"
    (re.compile(r"(:/{1,3})([^/\s:@]*):[^/\s]+@"), rf"\1\2:{MASK}@"),
    (re.compile(r"(:/{1,3})[\w.~%-]{20,}@"), rf"\1{MASK}@"),
    # user:password@host with no scheme (a proxy, a DSN's tail), entered at the start of a word; not `mailto:a@b`,
    # nor an image's `python:3.11@sha256:...` (a digest after the @)
    (
        re.compile(
            r"(?!(?i:mailto|xmpp|sips?|tel):)([A-Za-z_](?<![\w.~%+:/@-].)[\w.~%+-]*:)"
            r"[^\s:@/\\'\"<>`]{3,}@(?=[A-Za-z0-9\[])(?!sha\d+:)"
        ),
        rf"\1{MASK}@",
    ),
    # curl -u user:password, --user, --proxy-user (not docker's `-u 1000:1000`, a uid and a gid)
    (
        re.compile(
            r"((?<![\w-])(?:-u|--user|--proxy-user)(?:[ \t]+|=)[\"']?[^\s:\"'<>]+:)"
            r"(?!\d+(?![^\s\"']))(?!<redacted>)[^\s\"']+"
        ),
        rf"\1{MASK}",
    ),
    # SAS and presigned URLs: ?sig=, &X-Amz-Signature=; an API key or an OAuth code in a query: ?key=, &code=
    # (other secret names are judged with `name=value`)
    (re.compile(r"([?&;](?i:sig|signature|x-amz-signature|x-goog-signature)=)[^&#\s\"'<>;]+"), rf"\1{MASK}"),
    (re.compile(r"([?&](?:key|code)=)(?!<redacted>)[^&#\s\"'<>;]+"), rf"\1{MASK}"),
    (re.compile(r"([Bb](?<![\w-].)(?i:earer)[ \t]+)(?=[\w~+/=-]*[\d.~+/=-])[\w.~+/=-]{8,}"), rf"\1{MASK}"),
    (re.compile(r"(Basic(?<![\w-]Basic)[ \t]+)([A-Za-z0-9+/]{6,}={0,2})(?![\w+/=])"), _basic),
    (re.compile(r"(machine(?<![\w-]machine)\s+\S+\s+login\s+\S+\s+password\s+)\S+"), rf"\1{MASK}"),  # .netrc
    (re.compile(_at_run_start(*_TOKEN_SHAPES)), MASK),  # every alternative starts with a literal: a fast scan
    (re.compile(_at_run_start(r"\d\d{7,9}:[\w-]{35}(?![\w-])")), MASK),  # Telegram bots
    (re.compile(_at_run_start(r"[0-9a-f][0-9a-f]{31}-us\d{1,2}(?!\w)")), MASK),  # Mailchimp
    (re.compile(r"[0-9a-f](?<![0-9A-Za-z].)[0-9a-f]{39}(?![0-9A-Za-z])"), _wandb_key),
)
#: `--name=value`, `--name value`, and `name=value`, `name: value`, `"name": "value"`, `env['NAME'] = value`:
#: a name (entered at the start of its run, and only with a hint of a secret word) and its separator; the value
#: is taken only where the whole name is judged secret.
_NAMES = (
    re.compile(
        rf"-(?<![^\s\"'\[(,=]-)-?(?=.{_HINT})" + r"([A-Za-z_][\w-]*)(?:[ \t]*=[ \t]*|[ \t]+(?![ \t-]))"
    ),
    re.compile(rf"([A-Za-z_](?<![\w.-].)(?={_HINT})" + r"[\w.-]*)[\"']?\]?[ \t]*[=:](?!=)[ \t]*"),
)
_SCHEME = rf"(?i:bearer|basic|token|digest|bot)[ \t]+(?=[^\s\"',;&|<>()\[\]{{}}]|{MASK})"  # `Authorization:
# Bearer <...>`
# `{`, `[`: keys judged
_VALUE = re.compile(rf"({_SCHEME})?" + r"(\"[^\"\n]*\"?|'[^'\n]*'?|[^\s\"',;&{\[][^\s\"',;&]*)")
_QUOTED_SCHEME = re.compile(_SCHEME)


_CODE_WORDS = frozenset(
    {
        "str",
        "bytes",
        "int",
        "float",
        "bool",
        "dict",
        "list",
        "any",
        "self",
        "none",
        "null",
        "true",
        "false",
        "yes",
        "no",
        "on",
        "off",
        "enabled",
        "disabled",
        "required",
        "optional",
    }
)
# self._x, mask2_token; not tkn_5f1e
_IDENTIFIER = re.compile(r"_*[A-Za-z][A-Za-z0-9]*(?:[._]+[A-Za-z][A-Za-z0-9]*)+")
_CREDENTIAL = re.compile(r"[\w.~+/=:@%-]{8,}")
_NOT_CREDENTIAL = re.compile(r"[\s<>|()\[\]{}]")


def _is_credential(value: str, loose: bool = False) -> bool:
    """Could be a key or a token: not a vocabulary token (`<|patch|>`) nor words; in text (not `loose`), also 8
    characters or more of a token's (not `TILE`, `42`)."""
    if loose:
        return not _NOT_CREDENTIAL.search(value)
    return bool(_CREDENTIAL.fullmatch(value))


def _is_code(value: str, after: str, level: int) -> bool:
    """A traceback's source line, not a secret: `password: str`, `secret=get()`, `auth[i]`, `auth = self.auth`,
    `PasswordAuthentication=no`, `"Authorization": f"Bearer {token}"`, `token = token_from_kwargs` (a secret word's
    value: a dotted name or one that names a secret; not `correct_horse_battery`)."""
    value = value.rstrip("),:")
    if value.lower() in _CODE_WORDS or after == "(" or "(" in value or "[" in value:
        return True
    if after in ("'", '"'):
        return value in ("f", "b", "r", "rb", "br", "fr", "rf")  # a string's prefix
    return bool(_IDENTIFIER.fullmatch(value)) and (level == 1 or "." in value or _secrecy(_words(value)) > 0)


@functools.lru_cache(maxsize=4096)
def _text_secrecy(name: str) -> int:
    """As `_secrecy`, but a bare `key` and a `SHAPE_KEY` are torch's store keys and constants in text, and a bare
    `pass` or `pw` holds a password where its value looks like a credential."""
    words = _words(name)
    if words in (["pass"], ["pw"]):  # `pass=<credential>`, `--pass x` (redis-cli); not `pass: 3`, a count
        return 1
    return 0 if words == ["key"] else _secrecy(words, capitals=name.isupper())


def _assignments(text: str, names: re.Pattern[str]) -> str:
    out: list[str] = []
    done = pos = 0
    while (m := names.search(text, pos)) is not None:
        pos = m.end()
        level = _text_secrecy(m.group(1))
        if not level or text.endswith("://", 0, m.start()) or (v := _VALUE.match(text, pos)) is None:
            continue  # a URL's user name was judged above
        pos, outer, value, inner = v.end(), v.group(1) or "", v.group(2), ""
        quote, content = value[0] if value[0] in "\"'" else "", value.strip("\"'")
        if quote and (scheme := _QUOTED_SCHEME.match(content)) is not None:  # "Authorization": "Bearer ..."
            inner, content = scheme.group(), content[scheme.end() :]
        if not content or content.startswith(MASK):
            continue
        if _working_dir(m.group(1), content):
            continue  # the shell's PWD=/home/x
        code = not quote and _is_code(value, text[pos : pos + 1], level)
        if (
            m.group(0).startswith("-")
            or text[m.start() - 1 : m.start()] in ("?", "&", ";")  # flags, URL queries
            or (level == 2 and (outer or inner or not code))
            or (level == 1 and _is_credential(content) and not code)
        ):
            closing = quote if len(value) > 1 and value.endswith(quote) else ""
            out += [text[done : m.end()], outer, quote, inner, MASK, closing]
            done = pos
    return "".join(out) + text[done:]


def scrub_text(text: str) -> str:
    """`text` with every secret it carries masked (the shapes and names of the module's docstring)."""
    text = _key_blocks(text)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    for names in _NAMES:
        text = _assignments(text, names)
    return text


#: The longest value the CLI echoes on a line (an error, a warning; `ds_doctor.options.ONE_LINE_CHARS` too): a
#: 5,000-digit argument is shown cut
PRINTABLE_CHARS = 500


def printable(value: object, limit: int = PRINTABLE_CHARS) -> str:
    """A value the CLI echoes on one line of a terminal (a path of the run folder, a URL or argument it was given,
    a warning): secrets masked (`scrub_text`), then control characters and escape sequences shown, never sent, line
    breaks made spaces, at most `limit` characters (`ds_doctor.reports.safe.clip`)."""
    from ds_doctor.reports.safe import clip

    return clip(scrub_text(("" if value is None else str(value))[: limit * 4]), limit)


_FLAG = re.compile(r"--?([A-Za-z][\w.-]*)")


#: Strings up to this long are scrubbed once per process and remembered: the names, versions, case ids and
#: reasons of a fleet's reports repeat from node to node (fleet over 10,000 reports scrubs each once, issue 46).
_MEMO_CHARS = 512
_memo_text = functools.lru_cache(maxsize=1 << 16)(scrub_text)


@functools.lru_cache(maxsize=1 << 14)
def _key_secrecy(key: str) -> int:
    return _secrecy(_words(key), key.isupper(), key.isupper())


def _text(value: str) -> str:
    return _memo_text(value) if len(value) <= _MEMO_CHARS else scrub_text(value)


def _scrub(value: Any, level: int) -> Any:
    if isinstance(value, str):
        return (
            MASK
            if value and (level == 2 or (level == 1 and _is_credential(value, loose=True)))
            else _text(value)
        )
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return MASK if level else value
    if isinstance(value, dict):
        return {
            (_text(k) if isinstance(k, str) else k): _scrub(
                v, max(level, _key_secrecy(k) if isinstance(k, str) and not _working_dir(k, v) else 0)
            )
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        items = [_scrub(v, level) for v in value]
        for i in range(1, len(items)):  # an argv list: ["--password", "hunter2"]
            flag, item = value[i - 1], value[i]
            if (
                isinstance(flag, str)
                and isinstance(item, str)
                and item
                and not item.startswith("-")
                and (m := _FLAG.fullmatch(flag)) is not None
                and is_secret_name(m.group(1))
            ):
                items[i] = MASK
        return items
    return value


def scrub(value: Any) -> Any:
    """A copy of `value` (JSON-like data) with every string scrubbed, every key's too, and every leaf that is not
    a bool or None masked under a key whose name says secret (`{"comet": {"api_key": ...}}`, `"credentials": {...}`)."""
    return _scrub(value, 0)


#: Words that are never treated as a user or host name to hide (they would mangle ordinary text).
_COMMON = frozenset(
    {"root", "user", "admin", "ubuntu", "localhost", "runner", "vm", "node", "host", "worker"}
)
_IPV4 = re.compile(r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)(?![\w.])")
_IPV6 = re.compile(r"(?<![\w:])(?:[0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}(?![\w:])")
_GPU_UUID = re.compile(
    r"\b(?:GPU|MIG)-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
)


#: Path parts that name no one: never masked as a user name, whatever HOME or the login is called (HOME=/home made
#: every `/home/` of a report a user's name; a login `root` or `home` identifies no one)
GENERIC_PATH_PARTS = frozenset(
    {
        "home",
        "homes",
        "root",
        "Users",
        "users",
        "user",
        "usr",
        "var",
        "srv",
        "opt",
        "mnt",
        "media",
        "tmp",
        "data",
        "scratch",
        "work",
        "workspace",
        "export",
        "nfs",
        "net",
        "local",
        "shared",
    }
)


def _passwd_name(uid: int) -> str | None:
    """The login the password database gives `uid`, None where it has none (a container's uid without an entry)."""
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return None


def login_names(environ: Mapping[str, str], home: str) -> list[str]:
    """Who runs ds-doctor, from what names a login: the environment's USER and LOGNAME, `getpass.getuser()`, the
    password database's entry for this uid, and the owner of HOME. Never HOME's last part: that is a path's
    (HOME=/home, /srv/home)."""
    import getpass

    names = [environ.get("USER", ""), environ.get("LOGNAME", "")]
    with contextlib.suppress(Exception):  # no variable and no entry: OSError (3.13), KeyError before
        names.append(getpass.getuser())
    owners = [os.getuid()]
    with contextlib.suppress(OSError):
        owners.append(os.stat(home).st_uid)
    return [*names, *(name for uid in owners if (name := _passwd_name(uid)))]


class Anonymizer:
    """`--anonymize`: host names, user names, IP addresses and GPU UUIDs become stable placeholders
    (`host-1`, `user-1`, `ip-1`, `gpu-uuid-1`), the same value the same placeholder throughout a report.
    Loopback addresses stay: they identify nothing. User names are replaced as path segments and as
    whole values; host names wherever they stand as a word. A home folder (`homes`, HOME) is replaced where a path
    starts with it, its last part as a user name (`/home/alice/t` -> `/home/user-1/t`). A generic path part
    (`GENERIC_PATH_PARTS`: home, root, Users, ...) is never a name."""

    def __init__(self, hosts: list[str], users: list[str], homes: Iterable[str] = ()) -> None:
        self.hosts = sorted({h for h in hosts if h}, key=len, reverse=True)
        self.users = sorted({u for u in users if u and u not in GENERIC_PATH_PARTS}, key=len, reverse=True)
        folders = {h.rstrip("/") for h in homes}
        self.homes = sorted(
            (f for f in folders if f.startswith("/") and f.rsplit("/", 1)[1] not in GENERIC_PATH_PARTS),
            key=len,
            reverse=True,
        )
        self.seen: dict[tuple[str, str], str] = {}

    @classmethod
    def for_this_machine(cls, extra_hosts: list[str] = ()) -> Anonymizer:  # type: ignore[assignment]
        import socket

        hosts = [socket.gethostname(), socket.getfqdn(), socket.gethostname().split(".")[0], *extra_hosts]
        home = os.path.expanduser("~")
        return cls(hosts, login_names(os.environ, home), homes=[home])

    def _token(self, kind: str, value: str) -> str:
        key = (kind, value)
        if key not in self.seen:
            self.seen[key] = f"{kind}-{sum(1 for k, _ in self.seen if k == kind) + 1}"
        return self.seen[key]

    def _replace(self, kind: str, value: str, _match: re.Match[str]) -> str:
        """`re.sub`'s replacement for a value known beforehand (a host or user name)."""
        return self._token(kind, value)

    def _replace_home(self, parent: str, name: str, _match: re.Match[str]) -> str:
        """`re.sub`'s replacement for a home folder: its parent kept, its last part a user's placeholder."""
        return f"{parent}/{self._token('user', name)}"

    def text(self, text: str) -> str:
        text = _GPU_UUID.sub(lambda m: self._token("gpu-uuid", m.group(0)), text)
        text = _IPV4.sub(
            lambda m: m.group(0) if m.group(0).startswith("127.") else self._token("ip", m.group(0)), text
        )
        text = _IPV6.sub(lambda m: self._token("ip", m.group(0)), text)
        for host in self.hosts:
            if host.lower() in _COMMON and text != host:
                continue  # a common word: only a value that is exactly the host name is replaced
            text = re.sub(
                rf"(?<![A-Za-z0-9_.]){re.escape(host)}(?![A-Za-z0-9_])",
                functools.partial(self._replace, "host", host),
                text,
            )
        for home in self.homes:
            parent, name = home.rsplit("/", 1)
            text = re.sub(
                rf"(?<![\w.\-]){re.escape(home)}(?=/|$|\s|[\"'])",
                functools.partial(self._replace_home, parent, name),
                text,
            )
        for user in self.users:
            if text == user:
                return self._token("user", user)
            text = re.sub(
                rf"(?<=/){re.escape(user)}(?=/|$|\s|[\"'])",
                functools.partial(self._replace, "user", user),
                text,
            )
        return text

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self(v) for v in value]
        return value
