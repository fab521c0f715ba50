// The `loom` command: parses flags and calls the library. No logic lives here
// that a library user would need (docs/cli.md lists the commands).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <iostream>
#include <optional>

#include "loom/error.h"
#include "loom/report/inspect.h"
#include "loom/report/table.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"

namespace {

struct WorkloadFlags {
  std::string name;
  std::optional<int64_t> global_batch;
  std::optional<uint64_t> seed;
  std::optional<int64_t> seq_len;

  void Add(CLI::App* app) {
    app->add_option("--workload", name, "built-in workload or YAML file");
    app->add_option("--global-batch", global_batch, "samples per iteration")->check(CLI::PositiveNumber);
    app->add_option("--seed", seed, "seed of the sample draw");
    app->add_option("--seq-len", seq_len, "tokens per sample of the `text` workload")
        ->check(CLI::PositiveNumber);
  }
  std::optional<loom::Workload> Resolve() const {
    if (name.empty()) {
      if (global_batch || seed || seq_len) {
        throw loom::Error("--global-batch, --seed and --seq-len need --workload");
      }
      return std::nullopt;
    }
    loom::Workload w = loom::LoadWorkload(name);
    if (global_batch) w.global_batch = *global_batch;
    if (seed) w.seed = *seed;
    if (seq_len) {
      if (w.source.kind != "text") {
        throw loom::Error(fmt::format("--seq-len applies to the `text` workload, not '{}'", w.name));
      }
      w.source.seq_len = *seq_len;
    }
    return w;
  }
};

std::string ClusterList() {
  loom::TextTable gpus({"gpu", "peak bf16 TFLOP/s", "HBM GB/s", "memory", "SMs", "NVLink GB/s/dir"});
  for (const auto& g : loom::BuiltinGpus()) {
    gpus.AddRow({g.name, fmt::format("{:.1f}", g.peak_flops / 1e12), fmt::format("{:.0f}", g.hbm_bytes_per_s / 1e9),
                 loom::HumanBytes(static_cast<double>(g.mem_bytes)), fmt::format("{}", g.sm_count),
                 fmt::format("{:.1f}", g.nvlink_bytes_per_s / 1e9)});
  }
  loom::TextTable beds({"cluster", "GPUs", "description"});
  for (const auto& n : loom::TestbedNames()) {
    loom::Cluster c = loom::LoadCluster(n);
    beds.AddRow({n, fmt::format("{}", c.num_gpus()), c.description});
  }
  return gpus.Render() + "\nAny GPU:NODESxPER_NODE (e.g. h800:8x8) gives that GPU's typical server.\n\n" +
         beds.Render();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Loom: plan, schedule and simulate multimodal model training on GPU clusters"};
  app.require_subcommand(1);

  app.add_subcommand("models", "list the built-in model zoo");
  app.add_subcommand("clusters", "list the built-in GPUs and testbeds");

  CLI::App* inspect = app.add_subcommand("inspect", "per-module parameters, FLOPs and intensity");
  std::string model_name;
  std::string cluster_name;
  bool json = false;
  WorkloadFlags workload;
  inspect->add_option("model", model_name, "built-in model name or YAML file")->required();
  inspect->add_option("--cluster", cluster_name, "adds forward time per sample on its GPU");
  inspect->add_flag("--json", json, "print JSON");
  workload.Add(inspect);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }

  try {
    if (app.got_subcommand("models")) {
      std::cout << loom::FormatModelList();
    } else if (app.got_subcommand("clusters")) {
      std::cout << ClusterList();
    } else if (app.got_subcommand("inspect")) {
      loom::InspectOptions options;
      options.workload = workload.Resolve();
      if (!cluster_name.empty()) {
        options.cluster = loom::LoadCluster(cluster_name);
      }
      nlohmann::json result = loom::InspectModel(loom::LoadModel(model_name), options);
      std::cout << (json ? result.dump(2) + "\n" : loom::FormatInspect(result));
    }
  } catch (const loom::Error& e) {
    std::cerr << "loom: error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
