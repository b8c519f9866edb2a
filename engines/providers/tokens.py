"""Counting a request's tokens with the server's own tokenizer, for servers that stream no usage.

llama-cpp-python (the bundled runtime) never streams usage, so Conch's estimate would never be
corrected there. Its server, and llama-server, tokenize text on request: llama-cpp-python's
``POST /extras/tokenize/count`` (``{"input", "model"}`` → ``{"count"}``, with BOS when the model
adds one) and llama-server's ``POST /tokenize`` (``{"content"}`` → ``{"tokens": [...]}``).
Neither applies the chat template, so the text a request carries is tokenized in one piece and
the template's own tokens are added per message: ChatML, Gemma and Llama 3 put five around each
message (a start marker, the role, a newline, an end marker and a newline); for SmolLM2 the
result is within 0.1% of the prompt its template builds (``python -m bench.estimate``). A
picture counts 1,600 tokens, as in the estimate: a tokenizer cannot see it, and counting it the
same on both sides keeps it out of the correction.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import httpx

from engines.base import ProblemKind
from engines.providers.base import ChatRequest, ProviderError
from engines.providers.errors import describe_body
from engines.providers.http import join, request_json
from engines.window import PICTURE_TOKENS

TokenizerKind = Literal["llama-server", "llama-cpp-python"]

TEMPLATE_TOKENS = 5  # a chat template's tokens around one message (ChatML, Gemma, Llama 3)
_MISSING = (404, 405, 501)  # the server has no such endpoint: try the next kind


def usage_is_whole(adapter: object) -> bool:
    """Whether ``adapter``'s usage counts the whole input, cached tokens included, in its
    ``input_tokens`` (OpenAI-style ``prompt_tokens``, llama-server's timings, Anthropic's sum),
    so that it is exact and the chat's factor may follow it down. Ollama's
    ``prompt_eval_count`` leaves out what it had cached: its adapter says False, as does any
    adapter that does not say (a local server's gate passes the question to what it guards)."""
    inner = getattr(adapter, "inner", adapter)
    return getattr(inner, "usage_counts_cache", False) is True


class TokenizerMissingError(Exception):
    """The server has no tokenizer endpoint of this kind."""


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def request_text(request: ChatRequest) -> str:
    """Every piece of text the request sends (system, messages, tool calls, tool list), one
    piece a line; what the OpenAI-style adapter leaves out (thinking) is left out here too."""
    pieces: list[str] = []
    if request.system:
        pieces.append(request.system)
    for message in request.messages:
        if message.text:
            pieces.append(message.text)
        for call in message.tool_calls:
            pieces.append(call.name)
            pieces.append(_json(call.arguments))
    pieces.extend(_json(tool) for tool in request.tools)
    return "\n".join(pieces)


def framing_tokens(request: ChatRequest) -> int:
    """Tokens the request costs beside its text: the template around each message (the system
    prompt is one) and 1,600 per picture."""
    messages = len(request.messages) + (1 if request.system else 0)
    pictures = sum(len(m.pictures) for m in request.messages)
    return TEMPLATE_TOKENS * messages + PICTURE_TOKENS * pictures


def _not_json(response: httpx.Response) -> ProviderError:
    return ProviderError(
        ProblemKind.SERVER_ERROR,
        "The token count was not JSON: " + describe_body(response.text, response.status_code),
        status=response.status_code,
    )


async def count_text(
    client: httpx.AsyncClient,
    root: str,
    kind: TokenizerKind,
    text: str,
    *,
    model: str = "",
    headers: dict[str, str] | None = None,
) -> int:
    """Tokens of ``text`` by the tokenizer of the server at ``root`` (no ``/v1``).

    Raises ``TokenizerMissingError`` when the server has no endpoint of this kind and
    ``ProviderError`` for any other failure, including an answer without a count.
    """
    if kind == "llama-cpp-python":
        url = join(root, "extras/tokenize/count")
        body: dict[str, Any] = {"input": text}
        if model:
            body["model"] = model  # a server with several models loads this one; the chat will
    else:
        url = join(root, "tokenize")
        body = {"content": text, "add_special": True}
    try:
        answer = await request_json(
            client, "POST", url, not_json=_not_json, json=body, headers=headers or {}
        )
    except ProviderError as exc:
        if exc.status in _MISSING:
            raise TokenizerMissingError(kind) from exc
        raise
    count: object = None
    if isinstance(answer, dict):
        count = answer.get("count") if kind == "llama-cpp-python" else answer.get("tokens")
    if isinstance(count, list):
        count = len(count)
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ProviderError(
            ProblemKind.SERVER_ERROR, f"The token count had no number: {describe_body(str(answer))}"
        )
    return count
