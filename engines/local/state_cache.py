"""The bundled runtime's cache of prompt states, counted by what it really holds.

llama-cpp-python's ``LlamaRAMCache`` keeps a state per prompt and evicts by the size of the
llama.cpp state alone. Each saved state also carries a copy of the logits (up to ``n_batch`` rows
of the whole vocabulary: 512 × 49,152 × 4 bytes ≈ 100 MB for SmolLM2) and the prompt's tokens,
which that count leaves out. A "512 MiB" cache of short prompts then held dozens of states and
the runtime grew past 6 GB on a long chat. This cache counts every byte a state keeps, so the
limit the launcher passes is the memory it costs.

A model that keeps no logits for every prompt token (``logits_all`` off, as the bundled runtime
starts it) never writes those rows: sampling reads the context's own logits, and logprobs are
refused. Their copy is then dropped from each state but one row (restoring a state broadcasts
it), so a state costs its KV cache alone: at 4,096 tokens a 3,000-token prompt is about 70 MB
instead of 170 MB, and the cache keeps the fold's prompt read ahead as well as the chat's own.

Only the runtime's own process imports this module (it needs ``llama_cpp``).
"""

from __future__ import annotations

from typing import Any

from llama_cpp.llama_cache import LlamaRAMCache


def state_bytes(state: Any) -> int:
    """What one saved state keeps in memory: the llama.cpp state, the logits and the tokens."""
    total = int(state.llama_state_size)
    for array in (getattr(state, "scores", None), getattr(state, "input_ids", None)):
        total += int(getattr(array, "nbytes", 0))
    return total


def without_logits(state: Any) -> Any:
    """``state`` keeping one row of its copied logits (the rest were never written)."""
    scores = getattr(state, "scores", None)
    if scores is not None and getattr(scores, "ndim", 0) == 2 and scores.shape[0] > 1:
        state.scores = scores[-1:].copy()
    return state


class CountedRAMCache(LlamaRAMCache):
    """``LlamaRAMCache`` whose size counts the whole of every state, oldest evicted first.

    ``logits``: whether the model keeps logits for every prompt token (then each state keeps
    its copy of them; else only one row)."""

    def __init__(self, capacity_bytes: int, *, logits: bool = True) -> None:
        super().__init__(capacity_bytes=capacity_bytes)
        self.logits = logits

    @property
    def cache_size(self) -> int:
        return sum(state_bytes(state) for state in self.cache_state.values())

    def __setitem__(self, key: Any, value: Any) -> None:
        if not self.logits:
            value = without_logits(value)
        if state_bytes(value) > self.capacity_bytes:
            return  # a state bigger than the whole cache would only evict everything, then itself
        super().__setitem__(key, value)


def count_states(app_module: Any) -> bool:
    """Give the server's loaded model a counted cache in place of the one it was built with.

    ``app_module`` is ``llama_cpp.server.app`` after ``create_app``. Returns whether a cache was
    replaced (False when the server was started without one)."""
    proxy = getattr(app_module, "_llama_proxy", None)
    model = getattr(proxy, "_current_model", None)
    cache = getattr(model, "cache", None)
    if model is None or not isinstance(cache, LlamaRAMCache):
        return False
    # The library keeps this flag private; when it cannot be read, states keep their logits.
    logits = bool(getattr(model, "_logits_all", True))
    model.set_cache(CountedRAMCache(capacity_bytes=cache.capacity_bytes, logits=logits))
    return True
