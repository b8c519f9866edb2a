"""Which providers Conch talks to, built from Settings and the secret store.

- Servers on this computer, no key: Ollama (settings, else ``OLLAMA_HOST``, else its port),
  LM Studio, llama.cpp and vLLM. One the person did not set up is only *probed* at its usual
  address: not finding it there is normal and is not written to Health.
- Every company (engines.providers.registry) whose key is in the secret store; when
  ``Settings.companies`` lists names, only those.
- The bundled model (``local``) is not built here: the services start it only when nothing
  else can answer (see app/services.py).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from app.secrets import SecretStore, SessionSecrets
from app.settings import Settings
from engines.base import ModelInfo
from engines.providers.anthropic import AnthropicAdapter
from engines.providers.base import ProviderAdapter
from engines.providers.ollama import OllamaAdapter, ollama_base_url
from engines.providers.openai import ROWS, OpenAIAdapter
from engines.providers.registry import BUNDLED as BUNDLED
from engines.providers.registry import COMPANIES, LOCAL_SERVERS

# The Settings field that holds the address of each server on this computer.
ADDRESS_FIELDS: dict[str, str] = {
    "ollama": "ollama_url",
    "lmstudio": "lmstudio_url",
    "llamacpp": "llamacpp_url",
    "vllm": "vllm_url",
}


class NotSetUpError(Exception):
    """The provider is not set up enough to test (a company without a key)."""


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
    """Every company Conch knows, in the order the Providers page shows them."""
    return list(COMPANIES)


def build_adapters(
    settings: Settings,
    secrets: SecretStore,
    *,
    env: Mapping[str, str] | None = None,
) -> ProviderSetup:
    """Adapters for everything configured (see the module doc). Makes no request."""
    environ = os.environ if env is None else env
    setup = ProviderSetup()

    for name in LOCAL_SERVERS:
        url = str(getattr(settings, ADDRESS_FIELDS[name])).strip()
        if name == "ollama":
            url = url or environ.get("OLLAMA_HOST", "").strip()
            setup.adapters.append(OllamaAdapter(ollama_base_url(url)))
            setup.configs[name] = (ollama_base_url(url), "")
        else:
            setup.adapters.append(OpenAIAdapter(ROWS[name], base_url=_v1(url) if url else None))
            setup.configs[name] = (url, "")
        if not url:
            setup.probed.add(name)

    wanted = set(settings.companies)
    for name in COMPANIES:
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


async def try_provider(
    settings: Settings, name: str, address: str = "", key: str | None = None
) -> list[ModelInfo]:
    """Settings' "Test": build one provider's adapter as the app would, from ``settings`` with
    ``address`` (a server on this computer; "" for its usual one) or ``key`` (a company, kept
    in memory only), list its models and close it. ``NotSetUpError`` for a company without a
    key. Nothing is saved."""
    field_name = ADDRESS_FIELDS.get(name)
    trial = settings
    if field_name is not None:
        trial = trial.model_copy(update={field_name: address})
    if name in COMPANIES:
        trial = trial.model_copy(update={"companies": (name,)})
    secrets = SessionSecrets()
    if key:
        secrets.set(name, key)
    setup = build_adapters(trial, secrets)
    chosen = next((a for a in setup.adapters if a.name == name), None)
    try:
        if chosen is None:
            raise NotSetUpError("Add an API key first.")
        return list(await chosen.list_models())
    finally:
        for adapter in setup.adapters:
            with contextlib.suppress(Exception):
                await adapter.aclose()
