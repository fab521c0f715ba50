#include "loom/report/simulation_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "loom/report/table.h"

namespace loom {

std::string FormatPlanRun(const PlanRun& run, const Model& model, const Workload& workload, const std::string& header) {
  const Schedule& sch = run.exec.schedule;
  std::string out =
      fmt::format("{}, workload {} (global batch {}): {}, {} schedule, {} distinct replica(s) simulated\n\n",
                  model.name, workload.name, workload.global_batch, header, sch.name, run.costs.replicas.size());
  TextTable stages(
      {"stage", "rank", "layers", "fwd ms/mb", "bwd ms/mb", "activations/mb", "rank idle", "rank peak mem"});
  const auto& costs = run.costs.replicas[0];
  for (int v = 0; v < sch.num_stages(); ++v) {
    double f = 0, b = 0, act = 0;
    for (const auto& c : costs.stage[v]) {
      f += c.forward_s;
      b += c.backward_data_s + c.backward_weight_s;
      act += c.activation_bytes;
    }
    const double m = static_cast<double>(costs.stage[v].size());
    const int rank = sch.stage_rank[v];
    stages.AddRow({fmt::format("{}", v), run.exec.ranks[rank].name, run.exec.stages[v].label,
                   fmt::format("{:.2f}", f / m * 1e3), fmt::format("{:.2f}", b / m * 1e3), HumanBytes(act / m),
                   fmt::format("{:.1f}%", 100 * run.result.bubble_ratio_of(rank)),
                   HumanBytes(run.result.peak_mem_bytes[rank])});
  }
  const auto& x = run.metrics;
  TextTable metrics({"iteration s", "samples/s", "tokens/s", "MFU", "bubble", "peak mem/GPU"});
  metrics.AddRow({fmt::format("{:.3f}", x.iteration_time_s), fmt::format("{:.2f}", x.throughput_samples_per_s),
                  fmt::format("{:.0f}", x.throughput_tokens_per_s), fmt::format("{:.1f}%", 100 * x.mfu),
                  fmt::format("{:.1f}%", 100 * x.bubble_ratio), HumanBytes(x.peak_mem_bytes)});
  out += stages.Render() + "\n" + metrics.Render();
  // The rows are replica 0's; the metric is the largest over every distinct
  // replica (their samples differ), so it can exceed every row: say why.
  double row_peak = 0;
  for (double p : run.result.peak_mem_bytes) row_peak = std::max(row_peak, p);
  if (x.peak_mem_bytes > row_peak * (1 + 1e-9) && run.costs.replicas.size() > 1) {
    out += fmt::format(
        "peak mem/GPU is the largest over all {} distinct replicas (each trains other samples); the "
        "rows show replica 0's ranks, whose peak is {}\n",
        run.costs.replicas.size(), HumanBytes(row_peak));
  }
  return out;
}

nlohmann::json PlanMetricsJson(const PlanMetrics& m) {
  return {{"iteration_time_s", m.iteration_time_s},
          {"mfu", m.mfu},
          {"bubble_ratio", m.bubble_ratio},
          {"peak_mem_bytes", m.peak_mem_bytes},
          {"throughput_samples_per_s", m.throughput_samples_per_s}};
}

}  // namespace loom
