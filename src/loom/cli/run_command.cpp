// `loom run`: a plan run for real on this machine (libtorch + c10d Gloo, or
// NCCL on CUDA), one process per rank; optionally fault-tolerant as Oobleck
// is, on several machines, and beside the simulator's prediction.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/cli/command.h"
#include "loom/cli/output_file.h"
#include "loom/cli/problem_record.h"
#include "loom/cli/run_flags.h"
#include "loom/cli/run_output.h"
#include "loom/cli/training_log.h"
#include "loom/cost/cost_model.h"
#include "loom/cost/profile.h"
#include "loom/data/sample_source.h"
#include "loom/error.h"
#include "loom/pipeline/schedules.h"
#include "loom/plan/plan_json.h"
#include "loom/regular_file.h"
#include "loom/report/run_vs_simulation.h"
#include "loom/session/plan_file_replay.h"
#include "loom/session/run_prediction.h"
#include "loom/session/step_meter.h"
#include "loom/session/strategy_replanner.h"
#include "loom/sim/chrome_trace.h"
#ifdef LOOM_HAVE_RUNTIME
#include "loom/runtime/kernel_trace.h"
#include "loom/runtime/runnable_plan.h"
#endif
#include "loom/strategies/baselines/megatron_config.h"
#include "loom/strategies/oobleck/replan.h"
#include "loom/strategies/strategy.h"
#include "loom/weights/checkpoint_weights.h"
#include "loom/weights/run_checkpoint.h"

namespace loom::cli {

namespace {

// The plan a run starts with, the schedules `loom plan` recorded with it (a
// `loom plan --json` file), and what the summary calls it.
struct ChosenPlan {
  Plan plan;
  std::vector<RecordedBatch> recorded;
  std::string label;
};

class RunCommand : public Command {
 public:
  explicit RunCommand(CLI::App& app)
      : Command(app.add_subcommand(
            "run", "run a plan for real on this machine (libtorch + c10d Gloo), one process per rank")) {
    flags_.Add(subcommand());
  }

  void Run() override {
    const Model model = LoadModel(flags_.model);
    Cluster cluster = LoadCluster(flags_.cluster);
    const Workload workload = ResolveWorkload(model);
    ChosenPlan chosen = ChoosePlan(model, cluster, workload);
#ifdef LOOM_HAVE_RUNTIME
    const std::string sp_note = runtime::DropSequenceParallelism(chosen.plan);
    RunOptions options = flags_.BasicOptions(workload.precision);
    options.plan_label = chosen.label;
    // A Hugging Face model folder with weights: the run starts from them.
    if (std::filesystem::is_directory(flags_.model) && weights::CheckpointWeights::Present(flags_.model)) {
      options.weights_dir = flags_.model;
      // Its files' headers, read here: a broken weights entry, a missing shard
      // or a corrupt header is said once, before any worker starts, not by
      // every worker ("run failed: ... (every process)").
      (void)weights::CheckpointWeights(flags_.model);
    }
    flags_.AddFaultTolerance(options);
    // Fault tolerance: Oobleck's templates re-plan an Oobleck plan after
    // failures; any other plan is re-planned by its own strategy on the nodes
    // left (session/strategy_replanner.h), and the run restores its last checkpoint.
    std::optional<OobleckReplanner> oobleck;
    std::optional<StrategyReplanner> by_strategy;
    Replanner replanner;
    if (flags_.fault_tolerance >= 0 && chosen.plan.strategy == "oobleck") {
      oobleck.emplace(model, cluster, workload, chosen.plan, flags_.fault_tolerance);
      replanner = [&oobleck](const std::vector<int>& failed, const std::vector<int>& joined) {
        return (*oobleck)(failed, joined);
      };
    } else if (flags_.fault_tolerance >= 0) {
      by_strategy.emplace(model, cluster, workload, chosen.plan.strategy);
      replanner = [&by_strategy](const std::vector<int>& failed, const std::vector<int>& joined) {
        return (*by_strategy)(failed, joined);
      };
    }
    flags_.AddMachines(options);
    // Strategies that schedule every batch (PipeWeaver, MMScale) run each
    // step's batch as they scheduled it: the schedule `loom plan` recorded for
    // that iteration, else the strategy's own for it (computed here, once, so
    // every process runs the same one even where the search has a time budget).
    const Batch representative = DrawBatch(workload, 0);
    const auto schedules =
        ScheduleIterations(chosen.plan.strategy, StrategyContext{model, cluster, workload, representative, {}},
                           chosen.plan, chosen.recorded, flags_.steps);
    // Each step as it ends: the progress line (on a terminal), --metrics, --report.
    // With --checkpoint-dir the record lives beside the checkpoints too, and a
    // resume starts from the steps recorded before its checkpoint.
    std::vector<StepRecord> history;
    if (!options.resume_checkpoint.empty()) {
      history = ReadHistory(std::filesystem::path(options.resume_checkpoint).parent_path().string(),
                            weights::RunCheckpointReader(options.resume_checkpoint).manifest().steps_done);
    }
    TrainingLog log(StepMeter(model, cluster, workload, chosen.plan, schedules), flags_.steps,
                    options.device == Device::kCuda, flags_.metrics, flags_.report,
                    fmt::format("loom run: {} on {} ({})", flags_.model, flags_.cluster, chosen.label),
                    isatty(STDERR_FILENO) != 0, std::move(history),
                    options.checkpoint_root.empty() ? "" : options.checkpoint_root + "/metrics.jsonl");
    options.on_step = [&log](const StepProgress& p) { log.OnStep(p); };
    RunResult r;
    try {
      r = RunLocally(model, cluster, workload, chosen.plan, options, schedules, replanner);
    } catch (...) {  // what was trained before a failure (a divergence) is written too
      if (log.ran()) log.Finish();
      throw;
    }
    log.Finish();
    if (!sp_note.empty()) r.notes.insert(r.notes.begin(), sp_note);
    if (!r.events.empty()) {  // what ran last: the last generation's plan on its nodes
      chosen.plan = r.final_plan;
      runtime::DropSequenceParallelism(chosen.plan);
      cluster.nodes = r.final_nodes;
    }
    const int last = flags_.steps - 1;
    const Batch last_batch = DrawBatch(workload, last);
    PlanRun predicted;
    std::string cost_model;  // the prediction's
    if (flags_.wants_prediction()) {
      ApplyCostModel(cluster, flags_.profile);
      // The last step's plan, as compiled (with its batch's schedule).
      predicted = PredictRunStep(model, cluster, workload, chosen.plan, last_batch,
                                 schedules[last] ? &*schedules[last] : nullptr);
      cost_model = CostModelNameFor(CostModelOf(cluster), workload.precision);
    }
    const RunOutputContext context{chosen.label,  &chosen.plan,           options.device,
                                   flags_.resume, options.fault_tolerant, flags_.compare ? &predicted : nullptr,
                                   cost_model};
    // The losses first: a trace that cannot be written must not hide what was trained.
    std::cout << (flags_.json ? RunJson(r, context).dump(2) + "\n" : FormatRun(r, context)) << std::flush;
    WriteTraceAndTimeline(r, predicted, cost_model);
    // Only what the workers wrote (a run stopped early, or resumed at its last step, traces nothing).
    if (!flags_.kernel_trace.empty() && !flags_.json) {
      if (const int traces = runtime::KernelTracesIn(flags_.kernel_trace); traces > 0) {
        std::cout << fmt::format("kernel traces of step {}: {}/process-N.json, {} on this machine (Perfetto)\n", last,
                                 flags_.kernel_trace, traces);
      }
    }
#else
    (void)chosen;
    throw loom::Error(
        "loom run: this build has no runtime (a fuzz build); `make` builds one with "
        "the PyTorch that scripts/install-deps.sh installs");
#endif
  }

 private:
  // --data's samples (a JSONL file is its own workload, spec/workload.h), else --workload's, else the model's default.
  // With --plan, the flags not given are the plan's recorded problem's (the batch it was made for).
  Workload ResolveWorkload(const Model& model) const {
    WorkloadFlags w = flags_.workload;
    if (!flags_.plan.empty()) FillWorkloadFromRecord(w, flags_.plan, /*take_name=*/flags_.data.empty());
    if (!flags_.data.empty()) {
      if (!w.name.empty()) throw loom::Error("--data and --workload both name the samples: give one");
      if (std::filesystem::path(flags_.data).extension() != ".jsonl") {
        throw loom::Error(fmt::format("--data {}: expected a .jsonl file (one JSON sample a line)", flags_.data));
      }
      // Read twice (planning, then each worker's token ids): a regular file, not a pipe.
      if (const std::string what = NotARegularFile(flags_.data); !what.empty()) {
        throw loom::Error(
            fmt::format("--data {}: {}; expected a JSONL file of samples (one JSON sample a line: docs/runtime.md)",
                        flags_.data, what));
      }
      w.name = flags_.data;
    }
    return w.ResolveOrDefault(model);
  }

  // --plan's file, else Oobleck's plan for --fault-tolerance F, else the Megatron-LM layout of the flags.
  ChosenPlan ChoosePlan(const Model& model, const Cluster& cluster, const Workload& workload) const {
    if (!flags_.plan.empty()) {
      PlanFile file = LoadPlanFile(flags_.plan, flags_.strategy);
      CheckPlanIsFor(file.plan, model, cluster, workload, flags_.plan, HasRecordedSchedules(file));
      return {std::move(file.plan), std::move(file.batches), flags_.plan};
    }
    if (flags_.fault_tolerance >= 0) {
      const Batch first = DrawBatch(workload, 0);
      StrategyContext ctx{model, cluster, workload, first, {}};
      ctx.fault_tolerance = flags_.fault_tolerance;
      return {RunStrategy("oobleck", ctx).plan, {}, fmt::format("oobleck f={}", flags_.fault_tolerance)};
    }
    ParallelConfig cfg = flags_.layout;
    cfg.schedule = ParseScheduleKind(flags_.schedule, "--schedule");
    cfg.recompute = ParseRecompute(flags_.recompute, "--recompute");
    cfg.Validate(model, cluster, workload);
    const Batch first = DrawBatch(workload, 0);
    return {MegatronConfigPlan(StrategyContext{model, cluster, workload, first, {}}, cfg),
            {},
            fmt::format("tp {} pp {} dp {} cp {} vpp {} {}", cfg.tp, cfg.pp, cfg.dp, cfg.cp, cfg.vpp, flags_.schedule)};
  }

#ifdef LOOM_HAVE_RUNTIME
  // --trace (the last step as it ran) and --timeline (as predicted above as it ran).
  void WriteTraceAndTimeline(const RunResult& r, const PlanRun& predicted, const std::string& cost_model) const {
    if (!flags_.trace.empty()) {
      WriteChromeTrace(flags_.trace,
                       ChromeTrace(r.measured, predicted.exec.schedule, MeasuredRankNames(predicted, r.measured)));
    }
    if (!flags_.timeline.empty()) {
      WriteText(flags_.timeline, RunTimelineSvg(predicted, r.measured, flags_.steps, cost_model), "--timeline");
    }
  }
#endif

  RunFlags flags_;
};

}  // namespace

std::unique_ptr<Command> AddRunCommand(CLI::App& app) { return std::make_unique<RunCommand>(app); }

}  // namespace loom::cli
