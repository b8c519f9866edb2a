"""OpenAI-style chat completions: one adapter for every row (``engines.providers.openai_rows``).

The protocol (request body, streamed chunks) is in ``openai_stream``; where a local server keeps
its loaded window (LM Studio's REST list, llama-server's ``/props``) is in ``local_windows``.
This adapter lists models, streams answers, counts tokens, and notices that the bundled
llama-cpp-python server answers an oversized streamed request with an empty 200 stream.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing
from typing import Any

import httpx

from engines.base import Event, ModelInfo, ProblemKind
from engines.providers.base import ChatRequest, ProviderError
from engines.providers.deadlines import (
    Clock,
    Deadlines,
    Pace,
    StreamDeadlineError,
    deadlines_for,
)
from engines.providers.errors import (
    broken_stream,
    describe_body,
    error_from_redirect,
    error_from_response,
    error_from_stream_payload,
    error_from_transport,
    is_error_payload,
    is_redirect,
)
from engines.providers.http import join, make_client, request_json, root_of, same_origin
from engines.providers.json_fields import dig, positive_int
from engines.providers.local_windows import (
    llamacpp_trained_window,
    llamacpp_window,
    lmstudio_models,
)
from engines.providers.openai_rows import ROWS, OpenAIStyleRow
from engines.providers.openai_stream import (
    AnswerStream,
    error_line,
    read_text,
    request_body,
    to_openai_messages,
)
from engines.providers.sse import SSEEvent, SSELineTooLongError, iter_sse
from engines.providers.tokens import (
    TokenizerKind,
    TokenizerMissingError,
    count_text,
    framing_tokens,
    request_text,
)

# Names other modules import from here since before the split.
__all__ = ["ROWS", "OpenAIAdapter", "OpenAIStyleRow", "adapter_for", "to_openai_messages"]

log = logging.getLogger("conch.providers.openai")


# Fields that name a window in a /models entry whatever the row, read when the row's own
# fields name none: GitHub Copilot's input limit, LiteLLM's max_input_tokens (top level or in
# model_info), Gemini's inputTokenLimit as a proxy passes it on, and llama-server's loaded
# n_ctx (llama-swap lists it too; n_ctx_train is only the trained ceiling). Each is an upper
# bound: a window a refusal names wins when smaller.
_ANY_ROW_WINDOW_FIELDS = (
    "capabilities.limits.max_prompt_tokens",
    "max_input_tokens",
    "model_info.max_input_tokens",
    "inputTokenLimit",
    "meta.n_ctx",
)
_GEMINI_PAGES = 10  # pages of 1,000 models: far more than Gemini lists

# Model ids that cannot chat (OpenAI and local servers list them next to chat models).
_NOT_CHAT = ("embed", "tts", "whisper", "dall-e", "moderation", "transcribe", "gpt-image")


def _is_chat_model(model_id: str) -> bool:
    lowered = model_id.lower()
    return not any(word in lowered for word in _NOT_CHAT)


def _list_not_json(response: httpx.Response) -> ProviderError:
    return ProviderError(
        ProblemKind.SERVER_ERROR,
        "The model list was not JSON: " + describe_body(response.text, response.status_code),
        status=response.status_code,
    )


class OpenAIAdapter:
    """``ProviderAdapter`` for every OpenAI-style provider, configured by an ``OpenAIStyleRow``."""

    usage_counts_cache = True  # prompt_tokens and llama-server's timings include cached tokens

    def __init__(
        self,
        row: OpenAIStyleRow,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: httpx.AsyncClient | None = None,
        window_override: int | None = None,
        timeout: httpx.Timeout | float | None = None,
        deadlines: Deadlines | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.row = row
        self.name = row.name
        self.label = row.label
        self.local = row.local
        self._bases: tuple[str, ...] = (
            (base_url.rstrip("/"),) if base_url else (row.base_url, *row.alt_base_urls)
        )
        self.base_url = self._bases[0]
        self._key = api_key or None
        self._own_client = client is None
        self._client = (
            client if client is not None else make_client(local=row.local, timeout=timeout)
        )
        self._window_override = window_override
        self._deadlines = deadlines  # None: sized for each request (deadlines_for)
        self._clock = clock
        # Addresses without a LiteLLM-style model/info list (asked once each).
        self._no_info: set[str] = set()
        # (base URL, the tokenizer endpoint that answered there, or None when none did)
        self._tokenizer_at: tuple[str, TokenizerKind | None] | None = None

    # --- requests -----------------------------------------------------------------------------

    def _headers(self, url: str, *, streaming: bool = False) -> dict[str, str]:
        headers = {"accept": "text/event-stream" if streaming else "application/json"}
        # The key goes to this provider's own host and nowhere else.
        if self._key and same_origin(url, self.base_url):
            headers["authorization"] = f"Bearer {self._key}"
        return headers

    async def _get_json(self, url: str) -> Any:
        return await request_json(
            self._client, "GET", url, not_json=_list_not_json, headers=self._headers(url)
        )

    # --- models -------------------------------------------------------------------------------

    async def list_models(self) -> list[ModelInfo]:
        """The provider's chat models with their windows. Raises ``ProviderError`` on failure."""
        if self.row.needs_key and not self._key:
            raise ProviderError(ProblemKind.AUTH, f"No API key is set for {self.label}.")
        failure: ProviderError | None = None
        for base in self._bases:
            try:
                models = await self._list_at(base)
            except ProviderError as exc:
                if exc.kind is ProblemKind.UNREACHABLE:
                    failure = exc
                    continue
                raise
            self.base_url = base
            return models
        assert failure is not None
        raise failure

    async def _list_at(self, base: str) -> list[ModelInfo]:
        source = self.row.window_source
        if source == "lmstudio":
            found = await lmstudio_models(
                self._get_json, base, provider=self.name, window_override=self._window_override
            )
            if found is not None:
                return found
        listed = await self._get_json(join(base, "models"))
        entries = listed.get("data") if isinstance(listed, dict) else listed
        if not isinstance(entries, list):
            entries = []
        chat_entries = [
            entry
            for entry in entries
            if isinstance(entry, dict)
            and isinstance(entry.get("id"), str)
            and _is_chat_model(entry["id"])
        ]
        server_window: int | None = None
        if source == "llamacpp":
            server_window = await llamacpp_window(self._get_json, base)
        listed_windows = [self._entry_window(entry) for entry in chat_entries]
        elsewhere: dict[str, int] = {}
        if chat_entries and not (self._window_override or server_window or any(listed_windows)):
            elsewhere = await self._windows_elsewhere(base)
        models: list[ModelInfo] = []
        for entry, listed_window in zip(chat_entries, listed_windows, strict=True):
            model_id = entry["id"]
            window = (
                self._window_override
                or server_window
                or listed_window
                or elsewhere.get(model_id)
                or elsewhere.get(model_id.removeprefix("models/"))
            )
            if window is None and source == "llamacpp":
                window = llamacpp_trained_window(entry)
            label = entry.get("name") if isinstance(entry.get("name"), str) else ""
            models.append(
                ModelInfo(
                    provider=self.name,
                    id=model_id,
                    label=label or model_id,
                    context=window or self.row.default_window,
                    local=self.local,
                    ready=True,
                    loaded=source == "llamacpp",
                )
            )
        return models

    def _entry_window(self, entry: dict[str, Any]) -> int | None:
        for paths in (self.row.window_fields, _ANY_ROW_WINDOW_FIELDS):
            found = [positive_int(dig(entry, path)) for path in paths]
            windows = [w for w in found if w]
            if windows:
                return min(windows)
        return None

    async def _windows_elsewhere(self, base: str) -> dict[str, int]:
        """Windows from a second list, when the /models list named none (model id → window).

        Gemini's native list, for the Google row; a LiteLLM proxy's ``model/info``, for a row
        set to an address of the person's own (a company's own API has no such list). A list
        that cannot be read only leaves the windows unknown.
        """
        source = self.row.window_source
        if source == "gemini":
            return await self._gemini_windows(base)
        stock = (self.row.base_url, *self.row.alt_base_urls)
        if source in ("models", "llamacpp") and base not in stock and base not in self._no_info:
            return await self._litellm_windows(base)
        return {}

    async def _litellm_windows(self, base: str) -> dict[str, int]:
        """LiteLLM's ``model/info``: each model group's ``model_info.max_input_tokens``; the
        smallest of a group's deployments, since any of them may answer."""
        try:
            listed = await self._get_json(join(base, "model/info"))
        except ProviderError as exc:
            if exc.status in (401, 403, 404, 405):
                self._no_info.add(base)  # no such list here: not asked again on every refresh
            return {}
        entries = listed.get("data") if isinstance(listed, dict) else None
        windows: dict[str, int] = {}
        for entry in entries if isinstance(entries, list) else []:
            name = entry.get("model_name") if isinstance(entry, dict) else None
            window = positive_int(dig(entry, "model_info.max_input_tokens"))
            if isinstance(name, str) and window:
                windows[name] = min(window, windows.get(name, window))
        return windows

    async def _gemini_windows(self, base: str) -> dict[str, int]:
        """``inputTokenLimit`` from Gemini's native model list (``…/v1beta/models``), beside the
        OpenAI-style one at ``…/v1beta/openai``; keyed by name without ``models/``."""
        if not base.endswith("/openai"):
            return {}  # an address of the person's own: no native list known beside it
        url = join(base.removesuffix("/openai"), "models")
        headers = {"accept": "application/json"}
        if self._key and same_origin(url, self.base_url):
            headers["x-goog-api-key"] = self._key  # the native API takes the key this way
        windows: dict[str, int] = {}
        page: str | None = None
        for _ in range(_GEMINI_PAGES):
            params = {"pageSize": "1000", **({"pageToken": page} if page else {})}
            try:
                listed = await request_json(
                    self._client,
                    "GET",
                    url,
                    not_json=_list_not_json,
                    params=params,
                    headers=headers,
                )
            except ProviderError:
                break
            entries = listed.get("models") if isinstance(listed, dict) else None
            for entry in entries if isinstance(entries, list) else []:
                name = entry.get("name") if isinstance(entry, dict) else None
                window = positive_int(dig(entry, "inputTokenLimit"))
                if isinstance(name, str) and window:
                    windows[name.removeprefix("models/")] = window
            token = listed.get("nextPageToken") if isinstance(listed, dict) else None
            if not isinstance(token, str) or not token:
                break
            page = token
        return windows

    def cheap_models(self) -> tuple[str, ...]:
        return () if self.local else self.row.cheap

    # --- chat ---------------------------------------------------------------------------------

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        """Stream one answer. Raises ``ProviderError``; ends with exactly one ``Done``."""
        if self.row.needs_key and not self._key:
            raise ProviderError(ProblemKind.AUTH, f"No API key is set for {self.label}.")
        url = join(self.base_url, "chat/completions")
        payload = request_body(self.row, request, stream=True, max_tokens=request.max_output_tokens)
        state = AnswerStream(self.row.thinking_fields)
        log.debug("%s: streaming %s from %s", self.name, request.model, url)
        pace = Pace(self._deadlines or deadlines_for(request.max_output_tokens), self._clock)
        try:
            async with self._client.stream(
                "POST", url, json=payload, headers=self._headers(url, streaming=True)
            ) as response:
                if is_redirect(response.status_code):
                    raise error_from_redirect(response)
                if response.status_code >= 400:
                    body = await read_text(response)
                    raise error_from_response(response.status_code, body, response.headers)
                content_type = response.headers.get("content-type", "")
                if "text/event-stream" not in content_type:
                    # A server that ignored stream:true (or sent an error as plain JSON).
                    whole = await read_text(response)
                    for event in self._whole_answer(whole, state):
                        yield event
                    return
                async with aclosing(iter_sse(response, pace)) as events:
                    async for sse in events:
                        before = state.mark()
                        for event in self._read_event(sse, state):
                            yield event
                        if state.mark() != before:
                            pace.progress()
                        if state.done_marker:
                            break
        except httpx.TransportError as exc:  # includes timeouts
            raise error_from_transport(exc, partial=state.partial) from exc
        except StreamDeadlineError as exc:
            raise exc.to_error(partial=state.partial) from exc
        except SSELineTooLongError as exc:
            raise broken_stream(
                f"{self.label} sent {exc}; Conch stopped reading it.", partial=state.partial
            ) from exc
        if not state.answered and self.local:
            refusal = await self._confirm_too_long(request)
            if refusal is not None:
                raise refusal
        if not state.finished:
            what = "before its first word" if not state.answered else "part-way"
            raise broken_stream(
                f"{self.label} ended the answer {what}, without its done marker.",
                partial=state.partial,
            )
        for event in state.ending():
            yield event

    def _read_event(self, sse: SSEEvent, state: AnswerStream) -> Iterator[Event]:
        data = sse.data.strip()
        if not data:
            return
        if data == "[DONE]":
            state.done_marker = True
            return
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError) as exc:
            if sse.event == "error":
                raise self._stream_error({}, data, state) from exc
            raise broken_stream(
                f"{self.label} sent a line that is not JSON: {describe_body(data)}",
                partial=state.partial,
            ) from exc
        if not isinstance(obj, dict):
            raise broken_stream(f"{self.label} sent an unexpected line.", partial=state.partial)
        if sse.event == "error" or is_error_payload(obj):
            # Raised as soon as it is read: before any answer text, the session heals it.
            raise self._stream_error(obj, data, state)
        yield from state.feed(obj)
        if state.finish_reason == "error":
            # OpenRouter's and vLLM's mark for an answer that failed; the error object that
            # usually comes with it was missing.
            raise ProviderError(
                ProblemKind.SERVER_ERROR,
                f"{self.label} ended the answer with an error without saying which.",
                partial=state.partial,
            )

    def _stream_error(self, obj: dict[str, Any], raw: str, state: AnswerStream) -> ProviderError:
        error = error_from_stream_payload(obj, raw)
        error.partial = state.partial
        return error

    def _whole_answer(self, body: str, state: AnswerStream) -> Iterator[Event]:
        try:
            obj = json.loads(body)
        except (ValueError, RecursionError) as exc:
            # A gateway that labelled its stream as something else, or wrote NDJSON: an error
            # line in it is still the refusal.
            found = error_line(body)
            if found is not None:
                raise self._stream_error(found[0], found[1], state) from exc
            raise broken_stream(
                f"{self.label} answered with something other than a stream: {describe_body(body)}",
                partial=False,
            ) from exc
        if not isinstance(obj, dict):
            raise broken_stream(f"{self.label} sent an unexpected answer.", partial=False)
        if is_error_payload(obj):
            raise self._stream_error(obj, body, state)
        yield from state.feed(obj)
        if not state.finished:
            raise broken_stream(f"{self.label} sent an answer without an end.", partial=False)
        yield from state.ending()

    async def _confirm_too_long(self, request: ChatRequest) -> ProviderError | None:
        """An empty local stream may hide a too-long refusal: ask again without streaming.

        llama-cpp-python checks the window only after a streamed reply has begun, so an
        oversized request gets 200 and an empty stream; a one-token non-streamed request gets
        the refusal, with the window, as a 400.
        """
        url = join(self.base_url, "chat/completions")
        payload = request_body(self.row, request, stream=False, max_tokens=1)
        response: httpx.Response | None = None
        # llama-cpp-python closes the kept-alive connection after the empty stream, so the
        # first try can land on a dead pooled connection: one fresh retry is enough.
        for _ in range(2):
            try:
                response = await self._client.post(url, json=payload, headers=self._headers(url))
                break
            except httpx.TransportError:
                continue
        if response is None or response.status_code < 400:
            return None
        error = error_from_response(response.status_code, response.text, response.headers)
        return error if error.too_long else None

    # --- counting ---------------------------------------------------------------------------

    async def count_tokens(self, request: ChatRequest) -> int | None:
        """The request's input tokens by the server's own tokenizer, its chat template allowed
        for; None when this row counts by usage, the server has no tokenizer endpoint Conch
        knows, or the count failed (a count is a help, never a reason to fail a turn)."""
        kinds = self.row.tokenizers
        if self._tokenizer_at is not None and self._tokenizer_at[0] == self.base_url:
            known = self._tokenizer_at[1]
            kinds = (known,) if known is not None else ()
        if not kinds:
            return None
        text = request_text(request)
        root = root_of(self.base_url)
        for kind in kinds:
            try:
                counted = await count_text(
                    self._client, root, kind, text, model=request.model, headers=self._headers(root)
                )
            except TokenizerMissingError:
                continue
            except ProviderError as exc:
                log.debug("%s: could not count tokens: %s", self.name, exc.detail)
                return None
            self._tokenizer_at = (self.base_url, kind)
            return counted + framing_tokens(request)
        self._tokenizer_at = (self.base_url, None)  # none here: do not ask on every turn
        return None

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()


def adapter_for(
    name: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    client: httpx.AsyncClient | None = None,
    window_override: int | None = None,
) -> OpenAIAdapter:
    """The adapter for a row by its short name (``KeyError`` for an unknown name)."""
    return OpenAIAdapter(
        ROWS[name],
        base_url=base_url,
        api_key=api_key,
        client=client,
        window_override=window_override,
    )
