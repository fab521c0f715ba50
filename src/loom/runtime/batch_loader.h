// A worker's data path (issue 42): each step's batch drawn from the
// workload's source (made once: a JSONL file is read once, not every step),
// compiled into the step's ExecutionPlan, and the token ids and pixel files
// of the samples this process's stages run read, on a thread of its own one step ahead
// of the steps, so that the data is off the critical path. What the step
// waited for it is measured (Loaded::wait_s) and reported with the step.
// Only runtime translation units include this header.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "loom/data/sample.h"
#include "loom/data/sample_source.h"
#include "loom/plan/execution_plan.h"
#include "loom/runtime/process_layout.h"

namespace loom::runtime {

struct Loaded {
  int step = 0;
  Batch batch;
  ExecutionPlan exec;
  double load_s = 0;  // the loader's time on it: draw, compile, read ahead
  double wait_s = 0;  // how long Next() blocked for it (0: it was ready)
};

class BatchLoader {
 public:
  // `compile(step, batch)`: the step's ExecutionPlan (it must be callable from
  // the loader's thread: a pure function of its inputs). Steps first_step
  // until `end` are loaded in order, one ahead of the one taken; `place` says
  // which samples this process reads (its local stages' microbatches).
  BatchLoader(std::unique_ptr<SampleSource> source, int64_t global_batch, uint64_t seed, int first_step, int end,
              std::function<ExecutionPlan(int, const Batch&)> compile, int process);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // The next step's batch and plan; rethrows what loading it threw.
  Loaded Next();

 private:
  void Loop();

  std::unique_ptr<SampleSource> source_;
  const int64_t global_batch_;
  const uint64_t seed_;
  const int end_;
  const std::function<ExecutionPlan(int, const Batch&)> compile_;
  const int process_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Loaded> ready_;  // guarded by mu_
  std::exception_ptr error_;     // guarded by mu_
  bool stop_ = false;            // guarded by mu_
  int next_step_;                // the loader thread's
  std::thread thread_;
};

// The samples whose pieces this process's local stages run in `exec`.
std::vector<int> LocalSamples(const ExecutionPlan& exec, const ProcessPlace& place);

// Gives `samples` of `batch` their token ids (a JSONL source keeps none in
// memory: data/jsonl_source.h LoadTokenIds) and reads ahead their pixel
// files: what one process reads of a batch, its own samples only.
void ReadSamples(Batch& batch, const std::vector<int>& samples);

}  // namespace loom::runtime
