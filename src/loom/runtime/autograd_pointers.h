// Pointers through autograd contexts: a custom autograd function's
// saved_data holds IValues, so the objects a backward needs (a layer, the
// weight-gradient queue, a process group's wrapper) travel as integers. The
// objects they name must outlive every graph built from them. Runtime
// translation units only.
#pragma once

#include <cstdint>

namespace loom::runtime {

template <typename T>
int64_t AsInt(T* p) {
  return static_cast<int64_t>(reinterpret_cast<intptr_t>(p));
}
template <typename T>
T* FromInt(int64_t v) {
  return reinterpret_cast<T*>(static_cast<intptr_t>(v));
}

}  // namespace loom::runtime
