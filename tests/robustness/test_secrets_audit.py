"""A full session with two keyed providers, then a search for every key in everything it left.

Two providers with distinct keys (an OpenAI-style company, Groq's row, and Anthropic) answer
long chats on small windows, so turns fold, summaries are written and memories are learned;
servers that cannot be reached leave Health notes; every logger writes at DEBUG to a file. The
fake models are parrots: a summary or a memory repeats whatever it was given, so a secret the
app forgot to leave out shows up where it must not be.

Afterwards nothing may hold a configured key: no file in the data dir (bytes and every SQLite
row), no log line, no request body, and no request to the *other* provider. A key the person
pasted into a message may stay in the chat log and the transcript (they are the person's own
words), but never in a summary, a memory, a Health note, a log line, or a request to another
provider.
"""

from __future__ import annotations

import json
import logging
import re
import secrets as random_secrets
import sqlite3
import string
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.secrets import SessionSecrets
from app.services import AppServices, build_services
from app.settings import SettingsStore
from engines.base import Attachment, Compacted, Done, Problem
from tests.fakes.anthropic_server import AnthropicServer, ClaudeScript, FakeClaude
from tests.fakes.http import Recorded, Reply, free_port
from tests.fakes.openai_server import FakeModel, OpenAIStyleServer, Script

_ALNUM = string.ascii_letters + string.digits


def _random(n: int) -> str:
    return "".join(random_secrets.choice(_ALNUM) for _ in range(n))


GROQ_KEY = "gsk_" + _random(52)
ANTHROPIC_KEY = "sk-ant-api03-" + _random(80) + "-" + _random(6) + "AA"
PASTED = {
    "openai-style project key": "sk-proj-" + _random(48),
    "GitHub token": "ghp_" + _random(36),
    "AWS access key": "AKIA"
    + "".join(random_secrets.choice("ABCDEFGHJKLMNPQRSTUVWXYZ234567") for _ in range(16)),
}
# Secrets a person says in passing, each as it would be typed, and a piece of it that must not
# survive anywhere but the chat log and the transcript.
SAID_IN_PASSING = {
    "AWS secret key": (
        "the AWS secret is wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "bPxRfiCYEXAMPLEKEY",
    ),
    "card": ("my card is 4111 1111 1111 1111", "1111 1111"),
    "IBAN": ("the IBAN is GB82 WEST 1234 5698 7654 32", "5698 7654"),
    "password": ("my wifi password is swordfish", "swordfish"),
    "netrc": ("machine nas.local login sam password hunter22", "hunter22"),
    "mysql": ("I run mysql -u root -pS3cretPass shop", "S3cretPass"),
    "sshpass": ("and sshpass -p Pa55word9 ssh pi@garden.local", "Pa55word9"),
    "TOTP seed": ("my 2FA setup key is JBSWY3DPEHPK3PXP", "JBSWY3DPEHPK3PXP"),
    "Discord token": (
        "the bot token is MTk4NjIyNDgzNDcxOTI1MjQ4.Cl2FMQ.ZnCjm1XVW7vRze4b7Cq4se7kKWs",
        "ZnCjm1XVW7vRze4b7Cq4se7kKWs",
    ),
    "htpasswd": ("the htpasswd line is sam:$apr1$r31.....$HqJZimcKQFAMYayBlzkrA/", "HqJZimcKQ"),
    "seed phrase": (
        "my wallet words are legal winner thank year wave sausage worth useful legal winner "
        "thank yellow",
        "wave sausage worth",
    ),
    "SSN": ("my SSN is 078-05-1120", "078-05-1120"),
}
WINDOW = 8192
TURNS = 32
FILLER = (
    "We are planning the community garden behind the library: raised beds of untreated "
    "larch, a rota for watering, and a shed for the tools. Marta wants the budget kept "
    "under €2,500 and the permit filed by the end of the month. "
) * 6

_PIECE = re.compile(r"<next-part-of-the-chat>\n(.*?)\n</next-part-of-the-chat>", re.DOTALL)
_SUMMARY_BLOCK = re.compile(r"<earlier-in-this-chat>(.*?)</earlier-in-this-chat>", re.DOTALL)


def parrot(system: str, last: str) -> str:
    """What a model that repeats everything would answer to this request."""
    piece = _PIECE.search(last)
    if piece:
        # A "summary" that copies the part it was given, flattened into one line.
        flat = " ".join(piece.group(1).split())
        return f"What the person wants: a garden.\nFacts to keep: {flat[:1500]}"
    if "remember useful things" in system:
        said = [
            line[len("Person: ") :] for line in last.split("\n\n") if line.startswith("Person: ")
        ]
        return json.dumps([f"The person said: {s[:300]}" for s in said][:8])
    return "Noted. " + " ".join(last.split()[:40])


def _user_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


class ParrotGroq(OpenAIStyleServer):
    def __init__(self) -> None:
        super().__init__("groq", models=[FakeModel("fake-model", WINDOW)], api_key=GROQ_KEY)
        self._answer = threading.Lock()

    def handle(self, request: Recorded) -> Reply:
        body = request.json if request.method == "POST" and request.body else None
        if not isinstance(body, dict):
            return super().handle(request)
        messages = body.get("messages") or []
        system = next((m["content"] for m in messages if m.get("role") == "system"), "")
        last = _user_text(messages[-1].get("content")) if messages else ""
        with self._answer:  # requests from learning run alongside turns
            self.script = Script(text=[parrot(str(system), last)])
            return super().handle(request)


class ParrotClaude(AnthropicServer):
    def __init__(self) -> None:
        super().__init__(models=[FakeClaude("claude-fake-1", WINDOW)], api_key=ANTHROPIC_KEY)
        self._answer = threading.Lock()

    def handle(self, request: Recorded) -> Reply:
        body = request.json if request.method == "POST" and request.body else None
        if not isinstance(body, dict):
            return super().handle(request)
        messages = body.get("messages") or []
        last = _user_text(messages[-1].get("content")) if messages else ""
        with self._answer:
            self.script = ClaudeScript(text=[parrot(str(body.get("system", "")), last)])
            return super().handle(request)


@pytest.fixture
def servers() -> Iterator[tuple[ParrotGroq, ParrotClaude]]:
    groq, claude = ParrotGroq().start(), ParrotClaude().start()
    try:
        yield groq, claude
    finally:
        groq.stop()
        claude.stop()


@pytest.fixture
def debug_log(tmp_path: Path) -> Iterator[Path]:
    """Every logger, at DEBUG, into a file outside the data dir."""
    path = tmp_path / "conch-debug.log"
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    # The app's own logger may have been given a level by an earlier test that started the
    # window in this process (app.main.configure_logging): open it up too.
    conch = logging.getLogger("conch")
    old_levels = (root.level, conch.level)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    conch.setLevel(logging.DEBUG)
    try:
        yield path
    finally:
        root.removeHandler(handler)
        root.setLevel(old_levels[0])
        conch.setLevel(old_levels[1])
        handler.close()


def _configure(data_dir: Path, groq: ParrotGroq, claude: ParrotClaude) -> SessionSecrets:
    nowhere = f"http://127.0.0.1:{free_port()}"  # local servers set up but not running
    SettingsStore.in_dir(data_dir).update(
        companies=("groq", "anthropic"),
        base_urls={"groq": groq.base_url, "anthropic": claude.base_url},
        ollama_url=nowhere,
        lmstudio_url=nowhere,
        llamacpp_url=nowhere,
        vllm_url=nowhere,
        bundled_model=False,
    )
    keys = SessionSecrets()
    keys.set("groq", GROQ_KEY)
    keys.set("anthropic", ANTHROPIC_KEY)
    return keys


async def _long_chat(services: AppServices, model_key: str, pasted: str) -> tuple[str, int]:
    chat = services.store.create_chat(model_key=model_key)
    conversation = services.conversation(chat.id)
    folds = 0
    try:
        for i in range(TURNS):
            text = f"Turn {i}. {FILLER}"
            if i == 2:
                text = (
                    f"My key for the other service is {pasted} and my password is "
                    f"Tr0ub4dor-{_random(8)}; keep them handy. {FILLER}"
                )
            if i == 3:
                said = "; ".join(words for words, _ in SAID_IN_PASSING.values())
                text = f"Turn {i}. For the garden's admin: {said}. Noted?"
            attachments: tuple[Attachment, ...] = ()
            if i == 4:
                attachments = (Attachment(name="notes.txt", text=f"token = {_random(40)}"),)
            done = False
            async for event in conversation.turn(text, attachments=attachments):
                assert not isinstance(event, Problem), event
                folds += isinstance(event, Compacted)
                done = done or isinstance(event, Done)
            assert done, f"turn {i} did not finish"
    finally:
        await conversation.aclose()  # waits for learning runs under way
    return chat.id, folds


def _sqlite_dump(path: Path) -> str:
    db = sqlite3.connect(path)
    try:
        return "\n".join(db.iterdump())
    finally:
        db.close()


def _everything_in(data_dir: Path) -> dict[str, str]:
    """Each file's bytes as text, and each database's rows dumped as SQL."""
    out: dict[str, str] = {}
    for path in sorted(p for p in data_dir.rglob("*") if p.is_file()):
        out[str(path.relative_to(data_dir))] = path.read_bytes().decode("utf-8", "replace")
    for path in sorted(data_dir.glob("*.sqlite3")):
        # A long row spans overflow pages, which a byte search could miss: read it as rows too.
        out[f"{path.name} (rows)"] = _sqlite_dump(path)
    return out


def _read(path: Path) -> str:
    return path.read_text("utf-8")


def _request_text(r: Recorded) -> str:
    return r.method + " " + r.path + "?" + r.query + "\n" + r.body.decode("utf-8", "replace")


def _headers_text(r: Recorded) -> str:
    return "\n".join(f"{k}: {v}" for k, v in r.headers.items())


async def test_no_key_is_left_anywhere_after_a_long_session(
    data_dir: Path, servers: tuple[ParrotGroq, ParrotClaude], debug_log: Path
) -> None:
    groq, claude = servers
    keys = _configure(data_dir, groq, claude)
    services = build_services(data_dir, mock=False, secrets=keys)
    try:
        await services.refresh_models()
        ready = {m.key for m in services.catalogue.ready_models()}
        assert {"groq/fake-model", "anthropic/claude-fake-1"} <= ready, ready
        pasted_groq = PASTED["openai-style project key"]
        pasted_claude = PASTED["GitHub token"]
        groq_chat, groq_folds = await _long_chat(services, "groq/fake-model", pasted_groq)
        claude_chat, claude_folds = await _long_chat(
            services, "anthropic/claude-fake-1", pasted_claude
        )
        await services.tidy_up_now()
        memories = services.memories.list()
        notes = services.health.notes()
        summaries = [
            c.summary
            for c in (
                services.store.latest_compaction(groq_chat),
                services.store.latest_compaction(claude_chat),
            )
            if c is not None
        ]
    finally:
        await services.aclose()

    # The session did what it had to, or the audit would prove nothing.
    assert groq_folds >= 2 and claude_folds >= 2, (groq_folds, claude_folds)
    assert len(summaries) == 2 and all(summaries)
    assert memories, "nothing was learned"
    assert any(n.topic == "unreachable" for n in notes), [n.topic for n in notes]
    log_text = _read(debug_log)
    assert "conch." in log_text, "the debug log captured nothing from Conch"
    summary_requests = [r for r in groq.chat_requests if b"<next-part-of-the-chat>" in r.body]
    assert summary_requests and [r for r in claude.message_requests if b"<next-part" in r.body]

    configured = {"groq": GROQ_KEY, "anthropic": ANTHROPIC_KEY}
    stored = _everything_in(data_dir)

    # 1. A configured key is nowhere: no file, no row, no log line, no request body.
    for name, key in configured.items():
        for where, text in stored.items():
            assert key not in text, f"the {name} key is in {where}"
        assert key not in log_text, f"the {name} key is in the debug log"
        for r in [*groq.requests, *claude.requests]:
            assert key not in _request_text(r), f"the {name} key is in a request body {r.path}"

    # 2. ... and only ever in the header of requests to its own provider.
    for r in claude.requests:
        assert GROQ_KEY not in _headers_text(r), "the Groq key went to Anthropic"
        assert r.headers.get("x-api-key") == ANTHROPIC_KEY
        assert "authorization" not in r.headers
    for r in groq.requests:
        assert ANTHROPIC_KEY not in _headers_text(r), "the Anthropic key went to Groq"
        assert r.headers.get("authorization") == f"Bearer {GROQ_KEY}"

    # 3. What the person pasted never reaches a summary, a memory, a note or a log line...
    for pasted in (pasted_groq, pasted_claude):
        for summary in summaries:
            assert pasted not in summary
        for memory in memories:
            assert pasted not in memory.text, memory
        for note in notes:
            assert pasted not in note.text
        assert pasted not in log_text
        transcripts = [t for where, t in stored.items() if where.startswith("api-sessions")]
        for text in transcripts:
            for block in _SUMMARY_BLOCK.findall(text):
                assert pasted not in block
        assert pasted not in stored["memories.sqlite3 (rows)"]
        assert pasted not in stored["health.sqlite3 (rows)"]
    # ... nor a summary request, nor the summary block any later request carries ...
    for r in [*groq.requests, *claude.requests]:
        body = r.body.decode("utf-8", "replace")
        if "<next-part-of-the-chat>" in body:
            assert pasted_groq not in body and pasted_claude not in body
        for block in _SUMMARY_BLOCK.findall(body):
            assert pasted_groq not in block and pasted_claude not in block
    # ... nor the other provider.
    assert not [r for r in claude.requests if pasted_groq.encode() in r.body]
    assert not [r for r in groq.requests if pasted_claude.encode() in r.body]
    # ... and so do the secrets a person says in passing, each of its kind.
    for kind, (_, piece) in SAID_IN_PASSING.items():
        for summary in summaries:
            assert piece not in summary, f"a {kind} is in a summary"
        for memory in memories:
            assert piece not in memory.text, f"a {kind} is in a memory: {memory.text}"
        for note in notes:
            assert piece not in note.text, f"a {kind} is in a Health note"
        assert piece not in log_text, f"a {kind} is in the log"
        assert piece not in stored["memories.sqlite3 (rows)"], f"a {kind} is in memories"
        for r in [*groq.requests, *claude.requests]:
            body = r.body.decode("utf-8", "replace")
            learning = "remember useful things" in body
            if "<next-part-of-the-chat>" in body or learning:
                assert piece not in body, f"a {kind} was sent to summarise or learn from"
            for block in _SUMMARY_BLOCK.findall(body):
                assert piece not in block, f"a {kind} is in a summary block"
    # The scrubber left its marker where the parrots repeated what they were given.
    assert any("[secret left out]" in m.text for m in memories)
    # The chat log keeps the person's own words, word for word.
    assert pasted_groq in stored["conch.sqlite3 (rows)"]


class EchoingGateway(OpenAIStyleServer):
    """A gateway that quotes the whole key back in its refusal (some proxies have done so)."""

    def __init__(self, key: str) -> None:
        super().__init__("groq", models=[FakeModel("fake-model", WINDOW)])
        self.key = key

    def handle(self, request: Recorded) -> Reply:
        if request.method == "POST":
            sent = request.headers.get("authorization", "")
            return Reply.json(
                {"error": {"message": f"Incorrect API key provided: {sent}. Check it."}},
                status=401,
            )
        return super().handle(request)


async def test_a_server_that_quotes_the_key_back_does_not_get_it_stored(
    data_dir: Path, debug_log: Path
) -> None:
    with EchoingGateway(GROQ_KEY) as gateway:
        SettingsStore.in_dir(data_dir).update(
            companies=("groq",),
            base_urls={"groq": gateway.base_url},
            ollama_url=f"http://127.0.0.1:{free_port()}",
            bundled_model=False,
        )
        keys = SessionSecrets()
        keys.set("groq", GROQ_KEY)
        services = build_services(data_dir, mock=False, secrets=keys)
        try:
            await services.refresh_models()
            chat = services.store.create_chat(model_key="groq/fake-model")
            conversation = services.conversation(chat.id)
            problems = [
                e async for e in conversation.turn("Hello there.") if isinstance(e, Problem)
            ]
            await conversation.aclose()
        finally:
            await services.aclose()
    assert problems and problems[0].problem.kind.value == "auth"
    assert GROQ_KEY not in problems[0].problem.detail
    for where, text in _everything_in(data_dir).items():
        assert GROQ_KEY not in text, f"the key is in {where}"
    assert GROQ_KEY not in _read(debug_log)
