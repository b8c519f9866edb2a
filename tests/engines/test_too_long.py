"""Too-long refusals in every provider's words, and the window each names.

Each body below is a real reply as quoted in a public issue thread or in the local-server notes
(docs/local_servers.md); the comment says where. Request ids and organisation ids are shortened.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.api.too_long import is_too_long, window_in

# (body, status, expected window) for refusals that mean "the input does not fit".
TOO_LONG: list[tuple[str, int | None, int | None]] = [
    # OpenAI chat completions, chathub-dev/chathub#126
    (
        '{"error":{"message":"This model\'s maximum context length is 4097 tokens. However, your '
        'messages resulted in 4294 tokens. Please reduce the length of the messages.","type":'
        '"invalid_request_error","param":"messages","code":"context_length_exceeded"}}',
        400,
        4097,
    ),
    # OpenAI, prompt + completion over the window, NextChat#3195
    (
        '{"error":{"message":"This model\'s maximum context length is 8192 tokens. However, you '
        "requested 8256 tokens (64 in the messages, 8192 in the completion). Please reduce the "
        'length of the messages or completion.","type":"invalid_request_error","param":"messages",'
        '"code":"context_length_exceeded"}}',
        400,
        8192,
    ),
    # OpenAI Responses API stream error (code only, no number), anomalyco/opencode#6071
    (
        '{"type":"error","sequence_number":2,"error":{"type":"invalid_request_error","code":'
        '"context_length_exceeded","message":"Your input exceeds the context window of this model. '
        'Please adjust your input and try again.","param":"input"}}',
        None,
        None,
    ),
    # OpenAI legacy completions wording, AstrBotDevs/AstrBot#1
    (
        "This model's maximum context length is 4097 tokens, however you requested 4569 tokens "
        "(3545 in your prompt; 1024 for the completion). Please reduce your prompt; or completion "
        "length.",
        400,
        4097,
    ),
    # Anthropic Messages API, earendil-works/pi#102
    (
        '{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: '
        '219898 tokens > 200000 maximum"},"request_id":"req_011CVjxi"}',
        400,
        200_000,
    ),
    # Anthropic via Bedrock, daisuke-awaji/moca#254
    (
        "The model returned the following errors: prompt is too long: 200049 tokens > 200000 "
        "maximum",
        400,
        200_000,
    ),
    # Anthropic, a window of 199999, stackblitz/bolt.new#1036
    ("prompt is too long: 209062 tokens > 199999 maximum", 400, 199_999),
    # Anthropic, input + max_tokens over the window, continuedev/continue#6080
    (
        '{"type":"error","error":{"type":"invalid_request_error","message":"input length and '
        "`max_tokens` exceed context limit: 199759 + 8192 > 200000, decrease input length or "
        '`max_tokens` and try again"}}',
        400,
        200_000,
    ),
    # Google Gemini native API, google-gemini/gemini-cli#13006
    (
        '[{"error":{"code":400,"message":"The input token count (1054016) exceeds the maximum '
        'number of tokens allowed (1048576).","errors":[{"message":"The input token count '
        '(1054016) exceeds the maximum number of tokens allowed (1048576).","domain":"global",'
        '"reason":"badRequest"}],"status":"INVALID_ARGUMENT"}}]',
        400,
        1_048_576,
    ),
    # Gemini through an OpenAI-style router, OpenRouterTeam/openrouter-examples#10
    (
        "{'error': {'message': \"This model's maximum context length is 8192 tokens, however you "
        "requested 8977 tokens (8977 in your prompt; 0 for the completion). Please reduce your "
        "prompt; or completion length.\", 'type': 'invalid_request_error', 'param': None, "
        "'code': None}}",
        400,
        8192,
    ),
    # DeepSeek (code is invalid_request_error, not context_length_exceeded), BerriAI/litellm#10431
    (
        '{"error":{"message":"This model\'s maximum context length is 65536 tokens. However, you '
        "requested 68161 tokens (68161 in the messages, 0 in the completion). Please reduce the "
        'length of the messages or completion.","type":"invalid_request_error","param":null,'
        '"code":"invalid_request_error"}}',
        400,
        65_536,
    ),
    # DeepSeek behind a router, escaped inside another error, musistudio/claude-code-router#895
    (
        '{"error":{"message":"Error from provider(deepseek,deepseek-chat: 400): {\\"error\\":{\\"'
        'message\\":\\"This model\'s maximum context length is 131072 tokens. However, you '
        "requested 131329 tokens (123137 in the messages, 8192 in the completion). Please reduce "
        'the length of the messages or completion.\\",\\"type\\":\\"invalid_request_error\\"}}"}}',
        400,
        131_072,
    ),
    # xAI Grok, cline/cline#3120
    (
        "This model's maximum prompt length is 131072 but the request contains 136973 tokens.",
        400,
        131_072,
    ),
    # Groq (no number in the body), OpenHands/OpenHands#1902
    (
        "{'error': {'message': 'Please reduce the length of the messages or completion.', 'type': "
        "'invalid_request_error', 'param': 'messages', 'code': 'context_length_exceeded'}}",
        400,
        None,
    ),
    # Cerebras, Groq's words plus the numbers, cline/cline#5140
    (
        "Please reduce the length of the messages or completion. Current length is 42328 while "
        "limit is 40000",
        400,
        40_000,
    ),
    # Together / Hugging Face TGI, stanford-crfm/helm#2079
    (
        "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 2048. Given: 2019 "
        "`inputs` tokens and 30 `max_new_tokens`",
        422,
        2048,
    ),
    # TGI through an OpenAI-style client, bytedance/UI-TARS-desktop#626
    (
        '422 "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 65537. Given: '
        '79993 `inputs` tokens and 1024 `max_new_tokens`"',
        422,
        65_537,
    ),
    # vLLM <= 0.10.1, vllm-project/vllm#20409 and docs/local_servers.md §E
    (
        '{"object":"error","message":"This model\'s maximum context length is 16384 tokens. '
        "However, you requested 122946 tokens (112946 in the messages, 10000 in the completion). "
        'Please reduce the length of the messages or completion.","type":"BadRequestError",'
        '"param":null,"code":400}',
        400,
        16_384,
    ),
    # vLLM 0.10.2-0.17, input alone too long, docs/local_servers.md §E
    (
        '{"error":{"message":"This model\'s maximum context length is 32768 tokens. However, your '
        'request has 40211 input tokens. Please reduce the length of the input messages.",'
        '"type":"BadRequestError","param":"input_tokens","code":400}}',
        400,
        32_768,
    ),
    # vLLM 0.18+, docs/local_servers.md §E
    (
        '{"error":{"message":"This model\'s maximum context length is 8192 tokens. However, you '
        "requested 1024 output tokens and your prompt contains at least 8000 input tokens, for a "
        "total of at least 9024 tokens. Please reduce the length of the input prompt or the "
        'number of requested output tokens. (parameter=input_tokens, value=8000)","type":'
        '"BadRequestError","param":"input_tokens","code":400}}',
        400,
        8192,
    ),
    # vLLM multimodal wording, vllm-project/vllm#12165
    (
        "ValueError: The prompt (total length 25938) is too long to fit into the model (context "
        "length 4096). Make sure that `max_model_len` is no smaller than the number of text tokens "
        "plus multimodal tokens.",
        400,
        4096,
    ),
    # llama.cpp llama-server today, arbs-io/github-copilot-llm-gateway#73
    (
        '{"error":{"code":400,"message":"request (8708 tokens) exceeds the available context size '
        '(8192 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":'
        '8708,"n_ctx":8192}}',
        400,
        8192,
    ),
    # llama-server Sept 2025 (wording without numbers, fields with), oobabooga/textgen#7257
    (
        '{"error":{"code":400,"message":"the request exceeds the available context size. try '
        'increasing the context size or enable context shift","type":"exceed_context_size_error",'
        '"n_prompt_tokens":14429,"n_ctx":8192}}',
        None,
        8192,
    ),
    # llama-server when the type was first added (HTTP 500), ggml-org/llama.cpp#15780
    (
        '{"error":{"code":500,"message":"the request exceeds the available context size. try '
        'increasing the context size or enable context shift","type":"exceed_context_size_error",'
        '"n_prompt_tokens":1407,"n_ctx":256}}',
        500,
        256,
    ),
    # llama-server, older wording with no numbers at all, docs/local_servers.md §B
    (
        '{"error":{"code":400,"message":"the request exceeds the available context size. try '
        'increasing the context size or enable context shift","type":"invalid_request_error"}}',
        400,
        None,
    ),
    # llama-cpp-python server, docs/local_servers.md §C (abetlen/llama-cpp-python errors.py)
    (
        '{"error":{"message":"This model\'s maximum context length is 2048 tokens. However, you '
        "requested 2285 tokens (2285 in the messages, None in the completion). Please reduce the "
        'length of the messages or completion.","type":"invalid_request_error","param":"messages",'
        '"code":"context_length_exceeded"}}',
        400,
        2048,
    ),
    # llama-cpp-python's inner exception, fedora-copr/logdetective-website#193
    ("Exception: Requested tokens (2285) exceed context window of 2048", None, 2048),
    # LM Studio, llama.cpp engine, lmstudio-ai/lmstudio-bug-tracker#546
    (
        "Trying to keep the first 111490 tokens when context the overflows. However, the model is "
        "loaded with context length of only 32768 tokens, which is not enough. Try to load the "
        "model with a larger context length, or provide a shorter input",
        400,
        32_768,
    ),
    # LM Studio 0.4, anomalyco/opencode#11141
    ('{"error":"Cannot truncate prompt with n_keep (15028) >= n_ctx (7424)"}', 400, 7424),
    # LM Studio, another 0.4 wording, tinyhumansai/openhuman#3550
    (
        "The number of tokens to keep from the initial prompt is greater than the context length "
        "(n_keep: 10247 >= n_ctx: 4096). Try to load the model with a larger context length, or "
        "provide a shorter prompt.",
        400,
        4096,
    ),
    # LM Studio MLX engine, lmstudio-ai/lmstudio-bug-tracker#2339
    ('{"error":"Context size has been exceeded."}', 400, None),
    # LM Studio 2023, lmstudio-ai/model-catalog#38
    ("Input length 1581 exceeds context length 1500", 400, 1500),
    # OpenRouter, nothing in metadata, earendil-works/pi#6378
    (
        '{"message":"This endpoint\'s maximum context length is 262000 tokens. However, you '
        "requested about 263390 tokens (658 of text input, 732 of tool input, 262000 in the "
        "output). Please reduce the length of either one, or use the context-compression plugin "
        'to compress your prompt automatically.","code":400,"metadata":{"provider_name":null}}',
        400,
        262_000,
    ),
    # OpenRouter, refly-ai/refly#1177
    (
        "400 This endpoint's maximum context length is 32768 tokens. However, you requested about "
        '42832 tokens (42832 of text input). Please reduce the length of either one, or use the "'
        'middle-out" transform to compress your prompt automatically.',
        400,
        32_768,
    ),
    # Ollama, num_ctx too small with truncate:false, nano-step/nano-brain#208
    ('{"error":"the input length exceeds the context length"}', 400, None),
    # Ollama v0.30+ with shift:false, docs/local_servers.md §A5
    (
        '{"error":"the prompt is longer than the context length currently available to the model; '
        "shorten the prompt, adjust the context length in settings, or use a model with a longer "
        'context length"}',
        400,
        None,
    ),
    # Zhipu / Z.AI code 1261, zeroclaw-labs/zeroclaw#4124
    ('{"error":{"code":"1261","message":"Prompt exceeds max length"}}', 400, None),
]

# Bodies that mention limits, tokens or lengths but are not "the input does not fit".
NOT_TOO_LONG: list[tuple[str, int | None]] = [
    # OpenAI output cap, NextChat#3195
    (
        '{"error":{"message":"max_tokens is too large: 8192. This model supports at most 4096 '
        'completion tokens, whereas you provided 8192.","type":"invalid_request_error","param":'
        '"max_tokens","code":null}}',
        400,
    ),
    # vLLM 0.10.2-0.17 output limit, claude-code-best/claude-code#272
    (
        "Error: 400 'max_tokens' or 'max_completion_tokens' is too large: 64000. This model's "
        "maximum context length is 64001 tokens and your request has 24235 input tokens "
        "(64000 > 64001 - 24235). None",
        400,
    ),
    # vLLM's separate output check, docs/local_servers.md §E
    ("max_tokens=40000 cannot be greater than max_model_len=32768", 400),
    # OpenAI rate limit in tokens, BuilderIO/micro-agent#86
    (
        "Rate limit reached for gpt-4o in organization org-uOti on tokens per min (TPM): Limit "
        "30000, Used 29937, Requested 385. Please try again in 644ms.",
        429,
    ),
    # OpenAI "Request too large" is a per-minute limit, TheR1D/shell_gpt#653 (checked without
    # the status too: the words alone must say rate limit)
    (
        "{'error': {'message': 'Request too large for gpt-4o in organization org-78as on tokens "
        "per min (TPM): Limit 30000, Requested 31538. The input or output tokens must be "
        "reduced in order to run successfully.', 'type': 'tokens', 'param': None, 'code': "
        "'rate_limit_exceeded'}}",
        None,
    ),
    # Groq's 413 per-minute limit, ITSpecialist111/ai_automation_suggester#61
    (
        '{"error":{"message":"Request too large for model `llama-3.3-70b-versatile` in '
        "organization `org_01jp` service tier `on_demand` on tokens per minute (TPM): Limit 6000, "
        'Requested 14810, please reduce your message size and try again.","type":"tokens",'
        '"code":"rate_limit_exceeded"}}',
        413,
    ),
    # Anthropic picture size, anthropics/claude-code#10612
    (
        '{"type":"error","error":{"type":"invalid_request_error","message":"messages.0.content.2.'
        'image.source.base64: image exceeds 5 MB maximum: 15908784 bytes > 5242880 bytes"}}',
        400,
    ),
    # OpenRouter credits, can1357/oh-my-pi#9569
    (
        "This request requires more credits, or fewer max_tokens. You requested up to 65536 "
        "tokens, but can only afford 1000.",
        402,
    ),
    # Anthropic overload (docs.anthropic.com errors page)
    ('{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}', 529),
    # OpenAI bad key (platform.openai.com error codes guide)
    (
        '{"error":{"message":"Incorrect API key provided: sk-abc***. You can find your API key at '
        'https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":'
        'null,"code":"invalid_api_key"}}',
        401,
    ),
    # Azure OpenAI content filter (learn.microsoft.com content filtering docs)
    (
        '{"error":{"message":"The response was filtered due to the prompt triggering Azure '
        'OpenAI\'s content management policy. Please modify your prompt and retry.","type":'
        'null,"param":"prompt","code":"content_filter","status":400}}',
        400,
    ),
    # Ollama model missing, docs/local_servers.md §A8
    ('{"error":"model \'llama3\' not found"}', 404),
    # Mistral rejects an unknown field, editor-code-assistant/eca#231
    (
        '{"object":"error","message":{"detail":[{"type":"extra_forbidden","loc":["body",'
        '"max_completion_tokens"],"msg":"Extra inputs are not permitted","input":32000}]},'
        '"type":"invalid_request_error","param":null,"code":null}',
        422,
    ),
    # Ollama's queue, docs/local_servers.md §A7
    ("server busy, please try again.  maximum pending requests exceeded", 503),
    # A too-long body sent with a status that never means too long (a key problem wins)
    (
        '{"error":{"code":"context_length_exceeded","message":"maximum context length is 8192"}}',
        401,
    ),
    ("", 400),
]


@pytest.mark.parametrize(("body", "status", "window"), TOO_LONG)
def test_too_long_refusals_are_recognised_with_their_window(
    body: str, status: int | None, window: int | None
) -> None:
    assert is_too_long(body, status)
    assert is_too_long(body)  # the words alone are enough (errors inside a 200 stream)
    assert window_in(body) == window


@pytest.mark.parametrize(("body", "status"), NOT_TOO_LONG)
def test_other_refusals_are_not_too_long(body: str, status: int | None) -> None:
    assert not is_too_long(body, status)


def test_the_table_is_large_enough() -> None:
    assert len(TOO_LONG) >= 30
    assert len(NOT_TOO_LONG) >= 10


def test_window_is_read_not_the_prompt_size() -> None:
    body = (
        "request (9412 tokens) exceeds the available context size (8192 tokens), try increasing it"
    )
    assert window_in(body) == 8192
    assert window_in("prompt is too long: 210000 tokens > 200000 maximum") == 200_000


def test_windows_written_with_thousands_separators() -> None:
    assert window_in("This model's maximum context length is 128,000 tokens.") == 128_000


def test_a_body_wrapped_as_a_json_string_still_reads() -> None:
    inner = '{"error":{"message":"prompt is too long: 250000 tokens > 200000 maximum"}}'
    outer = json.dumps(
        {"error": {"message": "Provider returned error", "metadata": {"raw": inner}}}
    )
    assert is_too_long(outer, 400)
    assert window_in(outer) == 200_000


def test_numbers_that_are_not_windows_are_ignored() -> None:
    assert window_in("maximum context length is 3 tokens") is None
    assert window_in("nothing to see here") is None


@settings(max_examples=400, deadline=None)
@given(body=st.text(), status=st.one_of(st.none(), st.integers(min_value=-1000, max_value=1000)))
def test_never_raises_on_any_text(body: str, status: int | None) -> None:
    assert is_too_long(body, status) in (True, False)
    found = window_in(body)
    assert found is None or found > 0


@settings(max_examples=200, deadline=None)
@given(
    prefix=st.text(max_size=50),
    number=st.integers(min_value=0, max_value=10**12),
    suffix=st.text(max_size=50),
)
def test_never_raises_on_phrases_with_odd_numbers(prefix: str, number: int, suffix: str) -> None:
    body = f"{prefix}maximum context length is {number} tokens n_ctx ({number}){suffix}"
    assert is_too_long(body) in (True, False)
    found = window_in(body)
    assert found is None or 16 <= found <= 100_000_000
