"""Which providers Conch talks to, built from Settings and the secret store.

- Servers on this computer, no key: Ollama (settings, else ``OLLAMA_HOST``, else its port),
  LM Studio, llama.cpp and vLLM. One the person did not set up is only *probed* at its usual
  address: not finding it there is normal and is not written to Health.
- Every company row (OpenAI-style, and Anthropic) whose key is in the secret store; when
  ``Settings.companies`` lists names, only those.
- The bundled model (``local``) is not built here: the services start it only when nothing
  else can answer (see app/services.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from app.secrets import SecretStore
from app.settings import Settings
from engines.providers.anthropic import AnthropicAdapter
from engines.providers.base import ProviderAdapter
from engines.providers.ollama import OllamaAdapter, ollama_base_url
from engines.providers.openai import ROWS, OpenAIAdapter

LOCAL_SERVERS = ("lmstudio", "llamacpp", "vllm")  # OpenAI-style servers on this computer
BUNDLED = "local"


@dataclass
class ProviderSetup:
    adapters: list[ProviderAdapter] = field(default_factory=list)
    probed: set[str] = field(default_factory=set)  # looked for at the usual address only
    # What each adapter was built from (address, key), kept in memory only: an adapter whose
    # configuration did not change is kept as it is (Ollama's num_ctx stays the same).
    configs: dict[str, tuple[str, str]] = field(default_factory=dict)


def _v1(url: str) -> str:
    """An OpenAI-style base URL: the server's address with ``/v1`` (added when missing)."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    return url if url.endswith("/v1") else url + "/v1"


def company_names() -> list[str]:
    """Every company Conch knows, in a stable order (OpenAI-style rows, then Anthropic)."""
    return [name for name, row in ROWS.items() if row.needs_key] + ["anthropic"]


def build_adapters(
    settings: Settings,
    secrets: SecretStore,
    *,
    env: Mapping[str, str] | None = None,
) -> ProviderSetup:
    """Adapters for everything configured (see the module doc). Makes no request."""
    environ = os.environ if env is None else env
    setup = ProviderSetup()

    host = settings.ollama_url.strip() or environ.get("OLLAMA_HOST", "").strip()
    setup.adapters.append(OllamaAdapter(ollama_base_url(host)))
    setup.configs["ollama"] = (ollama_base_url(host), "")
    if not host:
        setup.probed.add("ollama")

    urls = {
        "lmstudio": settings.lmstudio_url,
        "llamacpp": settings.llamacpp_url,
        "vllm": settings.vllm_url,
    }
    for name in LOCAL_SERVERS:
        url = urls[name].strip()
        setup.adapters.append(OpenAIAdapter(ROWS[name], base_url=_v1(url) if url else None))
        setup.configs[name] = (url, "")
        if not url:
            setup.probed.add(name)

    wanted = set(settings.companies)
    for name in company_names():
        if wanted and name not in wanted:
            continue
        key = secrets.get(name)
        if not key:
            continue
        base = settings.base_urls.get(name, "").strip() or None
        if name == "anthropic":
            anthropic = (
                AnthropicAdapter(api_key=key, base_url=base)
                if base
                else AnthropicAdapter(api_key=key)
            )
            setup.adapters.append(anthropic)
        else:
            setup.adapters.append(OpenAIAdapter(ROWS[name], base_url=base, api_key=key))
        setup.configs[name] = (base or "", key)
    return setup
