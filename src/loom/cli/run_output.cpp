#include "loom/cli/run_output.h"

#ifdef LOOM_HAVE_RUNTIME

#include <fmt/format.h>

#include <fmt/ranges.h>
#include <cmath>

#include <algorithm>

#include "loom/human_bytes.h"
#include "loom/report/run_vs_simulation.h"

namespace loom::cli {

namespace {

// Each node event of a fault-tolerant run: a failure replayed, or nodes back.
std::string FormatNodeEvent(const RunResult::NodeEvent& e) {
  // What the next generation started from: the survivors' copy, or a checkpoint restored.
  const std::string state =
      e.restored_from.empty()
          ? fmt::format("{} of layer state copied", HumanBytes(static_cast<double>(e.copied_bytes)))
          : fmt::format("restored from {} ({} committed step(s) run again)", e.restored_from, e.replayed_steps);
  if (e.kind == "failure") {
    return fmt::format(
        "  step {} (replayed): node(s) {} failed: {}\n    noticed in {:.3f} s, next generation ({} "
        "processes) ready in {:.3f} s, {}; {:.3f} s of work lost\n",
        e.step, fmt::join(e.nodes, ", "), e.outcome, e.detect_s, e.processes, e.recover_s, state, e.lost_s);
  }
  return fmt::format("  before step {}: {}\n    next generation ({} processes) ready in {:.3f} s, {}\n", e.step,
                     e.outcome, e.processes, e.recover_s, state);
}

}  // namespace

nlohmann::json RunJson(const RunResult& r, const RunOutputContext& context) {
  nlohmann::json j = {{"losses", r.losses},
                      {"step_s", r.step_s},
                      {"params", r.params},
                      {"measured_busy_s", r.measured.busy_s},
                      {"measured_iteration_time_s", r.measured.iteration_time_s},
                      {"peak_rss_bytes", r.peak_rss_bytes},
                      {"peak_tensor_bytes", r.peak_tensor_bytes},
                      {"first_step", r.first_step}};
  // The training loop's per step (null where not known: an fp16 overflow's norm).
  nlohmann::json norms = nlohmann::json::array(), lrs = nlohmann::json::array();
  std::vector<int> nonfinite;
  for (size_t i = 0; i < r.grad_norms.size(); ++i) {
    norms.push_back(std::isfinite(r.grad_norms[i]) ? nlohmann::json(r.grad_norms[i]) : nlohmann::json(nullptr));
    lrs.push_back(std::isfinite(r.lrs[i]) ? nlohmann::json(r.lrs[i]) : nlohmann::json(nullptr));
    if (r.nonfinite_skipped[i]) nonfinite.push_back(static_cast<int>(i));
  }
  j["grad_norms"] = norms;
  j["lrs"] = lrs;
  j["nonfinite_skipped_steps"] = nonfinite;
  if (!r.unread_checkpoint_tensors.empty()) j["unread_checkpoint_tensors"] = r.unread_checkpoint_tensors;
  nlohmann::json events = nlohmann::json::array();
  for (const auto& e : r.events) {
    events.push_back({{"step", e.step},
                      {"kind", e.kind},
                      {"nodes", e.nodes},
                      {"outcome", e.outcome},
                      {"detect_s", e.detect_s},
                      {"recover_s", e.recover_s},
                      {"lost_s", e.lost_s},
                      {"copied_bytes", e.copied_bytes},
                      {"restored_from", e.restored_from},
                      {"replayed_steps", e.replayed_steps},
                      {"processes", e.processes}});
  }
  if (context.fault_tolerant) j["events"] = events;
  j["notes"] = r.notes;
  if (!r.loss_scales.empty()) {  // fp16
    std::vector<int> skipped;
    for (size_t i = 0; i < r.skipped.size(); ++i) {
      if (r.skipped[i]) skipped.push_back(static_cast<int>(i));
    }
    j["loss_scales"] = r.loss_scales;
    j["skipped_steps"] = skipped;
  }
  if (context.predicted != nullptr) {
    j["simulated_iteration_time_s"] = context.predicted->metrics.iteration_time_s;
    j["simulated_busy_s"] = context.predicted->result.busy_s;
    j["simulated_group_peak_mem_bytes"] = context.predicted->group_peak_mem_bytes;
    j["simulated_replica_group_peak_mem_bytes"] = context.predicted->replica_group_peak_mem_bytes;
  }
  return j;
}

std::string FormatRun(const RunResult& r, const RunOutputContext& context) {
  const Plan& p = *context.plan;
  double peak = 0, tensors = 0;
  for (double b : r.peak_rss_bytes) peak = std::max(peak, b);
  for (double b : r.peak_tensor_bytes) tensors = std::max(tensors, b);
  std::string out = fmt::format(
      "ran {} ({}) on {} process(es), {} step(s); peak resident memory {} per process, "
      "peak tensor memory of the steps {}\n",
      context.label, p.strategy, r.step_s.size(), r.losses.size(), HumanBytes(peak), HumanBytes(tensors));
  for (const auto& n : r.notes) out += "  " + n + "\n";
  if (const size_t n = r.unread_checkpoint_tensors.size(); n > 0) {  // transformers warns of them too
    constexpr size_t kShown = 4;
    const std::vector<std::string> shown(r.unread_checkpoint_tensors.begin(),
                                         r.unread_checkpoint_tensors.begin() + std::min(n, kShown));
    out += fmt::format(
        "  {} tensor(s) of the checkpoint no layer reads (a LLaVA's vision layers past its feature "
        "layer, or another model's; --save keeps them as they are): {}{}\n",
        n, fmt::join(shown, ", "), n > kShown ? fmt::format(", and {} more", n - kShown) : "");
  }
  for (const auto& u : p.units) {
    if (u.sm_fraction < 1 && context.device != Device::kCuda) {
      out +=
          "  SM quotas: on this CPU build the modules sharing a GPU ran one after another; the "
          "quotas shape the prediction only\n";
      break;
    }
  }
  for (const auto& e : r.events) out += FormatNodeEvent(e);
  if (r.first_step > 0) out += fmt::format("  resumed after step {} from {}\n", r.first_step - 1, context.resume);
  for (size_t i = r.first_step; i < r.losses.size(); ++i) {
    double slowest = 0;
    for (const auto& rank : r.step_s) slowest = std::max(slowest, rank[i]);
    out += fmt::format("  step {}: loss {:.6f}, {:.3f} s (slowest rank)", i, r.losses[i], slowest);
    if (i < r.grad_norms.size() && std::isfinite(r.lrs[i])) {
      out += fmt::format(", grad norm {:.4g}, lr {:.3g}", std::fabs(r.grad_norms[i]), r.lrs[i]);
    }
    if (i < r.nonfinite_skipped.size() && r.nonfinite_skipped[i]) {
      out += "; skipped: the loss or gradient norm was not finite (--skip-nonfinite)";
    }
    if (i < r.loss_scales.size()) {
      out += r.skipped[i] ? fmt::format("; skipped: gradients overflowed at loss scale {:g}", r.loss_scales[i])
                          : fmt::format(", loss scale {:g}", r.loss_scales[i]);
    }
    out += "\n";
  }
  if (context.predicted != nullptr) {
    out += FormatRunBesideSimulation(*context.predicted, r.measured, r.peak_tensor_bytes, p.group_gpus,
                                     context.cost_model);
  }
  return out;
}

}  // namespace loom::cli

#endif  // LOOM_HAVE_RUNTIME
