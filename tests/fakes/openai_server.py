"""A fake OpenAI-style server (chat completions + model lists) in many flavours.

Flavours mirror where real servers put the window and how they refuse an oversized prompt:
openai, openrouter, groq, together, deepseek, mistral, xai, google, zhipu, vllm, lmstudio,
llamacpp (llama-server) and local (the bundled llama-cpp-python server, which answers an
oversized *streamed* request with an empty 200 stream and refuses only non-streamed ones).

A window, when set, is enforced: the server counts about four characters per token of the
messages and refuses in its flavour's words; with ``in_stream_shape`` a streamed request is
refused inside a 200 stream instead, the way gateways that already sent their status do
(``IN_STREAM_SHAPES``). Faults: "no-done", "malformed", "disconnect", "html", "429", "500",
"502", "503", "slow", "not-found", "sse-error-line".

The local and llamacpp flavours also tokenize on request like their servers
(``/extras/tokenize/count`` and ``/tokenize``), by the same count the window is enforced with;
``digit_tokens`` makes that count spend a token per digit, as real tokenizers do;
``byte_tokens`` a token per byte of a character outside ASCII, as a byte-level tokenizer does
with emoji or a script it has not learned, so such a paste is several times what Conch's
estimate says.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.http import LoopbackServer, Recorded, Reply

FLAVOURS = (
    "openai",
    "openrouter",
    "groq",
    "together",
    "deepseek",
    "mistral",
    "xai",
    "google",
    "zhipu",
    "vllm",
    "lmstudio",
    "llamacpp",
    "local",
)


@dataclass
class FakeModel:
    id: str
    window: int | None = 8192  # listed window, or the loaded one for local servers
    trained: int | None = None  # LM Studio max_context_length / llama.cpp n_ctx_train
    loaded: bool = True
    name: str = ""
    type: str = "llm"
    size_bytes: int = 4_920_000_000  # LM Studio lists the model file's size


@dataclass
class ScriptedCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class Script:
    """One scripted answer, streamed in small pieces."""

    text: list[str] = field(default_factory=lambda: ["Hello", ", world", "!"])
    thinking: list[str] = field(default_factory=list)
    calls: list[ScriptedCall] = field(default_factory=list)
    finish_reason: str = "stop"
    prompt_tokens: int = 21
    completion_tokens: int = 3
    cached_tokens: int = 5


def _texts(messages: Any) -> list[str]:
    texts: list[str] = []
    if isinstance(messages, list):
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                texts.append(content)
            elif isinstance(content, list):
                for part in content:
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        texts.append(part["text"])
    return texts


def _is_summary(messages: Any) -> bool:
    """Conch's summariser asks with the summary so far at the start of its one message."""
    texts = _texts([m for m in messages or [] if isinstance(m, dict) and m.get("role") == "user"])
    return bool(texts) and texts[0].startswith("<summary-so-far>")


def estimate(messages: Any) -> int:
    """About four characters per token over every text the request carries."""
    return sum(len(text) for text in _texts(messages)) // 4


def count_tokens(text: str, *, digit_tokens: bool = False, byte_tokens: bool = False) -> int:
    """The fake tokenizer: four characters a token; with ``digit_tokens`` one per digit; with
    ``byte_tokens`` one per UTF-8 byte of a character outside ASCII (a byte-level tokenizer on
    a script or emoji it has not learned)."""
    plain, tokens = text, 0
    if byte_tokens:
        plain = text.encode("ascii", "ignore").decode("ascii")
        tokens = len(text.encode("utf-8", "surrogatepass")) - len(plain)
    if not digit_tokens:
        return tokens + len(plain) // 4
    digits = sum(c.isdigit() for c in plain)
    return tokens + (len(plain) - digits) // 4 + digits


def too_long_reply(flavour: str, window: int, tokens: int) -> tuple[int, str]:
    """The status and body each flavour sends for a prompt over its window."""
    openai_words = (
        f"This model's maximum context length is {window} tokens. However, your messages "
        f"resulted in {tokens} tokens. Please reduce the length of the messages."
    )
    bodies: dict[str, tuple[int, Any]] = {
        "openai": (
            400,
            {
                "error": {
                    "message": openai_words,
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            },
        ),
        "deepseek": (
            400,
            {
                "error": {
                    "message": openai_words,
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_request_error",
                }
            },
        ),
        "openrouter": (
            400,
            {
                "error": {
                    "message": f"This endpoint's maximum context length is {window} tokens. "
                    f"However, you requested about {tokens} tokens ({tokens} of text input). "
                    'Please reduce the length of either one, or use the "middle-out" '
                    "transform to compress your prompt automatically.",
                    "code": 400,
                    "metadata": {"provider_name": None},
                }
            },
        ),
        "groq": (
            400,
            {
                "error": {
                    "message": "Please reduce the length of the messages or completion.",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            },
        ),
        "together": (
            422,
            {
                "error": {
                    "message": "Input validation error: `inputs` tokens + `max_new_tokens` must "
                    f"be <= {window}. Given: {tokens} `inputs` tokens and 64 `max_new_tokens`",
                    "type": "invalid_request_error",
                }
            },
        ),
        "mistral": (
            400,
            {
                "object": "error",
                "message": f"Prompt contains {tokens} tokens and 0 draft tokens, too large for "
                f"model with {window} maximum context length",
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            },
        ),
        "xai": (
            400,
            {
                "code": "Client specified an invalid argument",
                "error": f"This model's maximum prompt length is {window} but the request "
                f"contains {tokens} tokens.",
            },
        ),
        "google": (
            400,
            [
                {
                    "error": {
                        "code": 400,
                        "message": f"The input token count ({tokens}) exceeds the maximum "
                        f"number of tokens allowed ({window}).",
                        "status": "INVALID_ARGUMENT",
                    }
                }
            ],
        ),
        "zhipu": (400, {"error": {"code": "1261", "message": "Prompt exceeds max length"}}),
        "vllm": (
            400,
            {
                "error": {
                    "message": f"This model's maximum context length is {window} tokens. "
                    f"However, your request has {tokens} input tokens. Please reduce the "
                    "length of the input messages.",
                    "type": "BadRequestError",
                    "param": "input_tokens",
                    "code": 400,
                }
            },
        ),
        "lmstudio": (
            400,
            {
                "error": f"Trying to keep the first {tokens} tokens when context the overflows. "
                f"However, the model is loaded with context length of only {window} tokens, "
                "which is not enough. Try to load the model with a larger context length, or "
                "provide a shorter input"
            },
        ),
        "llamacpp": (
            400,
            {
                "error": {
                    "code": 400,
                    "message": f"request ({tokens} tokens) exceeds the available context size "
                    f"({window} tokens), try increasing it",
                    "type": "exceed_context_size_error",
                    "n_prompt_tokens": tokens,
                    "n_ctx": window,
                }
            },
        ),
        "local": (
            400,
            {
                "error": {
                    "message": f"This model's maximum context length is {window} tokens. "
                    f"However, you requested {tokens + 1} tokens ({tokens} in the messages, 1 "
                    "in the completion). Please reduce the length of the messages or "
                    "completion.",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            },
        ),
    }
    status, body = bodies[flavour]
    return status, json.dumps(body)


# Shapes of a too-long refusal sent inside a 200 stream, before any answer text.
IN_STREAM_SHAPES = (
    "openrouter",  # data: {"error": …, "choices": [… "finish_reason": "error"]}, upstream in raw
    "litellm",  # data: {"error": {…, "code": "400"}}, LiteLLM's proxy wording
    "vllm",  # data: {"error": {"object": "error", …}} then [DONE]
    "vllm-flat",  # data: {"object": "error", …} then [DONE]
    "llamacpp",  # data: {"error": {… "n_ctx": W}} (llama-server before it answered 400)
    "event-error",  # event: error + data: {"error": …}
    "mislabelled",  # the openrouter stream sent as text/plain
)


def in_stream_refusal(shape: str, window: int, tokens: int) -> list[str]:
    """The pieces of a 200 stream that refuses a prompt over ``window`` in ``shape``."""
    openai_words = (
        f"This model's maximum context length is {window} tokens. However, your messages "
        f"resulted in {tokens} tokens. Please reduce the length of the messages."
    )
    start = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
    }
    pieces = [f"data: {json.dumps(start)}\n\n"]
    if shape in ("openrouter", "mislabelled"):
        upstream = {"error": {"message": openai_words, "type": "invalid_request_error"}}
        error: dict[str, Any] = {
            "id": "gen-fake",
            "object": "chat.completion.chunk",
            "provider": "Upstream",
            "error": {
                "code": 400,
                "message": "Provider returned error",
                "metadata": {"raw": json.dumps(upstream), "provider_name": "Upstream"},
            },
            "choices": [
                {"index": 0, "delta": {"content": ""}, "finish_reason": "error"},
            ],
        }
        return [": OPENROUTER PROCESSING\n\n", *pieces, f"data: {json.dumps(error)}\n\n"]
    if shape == "litellm":
        message = (
            "litellm.ContextWindowExceededError: litellm.BadRequestError: "
            f"ContextWindowExceededError: OpenAIException - {openai_words}\n"
            "model=fake-model. context_window_fallbacks=None. fallbacks=None."
        )
        error = {"error": {"message": message, "type": None, "param": None, "code": "400"}}
        return [*pieces, f"data: {json.dumps(error)}\n\n"]
    if shape in ("vllm", "vllm-flat"):
        flat = {
            "object": "error",
            "message": f"The decoder prompt (length {tokens}) is longer than the maximum model "
            f"length of {window}. Make sure that `max_model_len` is no smaller than the number "
            "of text tokens.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
        error = flat if shape == "vllm-flat" else {"error": flat}
        return [*pieces, f"data: {json.dumps(error)}\n\n", "data: [DONE]\n\n"]
    if shape == "llamacpp":
        error = {
            "error": {
                "code": 400,
                "message": f"request ({tokens} tokens) exceeds the available context size "
                f"({window} tokens), try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": tokens,
                "n_ctx": window,
            }
        }
        return [f"data: {json.dumps(error)}\n\n"]
    if shape == "event-error":
        error = {
            "error": {
                "message": openai_words,
                "type": "invalid_request_error",
                "code": "context_length_exceeded",
            }
        }
        return [*pieces, f"event: error\ndata: {json.dumps(error)}\n\n"]
    raise ValueError(f"unknown in-stream shape {shape!r}")


_HTML_PAGE = (
    "<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>"
    "<center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center>"
    + "<!-- padding -->" * 40
    + "</body></html>"
)


class OpenAIStyleServer(LoopbackServer):
    """Set attributes between requests to change what the next request gets."""

    def __init__(
        self,
        flavour: str = "openai",
        *,
        models: list[FakeModel] | None = None,
        script: Script | None = None,
        window: int | None = None,
        api_key: str | None = None,
    ) -> None:
        super().__init__()
        if flavour not in FLAVOURS:
            raise ValueError(f"unknown flavour {flavour!r}")
        self.flavour = flavour
        self.models = models if models is not None else [FakeModel("fake-model")]
        self.script = script or Script()
        self.scripts: list[Script] = []  # the next requests' answers, one each, then ``script``
        self.window = window
        self.api_key = api_key
        self.fault: str | None = None
        self.stream_error: dict[str, Any] | None = None  # sent as data: after the first chunk
        # A streamed request over the window is refused inside a 200 stream in this shape
        # (IN_STREAM_SHAPES) instead of with the flavour's error status.
        self.in_stream_shape: str | None = None
        self.refusal: tuple[int, str] | None = None  # (status, body) for every chat request
        # A window for input and answer together, refused the way vLLM refuses a max_tokens
        # the prompt leaves no room for (the prompt itself fits).
        self.answer_window: int | None = None
        self.retry_after = "7"
        self.busy_says_when = False  # a 5xx fault carries retry_after too, as a busy server may
        self.slow_seconds = 3600.0  # the "slow" fault: silent until the fake stops
        self.lmstudio_rest = "v1"  # "v1", "v0" or "none": which LM Studio REST list exists
        self.props = True  # llama-server answers /props
        self.meta_n_ctx = (
            True  # llama-server's /v1/models meta names the loaded n_ctx (newer builds)
        )
        # What stands in front of (or replaces) the flavour's own list: "copilot" (GitHub
        # Copilot's capabilities.limits in each entry) or "litellm" (a LiteLLM proxy: a bare
        # /v1/models, windows in /model/info and /v1/model/info as model_info.max_input_tokens).
        self.gateway: str | None = None
        self.native_page_size = 50  # Gemini's native list: models per page
        self.native_list = True  # False: Gemini's native list refuses the key
        self.tokenizer = True  # local and llamacpp answer their tokenizer endpoint
        self.digit_tokens = False  # the fake tokenizer spends a token per digit
        self.byte_tokens = False  # and a token per byte of a character outside ASCII
        self.tokenizer_fault: str | None = None  # "500" or "no-count" for the next counts
        # LM Studio's load endpoint: held until this is set (a load that takes a while), and
        # counts of loads that made a second instance beside a loaded one.
        self.load_gate: threading.Event | None = None
        self.duplicate_loads = 0
        # Conch's summary requests (their message starts with the summary so far): answered
        # with ``summary_script`` when set, and held until ``summary_gate`` is set (a summary
        # that takes long). ``timeline`` has each request's arrival, "chat" or "summary", in
        # order, and with either set each summary's end, "summary-end".
        self.summary_script: Script | None = None
        self.summary_gate: threading.Event | None = None
        self.timeline: list[str] = []
        self.summary_arrived = threading.Event()  # set when a summary request arrives

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    @property
    def chat_requests(self) -> list[Recorded]:
        return self.requests_to("/chat/completions")

    # --- routes -------------------------------------------------------------------------------

    def handle(self, request: Recorded) -> Reply:
        path = request.path
        if request.method == "GET" and path == "/api/v1/models" and self.flavour == "lmstudio":
            if self.lmstudio_rest == "v1":
                return Reply.json(self._lmstudio_v1())
        elif request.method == "GET" and path == "/api/v0/models" and self.flavour == "lmstudio":
            if self.lmstudio_rest in ("v1", "v0"):
                return Reply.json(self._lmstudio_v0())
        elif request.method == "POST" and path.startswith("/api/v1/models/"):
            if self.flavour == "lmstudio" and self.lmstudio_rest == "v1":
                return self._lmstudio_load(request)
        elif request.method == "GET" and path == "/props" and self.flavour == "llamacpp":
            if self.props:
                window = self.models[0].window if self.models else None
                return Reply.json(
                    {"default_generation_settings": {"n_ctx": window}, "total_slots": 1}
                )
        elif request.method == "GET" and path == "/v1beta/models" and self.flavour == "google":
            return self._gemini_native(request)
        elif request.method == "GET" and path.endswith("/model/info") and self.gateway == "litellm":
            if self._unauthorised(request):
                return self._auth_reply()
            return Reply.json(self._litellm_info())
        elif request.method == "GET" and path.endswith("/models"):
            if self._unauthorised(request):
                return self._auth_reply()
            return Reply.json(self._model_list())
        elif request.method == "POST" and path.endswith("/chat/completions"):
            return self._chat(request)
        elif request.method == "POST" and path in ("/extras/tokenize/count", "/tokenize"):
            wanted = "local" if path == "/extras/tokenize/count" else "llamacpp"
            if self.flavour == wanted and self.tokenizer:
                return self._tokenize(request)
        return super().handle(request)

    def count(self, text: str) -> int:
        return count_tokens(text, digit_tokens=self.digit_tokens, byte_tokens=self.byte_tokens)

    def _tokenize(self, request: Recorded) -> Reply:
        if self._unauthorised(request):
            return self._auth_reply()
        if self.tokenizer_fault == "500":
            return Reply.json({"error": {"message": "tokenizer failed"}}, status=500)
        body = request.json or {}
        if self.flavour == "local":  # llama-cpp-python: the count, BOS included
            if self.tokenizer_fault == "no-count":
                return Reply.json({"tokens": "many"})
            return Reply.json({"count": self.count(str(body.get("input", ""))) + 1})
        # llama-server: the tokens themselves (their ids do not matter here)
        tokens = self.count(str(body.get("content", ""))) + (1 if body.get("add_special") else 0)
        if self.tokenizer_fault == "no-count":
            return Reply.json({"count": tokens})
        return Reply.json({"tokens": list(range(tokens))})

    @property
    def count_requests(self) -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if r.path in ("/extras/tokenize/count", "/tokenize")]

    def _unauthorised(self, request: Recorded) -> bool:
        if self.api_key is None:
            return False
        return request.headers.get("authorization") != f"Bearer {self.api_key}"

    def _auth_reply(self) -> Reply:
        return Reply.json(
            {
                "error": {
                    "message": "Incorrect API key provided: sk-***. You can find your API key "
                    "at https://platform.openai.com/account/api-keys.",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
            },
            status=401,
        )

    def _gemini_native(self, request: Recorded) -> Reply:
        """Gemini's own list: ``inputTokenLimit`` per model, paged, the key in x-goog-api-key."""
        wrong_key = (
            self.api_key is not None and request.headers.get("x-goog-api-key") != self.api_key
        )
        if wrong_key or not self.native_list:
            return Reply.json(
                {"error": {"code": 403, "message": "Method doesn't allow unregistered callers"}},
                status=403,
            )
        params = dict(part.split("=", 1) for part in request.query.split("&") if "=" in part)
        start = int(params.get("pageToken") or 0)
        size = min(int(params.get("pageSize") or 50), self.native_page_size)
        page = self.models[start : start + size]
        listed: dict[str, Any] = {
            "models": [
                {
                    "name": f"models/{model.id}",
                    "displayName": model.name or model.id,
                    "inputTokenLimit": model.window,
                    "outputTokenLimit": 8192,
                    "supportedGenerationMethods": ["generateContent", "countTokens"],
                }
                for model in page
            ]
        }
        if start + size < len(self.models):
            listed["nextPageToken"] = str(start + size)
        return Reply.json(listed)

    def _litellm_info(self) -> Any:
        """One entry per deployment; several may share a model group's name."""
        return {
            "data": [
                {
                    "model_name": model.id,
                    "litellm_params": {"model": f"openai/{model.id}"},
                    "model_info": {
                        "id": f"deployment-{position}",
                        "max_tokens": 4096,
                        "max_input_tokens": model.window,
                        "max_output_tokens": 4096,
                        "mode": "chat",
                    },
                }
                for position, model in enumerate(self.models)
            ]
        }

    def _model_list(self) -> Any:
        entries: list[dict[str, Any]] = []
        for model in self.models:
            entry: dict[str, Any] = {"id": model.id, "object": "model", "owned_by": "fake"}
            flavour = self.flavour
            if self.gateway == "litellm":
                if any(e["id"] == model.id for e in entries):
                    continue  # LiteLLM lists a model group once, however many deployments
                entry["owned_by"] = "openai"
            elif self.gateway == "copilot":
                entry.update(
                    {
                        "name": model.name or model.id,
                        "vendor": "Azure OpenAI",
                        "version": model.id,
                        "model_picker_enabled": True,
                        "capabilities": {
                            "family": model.id,
                            "type": "chat",
                            "object": "model_capabilities",
                            "tokenizer": "o200k_base",
                            "limits": {
                                "max_context_window_tokens": model.trained or model.window,
                                "max_prompt_tokens": model.window,
                                "max_output_tokens": 4096,
                            },
                            "supports": {"streaming": True, "tool_calls": True},
                        },
                    }
                )
            elif flavour == "openrouter":
                entry["name"] = model.name or model.id
                entry["context_length"] = model.trained or model.window
                entry["top_provider"] = {
                    "context_length": model.window,
                    "max_completion_tokens": 4096,
                }
            elif flavour == "groq":
                entry["context_window"] = model.window
                entry["active"] = True
            elif flavour == "together":
                entry["context_length"] = model.window
                entry["type"] = "chat"
            elif flavour == "mistral":
                entry["max_context_length"] = model.window
                entry["capabilities"] = {"completion_chat": True}
            elif flavour == "vllm":
                entry["max_model_len"] = model.window
                entry["owned_by"] = "vllm"
            elif flavour == "llamacpp":
                entry["owned_by"] = "llamacpp"
                entry["meta"] = {"n_ctx_train": model.trained, "n_vocab": 32000}
                if self.meta_n_ctx and model.window is not None:
                    entry["meta"]["n_ctx"] = model.window  # the loaded window, all slots
            elif flavour == "google":
                entry["id"] = f"models/{model.id}"
            entries.append(entry)
        if self.flavour == "together":
            return entries  # Together's list is a bare array
        return {"object": "list", "data": entries}

    def _lmstudio_v0(self) -> Any:
        data = []
        for model in self.models:
            entry: dict[str, Any] = {
                "id": model.id,
                "object": "model",
                "type": model.type,
                "state": "loaded" if model.loaded else "not-loaded",
                "max_context_length": model.trained,
            }
            if model.loaded:
                entry["loaded_context_length"] = model.window
            data.append(entry)
        return {"object": "list", "data": data}

    def _lmstudio_v1(self) -> Any:
        return {
            "models": [
                {
                    "key": model.id,
                    "type": model.type,
                    "architecture": "llama",
                    "size_bytes": model.size_bytes,
                    "max_context_length": model.trained,
                    "loaded_instances": (
                        [{"id": model.id, "config": {"context_length": model.window}}]
                        if model.loaded
                        else []
                    ),
                }
                for model in self.models
            ]
        }

    def _lmstudio_load(self, request: Recorded) -> Reply:
        """``/api/v1/models/load`` and ``/unload`` as LM Studio 0.4 has them: a load names
        ``context_length`` at the top level and makes a new instance (a second one if the model
        is already loaded); an unload names the instance. The enforced window follows."""
        body = request.json or {}
        action = request.path.rsplit("/", 1)[-1]
        wanted = body.get("model") if action == "load" else body.get("instance_id")
        model = next((m for m in self.models if m.id == wanted), None)
        if model is None:
            return Reply.json({"error": {"message": f"Model '{wanted}' not found"}}, status=404)
        if action == "unload":
            model.loaded = False
            return Reply.json({"instance_id": model.id})
        if action != "load":
            return super().handle(request)
        while self.load_gate is not None and not self.load_gate.wait(0.02):
            if self.stopping.is_set():
                return Reply.json({"error": {"message": "LM Studio is shutting down"}}, 503)
        length = body.get("context_length")
        if not isinstance(length, int) or length <= 0:
            length = 4096  # LM Studio's own default for a model without saved settings
        if model.trained and length > model.trained:
            message = f"context_length {length} exceeds the model's maximum {model.trained}"
            return Reply.json({"error": {"message": message}}, status=400)
        if model.loaded:
            self.duplicate_loads += 1
        model.loaded = True
        model.window = length
        if self.window is not None:
            self.window = length
        reply: dict[str, Any] = {
            "type": "llm",
            "instance_id": model.id,
            "load_time_seconds": 0.01,
            "status": "loaded",
        }
        if body.get("echo_load_config"):
            reply["load_config"] = {"context_length": length}
        return Reply.json(reply)

    # --- chat ---------------------------------------------------------------------------------

    def _chat(self, request: Recorded) -> Reply:
        if self._unauthorised(request):
            return self._auth_reply()
        body = request.json or {}
        streaming = bool(body.get("stream"))
        fault = self.fault
        if self.refusal is not None:
            status, text = self.refusal
            return Reply.text(text, status, "application/json")
        if fault == "html":
            return Reply.text(_HTML_PAGE, 502, "text/html")
        if fault == "429":
            return Reply.json(
                {"error": {"message": "Rate limit reached for requests", "code": "rate_limit"}},
                status=429,
                headers={"retry-after": self.retry_after},
            )
        if fault in ("500", "502", "503"):
            return Reply.json(
                {"error": {"message": "The server had an error while processing your request."}},
                status=int(fault),
                headers={"retry-after": self.retry_after} if self.busy_says_when else None,
            )
        if fault == "not-found":
            return Reply.json(
                {
                    "error": {
                        "message": f"The model `{body.get('model')}` does not exist.",
                        "code": "model_not_found",
                    }
                },
                status=404,
            )
        tokens = estimate(body.get("messages"))
        if self.digit_tokens or self.byte_tokens:
            tokens = self.count("".join(_texts(body.get("messages"))))
        if self.window is not None and tokens > self.window:
            if self.flavour == "local" and streaming:
                # llama-cpp-python: the check runs after the 200 and the stream just ends.
                return Reply.stream([])
            if self.in_stream_shape is not None and streaming:
                pieces = in_stream_refusal(self.in_stream_shape, self.window, tokens)
                kind = "text/plain" if self.in_stream_shape == "mislabelled" else None
                return Reply.stream(pieces, kind or "text/event-stream")
            status, text = too_long_reply(self.flavour, self.window, tokens)
            return Reply.text(text, status, "application/json")
        summary = _is_summary(body.get("messages"))
        with self.lock:
            self.timeline.append("summary" if summary else "chat")
        if summary:
            self.summary_arrived.set()
        if summary and (self.summary_gate is not None or self.summary_script is not None):
            return self._summary(body, streaming)
        asked = body.get("max_completion_tokens") or body.get("max_tokens") or 0
        if self.answer_window is not None and tokens + int(asked) > self.answer_window:
            w = self.answer_window
            words = (
                f"'max_tokens' or 'max_completion_tokens' is too large: {asked}. This model's "
                f"maximum context length is {w} tokens and your request has {tokens} input "
                f"tokens ({asked} > {w} - {tokens})."
            )
            error = {"message": words, "type": "BadRequestError", "param": None, "code": 400}
            return Reply.json({"error": error}, status=400)
        if self.scripts:  # a tool loop: each answer in turn (a call, then words)
            self.script = self.scripts.pop(0)
        if not streaming:
            reply = Reply.json(self._whole())
        else:
            reply = Reply.stream(self._chunks(body))
            if fault == "disconnect":
                reply.cut_after = 3
        if fault == "slow":
            reply.head_delay = self.slow_seconds
        return reply

    def _summary(self, body: Any, streaming: bool) -> Reply:
        gate = self.summary_gate
        if gate is not None:
            while not gate.wait(0.05):
                if self.stopping.is_set():
                    return Reply.json({"error": {"message": "shutting down"}}, status=503)
        script, self.script = self.script, self.summary_script or self.script
        try:
            reply = Reply.json(self._whole()) if not streaming else Reply.stream(self._chunks(body))
        finally:
            self.script = script
        with self.lock:
            self.timeline.append("summary-end")
        return reply

    def _thinking_field(self) -> str:
        return "reasoning" if self.flavour in ("openrouter", "groq") else "reasoning_content"

    def _whole(self) -> Any:
        script = self.script
        message: dict[str, Any] = {"role": "assistant", "content": "".join(script.text)}
        if script.thinking:
            message[self._thinking_field()] = "".join(script.thinking)
        if script.calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                }
                for call in script.calls
            ]
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": script.finish_reason}],
            "usage": self._usage(),
        }

    def _usage(self) -> dict[str, Any]:
        script = self.script
        return {
            "prompt_tokens": script.prompt_tokens,
            "completion_tokens": script.completion_tokens,
            "total_tokens": script.prompt_tokens + script.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": script.cached_tokens},
        }

    def _chunks(self, body: dict[str, Any]) -> list[str]:
        script = self.script
        fault = self.fault

        def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
            obj = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            return f"data: {json.dumps(obj)}\n\n"

        pieces = [chunk({"role": "assistant", "content": ""})]
        if self.flavour == "openrouter":
            pieces.insert(0, ": OPENROUTER PROCESSING\n\n")
        for thought in script.thinking:
            pieces.append(chunk({self._thinking_field(): thought}))
        for position, text in enumerate(script.text):
            pieces.append(chunk({"content": text}))
            if position == 0 and fault == "malformed":
                pieces.append("data: {not json at all\n\n")
            if position == 0 and self.stream_error is not None:
                pieces.append(f"data: {json.dumps({'error': self.stream_error})}\n\n")
                return pieces
            if position == 0 and fault == "sse-error-line":
                # Old llama-server: a bare error field, then the stream ends.
                refusal = {
                    "code": 400,
                    "message": "the request exceeds the available context size. try increasing "
                    "the context size or enable context shift",
                    "type": "invalid_request_error",
                }
                pieces.append(f"error: {json.dumps(refusal)}\n\n")
                return pieces
        for index, call in enumerate(script.calls):
            arguments = json.dumps(call.arguments)
            half = len(arguments) // 2
            pieces.append(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": call.id,
                                "type": "function",
                                "function": {"name": call.name, "arguments": arguments[:half]},
                            }
                        ]
                    }
                )
            )
            pieces.append(
                chunk(
                    {"tool_calls": [{"index": index, "function": {"arguments": arguments[half:]}}]}
                )
            )
        if fault == "no-done":
            return pieces
        pieces.append(chunk({}, script.finish_reason))
        wants_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if wants_usage or self.flavour == "mistral":
            usage_chunk = {"id": "chatcmpl-fake", "choices": [], "usage": self._usage()}
            pieces.append(f"data: {json.dumps(usage_chunk)}\n\n")
        pieces.append("data: [DONE]\n\n")
        return pieces


# --- the Responses API, as the Codex CLI speaks it --------------------------------------------


CODEX_ECHOED = "larch-beds-listed"  # what the ``[[echo]]`` command prints


def _response_said(body: dict[str, Any]) -> str:
    """The newest person text in a Responses API request (Codex sends ``input`` items)."""
    said = ""
    for item in body.get("input") or []:
        if not isinstance(item, dict) or item.get("role") != "user":
            continue
        for part in item.get("content") or []:
            if isinstance(part, dict) and part.get("type") == "input_text":
                text = str(part.get("text", ""))
                if not text.lstrip().startswith("<"):  # Codex's own context notes
                    said = text
    return said.strip()


class ResponsesServer(LoopbackServer):
    """``/v1/responses`` as SSE: answers ``You said: <newest person text>`` in two deltas.

    A message containing ``[[echo]]`` makes the model run ``echo`` (Codex's ``exec_command``)
    with words of its own (``CODEX_ECHOED``) first, and ``[[touch]]`` makes it run ``touch
    ran.txt`` (which changes a file: Codex asks before it under its ``untrusted`` approval
    policy); a request carrying the command's output is
    answered in words. Each request reports ``input_tokens`` (the first request of a turn) or
    ``after_tool_input`` (the one after a command) as its usage.

    ``/v1/models`` lists ``models``. Every request is recorded (``responses_requests``).
    """

    def __init__(self, models: list[str] | None = None) -> None:
        super().__init__()
        self.models = models or ["gpt-fake"]
        self.input_tokens = 12
        self.after_tool_input: int | None = None

    @property
    def responses_requests(self) -> list[Recorded]:
        return self.requests_to("/responses")

    def handle(self, request: Recorded) -> Reply:
        if request.method == "GET" and request.path.endswith("/models"):
            return Reply.json(
                {"object": "list", "data": [{"id": m, "object": "model"} for m in self.models]}
            )
        if request.method == "POST" and request.path.endswith("/responses"):
            return Reply.stream(self._events(request.json or {}))
        return super().handle(request)

    def _events(self, body: dict[str, Any]) -> list[str]:
        items = [i for i in body.get("input") or [] if isinstance(i, dict)]
        after_tool = bool(items) and items[-1].get("type") == "function_call_output"
        text = f"You said: {_response_said(body) or '(nothing)'}"
        if after_tool:
            text = "Understood; the command ran."
        half = len(text) // 2
        rid, mid = "resp_fake", "msg_fake"
        tokens = self.input_tokens
        if after_tool and self.after_tool_input is not None:
            tokens = self.after_tool_input

        def event(data: dict[str, Any]) -> str:
            return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n"

        usage = {
            "input_tokens": tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": tokens + 5,
        }
        said = _response_said(body)
        if ("[[echo]]" in said or "[[touch]]" in said) and not after_tool:
            command = "touch ran.txt" if "[[touch]]" in said else f"echo {CODEX_ECHOED}"
            call = {
                "id": "fc_fake",
                "type": "function_call",
                "status": "completed",
                "call_id": "call_fake_1",
                "name": "exec_command",
                "arguments": json.dumps({"cmd": command}),
            }
            started: dict[str, Any] = {
                "id": rid,
                "object": "response",
                "model": body.get("model"),
                "output": [],
            }
            return [
                event(
                    {"type": "response.created", "response": {**started, "status": "in_progress"}}
                ),
                event({"type": "response.output_item.added", "output_index": 0, "item": call}),
                event({"type": "response.output_item.done", "output_index": 0, "item": call}),
                event(
                    {
                        "type": "response.completed",
                        "response": {
                            **started,
                            "status": "completed",
                            "output": [call],
                            "usage": usage,
                        },
                    }
                ),
            ]

        message = {
            "id": mid,
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        base: dict[str, Any] = {
            "id": rid,
            "object": "response",
            "model": body.get("model"),
            "output": [],
        }
        return [
            event({"type": "response.created", "response": {**base, "status": "in_progress"}}),
            event(
                {
                    "type": "response.output_item.added",
                    "output_index": 0,
                    "item": {**message, "status": "in_progress", "content": []},
                }
            ),
            *(
                event(
                    {
                        "type": "response.output_text.delta",
                        "item_id": mid,
                        "output_index": 0,
                        "content_index": 0,
                        "delta": piece,
                    }
                )
                for piece in (text[:half], text[half:])
            ),
            event({"type": "response.output_item.done", "output_index": 0, "item": message}),
            event(
                {
                    "type": "response.completed",
                    "response": {
                        **base,
                        "status": "completed",
                        "output": [message],
                        "usage": usage,
                    },
                }
            ),
        ]
