#include "loom/plan/validate_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>

#include "loom/error.h"

namespace loom {

bool UniformMicrobatches(const Plan& plan) {
  int m = -1;
  for (const Unit& u : plan.units) {
    for (const PipelineSpec& p : u.pipelines) {
      if (m >= 0 && p.microbatches != m) return false;
      m = p.microbatches;
    }
  }
  return true;
}

std::vector<std::vector<int>> UnitInputs(const Plan& plan, const Model& model) {
  std::map<std::string, int> unit_of;
  for (size_t u = 0; u < plan.units.size(); ++u) {
    for (const auto& m : plan.units[u].modules) unit_of[m] = static_cast<int>(u);
  }
  std::vector<std::vector<int>> in(plan.units.size());
  for (size_t u = 0; u < plan.units.size(); ++u) {
    std::set<int> from;
    for (const auto& name : plan.units[u].modules) {
      int mi = model.FindModule(name);
      if (mi < 0) continue;
      for (int input : model.modules[mi].inputs) {
        auto it = unit_of.find(model.modules[input].name);
        if (it != unit_of.end() && it->second != static_cast<int>(u)) from.insert(it->second);
      }
    }
    in[u].assign(from.begin(), from.end());
  }
  return in;
}

namespace {

// One function per rule group of docs/plan-format.md, in its order; each
// appends a message per broken rule to `v`.
using Violations = std::vector<std::string>;

// Modules: each exactly once, known, in execution order inside a unit.
void ModuleViolations(const Plan& plan, const Model& model, Violations& v) {
  auto bad = [&](std::string s) { v.push_back(std::move(s)); };
  std::map<std::string, int> placed;
  std::set<std::string> names;
  for (const Unit& u : plan.units) {
    if (!names.insert(u.name).second) bad(fmt::format("unit {}: the name is used twice", u.name));
    int last = -1;
    for (const auto& m : u.modules) {
      int mi = model.FindModule(m);
      if (mi < 0) {
        bad(fmt::format("unit {}: module {} is not in model {}", u.name, m, model.name));
        continue;
      }
      if (mi < last) bad(fmt::format("unit {}: module {} is listed after a module that runs later", u.name, m));
      last = mi;
      ++placed[m];
    }
  }
  for (const auto& m : model.modules) {
    if (placed[m.name] != 1) {
      bad(fmt::format("module {} is placed in {} units; it must be in exactly 1", m.name, placed[m.name]));
    }
  }
}

// One pipeline of a unit: degrees, schedule, stage ranks and widths, and the
// unit's layers (`expected`) held exactly once, in order.
void PipelineViolations(const Plan& plan, const Unit& u, size_t pi,
                        const std::vector<std::pair<std::string, int>>& expected, bool uniform, Violations& v) {
  auto bad = [&](std::string s) { v.push_back(std::move(s)); };
  const std::string un = "unit " + u.name;
  const PipelineSpec& p = u.pipelines[pi];
  const std::string pn = fmt::format("{} pipeline {}", un, pi);
  if (p.replicas < 1 || p.pp < 1 || p.microbatches < 1) {
    bad(fmt::format("{}: replicas ({}), pp ({}) and microbatches ({}) must be >= 1", pn, p.replicas, p.pp,
                    p.microbatches));
    return;
  }
  const int stages = static_cast<int>(p.stages.size());
  const bool custom = p.schedule == ScheduleKind::kCustom;
  if (stages < p.pp || (!custom && stages % p.pp != 0)) {
    bad(fmt::format("{}: {} stages for pp {}; it needs pp x vpp stages", pn, stages, p.pp));
  } else if (!custom && p.vpp() > 1 && p.schedule != ScheduleKind::kInterleaved) {
    bad(fmt::format("{}: {} stages per rank need the interleaved schedule, not {}", pn, p.vpp(),
                    ScheduleKindName(p.schedule)));
  } else if (p.schedule == ScheduleKind::kInterleaved && p.vpp() == 1) {
    // Megatron's interleaved warm-up at one chunk a rank, (pp - rank - 1) x 2
    // microbatches, is 1F1B holding twice the activations; Megatron runs its
    // non-interleaved schedule there, and so should a plan.
    bad(
        fmt::format("{}: the interleaved schedule needs 2 or more stages per rank (vpp, --vpp); with one it is "
                    "1F1B with twice the warm-up: use 1f1b",
                    pn));
  } else if (p.schedule == ScheduleKind::kInterleaved && p.microbatches % p.pp != 0) {
    bad(fmt::format("{}: the interleaved schedule needs microbatches ({}) divisible by pp ({})", pn, p.microbatches,
                    p.pp));
  }
  if (!p.rank_groups.empty()) {
    if (static_cast<int>(p.rank_groups.size()) != p.pp) {
      bad(fmt::format("{}: rank_groups has {} entries; it needs one per pipeline rank ({})", pn, p.rank_groups.size(),
                      p.pp));
    }
    for (size_t r = 0; r < p.rank_groups.size(); ++r) {
      if (p.rank_groups[r] < 1) bad(fmt::format("{}: rank_groups[{}] is {}; it must be >= 1", pn, r, p.rank_groups[r]));
    }
  }
  std::vector<int> per_rank(p.pp, 0);
  for (int s = 0; s < stages; ++s) {
    const int r = p.stages[s].rank;
    if (r < 0 || r >= p.pp) {
      bad(fmt::format("{}: stage {} is on rank {}; ranks are 0..{}", pn, s, r, p.pp - 1));
    } else if (p.schedule != ScheduleKind::kCustom && r != s % p.pp) {
      bad(
          fmt::format("{}: stage {} is on rank {}; the {} schedule puts stage v on rank v % pp = {} (the custom "
                      "schedule takes any mapping)",
                      pn, s, r, ScheduleKindName(p.schedule), s % p.pp));
    } else {
      ++per_rank[r];
    }
    const int stp = p.stages[s].tp;
    const int gpus =
        (r >= 0 && r < p.pp && static_cast<int>(p.rank_groups.size()) == p.pp ? p.rank_groups[r] : 1) * plan.group_gpus;
    if (stp < 0) {
      bad(fmt::format("{}: stage {} has tp {}; valid: 0 (the unit's) or >= 1", pn, s, stp));
    } else if (stp > 0 && u.cp >= 1 && (gpus % (stp * u.cp) != 0 || stp > plan.group_gpus)) {
      bad(
          fmt::format("{}: stage {} has tp {}; a stage's tp times the unit's cp ({}) must divide the {} GPUs of "
                      "its rank, and tp stays inside one group of {} GPUs",
                      pn, s, stp, u.cp, gpus, plan.group_gpus));
    }
    if (p.stages[s].layers.empty()) bad(fmt::format("{}: stage {} holds no layer", pn, s));
  }
  if (p.schedule == ScheduleKind::kCustom) {
    for (int r = 0; r < p.pp; ++r) {
      if (per_rank[r] == 0) bad(fmt::format("{}: rank {} holds no stage", pn, r));
    }
  }
  std::vector<std::pair<std::string, int>> got;
  for (const auto& st : p.stages) {
    for (const auto& r : st.layers) {
      if (std::find(u.modules.begin(), u.modules.end(), r.module) == u.modules.end()) {
        bad(fmt::format("{}: a layer range names module {}, which is not one of the unit's ({})", pn, r.module,
                        fmt::join(u.modules, ", ")));
      }
      for (int l = r.begin; l < r.end; ++l) got.push_back({r.module, l});
      if (r.end <= r.begin) bad(fmt::format("{}: layer range {}[{}:{}] is empty", pn, r.module, r.begin, r.end));
    }
  }
  if (got != expected) {
    bad(fmt::format("{}: its stages hold {} layers; they must hold the {} layers of {} exactly once, in order", pn,
                    got.size(), expected.size(), fmt::join(u.modules, ", ")));
  }
  if (!uniform && plan.units.size() > 1) {
    bad(fmt::format("{}: runs {} microbatches; with several units every pipeline must run the same number", pn,
                    p.microbatches));
  }
}

// Per unit: parallel degrees, pipelines, layer coverage, groups and their SM shares.
void UnitViolations(const Plan& plan, const Model& model, const Cluster& c, Violations& v) {
  auto bad = [&](std::string s) { v.push_back(std::move(s)); };
  const int n = c.num_gpus();
  const int groups = n / plan.group_gpus;
  std::map<std::pair<int, int>, double> sm;  // (phase, group) -> SM share
  const bool uniform = UniformMicrobatches(plan);
  for (const Unit& u : plan.units) {
    const std::string un = "unit " + u.name;
    if (u.tp < 1 || u.cp < 1) {
      bad(fmt::format("{}: tp ({}) and cp ({}) must be >= 1", un, u.tp, u.cp));
    } else if (plan.group_gpus % (u.tp * u.cp) != 0) {
      bad(fmt::format("{}: tp ({}) x cp ({}) = {} must divide group_gpus ({})", un, u.tp, u.cp, u.tp * u.cp,
                      plan.group_gpus));
    }
    if (u.sm_fraction <= 0 || u.sm_fraction > 1) {
      bad(fmt::format("{}: sm_fraction is {}; it must be in (0, 1]", un, u.sm_fraction));
    }
    if (u.phase < 0) bad(fmt::format("{}: phase is {}; it must be >= 0", un, u.phase));
    if (u.zero_stage < 0 || u.zero_stage > 3) bad(fmt::format("{}: zero_stage is {}; valid: 0..3", un, u.zero_stage));
    if (u.pipelines.empty()) bad(fmt::format("{}: needs at least one pipeline", un));
    // The layers every pipeline must cover, in order.
    std::vector<std::pair<std::string, int>> expected;
    for (const auto& m : u.modules) {
      int mi = model.FindModule(m);
      if (mi < 0) continue;
      for (int l = 0; l < static_cast<int>(model.modules[mi].layers.size()); ++l) expected.push_back({m, l});
    }
    for (size_t pi = 0; pi < u.pipelines.size(); ++pi) PipelineViolations(plan, u, pi, expected, uniform, v);
    const int used = u.num_groups();
    if (u.first_group < 0 || u.first_group + used > groups) {
      bad(fmt::format("{}: occupies groups {}..{} but the cluster has {} groups of {} GPUs ({} GPUs)", un,
                      u.first_group, u.first_group + used - 1, groups, plan.group_gpus, n));
    } else {
      for (int g = u.first_group; g < u.first_group + used; ++g) sm[{u.phase, g}] += u.sm_fraction;
    }
  }
  for (const auto& [key, share] : sm) {
    if (share > 1 + 1e-9) {
      bad(fmt::format("phase {}, GPU group {} (GPUs {}..{}): SM fractions sum to {:.3g}, {:.3g} over 1", key.first,
                      key.second, key.second * plan.group_gpus, (key.second + 1) * plan.group_gpus - 1, share,
                      share - 1));
    }
  }
}

// Rounds of the phases: several phases, one microbatch count that they divide.
void PhaseRoundViolations(const Plan& plan, Violations& v) {
  auto bad = [&](std::string s) { v.push_back(std::move(s)); };
  if (plan.phase_rounds != 1) {
    std::set<int> phases, counts;
    for (const Unit& u : plan.units) {
      phases.insert(u.phase);
      for (const auto& p : u.pipelines) counts.insert(p.microbatches);
    }
    if (plan.phase_rounds < 1) {
      bad(fmt::format("phase_rounds is {}; it must be >= 1", plan.phase_rounds));
    } else if (phases.size() < 2) {
      bad(fmt::format("phase_rounds is {} but every unit is in one phase; rounds repeat several phases (use 1)",
                      plan.phase_rounds));
    } else if (counts.size() != 1 || *counts.begin() % plan.phase_rounds != 0) {
      bad(fmt::format("phase_rounds is {}: every pipeline must run the same microbatch count, a multiple of it",
                      plan.phase_rounds));
    }
  }
}

// The batch: every replica gets samples.
void BatchViolations(const Plan& plan, Violations& v) {
  auto bad = [&](std::string s) { v.push_back(std::move(s)); };
  const bool uniform = UniformMicrobatches(plan);
  if (plan.global_batch >= 1 && !plan.units.empty()) {
    if (uniform) {
      const int m = plan.units[0].pipelines.empty() ? 1 : plan.units[0].pipelines[0].microbatches;
      if (m >= 1 && plan.global_batch % m != 0) {
        bad(fmt::format("global batch ({}) does not split into {} equal microbatches", plan.global_batch, m));
      } else if (m >= 1) {
        for (const Unit& u : plan.units) {
          if (u.num_replicas() > plan.global_batch / m) {
            bad(fmt::format("unit {}: {} data-parallel replicas but a microbatch has only {} samples", u.name,
                            u.num_replicas(), plan.global_batch / m));
          }
        }
      }
    } else if (plan.units.size() == 1) {
      int slots = 0;
      for (const auto& p : plan.units[0].pipelines) slots += p.replicas * p.microbatches;
      if (slots > 0 && plan.global_batch % slots != 0) {
        bad(fmt::format("global batch ({}) does not split into the {} microbatches of all pipelines", plan.global_batch,
                        slots));
      }
    }
  }
}

// Brokers name units.
void BrokerViolations(const Plan& plan, Violations& v) {
  auto bad = [&](std::string s) { v.push_back(std::move(s)); };
  for (const Broker& b : plan.brokers) {
    if (plan.FindUnit(b.from) < 0 || plan.FindUnit(b.to) < 0) {
      bad(fmt::format("broker {} -> {}: both ends must be units of the plan", b.from, b.to));
    }
    if (b.count < 1) bad(fmt::format("broker {} -> {}: count is {}; it must be >= 1", b.from, b.to, b.count));
  }
}

// Units that take turns on GPUs must run all forwards before any backward
// (the later phase runs between them), and chained units in one phase can
// only be joined by non-interleaved schedules. Checked only on a plan that
// passed every rule above.
void PhaseOrderViolations(const Plan& plan, const Model& model, Violations& v) {
  auto bad = [&](std::string s) { v.push_back(std::move(s)); };
  const auto inputs = UnitInputs(plan, model);
  for (size_t a = 0; a < plan.units.size(); ++a) {
    const Unit& ua = plan.units[a];
    for (size_t b = 0; b < plan.units.size(); ++b) {
      const Unit& ub = plan.units[b];
      const bool overlap =
          ua.first_group < ub.first_group + ub.num_groups() && ub.first_group < ua.first_group + ua.num_groups();
      if (a != b && overlap && ua.phase < ub.phase) {
        for (const auto& p : ua.pipelines) {
          if (p.schedule != ScheduleKind::kGpipe) {
            bad(
                fmt::format("unit {} shares GPUs with the later phase of unit {}; it must use the gpipe schedule "
                            "(all forwards, then all backwards), not {}",
                            ua.name, ub.name, ScheduleKindName(p.schedule)));
          }
        }
      }
    }
    for (int b : inputs[a]) {
      if (plan.units[b].phase > ua.phase) {
        bad(fmt::format("unit {} (phase {}) reads unit {} of a later phase ({})", ua.name, ua.phase, plan.units[b].name,
                        plan.units[b].phase));
      }
      if (plan.units[b].phase == ua.phase) {
        for (const Unit* x : {&ua, &plan.units[b]}) {
          for (const auto& p : x->pipelines) {
            if (p.schedule == ScheduleKind::kInterleaved || p.schedule == ScheduleKind::kZbH1) {
              bad(
                  fmt::format("unit {}: the {} schedule cannot be chained with another unit in the same phase; "
                              "use 1f1b or gpipe",
                              x->name, ScheduleKindName(p.schedule)));
            }
          }
        }
      }
    }
  }
}

}  // namespace

std::vector<std::string> PlanViolations(const Plan& plan, const Model& model, const Cluster& c, const Workload& w) {
  Violations v;
  if (plan.group_gpus < 1 || c.gpus_per_node % plan.group_gpus != 0) {
    v.push_back(
        fmt::format("group_gpus is {}; it must divide the {} GPUs of a node (tensor and context parallelism stay "
                    "inside a node)",
                    plan.group_gpus, c.gpus_per_node));
    return v;  // every group count below depends on it
  }
  if (plan.global_batch != w.global_batch) {
    v.push_back(fmt::format("global_batch is {}; the workload's is {}", plan.global_batch, w.global_batch));
  }
  if (plan.units.empty()) v.push_back("units: a plan needs at least one unit");
  ModuleViolations(plan, model, v);
  UnitViolations(plan, model, c, v);
  PhaseRoundViolations(plan, v);
  BatchViolations(plan, v);
  BrokerViolations(plan, v);
  if (v.empty()) PhaseOrderViolations(plan, model, v);
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

void ValidatePlan(const Plan& plan, const Model& model, const Cluster& cluster, const Workload& workload,
                  const std::string& where) {
  auto v = PlanViolations(plan, model, cluster, workload);
  if (v.empty()) return;
  std::string msg = fmt::format("{}: invalid plan ({} violation{}):", where, v.size(), v.size() == 1 ? "" : "s");
  for (const auto& line : v) msg += "\n  - " + line;
  throw Error(msg);
}

}  // namespace loom
