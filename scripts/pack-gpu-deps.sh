#!/usr/bin/env bash
# Packs what `scripts/build-cuda.sh` needs and a GPU machine without a package
# registry lacks (yaml-cpp, fmt, CLI11, nlohmann-json, COIN-OR CBC and the
# libraries they load) from this Debian 12 machine into one folder that
# travels with the source tree (git-ignored; the device tool's `carry`).
# Binaries built for Debian 12 (glibc 2.36, libstdc++ of GCC 12) load on newer
# systems such as Ubuntu 24.04; the system's own libc, libm and libstdc++ are
# not packed. Each library gets a tiny CMake config of its own (Debian's are
# not all relocatable). Tests are not built there (LOOM_TESTS=OFF).
#   [LOOM_GLOO_SRC=gloo-checkout] scripts/pack-gpu-deps.sh [third_party/gpu-deps]
set -euo pipefail
OUT=${1:-third_party/gpu-deps}
bash "$(dirname "$0")/install-deps.sh" >/dev/null
# The reference LAPACK and BLAS (a few MB) rather than OpenBLAS (35 MB), which
# this machine's alternatives select: the device tool carries 64 MiB in all.
ARCH=/usr/lib/x86_64-linux-gnu
if [ ! -e "$ARCH/lapack/liblapack.so.3" ] || [ ! -e "$ARCH/blas/libblas.so.3" ]; then
  SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
  $SUDO apt-get install -y -q liblapack3 libblas3 >/dev/null
fi
rm -rf "$OUT"
mkdir -p "$OUT/include" "$OUT/lib" "$OUT/lib/cmake"
for h in yaml-cpp fmt CLI nlohmann coin; do cp -a "/usr/include/$h" "$OUT/include/"; done
# Gloo's headers: PyTorch's wheels include c10d's ProcessGroupGloo.hpp but not
# the gloo/ headers it includes. Debian 12's are older than the Gloo PyTorch
# 2.x is built with; LOOM_GLOO_SRC names a checkout of github.com/pytorch/gloo
# (headers only are taken; config.h is written for a CUDA, TCP-only build).
if [ -n "${LOOM_GLOO_SRC:-}" ]; then
  (cd "$LOOM_GLOO_SRC" && find gloo -name '*.h' | tar -cf - -T -) | tar -xf - -C "$OUT/include"
  cat > "$OUT/include/gloo/config.h" <<'CONFIG'
#pragma once
#define GLOO_VERSION_MAJOR 0
#define GLOO_VERSION_MINOR 5
#define GLOO_VERSION_PATCH 0
#define GLOO_VERSION (GLOO_VERSION_MAJOR * 10000 + GLOO_VERSION_MINOR * 100 + GLOO_VERSION_PATCH)
#define GLOO_USE_CUDA 1
#define GLOO_USE_NCCL 0
#define GLOO_USE_ROCM 0
#define GLOO_USE_RCCL 0
#define GLOO_USE_REDIS 0
#define GLOO_USE_IBVERBS 0
#define GLOO_USE_MPI 0
#define GLOO_USE_AVX 0
#define GLOO_USE_LIBUV 0
#define GLOO_HAVE_TRANSPORT_TCP 1
#define GLOO_HAVE_TRANSPORT_TCP_TLS 0
#define GLOO_HAVE_TRANSPORT_IBVERBS 0
#define GLOO_HAVE_TRANSPORT_UV 0
#define GLOO_USE_TORCH_DTYPES 1
CONFIG
else
  cp -a /usr/include/gloo "$OUT/include/"
fi
# The libraries, their unversioned names, and every library they load that the
# base system may lack.
libs=(libyaml-cpp libfmt libCbcSolver libCbc libCgl libOsiClp libClpSolver libClp libOsi libCoinUtils)
for l in "${libs[@]}"; do cp -a "$ARCH/$l".so* "$OUT/lib/"; done
system='^(linux-vdso|ld-linux|libc\.|libm\.|libpthread|libdl|librt|libgcc_s|libstdc\+\+)'
pack() {  # a library file: copy what it loads, recursively
  ldd "$1" | awk '$3 ~ /^\// {print $1, $3}' | while read -r name path; do
    [[ "$name" =~ $system ]] && continue
    [ -e "$OUT/lib/$name" ] && continue
    case "$name" in
      liblapack.so.3) path=$ARCH/lapack/liblapack.so.3 ;;
      libblas.so.3) path=$ARCH/blas/libblas.so.3 ;;
    esac
    cp -L "$path" "$OUT/lib/$name"
    pack "$path"
  done
}
for l in "${libs[@]}"; do pack "$ARCH/$l.so"; done
# libblas.so.3 behind the reference LAPACK, whatever ldd resolved it to.
cp -L "$ARCH/blas/libblas.so.3" "$OUT/lib/libblas.so.3"
rm -f "$OUT/lib/libopenblas.so.0"
strip --strip-unneeded "$OUT"/lib/*.so* 2>/dev/null || true
config() {  # name body
  mkdir -p "$OUT/lib/cmake/$1"
  printf '%s\n' "# Written by scripts/pack-gpu-deps.sh" 'get_filename_component(_pack "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)' "$2" \
    > "$OUT/lib/cmake/$1/$(echo "$1" | tr "[:upper:]" "[:lower:]")-config.cmake"
}
config yaml-cpp 'if(NOT TARGET yaml-cpp)
  add_library(yaml-cpp SHARED IMPORTED)
  set_target_properties(yaml-cpp PROPERTIES IMPORTED_LOCATION "${_pack}/lib/libyaml-cpp.so"
                        INTERFACE_INCLUDE_DIRECTORIES "${_pack}/include")
endif()'
config fmt 'if(NOT TARGET fmt::fmt-header-only)
  add_library(fmt::fmt-header-only INTERFACE IMPORTED)
  set_target_properties(fmt::fmt-header-only PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_pack}/include"
                        INTERFACE_COMPILE_DEFINITIONS "FMT_HEADER_ONLY=1")
  add_library(fmt::fmt SHARED IMPORTED)
  set_target_properties(fmt::fmt PROPERTIES IMPORTED_LOCATION "${_pack}/lib/libfmt.so"
                        INTERFACE_INCLUDE_DIRECTORIES "${_pack}/include")
endif()'
config CLI11 'if(NOT TARGET CLI11::CLI11)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  set_target_properties(CLI11::CLI11 PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_pack}/include")
endif()'
config nlohmann_json 'if(NOT TARGET nlohmann_json::nlohmann_json)
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  set_target_properties(nlohmann_json::nlohmann_json PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_pack}/include")
endif()'
echo "packed into $OUT: $(du -sh "$OUT" | cut -f1)"
