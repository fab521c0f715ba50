// `loom plan`: every strategy's plan, simulated on the same sampled batches
// and compared (the main job); optionally run on this machine, written as
// JSON, HTML or a trace, or exported as launch arguments.
#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "loom/cli/command.h"
#include "loom/cli/common_flags.h"
#include "loom/cli/flag_checks.h"
#include "loom/cli/output_file.h"
#include "loom/cli/problem_record.h"
#include "loom/cli/run_every_plan.h"
#include "loom/cost/cost_model.h"
#include "loom/cost/token_stats.h"
#include "loom/data/sample_source.h"
#include "loom/error.h"
#include "loom/export/engine_choices.h"
#include "loom/export/megatron_args.h"
#include "loom/report/comparison.h"
#include "loom/report/html_report.h"
#include "loom/report/progress_line.h"
#include "loom/report/rank_names.h"
#include "loom/session/compare_strategies.h"
#include "loom/session/strategy_list.h"
#include "loom/sim/chrome_trace.h"
#include "loom/strategies/strategy.h"

namespace loom::cli {

namespace {

// The searches' progress on one terminal row of standard error, one part per
// job slot; empty (no progress shown) when standard error is not a terminal.
// The comparison serializes the calls; copies of the function share the row.
std::function<void(const Progress&)> TerminalProgress() {
  if (!isatty(STDERR_FILENO)) return {};
  auto slots = std::make_shared<std::vector<std::string>>();  // one line per job slot
  return [slots](const Progress& p) {
    if (p.slot >= static_cast<int>(slots->size())) slots->resize(p.slot + 1);
    (*slots)[p.slot] = p.what.empty() ? "" : FormatProgress(p);
    std::string line;
    for (const auto& l : *slots) {
      if (l.empty()) continue;
      if (!line.empty()) line += " | ";
      line += l;
    }
    // One terminal row, so "\r\033[K" erases all of it next time.
    winsize ws{};
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 && line.size() >= ws.ws_col) {
      line.resize(ws.ws_col - 1);
    }
    std::cerr << "\r\033[K" << line << std::flush;
  };
}

// SM quotas priced by the shipped law describe Python eager launches; Loom's
// runtime is priced by its own (docs/results/mosaic.md, section 2). Says so
// when the best plan has quotas priced by a default profile's law.
std::string SmQuotaNote(const Comparison& cmp, const Cluster& cluster, const std::string& profile) {
  if (cmp.best < 0 || profile != "default" || !cluster.cost_model ||
      !(cluster.cost_model->sm_sharing().launch_floor_s_per_layer > 0)) {
    return "";
  }
  bool quotas = false;
  for (const auto& u : cmp.outcomes[cmp.best].result.plan.units) quotas = quotas || u.sm_fraction < 1;
  if (!quotas) return "";
  return "note: the best plan's SM quotas are priced by the SM-sharing law of " + cluster.cost_model->name() +
         ", fitted to Python eager runs; for Loom's runtime, plan with its own profile "
         "(loom profile --device cuda; docs/results/mosaic.md)\n";
}

class PlanCommand : public Command {
 public:
  explicit PlanCommand(CLI::App& app)
      : Command(app.add_subcommand("plan", "plan with each strategy, simulate, compare (the main job)")) {
    CLI::App* sub = subcommand();
    problem_.Add(sub);
    sub->add_option("--strategy", strategies_, "NAME[,NAME...] or all (default all)");
    sub->add_option("--iterations", iterations_, "sampled batches to simulate per strategy (default 10)")
        ->check(kPositiveInt);
    sub->add_option("--tp", compare_.fixed_tp, "pin tensor parallelism of pipeline strategies (paper configs)")
        ->check(kPositiveInt);
    sub->add_option("--pp", compare_.fixed_pp, "pin pipeline parallelism of pipeline strategies (paper configs)")
        ->check(kPositiveInt);
    sub->add_option("--dp", compare_.fixed_dp,
                    "pin data parallelism of pipeline strategies and entrain (Entrain's DP 4; paper configs)")
        ->check(kPositiveInt);
    sub->add_option("--sub-microbatch", compare_.fixed_encoder_sub_microbatch,
                    "pipeweaver: pin the encoders' sub-microbatch size to N images (default: the cost model's, the "
                    "smallest at 95% of the best throughput)")
        ->check(kPositiveInt);
    sub->add_option("--schedule-rollouts", compare_.schedule_rollouts,
                    "rollouts per batch of per-batch schedule searches (pipeweaver's MCTS; default 3000; 0: its "
                    "default ranking)")
        ->check(CLI::Range(0, 100000000));
    sub->add_option("--schedule-budget", compare_.schedule_budget_s,
                    "also stop each per-batch schedule search after S seconds of wall clock (default: no cap; "
                    "with one, the plan depends on the machine's speed)")
        ->check(kPositive);
    sub->add_option("--fault-tolerance", compare_.fault_tolerance,
                    "oobleck: pipelines that may fail at once without a restart, f (default 0; f + 1 pipelines)")
        ->check(CLI::Range(0, 1000));
    sub->add_option("--time-budget", compare_.time_budget_s,
                    "seconds each strategy's search may take; when spent it returns the best plan found so far "
                    "(default: no limit)")
        ->check(kPositive);
    compare_.jobs = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    sub->add_option("--jobs", compare_.jobs,
                    "strategies planned at once, each on its own thread (default: this machine's cores; the same "
                    "plans and numbers for any value)")
        ->check(kPositiveInt);
    sub->add_flag("--exhaustive", exhaustive_,
                  "simulate every candidate, even those whose lower bound cannot beat the best plan found "
                  "(slower; the same best plans; docs/search.md)");
    sub->add_flag("--wide", wide_,
                  "print whole configurations, the worst iteration and the planning time (the default table fits "
                  "160 columns)");
    sub->add_option("--json", json_, "write the comparison and every plan as JSON")->check(kOutputFile);
    sub->add_option("--report", report_, "write a self-contained HTML report")->check(kOutputFile);
    sub->add_option("--trace", trace_, "write a Chrome trace (Perfetto) of the best plan's first iteration")
        ->check(kOutputFile);
    sub->add_option("--export", export_, "print launch arguments for a framework: megatron")
        ->check(CLI::IsMember({"megatron"}));
    sub->add_flag("--run", run_,
                  "then run every strategy's plan on this machine (as `loom run`) and print measured beside "
                  "simulated iteration times and speedups over megatron");
    sub->add_option("--run-steps", run_steps_, "with --run: steps per plan (default 4; the first is warm-up)")
        ->check(CLI::Range(2, 1000));
  }

  void Run() override {
    const Model model = LoadModel(problem_.model);
    const Cluster cluster = problem_.LoadPricedCluster();
    const Workload workload = problem_.workload.ResolveOrDefault(model);
    const std::vector<std::string> names = ParseStrategyList(strategies_);
    RefuseUnusedFlags(names);
    if (subcommand()->count("--sub-microbatch") > 0) CheckSubMicrobatch(model, workload);
    compare_.prune = !exhaustive_;
    // Only the outputs that list every batch keep them: otherwise memory
    // does not grow with --iterations.
    compare_.keep_batches = !json_.empty() || !report_.empty() || run_;
    const std::function<void(const Progress&)> progress = TerminalProgress();
    // --run compares each run step with the simulation of the same batch.
    if (run_) iterations_ = std::max(iterations_, run_steps_);
    const Comparison cmp = CompareStrategies(model, cluster, workload, names, iterations_, progress, compare_);
    if (progress) std::cerr << "\r\033[K";
    std::cout << FormatComparison(cmp, wide_) << SmQuotaNote(cmp, cluster, problem_.profile);
    const MegatronTarget target = TargetOf(workload, cluster);
    const std::vector<MegatronExport> megatron = MegatronExports(cmp, model, target);
    const std::vector<EngineChoice> engines = BestPlanPerEngine(cmp, model, megatron);
    std::cout << "\n" << FormatEngineChoices(cmp, engines);
    nlohmann::json plans_json = json_.empty() ? nlohmann::json() : ComparisonJson(cmp);
    if (!json_.empty()) {
      plans_json["engines"] = EngineChoicesJson(cmp, engines);
      if (export_ == "megatron") {  // each strategy's launch bundle beside its plan
        for (auto& s : plans_json["strategies"]) {
          for (size_t i = 0; i < cmp.outcomes.size(); ++i) {
            if (cmp.outcomes[i].ok() && cmp.outcomes[i].name == s["name"].get<std::string>())
              s["megatron"] = MegatronExportJson(megatron[i]);
          }
        }
      }
    }
    if (!json_.empty()) plans_json["problem"] = ProblemRecord(problem_);  // `loom simulate --plan` alone replays it
    if (run_) {
#ifdef LOOM_HAVE_RUNTIME
      std::cout << "\n" << RunEveryPlan(model, cluster, workload, cmp, run_steps_, plans_json);
#else
      throw loom::Error(
          "loom plan --run: this build has no runtime (a fuzz build); "
          "build with `make`, which finds the PyTorch scripts/install-deps.sh installs)");
#endif
    }
    WriteOutputs(cmp, plans_json, megatron, cluster.gpus_per_node);
    bool any = false, applies = false;
    for (const auto& o : cmp.outcomes) {
      any = any || o.ok();
      applies = applies || !o.not_applicable;
    }
    if (!any && !applies) throw loom::Error("no strategy named applies here; see the reasons above");
    if (!any) throw loom::Error("no strategy found a plan that fits; see the reasons above");
  }

 private:
  // --json, --report, --trace and --export, in that order.
  // What a Megatron-LM launch needs of the problem: the sequence, precision and GPUs.
  static MegatronTarget TargetOf(const Workload& workload, const Cluster& cluster) {
    MegatronTarget t;
    // --seq-length: a text sample's tokens, or the LLM's packed sequence (LAION, OBELICS).
    const std::string& kind = workload.source.kind;
    t.seq_len = kind == "laion" || kind == "obelics" ? workload.source.pack_tokens : workload.source.seq_len;
    t.precision = std::string(PrecisionName(workload.precision));
    t.gpus_per_node = cluster.gpus_per_node;
    t.blackwell = cluster.gpu.name == "b200" || cluster.gpu.name == "gb200";  // compute capability 10
    return t;
  }

  void WriteOutputs(const Comparison& cmp, const nlohmann::json& plans_json,
                    const std::vector<MegatronExport>& megatron, int gpus_per_node) const {
    if (!json_.empty()) {
      WriteText(json_, plans_json.dump(2) + "\n", "--json");
      std::cout << "Plans written to " << json_ << "\n";
    }
    if (!report_.empty()) {
      WriteHtmlReport(report_, cmp);
      std::cout << "Report written to " << report_ << "\n";
    }
    if (!trace_.empty() && cmp.best >= 0) {
      const auto& run = cmp.outcomes[cmp.best].first_run;
      WriteChromeTrace(trace_, ChromeTrace(run.result, run.exec.schedule, SimulatedRankNames(run)));
      std::cout << "Trace of " << cmp.outcomes[cmp.best].name << " written to " << trace_ << "\n";
    }
    if (export_ == "megatron") {
      std::cout << "\n";
      for (size_t i = 0; i < cmp.outcomes.size(); ++i) {
        if (cmp.outcomes[i].ok())
          std::cout << FormatMegatronExport(cmp.outcomes[i].name, megatron[i], gpus_per_node) << "\n";
      }
    }
  }

  ProblemFlags problem_;
  std::string strategies_ = "all";
  // A flag that no named strategy reads would be ignored silently (D49).
  void RefuseUnusedFlags(const std::vector<std::string>& names) const {
    CLI::App* sub = subcommand();
    if (sub->count("--run-steps") > 0 && !run_) {
      throw loom::Error("--run-steps: steps of --run's runs; add --run, or leave --run-steps out");
    }
    auto named = [&](const std::string& prefix) {
      return std::any_of(names.begin(), names.end(), [&](const std::string& n) { return n.rfind(prefix, 0) == 0; });
    };
    for (const char* flag : {"--sub-microbatch", "--schedule-rollouts", "--schedule-budget"}) {
      if (sub->count(flag) > 0 && !named("pipeweaver")) {
        throw loom::Error(fmt::format("{}: only pipeweaver's strategies read it, and --strategy names none; add "
                                      "pipeweaver, or leave {} out",
                                      flag, flag));
      }
    }
    if (sub->count("--fault-tolerance") > 0 && !named("oobleck")) {
      throw loom::Error(
          "--fault-tolerance: only oobleck reads it, and --strategy names it not; add oobleck, or leave "
          "--fault-tolerance out");
    }
  }

  // --sub-microbatch N past every encoder sequence of a whole batch would be
  // the microbatch itself, clamped in silence (D59): its range is the first
  // batch's most encoder sequences (images, clips).
  void CheckSubMicrobatch(const Model& model, const Workload& workload) const {
    const std::vector<TokenStats> tokens = CountModuleTokens(model, DrawBatch(workload, 0).samples);
    double most = 0;
    for (size_t i = 0; i < model.modules.size(); ++i) {
      if (model.modules[i].role == ModuleRole::kEncoder) most = std::max(most, tokens[i].sequences);
    }
    const int64_t n = compare_.fixed_encoder_sub_microbatch;
    if (most < 1) {
      throw loom::Error(
          fmt::format("--sub-microbatch {}: model {} runs no encoder sequences on this workload", n, model.name));
    }
    if (static_cast<double>(n) > most) {
      throw loom::Error(
          fmt::format("--sub-microbatch {}: a whole batch holds at most {} sequences of one encoder; valid: 1..{}", n,
                      static_cast<int64_t>(most), static_cast<int64_t>(most)));
    }
  }

  int iterations_ = 10;
  CompareOptions compare_;
  bool exhaustive_ = false;
  bool wide_ = false;
  std::string json_;
  std::string report_;
  std::string trace_;
  std::string export_;
  bool run_ = false;
  int run_steps_ = 4;
};

}  // namespace

std::unique_ptr<Command> AddPlanCommand(CLI::App& app) { return std::make_unique<PlanCommand>(app); }

}  // namespace loom::cli
