// `loom fit-sm`: the SM-sharing model fitted to measured green-context runs.
#include <CLI/CLI.hpp>

#include <iostream>
#include <string>

#include "loom/cli/command.h"
#include "loom/cost/sm_measurements.h"
#include "loom/spec/gpu.h"

namespace loom::cli {

namespace {

class FitSmCommand : public Command {
 public:
  explicit FitSmCommand(CLI::App& app)
      : Command(app.add_subcommand("fit-sm",
                                   "fit the SM-sharing model (Mosaic §3.3: SM scaling, launch floor, "
                                   "interference Eq. 8) to measured green-context runs")) {
    subcommand()
        ->add_option("measurements", dir_,
                     "folder with sm_surface_small.json, sm_scaling_large.json, "
                     "colocation_small.json, colocation_large.json")
        ->required();
    subcommand()->add_option("--gpu", gpu_, "the GPU they were measured on (its SMs and HBM bandwidth)");
  }

  void Run() override { std::cout << FitSmSharing(dir_, FindGpu(gpu_)).text; }

 private:
  std::string dir_;
  std::string gpu_ = "h100";
};

}  // namespace

std::unique_ptr<Command> AddFitSmCommand(CLI::App& app) { return std::make_unique<FitSmCommand>(app); }

}  // namespace loom::cli
