#!/usr/bin/env bash
# Installs the Debian packages Loom builds and tests with. Idempotent: installs
# only what is missing, so a second run does nothing and needs no network.
# `--with-chromium` also installs headless Chromium, which only
# scripts/screenshot-report.sh needs (not the build or the tests);
# `--with-fuzz` clang and its runtimes, which only `make fuzz` needs.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  coinor-libcbc-dev
  libtcmalloc-minimal4
  libtorch-dev libgloo-dev libopenblas0-pthread
  pybind11-dev python3-dev python3-torch
)
for flag in "$@"; do
  case "$flag" in
    --with-chromium) packages+=(chromium fonts-dejavu-core) ;;
    # `make fuzz`: clang with its libFuzzer and sanitizer runtimes.
    --with-fuzz) packages+=(clang-14 libclang-rt-14-dev) ;;
    *) echo "install-deps: unknown flag $flag (--with-chromium, --with-fuzz)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
