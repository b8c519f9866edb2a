"""Too-long refusals in every provider's words, and the window each names.

The bodies live in ``tests/data/too_long_corpus.json``: one object per body with the provider,
HTTP status, the body as it was posted, whether it means "the input does not fit", the window
it names, a category, how much of it is verbatim (``form``) and the public page it came from.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from engines.providers.too_long import is_too_long, window_in

CORPUS_PATH = Path(__file__).resolve().parent.parent / "data" / "too_long_corpus.json"
CORPUS: list[dict[str, Any]] = json.loads(CORPUS_PATH.read_text(encoding="utf-8"))
TOO_LONG = [entry for entry in CORPUS if entry["too_long"]]
NEAR_MISSES = [entry for entry in CORPUS if not entry["too_long"]]


def _id(entry: dict[str, Any]) -> str:
    return f"{entry['provider']}-{CORPUS.index(entry)}"


@pytest.mark.parametrize("entry", TOO_LONG, ids=_id)
def test_too_long_refusals_are_recognised_with_their_window(entry: dict[str, Any]) -> None:
    assert is_too_long(entry["body"], entry["status"]), entry["source"]
    assert is_too_long(entry["body"]), entry["source"]  # the words alone (errors in a 200 stream)
    assert window_in(entry["body"]) == entry["window"], entry["source"]


@pytest.mark.parametrize("entry", NEAR_MISSES, ids=_id)
def test_near_misses_are_not_too_long(entry: dict[str, Any]) -> None:
    assert not is_too_long(entry["body"], entry["status"]), entry["source"]
    assert not is_too_long(entry["body"]), entry["source"]


def test_the_corpus_is_large_varied_and_sourced() -> None:
    providers = {entry["provider"] for entry in CORPUS}
    assert len(CORPUS) >= 150 and len(providers) >= 40
    for entry in CORPUS:
        assert entry["source"].startswith("https://"), entry
        assert entry["form"] in {"verbatim", "message", "excerpt", "template"}, entry
        assert isinstance(entry["body"], str) and entry["body"], entry
        assert entry["window"] is None or entry["too_long"], entry
    near_miss_kinds = Counter(entry["category"] for entry in NEAR_MISSES)
    for kind in ("output_limit", "rate_limit", "request_bytes", "image_limit", "quota"):
        assert near_miss_kinds[kind] >= 3, kind
    assert near_miss_kinds["content_filter"] >= 2


def test_window_is_read_not_the_prompt_size() -> None:
    body = (
        "request (9412 tokens) exceeds the available context size (8192 tokens), try increasing it"
    )
    assert window_in(body) == 8192
    assert window_in("prompt is too long: 210000 tokens > 200000 maximum") == 200_000
    assert window_in("input length and `max_tokens` exceed context limit: 9 + 8 > 4096") == 4096
    assert window_in("prompt too long; exceeded max context length by 540451 tokens") is None


def test_windows_written_with_separators_or_suffixes() -> None:
    assert window_in("This model's maximum context length is 128,000 tokens.") == 128_000
    assert window_in("This model's maximum context length is 1_048_576 tokens.") == 1_048_576
    assert window_in("Model context window is 128k tokens, you requested 256k tokens") == 128_000


def test_a_body_wrapped_as_a_json_string_still_reads() -> None:
    inner = '{"error":{"message":"prompt is too long: 250000 tokens > 200000 maximum"}}'
    outer = json.dumps(
        {"error": {"message": "Provider returned error", "metadata": {"raw": inner}}}
    )
    assert is_too_long(outer, 400)
    assert window_in(outer) == 200_000
    twice = json.dumps({"detail": outer})
    assert is_too_long(twice) and window_in(twice) == 200_000


def test_an_sse_error_event_reads_like_its_json() -> None:
    body = (
        "event: error\n"
        'data: {"type":"error","error":{"type":"invalid_request_error",'
        '"message":"prompt is too long: 250000 tokens > 200000 maximum"}}\n\n'
    )
    assert is_too_long(body) and window_in(body) == 200_000


def test_an_output_cap_is_not_too_long_but_input_plus_output_is() -> None:
    assert not is_too_long("max_tokens: 100000 > 64000, which is the maximum allowed")
    assert not is_too_long("`max_new_tokens` must be <= 2048. Given: 4096")
    assert is_too_long("`inputs` tokens + `max_new_tokens` must be <= 2048. Given: 2019")
    assert is_too_long("input length and `max_tokens` exceed context limit: 9 + 8 > 4096")


def test_a_rate_limit_word_vetoes_only_its_own_message() -> None:
    rate = "Request too large on tokens per min (TPM): Limit 30000, Requested 31538."
    assert not is_too_long(rate)
    mixed = json.dumps(
        {"errors": [{"message": rate}, {"message": "prompt is too long: 9 tokens > 8 maximum"}]}
    )
    assert is_too_long(mixed)


def test_numbers_that_are_not_windows_are_ignored() -> None:
    assert window_in("maximum context length is 3 tokens") is None
    assert window_in("nothing to see here") is None
    assert window_in("invalid params, context window exceeds limit (2013)") is None
    assert window_in("string too long. Expected a string with maximum length 1048576") is None


def test_a_status_that_is_never_too_long_wins_over_the_words() -> None:
    body = '{"error":{"code":"context_length_exceeded","message":"maximum context length is 8192"}}'
    assert is_too_long(body, 400)
    for status in (401, 402, 403, 404, 429):
        assert not is_too_long(body, status)
    assert not is_too_long("", 400)


@pytest.mark.parametrize(
    ("body", "window"),
    [
        ("Prompt (9000 tokens) does not fit in the context window (8192 tokens)", 8192),
        ("context length of 9000 is above the limit of 8192", 8192),
        ("Your prompt is over the limit of 8192 tokens", 8192),
        (
            "The number of input tokens (9000) is greater than the model's context window (8192)",
            8192,
        ),
        ("Input is 9000 tokens; the model supports only 8192", 8192),
        ("Token limit reached", None),
        ("PROMPT_TOO_LONG", None),
        ("上下文长度超过限制，最大为8192", 8192),
        ("输入内容过长，请缩短后重试", None),
    ],
)
def test_wordings_nobody_collected_are_read_by_their_shape(body: str, window: int | None) -> None:
    assert is_too_long(body)
    assert window_in(body) == window


@pytest.mark.parametrize(
    "body",
    [
        "The operation took too long",
        "414 Request-URI Too Long",
        "Stop sequence too long",
        "n_ctx must be greater than 0",
        "The document exceeds the maximum of 100 pages",
        "Number of images (12) exceeds the maximum of 10",
        "Your account has exceeded its monthly budget",
        "Invalid 'tools': array too long. Expected an array with maximum length 128.",
        "输出长度超过限制",
        "请求频率超过限制",
    ],
)
def test_other_things_beyond_a_limit_are_not_too_long(body: str) -> None:
    assert not is_too_long(body)
