// Megatron-LM's own argument rules, restated from its source so that every
// flag set `--export megatron` writes is checked as Megatron-LM will check
// it (NVIDIA/Megatron-LM at d98e8a64, 2026-08-22): megatron/training/
// arguments.py validate_args, megatron/core/transformer/transformer_config.py
// __post_init__ and pipeline_parallel_layer_layout.py, the microbatch
// calculator, the interleaved schedule's checks, training.py's, and the
// MIMO example's (examples/mimo/training/args.py validate_hetero_grid_args,
// pretrain_mimo.py). Each message names the file and function the rule is in.
// tests/export/megatron_rules_test.cpp shows each rule refusing what
// Megatron-LM refuses.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace loom {

// One launch: `torchrun` of `entry` on world_size GPUs with `flags` (in
// order; a flag without a value has ""), under `env`.
struct MegatronLaunch {
  std::string entry;  // pretrain_gpt.py, pretrain_vlm.py, examples/mimo/pretrain_mimo.py
  std::vector<std::pair<std::string, std::string>> flags;
  std::vector<std::pair<std::string, std::string>> env;
  int world_size = 1;
  bool blackwell = false;  // compute capability 10 or later (B200, GB200): no CUDA_DEVICE_MAX_CONNECTIONS rule

  bool Has(const std::string& flag) const;
  std::string Value(const std::string& flag) const;  // "" when absent
};

// Every rule the launch breaks, each "FILE FUNCTION: Megatron-LM's message"; empty when it passes.
std::vector<std::string> MegatronArgumentErrors(const MegatronLaunch& launch);

// The vocabulary Megatron-LM's model has for `--tokenizer-type NullTokenizer
// --vocab-size vocab_flag`: the tokenizer adds its end-of-document id
// (_NullTokenizer.vocab_size is vocab_flag + 1), and _vocab_size_with_padding
// rounds that up to a multiple of --make-vocab-size-divisible-by (default 128)
// times the tensor-parallel size (megatron/training/tokenizer/tokenizer.py).
// REQUIRES: vocab_flag >= 0, divisible_by >= 1, tp >= 1.
int64_t MegatronModelVocab(int64_t vocab_flag, int64_t divisible_by, int tp);

// The stages of a --pipeline-model-parallel-layout string, as
// PipelineParallelLayerLayout.parse_str_to_list expands them (commas
// dropped, `(...)*N` groups and `x*N` characters repeated, split on `|`,
// empty stages kept). Throws loom::Error for what it refuses.
std::vector<std::string> ParseMegatronLayout(const std::string& layout);

}  // namespace loom
