// Cornstarch (seed 004, chapter 3): modality parallelism with
// frozen-status-aware stage balancing (§3.3.1, §3.4.1). Every encoder branch
// (encoder and projector) is a pipeline of its own on its own GPU groups, and
// the LLM's pipeline on the rest, all in the same phase: an LLM stage waits
// for every encoder's output of its microbatch (the units' brokers). Each
// pipeline's stages balance T_l = F_l + B_l with B_l frozen-aware (Eq. 3.2-3.3,
// cost/frozen.h: a frozen layer pays backward-data only when a trainable
// layer lies earlier) by the min-max partition of Eq. 3.5 (pipeline/partition.h).
//
// How many stages each module gets the thesis leaves open: Loom searches
// every branch's pp (1, 2, 4 up to its layers) and the LLM's pp, with the
// data-parallel replicas that fill the GPUs, at every TP degree of a node,
// and the simulator picks (the rule is the search; docs/strategies.md).
//
// The LLM may add token-balanced context parallelism (§3.3.2; Unit::cp_split
// balanced, priced from the batch's masks) where its longest document gives
// every CP rank at least 4096 tokens; the encoders then share each group's
// sequences instead.
//
// The released code's colocated mode (every module in one pipeline, cut by
// the same times) competes too; where no time-balanced plan fits, the
// colocated pipeline cut by parameters. Not planned: the released code's
// replicated encoder mode (every LLM stage runs every encoder, for
// cross-attention LLMs; no zoo model is one).
#pragma once

#include "loom/strategies/plan_builders.h"
#include "loom/strategies/strategy.h"

namespace loom {

// Which layouts the search tries (both by default).
struct CornstarchModes {
  bool colocated = true;
  bool modality_parallel = true;
};

// `balance`: Balance::kTime (Cornstarch) or Balance::kTimeFrozenUnaware (its
// frozen-unaware ablation, `cornstarch-unaware`).
StrategyResult CornstarchPlan(const StrategyContext& ctx, Balance balance, const std::string& name,
                              CornstarchModes modes = {});

StrategyResult CornstarchStrategy(const StrategyContext& ctx);
// The thesis' baseline Megatron*: encoders on the first stage (encoders_first.cpp).
StrategyResult EncodersFirstStrategy(const StrategyContext& ctx);
StrategyResult CornstarchUnawareStrategy(const StrategyContext& ctx);

}  // namespace loom
