"""HTTP statuses, error bodies and transport failures, mapped onto ``ProviderError``.

Shared by every adapter (OpenAI-style, Anthropic, Ollama) so that a refusal reads the same
whichever server sent it. Details are the server's own words, trimmed; an HTML error page is
described, never dumped. Headers are read only for Retry-After and are never put in a message.
"""

from __future__ import annotations

import email.utils
import html
import json
import re
import time
from collections.abc import Mapping
from typing import Any

import httpx

from engines.base import NextStep, ProblemKind
from engines.providers.base import ProviderError
from engines.providers.too_long import answer_room_in, is_too_long, window_in
from engines.scrub import scrub

_DETAIL_LIMIT = 400

_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_H1 = re.compile(r"<h1[^>]*>(.*?)</h1>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]+>")
_SPACE = re.compile(r"\s+")
_MODEL_MISSING = re.compile(r"model[^.\n]{0,100}(?:does not exist|not found)")


def _clip(text: str, limit: int = _DETAIL_LIMIT) -> str:
    text = _SPACE.sub(" ", text).strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def looks_like_html(body: str) -> bool:
    head = body.lstrip()[:200].lower()
    return head.startswith(("<!doctype html", "<html", "<head", "<body")) or "<html" in head


def _html_summary(body: str, status: int | None) -> str:
    found = _TITLE.search(body) or _H1.search(body)
    title = ""
    if found:
        title = _clip(html.unescape(_TAG.sub(" ", found.group(1))), 120)
    where = f" (HTTP {status})" if status is not None else ""
    if title:
        return (
            f"The server answered with a web page{where} titled “{title}” instead of an API reply."
        )
    return f"The server answered with a web page{where} instead of an API reply."


def _message_in(data: Any) -> str:
    """The human part of a JSON error body, in the shapes servers use."""
    if isinstance(data, str):
        return data
    if isinstance(data, list) and data:
        # Google's OpenAI endpoint has wrapped errors in a one-element list.
        return _message_in(data[0])
    if not isinstance(data, dict):
        return ""
    err = data.get("error")
    if isinstance(err, str) and err:
        return err
    if isinstance(err, dict):
        inner = _message_in(err)
        upstream = _upstream_message(err)
        if inner and upstream and upstream not in inner:
            # OpenRouter's "Provider returned error" says nothing; the upstream's words do.
            return f"{inner}: {upstream}"
        if inner or upstream:
            return inner or upstream
    for key in ("message", "detail", "msg", "error_message"):
        value = data.get(key)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, (dict, list)):
            inner = _message_in(value)
            if inner:
                return inner
    return ""


def _upstream_message(err: dict[str, Any]) -> str:
    """The message of an upstream body a gateway wrapped in ``metadata.raw`` (OpenRouter)."""
    metadata = err.get("metadata")
    raw = metadata.get("raw") if isinstance(metadata, dict) else None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError):
            return "" if looks_like_html(raw) else raw.strip()
    return _message_in(raw) if isinstance(raw, (dict, list)) else ""


def describe_body(body: str, status: int | None = None) -> str:
    """What the server said, in one trimmed line fit for Health and a problem card's details.

    Secrets are left out: a gateway may quote the key it refused back in its message, and this
    text is stored with the chat.
    """
    return scrub(_describe(scrub(body), status))


def _describe(body: str, status: int | None) -> str:
    if not body or not body.strip():
        return f"HTTP {status} with an empty body." if status is not None else "An empty reply."
    if looks_like_html(body):
        return _html_summary(body, status)
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # deeply nested junk is still just junk
        return _clip(body)
    message = _message_in(data)
    return _clip(message) if message else _clip(body)


def retry_after_seconds(headers: Mapping[str, str] | httpx.Headers | None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date)."""
    if not headers:
        return None
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    millis = lowered.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def error_from_response(
    status: int, body: str, headers: Mapping[str, str] | httpx.Headers | None = None
) -> ProviderError:
    """The typed error for an HTTP error reply. ``body`` must already be read (``aread``)."""
    err = _error_from_response(status, body, headers)
    err.answer_room = answer_room_in(body)
    return err


def _error_from_response(
    status: int, body: str, headers: Mapping[str, str] | httpx.Headers | None = None
) -> ProviderError:
    detail = describe_body(body, status)
    if status not in (401, 403, 404, 429) and is_too_long(body, status):
        return ProviderError(
            ProblemKind.TOO_LONG,
            detail,
            status=status,
            too_long=True,
            window=window_in(body),
        )
    if status in (401, 403):
        kind = ProblemKind.AUTH
    elif status == 404 or (status == 400 and _names_missing_model(body)):
        kind = ProblemKind.MODEL_MISSING
    elif status == 429:
        kind = ProblemKind.RATE_LIMITED
    elif status == 408:
        kind = ProblemKind.TIMEOUT
    elif status >= 500:
        kind = ProblemKind.SERVER_ERROR
    else:
        kind = ProblemKind.REFUSED
    waits = kind in (ProblemKind.RATE_LIMITED, ProblemKind.SERVER_ERROR)
    retry = retry_after_seconds(headers) if waits else None
    return ProviderError(kind, detail, status=status, retry_after=retry)


def _names_missing_model(body: str) -> bool:
    lowered = body.lower()
    return "model_not_found" in lowered or _MODEL_MISSING.search(lowered) is not None


def is_error_payload(payload: Any) -> bool:
    """Whether one parsed stream event or line is an error rather than a piece of the answer.

    Shapes seen inside 200 streams: ``{"error": …}`` (OpenAI, OpenRouter, LiteLLM, vLLM,
    llama-server, Ollama), a flat ``{"object": "error", "message": …}`` (older vLLM) and
    ``{"type": "error", "error": …}`` (Anthropic).
    """
    if not isinstance(payload, dict):
        return False
    return bool(payload.get("error")) or payload.get("object") == "error"


def _status_code(value: Any) -> int | None:
    # LiteLLM sends the status as a string ("400"), OpenRouter and vLLM as a number.
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool) and 400 <= value <= 599:
        return value
    return None


def error_from_stream_payload(payload: Any, raw: str) -> ProviderError:
    """An error that arrived inside a 200 stream (``data: {"error": …}`` or an NDJSON line)."""
    err = _error_from_stream_payload(payload, raw)
    err.answer_room = answer_room_in(raw)
    return err


def _error_from_stream_payload(payload: Any, raw: str) -> ProviderError:
    status: int | None = None
    if isinstance(payload, dict):
        err = payload.get("error")
        code = err.get("code") if isinstance(err, dict) else payload.get("code")
        status = _status_code(code)
    detail = describe_body(raw)
    if is_too_long(raw, status):
        return ProviderError(
            ProblemKind.TOO_LONG, detail, status=status, too_long=True, window=window_in(raw)
        )
    if status is not None:
        err = error_from_response(status, raw)
        return err
    lowered = raw.lower()
    if "overloaded" in lowered or "server_error" in lowered or "api_error" in lowered:
        return ProviderError(ProblemKind.SERVER_ERROR, detail)
    if "rate_limit" in lowered or "rate limit" in lowered:
        return ProviderError(ProblemKind.RATE_LIMITED, detail)
    return ProviderError(ProblemKind.REFUSED, detail)


_ERRNO = re.compile(r"\[(?:Errno|WinError) -?\d+\]\s*")
# What the operating system says about a failed connection, in words a person can act on.
_OS_WORDS: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        (
            "name or service not known",
            "nodename nor servname",
            "getaddrinfo failed",
            "no address associated",
            "name resolution",
            "name does not resolve",
        ),
        "no computer answers to that name; check the address",
    ),
    (
        ("connection refused", "actively refused", "all connection attempts failed"),
        "nothing answers at that address; is the server running?",
    ),
    (
        ("network is unreachable", "no route to host", "host is unreachable"),
        "this computer cannot reach that address; check the network",
    ),
    (("connection reset", "forcibly closed"), "the server closed the connection"),
    (("certificate verify failed",), "the server's certificate could not be checked"),
)


def plain_os_error(text: str) -> str:
    """An operating system's error in words: "[Errno -2] Name or service not known" becomes
    "no computer answers to that name; check the address"; unknown ones lose the errno."""
    lowered = text.lower()
    for needles, words in _OS_WORDS:
        if any(n in lowered for n in needles):
            return words
    return _ERRNO.sub("", text).strip() or text


def error_from_transport(
    exc: httpx.TransportError | httpx.TimeoutException, *, partial: bool
) -> ProviderError:
    """The typed error for a connection that failed, timed out or broke mid-answer."""
    reason = _clip(plain_os_error(str(exc) or type(exc).__name__), 200)
    if isinstance(exc, httpx.ConnectTimeout):
        # Nothing answered the connection at all: the server is as good as unreachable.
        return ProviderError(
            ProblemKind.UNREACHABLE, f"The connection timed out ({reason}).", partial=partial
        )
    if isinstance(exc, httpx.TimeoutException):
        return ProviderError(ProblemKind.TIMEOUT, f"No answer in time ({reason}).", partial=partial)
    if isinstance(exc, httpx.ConnectError):
        return ProviderError(
            ProblemKind.UNREACHABLE, f"Could not connect ({reason}).", partial=partial
        )
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
        return ProviderError(
            ProblemKind.BROKEN_STREAM,
            f"The connection broke before the answer was complete ({reason}).",
            partial=partial,
        )
    return ProviderError(ProblemKind.UNREACHABLE, reason, partial=partial)


def broken_stream(detail: str, *, partial: bool) -> ProviderError:
    """A stream that ended without its done marker: a failure, never an answer."""
    return ProviderError(ProblemKind.BROKEN_STREAM, detail, partial=partial)


def is_redirect(status: int) -> bool:
    return 300 <= status < 400


def _shown_url(url: httpx.URL) -> str:
    """A URL fit to show: no credentials, no query (either may carry a token)."""
    host = f"[{url.host}]" if ":" in url.host else url.host
    port = f":{url.port}" if url.port is not None else ""
    path = url.path if url.path not in ("", "/") else ""
    return scrub(_clip(f"{url.scheme}://{host}{port}{path}", 200))


def error_from_redirect(response: httpx.Response) -> ProviderError:
    """A 3xx reply. Redirects are never followed (see ``engines.providers.http``), and one means
    the address in Settings is not the API itself: say where the server pointed instead."""
    asked = response.request.url
    server = _shown_url(asked.copy_with(path="/", query=None, fragment=None))
    location = response.headers.get("location", "").strip()
    try:
        target = _shown_url(asked.join(location)) if location else ""
    except (httpx.InvalidURL, TypeError, ValueError):
        target = ""
    if target:
        sentence = (
            f"The server at {server} answered with a redirect to {target}; check the server "
            "address in Settings."
        )
    else:
        sentence = (
            f"The server at {server} answered with a redirect (HTTP {response.status_code}) "
            "without saying where to; check the server address in Settings."
        )
    return ProviderError(
        ProblemKind.UNREACHABLE,
        sentence,
        status=response.status_code,
        message=sentence,
        next_step=NextStep(kind="open-settings", label="Check the server address in Settings"),
    )
