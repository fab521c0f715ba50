#include "loom/runtime/run_reports.h"

#include <fmt/format.h>

#include <sys/wait.h>

#include <cmath>
#include <cstring>
#include <sstream>

namespace loom::runtime {

std::string DescribeExit(int status) {
  if (WIFSIGNALED(status)) {
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  }
  return fmt::format("exited with code {}", WEXITSTATUS(status));
}

void ReadReports(const std::vector<std::vector<std::string>>& lines, const ProcessLayout& layout, int steps,
                 RunResult& out) {
  const int world = static_cast<int>(lines.size()), tp = layout.group_gpus;
  out.losses.assign(steps, 0.0);
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
      std::istringstream in(l);
      std::string kind;
      in >> kind;
      if (kind == "loss") {
        int step = 0;
        double v = 0;
        in >> step >> v;
        out.losses.at(step) += v;  // each replica's last rank reports its share of the batch's mean loss
        ++reporters.at(step);
      } else if (kind == "time") {
        int step = 0;
        double v = 0;
        in >> step >> v;
        out.step_s[r].at(step) = v;
      } else if (kind == "mem") {
        double bytes = 0;
        in >> bytes;
        out.peak_rss_bytes[r] = bytes;
        if (r % tp == 0 && r / tp < static_cast<int>(layout.of_group.size())) {
          for (const auto& copy : layout.of_group[r / tp]) out.measured.peak_mem_bytes[layout.Instance(copy)] = bytes;
        }
      } else if (kind == "tmem") {
        in >> out.peak_tensor_bytes[r];
      } else if (kind == "iv") {
        Interval iv;  // on the simulator's rank of the copy (replica * ranks + rank)
        in >> iv.rank >> iv.stream >> iv.action >> iv.start_s >> iv.end_s;
        out.measured.intervals.push_back(iv);
        if (iv.stream == 0) out.measured.busy_s[iv.rank] += iv.end_s - iv.start_s;
      } else if (kind == "note") {
        std::string rest;
        std::getline(in, rest);
        out.notes.push_back(fmt::format("process {}:{}", r, rest));
      } else if (kind == "param") {
        double s = 0, q = 0, a = 0;
        in >> s >> q >> a;
        out.params[r].insert(out.params[r].end(), {s, q, a});
      }
    }
  }
  for (int s = 0; s < steps; ++s) {
    if (reporters[s] == 0) out.losses[s] = std::nan("");
  }
  for (const auto& rank : out.step_s) out.measured.iteration_time_s = std::max(out.measured.iteration_time_s, rank.back());
}

}  // namespace loom::runtime
