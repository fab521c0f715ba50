// `loom simulate`: one iteration of the Megatron-LM layout the flags give (or
// of a PyTorch pipelining CSV's order), or, with --plan, a plan file replayed
// on every batch it records.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

#include "loom/cli/command.h"
#include "loom/cli/common_flags.h"
#include "loom/cli/flag_checks.h"
#include "loom/cli/output_file.h"
#include "loom/cli/problem_record.h"
#include "loom/error.h"
#include "loom/export/pytorch_schedule.h"
#include "loom/export/torchtitan_config.h"
#include "loom/pipeline/schedules.h"
#include "loom/plan/plan_json.h"
#include "loom/report/plan_replay_report.h"
#include "loom/report/rank_names.h"
#include "loom/report/simulation_report.h"
#include "loom/session/plan_file_replay.h"
#include "loom/sim/chrome_trace.h"
#include "loom/spec/yaml_reader.h"
#include "loom/strategies/baselines/megatron_config.h"

namespace loom::cli {

namespace {

class SimulateCommand : public Command {
 public:
  explicit SimulateCommand(CLI::App& app)
      : Command(app.add_subcommand("simulate", "simulate one iteration of the Megatron-LM layout")) {
    CLI::App* sub = subcommand();
    problem_.Add(sub, /*required=*/false);
    sub->add_option("--tp", cfg_.tp, "tensor parallel degree");
    sub->add_option("--pp", cfg_.pp, "pipeline parallel degree");
    dp_ = sub->add_option("--dp", cfg_.dp, "data parallel degree");
    sub->add_option("--cp", cfg_.cp, "context parallel degree");
    sub->add_option("--vpp", cfg_.vpp, "virtual pipeline chunks per rank (interleaved)");
    sub->add_option("--microbatches", cfg_.microbatches, "microbatches per replica per iteration");
    sub->add_option("--schedule", schedule_, "gpipe | 1f1b | interleaved | zb-h1");
    sub->add_option("--recompute", recompute_, "none | selective | full")
        ->check(CLI::IsMember({"none", "selective", "full"}));
    sub->add_option("--trace", trace_, "write a Chrome trace (Perfetto) of the iteration")->check(kOutputFile);
    sub->add_flag("--json", json_, "print JSON");
    sub->add_option("--export-pytorch-csv", export_csv_,
                    "write the simulated schedule as PyTorch pipelining's CSV (torchtitan's "
                    "pipeline_parallel_schedule_csv), or say why PyTorch cannot run it")
        ->check(kOutputFile);
    sub->add_flag("--pytorch-csv-comms", csv_comms_,
                  "with --export-pytorch-csv: the compute_comms form (SEND_F / RECV_F / SEND_B / RECV_B cells)");
    sub->add_option("--export-torchtitan", export_titan_,
                    "with --export-pytorch-csv: write torchtitan's Python configuration of the plan (a module whose "
                    "loom_plan() returns the Trainer.Config: degrees, the CSV, the stages' modules), or say why "
                    "torchtitan cannot run it")
        ->check(kOutputFile);
    sub->add_option("--torchtitan-base", titan_base_,
                    "with --export-torchtitan: MODULE:FUNCTION of the recipe to derive from (default "
                    "torchtitan.models.llama3.config_registry:llama3_8b)");
    sub->add_option("--import-pytorch-csv", import_csv_,
                    "simulate a PyTorch pipelining CSV's order: PP, stages per rank and microbatches from the file, "
                    "TP / DP / CP / --recompute from the flags")
        ->check(kFileName);
    CLI::Option* plan = sub->add_option(
        "--plan", plan_,
        "simulate a plan JSON file instead of flags; a `loom plan --json` output replays every batch "
        "it was measured on, with its per-batch schedules, on the model, cluster and workload it records "
        "unless flags say otherwise");
    // The layout flags describe a plan: beside --plan they would be ignored.
    for (const char* name : {"--tp", "--pp", "--dp", "--cp", "--vpp", "--microbatches", "--schedule", "--recompute"}) {
      sub->get_option(name)->excludes(plan);
    }
    sub->add_option("--strategy", strategy_, "with --plan: the strategy whose plan to take (default: the best)");
  }

  void Run() override {
    if (!export_titan_.empty() && export_csv_.empty()) {
      throw loom::Error("--export-torchtitan needs --export-pytorch-csv FILE: the configuration names that schedule");
    }
    // Flags that act only beside another would be ignored silently.
    CLI::App* sub = subcommand();
    if (sub->count("--pytorch-csv-comms") > 0 && export_csv_.empty()) {
      throw loom::Error("--pytorch-csv-comms shapes --export-pytorch-csv's file: add --export-pytorch-csv FILE");
    }
    if (sub->count("--torchtitan-base") > 0 && export_titan_.empty()) {
      throw loom::Error("--torchtitan-base names --export-torchtitan's base: add --export-torchtitan FILE");
    }
    if (sub->count("--strategy") > 0 && plan_.empty()) {
      throw loom::Error("--strategy picks a strategy's plan out of --plan FILE: add --plan, or leave --strategy out");
    }
    if (!import_csv_.empty() && !plan_.empty()) {
      throw loom::Error(
          fmt::format("--import-pytorch-csv {} gives the schedule, --plan {} another: give one", import_csv_, plan_));
    }
    if (!plan_.empty()) {
      const ProblemFlags given = problem_;
      FillFromRecord(problem_, plan_);
      from_record_ = problem_.model != given.model || problem_.cluster != given.cluster ||
                     problem_.workload.name != given.workload.name;
      RunPlanFile();
    } else {
      if (problem_.model.empty()) throw loom::Error("--model is required (or --plan FILE of `loom plan --json`)");
      if (problem_.cluster.empty()) throw loom::Error("--cluster is required (or --plan FILE of `loom plan --json`)");
      RunLayout();
    }
  }

 private:
  // --plan: every recorded batch, the first one traced and exported.
  void RunPlanFile() {
    Model model;
    Cluster cluster;
    Workload workload;
    try {
      model = LoadModel(problem_.model);
      cluster = problem_.LoadPricedCluster();
      workload = problem_.workload.ResolveOrDefault(model);
    } catch (const loom::Error& e) {  // what the file recorded is said to be the file's
      if (!from_record_) throw;
      throw loom::Error(fmt::format(
          "--plan {}: its recorded problem (model {}, cluster {}, workload {}): {}", plan_, problem_.model,
          problem_.cluster, problem_.workload.name.empty() ? "the model's default" : problem_.workload.name, e.what()));
    }
    const PlanFileReplay replay = ReplayPlanFile(model, cluster, workload, plan_, strategy_);
    WriteTrace(replay.first);
    const std::string exported = export_csv_.empty() ? "" : ExportPytorchCsv(replay.first, model, workload);
    std::cout << (json_ ? PlanFileReplayJson(replay).dump(2) + "\n" : FormatPlanFileReplay(replay, plan_) + exported);
  }

  // The flags' layout, or --import-pytorch-csv's order with the flags' TP / DP / CP.
  void RunLayout() {
    cfg_.schedule = ParseScheduleKind(schedule_, "--schedule");
    cfg_.recompute = ParseRecompute(recompute_, "--recompute");
    const Model model = LoadModel(problem_.model);
    const Workload workload = problem_.workload.ResolveOrDefault(model);
    const Cluster cluster = problem_.LoadPricedCluster();
    std::optional<ImportedPytorchSchedule> imported;
    if (!import_csv_.empty()) {  // PP, stages per rank and microbatches are the file's
      imported = ImportPytorchSchedule(ParsePytorchCsv(ReadTextFile(import_csv_, "PyTorch schedule CSV"), import_csv_), import_csv_);
      cfg_.pp = imported->pp;
      cfg_.vpp = imported->num_stages / imported->pp;
      cfg_.microbatches = imported->num_microbatches;
    }
    // --dp left out: what TP x PP x CP leave of the cluster (issue 22).
    if (dp_->count() == 0 && cfg_.tp > 0 && cfg_.pp > 0 && cfg_.cp > 0 &&
        cluster.num_gpus() % (cfg_.tp * cfg_.pp * cfg_.cp) == 0) {
      cfg_.dp = cluster.num_gpus() / (cfg_.tp * cfg_.pp * cfg_.cp);
    }
    const PlanRun run = imported ? SimulatePytorchSchedule(model, cluster, workload, cfg_, *imported, import_csv_)
                                 : SimulateConfig(model, cluster, workload, cfg_);
    WriteTrace(run);
    const std::string exported = export_csv_.empty() ? "" : ExportPytorchCsv(run, model, workload);
    if (json_) {
      std::cout << PlanMetricsJson(run.metrics).dump(2) << "\n";
    } else {
      std::cout << FormatPlanRun(run, model, workload,
                                 fmt::format("tp {} pp {} dp {} cp {} vpp {}, {} microbatches{}", cfg_.tp, cfg_.pp,
                                             cfg_.dp, cfg_.cp, cfg_.vpp, cfg_.microbatches,
                                             imported ? ", the order of " + import_csv_ : ""))
                << exported;
    }
  }

  void WriteTrace(const PlanRun& run) const {
    if (!trace_.empty()) WriteChromeTrace(trace_, ChromeTrace(run.result, run.exec.schedule, SimulatedRankNames(run)));
  }

  // --export-pytorch-csv: the schedule of the simulated batch, or why PyTorch
  // cannot run it (an error: the file asked for is not written). Returns the line saying so.
  std::string ExportPytorchCsv(const PlanRun& run, const Model& model, const Workload& workload) const {
    const PytorchExport e = ExportPytorchSchedule(run.exec, csv_comms_);
    if (!e.expressible) {
      throw loom::Error(fmt::format("--export-pytorch-csv {}: PyTorch cannot run this plan: {}", export_csv_, e.notes));
    }
    std::string titan;
    if (!export_titan_.empty()) titan = ExportTorchtitanConfig(run, e, model, workload);
    WriteText(export_csv_, FormatPytorchCsv(e.order), "--export-pytorch-csv");
    return fmt::format("PyTorch schedule ({}) written to {}: {}\n", csv_comms_ ? "compute_comms" : "compute_only",
                       export_csv_, e.notes) +
           titan;
  }

  // --export-torchtitan: the configuration naming the CSV, or why torchtitan cannot run the plan.
  std::string ExportTorchtitanConfig(const PlanRun& run, const PytorchExport& e, const Model& model,
                                     const Workload& workload) const {
    if (csv_comms_) {
      throw loom::Error("--export-torchtitan: torchtitan loads a compute_only CSV; leave out --pytorch-csv-comms");
    }
    // Written into Python source: MODULE must be dotted identifiers and
    // FUNCTION one identifier, so no other text reaches the file.
    auto identifier = [](const std::string& s) {
      if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
      return std::all_of(s.begin(), s.end(),
                         [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; });
    };
    auto dotted = [&](const std::string& s) {
      for (size_t start = 0;;) {
        const size_t dot = s.find('.', start);
        if (!identifier(s.substr(start, dot == std::string::npos ? std::string::npos : dot - start))) return false;
        if (dot == std::string::npos) return true;
        start = dot + 1;
      }
    };
    const size_t colon = titan_base_.find(':');
    if (colon == std::string::npos || !dotted(titan_base_.substr(0, colon)) ||
        !identifier(titan_base_.substr(colon + 1))) {
      throw loom::Error(
          fmt::format("--torchtitan-base '{}': expected MODULE:FUNCTION, a dotted Python module and a function "
                      "name (e.g. "
                      "torchtitan.models.llama3.config_registry:llama3_8b)",
                      titan_base_));
    }
    if (workload.source.seq_len <= 0) {
      throw loom::Error(
          fmt::format("--export-torchtitan: workload {} states no sequence length; torchtitan batches "
                      "by tokens: use a text workload with --seq-len",
                      workload.name));
    }
    TorchtitanOptions options;
    options.base = titan_base_;
    options.csv_path = std::filesystem::absolute(export_csv_).string();
    const int64_t dp = run.exec.stages[0].dp;
    options.tokens_per_microbatch = workload.global_batch / (dp * e.num_microbatches) * workload.source.seq_len;
    options.max_context_tokens = workload.source.seq_len;
    const TorchtitanExport t = ExportTorchtitan(run.exec, e, model, options);
    if (!t.expressible) {
      throw loom::Error(
          fmt::format("--export-torchtitan {}: torchtitan cannot run this plan: {}", export_titan_, t.notes));
    }
    WriteText(export_titan_, t.python, "--export-torchtitan");
    return fmt::format("torchtitan configuration written to {} (MODULE=<it> CONFIG=loom_plan){}\n", export_titan_,
                       t.notes.empty() ? "" : ". " + t.notes);
  }

  ProblemFlags problem_;
  ParallelConfig cfg_;
  CLI::Option* dp_ = nullptr;  // whether --dp was given
  std::string schedule_ = "1f1b";
  std::string recompute_ = "none";
  std::string trace_;
  std::string export_titan_;
  std::string titan_base_ = "torchtitan.models.llama3.config_registry:llama3_8b";
  bool json_ = false;
  std::string export_csv_;
  bool csv_comms_ = false;
  std::string import_csv_;
  std::string plan_;
  bool from_record_ = false;  // --plan's recorded problem gave the model, cluster or workload
  std::string strategy_;
};

}  // namespace

std::unique_ptr<Command> AddSimulateCommand(CLI::App& app) { return std::make_unique<SimulateCommand>(app); }

}  // namespace loom::cli
