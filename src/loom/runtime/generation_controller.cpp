#include "loom/runtime/generation_controller.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "loom/data/sample_source.h"
#include "loom/error.h"
#include "loom/plan/plan_json.h"
#include "loom/runtime/c10d_calls.h"
#include "loom/runtime/child_process.h"
#include "loom/runtime/fault_tolerant_run.h"
#include "loom/runtime/run_reports.h"
#include "loom/runtime/runnable_plan.h"
#include "loom/runtime/worker.h"
#include "loom/runtime/worker_message.h"
#include "loom/spec/model_identity.h"
#include "loom/weights/run_checkpoint.h"
#include "loom/weights/safetensors.h"

namespace loom::runtime {

namespace {

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

GenerationController::GenerationController(const Model& model, const Cluster& cluster, const Workload& workload,
                                           const Plan& plan,
                                           const std::vector<std::optional<IterationSchedule>>& schedules,
                                           const RunOptions& options, const Replanner& replanner, int first_step)
    : model_(model),
      cluster_(cluster),
      workload_(workload),
      options_(options),
      replanner_(replanner),
      schedules_(schedules),
      first_step_(first_step),
      gpn_(cluster.gpus_per_node),
      plan_g_(plan),
      cluster_g_(cluster),
      worker_options_(options) {
  layout_ = LayoutOf(plan_g_, cluster_g_, first_step);  // generation 0's plan, checked as RunLocally checks it
  for (const auto& k : options.kills) {                 // a fault for a process that never runs would never fire
    if (k.process >= layout_.processes) {
      throw Error(fmt::format("{} {}:{}:{}: the run has {} processes; valid: a process in 0..{}",
                              k.hang ? "--hang" : "--kill", k.process, k.step, k.after_actions, layout_.processes,
                              layout_.processes - 1));
    }
  }
  port_ = options.port > 0 ? options.port : FreePort();
  char dir_template[] = "/tmp/loom-run-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) throw Error("runtime: cannot create a run directory under /tmp");
  run_dir_ = dir_template;
  checkpoint_root_ = options.checkpoint_root.empty() ? run_dir_ + "/checkpoint" : options.checkpoint_root;
  worker_options_.local_processes = 1;
  loss_.assign(options.steps, 0.0);
  loss_reports_.assign(options.steps, 0);
  out_.first_step = first_step;
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &previous_sigpipe_);  // a dead worker's control pipe fails the write, not the launcher
  try {
    StartStore();
  } catch (...) {
    sigaction(SIGPIPE, &previous_sigpipe_, nullptr);
    throw;
  }
}

GenerationController::~GenerationController() {
  StopEverything();
  try {
    DropUnfinishedSave();
  } catch (...) {  // a destructor does not throw; the folder is left for the user
  }
}

ProcessLayout GenerationController::LayoutOf(const Plan& plan, const Cluster& cluster, int step) const {
  return LayoutProcesses(CompileForRuntime(model_, cluster, workload_, plan, DrawBatch(workload_, step)));
}

// The store, in a process of its own. It says "ok" once it serves, or why it
// cannot (an address it cannot listen on), before any worker starts: a worker
// would only see that nothing answers, after its whole timeout.
void GenerationController::StartStore() {
  int store_pipe[2], store_ready[2];
  if (pipe(store_pipe) != 0 || pipe(store_ready) != 0) {
    throw Error("runtime: cannot create a pipe for the store process");
  }
  const pid_t launcher = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw Error(fmt::format("runtime: cannot start the store process: {}", std::strerror(errno)));
  if (pid == 0) {
    DieWithParent(launcher);
    close(store_pipe[1]);
    close(store_ready[0]);
    try {
      auto store = MakeStore(options_.master_addr, 0, 0, port_, options_.timeout_s);
      WriteLine(store_ready[1], "ok");
      close(store_ready[1]);
      char c;
      while (read(store_pipe[0], &c, 1) > 0) {
      }
    } catch (const std::exception& e) {
      WriteLine(store_ready[1], e.what());
      _exit(5);
    }
    _exit(0);
  }
  close(store_pipe[0]);
  close(store_ready[1]);
  std::string said;
  char c;
  while (read(store_ready[0], &c, 1) == 1 && c != '\n') said += c;
  close(store_ready[0]);
  if (said != "ok") {
    close(store_pipe[1]);
    waitpid(pid, nullptr, 0);
    throw Error("runtime: the store process cannot serve: " + (said.empty() ? std::string("it died") : said));
  }
  store_pipe_ = store_pipe[1];
  store_pid_ = pid;
}

void GenerationController::Spawn(int node, int local, int rank, int world, int step, bool restores) {
  FtWorker w;
  w.birth = static_cast<int>(workers_.size());
  w.node = node;
  w.local = local;
  int report[2], control[2];
  if (pipe(report) != 0 || pipe(control) != 0) throw Error("runtime: cannot create a worker's pipes");
  const pid_t launcher = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw Error(fmt::format("runtime: cannot start a worker: {}", std::strerror(errno)));
  if (pid == 0) {
    DieWithParent(launcher);
    close(report[0]);
    close(control[1]);
    close(store_pipe_);
    for (const FtWorker& o : workers_) {
      if (o.report_fd >= 0) close(o.report_fd);
      if (o.control_fd >= 0) close(o.control_fd);
    }
    const std::vector<std::optional<IterationSchedule>> no_schedules;
    WorkerSpec spec{&model_,         &cluster_g_, &workload_, &plan_g_, generation_ == 0 ? &schedules_ : &no_schedules,
                    worker_options_, rank,        world,      port_};
    spec.control_fd = control[0];
    spec.birth = w.birth;
    spec.generation = generation_;
    spec.first_step = step;
    spec.restores = restores;
    _exit(RunWorker(spec, report[1]));
  }
  close(report[1]);
  close(control[0]);
  w.pid = pid;
  w.report_fd = report[0];
  w.control_fd = control[1];
  w.member = true;
  w.rank = rank;
  w.done = step - 1;
  w.last_heard = Now();
  w.step_s.assign(options_.steps, 0.0);
  workers_.push_back(std::move(w));
}

void GenerationController::Send(FtWorker& w, const ControlCommand& c) {
  if (w.control_fd >= 0) WriteLine(w.control_fd, FormatCommand(c));
}

bool GenerationController::Reap(FtWorker& w, bool block) {
  if (w.reaped) return true;
  const pid_t got = waitpid(w.pid, &w.status, block ? 0 : WNOHANG);
  if (got == w.pid) w.reaped = true;
  return w.reaped;
}

void GenerationController::StopEverything() {
  for (FtWorker& w : workers_) {
    if (!w.reaped) {
      kill(w.pid, SIGKILL);
      Reap(w, true);
    }
    if (w.report_fd >= 0) close(w.report_fd);
    if (w.control_fd >= 0) close(w.control_fd);
    w.report_fd = w.control_fd = -1;
  }
  if (store_pid_ > 0) {
    close(store_pipe_);
    int status = 0;
    waitpid(store_pid_, &status, 0);
    store_pid_ = -1;
    sigaction(SIGPIPE, &previous_sigpipe_, nullptr);
  }
}

void GenerationController::CheckStore() {
  if (store_pid_ <= 0) return;
  int status = 0;
  if (waitpid(store_pid_, &status, WNOHANG) != store_pid_) return;
  throw Error(fmt::format(
      "run failed: the run's store process {} (every worker's rendezvous, serving {}:{}); the workers' errors that "
      "follow (a broken pipe, a refused connection) are its consequence, not their nodes' failures",
      DescribeExit(status), options_.master_addr, port_));
}

void GenerationController::PassOnSignal(int signal) {
  std::vector<pid_t> pids;
  for (const FtWorker& w : workers_) pids.push_back(w.reaped ? -1 : w.pid);
  StopProcesses(pids, signal, kSignalGrace_s);
  for (FtWorker& w : workers_) w.reaped = true;  // StopProcesses reaped them
  throw Interrupted(signal);                     // the destructor stops the store and drops an unfinished checkpoint
}

// A save the run does not complete is removed.
void GenerationController::DropUnfinishedSave() {
  if (saving_staging_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(saving_staging_, ec);
  saving_staging_.clear();
  saving_step_ = -1;
}

void GenerationController::Drain(FtWorker& w) {
  if (w.report_fd < 0) return;
  char buf[8192];
  ssize_t n;
  while ((n = read(w.report_fd, buf, sizeof(buf))) > 0) w.buffer.append(buf, static_cast<size_t>(n));
  std::istringstream lines(w.buffer);
  std::string line;
  while (std::getline(lines, line)) {
    const WorkerMessage message = Decode(line);
    if (const auto* saved = std::get_if<report::Saved>(&message); saved && saved->step == saving_step_) {
      saved_by_.insert(w.birth);
      if (saved->has_loss_scale) saving_loss_scale_ = *saved;
    }
  }
  w.buffer.clear();
}

weights::RunCheckpointManifest GenerationController::Manifest(int steps_done, const std::string& outcome) const {
  weights::RunCheckpointManifest m;
  m.steps_done = steps_done;
  m.model = model_.name;
  m.seed = workload_.seed;
  m.global_batch = workload_.global_batch;
  m.model_identity = ModelIdentity(model_);
  m.data_stream = options_.data_stream;
  m.plan = generation_ == 0 ? options_.plan_label
                            : fmt::format("generation {} of a fault-tolerant run: {} on {} node(s)", generation_,
                                          plan_g_.strategy, cluster_g_.nodes);
  if (!outcome.empty()) m.plan += " (" + outcome + ")";
  return m;
}

// Once every member said it wrote its part: the manifest, the rename into
// place and `latest` (weights/run_checkpoint.h CommitRunCheckpoint).
void GenerationController::CompleteCheckpoint() {
  if (saving_step_ < 0) return;
  for (const auto& [birth, rank] : saving_members_) {
    if (!saved_by_.count(birth)) return;
  }
  weights::RunCheckpointManifest m = Manifest(saving_step_, "");
  for (const auto& [birth, rank] : saving_members_) m.parts.push_back(weights::PartFileName(rank));
  if (saving_loss_scale_) {
    m.has_loss_scale = true;
    m.loss_scale = saving_loss_scale_->loss_scale;
    m.growth_tracker = saving_loss_scale_->growth_tracker;
    m.hysteresis_tracker = saving_loss_scale_->hysteresis_tracker;
  }
  std::sort(m.parts.begin(), m.parts.end());
  weights::CommitRunCheckpoint(saving_staging_, checkpoint_root_, m, options_.keep_checkpoints);
  last_checkpoint_ = checkpoint_root_ + "/" + weights::StepFolderName(saving_step_);
  last_checkpoint_step_ = saving_step_;
  saving_step_ = -1;
  saving_staging_.clear();
}

bool GenerationController::SurvivorsCanCopy(const Plan& to) const {
  if (pending_event_ >= 0) return false;  // a generation not ready yet: its fresh workers hold nothing
  if (!WhyNoWholeLayers(model_, plan_g_, workload_.precision).empty() ||
      !WhyNoWholeLayers(model_, to, workload_.precision).empty()) {
    return false;
  }
  const ExecutionPlan exec =
      CompileForRuntime(model_, cluster_g_, workload_, plan_g_, DrawBatch(workload_, committed_));
  std::set<std::string> held;  // "{module}_{layer}" some survivor holds
  for (const FtWorker& w : workers_) {
    if (!w.member || !w.Open() || w.reaped || w.dismissed) continue;
    const ProcessPlace place = PlaceProcess(exec, w.rank);
    for (int v = 0; v < place.stages(); ++v) {
      if (!place.IsLocal(v)) continue;
      for (const LayerRange& range : exec.stages[v].layers) {
        for (int l = range.begin; l < range.end; ++l) held.insert(fmt::format("{}_{}", range.module, l));
      }
    }
  }
  return UnlistedTrainableLayers(model_, std::vector<std::string>(held.begin(), held.end())).empty();
}

// After failures: a save in progress that every failed member had written
// its part of is finished by the survivors (they write theirs whatever
// command comes next), so that the recovery or the stop can use it; one that
// a failed member had not written cannot complete.
void GenerationController::FinishSaveOrDrop() {
  if (saving_step_ < 0) return;
  auto alive = [&](int birth) {
    const FtWorker& w = workers_.at(birth);
    return w.member && w.Open() && !w.reaped;
  };
  for (const auto& [birth, rank] : saving_members_) {
    if (!saved_by_.count(birth) && !alive(birth)) {
      DropUnfinishedSave();
      return;
    }
  }
  const double deadline = Now() + options_.timeout_s;
  while (saving_step_ >= 0 && Now() < deadline) {
    ReadWorkers();
    CompleteCheckpoint();
    for (const auto& [birth, rank] : saving_members_) {
      if (saving_step_ >= 0 && !saved_by_.count(birth) && !alive(birth)) {  // a survivor died too
        DropUnfinishedSave();
        return;
      }
    }
  }
  DropUnfinishedSave();  // not finished within the timeout (nothing to drop when it was)
}

void GenerationController::RollBack(int step) {
  DropUnfinishedSave();
  for (int s = step; s < options_.steps; ++s) {
    loss_[s] = 0;
    loss_reports_[s] = 0;
  }
  committed_ = step;
}

void GenerationController::Reconfigure(const Replanned& r, const std::string& kind, const std::vector<int>& nodes,
                                       double detect_s, double detected_at) {
  // The survivors' copy where it can be made, else every worker restores the
  // last checkpoint this run saved (or resumed from, or its initial state).
  const bool copy = SurvivorsCanCopy(r.plan);
  const int interrupted = committed_;
  const std::string restore_from = last_checkpoint_.empty() ? options_.resume_checkpoint : last_checkpoint_;
  if (!copy) RollBack(last_checkpoint_.empty() ? first_step_ : last_checkpoint_step_);
  worker_options_.resume_checkpoint = restore_from;  // for workers launched now
  ++generation_;
  cluster_g_ = cluster_;
  cluster_g_.nodes = static_cast<int>(r.nodes.size());
  plan_g_ = r.plan;
  layout_ = LayoutOf(plan_g_, cluster_g_, committed_);
  const std::string path = fmt::format("{}/generation-{}.json", run_dir_, generation_);
  {
    std::ofstream f(path);
    f << PlanToJson(plan_g_).dump();
    if (!f) throw Error(fmt::format("runtime: cannot write {}", path));
  }
  for (FtWorker& w : workers_) w.member = false;
  std::vector<std::pair<int, int>> fresh;  // (rank, node index) of processes nobody runs yet
  for (int p = 0; p < layout_.processes; ++p) {
    const int node = r.nodes.at(p / gpn_), local = p % gpn_;
    auto it = std::find_if(workers_.begin(), workers_.end(), [&](const FtWorker& w) {
      return w.Open() && !w.reaped && !w.dismissed && w.node == node && w.local == local;
    });
    if (it == workers_.end()) {
      fresh.push_back({p, node});
      continue;
    }
    it->member = true;
    it->rank = p;
    it->done = committed_ - 1;
    it->ready = false;
    ControlCommand c;
    c.kind = ControlCommand::Kind::kGeneration;
    c.generation = generation_;
    c.step = committed_;
    c.rank = p;
    c.world = layout_.processes;
    c.nodes = cluster_g_.nodes;
    c.path = path;
    c.restore = !copy;
    c.restore_from = restore_from;
    Send(*it, c);
  }
  for (FtWorker& w : workers_) {  // alive but left out: nodes no pipeline takes
    if (!w.member && w.Open() && !w.reaped && !w.dismissed) {
      Send(w, ControlCommand{ControlCommand::Kind::kExit});
      w.dismissed = true;
    }
  }
  for (const auto& [p, node] : fresh) Spawn(node, p % gpn_, p, layout_.processes, committed_, !copy);
  RunResult::NodeEvent e;
  e.step = committed_;
  if (!copy) {
    e.restored_from = restore_from.empty() ? "the start" : restore_from;
    e.replayed_steps = interrupted - committed_;
  }
  e.kind = kind;
  e.nodes = nodes;
  e.outcome = r.outcome;
  e.detect_s = detect_s;
  e.processes = layout_.processes;
  e.lost_s = kind == "failure" ? detected_at - step_started_ : 0;
  out_.events.push_back(e);
  pending_event_ = static_cast<int>(out_.events.size()) - 1;
  event_began_ = detected_at;
}

double GenerationController::ReadWorkers() {
  std::vector<pollfd> pfds;
  std::vector<FtWorker*> who;
  for (FtWorker& w : workers_) {
    if (w.Open()) {
      pfds.push_back({w.report_fd, POLLIN, 0});
      who.push_back(&w);
    }
  }
  if (!pfds.empty()) poll(pfds.data(), pfds.size(), 20);
  const double now = Now();
  for (size_t i = 0; i < pfds.size(); ++i) {
    if (!(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    FtWorker& w = *who[i];
    char buf[8192];
    const ssize_t n = read(w.report_fd, buf, sizeof(buf));
    if (n <= 0) {
      close(w.report_fd);
      w.report_fd = -1;
      if (w.control_fd >= 0) close(w.control_fd);
      w.control_fd = -1;
      Reap(w, true);
      continue;
    }
    w.last_heard = now;
    w.buffer.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = w.buffer.find('\n')) != std::string::npos) {
      const std::string line = w.buffer.substr(0, nl);
      w.buffer.erase(0, nl + 1);
      Handle(w, line);
    }
  }
  return now;
}

void GenerationController::Handle(FtWorker& w, const std::string& line) {
  const WorkerMessage message = Decode(line);
  if (std::holds_alternative<report::Heartbeat>(message) || std::holds_alternative<report::Stopped>(message)) return;
  if (const auto* m = std::get_if<report::Done>(&message)) {
    if (m->generation == generation_ && w.member) w.done = std::max(w.done, m->step);
  } else if (const auto* m = std::get_if<report::Ready>(&message)) {
    if (m->generation == generation_ && w.member) {
      w.ready = true;
      if (pending_event_ >= 0) out_.events[pending_event_].copied_bytes += m->received_bytes;
    }
  } else if (const auto* m = std::get_if<report::Saved>(&message)) {
    if (m->step == saving_step_) {
      saved_by_.insert(w.birth);
      if (m->has_loss_scale) saving_loss_scale_ = *m;
    }
  } else if (const auto* m = std::get_if<report::Dying>(&message)) {
    w.dying_at = m->clock_s;
  } else if (const auto* m = std::get_if<report::Loss>(&message)) {  // reported once its step committed
    if (m->step >= committed_) return;  // a step a rollback undid (RollBack): it is run, and reported, again
    loss_.at(m->step) += m->value;
    ++loss_reports_.at(m->step);
    // A diverged run stops at once (the controller's end stops every worker).
    if (const std::string why = Divergence(loss_, loss_reports_, {}); !why.empty()) throw Error(why);
  } else if (const auto* m = std::get_if<report::Metrics>(&message)) {  // reported once its step committed
    // Every worker of a fault-tolerant run is its node's first: process 0's speaks for the run.
    if (options_.on_step && w.member && w.rank == 0 && m->step > reported_step_ && m->step < committed_) {
      reported_step_ = m->step;
      options_.on_step(
          StepProgress{m->step, m->loss, m->grad_norm, m->lr, m->skipped, m->seconds, m->data_wait_s, m->data_load_s});
    }
    if (w.member) w.lines.push_back(line);
  } else if (const auto* m = std::get_if<report::StepTime>(&message)) {
    w.step_s.at(m->step) = m->seconds;
  } else if (const auto* m = std::get_if<report::Failure>(&message)) {
    w.error = m->text;
  } else if (w.member) {
    w.lines.push_back(line);
  }
}

std::vector<FtWorker*> GenerationController::FailedMembers(double now) {
  std::vector<FtWorker*> failed;
  for (FtWorker& w : workers_) {
    if (!w.member) continue;
    if (!w.Open()) {
      if (finishing_ && w.reaped && WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0) continue;
      failed.push_back(&w);
    } else if (now - w.last_heard > options_.heartbeat_timeout_s) {
      kill(w.pid, SIGKILL);
      failed.push_back(&w);
    }
  }
  return failed;
}

bool GenerationController::AllMembersExited() const {
  for (const FtWorker& w : workers_) {
    if (w.member && w.Open()) return false;
  }
  return true;
}

void GenerationController::RecoverFrom(std::vector<FtWorker*> failed, double now) {
  // A node fails as a whole, and failures close together are one event: wait
  // a moment for the others, then stop the nodes' other workers.
  const double detected_at = now;
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CheckStore();  // the workers' errors may only be the store's death seen from their side
  for (FtWorker& w : workers_) {
    if (w.member && std::find(failed.begin(), failed.end(), &w) == failed.end() && Reap(w, false)) {
      failed.push_back(&w);
    }
  }
  std::set<int> nodes;
  for (FtWorker* w : failed) nodes.insert(w->node);
  for (FtWorker& w : workers_) {
    if (w.member && nodes.count(w.node) && std::find(failed.begin(), failed.end(), &w) == failed.end()) {
      kill(w.pid, SIGKILL);
      failed.push_back(&w);
    }
  }
  std::string why;
  double detect_s = 0;
  bool bug = false;  // a worker that reported an error failed, not its node
  for (FtWorker* w : failed) {
    const bool silent = w->Open() && !w->reaped;
    if (!w->reaped) kill(w->pid, SIGKILL);
    Reap(*w, true);
    if (silent) {
      why += fmt::format("\n  - process {} (node {}, pid {}) sent no heartbeat for over {:.1f} s", w->birth, w->node,
                         w->pid, options_.heartbeat_timeout_s);
    } else {
      why += fmt::format("\n  - process {} (node {}, pid {}) {}{}", w->birth, w->node, w->pid, DescribeExit(w->status),
                         w->error.empty() ? "" : ": " + w->error);
    }
    bug = bug || (!w->error.empty() && WIFEXITED(w->status));
    if (w->dying_at > 0) detect_s = std::max(detect_s, detected_at - w->dying_at);
    Drain(*w);
    if (w->report_fd >= 0) close(w->report_fd);
    if (w->control_fd >= 0) close(w->control_fd);
    w->report_fd = w->control_fd = -1;
    w->member = false;
  }
  FinishSaveOrDrop();
  if (finishing_ || !replanner_ || bug) throw Error("run failed:" + why);
  for (int n : nodes) down_.insert(n);
  const std::vector<int> lost(nodes.begin(), nodes.end());
  // Nodes waiting to join (for their save) are in the replanner's nodes
  // already: they join with this re-plan, as fresh workers.
  joining_.reset();
  const Replanned r = replanner_(lost, {});
  if (!r.recovered) StopWithCheckpoint(r, why);
  Reconfigure(r, "failure", lost, detect_s, detected_at);
}

// Cannot go on: the survivors write what they hold as of the last committed
// step, each its part of a training checkpoint (every layer it holds, whole),
// which the launcher commits once every trainable layer is in some part.
void GenerationController::StopWithCheckpoint(const Replanned& r, const std::string& why) {
  const std::string& dir = checkpoint_root_;
  const std::string resume = fmt::format("`loom run --resume {}` goes on from there", dir);
  std::string last;  // the checkpoint to go on from, if any
  if (!last_checkpoint_.empty()) {
    last =
        fmt::format("the last complete checkpoint, after {} step(s), is {}: `loom run --resume {}` goes on from there",
                    last_checkpoint_step_, last_checkpoint_, last_checkpoint_);
  } else if (!options_.resume_checkpoint.empty()) {
    last = fmt::format(
        "no checkpoint was taken since the one this run resumed from, after {} step(s): `loom run --resume {}` goes "
        "on from there",
        first_step_, options_.resume_checkpoint);
  } else {
    last = "no complete checkpoint was taken (--checkpoint-every K takes one every K steps)";
  }
  // A plan whose processes hold slices or shards: what the survivors hold is no whole state.
  const std::string sliced = WhyNoWholeLayers(model_, plan_g_, workload_.precision);
  if (!sliced.empty() && last_checkpoint_step_ != committed_) {
    throw Error(fmt::format("{}:{}\nthe survivors cannot save the state after {} step(s) ({}); {}", r.outcome, why,
                            committed_, sliced, last));
  }
  if (last_checkpoint_step_ == committed_) {  // a periodic save holds that state already
    throw Error(fmt::format("{}:{}\nthe state after {} step(s) is saved in {}; {}", r.outcome, why, committed_,
                            last_checkpoint_, resume));
  }
  DropUnfinishedSave();
  const std::string staging = weights::StageRunCheckpoint(dir, committed_);  // this save's files only
  std::vector<FtWorker*> writers;
  for (FtWorker& w : workers_) {
    if (!w.member || !w.Open()) continue;
    Send(w, ControlCommand{ControlCommand::Kind::kStop, committed_, 0, 0, 0, 0, staging});
    writers.push_back(&w);
  }
  const double deadline = Now() + options_.timeout_s + options_.heartbeat_timeout_s;
  std::string failures;
  for (FtWorker* w : writers) {
    while (!Reap(*w, false) && Now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!w->reaped || !WIFEXITED(w->status) || WEXITSTATUS(w->status) != 0) {
      failures += fmt::format(" process {} did not write its part ({}).", w->birth,
                              w->reaped ? DescribeExit(w->status) : "still running at the deadline");
    }
    // One still writing is stopped before the staging folder is read, so
    // that no file lands there after the manifest is made.
    if (!w->reaped) {
      kill(w->pid, SIGKILL);
      Reap(*w, true);
    }
    Drain(*w);
  }
  weights::RunCheckpointManifest m = Manifest(committed_, r.outcome);
  std::set<std::string> layers;  // "{module}_{layer}" of every tensor some part holds
  for (const auto& e : std::filesystem::directory_iterator(staging)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("part-", 0) != 0 || e.path().extension() != ".safetensors") continue;
    m.parts.push_back(name);
    const weights::SafetensorsFile part(e.path().string());
    for (const auto& t : part.layout().tensors) {
      layers.insert(t.name.substr(0, t.name.find('.')));
    }
  }
  std::sort(m.parts.begin(), m.parts.end());
  // Every trainable layer must have come from some survivor; when all holders
  // of a layer failed at once, only a periodic checkpoint helps.
  const std::vector<std::string> missing =
      UnlistedTrainableLayers(model_, std::vector<std::string>(layers.begin(), layers.end()));
  if (!missing.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(staging, ec);  // the folder's earlier checkpoints stay as they were
    throw Error(fmt::format("{}:{}\nno survivor holds layer(s) {}: their state was lost with the failed nodes{}; {}",
                            r.outcome, why, fmt::join(missing, ", "),
                            failures.empty() ? "" : " (or not written:" + failures + ")", last));
  }
  try {
    weights::CommitRunCheckpoint(staging, dir, m, options_.keep_checkpoints);
  } catch (const Error& e) {
    throw Error(
        fmt::format("{}:{}\nthe state after {} step(s) could not be committed to {}: {}; the parts written "
                    "are in {}{}",
                    r.outcome, why, committed_, dir, e.what(), staging, failures));
  }
  throw Error(fmt::format("{}:{}\nthe state after {} step(s) is saved in {}/{} ({} parts){}; {}", r.outcome, why,
                          committed_, dir, weights::StepFolderName(committed_), m.parts.size(), failures, resume));
}

void GenerationController::Advance(double now) {
  bool all_done = true, all_ready = true;
  for (const FtWorker& w : workers_) {
    if (!w.member) continue;
    all_done = all_done && w.done >= committed_;
    all_ready = all_ready && w.ready;
  }
  if (pending_event_ >= 0 && all_ready) {
    RunResult::NodeEvent& e = out_.events[pending_event_];
    e.recover_s = now - event_began_;
    if (e.kind == "failure") e.lost_s += e.recover_s;
    pending_event_ = -1;
  }
  if (!all_done) {
    if (now - step_started_ > options_.timeout_s + 10) {
      throw Error(
          fmt::format("run failed: no step committed for {:.0f} s (step {}), though every worker sends "
                      "heartbeats",
                      now - step_started_, committed_));
    }
    return;
  }
  ++committed_;
  step_started_ = now;
  std::vector<int> back;  // nodes that come back before this step
  for (const auto& j : options_.rejoins) {
    if (j.step == committed_ && down_.count(j.node) && std::find(back.begin(), back.end(), j.node) == back.end()) {
      back.push_back(j.node);
    }
  }
  if (committed_ < options_.steps && !back.empty() && replanner_) {
    for (int n : back) down_.erase(n);
    Replanned r = replanner_({}, back);
    if (!r.recovered) {
      throw Error(fmt::format("run failed: re-planning with node(s) {} back: {}", fmt::join(back, ", "), r.outcome));
    }
    joining_ = Joining{std::move(r), back};
  }
  // Nodes join now where the survivors can hand their layers over to the new
  // plan, or the state of this step is saved already; else once the save this
  // step starts with is complete (Run), so that the join restores it and no
  // committed step is run again.
  if (joining_ && (SurvivorsCanCopy(joining_->replanned.plan) || last_checkpoint_step_ == committed_)) {
    Join(now);
    return;
  }
  finishing_ = committed_ == options_.steps;
  ControlCommand go{ControlCommand::Kind::kGo, committed_};
  // Every --checkpoint-every steps, with --checkpoint-dir at the end, and before a join.
  const bool periodic = options_.checkpoint_every > 0 && committed_ % options_.checkpoint_every == 0;
  const bool at_end = finishing_ && !options_.checkpoint_root.empty();
  if ((periodic || at_end || joining_) && committed_ > first_step_) {
    DropUnfinishedSave();  // a save a failure left incomplete
    saving_staging_ = weights::StageRunCheckpoint(checkpoint_root_, committed_);
    go.path = saving_staging_;
    saving_step_ = committed_;
    saved_by_.clear();
    saving_loss_scale_.reset();
    saving_members_.clear();
    for (const FtWorker& w : workers_) {
      if (w.member) saving_members_[w.birth] = w.rank;
    }
  }
  for (FtWorker& w : workers_) {
    if (w.member) Send(w, go);
  }
}

void GenerationController::Join(double now) {
  const Joining j = std::move(*joining_);
  joining_.reset();
  Reconfigure(j.replanned, "join", j.nodes, 0, now);
}

RunResult GenerationController::Run() {
  for (int p = 0; p < layout_.processes; ++p) Spawn(p / gpn_, p % gpn_, p, layout_.processes, first_step_, true);
  worker_options_.resume_checkpoint.clear();  // later workers receive their layers from the survivors
  committed_ = first_step_;
  step_started_ = Now();
  while (true) {
    const double now = ReadWorkers();
    if (const int s = signals_.Received()) PassOnSignal(s);
    CheckStore();
    // A periodic checkpoint is complete once every worker wrote its layers
    // (checked first: a worker may die right after saying so).
    CompleteCheckpoint();
    if (joining_ && last_checkpoint_step_ == committed_ && !finishing_) Join(now);  // its save is complete
    std::vector<FtWorker*> failed = FailedMembers(now);
    if (finishing_ && failed.empty() && AllMembersExited()) {
      if (saving_step_ >= 0) {
        throw Error(fmt::format("run failed: the workers ended without writing the checkpoint of step {} in {}",
                                saving_step_, checkpoint_root_));
      }
      break;
    }
    if (!failed.empty()) {
      RecoverFrom(std::move(failed), now);
    } else if (!finishing_) {
      Advance(now);
    }
  }
  // The run's directory (generation plans, checkpoints without --checkpoint-dir)
  // is kept when the run fails: its message may name a checkpoint in it.
  std::error_code ec;
  std::filesystem::remove_all(run_dir_, ec);
  return Result();
}

// The last generation's workers hold the result.
RunResult GenerationController::Result() {
  std::vector<std::vector<std::string>> lines(layout_.processes);
  for (const FtWorker& w : workers_) {
    if (w.member) lines.at(w.rank) = w.lines;
  }
  ReadReports(lines, layout_, options_.steps, out_);
  for (int s = 0; s < options_.steps; ++s) out_.losses[s] = loss_reports_[s] > 0 ? loss_[s] : std::nan("");
  out_.step_s.clear();
  out_.measured.iteration_time_s = 0;
  for (const FtWorker& w : workers_) {
    out_.step_s.push_back(w.step_s);
    if (w.member) out_.measured.iteration_time_s = std::max(out_.measured.iteration_time_s, w.step_s.back());
  }
  out_.final_plan = plan_g_;
  out_.final_nodes = cluster_g_.nodes;
  return out_;
}

}  // namespace loom::runtime
