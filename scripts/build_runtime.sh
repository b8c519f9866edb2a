#!/usr/bin/env bash
# Build and install the bundled model's runtime (llama-cpp-python) for a CPU baseline, never for
# the build machine's own CPU: a runtime compiled with -march=native dies with SIGILL on any
# computer that lacks (or, in a virtual machine, traps) an instruction the build machine had.
#
# The wheel is kept in a cache folder keyed by version, Python, architecture and flags; pip's
# own wheel cache is never used for it (that one is keyed by the source archive only, so a
# natively built wheel would be reused silently after the flags change).
#
# Usage: scripts/build_runtime.sh [--rebuild | --print-cmake-args | --print-label]
# CONCH_RUNTIME_CPU=x86-64-v2|x86-64-v3 forces the x86-64 baseline (default: v3 when this CPU
# can run it, else v2).
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-}"

# The one home of the runtime's version is pyproject.toml's "local" extra.
version=$(sed -n 's/.*"llama-cpp-python\[server\]==\([0-9.]*\)".*/\1/p' pyproject.toml | head -1)
[ -n "$version" ] || { echo "setup: pyproject.toml pins no llama-cpp-python version" >&2; exit 1; }

arch=$(uname -m)
common="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF"
case "$arch" in
  x86_64|amd64)
    tier="${CONCH_RUNTIME_CPU:-}"
    if [ -z "$tier" ]; then
      tier=x86-64-v2
      if [ -r /proc/cpuinfo ]; then
        flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
        case "$flags" in
          *" avx2 "*) case "$flags" in *" fma "*) case "$flags" in *" f16c "*)
            tier=x86-64-v3 ;; esac ;; esac ;;
        esac
      else
        tier=x86-64-v3
      fi
    fi
    # Everything above the baseline is switched off by name, AVX-512 and AMX included.
    off="-DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF"
    off="$off -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
    if [ "$tier" = x86-64-v3 ]; then
      cpu="-DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
      label="x86-64 with AVX2, FMA and F16C (any x86-64 desktop CPU since 2013-2015)"
    else
      cpu="-DGGML_SSE42=ON -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_BMI2=OFF"
      label="x86-64 with SSE4.2 only (slower; any x86-64 CPU since 2009)"
    fi
    cmake_args="$common $cpu $off"
    ;;
  aarch64|arm64)
    if [ "$(uname -s)" = Darwin ]; then
      cmake_args="$common"  # Apple silicon: NEON and Metal are on every model.
      label="Apple silicon (arm64, Metal)"
    else
      cmake_args="$common -DGGML_CPU_ARM_ARCH=armv8-a"
      label="arm64 baseline (ARMv8-A with NEON)"
    fi
    ;;
  *)
    cmake_args="$common"
    label="$arch without CPU-specific extensions"
    ;;
esac

case "$mode" in
  --print-cmake-args) echo "$cmake_args"; exit 0 ;;
  --print-label) echo "$label"; exit 0 ;;
esac

py=".venv/bin/python"
pyver=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
key=$(printf '%s|%s|%s|%s' "$version" "$pyver" "$arch" "$cmake_args" | sha256sum | cut -c1-16)
cache="${CONCH_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/conch/wheels}/llama-cpp-python-$key"
stamp=".venv/conch-runtime.txt"

if [ "$mode" != --rebuild ] && [ -f "$stamp" ] && [ "$(head -1 "$stamp")" = "$key" ] \
   && "$py" -c 'import llama_cpp' >/dev/null 2>&1; then
  echo "setup: bundled runtime llama-cpp-python $version, built for $label"
  exit 0
fi

if [ "$mode" = --rebuild ] || ! ls "$cache"/*.whl >/dev/null 2>&1; then
  echo "setup: compiling the bundled model's runtime (llama-cpp-python $version) for $label;" \
       "this takes about ten minutes on two cores"
  tmp="$cache.partial.$$"
  rm -rf "$tmp" && mkdir -p "$tmp"
  CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc 2>/dev/null || echo 2)" \
    "$py" -m pip wheel -q --no-deps --no-cache-dir --no-binary llama-cpp-python \
    -w "$tmp" "llama-cpp-python==$version"
  rm -rf "$cache" && mv "$tmp" "$cache"
fi
"$py" -m pip install -q --no-deps --force-reinstall "$cache"/*.whl
printf '%s\n%s\n' "$key" "$label" > "$stamp"
echo "setup: bundled runtime llama-cpp-python $version, built for $label"
