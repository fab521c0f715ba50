#!/usr/bin/env bash
# Builds `loom` with its CUDA runtime on a GPU machine: PyTorch's libtorch
# (with CUDA, NCCL and Gloo; cmake/pytorch.cmake finds it through python3, the
# same way as on every machine, with -DLOOM_CUDA=ON as in `make cuda-build`),
# cmake and ninja, and no package registry: the other libraries come from
# scripts/pack-gpu-deps.sh, run on a Debian 12 machine and carried here
# (docs/runtime.md, "On a GPU"). Tests are not built (GoogleTest is not there).
#   scripts/build-cuda.sh [build-dir]      then: build-cuda/loom run --device cuda ...
set -euo pipefail
BUILD=${1:-build-cuda}
DEPS=${LOOM_GPU_DEPS:-$PWD/third_party/gpu-deps}
if [ ! -d "$DEPS/lib/cmake" ]; then
  echo "build-cuda: $DEPS is missing: run scripts/pack-gpu-deps.sh on a Debian 12 machine and bring the folder" >&2
  exit 2
fi
echo "python3: $(command -v python3); packed libraries: $DEPS"
# --disable-new-dtags writes DT_RPATH, which (unlike RUNPATH) also serves the
# packed libraries' own dependencies (libCbc loads libCgl).
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DLOOM_TESTS=OFF -DLOOM_CUDA=ON -DLOOM_PYTHON=OFF -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON \
  -DCMAKE_PREFIX_PATH="$DEPS" \
  -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$DEPS/lib -Wl,--disable-new-dtags" -DCMAKE_BUILD_RPATH="$DEPS/lib"
cmake --build "$BUILD" -j "$(nproc)" --target loom
"$BUILD/loom" --version
