"""The HTTP client every adapter uses, how an API key is attached safely, and JSON fetching.

The key is never a client-wide default header: a client may be shared between providers, so
the key is added per request, and only when the request goes to the provider's own base URL.
Redirects are never followed (a redirect could carry the key's request elsewhere); one is
reported as a problem with the address (``error_from_redirect``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from engines.providers.base import ProviderError
from engines.providers.deadlines import FIRST_EVENT
from engines.providers.errors import (
    error_from_redirect,
    error_from_response,
    error_from_transport,
    is_redirect,
)

# Reading an answer may pause for a long time (a local server loading a model, a slow first
# token); connecting should be quick. Local servers get longer to load a model: as long as
# the first word of an answer may take (bytes that are not an answer are timed there).
API_TIMEOUT = httpx.Timeout(connect=10.0, read=120.0, write=30.0, pool=10.0)
LOCAL_TIMEOUT = httpx.Timeout(connect=5.0, read=FIRST_EVENT, write=60.0, pool=10.0)


def make_client(*, local: bool, timeout: httpx.Timeout | float | None = None) -> httpx.AsyncClient:
    """A client for one adapter. Proxies from the environment never apply to this computer."""
    chosen = timeout if timeout is not None else (LOCAL_TIMEOUT if local else API_TIMEOUT)
    return httpx.AsyncClient(
        timeout=chosen,
        follow_redirects=False,
        trust_env=not local,
        headers={"user-agent": "Conch"},
    )


def same_origin(url: str, base_url: str) -> bool:
    """Whether ``url`` goes to the same scheme, host and port as ``base_url``."""
    try:
        target = httpx.URL(url)
        base = httpx.URL(base_url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return False
    return (target.scheme, target.host, target.port) == (base.scheme, base.host, base.port)


def join(base_url: str, path: str) -> str:
    return base_url.rstrip("/") + "/" + path.lstrip("/")


def root_of(base_url: str) -> str:
    """The server root of a base URL (``http://h:1234/v1`` → ``http://h:1234``)."""
    url = httpx.URL(base_url)
    return str(url.copy_with(path="/", query=None, fragment=None)).rstrip("/")


async def request_json(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    not_json: Callable[[httpx.Response], ProviderError],
    **options: Any,
) -> Any:
    """Send one request whose answer should be JSON, and return that JSON.

    Every failure is a ``ProviderError``: a connection that fails, an HTTP error status, and a
    success whose body is not JSON (worded by ``not_json``, as each caller says it).
    ``options`` go to ``client.request`` (headers, params, json, timeout).
    """
    try:
        response = await client.request(method, url, **options)
    except httpx.TransportError as exc:
        raise error_from_transport(exc, partial=False) from exc
    if is_redirect(response.status_code):
        raise error_from_redirect(response)
    if response.status_code >= 400:
        raise error_from_response(response.status_code, response.text, response.headers)
    try:
        return response.json()
    except ValueError as exc:
        raise not_json(response) from exc
