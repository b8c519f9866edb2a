"""Every provider Conch knows, one row each: the facts the adapters, the settings, the model
picker and the key lookup all read.

What only one wire protocol needs (an OpenAI-style row's window fields, its usage flag, its
tokenizer endpoints) stays with that protocol's adapter; what a person sees or sets up lives
here. The order is the order the Providers page shows, servers on this computer first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Where a provider's windows come from: its /models list, LM Studio's REST lists,
# llama-server's /props, Gemini's native list beside its OpenAI-style one, the window Conch
# itself asks Ollama for (num_ctx), or the caller (the bundled server).
WindowSource = Literal["models", "lmstudio", "llamacpp", "gemini", "asked", "given"]


@dataclass(frozen=True)
class Provider:
    """One provider: a company's API, a server on this computer, or the bundled model."""

    name: str  # short name: ModelInfo.provider, the keyring entry, the settings key
    label: str  # what a person reads
    address: str  # the default base URL the adapter talks to
    local: bool  # on this computer (a chat with it stays here), else a company's API
    needs_key: bool
    window_source: WindowSource = "models"
    cheap: tuple[str, ...] = ()  # cheapest first, then the small one (summaries)
    # The environment variables the company's own CLI and SDK read its key from, first found
    # wins (only ``conch ask`` and ``conch models`` read them).
    key_env: tuple[str, ...] = ()

    @property
    def server_address(self) -> str:
        """The address a person types for a server on this computer: without the ``/v1``
        the OpenAI-style protocol adds."""
        return self.address.removesuffix("/v1")


BUNDLED = "local"  # the model that ships with Conch

PROVIDERS: dict[str, Provider] = {
    p.name: p
    for p in (
        Provider(
            BUNDLED,
            "Bundled with Conch",
            "http://127.0.0.1:8000/v1",  # replaced by the port the bundled runtime chose
            local=True,
            needs_key=False,
            window_source="given",
        ),
        Provider(
            "ollama",
            "Ollama",
            "http://127.0.0.1:11434",
            local=True,
            needs_key=False,
            window_source="asked",
        ),
        Provider(
            "lmstudio",
            "LM Studio",
            "http://127.0.0.1:1234/v1",
            local=True,
            needs_key=False,
            window_source="lmstudio",
        ),
        Provider(
            "llamacpp",
            "llama.cpp",
            "http://127.0.0.1:8080/v1",
            local=True,
            needs_key=False,
            window_source="llamacpp",
        ),
        Provider("vllm", "vLLM", "http://127.0.0.1:8000/v1", local=True, needs_key=False),
        Provider(
            "openai",
            "OpenAI",
            "https://api.openai.com/v1",
            local=False,
            needs_key=True,
            cheap=("gpt-4.1-nano", "gpt-4.1-mini"),
            key_env=("OPENAI_API_KEY",),
        ),
        Provider(
            "anthropic",
            "Anthropic",
            "https://api.anthropic.com",
            local=False,
            needs_key=True,
            cheap=("claude-haiku-4-5", "claude-3-5-haiku-latest"),
            key_env=("ANTHROPIC_API_KEY",),
        ),
        Provider(
            "openrouter",
            "OpenRouter",
            "https://openrouter.ai/api/v1",
            local=False,
            needs_key=True,
            cheap=("google/gemini-2.0-flash-lite-001", "openai/gpt-4.1-nano"),
            key_env=("OPENROUTER_API_KEY",),
        ),
        Provider(
            "google",
            "Google Gemini",
            "https://generativelanguage.googleapis.com/v1beta/openai",
            local=False,
            needs_key=True,
            window_source="gemini",  # the OpenAI-style list names no window; the native one does
            cheap=("gemini-2.5-flash-lite", "gemini-2.0-flash-lite"),
            key_env=("GEMINI_API_KEY", "GOOGLE_API_KEY"),
        ),
        Provider(
            "mistral",
            "Mistral AI",
            "https://api.mistral.ai/v1",
            local=False,
            needs_key=True,
            cheap=("ministral-3b-latest", "mistral-small-latest"),
            key_env=("MISTRAL_API_KEY",),
        ),
        Provider(
            "groq",
            "Groq",
            "https://api.groq.com/openai/v1",
            local=False,
            needs_key=True,
            cheap=("llama-3.1-8b-instant",),
            key_env=("GROQ_API_KEY",),
        ),
        Provider(
            "together",
            "Together AI",
            "https://api.together.xyz/v1",
            local=False,
            needs_key=True,
            cheap=("meta-llama/Llama-3.2-3B-Instruct-Turbo",),
            key_env=("TOGETHER_API_KEY",),
        ),
        Provider(
            "deepseek",
            "DeepSeek",
            "https://api.deepseek.com/v1",
            local=False,
            needs_key=True,
            cheap=("deepseek-chat",),
            key_env=("DEEPSEEK_API_KEY",),
        ),
        Provider(
            "xai",
            "xAI",
            "https://api.x.ai/v1",
            local=False,
            needs_key=True,
            cheap=("grok-3-mini",),
            key_env=("XAI_API_KEY",),
        ),
        Provider(
            "zhipu",
            "Zhipu AI",
            "https://open.bigmodel.cn/api/paas/v4",
            local=False,
            needs_key=True,
            cheap=("glm-4-flash",),
            key_env=("ZHIPUAI_API_KEY",),
        ),
    )
}

# Servers on this computer a person can point Conch at (the bundled model sets itself up).
LOCAL_SERVERS: tuple[str, ...] = tuple(
    name for name, p in PROVIDERS.items() if p.local and name != BUNDLED
)
# Model companies, used once their key is given.
COMPANIES: tuple[str, ...] = tuple(name for name, p in PROVIDERS.items() if p.needs_key)


def label_of(name: str) -> str:
    """What a person reads for a provider's short name; an unknown one, title-cased."""
    found = PROVIDERS.get(name)
    return found.label if found is not None else name.replace("-", " ").title()
