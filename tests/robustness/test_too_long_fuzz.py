"""The "too long" classifier on hostile and arbitrary input: it answers, fast, and never raises.

Also a metamorphic check on the whole corpus: wrapping a body the way routers and streams do
(JSON inside a JSON string, an SSE error event, a proxy's prose prefix) never changes the answer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engines.providers.too_long import is_too_long, verdict, window_in

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CORPUS: list[dict[str, Any]] = json.loads(
    (Path(__file__).resolve().parent.parent / "data" / "too_long_corpus.json").read_text("utf-8")
)

# Words and marks the grammar reacts to, so generated text reaches its every branch.
_VOCABULARY_TEXT = (
    "prompt input messages context window tokens token length size limit maximum max allowed "
    "exceeds exceeded too long large many longer than greater must be <= < > >= + - cannot "
    "exceed should [ ] ( ) , : ; . but while only supports up to of is n_ctx max_tokens "
    "rate per minute quota credits bytes image pixels output completion however requested "
    'contains got by ~ k 超过 输入 上下文 最大 `inputs` \'message\': {"error": \\" \\n data:'
)
VOCABULARY = _VOCABULARY_TEXT.split()

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
    | st.sampled_from(VOCABULARY),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=16,
)
grammar_text = st.lists(
    st.sampled_from(VOCABULARY) | st.integers(min_value=0, max_value=10**12).map(str),
    max_size=40,
).map(" ".join)
statuses = st.none() | st.integers(min_value=-(2**40), max_value=2**40)


def _answers(body: str, status: int | None = None) -> None:
    # The unguarded grammar: an exception here would be a too-long refusal the guard turns into
    # "not too long", so the chat would fail instead of healing.
    answer = verdict(body, status)
    assert isinstance(answer, bool)
    assert is_too_long(body, status) is answer
    window = window_in(body)
    assert window is None or 16 <= window <= 100_000_000


@FUZZ
@given(st.text(max_size=500), statuses)
def test_any_text_gets_an_answer(body: str, status: int | None) -> None:
    _answers(body, status)


@FUZZ
@given(grammar_text, statuses)
def test_text_made_of_the_grammars_own_words_gets_an_answer(body: str, status: int | None) -> None:
    _answers(body, status)


@FUZZ
@given(json_values, st.integers(min_value=0, max_value=5))
def test_json_wrapped_in_json_strings_gets_an_answer(value: Any, wraps: int) -> None:
    body = json.dumps(value)
    for _ in range(wraps):
        body = json.dumps({"error": {"message": "upstream", "metadata": {"raw": body}}})
    _answers(body, 400)
    _answers(f"event: error\ndata: {body}\n\n")


@FUZZ
@given(
    st.integers(min_value=16, max_value=100_000_000),
    st.integers(min_value=1, max_value=10**9),
    st.sampled_from(["{:,}", "{}", "{:_}"]),
)
def test_the_limit_is_read_whatever_was_sent(window: int, sent: int, shape: str) -> None:
    bodies = (
        f"request ({sent} tokens) exceeds the available context size ({shape.format(window)} "
        "tokens), try increasing it",
        f"prompt is too long: {sent} tokens > {shape.format(window)} maximum",
        f"prompt token count of {sent} exceeds the limit of {shape.format(window)}",
    )
    for body in bodies:
        assert is_too_long(body, 400)
        assert window_in(body) == window


@pytest.mark.parametrize(
    "body",
    [
        "[" * 200_000,
        '{"a":' * 50_000 + "1" + "}" * 50_000,
        "{" * 100_000,
        " ".join(str(i) for i in range(200_000)),
        "exceeds too long > " * 50_000,
        ("input token count " + "x" * 39 + " maximum context length  context window of ") * 20_000,
        "[1, 2] " * 100_000,
        "'a': " * 100_000,
        "9" * 100_000,
        "输入超过" * 100_000,
        "data: " * 100_000,
    ],
    ids=lambda body: f"{body[:12]!r}x{len(body)}",
)
def test_huge_and_deeply_nested_bodies_are_answered_quickly(body: str) -> None:
    started = time.process_time()  # CPU work, which a busy machine does not inflate
    _answers(body, 400)
    assert time.process_time() - started < 5.0  # far above need: well under 1 s


WRAPPERS: dict[str, Callable[[str], str]] = {
    "openrouter-raw": lambda body: json.dumps(
        {"error": {"message": "Provider returned error", "code": 400, "metadata": {"raw": body}}}
    ),
    "sse-event": lambda body: "event: error\ndata: " + json.dumps({"error": {"message": body}}),
    "proxy-detail": lambda body: json.dumps({"detail": "Error code: 400 - " + body}),
}


@pytest.mark.parametrize("wrapper", WRAPPERS.values(), ids=list(WRAPPERS))
def test_wrapping_a_body_never_changes_the_answer(wrapper: Callable[[str], str]) -> None:
    for entry in CORPUS:
        wrapped = wrapper(entry["body"])
        assert is_too_long(wrapped) == entry["too_long"], entry["source"]
        if entry["too_long"]:
            assert window_in(wrapped) == entry["window"], entry["source"]


@pytest.mark.parametrize("status", [401, 403, 404, 429])
def test_a_refusal_for_another_reason_is_never_too_long_whatever_its_body(status: int) -> None:
    # A rate limit or a bad key whose text happens to talk about tokens must not fold the chat.
    bodies = [entry["body"] for entry in CORPUS if entry["too_long"]]
    assert bodies
    assert not any(is_too_long(body, status) for body in bodies)
