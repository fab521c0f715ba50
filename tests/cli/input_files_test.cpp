// Issue 45: inputs read without a size limit (`--model /dev/zero` until out of
// memory, `replay --failures /dev/zero` reported as no failures with exit 0),
// and a pipe taken as --model but not as --workload or --cluster. Every input
// is read through input_file.h: bounded, pipes and devices like files.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "loom/error.h"
#include "loom/input_file.h"
#include "loom/session/failure_trace.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"
#include "test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

// A FIFO at a fresh path, with a thread that writes `text` into it once a
// reader opens it: what `--workload <(cat w.yaml)` hands Loom.
class Fifo {
 public:
  Fifo(const std::string& name, std::string text) : path_((fs::temp_directory_path() / "loom_tests" / name).string()) {
    fs::create_directories(fs::path(path_).parent_path());
    fs::remove(path_);
    EXPECT_EQ(mkfifo(path_.c_str(), 0600), 0);
    writer_ = std::thread([this, text = std::move(text)] { std::ofstream(path_) << text; });
  }
  ~Fifo() {
    // A loader that failed before opening it leaves the writer blocked in
    // open(): a reader of our own lets it finish (the text fits the pipe).
    const int fd = open(path_.c_str(), O_RDONLY | O_NONBLOCK);
    writer_.join();
    if (fd >= 0) close(fd);
    fs::remove(path_);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::thread writer_;
};

TEST(InputFiles, DevZeroStopsAtTheLimitNamingIt) {
  test::ExpectError([] { ReadInputFile("/dev/zero", "model YAML", 1 << 20); },
                    {"/dev/zero: larger than 1.0 MiB, more than any model YAML file holds"});
  // Through the loaders, at their own limits (64 MiB), not at the memory's.
  test::ExpectError([] { LoadModel("/dev/zero"); }, {"/dev/zero: larger than 64.0 MiB", "model YAML"});
  test::ExpectError([] { LoadCluster("/dev/zero"); }, {"/dev/zero: larger than 64.0 MiB", "cluster YAML"});
  test::ExpectError([] { LoadWorkload("/dev/zero"); }, {"/dev/zero: larger than 64.0 MiB", "workload YAML"});
  // Line by line: a line past the limit is named by its number.
  InputLines lines("/dev/zero", "failure trace", 4096);
  std::string line;
  test::ExpectError([&] { lines.Next(line); }, {"/dev/zero:1: a line longer than 4.0 KiB, more than any failure trace"});
}

TEST(InputFiles, AFailureTraceOfZerosIsAnErrorNotAnEmptyTrace) {
  // It used to read until allocation failed, then report "0 node failures"
  // with exit 0. Now the first line is past the limit (256 MiB of zeros).
  test::ExpectError([] { ReadFailureTrace("/dev/zero", 4, 100); }, {"/dev/zero:1: a line longer than 256.0 MiB"});
}

TEST(InputFiles, LinesAreCountedWithOrWithoutAFinalNewline) {
  const std::string path = test::WriteTemp("input-lines.txt", "a\n\nlast");
  InputLines lines(path, "test");
  std::string line;
  std::vector<std::string> got;
  while (lines.Next(line)) got.push_back(line);
  EXPECT_EQ(got, (std::vector<std::string>{"a", "", "last"}));
  EXPECT_EQ(lines.line_number(), 3);
  InputLines none(test::WriteTemp("input-lines-empty.txt", ""), "test");
  EXPECT_FALSE(none.Next(line));
  test::ExpectError([] { InputLines("/nonexistent/trace.txt", "failure trace"); },
                    {"/nonexistent/trace.txt: no such file; expected a failure trace file"});
  test::ExpectError([] { ReadInputFile(fs::temp_directory_path().string(), "plan JSON", 1 << 20); },
                    {"is a directory; expected a plan JSON file"});
}

TEST(InputFiles, APipeIsAnInputLikeAFileForEveryLoader) {
  {
    Fifo f("cluster.fifo", "cluster: piped\ngpu: h100\nnodes: 1\ngpus_per_node: 2\n");
    EXPECT_EQ(LoadCluster(f.path()).num_gpus(), 2);
  }
  {
    Fifo f("workload.fifo", "workload: piped\nsource: {kind: text, seq_len: 64}\nglobal_batch: 4\n");
    const Workload w = LoadWorkload(f.path());
    EXPECT_EQ(w.global_batch, 4);
    EXPECT_EQ(w.source.seq_len, 64);
  }
  {
    std::ifstream in(std::string(LOOM_TEST_DATA) + "/runtime/tiny-llm.yaml");
    Fifo f("model.fifo", std::string(std::istreambuf_iterator<char>(in), {}));
    EXPECT_EQ(LoadModel(f.path()).modules.size(), 1u);
  }
}

}  // namespace
}  // namespace loom
