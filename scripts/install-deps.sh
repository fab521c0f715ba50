#!/usr/bin/env bash
# Installs what Loom builds and tests with: Debian packages, then the pinned
# Python packages of requirements.txt (PyTorch among them) for the machine's
# python3 (docs/dependencies.md). Idempotent: installs only what is missing, so
# a second run does nothing and needs no network. A package the registry
# refuses stops the install with pip's or apt's own error: nothing else is
# tried in its place.
# `--with-chromium` also installs headless Chromium, which only
# scripts/screenshot-report.sh needs (not the build or the tests);
# `--with-fuzz` clang and its runtimes, which only `make fuzz` needs;
# `--with-format` clang-format, which only `make format` needs.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  coinor-libcbc-dev
  libtcmalloc-minimal4
  libgloo-dev
)
for flag in "$@"; do
  case "$flag" in
    --with-chromium) packages+=(chromium fonts-dejavu-core) ;;
    # `make fuzz`: clang with its libFuzzer and sanitizer runtimes.
    --with-fuzz) packages+=(clang-14 libclang-rt-14-dev) ;;
    --with-format) packages+=(clang-format-14) ;;
    *) echo "install-deps: unknown flag $flag (--with-chromium, --with-fuzz, --with-format)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -ne 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The Python packages, for the python3 that CMake builds against
# (cmake/pytorch.cmake): LOOM_PYTHON_EXE, else python3 on PATH. Each pin is
# checked against what is installed, so pip (and the network) is used only
# when one is missing or at another version. The machines of this project
# have pyenv's Python 3.11 with pip; Debian's own python3 has no pip and
# refuses installs into it (PEP 668): use a Python of your own or a venv and
# name it in LOOM_PYTHON_EXE.
python=${LOOM_PYTHON_EXE:-python3}
if ! command -v "$python" >/dev/null; then
  echo "install-deps: no $python on PATH (Loom needs Python 3.10 or later with pip)" >&2
  exit 2
fi
if ! "$python" -m pip --version >/dev/null 2>&1; then
  echo "install-deps: $python has no pip; use a Python that has (pyenv's, or a venv) and name it in LOOM_PYTHON_EXE" >&2
  exit 2
fi
requirements="$(cd "$(dirname "$0")/.." && pwd)/requirements.txt"
stale=$("$python" - "$requirements" <<'PY'
import re, sys
from importlib import metadata
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if not line:
        continue
    name, want = re.match(r"([A-Za-z0-9_.-]+)==([^;\s]+)", line).groups()
    try:
        have = metadata.version(name)
    except metadata.PackageNotFoundError:
        have = None
    # PyPI's torch reports a local version (2.11.0+cu130) for the pin 2.11.0.
    if have is None or have.split("+")[0] != want:
        print(f"{name}=={want}")
PY
)
if [ -n "$stale" ]; then
  echo "install-deps: pip installing $(echo $stale) for $("$python" -c 'import sys; print(sys.executable)')" >&2
  if ! "$python" -m pip install --progress-bar off --disable-pip-version-check --root-user-action=ignore \
      -r "$requirements"; then
    echo "install-deps: pip could not install requirements.txt (its error is above); nothing was put in its place" >&2
    exit 1
  fi
fi
