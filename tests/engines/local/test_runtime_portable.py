"""The bundled runtime's CPU needs: what the prebuilt library uses, and what a computer whose
processor lacks it is told instead of a crash.

The library is xllamacpp's prebuilt wheel (llama.cpp built for a CPU baseline, not for the
machine that built it). These tests read the library itself, and start the runtime on a
processor that lacks AVX2 (its flags given through ``CONCH_CPU_FLAGS``, as /proc/cpuinfo names
them).
"""

from __future__ import annotations

import importlib.util
import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from engines.base import ProblemKind
from engines.local.bundled import (
    CPU_FLAGS_ENV,
    X86_NEEDS,
    BundledRuntime,
    RuntimeState,
    bundled_adapter,
    cpu_missing,
)
from engines.providers.base import ProviderError

# Registers and instructions past x86-64-v3 (AVX2/FMA/F16C): AVX-512 (zmm, opmask k1-k7),
# AMX (tmm, tile*, tdp*), AVX-VNNI and AVX512-BF16.
BEYOND_BASELINE = re.compile(
    r"%zmm\d|%tmm\d|\{%k[1-7]\}|\btileload|\btilestore|\btdpb|\bvpdpbusd|\bvpdpwssd|\bvdpbf16ps"
)
# One instruction only each named extension has, as objdump writes it.
NEEDED = {
    "avx2": re.compile(r"\bvpbroadcastd\b|\bvperm2i128\b|\bvpermd\b"),
    "fma": re.compile(r"\bvfmadd\d+[ps][sd]\b"),
    "f16c": re.compile(r"\bvcvtph2ps\b"),
    "bmi2": re.compile(r"\bshlx\b|\bsarx\b|\bpdep\b"),
}
HAS_EVERYTHING = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma f16c bmi1 bmi2 popcnt"
BEFORE_HASWELL = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx popcnt"  # a Sandy Bridge


def _runtime_library() -> Path:
    spec = importlib.util.find_spec("xllamacpp")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("xllamacpp is not installed here")
    folder = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(folder.glob("xllamacpp*.so")) + sorted(folder.glob("xllamacpp*.pyd"))
    if not found:
        pytest.skip(f"no compiled library under {folder}")
    return found[0]


@pytest.mark.slow
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 only")
@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) is not installed")
def test_the_library_needs_what_conch_checks_for_and_nothing_beyond_avx2() -> None:
    library = _runtime_library()
    used: set[str] = set()
    beyond: set[str] = set()
    with subprocess.Popen(
        ["objdump", "-d", "--no-show-raw-insn", str(library)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as listing:
        assert listing.stdout is not None
        for line in listing.stdout:
            if "\t" not in line:
                continue
            beyond.update(m.group(0) for m in BEYOND_BASELINE.finditer(line))
            used.update(name for name, pattern in NEEDED.items() if pattern.search(line))
    assert listing.returncode == 0
    assert not beyond, f"{library.name} uses instructions past AVX2: {sorted(beyond)[:10]}"
    # Every extension the check asks for is really used: none is asked for in vain, and a
    # processor without one of them would stop with an illegal instruction.
    assert used == set(X86_NEEDS)


def test_a_processor_without_avx2_is_named_with_the_way_on() -> None:
    assert cpu_missing({CPU_FLAGS_ENV: HAS_EVERYTHING}) is None
    why = cpu_missing({CPU_FLAGS_ENV: BEFORE_HASWELL})
    assert why is not None
    assert why.startswith("This computer's processor lacks AVX2, FMA, F16C, BMI2,")
    assert "Ollama, LM Studio or a model API" in why
    # Other processors run the wheel's baseline build; nothing is read from them.
    assert cpu_missing({}, machine="aarch64") is None


async def test_a_runtime_that_cannot_run_here_is_never_started(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CPU_FLAGS_ENV, BEFORE_HASWELL)
    states: list[RuntimeState] = []
    runtime = BundledRuntime(data_dir, on_state=states.append)
    adapter = bundled_adapter(runtime)
    try:
        for _ in range(3):  # asked again and again: the same sentence, never a process
            with pytest.raises(ProviderError) as info:
                await adapter.list_models()
            assert info.value.kind is ProblemKind.UNREACHABLE
            assert info.value.detail == f"Failed: {cpu_missing()}"
            assert runtime.pid is None
    finally:
        await adapter.aclose()
    assert [s.phase for s in states] == ["starting", "failed"] * 3
    assert runtime.crash is None and not runtime.crashes.path.exists()
    assert not runtime.log_path.exists()  # nothing was started that could write one
