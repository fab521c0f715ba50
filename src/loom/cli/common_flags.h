// Flag groups several `loom` subcommands share, one struct each: the workload
// flags, and the model / cluster / cost-model flags with them ("the
// problem"). Each registers its flags on a subcommand and turns their values
// into library values (session/problem_loading.h); a subcommand whose flags
// differ in help text registers its own and reuses only what applies.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "loom/session/problem_loading.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"

namespace loom::cli {

// --profile's help, for every subcommand that prices plans.
inline constexpr const char* kProfileHelp =
    "cost model: default (the GPU's shipped measured profile, else the roofline), roofline, or a profile YAML "
    "file (docs/cost-model.md)";

// --workload, --global-batch, --seed, --seq-len, --precision.
struct WorkloadFlags {
  std::string name;  // empty: not given
  std::optional<int64_t> global_batch;
  std::optional<uint64_t> seed;
  std::optional<int64_t> seq_len;
  std::string precision;  // empty, or one of bf16 fp16 tf32 fp32 (CLI11 checks)
  std::optional<int> zero_stage;

  void Add(CLI::App* app);
  // The overrides given, in the library's terms.
  WorkloadOverrides Overrides() const;
  // The named workload, else (with `model`) the model's default one, with the
  // flags' overrides; nullopt when neither a name nor an override is given.
  // Throws loom::Error for overrides without a workload to apply them to.
  std::optional<Workload> Resolve(const Model* model = nullptr) const;
  // Resolve(&model), else the model's default workload: session/problem_loading.h's
  // LoadWorkloadWithOverrides, which the Python module calls too.
  Workload ResolveOrDefault(const Model& model) const;
};

// --model, --cluster, --profile and the workload flags, as `loom plan`,
// `simulate` and `replay` take them.
struct ProblemFlags {
  std::string model;
  std::string cluster;
  std::string profile = "default";
  WorkloadFlags workload;

  // `required`: --model and --cluster must be given (simulate --plan can take them from its file).
  void Add(CLI::App* app, bool required = true);
  // The cluster priced by --profile's cost model.
  Cluster LoadPricedCluster() const { return LoadClusterWithProfile(cluster, profile); }
};

}  // namespace loom::cli
