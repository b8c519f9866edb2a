"""Statuses, bodies and transport failures mapped onto the problems a person sees."""

from __future__ import annotations

import email.utils
import time

import httpx
import pytest

from engines.base import ProblemKind
from engines.providers.errors import (
    describe_body,
    error_from_response,
    error_from_stream_payload,
    error_from_transport,
    retry_after_seconds,
)

OPENAI_TOO_LONG = (
    '{"error":{"message":"This model\'s maximum context length is 8192 tokens. However, your '
    'messages resulted in 9000 tokens.","code":"context_length_exceeded"}}'
)


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (401, '{"error":{"message":"Incorrect API key provided"}}', ProblemKind.AUTH),
        (403, '{"error":{"message":"Forbidden"}}', ProblemKind.AUTH),
        (404, '{"error":"model \'llama3\' not found"}', ProblemKind.MODEL_MISSING),
        (
            400,
            '{"error":{"message":"The model `gpt-9` does not exist","code":"model_not_found"}}',
            ProblemKind.MODEL_MISSING,
        ),
        (429, '{"error":{"message":"Rate limit reached"}}', ProblemKind.RATE_LIMITED),
        (408, "Request Timeout", ProblemKind.TIMEOUT),
        (500, '{"error":{"message":"internal"}}', ProblemKind.SERVER_ERROR),
        (529, '{"type":"error","error":{"type":"overloaded_error"}}', ProblemKind.SERVER_ERROR),
        (400, '{"error":{"message":"Invalid value for temperature"}}', ProblemKind.REFUSED),
        (422, '{"detail":[{"msg":"Extra inputs are not permitted"}]}', ProblemKind.REFUSED),
        (400, OPENAI_TOO_LONG, ProblemKind.TOO_LONG),
        (413, "prompt is too long: 300000 tokens > 200000 maximum", ProblemKind.TOO_LONG),
        # A too-long word inside a rate limit stays a rate limit.
        (429, OPENAI_TOO_LONG, ProblemKind.RATE_LIMITED),
    ],
)
def test_status_and_body_choose_the_problem(status: int, body: str, kind: ProblemKind) -> None:
    error = error_from_response(status, body, {})
    assert error.kind is kind
    assert error.status == status
    assert error.too_long is (kind is ProblemKind.TOO_LONG)


def test_too_long_carries_the_window_and_the_servers_words() -> None:
    error = error_from_response(400, OPENAI_TOO_LONG, {})
    assert error.window == 8192
    assert error.detail.startswith("This model's maximum context length is 8192")


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"Retry-After": "30"}, 30.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "2500", "retry-after": "9"}, 2.5),
        ({}, None),
        ({"retry-after": "soon"}, None),
    ],
)
def test_retry_after_is_read(headers: dict[str, str], seconds: float | None) -> None:
    error = error_from_response(429, '{"error":"slow down"}', headers)
    assert error.retry_after == seconds


@pytest.mark.parametrize("status", [500, 502, 503, 529])
def test_a_busy_server_that_says_when_to_come_back_is_waited_for(status: int) -> None:
    error = error_from_response(status, "Service Unavailable", {"Retry-After": "120"})
    assert error.kind is ProblemKind.SERVER_ERROR
    assert error.retry_after == 120.0
    step = error.to_problem().next_step
    assert step is not None and (step.kind, step.seconds) == ("wait", 120.0)
    assert step.label == "Try again in 120 seconds"


def test_a_server_error_without_retry_after_offers_to_try_again() -> None:
    step = error_from_response(503, "Service Unavailable").to_problem().next_step
    assert step is not None and (step.kind, step.seconds) == ("retry", None)


@pytest.mark.parametrize("status", [400, 401, 404, 408])
def test_retry_after_on_a_refusal_is_not_a_wait(status: int) -> None:
    error = error_from_response(status, '{"error":"no"}', {"Retry-After": "120"})
    assert error.retry_after is None
    step = error.to_problem().next_step
    assert step is None or step.kind != "wait"


def test_retry_after_as_a_date() -> None:
    when = email.utils.formatdate(time.time() + 60, usegmt=True)
    waited = retry_after_seconds(httpx.Headers({"Retry-After": when}))
    assert waited is not None and 50 <= waited <= 61


def test_an_html_page_is_described_in_words() -> None:
    page = (
        "<!DOCTYPE html><html><head><title>503 Service Temporarily Unavailable</title></head>"
        "<body><h1>503</h1>" + "<p>padding</p>" * 500 + "</body></html>"
    )
    error = error_from_response(503, page, {})
    assert error.kind is ProblemKind.SERVER_ERROR
    assert "503 Service Temporarily Unavailable" in error.detail
    assert "<" not in error.detail and len(error.detail) < 200


def test_long_bodies_are_clipped_and_empty_ones_said() -> None:
    assert len(describe_body("x" * 5000, 500)) <= 400
    assert "empty" in describe_body("", 502)
    assert describe_body('{"error":{"message":"Nope."}}') == "Nope."
    assert describe_body('[{"error":{"message":"Gemini says no"}}]') == "Gemini says no"


def test_errors_inside_a_stream() -> None:
    llama = (
        '{"error":{"code":400,"message":"the request exceeds the available context size.",'
        '"n_ctx":4096}}'
    )
    too_long = error_from_stream_payload({"error": {"code": 400}}, llama)
    assert too_long.too_long and too_long.window == 4096
    overloaded = '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    assert error_from_stream_payload({}, overloaded).kind is ProblemKind.SERVER_ERROR
    limited = '{"error":{"type":"rate_limit_error","message":"slow"}}'
    assert error_from_stream_payload({}, limited).kind is ProblemKind.RATE_LIMITED
    other = '{"error":"content filtered"}'
    assert error_from_stream_payload({"error": "content filtered"}, other).kind is (
        ProblemKind.REFUSED
    )


REQUEST = httpx.Request("POST", "http://127.0.0.1:1/v1/chat/completions")


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (
            httpx.ConnectError("[Errno 111] Connection refused", request=REQUEST),
            ProblemKind.UNREACHABLE,
        ),
        (httpx.ConnectTimeout("timed out", request=REQUEST), ProblemKind.UNREACHABLE),
        (httpx.ReadTimeout("timed out", request=REQUEST), ProblemKind.TIMEOUT),
        (httpx.PoolTimeout("no connection", request=REQUEST), ProblemKind.TIMEOUT),
        (
            httpx.RemoteProtocolError("peer closed connection", request=REQUEST),
            ProblemKind.BROKEN_STREAM,
        ),
        (httpx.ReadError("reset", request=REQUEST), ProblemKind.BROKEN_STREAM),
        (httpx.UnsupportedProtocol("ftp", request=REQUEST), ProblemKind.UNREACHABLE),
    ],
)
@pytest.mark.parametrize("partial", [False, True])
def test_transport_failures(exc: httpx.TransportError, kind: ProblemKind, partial: bool) -> None:
    error = error_from_transport(exc, partial=partial)
    assert error.kind is kind
    assert error.partial is partial
    assert error.detail
    problem = error.to_problem()
    assert problem.partial is partial
    assert problem.next_step is not None


@pytest.mark.parametrize(
    ("said", "words"),
    [
        ("[Errno -2] Name or service not known", "check the address"),
        ("[Errno -3] Temporary failure in name resolution", "check the address"),
        ("[Errno 8] nodename nor servname provided, or not known", "check the address"),
        ("[Errno 111] Connection refused", "is the server running?"),
        ("All connection attempts failed", "is the server running?"),
        (
            "[WinError 10061] No connection could be made because the target machine actively "
            "refused it",
            "is the server running?",
        ),
        ("[Errno 101] Network is unreachable", "check the network"),
        ("[Errno 99] Something new", "Something new"),
    ],
)
def test_a_failed_connection_is_said_in_words_without_an_errno(said: str, words: str) -> None:
    error = error_from_transport(httpx.ConnectError(said), partial=False)
    assert error.kind is ProblemKind.UNREACHABLE
    assert words in error.detail
    assert "Errno" not in error.detail and "WinError" not in error.detail
