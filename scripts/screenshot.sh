#!/usr/bin/env bash
# Screenshots of llmplan-gui for the README: starts the app under Xvfb on an example
# (Llama 2 70B on 64 H100s, global batch 128), runs the sweep, selects the best plan and
# saves a PNG of each tab into docs/ (gui-plans.png, gui-selected-plan.png,
# gui-timeline.png, gui-profiles.png, gui-execute.png). The Profiles tab shows a
# database of synthetic example runs (llmplan-gui-sample-db), labelled as such.
#
# Needs a build with the GUI (scripts/install-deps installs Qt6, Xvfb and ImageMagick;
# scripts/build). BUILD_DIR overrides build/, OUT_DIR overrides docs/.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
out=${OUT_DIR:-docs}
gui="$build/gui/llmplan-gui"
sample="$build/gui/llmplan-gui-sample-db"
if [ ! -x "$gui" ] || [ ! -x "$sample" ]; then
  echo "screenshot: $gui not built (needs Qt6 Widgets + Charts: scripts/install-deps, then scripts/build)" >&2
  exit 1
fi
command -v xvfb-run >/dev/null || { echo "screenshot: xvfb-run not found (apt-get install xvfb xauth)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$sample" "$tmp/profiles.db"
mkdir -p "$out"

# A private settings file, so the user's settings and profile database are untouched.
xvfb-run -a -s "-screen 0 1920x1200x24" \
  "$gui" --settings "$tmp/settings.ini" --db "$tmp/profiles.db" --llmplan "$build/cli/llmplan" \
         --model llama2-70b --gpu h100-sxm --gpus 64 --global-batch 128 \
         --size 1600x960 --select-rank 1 --screenshots "$out"

if command -v identify >/dev/null; then
  for f in "$out"/gui-*.png; do identify -format '%f %wx%h\n' "$f"; done
fi
