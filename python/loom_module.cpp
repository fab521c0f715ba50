// The `loom` Python module's native half (`loom._loom`, pybind11): planning,
// simulating and the per-batch schedulers, for python/loom/__init__.py's
// `plan`, `simulate` and `LoomBatchSampler`. Values cross as JSON text and
// plain lists, so the Python side needs nothing of Loom's types; every
// loom::Error becomes a Python ValueError with the same message.
#include <fmt/format.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/data/jsonl_source.h"
#include "loom/data/sample_modalities.h"
#include "loom/data/sample_source.h"
#include "loom/error.h"
#include "loom/pipeline/schedules.h"
#include "loom/plan/plan_json.h"
#include "loom/report/comparison.h"
#include "loom/report/simulation_report.h"
#include "loom/session/compare_strategies.h"
#include "loom/session/problem_loading.h"
#include "loom/session/strategy_list.h"
#include "loom/session/training_session.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"
#include "loom/strategies/baselines/megatron_config.h"
#include "loom/strategies/registry.h"
#include "loom/strategies/strategy.h"

namespace py = pybind11;

namespace {

// The named workload, else the model's default one, with `global_batch`
// applied as the CLI's --global-batch is (session/problem_loading.h, the
// CLI's own path). The range is checked here first so that the message names
// the Python argument, not the flag, and includes the lower bound that CLI11
// checks for the CLI.
loom::Workload MakeWorkload(const loom::Model& model, const std::optional<std::string>& workload,
                            std::optional<int64_t> global_batch) {
  if (global_batch && (*global_batch < 1 || *global_batch > loom::kMaxGlobalBatch)) {
    throw loom::Error(fmt::format("global_batch: must be 1..{}, got {}", loom::kMaxGlobalBatch, *global_batch));
  }
  loom::WorkloadOverrides overrides;
  overrides.global_batch = global_batch;
  return loom::LoadWorkloadWithOverrides(model, workload.value_or(""), overrides);
}

// `loom plan`: every strategy's plan, simulated on `iterations` batches; the
// comparison as `loom plan --json` writes it.
std::string Plan(const std::string& model_name, const std::string& cluster_name,
                 const std::optional<std::string>& workload, std::optional<int64_t> global_batch,
                 const std::string& strategies, int iterations, const std::string& profile) {
  const loom::Model model = loom::LoadModel(model_name);
  const loom::Cluster cluster = loom::LoadClusterWithProfile(cluster_name, profile);
  const loom::Workload w = MakeWorkload(model, workload, global_batch);
  const loom::Comparison cmp =
      loom::CompareStrategies(model, cluster, w, loom::ParseStrategyList(strategies, "strategies"), iterations, {}, {});
  return loom::ComparisonJson(cmp).dump();
}

// `loom simulate`: the Megatron-LM layout of the flags, iteration 0.
std::string Simulate(const std::string& model_name, const std::string& cluster_name, int tp, int pp, int dp, int cp,
                     int vpp, int microbatches, const std::string& schedule, const std::string& recompute,
                     const std::optional<std::string>& workload, std::optional<int64_t> global_batch,
                     const std::string& profile) {
  const loom::Model model = loom::LoadModel(model_name);
  const loom::Cluster cluster = loom::LoadClusterWithProfile(cluster_name, profile);
  const loom::Workload w = MakeWorkload(model, workload, global_batch);
  loom::ParallelConfig cfg;
  cfg.tp = tp;
  cfg.pp = pp;
  cfg.dp = dp;
  cfg.cp = cp;
  cfg.vpp = vpp;
  cfg.microbatches = microbatches;
  cfg.schedule = loom::ParseScheduleKind(schedule, "schedule");
  cfg.recompute = loom::ParseRecompute(recompute, "recompute");
  const loom::PlanRun run = loom::SimulateConfig(model, cluster, w, cfg);
  return loom::PlanMetricsJson(run.metrics).dump();
}

loom::Batch ParseBatch(const std::vector<std::string>& lines) {
  loom::Batch b;
  for (size_t i = 0; i < lines.size(); ++i)
    b.samples.push_back(loom::ParseJsonlSample(lines[i], fmt::format("samples[{}]", i)));
  return b;
}

// A strategy's plan for one representative batch, then its schedule of every
// later batch (the state a strategy keeps between batches is kept here).
class Scheduler {
 public:
  Scheduler(const std::string& model, const std::string& cluster, const std::string& strategy,
            const std::vector<std::string>& representative, const std::string& precision, const std::string& profile)
      : model_(loom::LoadModel(model)),
        cluster_(loom::LoadClusterWithProfile(cluster, profile)),
        batch_(ParseBatch(representative)) {
    if (batch_.samples.empty()) throw loom::Error("representative: give at least one sample");
    loom::CheckModelReadsSamples(model_, batch_, "metadata");
    workload_ = loom::DefaultWorkload(model_);
    workload_.name = "python";
    workload_.global_batch = static_cast<int64_t>(batch_.samples.size());
    const std::optional<loom::Precision> p = loom::FindPrecision(precision);
    if (!p) throw loom::Error(fmt::format("precision: '{}'; valid: bf16, fp16, tf32, fp32", precision));
    workload_.precision = *p;
    context_ = std::make_unique<loom::StrategyContext>(loom::StrategyContext{model_, cluster_, workload_, batch_, {}});
    result_ = loom::RunStrategy(strategy, *context_);
    session_ = std::make_unique<loom::TrainingSession>(*context_, strategy, result_.plan);
  }

  std::string plan_json() const { return loom::PlanToJson(result_.plan).dump(); }

  // {"microbatches": [[positions in the batch]...], "replicas": [[[...]]] or absent,
  //  "deferred": [...], "predicted_iteration_time_s": t}
  py::dict Schedule(const std::vector<std::string>& lines, int64_t iteration) {
    const loom::Batch batch = ParseBatch(lines);
    loom::CheckModelReadsSamples(model_, batch, "batch");
    if (batch.samples.size() != batch_.samples.size()) {
      throw loom::Error(
          fmt::format("batch: {} samples, the plan's global batch is {}", batch.samples.size(), batch_.samples.size()));
    }
    const loom::BatchOutcome out = session_->Step(batch, iteration);
    py::dict d;
    std::vector<std::vector<int>> mbs;
    std::vector<int> deferred;
    if (out.schedule) {
      mbs = out.schedule->microbatch_samples;
      deferred = out.schedule->deferred;
      // Every unit places the samples on replicas alike (Entrain's DP-level assignment): the first says it.
      const auto& per_replica = out.schedule->replica_microbatch_samples;
      if (!per_replica.empty()) d["replicas"] = per_replica.begin()->second;
    } else {  // a static plan: the loader's order, cut into its microbatches
      const int m = result_.plan.units[0].pipelines[0].microbatches;
      const int per = static_cast<int>(batch.samples.size()) / m;
      for (int k = 0; k < m; ++k) {
        mbs.emplace_back();
        for (int x = k * per; x < (k + 1) * per; ++x) mbs.back().push_back(x);
      }
    }
    d["microbatches"] = mbs;
    d["deferred"] = deferred;
    d["predicted_iteration_time_s"] = out.run.metrics.iteration_time_s;
    return d;
  }

 private:
  loom::Model model_;
  loom::Cluster cluster_;
  loom::Workload workload_;
  loom::Batch batch_;
  std::unique_ptr<loom::StrategyContext> context_;
  loom::StrategyResult result_;
  std::unique_ptr<loom::TrainingSession> session_;
};

}  // namespace

PYBIND11_MODULE(_loom, m) {
  m.doc() = "Loom's planner, simulator and per-batch schedulers (the native half of the `loom` package)";
  py::register_exception<loom::Error>(m, "LoomError", PyExc_ValueError);
  m.def("plan", &Plan, py::arg("model"), py::arg("cluster"), py::arg("workload") = std::nullopt,
        py::arg("global_batch") = std::nullopt, py::arg("strategies") = "all", py::arg("iterations") = 1,
        py::arg("profile") = "default");
  m.def("simulate", &Simulate, py::arg("model"), py::arg("cluster"), py::arg("tp") = 1, py::arg("pp") = 1,
        py::arg("dp") = 1, py::arg("cp") = 1, py::arg("vpp") = 1, py::arg("microbatches") = 1,
        py::arg("schedule") = "1f1b", py::arg("recompute") = "none", py::arg("workload") = std::nullopt,
        py::arg("global_batch") = std::nullopt, py::arg("profile") = "default");
  m.def("strategies", [] { return loom::StrategyNames(); });
  py::class_<Scheduler>(m, "Scheduler")
      .def(py::init<const std::string&, const std::string&, const std::string&, const std::vector<std::string>&,
                    const std::string&, const std::string&>(),
           py::arg("model"), py::arg("cluster"), py::arg("strategy"), py::arg("representative"),
           py::arg("precision") = "bf16", py::arg("profile") = "default")
      .def("plan_json", &Scheduler::plan_json)
      .def("schedule", &Scheduler::Schedule, py::arg("batch"), py::arg("iteration"));
}
