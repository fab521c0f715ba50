// What `loom run` and `loom plan --run` measured on this machine beside what
// the simulator predicted for the same steps: the tables, the stacked
// timeline and the names of the measured ranks. Takes the runtime's
// measurements in the simulator's terms (a SimResult, byte counts), so that
// report/ needs nothing of runtime/.
#pragma once

#include <string>
#include <vector>

#include "loom/sim/plan_run.h"
#include "loom/sim/sim_result.h"
#include "loom/spec/precision.h"

namespace loom {

// One strategy's plan run by `loom plan --run`: means over the measured steps
// (step 0 warms up) of the slowest rank's step and of the simulated iteration
// of the same batches.
struct MeasuredStrategy {
  std::string name;
  double simulated_s = 0;
  double measured_s = 0;
  double last_loss = 0;  // the run's last step
};

// `loom plan --run`'s table: per strategy, simulated beside measured
// iteration time and both speedups over megatron ("-" when megatron did not
// run); a "not run: ..." line per `not_run`; a note when `precision` is not
// the fp32 the runtime computes in. `steps`: steps per run; `cost_model`:
// the name of the cost model the simulations used.
std::string FormatMeasuredStrategies(const std::vector<MeasuredStrategy>& rows, const std::vector<std::string>& not_run,
                                     int steps, const std::string& cost_model, Precision precision);

// `loom run --compare`: the last step's simulated beside measured time, a
// table of each measured rank's busy time beside its simulated rank's (the
// simulator's ranks stand for every replica), and, when the counts line up,
// each process's peak tensor bytes beside its GPU group's simulated peak.
// `measured` has one rank per pipeline rank of each replica, replica-major;
// `peak_tensor_bytes` one entry per process, `group_gpus` processes per group.
std::string FormatRunBesideSimulation(const PlanRun& simulated, const SimResult& measured,
                                      const std::vector<double>& peak_tensor_bytes, int group_gpus,
                                      const std::string& cost_model);

// `loom run --timeline`: one SVG, the simulated last step above the measured
// one on a shared time axis. `steps`: the steps the run made.
std::string RunTimelineSvg(const PlanRun& simulated, const SimResult& measured, int steps,
                           const std::string& cost_model);

// Trace row names of `measured`'s ranks: "replica R RANK (measured)", RANK
// named by the simulated plan's ranks.
std::vector<std::string> MeasuredRankNames(const PlanRun& simulated, const SimResult& measured);

}  // namespace loom
