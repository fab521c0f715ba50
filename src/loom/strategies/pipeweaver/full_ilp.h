// The full scheduling ILP of PipeWeaver §3.1 (the formulation the paper
// rejects as too slow), solved by CBC: what the search is checked against on
// tiny instances. Variables: each stage's start s_u, the makespan C, and per
// pair of stages on one rank an order binary o_uv (u before v; o_vu = 1 - o_uv
// is antisymmetry). Constraints the paper states: precedence (s_v >= s_u +
// lat_u + transfer) and memory (activations held after each stage within the
// rank's capacity); and the ones it leaves out: disjunctive no-overlap by
// big-M (s_v >= s_u + lat_u - M (1 - o_uv) and the reverse) and transitivity
// (o_uv + o_vw - o_uw <= 1, and its mirror) for every triple on a rank.
#pragma once

#include "loom/strategies/pipeweaver/stage_flow.h"

namespace loom {

struct ExactSchedule {
  bool solved = false;    // CBC proved optimality within the time limit
  double makespan_s = 0;  // the optimum (or best found)
  double bound_s = 0;     // CBC's lower bound
  int variables = 0, rows = 0;
};

ExactSchedule SolveFullIlp(const StageFlow& flow, double time_limit_s = 60);

}  // namespace loom
