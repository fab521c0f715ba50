// A lower bound on the iteration time the simulator (sim/simulator.h) gives a
// priced execution plan, at a small fraction of a simulation's cost: what a
// search checks before simulating a candidate, to skip those that cannot beat
// the best plan it has (strategies/search/candidate_search.h, CandidateSearch).
//
// Why it is a bound: each rank runs its compute actions one after another on
// its compute stream, each starting no earlier than the previous one ends, so
// the last one ends at least their summed durations after the first starts.
// On a chain pipeline (no stage DAG), the first action, a forward of
// microbatch k at stage v, cannot start before the forwards of k at stages
// 0..v-1 ran one after another (each needs its predecessor's activation), and
// after the last action, a backward of k at v, the backwards of k at stages
// v-1..0 (their input-gradient parts, when the schedule splits them) still
// run one after another. With uniform stages and free communication this is
// 1F1B's and GPipe's (m + p - 1)(f + b) exactly. The iteration ends no earlier
// than any rank's last action (and the simulator adds only gradient sync and
// optimizer steps after it), so
//   T >= max over replicas and ranks of  head + sum of compute + tail.
// Communication, dependencies between ranks beyond those chains, and the
// gradient sync only make the simulated time longer. The sums are taken in the
// simulator's own order, so the bound holds in floating point too (tested
// against the simulator on every strategy's candidates).
#pragma once

#include "loom/pipeline/schedule.h"
#include "loom/sim/price_execution.h"

namespace loom {

// REQUIRES: costs were priced for `schedule` (PriceExecution of its plan).
double IterationLowerBound_s(const Schedule& schedule, const ExecutionCosts& costs);

// The same, and for a plan whose units take turns on shared GPU groups
// (temporal phases, plan/plan.h): the compiler's barriers put every compute
// action of a later phase's rank between an earlier phase's rank's last
// forward and first backward (per round), so ranks of different phases on one
// group never compute at once, and the iteration lasts at least, per group,
// the sum over its phases of the busiest rank's compute.
double IterationLowerBound_s(const ExecutionPlan& exec, const ExecutionCosts& costs);

}  // namespace loom
