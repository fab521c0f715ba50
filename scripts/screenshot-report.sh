#!/usr/bin/env bash
# Renders a `loom plan --report` HTML file in headless Chromium and saves a PNG
# screenshot: the check that the report is self-contained and renders.
# Usage: scripts/screenshot-report.sh report.html report.png [WIDTHxHEIGHT]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
html="${1:?usage: screenshot-report.sh REPORT.html OUT.png [WIDTHxHEIGHT]}"
png="${2:?usage: screenshot-report.sh REPORT.html OUT.png [WIDTHxHEIGHT]}"
size="${3:-1400x2200}"
bash "$here/install-deps.sh" --with-chromium
[ -f "$html" ] || { echo "screenshot-report: no such file: $html" >&2; exit 2; }
abs="$(cd "$(dirname "$html")" && pwd)/$(basename "$html")"
out="$(cd "$(dirname "$png")" && pwd)/$(basename "$png")"
# --no-sandbox: CI containers run as root; the page is a local file with no scripts.
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size="${size/x/,}" \
  --screenshot="$out" "file://$abs" 2>/dev/null
[ -s "$out" ] || { echo "screenshot-report: chromium wrote no screenshot" >&2; exit 1; }
echo "screenshot written to $png"
