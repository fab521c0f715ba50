// `loom clusters`: the built-in GPUs and testbeds.
#include <CLI/CLI.hpp>

#include <iostream>

#include "loom/cli/command.h"
#include "loom/report/cluster_list.h"

namespace loom::cli {

namespace {

class ClustersCommand : public Command {
 public:
  explicit ClustersCommand(CLI::App& app)
      : Command(app.add_subcommand("clusters", "list the built-in GPUs and testbeds")) {}

  void Run() override { std::cout << FormatClusterList(); }
};

}  // namespace

std::unique_ptr<Command> AddClustersCommand(CLI::App& app) { return std::make_unique<ClustersCommand>(app); }

}  // namespace loom::cli
