// Helpers shared by tests: write a temp file, expect a loom::Error whose
// message contains given fragments.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "loom/error.h"

namespace loom::test {

// Written whole, then renamed into place: test processes that ctest runs at
// once may write the same file (the same config under one name), and a reader
// must never see it half written.
inline std::string WriteTemp(const std::string& name, const std::string& text) {
  auto dir = std::filesystem::temp_directory_path() / "loom_tests";
  std::filesystem::create_directories(dir);
  auto path = dir / name;
  std::filesystem::create_directories(path.parent_path());
  static int written = 0;
  auto staged = path;
  staged += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(written++);
  std::ofstream(staged) << text;
  std::filesystem::rename(staged, path);
  return path.string();
}

// Runs `f`, which must throw loom::Error with every fragment in its message.
inline void ExpectError(const std::function<void()>& f, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "expected loom::Error";
  } catch (const loom::Error& e) {
    std::string msg = e.what();
    for (const auto& frag : fragments) {
      EXPECT_NE(msg.find(frag), std::string::npos) << "message: " << msg << "\nmissing: " << frag;
    }
  }
}

#ifdef LOOM_BINARY
// Runs the built `loom` with `args`; returns its exit code and stdout + stderr.
inline std::pair<int, std::string> RunLoom(const std::string& args) {
  const std::string cmd = std::string(LOOM_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WEXITSTATUS(status), out};
}
#endif

#ifdef LOOM_PYTHON_EXE
// Runs `script` (Python source) with the interpreter Loom builds against and
// `args`; returns its exit code and stdout + stderr. The references tests
// compare with (transformers, safetensors) are that interpreter's packages.
inline std::pair<int, std::string> RunPython(const std::string& script, const std::string& args = "") {
  static int calls = 0;
  const std::string path = WriteTemp("script_" + std::to_string(::getpid()) + "_" + std::to_string(calls++) + ".py", script);
  const std::string cmd = std::string(LOOM_PYTHON_EXE) + " " + path + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = pclose(pipe);
  std::filesystem::remove(path);
  return {WEXITSTATUS(status), out};
}
#endif

}  // namespace loom::test
