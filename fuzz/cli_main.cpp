// The `loom` command compiled as a function for cli_fuzzer.cpp.
#define main LoomCliMain
#include "loom/cli/main.cpp"
