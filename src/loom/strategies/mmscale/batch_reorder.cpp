#include "loom/strategies/mmscale/batch_reorder.h"

#include <fmt/format.h>

#include <numeric>
#include <optional>

#include "loom/algo/lpt.h"
#include "loom/cost/frozen.h"
#include "loom/cost/token_stats.h"
#include "loom/error.h"
#include "loom/plan/compile_plan.h"
#include "loom/sim/price_execution.h"
#include "loom/sim/simulator.h"
#include "loom/strategies/mmscale/inter_reorder.h"
#include "loom/strategies/mmscale/intra_reorder.h"

namespace loom {

namespace {

struct StageTime {
  double forward_s = 0, backward_s = 0;
};

// [sample][stage] predicted time of one sample on one GPU of unit u's first
// pipeline template (the group's members share its sequences).
std::vector<std::vector<StageTime>> SampleStageTimes(const Model& model, const Cluster& c, const Plan& plan, int u,
                                                     const Batch& batch,
                                                     const std::vector<std::vector<BackwardNeeds>>& needs) {
  const PipelineSpec& ps = plan.units[u].pipelines[0];
  std::vector<ExecStage> stages;
  for (const auto& spec : ps.stages) stages.push_back(StageOf(model, plan, u, 0, 0, spec));
  std::vector<std::vector<StageTime>> out(batch.samples.size(), std::vector<StageTime>(ps.stages.size()));
  for (size_t s = 0; s < batch.samples.size(); ++s) {
    const auto tokens = CountModuleTokens(model, batch.samples[s]);
    for (size_t st = 0; st < stages.size(); ++st) {
      // Reordering ranks samples by relative time: the default precision's prices order them.
      const StageCost sc = PriceStage(model, c, stages[st], tokens, {}, needs, Precision::kBf16);
      out[s][st].forward_s = sc.forward_s;
      out[s][st].backward_s = sc.backward_data_s + sc.backward_weight_s;
    }
  }
  return out;
}

int MicrobatchCount(const Plan& plan) {
  const int m = plan.units.at(0).pipelines.at(0).microbatches;
  for (const auto& u : plan.units) {
    for (const auto& p : u.pipelines) {
      if (p.microbatches != m) throw Error("mmscale reordering: every unit must run the same microbatch count");
    }
  }
  if (m < 1 || plan.global_batch % m != 0) {
    throw Error(
        fmt::format("mmscale reordering: {} microbatches do not divide the global batch {}", m, plan.global_batch));
  }
  return m;
}

}  // namespace

IterationSchedule InputOrder(const Plan& plan, int64_t iteration) {
  const int m = MicrobatchCount(plan);
  const int per = static_cast<int>(plan.global_batch / m);
  IterationSchedule it;
  it.iteration = iteration;
  for (int k = 0; k < m; ++k) {
    it.microbatch_samples.emplace_back(per);
    std::iota(it.microbatch_samples.back().begin(), it.microbatch_samples.back().end(), k * per);
  }
  return it;
}

namespace {

// Per unit, per sample, per stage: the sample's predicted stage times.
using SampleTimes = std::vector<std::vector<std::vector<StageTime>>>;

SampleTimes TimesOf(const Model& model, const Cluster& c, const Plan& plan, const Batch& batch) {
  const int G = static_cast<int>(plan.global_batch);
  if (static_cast<int>(batch.samples.size()) != G) {
    throw Error(fmt::format("mmscale reordering: the batch has {} samples, the plan {}", batch.samples.size(), G));
  }
  const auto needs = ComputeBackwardNeeds(model);
  SampleTimes times(plan.units.size());
  for (size_t u = 0; u < plan.units.size(); ++u) {
    times[u] = SampleStageTimes(model, c, plan, static_cast<int>(u), batch, needs);
  }
  return times;
}

IterationSchedule Reorder(const Plan& plan, int64_t iteration, bool inter, const SampleTimes& times) {
  const int m = MicrobatchCount(plan);
  const int G = static_cast<int>(plan.global_batch);
  const int S = G / m;  // samples per global microbatch (= the backbone's DP)
  const int U = static_cast<int>(plan.units.size());

  // Size of a sample: its predicted time in every unit but the backbone
  // (whose sequences have a fixed length).
  std::vector<double> size(G, 0.0);
  for (int u = 0; u < U; ++u) {
    if (plan.units[u].name == "backbone" && U > 1) continue;
    for (int s = 0; s < G; ++s) {
      for (const auto& st : times[u][s]) size[s] += st.forward_s + st.backward_s;
    }
  }
  // The first unit's replicas take fixed slices of every global microbatch.
  const int R = plan.units[0].num_replicas();
  std::vector<int> per_mb(R), capacity(R);
  for (int e = 0; e < R; ++e) {
    per_mb[e] = static_cast<int>(static_cast<int64_t>(e + 1) * S / R - static_cast<int64_t>(e) * S / R);
    capacity[e] = per_mb[e] * m;
  }
  const auto groups = IntraReorder(size, capacity);

  std::vector<std::vector<std::vector<int>>> chunks(R);  // [replica][microbatch] -> samples
  int chain_stages = 0;
  for (const auto& u : plan.units) chain_stages += static_cast<int>(u.pipelines[0].stages.size());
  std::optional<PipelineShape> shape;
  if (inter) shape.emplace(chain_stages, m);  // one shape for every replica's pipeline
  std::vector<std::vector<int>> order(R);
  for (int e = 0; e < R; ++e) {
    chunks[e].assign(m, {});
    order[e].resize(m);
    std::iota(order[e].begin(), order[e].end(), 0);
    if (per_mb[e] == 0) continue;
    // Balanced microbatches inside the replica (the same LPT).
    std::vector<double> sz;
    for (int s : groups[e]) sz.push_back(size[s]);
    const auto bin = BalancedLptPartition(sz, std::vector<int>(m, per_mb[e]));
    for (size_t i = 0; i < bin.size(); ++i) chunks[e][bin[i]].push_back(groups[e][i]);
    if (!inter) continue;
    // The replica's pipeline: every unit's stages, each microbatch's time the
    // mean of its samples times the samples one replica of that unit takes.
    std::vector<MicrobatchTimes> mbs(m);
    for (int k = 0; k < m; ++k) {
      for (int u = 0; u < U; ++u) {
        const int stages = static_cast<int>(plan.units[u].pipelines[0].stages.size());
        const double samples_per_replica =
            u == 0 ? 1.0 : static_cast<double>(S) / plan.units[u].num_replicas() / per_mb[e];
        for (int st = 0; st < stages; ++st) {
          double f = 0, b = 0;
          for (int s : chunks[e][k]) {
            f += times[u][s][st].forward_s;
            b += times[u][s][st].backward_s;
          }
          mbs[k].forward_s.push_back(f * samples_per_replica);
          mbs[k].backward_s.push_back(b * samples_per_replica);
        }
      }
    }
    order[e] = InterReorder(mbs, *shape);
  }
  IterationSchedule it;
  it.iteration = iteration;
  it.microbatch_samples.assign(m, {});
  for (int k = 0; k < m; ++k) {
    for (int e = 0; e < R; ++e) {
      const auto& chunk = chunks[e][order[e][k]];
      it.microbatch_samples[k].insert(it.microbatch_samples[k].end(), chunk.begin(), chunk.end());
    }
  }
  return it;
}

}  // namespace

IterationSchedule ReorderBatch(const Model& model, const Cluster& c, const Plan& plan, const Batch& batch,
                               int64_t iteration, bool inter) {
  return Reorder(plan, iteration, inter, TimesOf(model, c, plan, batch));
}

IterationSchedule MmscaleScheduleBatch(const Model& model, const Cluster& c, const Workload& w, const Plan& plan,
                                       const Batch& batch, int64_t iteration) {
  const SampleTimes times = TimesOf(model, c, plan, batch);  // both reorderings read the same predictions
  std::vector<IterationSchedule> candidates = {InputOrder(plan, iteration), Reorder(plan, iteration, false, times),
                                               Reorder(plan, iteration, true, times)};
  // Orders that change only what each microbatch holds keep the schedule:
  // one simulator (graph and validation built once) re-times them. Broker
  // edges follow the samples, so a reordering that moves samples between
  // replicas changes the schedule and gets a simulator of its own.
  int best = 0;
  double best_s = 0;
  SimOptions summary;  // only the time is compared
  summary.record_timelines = false;
  std::optional<Simulator> sim;
  PricingMemo memo;  // the inter-microbatch order regroups no samples: its microbatches are priced already
  for (size_t i = 0; i < candidates.size(); ++i) {
    ExecutionPlan exec = CompilePlan(model, c, w, plan, batch, &candidates[i]);
    ExecutionCosts costs = PriceExecution(exec, model, c, batch, nullptr, &memo);
    if (sim && sim->schedule() == exec.schedule) {
      sim->Rerun(std::move(costs.replicas));
    } else {
      sim.emplace(std::move(exec.schedule), std::move(costs.replicas), summary);
    }
    const double t = sim->iteration_time_s();
    if (i == 0 || t < best_s) {
      best_s = t;
      best = static_cast<int>(i);
    }
  }
  return candidates[best];
}

}  // namespace loom
