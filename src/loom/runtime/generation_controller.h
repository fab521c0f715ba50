// The launcher's side of a fault-tolerant run (fault_tolerant_run.h): the
// worker processes across generations and the process serving their store;
// steps committed in lockstep; a failed node detected, re-planned around and
// its survivors commanded into the next generation (or, when nothing can
// recover, a checkpoint of what they hold); nodes that rejoin; periodic
// checkpoints, in the training checkpoints' format (weights/run_checkpoint.h). Torch-free: workers are forked before
// any torch call.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "loom/plan/plan.h"
#include "loom/plan/replanner.h"
#include "loom/runtime/fault_tolerance.h"
#include "loom/runtime/launcher_signals.h"
#include "loom/runtime/process_layout.h"
#include "loom/runtime/run.h"
#include "loom/runtime/worker_message.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"
#include "loom/weights/run_checkpoint.h"

namespace loom::runtime {

// One worker process, as launched; it keeps its node and GPU for life.
struct FtWorker {
  int birth = 0;
  int node = 0, local = 0;  // original node id, GPU index on it
  pid_t pid = -1;
  int report_fd = -1, control_fd = -1;
  std::string buffer;
  std::vector<std::string> lines;  // what it reported for the result (mem, iv, param, note)
  bool reaped = false;
  int status = 0;
  bool member = false;     // in the current generation
  bool dismissed = false;  // told to exit: its node is in no pipeline
  int rank = 0;            // its process index there
  int done = -1;           // the last step it finished there
  bool ready = false;
  double last_heard = 0;
  double dying_at = -1;  // its fault injection's report, if any
  std::string error;
  std::vector<double> step_s;
  bool Open() const { return report_fd >= 0; }
};

// Not thread-safe; one per run. Its destructor stops every worker and the
// store process and removes a periodic checkpoint left unfinished.
class GenerationController {
 public:
  // Starts the store process (throws loom::Error when it cannot serve).
  // `plan` is generation 0's, checked by the caller, with its per-step
  // `schedules` (a strategy's per-batch schedules; later generations run their
  // plan's own compile); the run starts at `first_step`.
  GenerationController(const Model& model, const Cluster& cluster, const Workload& workload, const Plan& plan,
                       const std::vector<std::optional<IterationSchedule>>& schedules, const RunOptions& options,
                       const Replanner& replanner, int first_step);
  ~GenerationController();
  GenerationController(const GenerationController&) = delete;
  GenerationController& operator=(const GenerationController&) = delete;

  // Runs every step; throws loom::Error when the run fails or stops with a checkpoint.
  RunResult Run();

 private:
  ProcessLayout LayoutOf(const Plan& plan, const Cluster& cluster, int step) const;
  void StartStore();
  // `restores`: the worker starts from worker_options_.resume_checkpoint (or
  // the initial state), not from what the survivors hand over.
  void Spawn(int node, int local, int rank, int world, int step, bool restores);
  // Whether the survivors can hand their state over whole from `from` to
  // `to` (Oobleck's copy): both plans keep whole layers with their AdamW
  // state in every process, no fp16 loss scale is to carry, and the
  // survivors of generation `from` hold every trainable layer.
  bool SurvivorsCanCopy(const Plan& to) const;
  // A recovery that restores the last checkpoint (or the start): the steps
  // after it are run again, their losses and metrics reported once.
  void RollBack(int step);
  void Send(FtWorker& w, const ControlCommand& c);
  bool Reap(FtWorker& w, bool block);
  void StopEverything();
  // Throws loom::Error naming the store process when it has ended: the
  // workers' failures that follow are its consequence, not node failures.
  void CheckStore();
  // After SIGINT, SIGTERM or SIGHUP: the workers get it too, then Interrupted.
  [[noreturn]] void PassOnSignal(int signal);
  // Reads what every open worker reported; returns the time it read at.
  double ReadWorkers();
  void Handle(FtWorker& w, const std::string& line);
  // Members that died (their pipe closed) or went silent.
  std::vector<FtWorker*> FailedMembers(double now);
  bool AllMembersExited() const;
  // Failures close together as one event: re-planned around, or the run stops.
  void RecoverFrom(std::vector<FtWorker*> failed, double now);
  [[noreturn]] void StopWithCheckpoint(const Replanned& r, const std::string& why);
  // A new generation: the plan for `r.nodes`, survivors commanded, new nodes launched.
  void Reconfigure(const Replanned& r, const std::string& kind, const std::vector<int>& nodes, double detect_s,
                   double detected_at);
  // The step commits once every member finished it; then nodes rejoin, or
  // the next step starts (with a periodic checkpoint when one is due).
  void Advance(double now);
  // The nodes in joining_ come back: their re-plan's generation.
  void Join(double now);
  // What an exited worker said last (it may have finished a periodic checkpoint).
  void Drain(FtWorker& w);
  void CompleteCheckpoint();
  // After failures: completes a save in progress with the survivors' parts, or drops it.
  void FinishSaveOrDrop();
  // A manifest of the state after `steps_done` steps, saved by this generation.
  weights::RunCheckpointManifest Manifest(int steps_done, const std::string& outcome) const;
  void DropUnfinishedSave();
  RunResult Result();

  // Constant for the run.
  const Model& model_;
  const Cluster& cluster_;
  const Workload& workload_;
  const RunOptions& options_;
  const Replanner& replanner_;
  const std::vector<std::optional<IterationSchedule>>& schedules_;
  const int first_step_;
  const int gpn_;  // GPUs per node
  int port_ = 0;
  std::string run_dir_;
  std::string checkpoint_root_;  // where "cannot recover" writes, and the periodic ones (step-N under it)
  struct sigaction previous_sigpipe_ {};
  LauncherSignals signals_;  // SIGINT, SIGTERM, SIGHUP: passed on to the workers
  int store_pipe_ = -1;  // the store process serves while this is open
  pid_t store_pid_ = -1;
  // The current generation.
  int generation_ = 0;
  Plan plan_g_;
  Cluster cluster_g_;
  ProcessLayout layout_;
  RunOptions worker_options_;
  std::vector<FtWorker> workers_;  // every worker ever launched, by birth
  // Progress.
  int committed_ = 0;  // steps every worker finished
  bool finishing_ = false;
  double step_started_ = 0;
  int pending_event_ = -1;  // the event whose recovery is not complete yet
  double event_began_ = 0;
  std::set<int> down_;        // original nodes that failed and did not come back
  // Nodes due back, re-planned with, waiting for the save of the step they join at.
  struct Joining {
    Replanned replanned;
    std::vector<int> nodes;
  };
  std::optional<Joining> joining_;
  std::vector<double> loss_;
  std::vector<int> loss_reports_;
  int reported_step_ = -1;  // the last step whose metrics went to options_.on_step
  RunResult out_;
  // Periodic checkpoints (weights/run_checkpoint.h).
  int saving_step_ = -1;               // one being written
  std::string saving_staging_;         // where its workers write it
  std::map<int, int> saving_members_;  // workers that write it: birth -> rank (their part's number)
  std::set<int> saved_by_;             // births of those done
  std::optional<report::Saved> saving_loss_scale_;  // fp16: the loss scale a worker saved with
  std::string last_checkpoint_;                     // the newest complete checkpoint this run saved
  int last_checkpoint_step_ = -1;
};

}  // namespace loom::runtime
