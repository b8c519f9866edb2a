#!/usr/bin/env bash
# Shared set-up for both front-door commands: Qt's system libraries (when missing and we may
# install them), a project virtualenv in .venv, and Conch installed into it with the extras asked.
# Usage: scripts/setup.sh EXTRAS   (e.g. "local" or "dev,local")
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-local}"

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
    || echo "setup: could not install ${missing[*]}; Qt may fail to start" >&2
fi

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# llama-cpp-python builds from source; LLaVA is not needed and halves the build time.
export CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF}"
.venv/bin/python -m pip install -q -e ".[${extras}]"
