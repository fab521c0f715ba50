// The `loom` command compiled as a function for cli_fuzzer.cpp.
#include <cstdlib>
#define main LoomCliMain
#define LOOM_ON_INTERNAL_ERROR() std::abort()
#include "loom/cli/main.cpp"
