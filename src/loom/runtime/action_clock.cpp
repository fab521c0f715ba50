#include "loom/runtime/action_clock.h"

#include <fmt/format.h>

#include "loom/error.h"

namespace loom::runtime {

#ifdef LOOM_HAVE_CUDA
// cuda_action_clock.cpp
std::unique_ptr<ActionClock> MakeCudaActionClock(const ExecutionPlan& exec, const ProcessPlace& place,
                                                 const torch::Device& device, bool sm_quotas, ClockReports reports);
#endif

double HostActionClock::Since_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

void HostActionClock::StartStep(bool last_step) {
  t0_ = std::chrono::steady_clock::now();
  traced_ = last_step && place_.shard == 0;
}

void HostActionClock::BeginAction(int r, int index, const Action& a, const Schedule&, const StepEdges&) {
  rank_ = r;
  index_ = index;
  action_ = &a;
  began_s_ = Since_s();
}

// What ran, for the trace: the simulator's recorded kinds (compute, the
// communication stream; sends are asynchronous: their issue).
void HostActionClock::EndAction() {
  if (!traced_ || !(action_->is_compute() || action_->on_comm_stream())) return;
  reports_.step(
      report::Interval{place_.Instance(rank_), action_->on_comm_stream() ? 1 : 0, index_, began_s_, Since_s()});
}

void HostActionClock::BeginOptimizerSteps(const std::vector<std::pair<int, int>>& stepping) {
  stepping_ = stepping;
  began_s_ = Since_s();
}

void HostActionClock::EndOptimizerSteps() { ReportOptimizerSteps(Since_s()); }

void HostActionClock::ReportOptimizerSteps(double ended_s) {
  if (!traced_) return;
  for (const auto& [r, index] : stepping_) {
    reports_.step(report::Interval{place_.Instance(r), 0, index, began_s_, ended_s});
  }
}

std::unique_ptr<ActionClock> MakeActionClock(const ExecutionPlan& exec, const ProcessPlace& place,
                                             const torch::Device& device, bool sm_quotas, ClockReports reports) {
  if (device.is_cuda()) {
#ifdef LOOM_HAVE_CUDA
    return MakeCudaActionClock(exec, place, device, sm_quotas, std::move(reports));
#else
    (void)exec;
    (void)sm_quotas;
    throw Error("runtime: --device cuda: this build has no CUDA (make cuda-build)");
#endif
  }
  return std::make_unique<HostActionClock>(place, std::move(reports));
}

}  // namespace loom::runtime
