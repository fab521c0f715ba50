// `loom models`: the built-in model zoo.
#include <CLI/CLI.hpp>

#include <iostream>

#include "loom/cli/command.h"
#include "loom/report/inspect.h"

namespace loom::cli {

namespace {

class ModelsCommand : public Command {
 public:
  explicit ModelsCommand(CLI::App& app) : Command(app.add_subcommand("models", "list the built-in model zoo")) {}

  void Run() override { std::cout << FormatModelList(); }
};

}  // namespace

std::unique_ptr<Command> AddModelsCommand(CLI::App& app) { return std::make_unique<ModelsCommand>(app); }

}  // namespace loom::cli
