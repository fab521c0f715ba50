#include "loom/runtime/fault_tolerant_run.h"

#include <dirent.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "loom/data/sample_source.h"
#include "loom/error.h"
#include "loom/plan/plan_json.h"
#include "loom/runtime/c10d_calls.h"
#include "loom/runtime/checkpoint_dir.h"
#include "loom/runtime/report_line.h"
#include "loom/runtime/fault_tolerance.h"
#include "loom/runtime/process_layout.h"
#include "loom/runtime/run_reports.h"
#include "loom/runtime/worker.h"

namespace loom::runtime {

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One worker process, as launched; it keeps its node and GPU for life.
struct Worker {
  int birth = 0;
  int node = 0, local = 0;  // original node id, GPU index on it
  pid_t pid = -1;
  int report_fd = -1, control_fd = -1;
  std::string buffer;
  std::vector<std::string> lines;  // what it reported for the result (mem, iv, param, note)
  bool reaped = false;
  int status = 0;
  bool member = false;  // in the current generation
  bool dismissed = false;  // told to exit: its node is in no pipeline
  int rank = 0;         // its process index there
  int done = -1;        // the last step it finished there
  bool ready = false;
  double last_heard = 0;
  double dying_at = -1;  // its fault injection's report, if any
  std::string error;
  std::vector<double> step_s;
  bool Open() const { return report_fd >= 0; }
};

// The trainable layers of `model` ("{module}_{layer}") that `layers` does not
// list: frozen ones come from the seed, every other one must be saved.
std::vector<std::string> UnlistedTrainableLayers(const Model& model, const std::vector<std::string>& layers) {
  std::vector<std::string> out;
  for (const auto& mod : model.modules) {
    for (size_t l = 0; l < mod.layers.size(); ++l) {
      const std::string name = fmt::format("{}_{}", mod.name, l);
      if (!mod.layers[l].frozen && std::find(layers.begin(), layers.end(), name) == layers.end()) {
        out.push_back(name);
      }
    }
  }
  return out;
}

}  // namespace

CheckpointManifest ReadCheckpoint(const std::string& dir, const Model& model, const Workload& workload) {
  const std::string path = dir + "/checkpoint.json";
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("--resume {}: no {} (write one with a fault-tolerant run that stops)", dir, path));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: not JSON: {}", path, e.what()));
  }
  CheckpointManifest m;
  try {
    if (j.at("format").get<std::string>() != "loom-checkpoint-1") {
      throw Error(fmt::format("{}: field format is '{}'; valid: loom-checkpoint-1", path, j.at("format").dump()));
    }
    m.steps_done = j.at("steps_done").get<int>();
    m.model = j.at("model").get<std::string>();
    m.seed = j.at("seed").get<uint64_t>();
    m.layers = j.at("layers").get<std::vector<std::string>>();
    m.outcome = j.value("outcome", "");
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: {} (fields: format, steps_done, model, seed, layers)", path, e.what()));
  }
  if (m.model != model.name) {
    throw Error(fmt::format("{}: field model is {}, but the run trains {}", path, m.model, model.name));
  }
  if (m.seed != workload.seed) {
    throw Error(fmt::format("{}: field seed is {}, but the workload's seed is {} (its frozen layers and samples would "
                            "differ)",
                            path, m.seed, workload.seed));
  }
  if (m.steps_done < 0) throw Error(fmt::format("{}: field steps_done is {}; valid: >= 0", path, m.steps_done));
  // The layer files a resume reads are the ones the manifest lists, and it
  // must list every trainable layer (frozen ones come from the seed): files a
  // folder holds beside them may be another run's (checkpoint_dir.h).
  if (const auto unlisted = UnlistedTrainableLayers(model, m.layers); !unlisted.empty()) {
    throw Error(fmt::format("{}: field layers does not list {} (trainable layers of {}); the checkpoint is incomplete",
                            path, fmt::join(unlisted, ", "), model.name));
  }
  return m;
}

RunResult RunFaultTolerant(const Model& model, const Cluster& cluster, const Workload& workload, const Plan& plan,
                           const RunOptions& options, const Replanner& replanner) {
  if (options.nnodes != 1) throw Error("--fault-tolerance: runs on one machine yet (--nnodes 1)");
  if (options.device != "cpu") {
    throw Error("--fault-tolerance: runs on --device cpu yet (an NCCL communicator of a dead peer needs aborting, "
                "which is not done yet)");
  }
  if (options.checkpoint_every < 0) {
    throw Error(fmt::format("--checkpoint-every {}: valid: 0 (none) or a number of steps", options.checkpoint_every));
  }
  if (!(options.heartbeat_s > 0) || !(options.heartbeat_timeout_s > options.heartbeat_s)) {
    throw Error(fmt::format("--heartbeat-timeout {} s must exceed the heartbeat period {} s",
                            options.heartbeat_timeout_s, options.heartbeat_s));
  }
  CheckFaultTolerable(model, plan);
  int first_step = 0;
  if (!options.resume_from.empty()) {
    first_step = ReadCheckpoint(options.resume_from, model, workload).steps_done;
    if (first_step >= options.steps) {
      throw Error(fmt::format("--resume {}: the checkpoint is after step {}; --steps {} leaves nothing to run",
                              options.resume_from, first_step, options.steps));
    }
  }
  for (const auto& k : options.kills) {
    if (k.step < 0 || k.step >= options.steps || k.after_actions < 0 || k.process < 0) {
      throw Error(fmt::format("--kill {}:{}:{}: valid: a process >= 0, a step in 0..{}, actions >= 0", k.process,
                              k.step, k.after_actions, options.steps - 1));
    }
  }
  for (const auto& j : options.rejoins) {
    if (j.node < 0 || j.node >= cluster.nodes || j.step < 1 || j.step >= options.steps) {
      throw Error(fmt::format("--rejoin {}:{}: valid: a node in 0..{} and a step in 1..{}", j.node, j.step,
                              cluster.nodes - 1, options.steps - 1));
    }
  }
  const int gpn = cluster.gpus_per_node;
  // Generation 0's plan, checked as RunLocally checks it.
  Plan plan_g = plan;
  Cluster cluster_g = cluster;
  auto layout_of = [&](const Plan& p, const Cluster& c, int step) {
    return LayoutProcesses(CompileForRuntime(model, c, workload, p, DrawBatch(workload, step)));
  };
  ProcessLayout layout = layout_of(plan_g, cluster_g, first_step);
  const int port = options.port > 0 ? options.port : FreePort();
  char dir_template[] = "/tmp/loom-run-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) throw Error("runtime: cannot create a run directory under /tmp");
  const std::string run_dir = dir_template;

  struct sigaction ignore {}, previous {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &previous);  // a dead worker's control pipe fails the write, not the launcher
  // The store, in a process of its own.
  // It says "ok" once it serves, or why it cannot (an address it cannot
  // listen on), before any worker starts: a worker would only see that
  // nothing answers, after its whole timeout.
  int store_pipe[2], store_ready[2];
  if (pipe(store_pipe) != 0 || pipe(store_ready) != 0) {
    throw Error("runtime: cannot create a pipe for the store process");
  }
  const pid_t store_pid = fork();
  if (store_pid < 0) throw Error(fmt::format("runtime: cannot start the store process: {}", std::strerror(errno)));
  if (store_pid == 0) {
    close(store_pipe[1]);
    close(store_ready[0]);
    try {
      auto store = MakeStore(options.master_addr, 0, 0, port, options.timeout_s);
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
  {
    std::string said;
    char c;
    while (read(store_ready[0], &c, 1) == 1 && c != '\n') said += c;
    close(store_ready[0]);
    if (said != "ok") {
      close(store_pipe[1]);
      waitpid(store_pid, nullptr, 0);
      throw Error("runtime: the store process cannot serve: " + (said.empty() ? std::string("it died") : said));
    }
  }

  std::vector<Worker> workers;
  const std::vector<std::optional<IterationSchedule>> no_schedules;
  RunOptions worker_options = options;
  worker_options.local_processes = 1;
  int generation = 0;
  auto spawn = [&](int node, int local, int rank, int world, int step) {
    Worker w;
    w.birth = static_cast<int>(workers.size());
    w.node = node;
    w.local = local;
    int report[2], control[2];
    if (pipe(report) != 0 || pipe(control) != 0) throw Error("runtime: cannot create a worker's pipes");
    const pid_t pid = fork();
    if (pid < 0) throw Error(fmt::format("runtime: cannot start a worker: {}", std::strerror(errno)));
    if (pid == 0) {
      close(report[0]);
      close(control[1]);
      close(store_pipe[1]);
      for (const Worker& o : workers) {
        if (o.report_fd >= 0) close(o.report_fd);
        if (o.control_fd >= 0) close(o.control_fd);
      }
      WorkerSpec spec{&model, &cluster_g, &workload, &plan_g, &no_schedules, worker_options, rank, world, port};
      spec.control_fd = control[0];
      spec.birth = w.birth;
      spec.generation = generation;
      spec.first_step = step;
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
    w.step_s.assign(options.steps, 0.0);
    workers.push_back(std::move(w));
  };
  auto send = [&](Worker& w, const ControlCommand& c) {
    if (w.control_fd >= 0) WriteLine(w.control_fd, FormatCommand(c));
  };
  auto reap = [&](Worker& w, bool block) {
    if (w.reaped) return true;
    const pid_t got = waitpid(w.pid, &w.status, block ? 0 : WNOHANG);
    if (got == w.pid) w.reaped = true;
    return w.reaped;
  };
  auto kill_all = [&]() {
    for (Worker& w : workers) {
      if (!w.reaped) {
        kill(w.pid, SIGKILL);
        reap(w, true);
      }
      if (w.report_fd >= 0) close(w.report_fd);
      if (w.control_fd >= 0) close(w.control_fd);
      w.report_fd = w.control_fd = -1;
    }
    close(store_pipe[1]);
    int status = 0;
    waitpid(store_pid, &status, 0);
    sigaction(SIGPIPE, &previous, nullptr);
  };
  RunResult out;
  out.first_step = first_step;
  std::vector<double> loss(options.steps, 0.0);
  std::vector<int> loss_reports(options.steps, 0);
  // Where the workers write the periodic checkpoint being taken
  // (runtime/checkpoint_dir.h); a save the run does not complete is removed,
  // with its step-N folder when nothing else is there.
  std::string saving_staging;
  auto drop_unfinished_save = [&]() {
    if (saving_staging.empty()) return;
    DiscardStaging(saving_staging);
    rmdir(saving_staging.substr(0, saving_staging.rfind('/')).c_str());  // fails, harmlessly, unless empty
    saving_staging.clear();
  };
  try {
    for (int p = 0; p < layout.processes; ++p) {
      worker_options.resume_from = options.resume_from;
      spawn(p / gpn, p % gpn, p, layout.processes, first_step);
    }
    worker_options.resume_from.clear();  // later workers receive their layers from the survivors
    int committed = first_step;          // steps every worker finished
    bool finishing = false;
    double step_started = Now();
    int pending_event = -1;  // the event whose recovery is not complete yet
    double event_began = 0;
    std::set<int> down;  // original nodes that failed and did not come back
    // Checkpoints: where "cannot recover" writes, and the periodic ones (step-N under it).
    const std::string checkpoint_root =
        options.checkpoint_dir.empty() ? run_dir + "/checkpoint" : options.checkpoint_dir;
    int saving_step = -1;  // a periodic checkpoint being written
    std::set<int> saving_members, saved_by;  // workers (births) that write it; those done
    std::string last_checkpoint;
    int last_checkpoint_step = -1;
    // What an exited worker said last (it may have finished a periodic checkpoint).
    auto drain = [&](Worker& w) {
      if (w.report_fd < 0) return;
      char buf[8192];
      ssize_t n;
      while ((n = read(w.report_fd, buf, sizeof(buf))) > 0) w.buffer.append(buf, static_cast<size_t>(n));
      std::istringstream lines(w.buffer);
      std::string line;
      while (std::getline(lines, line)) {
        ReportLine in(line);
        if (in.kind() != "saved") continue;
        in.Int();  // generation
        if (in.Int() == saving_step) saved_by.insert(w.birth);
      }
      w.buffer.clear();
    };
    auto complete_checkpoint = [&]() {
      if (saving_step < 0 || !std::includes(saved_by.begin(), saved_by.end(), saving_members.begin(),
                                            saving_members.end())) {
        return;
      }
      const std::string dir = fmt::format("{}/step-{}", checkpoint_root, saving_step);
      CheckpointManifest m;
      m.steps_done = saving_step;
      m.model = model.name;
      m.seed = workload.seed;
      m.outcome = fmt::format("--checkpoint-every {}", options.checkpoint_every);
      CommitCheckpoint(saving_staging, dir, m);
      last_checkpoint = dir;
      last_checkpoint_step = saving_step;
      saving_step = -1;
      saving_staging.clear();
    };

    // A new generation: the plan for `r.nodes`, survivors commanded, new nodes launched.
    auto reconfigure = [&](const Replanned& r, const std::string& kind, const std::vector<int>& nodes, double detect_s,
                           double detected_at) {
      ++generation;
      cluster_g = cluster;
      cluster_g.nodes = static_cast<int>(r.nodes.size());
      plan_g = r.plan;
      layout = layout_of(plan_g, cluster_g, committed);
      const std::string path = fmt::format("{}/generation-{}.json", run_dir, generation);
      {
        std::ofstream f(path);
        f << PlanToJson(plan_g).dump();
        if (!f) throw Error(fmt::format("runtime: cannot write {}", path));
      }
      for (Worker& w : workers) w.member = false;
      std::vector<std::pair<int, int>> fresh;  // (rank, node index) of processes nobody runs yet
      for (int p = 0; p < layout.processes; ++p) {
        const int node = r.nodes.at(p / gpn), local = p % gpn;
        auto it = std::find_if(workers.begin(), workers.end(), [&](const Worker& w) {
          return w.Open() && !w.reaped && !w.dismissed && w.node == node && w.local == local;
        });
        if (it == workers.end()) {
          fresh.push_back({p, node});
          continue;
        }
        it->member = true;
        it->rank = p;
        it->done = committed - 1;
        it->ready = false;
        ControlCommand c;
        c.kind = ControlCommand::Kind::kGeneration;
        c.generation = generation;
        c.step = committed;
        c.rank = p;
        c.world = layout.processes;
        c.nodes = cluster_g.nodes;
        c.path = path;
        send(*it, c);
      }
      for (Worker& w : workers) {  // alive but left out: nodes no pipeline takes
        if (!w.member && w.Open() && !w.reaped && !w.dismissed) {
          send(w, ControlCommand{ControlCommand::Kind::kExit});
          w.dismissed = true;
        }
      }
      for (const auto& [p, node] : fresh) spawn(node, p % gpn, p, layout.processes, committed);
      RunResult::NodeEvent e;
      e.step = committed;
      e.kind = kind;
      e.nodes = nodes;
      e.outcome = r.outcome;
      e.detect_s = detect_s;
      e.processes = layout.processes;
      e.lost_s = kind == "failure" ? detected_at - step_started : 0;
      out.events.push_back(e);
      pending_event = static_cast<int>(out.events.size()) - 1;
      event_began = detected_at;
    };

    while (true) {
      std::vector<pollfd> pfds;
      std::vector<Worker*> who;
      for (Worker& w : workers) {
        if (w.Open()) {
          pfds.push_back({w.report_fd, POLLIN, 0});
          who.push_back(&w);
        }
      }
      if (!pfds.empty()) poll(pfds.data(), pfds.size(), 20);
      const double now = Now();
      for (size_t i = 0; i < pfds.size(); ++i) {
        if (!(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        Worker& w = *who[i];
        char buf[8192];
        const ssize_t n = read(w.report_fd, buf, sizeof(buf));
        if (n <= 0) {
          close(w.report_fd);
          w.report_fd = -1;
          if (w.control_fd >= 0) close(w.control_fd);
          w.control_fd = -1;
          reap(w, true);
          continue;
        }
        w.last_heard = now;
        w.buffer.append(buf, static_cast<size_t>(n));
        size_t nl;
        while ((nl = w.buffer.find('\n')) != std::string::npos) {
          const std::string line = w.buffer.substr(0, nl);
          w.buffer.erase(0, nl + 1);
          ReportLine in(line);
          const std::string& kind = in.kind();
          if (kind == "hb" || kind == "stopped") continue;
          if (kind == "done") {
            const int g = in.Int(), s = in.Int();
            if (g == generation && w.member) w.done = std::max(w.done, s);
          } else if (kind == "ready") {
            const int g = in.Int();
            in.Number();  // seconds the transfer took
            const int64_t bytes = in.Integer();
            if (g == generation && w.member) {
              w.ready = true;
              if (pending_event >= 0) out.events[pending_event].copied_bytes += bytes;
            }
          } else if (kind == "saved") {
            in.Int();  // generation
            if (in.Int() == saving_step) saved_by.insert(w.birth);
          } else if (kind == "dying") {
            const int s = in.Int();
            (void)s;
            w.dying_at = in.Number();
          } else if (kind == "loss") {  // reported once its step committed
            const int s = in.Int();
            const double v = in.Number();
            loss.at(s) += v;
            ++loss_reports.at(s);
            // A diverged run stops at once (the catch below ends every worker).
            if (const std::string why = Divergence(loss, loss_reports, {}); !why.empty()) throw Error(why);
          } else if (kind == "time") {
            const int s = in.Int();
            w.step_s.at(s) = in.Number();
          } else if (kind == "error") {
            w.error = line.substr(6);
          } else if (w.member) {
            w.lines.push_back(line);
          }
        }
      }
      // A periodic checkpoint is complete once every worker wrote its layers
      // (checked first: a worker may die right after saying so).
      complete_checkpoint();
      // Members that died (their pipe closed) or went silent.
      std::vector<Worker*> failed;
      for (Worker& w : workers) {
        if (!w.member) continue;
        if (!w.Open()) {
          if (finishing && w.reaped && WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0) continue;
          failed.push_back(&w);
        } else if (now - w.last_heard > options.heartbeat_timeout_s) {
          kill(w.pid, SIGKILL);
          failed.push_back(&w);
        }
      }
      if (finishing && failed.empty()) {
        bool all = true;
        for (const Worker& w : workers) all = all && (!w.member || !w.Open());
        if (all) break;
      }
      if (!failed.empty()) {
        // A node fails as a whole, and failures close together are one event:
        // wait a moment for the others, then stop the nodes' other workers.
        const double detected_at = now;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        for (Worker& w : workers) {
          if (w.member && std::find(failed.begin(), failed.end(), &w) == failed.end() && reap(w, false)) {
            failed.push_back(&w);
          }
        }
        std::set<int> nodes;
        for (Worker* w : failed) nodes.insert(w->node);
        for (Worker& w : workers) {
          if (w.member && nodes.count(w.node) && std::find(failed.begin(), failed.end(), &w) == failed.end()) {
            kill(w.pid, SIGKILL);
            failed.push_back(&w);
          }
        }
        std::string why;
        double detect_s = 0;
        bool bug = false;  // a worker that reported an error failed, not its node
        for (Worker* w : failed) {
          const bool silent = w->Open() && !w->reaped;
          if (!w->reaped) kill(w->pid, SIGKILL);
          reap(*w, true);
          if (silent) {
            why += fmt::format("\n  - process {} (node {}, pid {}) sent no heartbeat for over {:.1f} s", w->birth,
                               w->node, w->pid, options.heartbeat_timeout_s);
          } else {
            why += fmt::format("\n  - process {} (node {}, pid {}) {}{}", w->birth, w->node, w->pid,
                               DescribeExit(w->status), w->error.empty() ? "" : ": " + w->error);
          }
          bug = bug || (!w->error.empty() && WIFEXITED(w->status));
          if (w->dying_at > 0) detect_s = std::max(detect_s, detected_at - w->dying_at);
          drain(*w);
          if (w->report_fd >= 0) close(w->report_fd);
          if (w->control_fd >= 0) close(w->control_fd);
          w->report_fd = w->control_fd = -1;
          w->member = false;
        }
        if (finishing || !replanner || bug) throw Error("run failed:" + why);
        for (int n : nodes) down.insert(n);
        const std::vector<int> lost(nodes.begin(), nodes.end());
        const Replanned r = replanner(lost, {});
        if (!r.recovered) {
          // Cannot go on: the survivors write what they hold as of the last
          // committed step, one file per layer, then the manifest.
          const std::string& dir = checkpoint_root;
          const std::string staging = StageCheckpoint(dir);  // this save's files only (checkpoint_dir.h)
          std::vector<Worker*> writers;
          for (Worker& w : workers) {
            if (!w.member || !w.Open()) continue;
            send(w, ControlCommand{ControlCommand::Kind::kStop, committed, 0, 0, 0, 0, staging});
            writers.push_back(&w);
          }
          const double deadline = Now() + options.timeout_s + options.heartbeat_timeout_s;
          std::string failures;
          for (Worker* w : writers) {
            while (!reap(*w, false) && Now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
            if (!w->reaped || !WIFEXITED(w->status) || WEXITSTATUS(w->status) != 0) {
              failures += fmt::format(" process {} did not write its layers ({}).", w->birth,
                                      w->reaped ? DescribeExit(w->status) : "still running at the deadline");
            }
            // One still writing is stopped before the staging folder is read,
            // so that no file lands there after the manifest is made.
            if (!w->reaped) {
              kill(w->pid, SIGKILL);
              reap(*w, true);
            }
            drain(*w);
          }
          complete_checkpoint();
          CheckpointManifest m;
          m.steps_done = committed;
          m.model = model.name;
          m.seed = workload.seed;
          m.layers = LayerFiles(staging);
          m.outcome = r.outcome;
          // Every trainable layer must have come from some survivor; when all
          // holders of a layer failed at once, only a periodic checkpoint helps.
          const std::vector<std::string> missing = UnlistedTrainableLayers(model, m.layers);
          if (!missing.empty()) {
            DiscardStaging(staging);  // the folder's earlier checkpoint, if any, stays as it was
            throw Error(fmt::format(
                "{}:{}\nno survivor holds layer(s) {}: their state was lost with the failed nodes{}; {}", r.outcome,
                why, fmt::join(missing, ", "), failures.empty() ? "" : " (or not written:" + failures + ")",
                last_checkpoint.empty()
                    ? std::string("no complete checkpoint was taken (--checkpoint-every K takes one every K steps)")
                    : fmt::format("the last complete checkpoint, after {} step(s), is {}: `loom run --resume {}` goes "
                                  "on from there",
                                  last_checkpoint_step, last_checkpoint, last_checkpoint)));
          }
          try {
            CommitCheckpoint(staging, dir, m);
          } catch (const Error& e) {
            throw Error(fmt::format("{}:{}\nthe state after {} step(s) could not be committed to {}: {}; the layer "
                                    "files written are in {}, and {} holds no checkpoint to resume from{}",
                                    r.outcome, why, committed, dir, e.what(), staging, dir, failures));
          }
          throw Error(fmt::format("{}:{}\nthe state after {} step(s) is saved in {} ({} layer files){}; `loom run "
                                  "--resume {}` goes on from there",
                                  r.outcome, why, committed, dir, m.layers.size(), failures, dir));
        }
        reconfigure(r, "failure", lost, detect_s, detected_at);
        continue;
      }
      if (finishing) continue;
      bool all_done = true, all_ready = true;
      for (const Worker& w : workers) {
        if (!w.member) continue;
        all_done = all_done && w.done >= committed;
        all_ready = all_ready && w.ready;
      }
      if (pending_event >= 0 && all_ready) {
        RunResult::NodeEvent& e = out.events[pending_event];
        e.recover_s = now - event_began;
        if (e.kind == "failure") e.lost_s += e.recover_s;
        pending_event = -1;
      }
      if (!all_done) {
        if (now - step_started > options.timeout_s + 10) {
          throw Error(fmt::format("run failed: no step committed for {:.0f} s (step {}), though every worker sends "
                                  "heartbeats",
                                  now - step_started, committed));
        }
        continue;
      }
      ++committed;
      step_started = now;
      std::vector<int> back;  // nodes that come back before this step
      for (const auto& j : options.rejoins) {
        if (j.step == committed && down.count(j.node) && std::find(back.begin(), back.end(), j.node) == back.end()) {
          back.push_back(j.node);
        }
      }
      if (committed < options.steps && !back.empty() && replanner) {
        for (int n : back) down.erase(n);
        const Replanned r = replanner({}, back);
        if (!r.recovered) throw Error(fmt::format("run failed: re-planning with node(s) {} back: {}", fmt::join(back, ", "), r.outcome));
        reconfigure(r, "join", back, 0, now);
        continue;
      }
      finishing = committed == options.steps;
      ControlCommand go{ControlCommand::Kind::kGo, committed};
      if (!finishing && options.checkpoint_every > 0 && committed % options.checkpoint_every == 0 &&
          committed > first_step) {
        drop_unfinished_save();  // a save a failure left incomplete
        saving_staging = StageCheckpoint(fmt::format("{}/step-{}", checkpoint_root, committed));
        go.path = saving_staging;
        saving_step = committed;
        saved_by.clear();
        saving_members.clear();
        for (const Worker& w : workers) {
          if (w.member) saving_members.insert(w.birth);
        }
      }
      for (Worker& w : workers) {
        if (w.member) send(w, go);
      }
    }
    // The last generation's workers hold the result.
    std::vector<std::vector<std::string>> lines(layout.processes);
    for (const Worker& w : workers) {
      if (w.member) lines.at(w.rank) = w.lines;
    }
    ReadReports(lines, layout, options.steps, out);
    for (int s = 0; s < options.steps; ++s) out.losses[s] = loss_reports[s] > 0 ? loss[s] : std::nan("");
    out.step_s.clear();
    out.measured.iteration_time_s = 0;
    for (const Worker& w : workers) {
      out.step_s.push_back(w.step_s);
      if (w.member) out.measured.iteration_time_s = std::max(out.measured.iteration_time_s, w.step_s.back());
    }
    out.final_plan = plan_g;
    out.final_nodes = cluster_g.nodes;
    kill_all();
    drop_unfinished_save();
  } catch (...) {
    kill_all();
    drop_unfinished_save();
    throw;
  }
  return out;
}

}  // namespace loom::runtime
