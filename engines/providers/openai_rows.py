"""The OpenAI-style providers: a row per company or server, read from the registry.

Companies differ in where their model list puts the window, whether they stream usage, and
what their cheapest model is; the wire protocol is the same. What a person sees and sets up
lives in ``engines.providers.registry``; a row adds what only the wire needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engines.providers.registry import PROVIDERS, WindowSource
from engines.providers.tokens import TokenizerKind
from engines.window import unknown_window


@dataclass(frozen=True)
class OpenAIStyleRow:
    """What sets one OpenAI-style provider apart from the others."""

    name: str  # short name, ModelInfo.provider
    label: str
    base_url: str  # up to, not including, /chat/completions
    needs_key: bool
    local: bool = False
    # Dotted paths in each /models entry that name the window; the smallest found wins
    # (OpenRouter's top provider may serve less than the model's own maximum).
    window_fields: tuple[str, ...] = ()
    window_source: WindowSource = "models"
    include_usage: bool = True  # accepts stream_options.include_usage
    max_tokens_field: str = "max_tokens"
    cheap: tuple[str, ...] = ()  # cheapest first, then the small one (summaries)
    alt_base_urls: tuple[str, ...] = ()  # also tried when the first is unreachable
    thinking_fields: tuple[str, ...] = ("reasoning_content", "reasoning")
    # Tokenizer endpoints to count a request with, tried in order (engines.providers.tokens):
    # only for servers that may stream no usage, so the estimate still gets corrected.
    tokenizers: tuple[TokenizerKind, ...] = ()

    @property
    def default_window(self) -> int:
        return unknown_window(self.local)


def _row(name: str, **wire: Any) -> OpenAIStyleRow:
    """A row: what a person sees and sets up (the registry), plus what only the wire needs."""
    p = PROVIDERS[name]
    return OpenAIStyleRow(
        p.name,
        p.label,
        p.address,
        needs_key=p.needs_key,
        local=p.local,
        window_source=p.window_source,
        cheap=p.cheap,
        **wire,
    )


ROWS: dict[str, OpenAIStyleRow] = {
    row.name: row
    for row in (
        _row("openai", max_tokens_field="max_completion_tokens"),
        _row("openrouter", window_fields=("context_length", "top_provider.context_length")),
        _row("groq", window_fields=("context_window",)),
        # Together sends usage in its last chunk unasked.
        _row("together", window_fields=("context_length",), include_usage=False),
        _row("deepseek"),
        # Mistral rejects unknown fields; it streams usage on its own anyway.
        _row("mistral", window_fields=("max_context_length",), include_usage=False),
        _row("xai"),
        _row("google"),
        _row("zhipu", include_usage=False),
        _row("lmstudio"),
        _row(
            "llamacpp",
            alt_base_urls=("http://127.0.0.1:9931/v1",),
            # A llama-cpp-python server is often set up here too: it has no /tokenize.
            tokenizers=("llama-server", "llama-cpp-python"),
        ),
        _row("vllm", window_fields=("max_model_len",)),
        # llama-cpp-python never streams usage.
        _row("local", include_usage=False, tokenizers=("llama-cpp-python",)),
    )
}
