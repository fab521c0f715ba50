#include "loom/strategies/entrain/config_search.h"

#include <algorithm>
#include <functional>

#include "loom/pipeline/partition.h"

namespace loom {

bool EvaluateConfig(const ConfigProblem& p, const std::vector<int>& option, EntrainConfig& out) {
  out = {};
  double beta_max = 0, sum_tau = 0;
  for (size_t i = 0; i < p.options.size(); ++i) {
    const ComponentOption& o = p.options[i][option[i]];
    ComponentChoice c;
    c.option = option[i];
    c.tp = o.tp;
    c.cp = o.cp;
    c.pp = p.gpus[i] / p.group_gpus;
    if (c.pp < 1 || static_cast<int>(o.layer_s.size()) < c.pp) return false;
    const Partition part = MinMaxPartition(o.layer_s, c.pp);  // Eq. 4.1
    for (int s = 0; s < c.pp; ++s) {
      const int begin = part.begin[s], n = part.begin[s + 1] - part.begin[s];
      double t = 0, mem = 0;
      for (int l = begin; l < begin + n; ++l) {
        t += o.layer_s[l];
        if (!o.state_bytes.empty()) mem += o.state_bytes[l];
      }
      if (p.gpu_mem_bytes > 0 && mem > p.gpu_mem_bytes) return false;
      c.stage_layers.push_back(n);
      c.stage_s.push_back(t);
      c.beta_s = std::max(c.beta_s, t);
      sum_tau += t;
    }
    beta_max = std::max(beta_max, c.beta_s);
    out.components.push_back(std::move(c));
  }
  out.pipeline_s = sum_tau + (p.microbatches - 1) * beta_max;  // Eq. 4.2
  for (size_t i = 0; i + 1 < out.components.size(); ++i) {
    const auto& a = out.components[i];
    const auto& b = out.components[i + 1];
    if ((a.tp != b.tp || a.cp != b.cp) && i < p.reshard_s.size()) out.reshard_s += p.microbatches * p.reshard_s[i];
  }
  out.throughput = out.iteration_s() > 0 ? p.microbatches / out.iteration_s() : 0;
  return true;
}

std::vector<EntrainConfig> SearchConfigs(const ConfigProblem& p) {
  std::vector<EntrainConfig> out;
  std::vector<int> option(p.options.size(), 0);
  std::function<void(size_t)> visit = [&](size_t i) {
    if (i == p.options.size()) {
      EntrainConfig c;
      if (EvaluateConfig(p, option, c)) out.push_back(std::move(c));
      return;
    }
    for (size_t k = 0; k < p.options[i].size(); ++k) {
      option[i] = static_cast<int>(k);
      visit(i + 1);
    }
  };
  if (!p.options.empty()) visit(0);
  std::stable_sort(out.begin(), out.end(),
                   [](const EntrainConfig& a, const EntrainConfig& b) { return a.throughput > b.throughput; });
  return out;
}

}  // namespace loom
