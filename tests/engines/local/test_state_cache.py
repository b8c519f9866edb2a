"""The bundled runtime's prompt-state cache keeps to the memory it is given.

Real llama-cpp-python states (numpy arrays of the sizes SmolLM2 saves) in the real cache class,
and the cache the real server app installs on the bundled model.
"""

from __future__ import annotations

from typing import Any

import pytest

# Both come with the ``local`` extra; without it the module is skipped, not a collection error.
np = pytest.importorskip("numpy")
llama_cpp = pytest.importorskip("llama_cpp")

from engines.local.state_cache import CountedRAMCache, state_bytes  # noqa: E402

VOCAB = 49_152  # SmolLM2's vocabulary
BATCH = 512  # llama-cpp-python's default n_batch: the rows of logits a state copies
MB = 1 << 20


def saved_state(tokens: int, kv_bytes: int) -> Any:
    """A state shaped like ``Llama.save_state`` makes one for a prompt of ``tokens`` tokens."""
    return llama_cpp.llama.LlamaState(
        input_ids=np.zeros(tokens, dtype=np.intc),
        scores=np.zeros((min(tokens, BATCH), VOCAB), dtype=np.single),
        n_tokens=tokens,
        llama_state=b"",
        llama_state_size=kv_bytes,
        seed=0,
    )


def test_the_library_cache_holds_far_more_than_its_limit() -> None:
    # Why the counted cache exists: this is what made the runtime grow past 6 GB.
    cache = llama_cpp.LlamaRAMCache(capacity_bytes=512 * MB)
    for n in range(12):
        cache[tuple(range(n, n + 600))] = saved_state(600, kv_bytes=14 * MB)
    held = sum(state_bytes(s) for s in cache.cache_state.values())
    assert held > 2 * 512 * MB


def test_the_counted_cache_keeps_within_its_limit_and_keeps_the_newest() -> None:
    cache = CountedRAMCache(capacity_bytes=512 * MB)
    keys = [tuple(range(n, n + 600)) for n in range(12)]
    for key in keys:
        cache[key] = saved_state(600, kv_bytes=14 * MB)
    assert cache.cache_size <= 512 * MB
    assert len(cache.cache_state) >= 3  # still a useful cache: the chat's recent prefixes
    assert keys[-1] in cache.cache_state and keys[0] not in cache.cache_state
    # A lookup by a longer prompt with the newest prefix finds it.
    assert cache[keys[-1] + (1, 2, 3)].n_tokens == 600


def test_without_logits_for_every_token_a_state_costs_its_kv_cache_alone() -> None:
    # At a 4,096 window a fold's prompt read ahead (about 3,000 tokens, 23 KB each) must stay
    # cached beside the chat's own and the summary's; with 100 MB of unused logits in each,
    # 512 MiB held three.
    kept = CountedRAMCache(capacity_bytes=512 * MB)
    slim = CountedRAMCache(capacity_bytes=512 * MB, logits=False)
    for n in range(8):
        kept[tuple(range(n, n + 3_000))] = saved_state(3_000, kv_bytes=69 * MB)
        slim[tuple(range(n, n + 3_000))] = saved_state(3_000, kv_bytes=69 * MB)
    assert len(kept.cache_state) == 3
    assert len(slim.cache_state) == 7
    assert slim.cache_size <= 512 * MB


def test_a_state_bigger_than_the_cache_is_not_kept_and_evicts_nothing() -> None:
    cache = CountedRAMCache(capacity_bytes=64 * MB)
    small = tuple(range(10))
    cache[small] = saved_state(10, kv_bytes=1 * MB)
    cache[tuple(range(5_000))] = saved_state(5_000, kv_bytes=10 * MB)  # ≈ 110 MB of logits
    assert list(cache.cache_state) == [small]


def test_the_bundled_server_app_uses_the_counted_cache_and_keeps_one_batch_of_logits() -> None:
    from llama_cpp.server import app as app_module

    from engines.local.bundled import find_gguf
    from engines.local.serve import llama_app

    gguf = find_gguf()
    assert gguf is not None, "the bundled model is part of the test set-up"
    llama_app(
        [
            "--model", str(gguf), "--n_ctx", "512", "--n_threads", "1",
            "--cache", "True", "--cache_size", str(64 * MB), "--verbose", "False",
            "--logits_all", "False",
        ]
    )  # fmt: skip
    proxy: Any = app_module._llama_proxy
    model: Any = proxy._current_model
    try:
        assert isinstance(model.cache, CountedRAMCache)
        assert model.cache.capacity_bytes == 64 * MB
        # As the bundled runtime starts it: logits for one batch, not for every token of the
        # window (which each cached state would copy too).
        assert model.scores.shape == (model.n_batch, model.n_vocab())
        # Those rows are never written then, so cached states do not copy them.
        assert model.cache.logits is False
        prompt = "Priya moved the build server to Helsinki in March. " * 6
        first = model.create_completion(prompt, max_tokens=4, temperature=0)
        model.create_completion("Something else entirely.", max_tokens=2, temperature=0)
        saved = model.cache[model.tokenize(prompt.encode())]
        assert saved.scores.shape == (1, model.n_vocab())
        # The slim state restores: the prompt answers as it did when it was read fresh.
        again = model.create_completion(prompt, max_tokens=4, temperature=0)
        assert again["choices"][0]["text"] == first["choices"][0]["text"]
    finally:
        model.close()
