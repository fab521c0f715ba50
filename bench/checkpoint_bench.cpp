// Training checkpoints' and the data path's speed (issue 42), as ratios
// against peers measured in the same run:
//   - a checkpoint part written (weights/run_checkpoint.h's safetensors, with
//     its slice and range metadata, fsync'd and renamed) against the disk's
//     sequential write of the same bytes (write + fsync): `vs_disk`;
//   - a checkpoint read back, every tensor joined from two TP slices each in
//     two ZeRO ranges (what a resume under another plan does), against the
//     disk's sequential read of the same files from the page cache: `vs_read`;
//   - the JSONL loader parsing and drawing tokenized samples, samples/s on one
//     core, to set against what the demo's step consumes (32 samples in about
//     25 ms on 2 cores: 1,280 samples/s; docs/runtime.md, "Speed").
// The bytes are 64 MiB of fp32 tensors (the weights and two moments of a
// 5.6M-parameter model), under the build folder's temporary directory.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "loom/data/jsonl_source.h"
#include "loom/weights/run_checkpoint.h"
#include "loom/weights/safetensors.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kTensors = 64, kElements = (64 << 20) / 4 / kTensors;  // 64 MiB in all

fs::path BenchDir() {
  const fs::path dir = fs::temp_directory_path() / ("loom_bench_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

double Seconds(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The disk's sequential write: `bytes` written in 1 MiB blocks, then fsync.
double DiskWriteBytesPerSecond(int64_t bytes) {
  const fs::path file = BenchDir() / "disk.bin";
  std::vector<char> block(1 << 20, 7);
  const auto start = std::chrono::steady_clock::now();
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  for (int64_t done = 0; done < bytes; done += static_cast<int64_t>(block.size())) {
    if (::write(fd, block.data(), block.size()) < 0) break;
  }
  ::fsync(fd);
  ::close(fd);
  const double s = Seconds(start);
  fs::remove(file);
  return static_cast<double>(bytes) / s;
}

// Four parts of a checkpoint: each tensor TP-sliced in two along dimension
// 0, each slice in two ZeRO ranges; part 2 x slice + range holds one piece of
// every tensor (as a TP 2 x DP 2 ZeRO plan writes them).
constexpr int kParts = 4;
struct Parts {
  std::vector<std::vector<float>> data;
  std::vector<weights::TensorToWrite> tensors[kParts];
  std::map<std::string, std::string> metadata[kParts];
};

Parts MakeParts() {
  Parts p;
  const int64_t rows = 64, cols = kElements / rows, half = kElements / 2, quarter = half / 2;
  p.data.reserve(kTensors);
  for (int64_t t = 0; t < kTensors; ++t) {
    const std::string name = fmt::format("llm_{}.up.weight", t);
    p.data.emplace_back(kElements, 0.5F + static_cast<float>(t));
    const float* all = p.data.back().data();
    for (int slice = 0; slice < 2; ++slice) {
      for (int range = 0; range < 2; ++range) {
        const int part = 2 * slice + range;
        const float* at = all + slice * half + range * quarter;
        p.tensors[part].push_back({name,
                                   weights::DType::kF32,
                                   {quarter},
                                   std::span<const std::byte>(reinterpret_cast<const std::byte*>(at), quarter * 4)});
        p.metadata[part][weights::SliceKey(name)] = fmt::format("0/{}/2", slice);
        p.metadata[part][weights::RangeKey(name)] = fmt::format("{}/{}/{}", range * quarter, quarter, half);
        p.metadata[part][weights::ShapeKey(name)] = fmt::format("{},{}", rows / 2, cols);
      }
    }
  }
  return p;
}

void WriteParts(const Parts& parts, const fs::path& dir) {
  for (int part = 0; part < kParts; ++part) {
    weights::WriteSafetensors((dir / weights::PartFileName(part)).string(), parts.tensors[part], parts.metadata[part]);
  }
}

void BM_CheckpointWriteVsDisk(benchmark::State& state) {
  const Parts parts = MakeParts();
  const int64_t bytes = kTensors * kElements * 4;
  const double disk = DiskWriteBytesPerSecond(bytes);
  const fs::path dir = BenchDir() / "write";
  fs::create_directories(dir);
  double total_s = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    WriteParts(parts, dir);
    total_s += Seconds(start);
    state.SetIterationTime(Seconds(start));
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["disk_MBps"] = disk / 1e6;
  state.counters["vs_disk"] = static_cast<double>(bytes) * state.iterations() / total_s / disk;
  fs::remove_all(dir);
}
BENCHMARK(BM_CheckpointWriteVsDisk)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_CheckpointReadVsDisk(benchmark::State& state) {
  const fs::path root = BenchDir() / "read";
  fs::remove_all(root);
  const Parts parts = MakeParts();
  const std::string staging = weights::StageRunCheckpoint(root.string(), 1);
  WriteParts(parts, staging);
  weights::RunCheckpointManifest m;
  m.steps_done = 1;
  m.model = "bench";
  m.global_batch = 1;
  for (int part = 0; part < kParts; ++part) m.parts.push_back(weights::PartFileName(part));
  weights::CommitRunCheckpoint(staging, root.string(), m, 0);
  const std::string folder = weights::FindCheckpoint(root.string());
  const int64_t bytes = kTensors * kElements * 4;
  // The peer: the same files read whole, in 1 MiB blocks (from the page cache, as the reader's).
  std::vector<char> block(1 << 20);
  auto read_files = [&] {
    for (int part = 0; part < kParts; ++part) {
      std::ifstream in(fs::path(folder) / weights::PartFileName(part), std::ios::binary);
      while (in.read(block.data(), static_cast<std::streamsize>(block.size())) || in.gcount() > 0) {
      }
    }
  };
  read_files();
  auto start = std::chrono::steady_clock::now();
  read_files();
  const double disk = static_cast<double>(bytes) / Seconds(start);
  double checksum = 0, total_s = 0;
  for (auto _ : state) {
    start = std::chrono::steady_clock::now();
    const weights::RunCheckpointReader reader(folder);
    for (int64_t t = 0; t < kTensors; ++t) {
      std::vector<int64_t> shape;
      checksum += reader.Read(fmt::format("llm_{}.up.weight", t), &shape)[0];
    }
    total_s += Seconds(start);
    state.SetIterationTime(Seconds(start));
  }
  benchmark::DoNotOptimize(checksum);
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["read_MBps"] = disk / 1e6;
  state.counters["vs_read"] = static_cast<double>(bytes) * state.iterations() / total_s / disk;
  fs::remove_all(root);
}
BENCHMARK(BM_CheckpointReadVsDisk)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);

// The loader: tokenized samples of 256 ids (a JSONL file of 4,096) parsed
// once, then global batches of 32 drawn in turn, on this one core. (Each
// step's compile and pixel read-ahead are measured in the run itself:
// --metrics' data_load_s.)
void BM_JsonlLoaderVsStep(benchmark::State& state) {
  const fs::path file = BenchDir() / "tokens.jsonl";
  {
    std::ofstream out(file);
    for (int i = 0; i < 4096; ++i) {
      std::string ids;
      for (int k = 0; k < 256; ++k) ids += (k ? "," : "") + std::to_string((i * 7 + k * 13) % 32000);
      out << "{\"input_ids\": [" << ids << "]}\n";
    }
  }
  const auto parse = std::chrono::steady_clock::now();
  const JsonlSource source(file.string());  // parsed once per run
  state.counters["parse_samples_per_s"] = 4096 / Seconds(parse);
  int64_t step = 0, samples = 0;
  for (auto _ : state) {
    samples += static_cast<int64_t>(source.Draw(32, 0, step++).samples.size());
  }
  state.counters["samples_per_s"] = benchmark::Counter(static_cast<double>(samples), benchmark::Counter::kIsRate);
  fs::remove(file);
}
BENCHMARK(BM_JsonlLoaderVsStep)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace loom
