"""Everything a window or a ``conch`` command needs, built once per data dir.

``build_services(data_dir, mock=...)`` opens the chat log, memories, health notes and settings
in the data dir, the secret store, the providers and the model catalogue; ``conversation()``
makes a ``Conversation`` with the engine its ``EngineFactory`` builds: a program's own, else an
``ApiSession`` on the configured adapters (``--mock`` hands in the demo's, app/demo.py).
Nothing is written outside the data dir.

Call ``await services.refresh_models()`` once at start (the window and the CLI do): it lists
the models and, when nothing else can answer, starts the bundled model.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from app.catalogue import ModelCatalogue, key_is_local, provider_is_local
from app.conversation import Conversation
from app.health import HealthLog
from app.learning import ModelCaller, QuietLearning
from app.memories import LearningRun, MemoryBook, Reach, ReachOf
from app.providers_config import BUNDLED, build_adapters, try_provider
from app.secrets import SecretStore, SessionSecrets, open_secrets
from app.settings import SettingsStore
from app.store import Chat, ChatStore, StoredMessage
from app.tool_calls import tool_call_book
from app.tools import HELD_FILE, ChatToolHost, ToolSettings
from app.trust import looks_pasted
from engines.base import (
    Approver,
    Done,
    Engine,
    Message,
    ModelInfo,
    NextStep,
    ProblemKind,
    TextDelta,
    ToolApprover,
    TurnProblem,
    render_attachments,
)
from engines.context.session import ApiSession, chat_window
from engines.context.summarise import ModelSummariser
from engines.context.transcript import TranscriptError, transcript_path
from engines.listeners import Listeners
from engines.local import bundled
from engines.local.gate import background
from engines.local.reload import LocalModels
from engines.programs.catalogue import PROGRAMS as PROGRAM_LIST
from engines.programs.catalogue import PROVIDER as PROGRAMS
from engines.programs.catalogue import program_engine, program_models
from engines.programs.mcp import SharedServer, SharedSource, shared_servers
from engines.providers.base import ChatRequest, ProviderError, closing_stream
from engines.providers.registry import PROVIDERS
from engines.providers.structured import LIST_OF_STRINGS, constrained_output
from engines.resources import read_prompt
from engines.scrub import scrub
from engines.tools.lean import use_lean
from engines.window import UNKNOWN_WINDOW_LOCAL, answer_reserve, unknown_window

log = logging.getLogger("conch.services")

ASK_TIMEOUT = 300.0  # seconds a learning request may take (a small local model is slow)
MEMORY_CHARS_MAX = 4_000


class ServicesError(Exception):
    """A request the services cannot carry out (an unknown chat); the text says why."""


# --- the system prompt ------------------------------------------------------------------------


def memory_chars(window: int) -> int:
    """Characters of memories the system prompt may carry for a model with ``window`` tokens.

    About 5% of the window (2.5% in lean mode, where memories are trimmed first), at most
    4,000 characters: every character is sent, and counted in the budget, on every turn.
    """
    share = 40 if use_lean(window) else 20  # chars = window × 4 / share
    return max(0, min(MEMORY_CHARS_MAX, window * 4 // share))


# Heads the person's own system prompt: their words, so trusted, and said to be theirs.
OWN_PROMPT_HEADING = "The person's own instructions for this chat:"


def build_system_prompt(model: ModelInfo, memories: MemoryBook, own: str = "") -> str:
    """Conch's prompt, then the person's own (``own``), then the memories ``model`` may read."""
    lean = use_lean(model.context)
    parts = [read_prompt("system_lean.txt" if lean else "system.txt").strip()]
    if own.strip():
        parts.append(f"{OWN_PROMPT_HEADING}\n{own.strip()}")
    # A memory learned in a chat on this computer stays on it unless the person marked it
    # for everywhere (app/memories.py).
    kept = memories.kept_for_prompt(memory_chars(model.context), local=model.local)
    if kept:
        parts.append(kept)
    return "\n\n".join(parts)


# --- the chat log as the engine's history -----------------------------------------------------


def history_messages(
    messages: Sequence[StoredMessage], tools: Mapping[int, str] | None = None
) -> list[tuple[int, Message]]:
    """The chat log as (seq, Message) pairs, for an engine checking or rebuilding its transcript.

    Only complete answers count: a stopped or failed one never entered the model's view. A
    person message that carries a file or counts as pasted (app.trust) is marked untrusted,
    like a tool result: it did not come from the person's own typing. ``tools``: the tool's
    name for each "tool" message, by seq, where the chat log kept its call.
    """
    out: list[tuple[int, Message]] = []
    for m in messages:
        if m.role == "user":
            text = render_attachments(m.text, m.attachments)
            outside = bool(m.attachments) or looks_pasted(m.text)
            out.append(
                (
                    m.seq,
                    Message(
                        role="user",
                        text=text,
                        pictures=m.pictures,
                        untrusted=outside,
                        imported=m.imported,
                    ),
                )
            )
        elif m.role == "assistant":
            if (m.text or m.thinking) and not m.partial and m.problem is None:
                out.append((m.seq, Message(role="assistant", text=m.text, thinking=m.thinking)))
        else:
            name = (tools or {}).get(m.seq, "")
            out.append((m.seq, Message(role="tool", text=m.text, tool_name=name, untrusted=True)))
    return out


def logged_history(store: ChatStore, chat_id: str) -> list[tuple[int, Message]]:
    """``history_messages`` of a chat as its log holds it now, tool names included."""
    messages = store.messages(chat_id)
    book = tool_call_book(store)
    tools: dict[int, str] = {}
    if book is not None and any(m.role == "tool" for m in messages):
        with contextlib.suppress(sqlite3.Error):
            calls = book.between(chat_id, messages[0].seq, messages[-1].seq)
            tools = {seq: call.tool for seq, call in calls.items()}
    return history_messages(messages, tools)


def latest_fold(store: ChatStore, chat_id: str) -> tuple[int, str] | None:
    """The chat log's latest fold as (first kept seq, summary), for the engine's check."""
    fold = store.latest_compaction(chat_id)
    return (fold.first_kept_seq, fold.summary) if fold is not None else None


def learned_reach(store: ChatStore) -> ReachOf:
    """Where a memory learned in a chat between two seqs may be used: only chats on this
    computer when the chat's model, or the model of any message it was learned from, runs on
    this computer (or when the chat log cannot say: a deleted chat, a damaged file); else
    every chat."""

    def reach(chat_id: str, seq_from: int, seq_to: int) -> Reach:
        try:
            chat = store.get_chat(chat_id)
            if chat is None:
                return "local"
            keys = {chat.model_key}  # "" (a chat without a model) counts as local
            if seq_from >= 0:
                limit = None if seq_to < seq_from else seq_to - seq_from + 1
                messages = store.messages(chat_id, seq_from, limit)
                keys |= {m.model_key for m in messages if m.model_key}
        except sqlite3.Error:
            return "local"
        return "local" if any(key_is_local(k) for k in keys) else "everywhere"

    return reach


# --- the services -----------------------------------------------------------------------------

StatusListener = Callable[[str], None]


class EngineFactory(Protocol):
    """Builds the engine for a chat on ``model``; a program asks ``approve`` before it acts."""

    def __call__(
        self, services: AppServices, chat: Chat, model: ModelInfo, approve: Approver | None
    ) -> Engine: ...


def forget_transcript(data_dir: Path, chat_id: str) -> None:
    """Remove the transcript an ApiSession keeps for the chat (the chat log keeps every
    message; the next ApiSession of the chat rebuilds it from there)."""
    with contextlib.suppress(TranscriptError, OSError):  # an id no transcript could have had
        transcript_path(data_dir, chat_id).unlink(missing_ok=True)


def standard_engine(
    services: AppServices, chat: Chat, model: ModelInfo, approve: Approver | None
) -> Engine:
    """A program's own engine (it keeps, or is handed, the chat itself), else an
    ``ApiSession`` on the catalogue's adapters."""
    store, chat_id = services.store, chat.id
    if model.provider == PROGRAMS:
        # The program keeps (or is handed) the chat from here on, so the copy an ApiSession
        # kept of it goes stale: it goes now, and when the chat comes back to a model the copy
        # is made again from the chat log, with nothing to report as a mismatch.
        forget_transcript(services.data_dir, chat_id)
        return program_engine(
            model,
            chat_id=chat_id,
            data_dir=services.data_dir,
            history=lambda: logged_history(store, chat_id),
            latest_fold=lambda: latest_fold(store, chat_id),
            approve=approve,
            commands=services.program_commands,
            agents=services.settings.settings.acp_agents,
            secrets=services.secret,
            tools=services.program_tools(model.id),
        )
    catalogue = services.catalogue
    return ApiSession(
        chat_id=chat_id,
        data_dir=services.data_dir,
        adapters=catalogue.live_adapters,
        summariser=ModelSummariser(catalogue.live_adapters, services.window_of),
        directory=catalogue,
        history=lambda: logged_history(store, chat_id),
        latest_fold=lambda: latest_fold(store, chat_id),
    )


class AppServices:
    """The application's collaborators for one data dir (see the module doc)."""

    def __init__(
        self,
        *,
        data_dir: Path,
        mock: bool,
        store: ChatStore,
        memories: MemoryBook,
        health: HealthLog,
        settings: SettingsStore,
        secrets: SecretStore,
        catalogue: ModelCatalogue,
        runtime: bundled.BundledRuntime | None = None,
        configs: dict[str, tuple[str, str]] | None = None,
        startup_problems: Sequence[str] = (),
        engines: EngineFactory = standard_engine,
        ask: ModelCaller | None = None,
    ) -> None:
        self.data_dir = data_dir
        # Sentences about damaged files set aside at start-up (see build_services).
        self.startup_problems = list(startup_problems)
        self.mock = mock
        self.engines = engines  # what builds each conversation's engine
        self.store = store
        self.memories = memories
        self.health = health
        self.settings = settings
        self.secrets = secrets
        self.catalogue = catalogue
        self.runtime = runtime
        # The MCP servers (Settings → Tools), one set for every chat; each starts when a chat
        # first needs its tools, and all stop in ``aclose``.
        self.tools = ToolSettings(settings, secrets, held_file=data_dir / HELD_FILE)
        self._configs = dict(configs or {})  # how each adapter was built (in memory only)
        self.status = ""  # "Starting the local model…" and the like, for the window
        # Reload offers for models of this computer's servers, the reloads, Ollama pulls.
        self.local_models = LocalModels(catalogue.adapter)
        self._status_listeners: Listeners[[str]] = Listeners("a status listener")
        self.learner = QuietLearning(
            store,
            memories,
            settings,
            ask if ask is not None else self.ask_model,
            health=health,
            piece_chars=self._piece_chars,
            model_ready=lambda chat: self._own_model(chat.model_key) is not None,
            no_model=lambda chat: chat.model_key.startswith(f"{PROGRAMS}/"),
        )
        self._closed = False

    # -- status --

    def on_status(self, listener: StatusListener) -> Callable[[], None]:
        """Hear "Starting the local model…" (and "" when it is over)."""
        return self._status_listeners.add(listener)

    def _set_status(self, text: str) -> None:
        self.status = text
        self._status_listeners.tell(text)

    # -- models --

    async def refresh_models(self, *, start_bundled: bool = True) -> list[ModelInfo]:
        """List every provider's models; start the bundled model when nothing else answers."""
        await self.catalogue.refresh()
        if start_bundled and not self.catalogue.ready_models():
            await self.start_bundled()
        return self.catalogue.models()

    async def answered(self, model: ModelInfo) -> list[ModelInfo]:
        """A model on this computer answered: list again, so the picker says it is loaded."""
        if not model.local:
            return self.catalogue.models()
        adapter = self.catalogue.adapter(model.provider)
        note = getattr(adapter, "answered", None) if adapter is not None else None
        if callable(note):
            note(model.key)
        return await self.catalogue.refresh()

    async def start_bundled(self) -> bool:
        """Start the model that ships with Conch (when installed and allowed)."""
        if self.mock or not self.settings.settings.bundled_model:
            return False
        running = self.runtime is not None and self.runtime.state.phase == "ready"
        if running and self.catalogue.adapter(BUNDLED) is not None:
            return True
        # A runtime handed in knows where its server and model are; the usual one asks.
        if self.runtime.missing() if self.runtime is not None else bundled.missing():
            return False
        if self.runtime is None:
            self.runtime = bundled.BundledRuntime(
                self.data_dir, on_state=lambda s: self._set_status(_status_text(s))
            )
        state = await self.runtime.start()
        if state.phase != "ready":
            self.health.add("local-model", state.text)
            if self.runtime.crash is not None and self.catalogue.adapter(BUNDLED) is None:
                # Stopped by a crash: listed as "stopped" (never ready) until it starts again.
                await self.catalogue.add_provider(bundled.bundled_adapter(self.runtime))
            return False
        await self.catalogue.add_provider(bundled.bundled_adapter(self.runtime))
        return True

    async def reconfigure(self) -> list[ModelInfo]:
        """Build the providers again from Settings and the keys (a key or server was added)."""
        if self.mock:
            return await self.catalogue.refresh()
        setup = build_adapters(self.settings.settings, self.secrets)
        wanted = {a.name for a in setup.adapters}
        for name in list(self.catalogue.adapters):
            if name not in wanted and name != BUNDLED:
                self.catalogue.remove_provider(name)
                self._configs.pop(name, None)
        for adapter in setup.adapters:
            config = setup.configs.get(adapter.name)
            if (
                adapter.name in self.catalogue.adapters
                and self._configs.get(adapter.name) == config
            ):
                await adapter.aclose()  # unchanged: keep the one in use
                continue
            self.catalogue.replace_provider(adapter, probed=adapter.name in setup.probed)
            if config is not None:
                self._configs[adapter.name] = config
        return await self.refresh_models()

    async def set_key(self, provider: str, key: str) -> list[ModelInfo]:
        """Store (or, with an empty key, remove) a provider's API key and list its models."""
        self.secrets.set(provider, key)
        return await self.reconfigure()

    async def test_provider(
        self, name: str, address: str = "", key: str | None = None
    ) -> list[ModelInfo]:
        """Settings' "Test": list a provider's models as it would be set up with ``address``
        (a server on this computer) or ``key`` (a company), saving neither."""
        return await try_provider(self.settings.settings, name, address, key)

    def default_model(self) -> ModelInfo | None:
        """The model for a new chat: the person's default if ready, else the first ready."""
        ready = list(self.catalogue.ready_models())
        wanted = self.settings.settings.default_model_key
        if wanted:
            found = next((m for m in ready if m.key == wanted), None)
            if found is not None:
                return found
        return ready[0] if ready else None

    def model_for(self, chat: Chat) -> ModelInfo | None:
        """The chat's model: as listed, or (not listed now: its server down, the bundled model
        not started, its provider no longer set up) a stand-in that is not ready, with the
        default window. Never another model: a chat changes model only when the person picks
        one. Only a chat without a model gets the default one."""
        if not chat.model_key:
            return self.default_model()
        found = self.catalogue.find(chat.model_key) or self._program(chat.model_key)
        if found is not None:
            return found
        provider, _, model_id = chat.model_key.partition("/")
        adapter = self.catalogue.adapter(provider)
        local = adapter.local if adapter is not None else provider_is_local(provider)
        label = bundled.MODEL_LABEL if provider == BUNDLED and model_id == bundled.MODEL_ID else ""
        return ModelInfo(
            provider=provider,
            id=model_id or chat.model_key,
            label=label,
            context=unknown_window(local),
            local=local,
            ready=False,
        )

    async def ready_for_turn(self, model: ModelInfo) -> ModelInfo | TurnProblem:
        """The chat's own ``model`` as it can answer now, or why it cannot (nothing is sent).

        Never another model. The bundled model is started when a chat of its own needs it,
        whatever other providers are set up. A provider that is set up is left to say itself
        what is wrong (its server may be back); one that is not set up any more sends nothing.
        """
        listed = self.catalogue.find(model.key) or self._program(model.key)
        if listed is not None and listed.ready:
            return listed
        if self.mock or model.provider == PROGRAMS or self.catalogue.adapter(model.provider):
            return listed or model
        if model.provider == BUNDLED:
            await self.start_bundled()
            started = self.catalogue.find(model.key)
            if started is not None and started.ready:
                return started
        return TurnProblem.of(
            ProblemKind.MODEL_MISSING,
            self._not_ready_detail(model),
            self._other_model_step(model),
            message=(
                f"{model.name} is not running, so this chat sent nothing; start it, or pick "
                "another model for this chat."
                if model.provider == BUNDLED
                else f"{model.name} is not set up in Conch now, so this chat sent nothing; set "
                "it up in Settings, or pick another model for this chat."
            ),
        )

    def _not_ready_detail(self, model: ModelInfo) -> str:
        """Why ``model`` (not set up, or the bundled one that did not start) cannot answer."""
        if model.provider != BUNDLED:
            label = PROVIDERS[model.provider].label if model.provider in PROVIDERS else ""
            return f"{label or model.provider} is not set up in Settings"
        if not self.settings.settings.bundled_model:
            return "the bundled model is turned off in Conch's settings (bundled_model)"
        why = self.runtime.missing() if self.runtime is not None else bundled.missing()
        if why:
            return why
        return self.runtime.state.text if self.runtime is not None else ""

    def _other_model_step(self, model: ModelInfo) -> NextStep:
        """The person's choice of another model: one on this computer when one is ready (a
        chat on this computer stays here unless they pick a cloud model themselves)."""
        nearby = [m for m in self.catalogue.ready_models() if m.local and m.key != model.key]
        if nearby:
            return NextStep(
                kind="switch-model", label=f"Use {nearby[0].name} for this chat", model=nearby[0]
            )
        return NextStep(kind="open-settings", label="Set up a model in Settings", text="providers")

    # -- conversations --

    def conversation(
        self,
        chat_id: str,
        *,
        model: ModelInfo | None = None,
        on_learning: Callable[[LearningRun], None] | None = None,
        approve: Approver | None = None,
        approve_tool: ToolApprover | None = None,
    ) -> Conversation:
        """A ``Conversation`` for an existing chat, on its model (or ``model``). A program
        asks ``approve`` before it acts; without one its requests are declined."""
        chat = self.store.get_chat(chat_id)
        if chat is None:
            raise ServicesError(f"There is no chat {chat_id!r}.")
        chosen = model or self.model_for(chat)
        if chosen is None:
            raise ServicesError(
                "No model is ready: start Ollama, LM Studio or another server, "
                "or add an API key in Settings."
            )
        engine = self.engines(self, chat, chosen, approve)
        if isinstance(engine, ApiSession) and engine.tools is None:
            # The chat's MCP tools: a call waits for ``approve_tool`` (the window's card).
            engine.tools = self.tool_host(chat_id, approve_tool)
        conv = Conversation(
            chat_id,
            store=self.store,
            engine=engine,
            model=chosen,
            learner=self.learner,
            health=self.health,
            system_prompt=lambda m: self.system_prompt(m, chat_id),
            on_learning=on_learning,
            ready=self.ready_for_turn,
        )
        if chosen.key != chat.model_key and (model is not None or not chat.model_key):
            # The person picked ``model``, or the chat had none: never a model by itself.
            self.store.set_model(chat_id, chosen.key)
        return conv

    def tool_host(self, chat_id: str, approve: ToolApprover | None = None) -> ChatToolHost:
        """A chat's tools for the tool loop: the servers it may use (its own choice, read at
        every turn) and who allows a call (None: every call that needs an OK is declined)."""
        store = self.store
        return ChatToolHost(
            self.tools, approve, chosen=lambda: store.chat_settings(chat_id).tool_servers
        )

    @property
    def program_commands(self) -> dict[str, tuple[str, ...]]:
        """Each program the person set a path for (Settings → Programs): that path with the
        program's usual arguments."""
        paths = self.settings.settings.program_paths
        out: dict[str, tuple[str, ...]] = {}
        for p in PROGRAM_LIST:
            path = paths.get(p.command[0], "").strip()
            if path:
                out[p.key] = (path, *p.command[1:])
        return out

    def secret(self, key: str) -> str | None:
        """A keyring entry of a tool server or an added agent; a keyring that fails reads as
        a missing secret (the engine then says which value to enter again)."""
        try:
            return self.secrets.get(key)
        except Exception as exc:
            log.warning("reading the secret %s failed (%s)", key, type(exc).__name__)
            return None

    def program_tools(self, key: str) -> SharedSource:
        """Conch's MCP servers for the program ``key``'s sessions: none unless the person
        allowed it for that program (Settings → Programs). Read as each session starts, so
        ticking the box reaches a chat already open."""
        settings, tools, secret = self.settings, self.tools, self.secret

        def read() -> tuple[list[SharedServer], list[str]]:
            if key not in settings.settings.programs_with_tools:
                return [], []
            return shared_servers(tools.configs, secret)

        return read

    def programs(self) -> list[ModelInfo]:
        """The programs for the picker: found ones ready, missing ones saying how to install."""
        if self.mock:
            return []
        return program_models(self.program_commands, self.settings.settings.acp_agents)

    def find_program(self, text: str) -> ModelInfo | None:
        """A program named by key ("programs/codex"), id or label, as ``conch ask --model``
        takes it; None when no program has that name."""
        listed = self.programs()
        return next((m for m in listed if text in (m.key, m.id, m.label)), None)

    def _program(self, key: str) -> ModelInfo | None:
        if self.mock or not key.startswith(f"{PROGRAMS}/"):
            return None
        return next((m for m in self.programs() if m.key == key), None)

    def window_of(self, provider: str, model_id: str) -> int | None:
        """The listed window of another model of the provider (the summariser's cheap one)."""
        found = self.catalogue.find(f"{provider}/{model_id}")
        return found.context if found is not None else None

    def system_prompt(self, model: ModelInfo, chat_id: str = "") -> str:
        return build_system_prompt(model, self.memories, self.own_prompt(chat_id))

    def own_prompt(self, chat_id: str = "") -> str:
        """The person's system prompt for the chat: its own (Chat settings), else their
        default (Settings → Chat)."""
        own = self.store.chat_settings(chat_id).system_prompt if chat_id else None
        return self.settings.settings.system_prompt if own is None else own

    # -- learning --

    def _piece_chars(self, chat: Chat) -> int:
        model = self.model_for(chat)
        # The window the chat really uses: a smaller one a refusal named counts.
        window = (
            chat_window(self.data_dir, chat.id, model)
            if model is not None and not self.mock
            else (model.context if model is not None else UNKNOWN_WINDOW_LOCAL)
        )
        return max(1_000, min(24_000, window * 3 // 2))

    def _own_model(self, model_key: str) -> ModelInfo | None:
        """The chat's own model when it is ready, else None: learning about a chat never
        falls back to another model, which could be a cloud one."""
        model = self.catalogue.find(model_key) if model_key else None
        if model is None or not model.ready:
            return None
        return model

    async def ask_model(self, prompt: str, text: str, *, model_key: str = "") -> str | None:
        """One request to the chat's own model, scrubbed; the answer's text, or None when that
        model is not ready (the chat then waits for it)."""
        model = self._own_model(model_key)
        if model is None:
            return None
        adapter = self.catalogue.adapter(model.provider)
        if adapter is None:
            return None
        request = ChatRequest(
            model=model.id,
            system=prompt,
            messages=(Message(role="user", text=scrub(text)),),
            max_output_tokens=min(1_024, answer_reserve(model.context)),
            window=model.context,
            # The answer is a list of memories: a small local model writes one only when the
            # server holds it to that shape.
            extra=constrained_output(model.provider, LIST_OF_STRINGS),
        )
        parts: list[str] = []
        try:
            # aclosing: leaving at Done must close the HTTP stream now, not at garbage collection.
            # background(): on a server on this computer it waits for, and gives way to, a turn.
            with background():
                async with (
                    asyncio.timeout(ASK_TIMEOUT),
                    closing_stream(adapter.stream(request)) as events,
                ):
                    async for event in events:
                        if isinstance(event, TextDelta):
                            parts.append(event.text)
                        elif isinstance(event, Done):
                            break
        except (ProviderError, TimeoutError) as exc:
            log.info("learning request to %s failed: %s", model.key, exc)
            return None
        answer = "".join(parts).strip()
        return answer or None

    async def tidy_up_now(self) -> list[LearningRun]:
        """ "Tidy up memories now": read every chat's unread words."""
        return await self.learner.tidy_up()

    async def tidy_if_due(self) -> list[LearningRun]:
        """The daily tidy-up, when a day has passed since the last one; in between, the chats
        that waited for their own model, once it is ready."""
        return await self.learner.tidy_if_due()

    async def tidy_loop(
        self,
        on_learning: Callable[[LearningRun], None] | None = None,
        *,
        every: float = 3600.0,
    ) -> None:
        """Run the daily tidy-up whenever it is due (checked ``every`` seconds) until
        cancelled; the window starts this as a task and cancels it when it closes."""
        while True:
            try:
                runs = await self.tidy_if_due()
            except asyncio.CancelledError:
                raise
            except Exception:  # a failed tidy-up is retried at the next check
                log.exception("the daily tidy-up failed")
                runs = []
            if on_learning is not None:
                for run in runs:
                    on_learning(run)
            await asyncio.sleep(every)

    async def watch_servers(self, *, every: float = 20.0) -> None:
        """Look again, every ``every`` seconds, for servers that did not answer, so a model
        appears in the picker soon after its server comes up; runs until cancelled."""
        while True:
            await asyncio.sleep(every)
            if not self.catalogue.unreachable:
                continue
            try:
                await self.catalogue.refresh()
            except asyncio.CancelledError:
                raise
            except Exception:  # a failed look is retried at the next tick
                log.exception("looking for servers again failed")

    # -- closing --

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self.tools.stop()
        await self.local_models.aclose()
        await self.catalogue.aclose()
        if self.runtime is not None:
            await self.runtime.stop()
        self.store.close()
        self.memories.close()
        self.health.close()


def _status_text(state: bundled.RuntimeState) -> str:
    return "" if state.phase in ("ready", "stopped") else state.text


def build_services(
    data_dir: Path,
    *,
    mock: bool,
    secrets: SecretStore | None = None,
    seed_demo_chat: bool = True,
    engines: EngineFactory | None = None,
    runtime: bundled.BundledRuntime | None = None,
) -> AppServices:
    """Open everything in ``data_dir`` (created if missing). See the module doc. ``engines``
    builds each chat's engine (tests hand in scripted ones); by default the real ones, or in
    mock mode the demo's. ``runtime`` runs the bundled model (by default one is made when it
    is first needed)."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    settings = SettingsStore.in_dir(data_dir)
    store = ChatStore.in_dir(data_dir)
    memories = MemoryBook.in_dir(data_dir, reach_of=learned_reach(store))
    health = HealthLog.in_dir(data_dir)
    # Damaged files were set aside and fresh ones started: the person is told, once, here.
    problems = [p for p in (settings.problem, store.problem, memories.problem, health.problem) if p]
    for problem in problems:
        health.add("storage", problem)
    ask: ModelCaller | None = None
    if mock:
        from app import demo  # the demo's models, chat and answers, only in mock mode

        keys: SecretStore = secrets or SessionSecrets()
        provider = demo.prepare(store, memories, settings, seed=seed_demo_chat)
        catalogue = ModelCatalogue([provider], health=health)
        configs: dict[str, tuple[str, str]] = {}
        engines = engines or demo.mock_engine
        ask = demo.mock_ask_model
    else:
        keys = secrets or open_secrets(health)  # no keyring: one Health note says so
        setup = build_adapters(settings.settings, keys)
        catalogue = ModelCatalogue(
            setup.adapters, health=health, probed=setup.probed, windows=settings
        )
        configs = setup.configs
    return AppServices(
        data_dir=data_dir,
        mock=mock,
        store=store,
        memories=memories,
        health=health,
        settings=settings,
        secrets=keys,
        catalogue=catalogue,
        configs=configs,
        startup_problems=problems,
        engines=engines or standard_engine,
        ask=ask,
        runtime=runtime,
    )
