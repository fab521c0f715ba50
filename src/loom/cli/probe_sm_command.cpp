// `loom probe-sm`: green contexts measured on this GPU (CUDA builds).
#include <CLI/CLI.hpp>

#include <iostream>

#include "loom/cli/command.h"
#include "loom/cli/flag_checks.h"
#include "loom/error.h"
#include "loom/runtime/green_context.h"

namespace loom::cli {

namespace {

class ProbeSmCommand : public Command {
 public:
  explicit ProbeSmCommand(CLI::App& app)
      : Command(app.add_subcommand("probe-sm",
                                   "measure green contexts on this GPU (CUDA builds): creation "
                                   "per SM quota, launches on pre-created streams, co-located stacks")) {
    subcommand()->add_option("--repeats", repeats_, "runs per measurement (median)")->check(kPositiveInt);
  }

  void Run() override {
#ifdef LOOM_HAVE_RUNTIME
    std::cout << loom::runtime::ProbeSmPartitions(0, repeats_);
#else
    throw loom::Error("`loom probe-sm` needs the runtime (libtorch) built with CUDA");
#endif
  }

 private:
  int repeats_ = 30;
};

}  // namespace

std::unique_ptr<Command> AddProbeSmCommand(CLI::App& app) { return std::make_unique<ProbeSmCommand>(app); }

}  // namespace loom::cli
