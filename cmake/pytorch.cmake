# PyTorch, the one Loom builds against (docs/dependencies.md): the pinned
# version in requirements.txt, installed by scripts/install-deps.sh for the
# machine's python3. Its libtorch runs `loom run` and `loom profile`; the
# Python module and the Python tests run on the same interpreter.
#
# Sets:
#   LOOM_PYTHON_EXE        the interpreter: -DLOOM_PYTHON_EXE=..., else the
#                          environment's LOOM_PYTHON_EXE (as scripts/install-deps.sh
#                          reads it), else sys.executable of `python3` on PATH
#                          (not a pyenv shim)
#   LOOM_TORCH_DIR         the torch package folder (…/site-packages/torch)
#   LOOM_TORCH_VERSION     "2.11.0" (torch/headeronly/version.h)
#   LOOM_TORCH_INCLUDES    libtorch's include folders
#   LOOM_TORCH_LIBS        what the runtime links: torch_cpu and c10 on a CPU
#                          build; find_package(Torch)'s libraries (CUDA and
#                          NCCL included) with LOOM_CUDA
#   LOOM_TORCH_DEFS        USE_C10D_GLOO, FMT_HEADER_ONLY (below), and
#                          USE_C10D_NCCL LOOM_HAVE_CUDA with LOOM_CUDA

if(NOT LOOM_PYTHON_EXE AND DEFINED ENV{LOOM_PYTHON_EXE})
  set(LOOM_PYTHON_EXE $ENV{LOOM_PYTHON_EXE} CACHE FILEPATH "the Python interpreter whose PyTorch Loom builds against")
endif()
if(NOT LOOM_PYTHON_EXE)
  find_program(LOOM_PYTHON3_ON_PATH NAMES python3)
  if(NOT LOOM_PYTHON3_ON_PATH)
    message(FATAL_ERROR "Loom: no python3 on PATH; install Python 3 and run scripts/install-deps.sh")
  endif()
  execute_process(COMMAND ${LOOM_PYTHON3_ON_PATH} -c "import sys\nprint(sys.executable)"
                  OUTPUT_VARIABLE _exe OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0 OR NOT _exe)
    message(FATAL_ERROR "Loom: ${LOOM_PYTHON3_ON_PATH} does not run")
  endif()
  set(LOOM_PYTHON_EXE ${_exe} CACHE FILEPATH "the Python interpreter whose PyTorch Loom builds against")
endif()

# find_spec, not `import torch`: a second at configure time instead of five.
# (Newlines, not semicolons, between statements: CMake splits on semicolons.)
execute_process(
  COMMAND ${LOOM_PYTHON_EXE} -c
          "import importlib.util, os\ns = importlib.util.find_spec('torch')\nprint(os.path.dirname(s.origin) if s else '')"
  OUTPUT_VARIABLE LOOM_TORCH_DIR OUTPUT_STRIP_TRAILING_WHITESPACE )
if(NOT LOOM_TORCH_DIR OR NOT EXISTS ${LOOM_TORCH_DIR}/include/torch/headeronly/version.h)
  message(FATAL_ERROR "Loom: ${LOOM_PYTHON_EXE} has no PyTorch with its C++ headers; run scripts/install-deps.sh "
                      "(it installs requirements.txt), or pass -DLOOM_PYTHON_EXE=<a python3 that has it>")
endif()
set(LOOM_TORCH_VERSION "")
foreach(part MAJOR MINOR PATCH)
  file(STRINGS ${LOOM_TORCH_DIR}/include/torch/headeronly/version.h _v REGEX "define TORCH_VERSION_${part} ")
  string(REGEX REPLACE ".* ([0-9]+).*" "\\1" _v "${_v}")
  string(APPEND LOOM_TORCH_VERSION "${_v}.")
endforeach()
string(REGEX REPLACE "\\.$" "" LOOM_TORCH_VERSION "${LOOM_TORCH_VERSION}")
if(LOOM_TORCH_VERSION VERSION_LESS 2.0)
  message(FATAL_ERROR "Loom: ${LOOM_TORCH_DIR} is PyTorch ${LOOM_TORCH_VERSION}; Loom needs 2.x (requirements.txt)")
endif()

# fmt: libtorch's headers include the fmt it bundles (12.x, as <fmt/...>), and
# its include folders come before the system's, so every translation unit that
# sees libtorch (the runtime, and whatever links it: the CLI's main, the
# runtime's tests) uses that fmt, header-only (FMT_HEADER_ONLY: there is no
# compiled fmt 12 to link). The rest of Loom uses Debian's compiled libfmt 9:
# header-only fmt doubled the compile time of every file (8 s to 17 s for
# spec/model.cpp). The two never meet: fmt puts each version in its own inline
# namespace (fmt::v9, fmt::v12), and no fmt type crosses between the runtime
# and the library (they exchange std::string).
set(LOOM_TORCH_DEFS USE_C10D_GLOO LOOM_HAVE_RUNTIME FMT_HEADER_ONLY=1)
if(LOOM_CUDA)
  # The CUDA build: PyTorch's own CMake package (Caffe2's cuda.cmake finds the
  # CUDA toolkit) with its CUDA and NCCL libraries. The driver API (green
  # contexts) is loaded when first used, not linked: the build then starts on
  # a machine with no driver (runtime/cuda_driver.h).
  if(NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  # Loom's own kernels (runtime/*.cu) name sm_90 themselves (CMakeLists.txt); naming the architecture (the
  # H100's sm_90) keeps Caffe2's cuda.cmake from test-running a program to find
  # the GPUs (there is none on CI), and CUDA 17 is a dialect CMake 3.25 knows
  # nvcc has (C++20 it does not: its try-compile fails).
  if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(TORCH_CUDA_ARCH_LIST "9.0")
  endif()
  set(CMAKE_CUDA_STANDARD 17)
  if(NOT EXISTS ${LOOM_TORCH_DIR}/lib/libtorch_cuda.so)
    message(FATAL_ERROR "Loom: LOOM_CUDA needs a CUDA build of PyTorch; ${LOOM_TORCH_DIR} has no libtorch_cuda.so "
                        "(a CPU wheel?): requirements.txt pins PyPI's CUDA one")
  endif()
  list(APPEND CMAKE_PREFIX_PATH ${LOOM_TORCH_DIR}/share/cmake)
  find_package(Torch CONFIG REQUIRED)
  find_package(CUDAToolkit REQUIRED)
  set(LOOM_TORCH_LIBS ${TORCH_LIBRARIES})
  set(LOOM_TORCH_INCLUDES ${TORCH_INCLUDE_DIRS})
  list(APPEND LOOM_TORCH_DEFS USE_C10D_NCCL LOOM_HAVE_CUDA)
  message(STATUS "Loom runtime: PyTorch ${LOOM_TORCH_VERSION} with CUDA ${CUDAToolkit_VERSION} and NCCL")
else()
  # The CPU build links libtorch_cpu and libc10 by their files: PyTorch's CMake
  # package would require the CUDA toolkit (PyPI's wheel is a CUDA build) and
  # link libtorch_cuda, which a CPU run never loads.
  foreach(lib torch_cpu c10)
    find_library(LOOM_TORCH_${lib}_LIB ${lib} PATHS ${LOOM_TORCH_DIR}/lib NO_DEFAULT_PATH REQUIRED)
    list(APPEND LOOM_TORCH_LIBS ${LOOM_TORCH_${lib}_LIB})
  endforeach()
  set(LOOM_TORCH_INCLUDES ${LOOM_TORCH_DIR}/include ${LOOM_TORCH_DIR}/include/torch/csrc/api/include)
  message(STATUS "Loom runtime: PyTorch ${LOOM_TORCH_VERSION} from ${LOOM_TORCH_DIR} (CPU build)")
endif()
# c10d's ProcessGroupGloo.hpp includes Gloo's headers, which PyPI's wheel does
# not ship: Debian's libgloo-dev provides them (runtime/gloo_group.cpp says why
# an older Gloo's headers are safe there).
find_path(LOOM_GLOO_INCLUDE gloo/context.h)
if(NOT LOOM_GLOO_INCLUDE)
  message(FATAL_ERROR "Loom: Gloo's headers (gloo/context.h) not found; run scripts/install-deps.sh (libgloo-dev)")
endif()
list(APPEND LOOM_TORCH_INCLUDES ${LOOM_GLOO_INCLUDE})
