// The launcher of a fault-tolerant run (`loom run --fault-tolerance F`, the
// protocol in runtime/fault_tolerance.h): one worker process per GPU as in
// RunLocally, plus a process serving the rendezvous store (so no worker's
// death takes it down). Steps commit in lockstep. When a worker dies (its
// report pipe closes) or falls silent (no heartbeat for
// heartbeat_timeout_s), its node is lost: the launcher stops the node's other
// workers, asks the Replanner for a plan of the nodes left, and commands the
// survivors into the next generation, which replays the interrupted step
// from the last committed state; layers nobody holds any more are copied
// from a surviving replica. A node that rejoins gets a fresh worker. When
// the Replanner cannot recover, the survivors save a training checkpoint
// (weights/run_checkpoint.h, the format every run writes) and the run ends
// with its outcome.
// Torch-free (workers are forked before any torch call).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "loom/runtime/run.h"

namespace loom::runtime {

// The trainable layers of `model` ("{module}_{layer}") that `layers` does not
// list: frozen ones come from the seed, every other one must be saved. A
// tied LM head's copy of its embedding counts as listed with the embedding
// (a checkpoint's reader falls back to it).
std::vector<std::string> UnlistedTrainableLayers(const Model& model, const std::vector<std::string>& layers);

// Checks the options and the injected faults, then runs the steps under a
// GenerationController (runtime/generation_controller.h); `schedules` are
// generation 0's per-step schedules.
RunResult RunFaultTolerant(const Model& model, const Cluster& cluster, const Workload& workload, const Plan& plan,
                           const std::vector<std::optional<IterationSchedule>>& schedules, const RunOptions& options,
                           const Replanner& replanner);

}  // namespace loom::runtime
