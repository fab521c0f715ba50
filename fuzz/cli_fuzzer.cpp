// The CLI's flag values: `loom` itself (src/loom/cli/main.cpp, compiled in as
// LoomCliMain) on argument lists from the input, one argument a line. The
// first byte picks a prefix that keeps every input cheap enough to run many
// times a second (the tiny test VLM on four GPUs, one iteration); the rest of
// the arguments are the input's. Exit 2 with a message is the expected
// answer to bad flags; an internal error (an exception other than
// loom::Error reaching main) aborts (LOOM_ON_INTERNAL_ERROR in cli_main.cpp). Numbers past 512 are
// not run: the work of a plan grows with its batch, iterations and cluster,
// and how large a problem runs how fast is issue 21's, not a defect here.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_input.h"

int LoomCliMain(int argc, char** argv);

namespace {

const char* const kTinyModel = LOOM_SOURCE_DIR "/tests/data/runtime/tiny-vlm.yaml";

std::vector<std::vector<std::string>> Prefixes() {
  return {
      {"simulate", "--model", kTinyModel, "--cluster", "h100:1x4"},
      {"plan", "--model", kTinyModel, "--cluster", "h100:1x4", "--iterations", "1", "--strategy", "megatron"},
      {"plan", "--model", kTinyModel, "--iterations", "1", "--global-batch", "8"},
      {"inspect", kTinyModel},
      {"simulate", "--model", kTinyModel},
      {},
  };
}

bool TooLarge(const std::string& arg) {
  size_t digits = 0;
  for (char c : arg) {
    digits = std::isdigit(static_cast<unsigned char>(c)) ? digits + 1 : 0;
    if (digits > 5) return true;
  }
  // A bare number past 512 (a batch, a seed, a count): megatron's search on 720
  // samples takes 1.1 s in a release build and past 10 s instrumented.
  if (!arg.empty() && arg.find_first_not_of("0123456789") == std::string::npos && std::stol(arg) > 512) return true;
  return arg.find('e') != std::string::npos && arg.find_first_of("0123456789") != std::string::npos &&
         arg.find_first_not_of("0123456789.e+-") == std::string::npos;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Files the CLI writes (--json, --trace, --report) land in a scratch folder.
  const auto dir = std::filesystem::temp_directory_path() / "loom-cli-fuzz";
  std::filesystem::create_directories(dir);
  std::filesystem::current_path(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const auto prefixes = Prefixes();
  std::vector<std::string> args = {"loom"};
  for (const auto& a : prefixes[data[0] % prefixes.size()]) args.push_back(a);
  std::stringstream rest(loom::fuzz::Text(data + 1, size - 1));
  std::string arg;
  while (std::getline(rest, arg)) {
    if (TooLarge(arg) || args.size() > 24) return 0;
    // Commands that measure this machine or start processes are not flag parsing.
    if (args.size() == 1 && (arg == "run" || arg == "profile" || arg == "probe-sm")) return 0;
    args.push_back(arg);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::ostringstream err, out;
  auto* old_err = std::cerr.rdbuf(err.rdbuf());
  auto* old_out = std::cout.rdbuf(out.rdbuf());
  const int rc = LoomCliMain(static_cast<int>(args.size()), argv.data());
  std::cerr.rdbuf(old_err);
  std::cout.rdbuf(old_out);
  if (rc != 0 && rc != 2) {
    std::fprintf(stderr, "loom exited %d:\n%s\n", rc, err.str().c_str());
    std::abort();
  }
  return 0;
}
