#include "loom/runtime/batch_loader.h"

#include <chrono>
#include <fstream>
#include <set>
#include <vector>

#include "loom/data/jsonl_source.h"

namespace loom::runtime {

namespace {

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

void ReadSamples(Batch& batch, const std::vector<int>& samples) {
  std::vector<char> buffer(1 << 20);
  for (int x : samples) {
    auto& tokens = batch.samples[x].tokens;
    if (!tokens) continue;
    if (!tokens->has_ids) tokens = LoadTokenIds(*tokens);
    // The pixel file read once, so that the step's own reads (torch_model.h
    // ImagePixels, on the critical path) come from the page cache.
    if (tokens->pixel_values_file.empty()) continue;
    std::ifstream in(tokens->pixel_values_file, std::ios::binary);
    while (in.read(buffer.data(), static_cast<std::streamsize>(buffer.size())) || in.gcount() > 0) {
    }
  }
}

std::vector<int> LocalSamples(const ExecutionPlan& exec, const ProcessPlace& place) {
  std::set<int> samples;
  const auto& replica = exec.replicas.at(exec.replicated ? place.content : 0);
  for (int v = 0; v < place.stages(); ++v) {
    if (!place.IsLocal(v)) continue;
    for (const MicrobatchWork& mb : replica.at(v)) {
      for (const SamplePiece& p : mb.pieces) samples.insert(p.sample);
    }
  }
  return {samples.begin(), samples.end()};
}

BatchLoader::BatchLoader(std::unique_ptr<SampleSource> source, int64_t global_batch, uint64_t seed, int first_step,
                         int end, std::function<ExecutionPlan(int, const Batch&)> compile, int process)
    : source_(std::move(source)),
      global_batch_(global_batch),
      seed_(seed),
      end_(end),
      compile_(std::move(compile)),
      process_(process),
      next_step_(first_step),
      thread_([this] { Loop(); }) {}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void BatchLoader::Loop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !ready_; });
      if (stop_ || next_step_ >= end_) return;
    }
    const auto start = std::chrono::steady_clock::now();
    Loaded loaded;
    try {
      loaded.step = next_step_;
      loaded.batch = source_->Draw(global_batch_, seed_, next_step_);
      loaded.exec = compile_(next_step_, loaded.batch);
      ReadSamples(loaded.batch, LocalSamples(loaded.exec, PlaceProcess(loaded.exec, process_)));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
      cv_.notify_all();
      return;
    }
    loaded.load_s = SecondsSince(start);
    std::lock_guard<std::mutex> lock(mu_);
    ready_ = std::move(loaded);
    ++next_step_;
    cv_.notify_all();
  }
}

Loaded BatchLoader::Next() {
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return ready_.has_value() || error_ != nullptr; });
  if (!ready_) std::rethrow_exception(error_);
  Loaded out = std::move(*ready_);
  ready_.reset();
  out.wait_s = SecondsSince(start);
  cv_.notify_all();
  return out;
}

}  // namespace loom::runtime
