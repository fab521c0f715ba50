// `loom inspect`: a model's per-module parameters, FLOPs and intensity.
#include <CLI/CLI.hpp>

#include <iostream>
#include <string>

#include "loom/cli/command.h"
#include "loom/cli/common_flags.h"
#include "loom/report/inspect.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"

namespace loom::cli {

namespace {

class InspectCommand : public Command {
 public:
  explicit InspectCommand(CLI::App& app)
      : Command(app.add_subcommand("inspect", "per-module parameters, FLOPs and intensity")) {
    CLI::App* sub = subcommand();
    sub->add_option("model", model_, "built-in model name or YAML file")->required();
    sub->add_option("--cluster", cluster_, "adds forward time per sample on its GPU");
    sub->add_flag("--json", json_, "print JSON");
    workload_.Add(sub);
  }

  void Run() override {
    InspectOptions options;
    options.workload = workload_.Resolve();  // no model yet: overrides need --workload
    if (!cluster_.empty()) options.cluster = LoadCluster(cluster_);
    const nlohmann::json result = InspectModel(LoadModel(model_), options);
    std::cout << (json_ ? result.dump(2) + "\n" : FormatInspect(result));
  }

 private:
  std::string model_;
  std::string cluster_;
  bool json_ = false;
  WorkloadFlags workload_;
};

}  // namespace

std::unique_ptr<Command> AddInspectCommand(CLI::App& app) { return std::make_unique<InspectCommand>(app); }

}  // namespace loom::cli
