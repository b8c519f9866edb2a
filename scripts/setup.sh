#!/usr/bin/env bash
# Shared set-up for both front-door commands: Qt's system libraries (when missing and we may
# install them), a project virtualenv in .venv, the bundled model's portable runtime, and Conch
# installed into the venv with the extras asked.
# Usage: scripts/setup.sh EXTRAS [--rebuild-runtime]   (EXTRAS e.g. "local" or "dev,local")
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-local}"
rebuild=0
[ "${2:-}" = "--rebuild-runtime" ] && rebuild=1

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

case ",$extras," in
  *,local,*) bash scripts/build_runtime.sh $([ "$rebuild" = 1 ] && echo --rebuild) ;;
esac
# The runtime is already in the venv (built above with portable flags); should pip still decide
# to build llama-cpp-python, the same portable flags apply and its wheel cache is not consulted.
export CMAKE_ARGS="$(bash scripts/build_runtime.sh --print-cmake-args)"
# The test environment installs the exact versions in constraints-dev.txt (scripts/lock.py),
# so every checkout and CI test against the same packages; a plain install takes the newest.
pins=()
case ",$extras," in *,dev,*) pins=(-c constraints-dev.txt) ;; esac
.venv/bin/python -m pip install -q ${pins[@]+"${pins[@]}"} -e ".[${extras}]"

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
    if command -v npm >/dev/null 2>&1 \
        && [ ! -x "$codex_dir/node_modules/.bin/mcp-server-filesystem" ]; then
      npm install -s --prefix "$codex_dir" @modelcontextprotocol/server-filesystem@2026.8.31 \
        >/dev/null \
        || echo "setup: could not install the MCP filesystem server; npx fetches it in its test" >&2
    fi ;;
esac
