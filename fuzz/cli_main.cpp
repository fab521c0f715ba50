// The `loom` command compiled as a function for cli_fuzzer.cpp: cli/main.cpp
// (loom::cli::Dispatch and the exit codes) under another name; CMakeLists.txt
// compiles the subcommands' files (src/loom/cli/*_command.cpp ...) beside it.
#include <cstdlib>
#define main LoomCliMain
#define LOOM_ON_INTERNAL_ERROR() std::abort()
#include "loom/cli/main.cpp"
