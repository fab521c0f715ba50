#include "loom/runtime/run_reports.h"

#include <fmt/format.h>

#include <sys/wait.h>

#include <cmath>
#include <cstring>
#include <sstream>

#include "loom/error.h"
#include "loom/runtime/worker_message.h"

namespace loom::runtime {

std::string DescribeExit(int status) {
  if (WIFSIGNALED(status)) {
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  }
  return fmt::format("exited with code {}", WEXITSTATUS(status));
}

std::string Divergence(const std::vector<double>& losses, const std::vector<int>& reports_per_step,
                       const std::vector<std::vector<double>>& params) {
  for (size_t s = 0; s < losses.size(); ++s) {
    if (s < reports_per_step.size() && reports_per_step[s] > 0 && !std::isfinite(losses[s])) {
      return fmt::format(
          "training diverged: the loss of step {} is {}; the weights it leaves are not usable "
          "(lower --lr, or check the data)",
          s, losses[s]);
    }
  }
  for (size_t p = 0; p < params.size(); ++p) {
    for (double v : params[p]) {
      if (!std::isfinite(v)) {
        return fmt::format(
            "training diverged: process {}'s parameters are not finite after the last step ({}); "
            "the weights are not usable (lower --lr, or check the data)",
            p, v);
      }
    }
  }
  return "";
}

void ReadReports(const std::vector<std::vector<std::string>>& lines, const ProcessLayout& layout, int steps,
                 RunResult& out) {
  const int world = static_cast<int>(lines.size()), tp = layout.group_gpus;
  out.losses.assign(steps, 0.0);
  out.grad_norms.assign(steps, std::nan(""));
  out.lrs.assign(steps, std::nan(""));
  out.nonfinite_skipped.assign(steps, false);
  std::vector<int> reporters(steps, 0);
  out.step_s.assign(world, std::vector<double>(steps, 0.0));
  out.params.assign(world, {});
  out.peak_rss_bytes.assign(world, 0.0);
  out.peak_tensor_bytes.assign(world, 0.0);
  const int instances = layout.instances();
  out.measured.busy_s.assign(instances, 0.0);
  out.measured.peak_mem_bytes.assign(instances, 0.0);
  out.measured.memory.assign(instances, {});
  for (int r = 0; r < world; ++r) {
    for (const auto& l : lines[r]) {
      const WorkerMessage message = Decode(l);
      if (const auto* m = std::get_if<report::Loss>(&message)) {
        out.losses.at(m->step) += m->value;  // each replica's last rank reports its share of the batch's mean loss
        ++reporters.at(m->step);
      } else if (const auto* m = std::get_if<report::LossScale>(&message)) {
        if (out.loss_scales.empty()) {
          out.loss_scales.assign(steps, std::nan(""));
          out.skipped.assign(steps, false);
        }
        out.loss_scales.at(m->step) = m->scale;
        out.skipped.at(m->step) = m->skipped;
      } else if (const auto* m = std::get_if<report::Metrics>(&message)) {
        out.grad_norms.at(m->step) = m->grad_norm;
        out.lrs.at(m->step) = m->lr;
        out.nonfinite_skipped.at(m->step) = m->skipped;
      } else if (const auto* m = std::get_if<report::StepTime>(&message)) {
        out.step_s[r].at(m->step) = m->seconds;
      } else if (const auto* m = std::get_if<report::PeakMemory>(&message)) {
        out.peak_rss_bytes[r] = m->bytes;
        if (r % tp == 0 && r / tp < static_cast<int>(layout.of_group.size())) {
          for (const auto& copy : layout.of_group[r / tp])
            out.measured.peak_mem_bytes[layout.Instance(copy)] = m->bytes;
        }
      } else if (const auto* m = std::get_if<report::PeakTensorMemory>(&message)) {
        out.peak_tensor_bytes[r] = m->bytes;
      } else if (const auto* m = std::get_if<report::Interval>(&message)) {
        Interval iv;  // on the simulator's rank of the copy (replica * ranks + rank)
        iv.rank = m->instance;
        iv.stream = m->stream;
        iv.action = m->action;
        iv.start_s = m->start_s;
        iv.end_s = m->end_s;
        out.measured.intervals.push_back(iv);
        if (iv.stream == 0) out.measured.busy_s[iv.rank] += iv.end_s - iv.start_s;
      } else if (const auto* m = std::get_if<report::Note>(&message)) {
        out.notes.push_back(fmt::format("process {}: {}", r, m->text));
      } else if (const auto* m = std::get_if<report::WeightsRead>(&message)) {
        out.checkpoint_tensors_read.insert(out.checkpoint_tensors_read.end(), m->names.begin(), m->names.end());
      } else if (const auto* m = std::get_if<report::Param>(&message)) {
        out.params[r].insert(out.params[r].end(), {m->sum, m->sum_sq, m->abs_sum});
      }
    }
  }
  // Steps --skip-nonfinite skipped are counted and reported, not a divergence.
  for (int s = 0; s < steps; ++s) {
    if (out.nonfinite_skipped[s]) reporters[s] = 0;
  }
  if (const std::string why = Divergence(out.losses, reporters, out.params); !why.empty()) throw Error(why);
  for (int s = 0; s < steps; ++s) {
    if (reporters[s] == 0) out.losses[s] = std::nan("");
  }
  for (const auto& rank : out.step_s)
    out.measured.iteration_time_s = std::max(out.measured.iteration_time_s, rank.back());
}

}  // namespace loom::runtime
