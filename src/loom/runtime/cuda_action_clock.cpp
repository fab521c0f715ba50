// The CUDA build's ActionClock (runtime/action_clock.h). Compiled to nothing
// without CUDA.
#ifdef LOOM_HAVE_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <fmt/format.h>
#include <torch/cuda.h>

#include <map>
#include <optional>
#include <set>

#include "loom/runtime/action_clock.h"
#include "loom/runtime/green_context.h"

namespace loom::runtime {
namespace {

// On CUDA the host only enqueues: the last step's compute actions are timed
// by events on their streams (a rank's green stream or the default one), read
// after the step's synchronisation, from an event recorded as the step starts
// (t0 plus one synchronisation). Host times would show launches, not the
// GPU's work. Communication-stream actions keep their host times.
//
// Mosaic's engine (§3.2): every local rank whose stage has an SM quota gets a
// green-context stream, created here once for the whole run (stream-pool
// pre-creation); a phase's quotas are disjoint partitions. Its compute runs
// on that stream; a rank waits for the ranks its stages exchange tensors with
// (the event of their last action) before each of its own, so co-located
// modules of one stage overlap on the GPU.
class CudaActionClock : public HostActionClock {
 public:
  CudaActionClock(const ExecutionPlan& exec, const ProcessPlace& place, const torch::Device& device, bool sm_quotas,
                  ClockReports reports);

  void StartStep(bool last_step) override;
  void BeginAction(int r, int index, const Action& a, const Schedule& sch, const StepEdges& edges) override;
  void EndAction() override;
  void ActionsDone() override;
  void BeginOptimizerSteps(const std::vector<std::pair<int, int>>& stepping) override;
  void EndOptimizerSteps() override;
  double EndStep() override;

 private:
  struct GpuInterval {
    int instance = 0, action = 0;
    at::cuda::CUDAEvent begin{cudaEventDefault}, end{cudaEventDefault};
  };
  GpuInterval* StartInterval(int r, int index);
  c10::cuda::CUDAStream Current() const { return c10::cuda::getCurrentCUDAStream(device_); }

  // Constant for the run.
  const c10::DeviceIndex device_;
  std::unique_ptr<GreenStreamPool> green_;
  std::map<int, c10::cuda::CUDAStream> rank_stream_;
  // The schedule's extra orderings (the barriers between temporal phases on
  // shared GPUs, compile_units.cpp): (rank, action) -> ranks it waits for.
  // The host issues actions in an order that honours them; the streams must
  // too, or a later phase's modules run beside an earlier phase's on SMs both
  // were given.
  std::map<std::pair<int, int>, std::vector<int>> waits_for_;
  // Across steps: each rank's last compute action on its stream.
  std::map<int, at::cuda::CUDAEvent> rank_done_;
  // This step.
  std::optional<at::cuda::CUDAEvent> step_begin_;
  std::vector<std::unique_ptr<GpuInterval>> intervals_;
  std::vector<GpuInterval*> stepping_timing_;
  // The action between BeginAction and EndAction.
  std::optional<c10::cuda::CUDAStreamGuard> on_stream_;
  std::optional<c10::cuda::CUDAStream> recorded_on_;  // its rank's stream, to record rank_done_ on
  GpuInterval* timing_ = nullptr;
};

CudaActionClock::CudaActionClock(const ExecutionPlan& exec, const ProcessPlace& place, const torch::Device& device,
                                 bool sm_quotas, ClockReports reports)
    : HostActionClock(place, std::move(reports)), device_(device.index()) {
  for (const ExtraDep& d : exec.schedule.extra_deps) waits_for_[{d.rank, d.index}].push_back(d.after_rank);
  if (!sm_quotas) return;
  const SmPartitionRules rules = ReadSmPartitionRules(device_);
  std::map<int, std::vector<std::pair<int, int>>> by_phase;  // phase -> (rank, SMs)
  std::set<int> seen;
  for (int v = 0; v < place.stages(); ++v) {
    const int r = exec.schedule.stage_rank[v];
    if (!place.IsLocal(v) || seen.count(r) || exec.stages[v].sm_fraction >= 1) continue;
    seen.insert(r);
    by_phase[exec.stages[v].phase].push_back({r, QuotaSms(exec.stages[v].sm_fraction, rules)});
  }
  if (by_phase.empty()) return;
  std::vector<std::vector<int>> sets;
  for (const auto& [phase, list] : by_phase) {
    sets.emplace_back();
    for (const auto& [r, sms] : list) sets.back().push_back(sms);
  }
  green_ = std::make_unique<GreenStreamPool>(device_, sets);
  int s = 0;
  for (const auto& [phase, list] : by_phase) {
    for (size_t i = 0; i < list.size(); ++i) {
      rank_stream_.emplace(
          list[i].first,
          c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(green_->Stream(s, static_cast<int>(i))), device_));
    }
    reports_.now(report::Note{fmt::format("phase {}: {} green context(s) created in {:.3f} ms", phase, list.size(),
                                          green_->CreationTime_s(s) * 1e3)});
    ++s;
  }
}

void CudaActionClock::StartStep(bool last_step) {
  HostActionClock::StartStep(last_step);
  intervals_.clear();
  step_begin_.reset();
  if (last_step) {
    torch::cuda::synchronize(device_);
    step_begin_.emplace(cudaEventDefault);
    step_begin_->record(Current());
  }
}

CudaActionClock::GpuInterval* CudaActionClock::StartInterval(int r, int index) {
  intervals_.push_back(std::make_unique<GpuInterval>());
  GpuInterval* iv = intervals_.back().get();
  iv->instance = place_.Instance(r);
  iv->action = index;
  iv->begin.record(Current());
  return iv;
}

void CudaActionClock::BeginAction(int r, int index, const Action& a, const Schedule& sch, const StepEdges& edges) {
  // On its green stream, after the tensors it reads from co-located ranks.
  if (green_ && a.is_compute()) {
    const c10::cuda::CUDAStream mine =
        rank_stream_.count(r) ? rank_stream_.at(r) : c10::cuda::getDefaultCUDAStream(device_);
    const int v = a.stage;
    for (const auto* list : {&edges.in[v], &edges.out[v]}) {
      for (const StageEdge* e : *list) {
        const int peer = sch.stage_rank[e->from == v ? e->to : e->from];
        if (peer != r && rank_done_.count(peer)) rank_done_.at(peer).block(mine);
      }
    }
    // Its peer's latest event: at or after the action it waits for, which
    // the host issued first.
    if (auto w = waits_for_.find({r, index}); w != waits_for_.end()) {
      for (int peer : w->second) {
        if (peer != r && rank_done_.count(peer)) rank_done_.at(peer).block(mine);
      }
    }
    on_stream_.emplace(mine);
    recorded_on_ = mine;
  }
  HostActionClock::BeginAction(r, index, a, sch, edges);
  if (step_begin_ && place_.shard == 0 && a.is_compute()) timing_ = StartInterval(r, index);
}

void CudaActionClock::EndAction() {
  if (timing_ != nullptr) {
    timing_->end.record(Current());  // reported after the step's synchronisation
    timing_ = nullptr;
  } else {
    HostActionClock::EndAction();
  }
  if (recorded_on_) rank_done_[rank_].record(*recorded_on_);
  recorded_on_.reset();
  on_stream_.reset();
}

void CudaActionClock::ActionsDone() {
  if (green_) torch::cuda::synchronize(device_);  // gradients from every green stream
}

void CudaActionClock::BeginOptimizerSteps(const std::vector<std::pair<int, int>>& stepping) {
  HostActionClock::BeginOptimizerSteps(stepping);
  // The optimizer steps run on the current stream: timed by events too.
  stepping_timing_.clear();
  if (step_begin_ && place_.shard == 0) {
    for (const auto& [r, index] : stepping) stepping_timing_.push_back(StartInterval(r, index));
  }
}

void CudaActionClock::EndOptimizerSteps() {
  const double ended_s = Since_s();
  for (GpuInterval* iv : stepping_timing_) iv->end.record(Current());
  if (stepping_timing_.empty()) ReportOptimizerSteps(ended_s);  // else with the other GPU intervals
}

double CudaActionClock::EndStep() {
  // The step ends when the GPU has done its work, not when the host has
  // enqueued it (the loss's read synchronises only up to the forward).
  torch::cuda::synchronize(device_);
  const double secs = Since_s();
  try {
    for (const auto& iv : intervals_) {
      if (!iv->end.isCreated()) continue;  // an action that ended early enqueued nothing
      reports_.step(report::Interval{iv->instance, 0, iv->action, step_begin_->elapsed_time(iv->begin) * 1e-3,
                                     step_begin_->elapsed_time(iv->end) * 1e-3});
    }
  } catch (const std::exception& e) {
    reports_.now(
        report::Note{fmt::format("the last step's GPU timing failed ({}); its trace is incomplete", e.what())});
  }
  return secs;
}

}  // namespace

std::unique_ptr<ActionClock> MakeCudaActionClock(const ExecutionPlan& exec, const ProcessPlace& place,
                                                 const torch::Device& device, bool sm_quotas, ClockReports reports) {
  return std::make_unique<CudaActionClock>(exec, place, device, sm_quotas, std::move(reports));
}

}  // namespace loom::runtime
#endif  // LOOM_HAVE_CUDA
