"""What Conch keeps about each MCP server, and how the ``mcpServers`` JSON of other apps becomes it.

Claude Desktop, Cursor, LM Studio (``mcp.json``), Windsurf, Cline and VS Code all describe
servers the same way, give or take a key: an object of named entries, each either a command to
run (``command``, ``args``, ``env``) or a URL to reach (``url``, ``headers``). ``import_servers``
reads any of them, pasted or from a file, and says in words what it skipped.

Secrets never go to settings: a value that is a secret (an API key in ``env``, an
``Authorization`` header, a password in an argument or a URL) is replaced by a ``SecretRef``
naming a keyring entry, and the value itself is handed back once, for the app to put in the
keyring. Which values count as secrets is decided here; the keyring is the app's business.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from engines.scrub import contains_secret

ID_CHARS = 40


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class SecretRef(_Model):
    """A value kept in the system keyring; settings hold only the entry's name."""

    secret: str


Value = str | SecretRef


class _Server(_Model):
    id: str  # stable, unique among the servers; part of each secret's keyring entry
    name: str  # as the person (or the imported file) named it
    enabled: bool = True


class StdioServer(_Server):
    """A server Conch starts as a child process and speaks to over stdin and stdout."""

    transport: Literal["stdio"] = "stdio"
    command: str
    args: tuple[Value, ...] = ()
    env: dict[str, Value] = Field(default_factory=dict)
    cwd: str = ""


class HttpServer(_Server):
    """A server Conch reaches over Streamable HTTP."""

    transport: Literal["http"] = "http"
    url: Value
    headers: dict[str, Value] = Field(default_factory=dict)


ServerConfig = Annotated[StdioServer | HttpServer, Field(discriminator="transport")]


class MissingSecretError(Exception):
    """A server's secret is not in the keyring (any more)."""

    def __init__(self, ref: SecretRef, what: str) -> None:
        super().__init__(what)
        self.ref = ref
        self.what = what


SecretLookup = Callable[[str], str | None]


def resolve(value: Value, lookup: SecretLookup, what: str) -> str:
    """The real text of ``value``; a ``SecretRef`` is read through ``lookup`` (the keyring)."""
    if isinstance(value, str):
        return value
    found = lookup(value.secret)
    if found is None:
        raise MissingSecretError(value, what)
    return found


def server_identity(config: StdioServer | HttpServer) -> str:
    """What a server is, for the person's approvals: a short hash of what it runs (command,
    arguments, environment, folder) or reaches (address, headers). Its id, name and on/off
    switch are left out, so renaming a server keeps its approvals and changing what it runs
    does not. A secret counts by its keyring entry's name; its value is never read here."""
    what = config.model_dump(mode="json", exclude={"id", "name", "enabled"})
    text = json.dumps(what, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


# --- which values are secrets ------------------------------------------------------------------

# Words in an environment variable, header or flag name that say its value is a secret.
_SECRET_NAME = re.compile(
    r"(?:^|[^a-z])(?:api[-_]?key|apikey|key|token|secret|password|passwd|pwd|passphrase|pat"
    r"|credentials?|auth|authorization|bearer|cookie|session|signature|private)(?:$|[^a-z])",
    re.IGNORECASE,
)
_NOT_SECRET_NAMES = frozenset({"pwd", "oldpwd"})  # the shell's working directory, not a password


def secret_name(name: str) -> bool:
    """True when a variable, header or flag called ``name`` holds a secret."""
    bare = name.strip().lstrip("-").strip()
    if not bare or bare.lower() in _NOT_SECRET_NAMES:
        return False
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", bare)  # slackBotToken -> slack_Bot_Token
    return bool(_SECRET_NAME.search(words))


def is_secret(name: str, value: str) -> bool:
    """True when ``value`` (set under ``name``) must live in the keyring, not in settings."""
    if not value.strip():
        return False
    return secret_name(name) or contains_secret(value)


def _arg_flag(arg: str) -> str:
    """The flag part of ``--token=…`` or ``--token`` ("" for a plain argument)."""
    if not arg.startswith("-"):
        return ""
    return arg.split("=", 1)[0]


def secret_args(args: tuple[str, ...]) -> list[bool]:
    """For each argument, whether it is a secret: shaped like one, or the value of a flag whose
    name says so (``--api-key sk-…``, ``--token=…``)."""
    out: list[bool] = []
    for i, arg in enumerate(args):
        flag = _arg_flag(arg)
        if flag and "=" in arg:
            out.append(secret_name(flag) and bool(arg.split("=", 1)[1].strip()))
            continue
        after_flag = i > 0 and not flag and secret_name(_arg_flag(args[i - 1]))
        out.append(bool(arg.strip()) and (after_flag or contains_secret(arg)))
    return out


def secret_key(server_id: str, where: str) -> str:
    """The keyring entry of one of a server's secrets ("mcp/github/env/GITHUB_TOKEN")."""
    return f"mcp/{server_id}/{where}"


# --- the mcpServers JSON -----------------------------------------------------------------------


@dataclass(frozen=True)
class Imported:
    """What an ``mcpServers`` JSON gave: servers for settings, secrets for the keyring, and a
    sentence for everything that was skipped or needs the person's attention."""

    servers: tuple[StdioServer | HttpServer, ...] = ()
    secrets: dict[str, str] = field(default_factory=dict)  # keyring entry -> value
    problems: tuple[str, ...] = ()


def server_id(name: str, taken: Collection[str] = ()) -> str:
    """A short lower-case id from ``name``, different from every id in ``taken``."""
    base = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:ID_CHARS].strip("-") or "server"
    candidate, n = base, 2
    while candidate in taken:
        suffix = f"-{n}"
        candidate = base[: ID_CHARS - len(suffix)] + suffix
        n += 1
    return candidate


def _load(text: str) -> tuple[Any, str]:
    """The JSON in ``text``, or None and why not. A pasted entry without its outer braces
    (``"name": {…}``) is read too: people copy just the part a README shows."""
    stripped = text.strip().lstrip("\ufeff")
    if not stripped:
        return None, "There is nothing to import: paste the servers' JSON or pick a file."
    try:
        return json.loads(stripped), ""
    except json.JSONDecodeError as exc:
        first = exc
    if stripped.startswith('"'):
        try:
            return json.loads("{" + stripped.rstrip(",") + "}"), ""
        except json.JSONDecodeError:
            pass
    return None, (
        f"This is not valid JSON ({first.msg} at line {first.lineno}, column {first.colno}); "
        "check the brackets and commas and paste it again."
    )


def _entries(data: Any) -> Mapping[str, Any] | None:
    """The named server entries, wherever this app's format keeps them."""
    if not isinstance(data, dict):
        return None
    for key in ("mcpServers", "servers", "mcp_servers"):
        inner = data.get(key)
        if isinstance(inner, dict):
            return inner
    mcp = data.get("mcp")  # some apps nest it one level down
    if isinstance(mcp, dict):
        found = _entries(mcp)
        if found is not None:
            return found
    # A bare object of entries: every value looks like a server.
    if data and all(
        isinstance(v, dict) and ("command" in v or _url_of(v) is not None) for v in data.values()
    ):
        return data
    return None


def _url_of(entry: Mapping[str, Any]) -> str | None:
    for key in ("url", "serverUrl", "httpUrl"):
        value = entry.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _text_map(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items() if v is not None and not isinstance(v, dict)}


class _Importer:
    def __init__(self, taken: Collection[str]) -> None:
        self.taken = set(taken)
        self.secrets: dict[str, str] = {}
        self.problems: list[str] = []

    def keep(self, sid: str, where: str, value: str, secret: bool) -> Value:
        if not secret:
            return value
        key = secret_key(sid, where)
        self.secrets[key] = value
        return SecretRef(secret=key)

    def placeholders(self, label: str, values: dict[str, str]) -> None:
        named = sorted(k for k, v in values.items() if "${" in v)
        if named:
            self.problems.append(
                f"“{label}” sets {', '.join(named)} from a ${{…}} placeholder, which Conch does "
                "not fill in; enter the real value in Settings → Tools."
            )

    def entry(self, name: str, entry: Any) -> StdioServer | HttpServer | None:
        label = " ".join(str(name).split()) or "server"
        if not isinstance(entry, dict):
            self.problems.append(f"Skipped “{label}”: its entry is not an object.")
            return None
        kind = str(entry.get("type") or entry.get("transport") or "").lower().replace("_", "-")
        command = entry.get("command")
        url = _url_of(entry)
        enabled = not bool(entry.get("disabled", False))
        if kind == "sse":
            self.problems.append(
                f"Skipped “{label}”: it uses the older SSE transport, which Conch does not "
                "speak; use the server's Streamable HTTP address instead."
            )
            return None
        wants_http = kind in ("http", "streamable-http", "streamablehttp") or (
            url is not None and not command
        )
        if wants_http:
            if url is None:
                self.problems.append(f"Skipped “{label}”: it has no URL.")
                return None
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                self.problems.append(
                    f"Skipped “{label}”: “{parts.scheme or url[:40]}” is not an http or https "
                    "address."
                )
                return None
            sid = server_id(label, self.taken)
            headers = _text_map(entry.get("headers"))
            self.placeholders(label, headers)
            server: StdioServer | HttpServer = HttpServer(
                id=sid,
                name=label,
                enabled=enabled,
                url=self.keep(sid, "url", url, contains_secret(url)),
                headers={
                    k: self.keep(sid, f"header/{k}", v, is_secret(k, v)) for k, v in headers.items()
                },
            )
        else:
            if not isinstance(command, str) or not command.strip():
                self.problems.append(f"Skipped “{label}”: it has neither a command nor a URL.")
                return None
            raw_args = entry.get("args") or []
            if not isinstance(raw_args, list):
                raw_args = [raw_args]
            args = tuple(str(a) for a in raw_args if a is not None)
            env = _text_map(entry.get("env"))
            self.placeholders(label, env)
            if entry.get("envFile"):
                self.problems.append(
                    f"“{label}” reads variables from an envFile, which Conch does not read; add "
                    "them in Settings → Tools."
                )
            sid = server_id(label, self.taken)
            flags = secret_args(args)
            server = StdioServer(
                id=sid,
                name=label,
                enabled=enabled,
                command=command.strip(),
                args=tuple(self.keep(sid, f"arg/{i}", a, flags[i]) for i, a in enumerate(args)),
                env={k: self.keep(sid, f"env/{k}", v, is_secret(k, v)) for k, v in env.items()},
                cwd=str(entry.get("cwd") or ""),
            )
        self.taken.add(server.id)
        return server


def import_servers(text: str, taken_ids: Collection[str] = ()) -> Imported:
    """Read an ``mcpServers`` JSON (Claude Desktop, Cursor, LM Studio's mcp.json, VS Code …).

    Never raises: what cannot be read is a sentence in ``problems``. ``taken_ids`` are the ids
    of servers already configured, so imported ones never collide with them.
    """
    data, why = _load(text)
    if why:
        return Imported(problems=(why,))
    entries = _entries(data)
    if entries is None:
        return Imported(
            problems=(
                "No servers were found: the JSON needs an “mcpServers” object, like the one in "
                "Claude Desktop's config or Cursor's and LM Studio's mcp.json.",
            )
        )
    importer = _Importer(taken_ids)
    servers = [s for name, entry in entries.items() if (s := importer.entry(name, entry))]
    if not servers and not importer.problems:
        importer.problems.append("The “mcpServers” object is empty: there is nothing to import.")
    return Imported(tuple(servers), importer.secrets, tuple(importer.problems))
