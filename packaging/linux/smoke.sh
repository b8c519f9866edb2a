#!/usr/bin/env bash
# CI smoke step: build the Linux one-folder bundle with PyInstaller and start it offscreen on the
# mock engine; it must open the window and exit cleanly by itself.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
.venv/bin/pyinstaller packaging/conch.spec --noconfirm --log-level WARN \
  --distpath "$work/dist" --workpath "$work/build"
bundle="$work/dist/Conch"
[ -x "$bundle/conch" ] || { echo "smoke: the bundle has no conch program" >&2; exit 1; }
data="$work/data"
QT_QPA_PLATFORM=offscreen HOME="$work/home" timeout 120 \
  "$bundle/conch" --mock --data-dir "$data" --quit-after 3
[ -f "$data/conch.sqlite3" ] || { echo "smoke: the bundle wrote no chat log" >&2; exit 1; }
HOME="$work/home" timeout 60 "$bundle/conch-cli" models --mock --data-dir "$data" --json \
  | grep -q '"mock-model"' || { echo "smoke: conch-cli models failed" >&2; exit 1; }
echo "smoke: the Linux bundle started offscreen on the mock engine and exited cleanly"
