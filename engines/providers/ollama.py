"""Ollama's native API: ``/api/chat`` streamed as NDJSON, plus the model list and its windows.

Why native and not Ollama's ``/v1``: only the native API can set ``num_ctx`` per request and
ask for a refusal instead of a silent cut (``truncate``/``shift``), and only it says which
window a model is loaded with. See docs/local_servers.md §A.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from engines.base import (
    Done,
    Event,
    Message,
    ModelInfo,
    Note,
    ProblemKind,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallData,
    Usage,
)
from engines.providers import ndjson
from engines.providers.base import ChatRequest, ProviderError, closing_stream
from engines.providers.deadlines import (
    FIRST_EVENT,
    Clock,
    Deadlines,
    Pace,
    StreamDeadlineError,
    deadlines_for,
    paced,
)
from engines.providers.errors import (
    broken_stream,
    describe_body,
    error_from_redirect,
    error_from_response,
    error_from_stream_payload,
    error_from_transport,
    is_redirect,
)
from engines.providers.http import make_client, request_json
from engines.providers.ollama_window import (
    ContextFor,
    model_key,
    supports_no_truncate,
    total_memory,
)
from engines.providers.registry import PROVIDERS
from engines.window import PICTURE_TOKENS, UNKNOWN_WINDOW_LOCAL, estimate_tokens

DEFAULT_BASE_URL = PROVIDERS["ollama"].address
DEFAULT_PORT = int(DEFAULT_BASE_URL.rsplit(":", 1)[1])  # 11434

# Each message costs a few tokens of template around its text (role markers, separators).
_MESSAGE_OVERHEAD = 4
# Ollama read less than this share of an over-window request: it cut the chat quietly.
_TRUNCATION_SHARE = 0.5
# Request fields a caller may pass through ChatRequest.extra. `options` is merged, but num_ctx
# is always Conch's own (a different one would reload the model).
_PASSTHROUGH = ("think", "keep_alive", "format")


def ollama_base_url(value: str | None = None) -> str:
    """The URL to reach Ollama at, read like Ollama reads ``OLLAMA_HOST``.

    Accepts ``host``, ``host:port``, ``scheme://host[:port][/path]``. Without a scheme the port
    defaults to 11434; ``http://host`` means port 80 and ``https://host`` 443, as in Ollama.
    A listen-everywhere address (``0.0.0.0``, ``::``) is reached on 127.0.0.1.
    """
    text = (value if value is not None else os.environ.get("OLLAMA_HOST", "")).strip()
    if not text:
        return DEFAULT_BASE_URL
    if "://" in text:
        scheme, _, rest = text.partition("://")
        scheme = scheme.lower() or "http"
        default_port = 443 if scheme == "https" else 80
    else:
        scheme, rest, default_port = "http", text, DEFAULT_PORT
    hostport, _, path = rest.partition("/")
    parts = urlsplit(f"//{hostport}")
    try:
        port = parts.port
    except ValueError:  # not a number or out of range: Ollama falls back to the default too
        port = None
    host = parts.hostname or ""
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = "127.0.0.1"
    if ":" in host:  # an IPv6 literal needs its brackets back
        host = f"[{host}]"
    url = f"{scheme}://{host}:{port or default_port}"
    return f"{url}/{path.strip('/')}" if path.strip("/") else url


@dataclass(frozen=True)
class ShownModel:
    """What ``/api/show`` says about a model that matters here."""

    trained: int | None
    capabilities: frozenset[str]


def _trained_window(info: Mapping[str, Any]) -> int | None:
    arch = info.get("general.architecture")
    value = info.get(f"{arch}.context_length") if isinstance(arch, str) else None
    if not isinstance(value, int):
        # An architecture key that does not match its own prefix: take any context_length.
        value = next(
            (v for k, v in info.items() if k.endswith(".context_length") and isinstance(v, int)),
            None,
        )
    return value if isinstance(value, int) and value > 0 else None


async def _read_some(response: httpx.Response, limit: int = 64 * 1024) -> str:
    """The start of a body that is not the stream expected (enough to describe it)."""
    data = bytearray()
    async with closing_stream(response.aiter_bytes()) as chunks:
        async for chunk in chunks:
            data += chunk
            if len(data) >= limit:
                break
    return data[:limit].decode("utf-8", errors="replace")


def _entries(data: Any) -> list[dict[str, Any]]:
    """The ``models`` list of a ``/api/tags`` or ``/api/ps`` answer, objects only."""
    models = data.get("models") if isinstance(data, dict) else None
    return [m for m in models if isinstance(m, dict)] if isinstance(models, list) else []


def _tool(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A tool in Ollama's (OpenAI-like) shape, from that shape or a bare name/schema one."""
    if spec.get("type") == "function" and isinstance(spec.get("function"), Mapping):
        return dict(spec)
    return {
        "type": "function",
        "function": {
            "name": spec.get("name", ""),
            "description": spec.get("description", ""),
            "parameters": spec.get("parameters") or spec.get("input_schema") or {"type": "object"},
        },
    }


def _message(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "content": message.text}
    if message.pictures:
        out["images"] = [p.data for p in message.pictures]
    if message.role == "assistant" and message.tool_calls:
        out["tool_calls"] = [
            {"function": {"name": c.name, "arguments": dict(c.arguments)}}
            for c in message.tool_calls
        ]
    if message.role == "tool":
        out["tool_name"] = message.tool_name
        if message.tool_call_id:
            out["tool_call_id"] = message.tool_call_id
    return out


def _sent_estimate(body: Mapping[str, Any]) -> int:
    """Tokens the request carries, by the design's estimate (for the silent-cut check)."""
    total = 0
    for m in body.get("messages", ()):
        total += _MESSAGE_OVERHEAD + estimate_tokens(str(m.get("content", "")))
        total += PICTURE_TOKENS * len(m.get("images", ()))
    if body.get("tools"):
        total += estimate_tokens(json.dumps(body["tools"]))
    return total


def _tool_call(raw: Any, index: int) -> ToolCallData | None:
    if not isinstance(raw, Mapping):
        return None
    fn = raw.get("function")
    if not isinstance(fn, Mapping) or not fn.get("name"):
        return None
    args = fn.get("arguments")
    if isinstance(args, str):  # Ollama sends an object; a proxy may have turned it into text
        try:
            args = json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError):
            args = {"_unparsed": args}  # the tool loop tells the model it was not JSON
    if not isinstance(args, dict):
        args = {}
    call_id = raw.get("id") or f"ollama-{uuid.uuid4().hex[:12]}-{index}"
    return ToolCallData(id=str(call_id), name=str(fn["name"]), arguments=args)


class OllamaAdapter:
    """``ProviderAdapter`` for Ollama's native API.

    Every chat request carries ``options.num_ctx`` = ``context_for(model)``, decided once per
    model and never changed (so Ollama never reloads the model on Conch's account), and, on
    servers that understand them, ``truncate: false`` and ``shift: false`` so an overflow is a
    refusal the session can heal instead of a silent cut.
    """

    name = "ollama"
    usage_counts_cache = False  # prompt_eval_count leaves out what it had cached
    label = PROVIDERS["ollama"].label
    local = True
    continues_answer = (
        True  # a final assistant message is continued (engines/context/continuation.py)
    )

    def __init__(
        self,
        base_url: str | None = None,
        *,
        client: httpx.AsyncClient | None = None,
        memory: int | Callable[[], int | None] | None = total_memory,
        read_timeout: float = FIRST_EVENT,
        meta_timeout: float = 30.0,
        deadlines: Deadlines | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.base_url = (base_url or ollama_base_url()).rstrip("/")
        self._owns_client = client is None
        # A model that is not loaded yet can take minutes to load before its first token.
        self._chat_timeout = httpx.Timeout(read_timeout, connect=5.0)
        self._client = client or make_client(local=True, timeout=self._chat_timeout)
        self._meta_timeout = httpx.Timeout(meta_timeout, connect=5.0)
        self._windows = ContextFor(self, memory=memory)
        self._shown: dict[str, ShownModel] = {}
        self._version: str | None = None
        self._deadlines = deadlines  # None: sized for each request (deadlines_for)
        self._clock = clock

    # --- what the server knows ----------------------------------------------------------------

    async def _request_json(self, method: str, path: str, body: Any = None) -> Any:
        def not_json(response: httpx.Response) -> ProviderError:
            return ProviderError(
                ProblemKind.SERVER_ERROR,
                f"Ollama's {path} answered with something that is not JSON.",
                status=response.status_code,
            )

        return await request_json(
            self._client,
            method,
            self.base_url + path,
            not_json=not_json,
            json=body,
            timeout=self._meta_timeout,
        )

    async def _get_if_there(self, path: str) -> Any:
        """GET ``path``; None when the server is older than that endpoint (404)."""
        try:
            return await self._request_json("GET", path)
        except ProviderError as exc:
            if exc.status != 404:
                raise
            return None

    async def version(self) -> str | None:
        """The server's version (``/api/version``), asked once; None when it does not say."""
        if self._version is None:
            data = await self._get_if_there("/api/version")  # None: older than the endpoint
            value = data.get("version") if isinstance(data, dict) else None
            self._version = value if isinstance(value, str) else ""
        return self._version or None

    async def loaded_windows(self) -> dict[str, int]:
        """Model → the window it is loaded with, from ``/api/ps`` (v0.10.0+ says it)."""
        data = await self._get_if_there("/api/ps")
        if data is None:
            return {}  # a server older than /api/ps cannot say what is loaded
        out: dict[str, int] = {}
        for entry in _entries(data):
            name = entry.get("name") or entry.get("model")
            if isinstance(name, str) and name:
                ctx = entry.get("context_length")
                out[model_key(name)] = ctx if isinstance(ctx, int) and ctx > 0 else 0
        return out

    async def show(self, model: str) -> ShownModel:
        """The trained window and capabilities of ``model`` (``/api/show``), asked once."""
        key = model_key(model)
        if key not in self._shown:
            data = await self._request_json("POST", "/api/show", {"model": key})
            if not isinstance(data, dict):
                data = {}
            info = data.get("model_info")
            caps = data.get("capabilities")
            self._shown[key] = ShownModel(
                trained=_trained_window(info) if isinstance(info, dict) else None,
                capabilities=frozenset(c for c in caps or () if isinstance(c, str)),
            )
        return self._shown[key]

    async def trained_window(self, model: str) -> int | None:
        return (await self.show(model)).trained

    def capabilities(self, model: str) -> frozenset[str]:
        """What the model can do ("tools", "vision", "thinking", …), once it has been shown."""
        shown = self._shown.get(model_key(model))
        return shown.capabilities if shown else frozenset()

    async def tool_support(self, model: str) -> bool:
        """Whether ``model`` takes native tools: only when ``/api/show`` lists the "tools"
        capability (Ollama refuses a request with tools for any other model)."""
        return "tools" in (await self.show(model)).capabilities

    async def context_for(self, model: str) -> int:
        """The ``num_ctx`` Conch sends for ``model``: the same value for the adapter's life."""
        return await self._windows.context_for(model)

    def use_window(self, model: str, window: int) -> None:
        """Send ``window`` as ``model``'s num_ctx from now on (the person chose to reload it
        with a bigger one and the caller loads it so)."""
        self._windows.choose(model, window)

    # --- ProviderAdapter ----------------------------------------------------------------------

    async def list_models(self) -> list[ModelInfo]:
        data = await self._request_json("GET", "/api/tags")
        names: list[str] = []
        for entry in _entries(data):
            name = entry.get("name") or entry.get("model")
            if isinstance(name, str) and name and model_key(name) not in names:
                names.append(model_key(name))
        loaded = await self.loaded_windows()
        shown = await asyncio.gather(*(self.show(n) for n in names), return_exceptions=True)
        models: list[ModelInfo] = []
        for name, info in zip(names, shown, strict=True):
            if isinstance(info, BaseException) and not isinstance(info, Exception):
                raise info
            if isinstance(info, Exception):
                # One model Ollama cannot describe does not hide the others; nothing is
                # decided for it, so the next list asks again.
                ready = False
                window = self._windows.known(name) or min(UNKNOWN_WINDOW_LOCAL, self._windows.cap)
            elif info.capabilities and "completion" not in info.capabilities:
                continue  # an embedding model cannot chat
            else:
                ready = True
                window = self._windows.decide(name, loaded=loaded.get(name), trained=info.trained)
            models.append(
                ModelInfo(
                    provider=self.name,
                    id=name,
                    label=name.removesuffix(":latest"),
                    context=window,
                    local=True,
                    ready=ready,
                    loaded=name in loaded,
                )
            )
        return models

    def cheap_models(self) -> tuple[str, ...]:
        # A server on this computer: loading a second model for summaries would evict the
        # chat's own, so summaries always use the chat's model.
        return ()

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    def _body(self, request: ChatRequest, num_ctx: int, *, no_truncate: bool) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        messages.extend(_message(m) for m in request.messages)
        options: dict[str, Any] = {}
        if isinstance(request.extra.get("options"), Mapping):
            options.update(request.extra["options"])
        options["num_ctx"] = num_ctx
        if request.max_output_tokens > 0:
            options["num_predict"] = request.max_output_tokens
        if request.temperature is not None:
            options["temperature"] = request.temperature
        body: dict[str, Any] = {
            "model": request.model,
            "messages": messages,
            "stream": True,
            "options": options,
        }
        if request.tools:
            body["tools"] = [_tool(t) for t in request.tools]
        for key in _PASSTHROUGH:
            # `think` only when asked: sending false to a model that cannot think is fine, but
            # sending true to one that cannot is a 400, and absent lets Ollama choose.
            if key in request.extra:
                body[key] = request.extra[key]
        if no_truncate:
            body["truncate"] = False
            body["shift"] = False
        return body

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        num_ctx = await self.context_for(request.model)
        try:
            version = await self.version()
        except ProviderError as exc:
            if exc.kind in (ProblemKind.UNREACHABLE, ProblemKind.TIMEOUT):
                raise
            version = None  # a server that hides its version is treated as an old one
        body = self._body(request, num_ctx, no_truncate=supports_no_truncate(version))
        answered = False  # answer text or a tool call arrived: a failure now is partial
        pace = Pace(self._deadlines or deadlines_for(request.max_output_tokens), self._clock)
        try:
            async with self._client.stream(
                "POST", self.base_url + "/api/chat", json=body, timeout=self._chat_timeout
            ) as response:
                if is_redirect(response.status_code):
                    raise error_from_redirect(response)
                if response.status_code >= 400:
                    raw = (await response.aread()).decode("utf-8", errors="replace")
                    err = error_from_response(response.status_code, raw, response.headers)
                    if err.too_long and err.window is None:
                        err.window = num_ctx
                    raise err
                if "html" in response.headers.get("content-type", "").lower():
                    # Something in front of Ollama (a proxy, a captive portal) answered.
                    page = await _read_some(response)
                    raise broken_stream(describe_body(page, response.status_code), partial=False)
                # Each layer is closed as soon as the answer ends (see closing_stream).
                async with (
                    closing_stream(paced(response.aiter_bytes(), pace)) as chunks,
                    closing_stream(ndjson.lines(chunks)) as lines,
                    closing_stream(ndjson.objects(lines)) as objects,
                ):
                    async for obj in objects:
                        if obj.get("error"):
                            raise self._in_band_error(obj, num_ctx, partial=answered)
                        message = obj.get("message")
                        if isinstance(message, Mapping):
                            thinking = message.get("thinking")
                            if isinstance(thinking, str) and thinking:
                                pace.progress()
                                yield ThinkingDelta(text=thinking)
                            content = message.get("content")
                            if isinstance(content, str) and content:
                                answered = True
                                pace.progress()
                                yield TextDelta(text=content)
                            calls = message.get("tool_calls")
                            # A server's odd value (not a list) is no call, never a crash.
                            for i, raw_call in enumerate(calls if isinstance(calls, list) else ()):
                                call = _tool_call(raw_call, i)
                                if call is not None:
                                    answered = True
                                    pace.progress()
                                    yield ToolCall(call=call)
                        if obj.get("done") is True:
                            for event in self._finish(obj, body, num_ctx):
                                yield event
                            return
        except (httpx.TransportError, httpx.TimeoutException) as exc:
            raise error_from_transport(exc, partial=answered) from exc
        except StreamDeadlineError as exc:
            raise exc.to_error(partial=answered) from exc
        except ndjson.NdjsonError as exc:
            raise broken_stream(
                f"Ollama sent a line that is not part of an answer ({exc.why}): "
                + describe_body(exc.line),
                partial=answered,
            ) from exc
        raise broken_stream("Ollama ended the answer without its final line.", partial=answered)

    def _in_band_error(
        self, obj: Mapping[str, Any], num_ctx: int, *, partial: bool
    ) -> ProviderError:
        raw = json.dumps(obj)
        err = error_from_stream_payload(obj, raw)
        if err.kind is ProblemKind.REFUSED:
            # Ollama checks a request before it starts streaming (and refuses with a status);
            # an error line after that is the model runner failing, not a refusal.
            err = ProviderError(ProblemKind.SERVER_ERROR, err.detail, status=err.status)
        if err.too_long and err.window is None:
            err.window = num_ctx
        err.partial = partial
        return err

    def _finish(self, obj: Mapping[str, Any], body: Mapping[str, Any], num_ctx: int) -> list[Event]:
        events: list[Event] = []
        prompt = obj.get("prompt_eval_count")
        output = obj.get("eval_count")
        prompt_n = prompt if isinstance(prompt, int) else None
        output_n = output if isinstance(output, int) else 0
        if prompt_n is not None:
            sent = _sent_estimate(body)
            if sent > num_ctx and prompt_n < _TRUNCATION_SHARE * sent:
                events.append(
                    Note(
                        topic="other",
                        text=(
                            f"Ollama may have cut the start of this chat: it read {prompt_n:,} "
                            f"tokens of about {sent:,} sent (window {num_ctx:,}). Ollama 0.12.6 "
                            "or later refuses instead, and Conch then fits the chat itself."
                        ),
                    )
                )
        if prompt_n is not None or output_n:
            events.append(Usage(input_tokens=prompt_n or 0, output_tokens=output_n))
        reason = obj.get("done_reason")
        events.append(Done(stop_reason="length" if reason == "length" else "stop"))
        return events
