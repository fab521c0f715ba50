#include "loom/cli/common_flags.h"

#include <cstdint>
#include <limits>
#include <utility>

#include "loom/cli/flag_checks.h"
#include "loom/error.h"

namespace loom::cli {

void WorkloadFlags::Add(CLI::App* app) {
  app->add_option("--workload", name, "built-in workload or YAML file");
  app->add_option("--global-batch", global_batch, "samples per iteration")->check(IntIn(1, 1 << 24));
  // Checked before CLI11 converts it, which would saturate 2^64 and more silently.
  app->add_option("--seed", seed, "seed of the sample draw")->check(IntIn(0, std::numeric_limits<int64_t>::max()));
  app->add_option("--seq-len", seq_len, "tokens per sample of the `text` workload")->check(kPositiveInt);
  app->add_option("--precision", precision, "bf16 | fp16 | tf32 | fp32 (default: the workload's, bf16)")
      ->check(CLI::IsMember({"bf16", "fp16", "tf32", "fp32"}));
  app->add_option("--zero-stage", zero_stage,
                  "ZeRO stage of data parallelism: 0 none, 1 optimizer state, 2 + gradients, 3 + weights (FSDP); "
                  "default: the workload's, 1")
      ->check(CLI::Range(0, 3));
}

WorkloadOverrides WorkloadFlags::Overrides() const {
  return WorkloadOverrides{global_batch, seed, seq_len, FindPrecision(precision), zero_stage};
}

std::optional<Workload> WorkloadFlags::Resolve(const Model* model) const {
  const WorkloadOverrides overrides = Overrides();
  if (name.empty() && (!overrides.any() || model == nullptr)) {
    if (overrides.any())
      throw loom::Error("--global-batch, --seed, --seq-len, --precision and --zero-stage need --workload here");
    return std::nullopt;
  }
  Workload w = name.empty() ? DefaultWorkload(*model) : LoadWorkload(name);
  return ApplyWorkloadOverrides(std::move(w), overrides);
}

Workload WorkloadFlags::ResolveOrDefault(const Model& model) const {
  return LoadWorkloadWithOverrides(model, name, Overrides());
}

void ProblemFlags::Add(CLI::App* app, bool required) {
  app->add_option("--model", model, "built-in model name or YAML file")->required(required);
  app->add_option("--cluster", cluster, "GPU:NODESxPER_NODE, testbed or YAML file")->required(required);
  app->add_option("--profile", profile, kProfileHelp);
  workload.Add(app);
}

}  // namespace loom::cli
