// The `loom` command's subcommands (docs/cli.md). Each lives in its own file,
// cli/<name>_command.cpp: it adds its CLI11 subcommand with the flags it
// reads, and runs once those are parsed. Dispatch builds them all, parses the
// command line and runs the one chosen; main (cli/main.cpp) maps what it
// throws to exit codes.
#pragma once

#include <memory>

namespace CLI {
class App;
}

namespace loom::cli {

// One subcommand: owns the variables its flags parse into (so it must stay at
// one address once its flags are added), and what it does with them.
class Command {
 public:
  explicit Command(CLI::App* subcommand) : subcommand_(subcommand) {}
  virtual ~Command() = default;
  Command(const Command&) = delete;
  Command& operator=(const Command&) = delete;

  // Does the command's work with the parsed flags, writing its output to
  // standard output. Throws loom::Error for bad input (loom exits 2).
  virtual void Run() = 0;

  // The CLI11 subcommand its flags are on (owned by the parent app).
  CLI::App* subcommand() const { return subcommand_; }

 private:
  CLI::App* const subcommand_;
};

// A command that ends with an exit code it was given rather than an error to
// print (`loom prepare` passing on its script's, which said why itself).
struct ExitStatus {
  int code = 0;
};

// Parses `argv` and runs the subcommand it names. Returns the exit code: 0
// after the command ran, CLI11's for --help and --version, 2 for flags CLI11
// rejects (after printing why). What the command throws propagates: main
// turns loom::Error into exit 2.
int Dispatch(int argc, char** argv);

// Each adds its subcommand to `app` and returns it, its flags registered.
std::unique_ptr<Command> AddModelsCommand(CLI::App& app);
std::unique_ptr<Command> AddRunCommand(CLI::App& app);
std::unique_ptr<Command> AddPrepareCommand(CLI::App& app);
std::unique_ptr<Command> AddClustersCommand(CLI::App& app);
std::unique_ptr<Command> AddProfileCommand(CLI::App& app);
std::unique_ptr<Command> AddProbeSmCommand(CLI::App& app);
std::unique_ptr<Command> AddFitSmCommand(CLI::App& app);
std::unique_ptr<Command> AddInspectCommand(CLI::App& app);
std::unique_ptr<Command> AddSimulateCommand(CLI::App& app);
std::unique_ptr<Command> AddReplayCommand(CLI::App& app);
std::unique_ptr<Command> AddPlanCommand(CLI::App& app);

}  // namespace loom::cli
