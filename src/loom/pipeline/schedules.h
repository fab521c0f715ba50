// The pipeline schedules, as generators of per-rank compute orders (with the
// point-to-point actions they imply added unless `p2p` is false: callers that
// only walk the compute order, like MMScale's GETINTERVAL, skip that cost).
// m microbatches, p ranks.
#pragma once

#include <cstdint>
#include <string>

#include "loom/pipeline/schedule.h"

namespace loom {

// The schedule a pipeline template runs. Stored in plan files by name and in
// golden tests: append, never renumber.
enum class ScheduleKind : uint8_t {
  kGpipe = 0,        // all forwards, then all backwards
  kOneFOneB = 1,     // PipeDream-flush 1F1B
  kInterleaved = 2,  // Megatron-LM interleaved 1F1B (pp x vpp stages)
  kZbH1 = 3,         // zero-bubble ZB-H1 (backward split into data and weight)
  kCustom = 4,       // every rank's order given per batch (IterationSchedule::rank_orders; PipeWeaver)
};

// "gpipe", "1f1b", "interleaved", "zb-h1", "custom".
std::string ScheduleKindName(ScheduleKind kind);
// Throws loom::Error naming `field` and listing the valid names.
ScheduleKind ParseScheduleKind(const std::string& name, const std::string& field);

// GPipe: all forwards, then all backwards. Stage 0 holds m activations.
Schedule MakeGPipe(int ranks, int microbatches, bool p2p = true);
// 1F1B (PipeDream-flush): rank r warms up with p - r - 1 forwards, then
// alternates; stage 0 holds at most p activations.
Schedule MakeOneFOneB(int ranks, int microbatches, bool p2p = true);
// Megatron-LM interleaved 1F1B with `chunks` virtual stages per rank (virtual
// stage c * p + r on rank r). REQUIRES: microbatches % ranks == 0.
Schedule MakeInterleaved(int ranks, int microbatches, int chunks, bool p2p = true);
// ZB-H1 (Qi et al. 2024): 1F1B with the backward split into data and weight
// parts; rank r defers r weight passes so they fill the drain bubble.
Schedule MakeZbH1(int ranks, int microbatches, bool p2p = true);

// By name: gpipe | 1f1b | interleaved | zb-h1. Throws loom::Error listing the
// names, or naming the violated requirement (interleaved needs m % p == 0).
Schedule MakeSchedule(const std::string& name, int ranks, int microbatches, int chunks = 1, bool p2p = true);
// The same by kind; kCustom is an error (its order comes with each batch).
Schedule MakeSchedule(ScheduleKind kind, int ranks, int microbatches, int chunks = 1, bool p2p = true);

// For the generators: `ranks` empty lists, stage v on rank v % ranks.
// Throws loom::Error when ranks or microbatches < 1.
Schedule EmptySchedule(const char* name, int ranks, int microbatches, int stages);

}  // namespace loom
