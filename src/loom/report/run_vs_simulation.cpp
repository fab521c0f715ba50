#include "loom/report/run_vs_simulation.h"

#include <fmt/format.h>

#include "loom/human_bytes.h"
#include "loom/report/table.h"
#include "loom/report/timeline_svg.h"

namespace loom {

std::string FormatMeasuredStrategies(const std::vector<MeasuredStrategy>& rows, const std::vector<std::string>& not_run,
                                     int steps, const std::string& cost_model, Precision precision) {
  const MeasuredStrategy* megatron = nullptr;
  for (const auto& row : rows) {
    if (row.name == "megatron") megatron = &row;
  }
  TextTable t({"strategy", "simulated", "measured", "measured / simulated", "predicted vs megatron",
               "measured vs megatron", "last loss"});
  for (const auto& row : rows) {
    auto speedup = [&](double mine, double theirs) {
      return megatron == nullptr ? std::string("-") : fmt::format("{:.2f}x", theirs / mine);
    };
    t.AddRow({row.name, fmt::format("{:.4f} s", row.simulated_s), fmt::format("{:.4f} s", row.measured_s),
              fmt::format("{:.2f}x", row.measured_s / row.simulated_s),
              speedup(row.simulated_s, megatron ? megatron->simulated_s : 0),
              speedup(row.measured_s, megatron ? megatron->measured_s : 0), fmt::format("{:.6f}", row.last_loss)});
  }
  std::string out = fmt::format("Run on this machine ({} steps each, means of steps 1..{}; simulated with {}):\n",
                                steps, steps - 1, cost_model);
  out += t.Render();
  for (const auto& line : not_run) out += "not run: " + line + "\n";
  if (precision != Precision::kFp32) {
    out += "note: run and predicted in " + PrecisionName(precision) +
           "; `loom profile` on a CPU measures its layers in fp32, so a CPU's profile predicts fp32 runs "
           "(--precision fp32)\n";
  }
  return out;
}

std::string FormatRunBesideSimulation(const PlanRun& simulated, const SimResult& measured,
                                      const std::vector<double>& peak_tensor_bytes, int group_gpus,
                                      const std::string& cost_model) {
  // The simulator's ranks stand for every replica with the same costs
  // (the first replica's row); the run's are one per replica.
  const int P = simulated.exec.schedule.num_ranks;
  TextTable t({"rank", "simulated busy", "measured busy", "measured / simulated"});
  for (int i = 0; i < measured.num_ranks(); ++i) {
    const double sim_busy = simulated.result.busy_s[i % static_cast<int>(simulated.result.busy_s.size())];
    t.AddRow({fmt::format("replica {} {}", i / P, simulated.exec.ranks[i % P].name), fmt::format("{:.4f} s", sim_busy),
              fmt::format("{:.4f} s", measured.busy_s[i]), fmt::format("{:.2f}x", measured.busy_s[i] / sim_busy)});
  }
  std::string out = fmt::format("\nlast step: simulated {:.4f} s ({}), measured {:.4f} s\n",
                                simulated.metrics.iteration_time_s, cost_model, measured.iteration_time_s) +
                    t.Render();
  // Memory: each process's peak tensor bytes (weights, gradients,
  // optimizer state, activations) beside its GPU group's simulated peak. The
  // simulator's groups are the first replica's where each data-parallel
  // replica runs the pipeline on groups of its own (group g is replica
  // g / groups's copy of group g % groups: runtime/process_layout.h); each
  // replica's are priced on its own share of the batch, which the run's
  // replica draws too (the fullest replica's beside every replica's once
  // made a replica with the lighter samples read 0.86x).
  const auto& sim_mem = simulated.group_peak_mem_bytes;
  const auto& by_replica = simulated.replica_group_peak_mem_bytes;
  const size_t per_replica = sim_mem.size() * group_gpus;
  if (!sim_mem.empty() && !peak_tensor_bytes.empty() && peak_tensor_bytes.size() % per_replica == 0) {
    TextTable m({"process", "simulated peak", "measured peak tensors", "measured / simulated"});
    const size_t replicas = peak_tensor_bytes.size() / per_replica;
    for (size_t i = 0; i < peak_tensor_bytes.size(); ++i) {
      const size_t group = i / group_gpus;
      const double s =
          by_replica.size() == replicas * sim_mem.size() ? by_replica[group] : sim_mem[group % sim_mem.size()];
      m.AddRow({fmt::format("{} (GPU group {})", i, i / group_gpus), HumanBytes(s), HumanBytes(peak_tensor_bytes[i]),
                fmt::format("{:.2f}x", peak_tensor_bytes[i] / s)});
    }
    out += "\n";
    out += m.Render();
  }
  return out;
}

std::string RunTimelineSvg(const PlanRun& simulated, const SimResult& measured, int steps,
                           const std::string& cost_model) {
  const int P = simulated.exec.schedule.num_ranks;
  std::vector<std::string> sim_names, run_names;
  for (int i = 0; i < simulated.result.num_ranks(); ++i) sim_names.push_back(simulated.exec.ranks[i % P].name);
  for (int i = 0; i < measured.num_ranks(); ++i) {
    run_names.push_back(fmt::format("replica {} {}", i / P, simulated.exec.ranks[i % P].name));
  }
  return StackedTimelinesSvg(
      {{fmt::format("simulated: {:.4f} s ({})", simulated.metrics.iteration_time_s, cost_model), &simulated.result,
        &simulated.exec.schedule, sim_names},
       {fmt::format("measured by loom run: {:.4f} s (last of {} steps)", measured.iteration_time_s, steps), &measured,
        &simulated.exec.schedule, run_names}});
}

std::vector<std::string> MeasuredRankNames(const PlanRun& simulated, const SimResult& measured) {
  const int P = simulated.exec.schedule.num_ranks;
  std::vector<std::string> names;
  for (int i = 0; i < measured.num_ranks(); ++i) {
    names.push_back(fmt::format("replica {} {} (measured)", i / P, simulated.exec.ranks[i % P].name));
  }
  return names;
}

}  // namespace loom
