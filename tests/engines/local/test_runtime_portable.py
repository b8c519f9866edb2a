"""The bundled runtime is built for a CPU baseline, not for the machine that compiled it.

A llama.cpp built with ``GGML_NATIVE=ON`` carries every instruction the build machine
advertises (AVX-512, AMX); on a computer without them, or in a virtual machine that traps them,
the first answer dies with SIGILL. These tests read the compiled CPU library itself.
"""

from __future__ import annotations

import importlib.util
import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

# Registers and instructions past x86-64-v3 (AVX2/FMA/F16C): AVX-512 (zmm, opmask k1-k7),
# AMX (tmm, tile*, tdp*), AVX-VNNI and AVX512-BF16.
BEYOND_BASELINE = re.compile(
    r"%zmm\d|%tmm\d|\{%k[1-7]\}|\btileload|\btilestore|\btdpb|\bvpdpbusd|\bvpdpwssd|\bvdpbf16ps"
)


def _cpu_libraries() -> list[Path]:
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llama-cpp-python is not installed here")
    lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    found = sorted(lib.glob("libggml-cpu*.so*")) or sorted(lib.glob("libggml*.so*"))
    if not found:
        pytest.skip(f"no ggml library under {lib}")
    return found


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 only")
@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) is not installed")
def test_the_cpu_library_uses_nothing_beyond_avx2() -> None:
    for library in _cpu_libraries():
        listing = subprocess.run(
            ["objdump", "-d", "--no-show-raw-insn", str(library)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "vfmadd" in listing or "addps" in listing, f"{library.name}: no code read"
        beyond = sorted({m.group(0) for m in BEYOND_BASELINE.finditer(listing)})
        assert not beyond, f"{library.name} uses instructions past AVX2: {beyond[:10]}"


def test_the_build_script_never_asks_for_the_native_cpu() -> None:
    args = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build_runtime.sh"), "--print-cmake-args"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "-DGGML_NATIVE=OFF" in args
    assert "GGML_NATIVE=ON" not in args
    if platform.machine() in ("x86_64", "AMD64"):
        for flag in ("AVX512", "AMX_TILE", "AMX_INT8", "AVX_VNNI"):
            assert f"-DGGML_{flag}=OFF" in args


def test_a_forced_older_baseline_switches_avx_off() -> None:
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("x86-64 only")
    args = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build_runtime.sh"), "--print-cmake-args"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "CONCH_RUNTIME_CPU": "x86-64-v2"},
    ).stdout
    assert "-DGGML_AVX2=OFF" in args and "-DGGML_AVX=OFF" in args
