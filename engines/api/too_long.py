""" "Too long" in every provider's words, and the window a refusal names.

Provider-agnostic on purpose: OpenRouter and other routers pass the upstream company's words
through, and local servers copy OpenAI's. Both functions read plain text (a JSON body, an SSE
error line, an exception message) and never raise.

An output-only limit ("max_tokens is too large") is not "too long": shortening the transcript
would not help, so the session must not try to heal it.
"""

from __future__ import annotations

import re

# Statuses whose body never means "the prompt is too long": keys, payment, missing models and
# rate limits (OpenAI's 429 "Request too large ... tokens per min" is a rate limit, not a window).
_NEVER_STATUSES = frozenset({401, 402, 403, 404, 407, 408, 429})

# Each phrase names an input/context overflow in some provider's words. Matched on lower-case
# text with runs of whitespace folded, so wrapped or escaped bodies still match.
_TOO_LONG = re.compile(
    "|".join(
        [
            # OpenAI, Azure, Groq, DeepSeek, llama-cpp-python, OpenRouter (codes and words)
            r"context_length_exceeded",
            r"maximum context length is",
            r"reduce the length of the messages",
            # Anthropic (and Bedrock's wording of it)
            r"prompt is too long",
            r"input is too long",
            r"exceed context limit",
            # Google Gemini
            r"input token count[^.]{0,40}exceeds the maximum number of tokens",
            r"exceeds the maximum number of tokens allowed",
            # Mistral
            r"too large for model with \d+ maximum context length",
            # xAI
            r"maximum prompt length is",
            # Together / Hugging Face TGI
            r"`?inputs`? tokens \+ `?max_new_tokens`? must be",
            r"`?inputs`? must have less than \d+ tokens",
            # llama.cpp llama-server (new and old wordings) and servers built on it
            r"exceed_context_size_error",
            r"exceeds (?:the )?(?:available )?context size",
            # llama-cpp-python's inner message
            r"exceed context window of",
            # LM Studio (llama.cpp and MLX engines)
            r"trying to keep the first \d+ tokens when context the overflows",
            r"cannot truncate prompt with n_keep",
            r"context size has been exceeded",
            r"context length of only \d+ tokens",
            r"tokens to keep from the initial prompt is greater than the context length",
            r"input length \d+ exceeds context length",
            # Ollama
            r"input length exceeds (?:the )?(?:maximum )?context length",
            r"prompt is longer than the context length",
            # Cohere
            r"too many tokens: total number of tokens in the prompt",
            # Zhipu (code 1261 and its words)
            r"prompt exceeds max length",
            r"\"code\"\s*:\s*\"?1261\b",
            r"prompt\s*超长",
            # Generic wordings seen across routers and servers
            r"context length exceeded",
            r"context window (?:exceeded|is exceeded|overflow)",
            r"exceeds? (?:the )?(?:model'?s? )?context (?:window|length|limit|size)",
            r"input (?:is )?too long for (?:the )?(?:requested )?model",
            r"too many input tokens",
            r"prompt exceeds maximum context length",
            r"prompt size exceeds the context window",
            r"too long to fit into the model",
            r"input prompt \(\d+ tokens\) is too long",
            # Cerebras wording after Groq's: "Current length is N while limit is M"
            r"current length is \d+ while limit is",
        ]
    )
)

# Words that make a body about something else even when it mentions lengths and limits.
_NOT_TOO_LONG = re.compile(
    "|".join(
        [
            # vLLM 0.10.2-0.17: prompt fits, but prompt + max_tokens does not: an output limit
            r"'max_tokens' or 'max_completion_tokens' is too large",
            r"max_tokens=\d+ cannot be greater than max_model_len",
            # OpenAI / Anthropic output caps
            r"max_tokens is too large",
            r"maximum allowed number of output tokens",
            r"supports at most \d+ completion tokens",
            # rate limits counted in tokens
            r"tokens per min",
            r"tokens per day",
            r"\(tpm\)",
            r"rate limit",
        ]
    )
)

# Patterns for the window a refusal names, most specific first. Group 1 is the window.
_NUM = r"(\d{1,3}(?:[,_]\d{3})+|\d+)"
_WINDOW = [
    re.compile(p)
    for p in (
        r"\"n_ctx\"\s*:\s*" + _NUM,  # llama-server JSON
        r"maximum context length is " + _NUM,  # OpenAI and its imitators, vLLM, OpenRouter
        r"prompt is too long:? \d+ tokens > " + _NUM,  # Anthropic
        r"exceed context limit: \d+ \+ \d+ > " + _NUM,  # Anthropic input + max_tokens
        r"exceeds the maximum number of tokens allowed \(" + _NUM,  # Google
        r"exceeds (?:the )?(?:available )?context size \(" + _NUM,  # llama-server
        r"context window of " + _NUM,  # llama-cpp-python
        r"context length of only " + _NUM,  # LM Studio
        r"n_ctx \(" + _NUM + r"\)",  # LM Studio 0.4
        r"n_ctx: " + _NUM,  # LM Studio "n_keep: N >= n_ctx: M"
        r"input length \d+ exceeds context length " + _NUM,  # old LM Studio
        r"while limit is " + _NUM,  # Cerebras
        r"\(context length " + _NUM + r"\)",  # vLLM multimodal wording
        r"too long and exceeds limit of " + _NUM,  # vLLM scheduler
        r"maximum prompt length is " + _NUM,  # xAI
        r"too large for model with " + _NUM + r" maximum context length",  # Mistral
        r"max_new_tokens`? must be <= " + _NUM,  # TGI / Together
        r"must have less than " + _NUM + r" tokens",  # TGI
        r"cannot exceed " + _NUM,  # Cohere
        r"\d+ tokens > " + _NUM + r" maximum",  # generic "N tokens > M maximum"
        r"context (?:window|length|size) (?:is|of) " + _NUM,  # generic
        r"\"context_length\"\s*:\s*" + _NUM,  # routers that attach the model's window
    )
]

# A window outside this range is a misread (a byte count, a year, an id), not a window.
_MIN_WINDOW = 16
_MAX_WINDOW = 100_000_000

_SPACE = re.compile(r"\s+")


def _normalise(body: str) -> str:
    # Bodies arrive escaped inside JSON strings (OpenRouter's metadata.raw); unescape the
    # common cases so phrases and numbers read the same either way.
    text = body.replace('\\"', '"').replace("\\n", " ").replace("\\u0027", "'").lower()
    return _SPACE.sub(" ", text)


def is_too_long(body: str, status: int | None = None) -> bool:
    """Whether ``body`` (and ``status``, when known) is a refusal because the input is too long."""
    try:
        if not isinstance(body, str) or not body:
            return False
        if status is not None and status in _NEVER_STATUSES:
            return False
        text = _normalise(body)
        if _NOT_TOO_LONG.search(text):
            return False
        return _TOO_LONG.search(text) is not None
    except Exception:  # a classifier must never take a turn down with it
        return False


def window_in(body: str) -> int | None:
    """The context window (tokens) a refusal names, or None when it names none.

    Reads the window, never the prompt size: "request (9412 tokens) exceeds the available
    context size (8192 tokens)" gives 8192.
    """
    try:
        if not isinstance(body, str) or not body:
            return None
        text = _normalise(body)
        for pattern in _WINDOW:
            for match in pattern.finditer(text):
                digits = re.sub(r"[,_]", "", match.group(1))
                value = int(digits)
                if _MIN_WINDOW <= value <= _MAX_WINDOW:
                    return value
        return None
    except Exception:  # see is_too_long
        return None
