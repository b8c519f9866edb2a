"""A fake Ollama on a real loopback port that behaves like the real server where Conch cares.

It speaks ``/api/chat`` (NDJSON stream or one object), ``/api/tags``, ``/api/show``, ``/api/ps``
and ``/api/version``; records every request; counts tokens as about four characters each;
and copies Ollama's context behaviour (docs/local_servers.md A4-A7):

- without ``options.num_ctx`` a model runs with the old default of 2048 tokens;
- ``num_ctx`` is capped at the model's trained window;
- a request whose ``num_ctx`` differs from the one the model is loaded with reloads it
  (counted in ``reloads``, so tests can assert Conch never causes one);
- a prompt over the window is cut silently (whole messages from the front, system messages
  and the last message kept) and still answered with 200, unless ``truncate: false`` is sent
  to a server of v0.12.6 or later, which refuses with 400 (or, with ``refuse_in_stream``, with
  200 and one ``{"error": …}`` line, as a server that had begun streaming does).

Use it with ``running_ollama(...)``::

    with running_ollama([FakeModel("llama3.2", 131072)], version="0.12.6") as ollama:
        adapter = OllamaAdapter(ollama.url)
"""

from __future__ import annotations

import json
import math
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from enum import StrEnum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

OLD_DEFAULT_NUM_CTX = 2048
CLASSIC_REFUSAL = "the input length exceeds the context length"
LLAMA_SERVER_REFUSAL = (
    "the prompt is longer than the context length currently available to the model; shorten "
    "the prompt, adjust the context length in settings, or use a model with a longer context "
    "length"
)
OUT_OF_MEMORY = "model requires more system memory (9.2 GiB) than is available (3.1 GiB)"
RUNNER_ERROR = "an error was encountered while running the model: unexpected EOF"
IMAGE_TOKENS = 768


def _key(name: str) -> str:
    last = name.rsplit("/", 1)[-1]
    return name if ":" in last else f"{name}:latest"


def _version(text: str) -> tuple[int, int, int]:
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else (0, 0, 0)


def count_tokens(text: str) -> int:
    """The fake's tokenizer: about four characters a token."""
    return math.ceil(len(text) / 4)


def message_tokens(message: Mapping[str, Any]) -> int:
    """Tokens one message takes once rendered through a chat template."""
    rendered = f"<|{message.get('role', '')}|>\n{message.get('content', '')}<|end|>\n"
    return count_tokens(rendered) + IMAGE_TOKENS * len(message.get("images") or ())


@dataclass(frozen=True)
class FakeModel:
    name: str
    context: int | None = 131_072  # trained window (model_info "<arch>.context_length")
    capabilities: tuple[str, ...] = ("completion", "tools")
    family: str = "llama"
    size: int = 2_019_393_189  # bytes on disk (/api/tags), about what the weights take
    layers: int = 28  # model_info: what the KV cache's size follows from
    kv_heads: int = 8
    head_dim: int = 128

    @property
    def key(self) -> str:
        return _key(self.name)

    def kv_bytes(self, num_ctx: int) -> int:
        """The f16 KV cache this model needs at ``num_ctx`` (keys and values, every layer)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2 * num_ctx


@dataclass(frozen=True)
class FakeReply:
    text: str = "Hello from the fake Ollama."
    thinking: str = ""
    tool_calls: tuple[Mapping[str, Any], ...] = ()  # {"name": ..., "arguments": {...}}
    done_reason: str = "stop"
    chunk: int = 6  # characters per streamed line


class Fault(StrEnum):
    ERROR_MID_STREAM = "error-mid-stream"  # one {"error": …} line after the first text, 200
    NO_DONE = "no-done"  # the stream ends cleanly without its done line
    MALFORMED_LINE = "malformed-line"  # a line that is not JSON in the middle
    DISCONNECT = "disconnect"  # the connection drops mid-answer
    SLOW_START = "slow-start"  # waits `slow_start_seconds` before answering
    OUT_OF_MEMORY = "out-of-memory"  # 500 with Ollama's memory error
    NOT_FOUND = "not-found"  # 404 as if the model had just been deleted


DEFAULT_MODELS = (
    FakeModel("llama3.2", 131_072, ("completion", "tools")),
    FakeModel("qwen3:8b", 40_960, ("completion", "tools", "thinking"), family="qwen3"),
    FakeModel("nomic-embed-text", 8_192, ("embedding",), family="nomic-bert"),
)


@dataclass
class RecordedRequest:
    method: str
    path: str
    body: Any  # parsed JSON, or None


@dataclass
class ChatOutcome:
    """What the fake did with one chat request (for assertions about truncation)."""

    model: str
    num_ctx: int
    prompt_tokens: int  # before any cut
    kept_messages: list[dict[str, Any]] = field(default_factory=list)
    truncated: bool = False
    refused: bool = False


class FakeOllama:
    """The server. Start/stop it yourself or use ``running_ollama``. Thread-safe state."""

    def __init__(
        self,
        models: Iterable[FakeModel] = DEFAULT_MODELS,
        *,
        version: str = "0.12.6",
        loaded: Mapping[str, int] | None = None,
        default_num_ctx: int = OLD_DEFAULT_NUM_CTX,
        refusal: str | None = None,
        replies: Iterable[FakeReply] = (),
        responder: Callable[[dict[str, Any]], FakeReply] | None = None,
    ) -> None:
        self.models = {m.key: m for m in models}
        self.version = version
        self.default_num_ctx = default_num_ctx
        self.refusal = refusal or (
            LLAMA_SERVER_REFUSAL if _version(version) >= (0, 30, 0) else CLASSIC_REFUSAL
        )
        self.replies: deque[FakeReply] = deque(replies)
        self.responder = responder
        self.default_reply = FakeReply()
        self.fault: Fault | None = None  # applies to every chat request
        self.faults: deque[Fault] = deque()  # one per chat request, used first
        self.slow_start_seconds = 2.0
        self.mid_stream_error = RUNNER_ERROR
        self.refuse_in_stream = False  # a refusal is a 200 NDJSON stream ending in an error line
        self.missing_paths: set[str] = set()  # answer 404, as a server older than them does
        self.requests: list[RecordedRequest] = []
        self.outcomes: list[ChatOutcome] = []
        self.reloads: dict[str, int] = {}
        # /api/pull: the models the registry has, bytes already on disk per model (a pull
        # that was stopped resumes from there), and a hold after this many bytes until
        # `pull_release` is set (a download that takes a while); `pulls_closed` counts pulls
        # the client hung up on.
        self.registry: dict[str, FakeModel] = {}
        self.pulled: dict[str, int] = {}
        self.pull_step = 250_000_000
        self.pull_hold_at: int | None = None
        self.pull_release = threading.Event()
        self.pulls_closed = 0
        # A chat answer held after this many streamed lines until `chat_release` is set (an
        # answer still coming, for a Stop); `chat_held` is set when it waits. Once per setting.
        self.tags_held = False  # /api/tags waits for `tags_release` (a busy server)
        self.tags_release = threading.Event()
        self.chat_hold_after: int | None = None
        self.chat_release = threading.Event()
        self.chat_held = threading.Event()
        self.pull_closed = threading.Event()  # set when a client hangs up on a pull
        # model key -> (num_ctx, shift) it is loaded with
        self._loaded: dict[str, tuple[int, bool]] = {
            _key(k): (v, True) for k, v in (loaded or {}).items()
        }
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self, port: int = 0) -> FakeOllama:
        server = _Server(("127.0.0.1", port), _Handler)
        server.fake = self
        self._server = server
        # A short poll keeps stop() quick: shutdown() waits for the loop's next poll.
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.close_connections()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    @property
    def port(self) -> int:
        assert self._server is not None, "start() the fake first"
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- state tests read and set -------------------------------------------------------------

    @property
    def loaded(self) -> dict[str, int]:
        """Model key -> the context length it is loaded with (what /api/ps reports)."""
        with self._lock:
            return {k: v[0] for k, v in self._loaded.items()}

    def load(self, model: str, num_ctx: int) -> None:
        """Load a model as another client would have (no reload counted)."""
        with self._lock:
            self._loaded[_key(model)] = (num_ctx, True)

    def unload(self, model: str) -> None:
        with self._lock:
            self._loaded.pop(_key(model), None)

    def chat_requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r.body for r in self.requests if r.path == "/api/chat"]

    def total_reloads(self) -> int:
        with self._lock:
            return sum(self.reloads.values())

    # --- request handling (called on server threads) ------------------------------------------

    def _record(self, method: str, path: str, body: Any) -> None:
        with self._lock:
            self.requests.append(RecordedRequest(method, path, body))

    def _next_fault(self) -> Fault | None:
        with self._lock:
            return self.faults.popleft() if self.faults else self.fault

    def _reply_for(self, body: dict[str, Any]) -> FakeReply:
        with self._lock:
            if self.replies:
                return self.replies.popleft()
        if self.responder is not None:
            return self.responder(body)
        return self.default_reply

    def _use(self, model: FakeModel, options: Mapping[str, Any], shift: bool) -> int:
        """Load ``model`` for a request (counting a reload when its settings change)."""
        requested = options.get("num_ctx")
        num_ctx = requested if isinstance(requested, int) and requested > 0 else None
        num_ctx = num_ctx or self.default_num_ctx
        if model.context:
            num_ctx = min(num_ctx, model.context)
        num_ctx = max(num_ctx, 4)
        # Before v0.30 `shift` is a per-request option; from v0.30 changing it reloads too.
        shift_matters = _version(self.version) >= (0, 30, 0)
        with self._lock:
            before = self._loaded.get(model.key)
            if before is not None and (
                before[0] != num_ctx or (shift_matters and before[1] != shift)
            ):
                self.reloads[model.key] = self.reloads.get(model.key, 0) + 1
            self._loaded[model.key] = (num_ctx, shift)
        return num_ctx

    def _fit(
        self, messages: list[dict[str, Any]], num_ctx: int, *, truncate: bool
    ) -> ChatOutcome | None:
        """Ollama's chatPrompt: drop whole messages from the front until the prompt fits."""
        total = sum(message_tokens(m) for m in messages)
        outcome = ChatOutcome(model="", num_ctx=num_ctx, prompt_tokens=total)
        if total <= num_ctx:
            outcome.kept_messages = messages
            return outcome
        if not truncate:
            return None
        kept = messages[-1:]
        for start in range(len(messages)):
            systems = [m for m in messages[:start] if m.get("role") == "system"]
            candidate = systems + messages[start:]
            if start == len(messages) - 1 or sum(map(message_tokens, candidate)) <= num_ctx:
                kept = candidate
                break
        outcome.kept_messages = kept
        outcome.truncated = True
        return outcome


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeOllama

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self._open_lock:
            conns = list(self._open)
        for conn in conns:
            with suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that went away mid-answer is normal here (cancelled turns, fault tests).
        pass


class _DisconnectError(Exception):
    pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    @property
    def fake(self) -> FakeOllama:
        return self.server.fake

    # --- plumbing -----------------------------------------------------------------------------

    def _read_json(self) -> tuple[Any, bool]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None, True
        try:
            return json.loads(raw), True
        except ValueError:
            return None, False

    def _send_json(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, status: int, message: str) -> None:
        self._send_json(status, {"error": message})

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _line(self, obj: Any) -> None:
        self._chunk(json.dumps(obj).encode() + b"\n")

    def _stream_error(self, message: str) -> None:
        """A 200 NDJSON stream whose only line is the error."""
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._line({"error": message})
        self._chunk(b"")

    # --- routes -------------------------------------------------------------------------------

    def do_GET(self) -> None:
        self.fake._record("GET", self.path, None)
        if self.path in self.fake.missing_paths:
            self._plain(404, "404 page not found")
        elif self.path == "/api/version":
            self._send_json(200, {"version": self.fake.version})
        elif self.path == "/api/tags":
            # A server too busy to list its models answers only once ``tags_release`` is set.
            while self.fake.tags_held and not self.fake.tags_release.wait(0.01):
                if self.fake._stopping.is_set():
                    return
            self._send_json(200, {"models": [self._tag(m) for m in self.fake.models.values()]})
        elif self.path == "/api/ps":
            self._send_json(200, {"models": self._ps()})
        elif self.path == "/":
            self._plain(200, "Ollama is running")
        else:
            self._plain(404, "404 page not found")

    def do_POST(self) -> None:
        body, ok = self._read_json()
        self.fake._record("POST", self.path, body)
        if not ok:
            self._send_error(400, "invalid character 'x' looking for beginning of value")
        elif self.path == "/api/show":
            self._show(body or {})
        elif self.path == "/api/chat":
            try:
                self._chat(body or {})
            except (_DisconnectError, OSError):
                self.close_connection = True
        elif self.path == "/api/pull":
            try:
                self._pull(body or {})
            except OSError:  # the client closed the stream: what arrived stays on disk
                self.close_connection = True
                with self.fake._lock:
                    self.fake.pulls_closed += 1
                self.fake.pull_closed.set()
        else:
            self._plain(404, "404 page not found")

    def _plain(self, status: int, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _details(self, m: FakeModel) -> dict[str, Any]:
        return {
            "parent_model": "",
            "format": "gguf",
            "family": m.family,
            "families": [m.family],
            "parameter_size": "3.2B",
            "quantization_level": "Q4_K_M",
        }

    def _tag(self, m: FakeModel) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "name": m.key,
            "model": m.key,
            "modified_at": "2026-08-01T10:00:00Z",
            "size": m.size,
            "digest": "a80c4f17acd5" + "0" * 52,
            "details": self._details(m),
        }
        if _version(self.fake.version) >= (0, 30, 0):
            if m.context:
                entry["details"]["context_length"] = m.context
            entry["capabilities"] = list(m.capabilities)
        return entry

    def _ps(self) -> list[dict[str, Any]]:
        out = []
        with_ctx = _version(self.fake.version) >= (0, 10, 0)
        for key, ctx in self.fake.loaded.items():
            model = self.fake.models.get(key)
            if model is None:
                continue
            used = model.size + model.kv_bytes(ctx)
            entry: dict[str, Any] = {
                "name": key,
                "model": key,
                "size": used,
                "size_vram": used,
                "digest": "a80c4f17acd5" + "0" * 52,
                "details": self._details(model),
                "expires_at": "2099-01-01T00:00:00Z",
            }
            if with_ctx:
                entry["context_length"] = ctx
            out.append(entry)
        return out

    def _show(self, body: Mapping[str, Any]) -> None:
        name = body.get("model") or body.get("name") or ""
        model = self.fake.models.get(_key(str(name)))
        if model is None:
            self._send_error(404, f"model '{name}' not found")
            return
        arch = model.family
        info: dict[str, Any] = {
            "general.architecture": arch,
            f"{arch}.block_count": model.layers,
            f"{arch}.attention.head_count": model.kv_heads * 4,
            f"{arch}.attention.head_count_kv": model.kv_heads,
            f"{arch}.attention.key_length": model.head_dim,
            f"{arch}.attention.value_length": model.head_dim,
            f"{arch}.embedding_length": model.kv_heads * 4 * model.head_dim,
        }
        if model.context:
            info[f"{arch}.context_length"] = model.context
        self._send_json(
            200,
            {
                "modelfile": f"FROM {model.key}\n",
                "parameters": 'stop "<|eot_id|>"',
                "template": "{{ .Prompt }}",
                "details": self._details(model),
                "model_info": info,
                "capabilities": list(model.capabilities),
                "modified_at": "2026-08-01T10:00:00Z",
            },
        )

    def _chat(self, body: dict[str, Any]) -> None:
        fake = self.fake
        fault = fake._next_fault()
        name = str(body.get("model") or "")
        model = fake.models.get(_key(name))
        if fault is Fault.SLOW_START:
            fake._stopping.wait(fake.slow_start_seconds)
        if model is None or fault is Fault.NOT_FOUND:
            self._send_error(404, f"model '{name}' not found")
            return
        if fault is Fault.OUT_OF_MEMORY:
            self._send_error(500, OUT_OF_MEMORY)
            return
        think = body.get("think")
        if think not in (None, False) and "thinking" not in model.capabilities:
            self._send_error(400, f'"{name}" does not support thinking')
            return
        if body.get("tools") and "tools" not in model.capabilities:
            self._send_error(400, f"registry.ollama.ai/library/{model.key} does not support tools")
            return
        options = body.get("options") if isinstance(body.get("options"), dict) else {}
        honours_fields = _version(fake.version) >= (0, 12, 6)
        truncate = body.get("truncate") is not False or not honours_fields
        shift = body.get("shift") is not False or not honours_fields
        num_ctx = fake._use(model, options or {}, shift)
        messages = [m for m in body.get("messages") or () if isinstance(m, dict)]
        if not messages:
            self._finish_only(body, model, "load")
            return
        outcome = fake._fit(messages, num_ctx, truncate=truncate)
        if outcome is None:
            with fake._lock:
                fake.outcomes.append(
                    ChatOutcome(
                        model=model.key,
                        num_ctx=num_ctx,
                        prompt_tokens=sum(map(message_tokens, messages)),
                        refused=True,
                    )
                )
            if fake.refuse_in_stream and body.get("stream") is not False:
                self._stream_error(fake.refusal)
            else:
                self._send_error(400, fake.refusal)
            return
        outcome.model = model.key
        with fake._lock:
            fake.outcomes.append(outcome)
        # Past the message cut, the runner keeps only what fits (num_keep + the tail).
        prompt_eval = min(sum(map(message_tokens, outcome.kept_messages)), num_ctx)
        reply = fake._reply_for(body)
        thinks = "thinking" in model.capabilities and think is not False
        self._answer(body, model, reply, prompt_eval, thinks=thinks, fault=fault)

    def _pull(self, body: Mapping[str, Any]) -> None:
        """``/api/pull`` streamed like Ollama: the manifest, one layer's growing ``completed``
        of ``total`` bytes (from what is already on disk), then verifying and ``success``; a
        name the registry lacks is an error line in the 200 stream."""
        fake = self.fake
        name = _key(str(body.get("model") or body.get("name") or ""))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._line({"status": "pulling manifest"})
        model = fake.registry.get(name)
        if model is None:
            self._line({"error": "pull model manifest: file does not exist"})
            self._chunk(b"")
            return
        digest = "sha256:" + "5e1a" * 16
        total = model.size
        while True:
            with fake._lock:
                done = fake.pulled.get(name, 0)
            self._line(
                {
                    "status": f"pulling {digest[7:19]}",
                    "digest": digest,
                    "total": total,
                    "completed": done,
                }
            )
            if done >= total:
                break
            held = fake.pull_hold_at is not None and done >= fake.pull_hold_at
            if held and not fake.pull_release.is_set():
                # Still downloading, as far as the client can tell: the same figure again.
                if fake._stopping.wait(0.01):
                    return
                continue
            with fake._lock:
                fake.pulled[name] = min(total, done + fake.pull_step)
        for status in ("verifying sha256 digest", "writing manifest", "success"):
            self._line({"status": status})
        with fake._lock:
            fake.models[name] = model
        self._chunk(b"")

    def _finish_only(self, body: Mapping[str, Any], model: FakeModel, reason: str) -> None:
        final = {
            "model": model.key,
            "created_at": "2026-08-01T10:00:00Z",
            "message": {"role": "assistant", "content": ""},
            "done": True,
            "done_reason": reason,
        }
        self._send_json(200, final)

    def _answer(
        self,
        body: Mapping[str, Any],
        model: FakeModel,
        reply: FakeReply,
        prompt_eval: int,
        *,
        thinks: bool,
        fault: Fault | None,
    ) -> None:
        lines: list[dict[str, Any]] = []

        def piece(**message: Any) -> dict[str, Any]:
            return {
                "model": model.key,
                "created_at": "2026-08-01T10:00:00Z",
                "message": {"role": "assistant", "content": "", **message},
                "done": False,
            }

        size = max(1, reply.chunk)
        if thinks and reply.thinking:
            for i in range(0, len(reply.thinking), size):
                lines.append(piece(thinking=reply.thinking[i : i + size]))
        for i in range(0, len(reply.text), size):
            lines.append(piece(content=reply.text[i : i + size]))
        if reply.tool_calls:
            calls = [
                {"function": {"index": i, "name": c["name"], "arguments": c.get("arguments", {})}}
                for i, c in enumerate(reply.tool_calls)
            ]
            lines.append(piece(tool_calls=calls))
        output = count_tokens(reply.text) + (count_tokens(reply.thinking) if thinks else 0)
        final: dict[str, Any] = {
            "model": model.key,
            "created_at": "2026-08-01T10:00:01Z",
            "message": {"role": "assistant", "content": ""},
            "done": True,
            "done_reason": reply.done_reason,
            "total_duration": 1_000_000,
            "load_duration": 1_000,
        }
        # Ollama leaves zero counts out (omitempty).
        if prompt_eval:
            final["prompt_eval_count"] = prompt_eval
            final["prompt_eval_duration"] = 1_000
        if output:
            final["eval_count"] = output
            final["eval_duration"] = 1_000

        if body.get("stream") is False:
            whole = {
                **final,
                "message": {
                    "role": "assistant",
                    "content": reply.text,
                    **({"thinking": reply.thinking} if thinks and reply.thinking else {}),
                    **(
                        {"tool_calls": lines[-1]["message"]["tool_calls"]}
                        if reply.tool_calls
                        else {}
                    ),
                },
            }
            self._send_json(200, whole)
            return

        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        fake = self.fake
        for i, line in enumerate(lines):
            self._line(line)
            time.sleep(0.001)
            if fake.chat_hold_after is not None and i + 1 == fake.chat_hold_after:
                fake.chat_hold_after = None
                fake.chat_held.set()
                while not fake.chat_release.wait(0.01):
                    if fake._stopping.is_set():
                        return
            if i == 0 and fault is Fault.ERROR_MID_STREAM:
                self._line({"error": self.fake.mid_stream_error})
                self._chunk(b"")
                return
            if i == 0 and fault is Fault.MALFORMED_LINE:
                self._chunk(b'{"model": "' + model.key.encode() + b'", "message": {\n')
            if i == 0 and fault is Fault.DISCONNECT:
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                raise _DisconnectError
        if fault is not Fault.NO_DONE:
            self._line(final)
        self._chunk(b"")


@contextmanager
def running_ollama(
    models: Sequence[FakeModel] = DEFAULT_MODELS, **kwargs: Any
) -> Iterator[FakeOllama]:
    """A started ``FakeOllama`` that is stopped on exit (keyword arguments as its constructor)."""
    fake = FakeOllama(models, **kwargs).start()
    try:
        yield fake
    finally:
        fake.stop()
