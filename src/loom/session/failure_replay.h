// A training run replayed over a failure trace (Oobleck §2.7, Table 2.2 and
// 2.4): samples per second over wall-clock time and the time each failure
// costs, for three ways of surviving failures, each re-planned by Loom's
// strategies on the nodes left and timed by the simulator:
//   - oobleck: the `oobleck` strategy's plan on the surviving nodes
//     (reconfiguration keeps at least f + 1 pipelines from the templates);
//     a failure costs the interrupted iteration's progress, the detection
//     (a heartbeat interval) and copying the failed node's share of the
//     model state from replicas over its network links. Below (f + 1) n0
//     nodes it stops.
//   - varuna: a Megatron-style grid (`megatron`) re-planned on the survivors
//     ("job morphing"), a synchronous checkpoint every k iterations to remote
//     storage; a failure costs everything since the last checkpoint, a
//     restart, and loading the checkpoint.
//   - bamboo: the Megatron-style grid with redundant computation: every node
//     also runs its successor's forward (about a third of a stage's compute:
//     F ≈ B / 2) and holds its state, so a plan whose peak memory doubled
//     does not fit runs nothing; a failure costs the interrupted iteration,
//     unless the node after it in the pipeline order has failed too, which
//     needs a restart from the last checkpoint (as Varuna's).
// Throughput is samples of completed iterations: work lost to a failure is
// not counted. Constants the thesis does not give are ReplayOptions'; where
// Oobleck's artifact measured them, its values are there too.
// Varuna re-plans onto the fastest grid the survivors allow ("job morphing ...
// to achieve the best performance with the remaining resources", §2.2.2), which
// may leave nodes idle.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "loom/cost/layer_work.h"
#include "loom/session/failure_trace.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"

namespace loom {

struct ReplayOptions {
  int fault_tolerance = 1;    // oobleck's f
  int checkpoint_every = 10;  // iterations (the thesis' Varuna setting)
  // The thesis' checkpoint store: MinIO on 6 nodes, 200 Gb/s NICs each. Prices a
  // checkpoint's write and load only where no measured time is given below.
  double storage_bytes_per_s = 6 * 25e9;
  // Measured seconds, per model; < 0: derived (the checkpoint's bytes over the
  // store's bandwidth, Oobleck's heartbeat plus its state copy). Oobleck's SOSP'23
  // artifact (tools/simulator/varuna_simulator.py, branch sosp23-artifact) times
  // Varuna's synchronous checkpoint at 15.8 / 11.5 / 11.2 / 50 / 120 s and its
  // restart, the checkpoint's load included, at 55.5 / 71.5 / 67.5 / 465 / 581 s
  // (BERT-Large, GPT-2, GPT-3 Medium, 2.7B, 6.7B on 30 A40s); Oobleck's
  // reconfiguration at 2 / 2 / 3 / 6 / 10 s (oobleck_simulator.py); Bamboo's at
  // 76 / 80 / 100 / 230 / 450 s (bamboo_simulator.py).
  double checkpoint_save_s = -1;       // Varuna's synchronous write, every checkpoint_every iterations
  double checkpoint_load_s = -1;       // added to restart_s; 0 where restart_s was measured with the load in it
  double restart_s = 60;               // relaunching processes, rebuilding communicators (Loom's guess)
  double detect_s = 1;                 // a heartbeat interval
  double oobleck_recover_s = -1;       // Oobleck's reconfiguration after a failure, detection included
  double bamboo_reconfigure_s = 0;     // Bamboo's pause after a failure its redundant copy absorbed
  double redundant_compute = 1.0 / 3;  // Bamboo's successor forward, as a share of a stage's time
  // Every system's activation recomputation, pinned (StrategyContext::
  // fixed_recompute); unset: searched. The thesis' Varuna and Oobleck
  // recompute every layer (§2.7.1; the artifact wraps each in checkpoint_wrapper).
  std::optional<Recompute> recompute;
};

struct ReplaySegment {
  double start_s = 0, end_s = 0;
  int nodes = 0;
  double samples_per_s = 0;  // 0: stopped or recovering
};

struct ReplayEvent {
  double time_s = 0;
  int node = 0;
  double lost_s = 0;  // wall-clock time without progress it caused
  std::string what;
};

struct SystemReplay {
  std::string system;
  double healthy_samples_per_s = 0;  // with every node, no failure
  double mean_samples_per_s = 0;     // over the trace's duration
  std::vector<ReplaySegment> timeline;
  std::vector<ReplayEvent> events;
  std::string stopped;  // why it stopped, if it did
};

// `systems`: oobleck, varuna, bamboo. Throws loom::Error for an unknown one.
std::vector<SystemReplay> ReplayFailures(const Model& model, const Cluster& cluster, const Workload& workload,
                                         const FailureTrace& trace, const std::vector<std::string>& systems,
                                         const ReplayOptions& options);

}  // namespace loom
